/* kiln's HTTP/1.1 request parser: fed a connection's bytes in any pieces, it gives each
 * request's method, target, version and headers, and its body (Content-Length or chunked,
 * decoded) into an evbuffer, and says when a request is whole. It is strict: what HTTP/1.1
 * (RFC 9112) forbids or leaves ambiguous for framing is refused with a status (400, 413, 431,
 * 501, 505), never guessed at: obs-fold, a space before a header's colon, Content-Length with
 * Transfer-Encoding, differing Content-Lengths, a transfer coding other than chunked. It does
 * no I/O and knows no socket; one parser per connection, reset between requests. */
#ifndef HTTP_PARSE_H
#define HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

#define HTTP_PARSE_MAX_HEADERS 100
#define HTTP_PARSE_MAX_CHUNK_LINE 1024

enum http_parse_status {
    HTTP_PARSE_MORE,  /* every byte given was taken; more are needed */
    HTTP_PARSE_HEAD,  /* the header block is whole (the body, if any, follows): the caller may
                       * answer "100 Continue" now; call again with the rest */
    HTTP_PARSE_DONE,  /* the request is whole; bytes after it were not taken */
    HTTP_PARSE_ERROR, /* refused: p->status and p->why say why; nothing more is taken */
};

enum http_parse_state {
    HP_START, HP_HEAD, HP_BODY, HP_CHUNK_LINE, HP_CHUNK_DATA, HP_CHUNK_END, HP_TRAILER,
    HP_DONE, HP_ERROR,
};

struct http_header {
    const char *name, *value; /* NUL-terminated, inside the parser's head buffer */
};

struct http_parser {
    uint64_t max_body, max_header;
    enum http_parse_state state;
    int status;            /* the refusal's status (HTTP_PARSE_ERROR) */
    const char *why;       /* a static phrase for it */
    /* the header block as it came, then cut into strings */
    char *head;
    size_t head_len, head_cap;
    /* the request */
    const char *method, *target;
    int minor;             /* HTTP/1.<minor> */
    struct http_header headers[HTTP_PARSE_MAX_HEADERS];
    unsigned n_headers;
    bool keep_alive;       /* the connection may carry another request after this one */
    bool expect_continue;  /* Expect: 100-continue */
    bool chunked;
    uint64_t content_length;
    uint64_t body_len;     /* body bytes so far (decoded) */
    uint64_t remaining;    /* Content-Length or chunk bytes still to come */
    char line[HTTP_PARSE_MAX_CHUNK_LINE + 1]; /* a chunk-size or trailer line so far */
    size_t line_len;
    uint64_t trailer_len;
};

/* Start a parser with these limits. Returns 0 or -ENOMEM. */
int http_parser_init(struct http_parser *p, uint64_t max_body, uint64_t max_header);
void http_parser_free(struct http_parser *p);

/* Ready for the connection's next request (the current one was whole). */
void http_parser_next(struct http_parser *p);

/* Take bytes of data[0..n): *used says how many. Body bytes are appended to body. */
enum http_parse_status http_parser_feed(struct http_parser *p, const char *data, size_t n,
                                        struct evbuffer *body, size_t *used);

/* A header's value (the first of that name; names compare without case), or NULL. */
const char *http_parser_header(const struct http_parser *p, const char *name);

/* Whether bytes of a request not yet whole have been taken (for the deadlines: before the
 * first byte an idle connection is closed, after it a late request is answered 408). */
bool http_parser_in_request(const struct http_parser *p);

#endif
