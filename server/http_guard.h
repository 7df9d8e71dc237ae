/* An incremental HTTP/1.1 request-framing tracker: it follows where each request of a
 * connection starts and ends (the header block up to its empty line, then Content-Length
 * bytes or chunked framing with trailers) and says when a request goes over the front's
 * limits. It does no I/O and keeps no request bytes; it is not a parser (http_filter.c feeds
 * it and libevent parses what it lets through). Its rules follow libevent 2.1's framing so the
 * two never disagree on where a request ends; where it is stricter it refuses the request
 * (HTTP_GUARD_MALFORMED) and the connection is closed, so no byte is framed two ways. */
#ifndef HTTP_GUARD_H
#define HTTP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest chunk-size line (with its extensions) accepted. */
#define HTTP_GUARD_MAX_CHUNK_LINE 1024

enum http_guard_verdict {
    HTTP_GUARD_OK = 0,           /* keep feeding */
    HTTP_GUARD_BODY_TOO_LARGE,   /* 413: Content-Length or the chunked total over max_body */
    HTTP_GUARD_HEADERS_TOO_LARGE, /* 431: the header block (or trailers) over max_header */
    HTTP_GUARD_MALFORMED,        /* 400: framing the guard cannot follow the way libevent would */
    HTTP_GUARD_TIMEOUT,          /* 408: the request did not come in time (http_guard_timeout) */
};

enum http_guard_state {
    HTTP_GUARD_ST_HEAD,       /* in a request's header block (or before one) */
    HTTP_GUARD_ST_BODY,       /* Content-Length bytes */
    HTTP_GUARD_ST_CHUNK_LINE, /* a chunk-size line (empty lines between chunks are skipped) */
    HTTP_GUARD_ST_CHUNK_DATA,
    HTTP_GUARD_ST_TRAILER,    /* trailer lines after the last chunk, up to an empty line */
    HTTP_GUARD_ST_STOPPED,    /* a verdict was given: nothing more is consumed */
};

/* The start of the current line is kept (enough to read the names and values framing depends
 * on); longer lines are only counted. */
#define HTTP_GUARD_LINE_KEEP 96

struct http_guard {
    uint64_t max_body;   /* largest body accepted */
    uint64_t max_header; /* largest header block (request line, headers, CRLFs) */
    enum http_guard_state state;
    enum http_guard_verdict verdict;
    const char *why;     /* a static phrase naming the reason for a verdict */
    uint64_t head_len;   /* bytes of the current header block (or trailers) so far */
    uint64_t remaining;  /* body or chunk-data bytes still to come */
    uint64_t body_total; /* chunked: the sum of the chunk sizes so far */
    uint64_t requests;   /* whole requests seen */
    /* the current line */
    char line[HTTP_GUARD_LINE_KEEP];
    size_t line_len;     /* its full length so far, without the LF */
    unsigned line_no;    /* lines of the header block so far, this one excluded */
    /* what the header block said */
    bool has_body;       /* the method may carry a body (POST, PUT, PATCH) */
    bool has_cl, has_te, chunked, conn_close, has_conn;
    bool stopped_in_head; /* the verdict came inside a header block (held() still counts it) */
    uint64_t content_length;
};

/* Start tracking a connection with these limits. */
void http_guard_init(struct http_guard *g, uint64_t max_body, uint64_t max_header);

/* Consume up to n bytes of the connection's input. Returns how many were consumed: n, or
 * fewer when a verdict stops it (g->verdict is then set and stays; the byte that decided it
 * and those after it are not consumed). */
size_t http_guard_feed(struct http_guard *g, const char *p, size_t n);

/* How many of the consumed bytes belong to a header block still incomplete: the tail the
 * caller should hold back (so a request whose headers turn out too large or whose declared
 * body is too large never reaches libevent). After a verdict given inside a header block, the
 * bytes of that block consumed before it (the caller drops them). At most g->max_header. */
uint64_t http_guard_held(const struct http_guard *g);

/* The connection's deadline passed: stop with HTTP_GUARD_TIMEOUT (why names the part that
 * was late). Nothing more is consumed. */
void http_guard_timeout(struct http_guard *g, const char *why);

/* Whether some byte of a request not yet whole has been consumed. */
bool http_guard_in_request(const struct http_guard *g);

/* Whether the current request's header block is whole and its body is being read. */
bool http_guard_in_body(const struct http_guard *g);

/* The status of a verdict (413, 431, 400, 408), 0 for HTTP_GUARD_OK. */
int http_guard_status(enum http_guard_verdict v);

#endif
