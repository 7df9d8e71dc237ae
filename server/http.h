/* The front's HTTP/1.1 server: the listener on --host/--port with the front's limits (body and
 * header size, deadlines, connection count), every request handed to one callback as a
 * struct http_req, and the answer given through it: whole, or started and sent in chunks (SSE).
 * The rest of the front sees only this API; how requests are read and framed is http.c's. */
#ifndef HTTP_H
#define HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evbuffer;
struct kiln_config;
struct metrics;
struct http_server;
struct http_req;

enum http_method {
    HTTP_GET,
    HTTP_POST,
    HTTP_HEAD,
    HTTP_PUT,
    HTTP_DELETE,
    HTTP_OPTIONS,
    HTTP_TRACE,
    HTTP_CONNECT,
    HTTP_PATCH,
    HTTP_OTHER,
};

/* Called once for every request; the request is answered through one of the http_reply*
 * functions, at once or later. */
typedef void (*http_handler)(struct http_req *req, void *arg);

/* Bind and listen; *port gets the bound port (useful with --port 0). At --max-connections
 * (config_max_connections of the fd limit) the listener pauses. Returns NULL with a message
 * logged. */
struct http_server *http_create(struct event_base *base, const struct kiln_config *cfg,
                                struct metrics *metrics, http_handler cb, void *arg,
                                uint16_t *port);

/* Read --tls-cert and --tls-key of n again for the connections accepted from now on (a
 * renewed certificate). 0 when done or when s serves plain HTTP (TLS cannot be switched on or
 * off live: 1 then); -1 with a message in err, and the old certificate stays. */
int http_reload_tls(struct http_server *s, const struct kiln_config *n, char *err,
                    size_t errlen);

/* Close the listening sockets: new connections are refused from now on. */
void http_stop_listening(struct http_server *s);

/* Stop listening and close every connection. NULL is fine. */
void http_destroy(struct http_server *s);

/* ---- the request ---- */

enum http_method http_req_method(const struct http_req *req);

/* The path of the request target (without the query), or NULL for a target that names no
 * path ("*", an authority). A request that could not be read never reaches the handler: the
 * server refuses it itself. */
const char *http_req_path(const struct http_req *req);

/* A request header's value (names compare without case), or NULL. */
const char *http_req_header(const struct http_req *req, const char *name);

/* The request body, contiguous (empty: len 0). Valid until the answer is given. */
const char *http_req_body(struct http_req *req, size_t *len);

/* The client's address (a numeric string) and port; "?" and 0 when unknown. */
void http_req_peer(const struct http_req *req, const char **addr, uint16_t *port);

/* ---- the answer ----
 * Headers are set before the answer starts. After http_reply(), http_reply_error() or
 * http_reply_end() the request belongs to the server again: req must not be used (but for
 * http_req_status() inside the callback that got it). */

/* The status of the answer given (0 before one). Readable from the callback that got req
 * even after it answered: a request is released only after that callback returns. */
int http_req_status(const struct http_req *req);

/* Add a response header. */
void http_set_header(struct http_req *req, const char *name, const char *value);
/* Remove every response header of that name. */
void http_remove_header(struct http_req *req, const char *name);
/* A response header set so far, or NULL. */
const char *http_get_header(const struct http_req *req, const char *name);

/* Answer whole: status, reason (NULL: the standard one) and len bytes of body (copied). */
void http_reply(struct http_req *req, int status, const char *reason, const void *body,
                size_t len);
/* The same with a body that stays valid for the server's life (not copied). */
void http_reply_static(struct http_req *req, int status, const char *reason, const void *body,
                       size_t len);
/* The server's own bare answer for a status (no JSON: for when even that failed). */
void http_reply_error(struct http_req *req, int status);

/* A streamed answer: the status line and headers, then chunks (each takes all of buf's
 * bytes), then the end. While a stream is open, a client that half-closed its side (EOF) still
 * gets it; one that closed entirely is found by the writes. */
void http_reply_start(struct http_req *req, int status, const char *reason);
void http_reply_chunk(struct http_req *req, struct evbuffer *buf);
void http_reply_end(struct http_req *req);

/* ---- the connection, for answers that come later ---- */

/* cb(arg) runs once if the client leaves (closes or resets the connection, even while the
 * server is not reading it) before the answer is whole; req is gone when it returns. NULL
 * stops it. A client that only half-closed (EOF) and waits for its answer is not gone. */
void http_req_on_close(struct http_req *req, void (*cb)(void *arg), void *arg);

/* Bytes of the connection's output not yet taken by the socket. */
size_t http_req_unsent(const struct http_req *req);

/* cb(arg, unsent) runs whenever some of the connection's unsent output was written out (a
 * client that reads); NULL stops it. It may not answer or close from inside. */
void http_req_on_drain(struct http_req *req, void (*cb)(void *arg, size_t unsent), void *arg);

/* Close the connection now (a client that does not read): the close callback runs first. */
void http_req_abort(struct http_req *req);

/* Whether the client may still want the answer (a queued request whose client left is
 * dropped when the queue is full). A client at EOF may only have half-closed: it is probed
 * (an interim "100 Continue", once) and counts as gone only once its socket saw a reset. */
bool http_req_client_alive(struct http_req *req);

#endif
