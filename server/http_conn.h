/* Inside the front's HTTP server (http.h): the server, its connections and their requests,
 * shared by http.c (the listener and the connection count), http_conn.c (one connection:
 * reading, framing with http_parse, deadlines, refusals, closing) and http_response.c (the
 * request as the handler sees it, and the answer writer). Nothing else includes this. */
#ifndef HTTP_CONN_H
#define HTTP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "http.h"
#include "http_parse.h"

struct bufferevent;
struct event;
struct evbuffer_cb_entry;
struct evconnlistener;
struct sockaddr;

/* After a refusal or a closing answer went out, how long the client may keep sending before
 * the connection is closed: reading (and dropping) meanwhile keeps a close with unread input
 * from turning into a reset that could destroy the answer before the client read it. */
#define HTTP_LINGER_S 2
/* A connection whose answer the socket has not taken for this long is dropped (a client that
 * reads nothing of a whole answer; streams have --client-timeout-ms). */
#define HTTP_WRITE_TIMEOUT_S 600
/* Accepting again after an accept() error (EMFILE and the like), in ms. */
#define HTTP_ACCEPT_BACKOFF_MS 100
/* The loop-lag probe's period, in ms. */
#define HTTP_PROBE_MS 10

struct http_server {
    struct event_base *base;
    const struct kiln_config *cfg;
    struct metrics *metrics;
    http_handler cb;
    void *arg;
    struct evconnlistener *listener; /* NULL once kiln stopped listening */
    struct tls *tls;                 /* --tls-cert: connections speak TLS; NULL: plain */
    struct event *ev_resume;         /* after an accept error: try again later */
    struct event *ev_probe;          /* the loop-lag probe, while connections are open */
    uint64_t probe_due_us;
    uint32_t open, max;
    bool at_limit;    /* the listener is disabled for the limit */
    bool backing_off; /* ... or for an accept error */
    LIST_HEAD(, http_conn) conns;
};

/* Which deadline a connection's timer runs. */
enum http_deadline {
    HTTP_DL_NONE,      /* a request is being answered, or the connection is closing */
    HTTP_DL_HEADER,    /* a request's line and headers (from the accept, or its first byte) */
    HTTP_DL_BODY,      /* its body, once the headers came */
    HTTP_DL_KEEPALIVE, /* idle after an answer, until the next request's first byte */
};

struct http_conn {
    struct http_server *s;
    struct bufferevent *bev;   /* the socket's (OpenSSL's with --tls-cert) */
    int fd;
    bool tls;
    struct http_parser p;
    struct evbuffer *body;     /* the body of the request being read */
    struct http_req *req;      /* the request being answered (the socket is not read) */
    struct event *ev_next;     /* after an answer: the next request, or the close */
    struct event *ev_deadline; /* the current deadline; also the linger's end */
    enum http_deadline deadline;
    uint64_t requests;         /* requests handed to the handler so far */
    uint64_t req_start_us;     /* hist_now_us() at the current request's first byte; 0: none */
    char rid[40];              /* a refusal's X-Request-Id (access_log_make_id) */
    char addr[64];             /* the client's numeric address */
    uint16_t port;
    bool read_eof;  /* the client shut its sending side */
    bool closing;   /* no more requests: close once the output is out */
    bool lingering; /* write side shut: dropping input until the client closes */
    bool dying;     /* being closed: nothing is written any more */
    LIST_ENTRY(http_conn) link;
};

struct http_out_header {
    struct http_out_header *next;
    char *name, *value;
};

/* One per request handed to the handler; owned by its connection until answered, freed then
 * (or when the connection goes), but never before the handler's callback returned. */
struct http_req {
    struct http_conn *c;       /* NULL once answered or gone */
    enum http_method method;
    char *head;                /* a copy of the parser's header block: the strings below */
    const char *path;          /* the target's path, or NULL */
    struct http_header headers[HTTP_PARSE_MAX_HEADERS];
    unsigned n_headers;
    struct evbuffer *body;
    int minor;                 /* HTTP/1.<minor> */
    bool keep_alive;           /* the connection may carry another request after this one */
    struct http_out_header *out, **out_tail;
    char addr[64];
    uint16_t port;
    void (*close_cb)(void *arg);
    void *close_arg;
    void (*drain_cb)(void *arg, size_t unsent);
    void *drain_arg;
    struct evbuffer_cb_entry *drain_entry;
    struct event *ev_peer;     /* the client's socket readable: did it leave? */
    int status;                /* of the answer given, 0 before */
    bool started;              /* a streamed answer is open */
    bool chunked;              /* ... and its body goes in chunks */
    bool in_handler;           /* the handler's callback runs: freed once it returns */
    bool released;             /* answered or gone while in_handler */
    bool peer_probed;          /* the interim "100 Continue" probe went to the client */
};

/* http.c: a connection opened or closed (the count, the listener's pause). */
void http_server_conn_opened(struct http_server *s);
void http_server_conn_closed(struct http_server *s);

/* http_conn.c */
/* A new connection on fd (accepted). Returns 0 or -1 (fd closed). */
int http_conn_new(struct http_server *s, int fd, const struct sockaddr *sa, int salen);
/* Close c now; its request's close callback runs first. */
void http_conn_drop(struct http_conn *c);
/* c's request r was answered whole: the next one may be read (or the connection closed). */
void http_conn_answered(struct http_conn *c, struct http_req *r);
/* Write a refusal (status, an OpenAI-shaped JSON error with Connection: close), then close. */
void http_conn_refuse(struct http_conn *c, int status, const char *why);

/* http_response.c */
/* A request of c as the parser read it; NULL without memory. */
struct http_req *http_req_new(struct http_conn *c);
/* r's connection is done with it (answered or gone): free it, or mark it for the end of the
 * handler's callback. */
void http_req_release(struct http_req *r);
void http_req_free(struct http_req *r);
/* Stop watching r's socket and its output. */
void http_req_unwatch(struct http_req *r);
/* The standard reason phrase of a status. */
const char *http_reason(int status);

#endif
