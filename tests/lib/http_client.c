/* Blocking HTTP/1.1 client for the integration tests: a buffered connection, a response
 * head parser, an incremental body decoder (Content-Length, chunked, until close) and an SSE
 * event reader on top of it. Not a general client: loopback, one request per connection. */
#include "http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hist.h"

/* Milliseconds on hist_now_us()'s monotonic clock. */
#define ms_now() ((long long)(hist_now_us() / 1000))

struct dbuf {
    char *p;
    size_t len, cap;
};

enum body_mode { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_EOF };

/* Raw bytes from the socket in buf[off, len); decoded body bytes in body[body_off, len). */
struct http_stream {
    int fd;
    struct dbuf raw;
    size_t raw_off;
    bool eof;
    struct http_response resp;
    enum body_mode mode;
    uint64_t left;      /* BODY_LENGTH: bytes left; BODY_CHUNKED: bytes left in this chunk */
    bool chunk_crlf;    /* BODY_CHUNKED: the CRLF after a chunk's data is due */
    bool body_done;
    struct dbuf body;
    size_t body_off;
    struct dbuf ev_data, ev_name;
};

static int dbuf_reserve(struct dbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return -ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int dbuf_append(struct dbuf *b, const void *data, size_t n)
{
    int err = dbuf_reserve(b, n);
    if (err)
        return err;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* Drop the first off bytes. */
static void dbuf_consume(struct dbuf *b, size_t *off)
{
    if (*off == 0)
        return;
    memmove(b->p, b->p + *off, b->len - *off);
    b->len -= *off;
    *off = 0;
    if (b->p)
        b->p[b->len] = '\0';
}

int http_raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int r;
    do {
        r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
        int err = -errno;
        (void)close(fd);
        return err;
    }
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int http_raw_send(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read more raw bytes. Returns >0, 0 at EOF, -ETIMEDOUT or -errno. */
static int raw_fill(struct http_stream *s, long long deadline)
{
    if (s->eof)
        return 0;
    dbuf_consume(&s->raw, &s->raw_off);
    if (dbuf_reserve(&s->raw, 16384))
        return -ENOMEM;
    for (;;) {
        long long left = deadline - ms_now();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = s->fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)(left > 1000000 ? 1000000 : left));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -ETIMEDOUT;
        ssize_t n = recv(s->fd, s->raw.p + s->raw.len, s->raw.cap - s->raw.len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0) {
            s->eof = true;
            return 0;
        }
        s->raw.len += (size_t)n;
        s->raw.p[s->raw.len] = '\0';
        return (int)n;
    }
}

/* Next raw line (CRLF or LF stripped) in *line and *n, valid until the next raw read. */
static int raw_line(struct http_stream *s, long long deadline, char **line, size_t *n)
{
    for (;;) {
        char *start = s->raw.p ? s->raw.p + s->raw_off : NULL;
        char *nl = start ? memchr(start, '\n', s->raw.len - s->raw_off) : NULL;
        if (nl) {
            size_t len = (size_t)(nl - start);
            s->raw_off += len + 1;
            if (len > 0 && start[len - 1] == '\r')
                len--;
            start[len] = '\0';
            *line = start;
            *n = len;
            return 0;
        }
        if (s->raw.len - s->raw_off > 65536)
            return -EPROTO;
        int r = raw_fill(s, deadline);
        if (r == 0)
            return s->raw.len > s->raw_off ? -EPROTO : -ECONNRESET;
        if (r < 0)
            return r;
    }
}

static int add_header(struct http_response *resp, const char *line)
{
    const char *colon = strchr(line, ':');
    if (!colon)
        return -EPROTO;
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t vlen = strlen(v);
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    struct http_header *h = realloc(resp->headers, (resp->n_headers + 1) * sizeof *h);
    if (!h)
        return -ENOMEM;
    resp->headers = h;
    h[resp->n_headers].name = strndup(line, (size_t)(colon - line));
    h[resp->n_headers].value = strndup(v, vlen);
    resp->n_headers++;
    if (!h[resp->n_headers - 1].name || !h[resp->n_headers - 1].value)
        return -ENOMEM;
    return 0;
}

/* Status line and headers; picks the body mode. */
static int read_head(struct http_stream *s, const char *method, long long deadline)
{
    char *line;
    size_t n;
    int err, major, minor, status;
again:
    if ((err = raw_line(s, deadline, &line, &n)) < 0)
        return err;
    if (sscanf(line, "HTTP/%d.%d %d", &major, &minor, &status) != 3 || status < 100 ||
        status > 999)
        return -EPROTO;
    s->resp.status = status;
    for (;;) {
        if ((err = raw_line(s, deadline, &line, &n)) < 0)
            return err;
        if (n == 0)
            break;
        if (status >= 200 && (err = add_header(&s->resp, line)) < 0)
            return err;
    }
    if (status >= 100 && status < 200 && status != 101)
        goto again; /* an interim answer (100 Continue): the final one follows */
    const char *te = http_header_get(&s->resp, "Transfer-Encoding");
    const char *cl = http_header_get(&s->resp, "Content-Length");
    if ((method && strcasecmp(method, "HEAD") == 0) || status == 204 || status == 304 ||
        status < 200) {
        s->mode = BODY_NONE;
    } else if (te && strcasestr(te, "chunked")) {
        s->mode = BODY_CHUNKED;
    } else if (cl) {
        char *end;
        unsigned long long v = strtoull(cl, &end, 10);
        if (end == cl || *end != '\0')
            return -EPROTO;
        s->mode = BODY_LENGTH;
        s->left = v;
    } else {
        s->mode = BODY_EOF;
    }
    s->body_done = s->mode == BODY_NONE || (s->mode == BODY_LENGTH && s->left == 0);
    return status;
}

/* Move up to s->left raw bytes to the body. Returns the count (0: raw is empty). */
static size_t take_raw(struct http_stream *s, uint64_t limit)
{
    size_t avail = s->raw.len - s->raw_off;
    size_t n = avail < limit ? avail : (size_t)limit;
    if (n > 0 && dbuf_append(&s->body, s->raw.p + s->raw_off, n) == 0)
        s->raw_off += n;
    else
        n = 0;
    return n;
}

/* Decode more of the body into s->body. Returns >0 bytes added, 0 at the end of the body,
 * or -errno. */
static int body_fill(struct http_stream *s, long long deadline)
{
    for (;;) {
        if (s->body_done)
            return 0;
        size_t got = 0;
        int r;
        switch (s->mode) {
        case BODY_NONE:
            s->body_done = true;
            return 0;
        case BODY_LENGTH:
            got = take_raw(s, s->left);
            s->left -= got;
            if (s->left == 0)
                s->body_done = true;
            break;
        case BODY_EOF:
            got = take_raw(s, UINT64_MAX);
            break;
        case BODY_CHUNKED:
            if (s->left > 0) {
                got = take_raw(s, s->left);
                s->left -= got;
                s->chunk_crlf = s->left == 0;
                break;
            }
            char *line;
            size_t n;
            if ((r = raw_line(s, deadline, &line, &n)) < 0)
                return r;
            if (s->chunk_crlf) {
                if (n != 0)
                    return -EPROTO;
                s->chunk_crlf = false;
                continue;
            }
            char *end;
            unsigned long long size = strtoull(line, &end, 16);
            if (end == line)
                return -EPROTO;
            if (size == 0) {
                /* trailers, up to the blank line */
                do {
                    if ((r = raw_line(s, deadline, &line, &n)) < 0)
                        return r;
                } while (n != 0);
                s->body_done = true;
                return 0;
            }
            s->left = size;
            continue;
        }
        if (got > 0)
            return (int)got;
        if (s->body_done)
            return 0;
        r = raw_fill(s, deadline);
        if (r < 0)
            return r;
        if (r == 0) {
            if (s->mode == BODY_EOF) {
                s->body_done = true;
                return 0;
            }
            return -ECONNRESET; /* closed before the announced end */
        }
    }
}

static void response_init(struct http_response *resp)
{
    memset(resp, 0, sizeof *resp);
}

void http_response_free(struct http_response *resp)
{
    for (size_t i = 0; i < resp->n_headers; i++) {
        free(resp->headers[i].name);
        free(resp->headers[i].value);
    }
    free(resp->headers);
    free(resp->body);
    response_init(resp);
}

const char *http_header_get(const struct http_response *resp, const char *name)
{
    for (size_t i = 0; i < resp->n_headers; i++)
        if (strcasecmp(resp->headers[i].name, name) == 0)
            return resp->headers[i].value;
    return NULL;
}

static bool has_header(const char *const *headers, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; headers && headers[i]; i++)
        if (strncasecmp(headers[i], name, n) == 0 && headers[i][n] == ':')
            return true;
    return false;
}

static int send_request(int fd, int port, const char *method, const char *path,
                        const char *const *headers, const void *body, size_t body_len)
{
    char *head = NULL;
    size_t head_len = 0;
    FILE *f = open_memstream(&head, &head_len);
    if (!f)
        return -errno;
    fprintf(f, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", method, path, port);
    if (!has_header(headers, "Connection"))
        fprintf(f, "Connection: close\r\n");
    for (size_t i = 0; headers && headers[i]; i++)
        fprintf(f, "%s\r\n", headers[i]);
    if (body) {
        if (!has_header(headers, "Content-Type"))
            fprintf(f, "Content-Type: application/json\r\n");
        if (!has_header(headers, "Content-Length"))
            fprintf(f, "Content-Length: %zu\r\n", body_len);
    }
    fprintf(f, "\r\n");
    if (fclose(f) != 0) {
        free(head);
        return -ENOMEM;
    }
    int err = http_raw_send(fd, head, head_len);
    free(head);
    if (err == 0 && body && body_len > 0)
        err = http_raw_send(fd, body, body_len);
    return err;
}

static struct http_stream *stream_new(int fd)
{
    struct http_stream *s = calloc(1, sizeof *s);
    if (s)
        s->fd = fd;
    return s;
}

static void stream_free(struct http_stream *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        (void)close(s->fd);
    http_response_free(&s->resp);
    free(s->raw.p);
    free(s->body.p);
    free(s->ev_data.p);
    free(s->ev_name.p);
    free(s);
}

/* Read the rest of the body into *resp's body, moving the head over. */
static int stream_finish(struct http_stream *s, long long deadline, struct http_response *resp)
{
    int r;
    while ((r = body_fill(s, deadline)) > 0)
        ;
    if (r < 0)
        return r;
    dbuf_consume(&s->body, &s->body_off);
    if (dbuf_reserve(&s->body, 0))
        return -ENOMEM;
    s->body.p[s->body.len] = '\0';
    *resp = s->resp;
    resp->body = s->body.p;
    resp->body_len = s->body.len;
    response_init(&s->resp);
    memset(&s->body, 0, sizeof s->body);
    return resp->status;
}

int http_raw_read_response(int fd, struct http_response *resp, int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    response_init(resp);
    struct http_stream *s = stream_new(fd);
    if (!s)
        return -ENOMEM;
    int r = read_head(s, NULL, deadline);
    if (r >= 0)
        r = stream_finish(s, deadline, resp);
    s->fd = -1; /* the caller's */
    stream_free(s);
    return r;
}

/* A keep-alive connection is a stream whose raw buffer outlives each response. */
struct http_conn {
    struct http_stream s;
};

int http_conn_open(int port, struct http_conn **out)
{
    *out = NULL;
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    int fd = http_raw_connect(port);
    if (fd < 0) {
        free(c);
        return fd;
    }
    c->s.fd = fd;
    *out = c;
    return 0;
}

int http_conn_fd(const struct http_conn *c)
{
    return c->s.fd;
}

/* Forget the previous response's state, keeping the bytes read ahead of it. */
static void conn_reset(struct http_stream *s)
{
    http_response_free(&s->resp);
    s->mode = BODY_NONE;
    s->left = 0;
    s->chunk_crlf = false;
    s->body_done = false;
    free(s->body.p);
    memset(&s->body, 0, sizeof s->body);
    s->body_off = 0;
}

int http_conn_read_response(struct http_conn *c, const char *method, struct http_response *resp,
                            int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    response_init(resp);
    conn_reset(&c->s);
    int r = read_head(&c->s, method, deadline);
    if (r >= 0 && c->s.mode == BODY_EOF)
        return -EPROTO; /* a keep-alive answer must tell its length */
    if (r >= 0)
        r = stream_finish(&c->s, deadline, resp);
    return r;
}

int http_conn_wait_closed(struct http_conn *c, int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    if (c->s.raw.len > c->s.raw_off)
        return -EPROTO;
    int r = raw_fill(&c->s, deadline);
    if (r == -ETIMEDOUT)
        return 0;
    if (r < 0)
        return r == -ECONNRESET ? 1 : r;
    return r == 0 ? 1 : -EPROTO;
}

void http_conn_close(struct http_conn *c)
{
    if (!c)
        return;
    stream_free(&c->s); /* closes the fd; s is c's first member, so this frees c */
}

int http_request_ex(int port, const char *method, const char *path, const char *const *headers,
                    const void *body, size_t body_len, int timeout_ms,
                    struct http_response *resp)
{
    long long deadline = ms_now() + timeout_ms;
    response_init(resp);
    int fd = http_raw_connect(port);
    if (fd < 0)
        return fd;
    struct http_stream *s = stream_new(fd);
    if (!s) {
        (void)close(fd);
        return -ENOMEM;
    }
    int r = send_request(fd, port, method, path, headers, body, body_len);
    if (r == 0)
        r = read_head(s, method, deadline);
    if (r >= 0)
        r = stream_finish(s, deadline, resp);
    stream_free(s);
    return r;
}

int http_request(int port, const char *method, const char *path, const char *const *headers,
                 const char *body, struct http_response *resp)
{
    return http_request_ex(port, method, path, headers, body, body ? strlen(body) : 0,
                           HTTP_CLIENT_TIMEOUT_MS, resp);
}

int http_stream_open(int port, const char *method, const char *path,
                     const char *const *headers, const char *body, int timeout_ms,
                     struct http_stream **out)
{
    long long deadline = ms_now() + timeout_ms;
    *out = NULL;
    int fd = http_raw_connect(port);
    if (fd < 0)
        return fd;
    struct http_stream *s = stream_new(fd);
    if (!s) {
        (void)close(fd);
        return -ENOMEM;
    }
    int r = send_request(fd, port, method, path, headers, body, body ? strlen(body) : 0);
    if (r == 0)
        r = read_head(s, method, deadline);
    if (r < 0) {
        stream_free(s);
        return r;
    }
    *out = s;
    return r;
}

const struct http_response *http_stream_response(const struct http_stream *s)
{
    return &s->resp;
}

/* Handle one SSE line (NUL-terminated, no EOL). */
static int sse_line(struct http_stream *s, const char *line)
{
    if (line[0] == ':')
        return 0; /* comment */
    const char *colon = strchr(line, ':');
    size_t name_len = colon ? (size_t)(colon - line) : strlen(line);
    const char *v = colon ? colon + 1 : "";
    if (*v == ' ')
        v++;
    if (name_len == 4 && strncmp(line, "data", 4) == 0)
        return dbuf_append(&s->ev_data, v, strlen(v));
    if (name_len == 5 && strncmp(line, "event", 5) == 0) {
        s->ev_name.len = 0;
        return dbuf_append(&s->ev_name, v, strlen(v));
    }
    return 0; /* id:, retry: and unknown fields */
}

int sse_next(struct http_stream *s, struct sse_event *ev, int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    bool have_data = false, have_event = false;
    s->ev_data.len = 0;
    s->ev_name.len = 0;
    memset(ev, 0, sizeof *ev);
    for (;;) {
        char *start = s->body.p ? s->body.p + s->body_off : NULL;
        char *nl = start ? memchr(start, '\n', s->body.len - s->body_off) : NULL;
        if (!nl) {
            int r = body_fill(s, deadline);
            if (r < 0)
                return r;
            if (r == 0)
                return 0; /* the end of the body; a partial event is dropped, as SSE says */
            continue;
        }
        size_t len = (size_t)(nl - start);
        s->body_off += len + 1;
        if (len > 0 && start[len - 1] == '\r')
            len--;
        start[len] = '\0';
        if (len == 0) {
            if (!have_data && !have_event)
                continue;
            break;
        }
        if (strncmp(start, "data", 4) == 0 && (start[4] == ':' || start[4] == '\0')) {
            if (have_data && dbuf_append(&s->ev_data, "\n", 1))
                return -ENOMEM;
            int r = sse_line(s, start);
            if (r < 0)
                return r;
            have_data = true;
        } else {
            int r = sse_line(s, start);
            if (r < 0)
                return r;
            if (strncmp(start, "event", 5) == 0)
                have_event = true;
        }
    }
    if (dbuf_reserve(&s->ev_data, 0) || dbuf_reserve(&s->ev_name, 0))
        return -ENOMEM;
    s->ev_data.p[s->ev_data.len] = '\0';
    s->ev_name.p[s->ev_name.len] = '\0';
    ev->data = s->ev_data.p;
    ev->len = s->ev_data.len;
    ev->done = strcmp(ev->data, "[DONE]") == 0;
    ev->event = have_event ? s->ev_name.p : NULL;
    if (s->body_off > 65536)
        dbuf_consume(&s->body, &s->body_off);
    return 1;
}

int http_stream_read_rest(struct http_stream *s, char **body, size_t *len, int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    int r;
    *body = NULL;
    *len = 0;
    while ((r = body_fill(s, deadline)) > 0)
        ;
    if (r < 0)
        return r;
    size_t n = s->body.len - s->body_off;
    char *b = malloc(n + 1);
    if (!b)
        return -ENOMEM;
    if (n)
        memcpy(b, s->body.p + s->body_off, n);
    b[n] = '\0';
    s->body_off = s->body.len;
    *body = b;
    *len = n;
    return 0;
}

void http_stream_close(struct http_stream *s)
{
    stream_free(s);
}

int http_raw_read_all(int fd, char **buf, size_t *len, int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    struct http_stream *s = stream_new(fd);
    int r;
    *buf = NULL;
    *len = 0;
    if (!s)
        return -ENOMEM;
    while ((r = raw_fill(s, deadline)) > 0)
        ;
    if (dbuf_reserve(&s->raw, 0) == 0) {
        s->raw.p[s->raw.len] = '\0';
        *buf = s->raw.p;
        *len = s->raw.len;
        s->raw.p = NULL;
    } else if (r == 0) {
        r = -ENOMEM;
    }
    s->fd = -1;
    stream_free(s);
    return r < 0 ? r : 0;
}
