/* A small blocking HTTP/1.1 client over loopback for integration tests: whole requests,
 * streamed Server-Sent Events, and raw connections for malformed input. Every read is
 * bounded by a timeout; nothing here retries. */
#ifndef HTTP_CLIENT_H
#define HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

/* The bound on each whole request of http_request(). */
#define HTTP_CLIENT_TIMEOUT_MS 30000

struct http_header {
    char *name;
    char *value;
};

struct http_response {
    int status;
    size_t n_headers;
    struct http_header *headers;
    char *body; /* NUL-terminated (the NUL is not counted in body_len) */
    size_t body_len;
};

/* Send one request to 127.0.0.1:port and read the whole response (Content-Length, chunked, or
 * until close). headers: NULL-terminated "Name: value" strings, may be NULL; Host,
 * Connection: close and, with a body, Content-Length and (unless given) Content-Type:
 * application/json are added. body: NUL-terminated or NULL. Returns the status code (resp
 * filled; free with http_response_free) or -errno (-ETIMEDOUT, -ECONNREFUSED, -EPROTO for a
 * malformed response). */
int http_request(int port, const char *method, const char *path, const char *const *headers,
                 const char *body, struct http_response *resp);

/* The same with an explicit timeout and a body of body_len bytes. */
int http_request_ex(int port, const char *method, const char *path, const char *const *headers,
                    const void *body, size_t body_len, int timeout_ms,
                    struct http_response *resp);

void http_response_free(struct http_response *resp);

/* The first header called name (case-insensitive), or NULL. Valid until http_response_free. */
const char *http_header_get(const struct http_response *resp, const char *name);

/* Streaming: one open request whose body is read bit by bit. */
struct http_stream;

/* Send the request and read the status line and headers (within timeout_ms). Returns the
 * status code with *out set, or -errno (*out NULL). */
int http_stream_open(int port, const char *method, const char *path,
                     const char *const *headers, const char *body, int timeout_ms,
                     struct http_stream **out);

/* The response's status and headers, valid until http_stream_close. */
const struct http_response *http_stream_response(const struct http_stream *s);

struct sse_event {
    char *data;  /* the data: lines joined with '\n', NUL-terminated */
    size_t len;
    bool done;   /* data is exactly "[DONE]" */
    char *event; /* the event: field, or NULL */
};

/* Read the next event (a blank line ends it; comments are skipped). Returns 1 with ev set
 * (valid until the next sse_next or http_stream_close), 0 at the clean end of the body,
 * -ETIMEDOUT when no whole event came within timeout_ms, or -errno / -EPROTO. */
int sse_next(struct http_stream *s, struct sse_event *ev, int timeout_ms);

/* Read the rest of the body (e.g. a JSON error instead of a stream). Returns 0 with *body
 * (malloc'd, NUL-terminated; caller frees) and *len, or -errno. */
int http_stream_read_rest(struct http_stream *s, char **body, size_t *len, int timeout_ms);

/* Close the connection, possibly mid-stream (this is how a test disconnects a client).
 * NULL is fine. */
void http_stream_close(struct http_stream *s);

/* Raw connections. */

/* A TCP connection to 127.0.0.1:port (blocking, CLOEXEC). Returns the fd or -errno. */
int http_raw_connect(int port);

/* Write all len bytes. Returns 0 or -errno (-EPIPE when the server closed). */
int http_raw_send(int fd, const void *buf, size_t len);

/* Read one response from fd. Returns its status (resp filled) or -errno; -ECONNRESET or
 * -EPROTO when the server closed without a whole response. */
int http_raw_read_response(int fd, struct http_response *resp, int timeout_ms);

/* Keep-alive connections: responses read one after another off one connection. Bytes read
 * ahead of a response (the next answer, or its start) are kept for the next read, where
 * http_raw_read_response drops them. */
struct http_conn;

/* Connect to 127.0.0.1:port. Returns 0 with *out set, or -errno. */
int http_conn_open(int port, struct http_conn **out);

/* Its socket, for http_raw_send (and poll or shutdown). */
int http_conn_fd(const struct http_conn *c);

/* Read the next response. Returns its status (resp filled; free with http_response_free) or
 * -errno, like http_raw_read_response. method "HEAD" (or NULL) tells a bodiless answer. */
int http_conn_read_response(struct http_conn *c, const char *method, struct http_response *resp,
                            int timeout_ms);

/* Whether the server closed the connection within timeout_ms with no byte after the answers
 * read: 1 closed, 0 still open (nothing came), -EPROTO more bytes came, or -errno. */
int http_conn_wait_closed(struct http_conn *c, int timeout_ms);

/* Close and free. NULL is fine. */
void http_conn_close(struct http_conn *c);

/* Read until the peer closes or timeout_ms. Returns 0 with *buf (malloc'd, NUL-terminated)
 * and *len, or -errno (-ETIMEDOUT: the peer kept the connection open; *buf still holds what
 * came). */
int http_raw_read_all(int fd, char **buf, size_t *len, int timeout_ms);

#endif
