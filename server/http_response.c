/* A request as the handler sees it (http.h), and the answer writer: the status line, the
 * headers (Date, Content-Length or chunked framing, Connection), the body (none for HEAD),
 * and the stream of chunks, written into the connection's output. */
#include "http_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"

static enum http_method method_of(const char *m)
{
    static const struct {
        const char *name;
        enum http_method m;
    } methods[] = {
        {"GET", HTTP_GET},         {"POST", HTTP_POST},       {"HEAD", HTTP_HEAD},
        {"PUT", HTTP_PUT},         {"DELETE", HTTP_DELETE},   {"OPTIONS", HTTP_OPTIONS},
        {"TRACE", HTTP_TRACE},     {"CONNECT", HTTP_CONNECT}, {"PATCH", HTTP_PATCH},
    };
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strcmp(m, methods[i].name) == 0)
            return methods[i].m;
    return HTTP_OTHER;
}

/* The path of a request target: origin-form "/p?q" or absolute-form "http://h/p?q" (the
 * query and fragment cut off, in place). NULL for another form ("*", authority-form). */
static const char *target_path(char *t)
{
    if (strncasecmp(t, "http://", 7) == 0 || strncasecmp(t, "https://", 8) == 0) {
        char *slash = strchr(strstr(t, "://") + 3, '/');
        if (!slash)
            return "/";
        t = slash;
    }
    if (*t != '/')
        return NULL;
    t[strcspn(t, "?#")] = '\0';
    return t;
}

struct http_req *http_req_new(struct http_conn *c)
{
    const struct http_parser *p = &c->p;
    struct http_req *r = calloc(1, sizeof(*r));
    if (!r || !(r->head = malloc(p->head_len + 1)) || !(r->body = evbuffer_new())) {
        if (r)
            free(r->head);
        free(r);
        return NULL;
    }
    /* the strings point into the parser's block: the same offsets in the copy */
    memcpy(r->head, p->head, p->head_len);
    r->head[p->head_len] = '\0';
#define REBASE(s) (r->head + ((s) - p->head))
    r->method = method_of(p->method);
    char *target = REBASE(p->target);
    r->path = target_path(target);
    for (unsigned i = 0; i < p->n_headers; i++) {
        r->headers[i].name = REBASE(p->headers[i].name);
        r->headers[i].value = REBASE(p->headers[i].value);
    }
#undef REBASE
    r->n_headers = p->n_headers;
    r->minor = p->minor;
    r->keep_alive = p->keep_alive;
    (void)evbuffer_add_buffer(r->body, c->body); /* moves it: c->body is empty again */
    r->out_tail = &r->out;
    memcpy(r->addr, c->addr, sizeof(r->addr));
    r->port = c->port;
    r->c = c;
    return r;
}

static void drain_stop(struct http_req *r)
{
    if (r->drain_entry && r->c)
        evbuffer_remove_cb_entry(bufferevent_get_output(r->c->bev), r->drain_entry);
    r->drain_entry = NULL;
    r->drain_cb = NULL;
}

void http_req_free(struct http_req *r)
{
    while (r->out) {
        struct http_out_header *h = r->out;
        r->out = h->next;
        free(h->name);
        free(h->value);
        free(h);
    }
    if (r->body)
        evbuffer_free(r->body);
    free(r->head);
    free(r);
}

void http_req_release(struct http_req *r)
{
    http_req_unwatch(r);
    drain_stop(r);
    r->close_cb = NULL;
    r->c = NULL;
    if (r->in_handler)
        r->released = true;
    else
        http_req_free(r);
}

/* The answer is whole: the connection goes on (or closes), r is done. */
static void req_done(struct http_req *r)
{
    struct http_conn *c = r->c;
    http_req_unwatch(r);
    drain_stop(r);
    if (c && c->req == r)
        http_conn_answered(c, r);
    http_req_release(r);
}

/* ---- the request ---- */

enum http_method http_req_method(const struct http_req *req)
{
    return req->method;
}

const char *http_req_path(const struct http_req *req)
{
    return req->path;
}

int http_req_status(const struct http_req *req)
{
    return req->status;
}

const char *http_req_header(const struct http_req *req, const char *name)
{
    for (unsigned i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0)
            return req->headers[i].value;
    return NULL;
}

const char *http_req_body(struct http_req *req, size_t *len)
{
    *len = evbuffer_get_length(req->body);
    return *len ? (const char *)evbuffer_pullup(req->body, -1) : "";
}

void http_req_peer(const struct http_req *req, const char **addr, uint16_t *port)
{
    *addr = req->addr[0] ? req->addr : "?";
    *port = req->port;
}

size_t http_req_unsent(const struct http_req *req)
{
    return req->c ? evbuffer_get_length(bufferevent_get_output(req->c->bev)) : 0;
}

static void on_out(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_req *r = arg;
    if (info->n_deleted > 0 && r->drain_cb)
        r->drain_cb(r->drain_arg, evbuffer_get_length(buf));
}

void http_req_on_drain(struct http_req *req, void (*cb)(void *arg, size_t unsent), void *arg)
{
    if (!cb) {
        drain_stop(req);
        return;
    }
    req->drain_cb = cb;
    req->drain_arg = arg;
    if (!req->drain_entry && req->c)
        req->drain_entry = evbuffer_add_cb(bufferevent_get_output(req->c->bev), on_out, req);
}

/* ---- the headers ---- */

void http_set_header(struct http_req *req, const char *name, const char *value)
{
    struct http_out_header *h = calloc(1, sizeof(*h));
    if (!h || !(h->name = strdup(name)) || !(h->value = strdup(value))) {
        if (h)
            free(h->name);
        free(h);
        log_error("http: no memory for a response header");
        return;
    }
    *req->out_tail = h;
    req->out_tail = &h->next;
}

void http_remove_header(struct http_req *req, const char *name)
{
    struct http_out_header **pp = &req->out;
    while (*pp) {
        struct http_out_header *h = *pp;
        if (strcasecmp(h->name, name) == 0) {
            *pp = h->next;
            free(h->name);
            free(h->value);
            free(h);
        } else {
            pp = &h->next;
        }
    }
    req->out_tail = pp;
}

const char *http_get_header(const struct http_req *req, const char *name)
{
    for (const struct http_out_header *h = req->out; h; h = h->next)
        if (strcasecmp(h->name, name) == 0)
            return h->value;
    return NULL;
}

/* ---- the answer ---- */

const char *http_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Error" : "Server Error";
    }
}

/* Statuses whose answers carry no body. */
static bool bodiless(int status)
{
    return status < 200 || status == 204 || status == 304;
}

/* The status line and headers into out; content_length < 0: none (a stream). */
static int write_head(struct http_req *r, struct evbuffer *out, int status, const char *reason,
                      long long content_length)
{
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    if (evbuffer_add_printf(out, "HTTP/1.%d %d %s\r\n", r->minor, status,
                            reason ? reason : http_reason(status)) < 0)
        return -1;
    for (const struct http_out_header *h = r->out; h; h = h->next)
        if (evbuffer_add_printf(out, "%s: %s\r\n", h->name, h->value) < 0)
            return -1;
    if (!http_get_header(r, "Date") && gmtime_r(&now, &tm) &&
        strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm) > 0 &&
        evbuffer_add_printf(out, "Date: %s\r\n", date) < 0)
        return -1;
    if (content_length >= 0 && !bodiless(status) && !http_get_header(r, "Content-Length") &&
        evbuffer_add_printf(out, "Content-Length: %lld\r\n", content_length) < 0)
        return -1;
    if (r->chunked && evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\n") < 0)
        return -1;
    if (!http_get_header(r, "Connection")) {
        const char *conn = !r->keep_alive ? "close" : r->minor == 0 ? "keep-alive" : NULL;
        if (conn && evbuffer_add_printf(out, "Connection: %s\r\n", conn) < 0)
            return -1;
    }
    return evbuffer_add(out, "\r\n", 2);
}

/* The connection to write r's answer to, or NULL when it is gone (the answer is dropped). */
static struct evbuffer *answer_out(struct http_req *r)
{
    if (!r->c || r->c->dying || r->c->req != r)
        return NULL;
    const char *conn = http_get_header(r, "Connection");
    if (conn && strcasecmp(conn, "close") == 0)
        r->keep_alive = false;
    return bufferevent_get_output(r->c->bev);
}

static void reply_whole(struct http_req *r, int status, const char *reason, const void *body,
                        size_t len, bool copy)
{
    struct evbuffer *out = answer_out(r);
    r->status = status;
    if (out) {
        bool send_body = body && len && r->method != HTTP_HEAD && !bodiless(status);
        int rc = write_head(r, out, status, reason, (long long)len);
        if (rc == 0 && send_body)
            rc = copy ? evbuffer_add(out, body, len)
                      : evbuffer_add_reference(out, body, len, NULL, NULL);
        if (rc < 0) {
            log_error("http: no memory for a %d answer; closing the connection", status);
            return http_conn_drop(r->c); /* releases r */
        }
    }
    req_done(r);
}

void http_reply(struct http_req *req, int status, const char *reason, const void *body,
                size_t len)
{
    reply_whole(req, status, reason, body, len, true);
}

void http_reply_static(struct http_req *req, int status, const char *reason, const void *body,
                       size_t len)
{
    reply_whole(req, status, reason, body, len, false);
}

void http_reply_error(struct http_req *req, int status)
{
    char body[96];
    int n = snprintf(body, sizeof(body), "%d %s\n", status, http_reason(status));
    http_remove_header(req, "Content-Type");
    http_set_header(req, "Content-Type", "text/plain");
    reply_whole(req, status, NULL, body, (size_t)n, true);
}

void http_reply_start(struct http_req *req, int status, const char *reason)
{
    struct evbuffer *out = answer_out(req);
    req->status = status;
    req->started = true;
    if (!out)
        return;
    if (req->minor >= 1 && !http_get_header(req, "Content-Length"))
        req->chunked = true;
    else if (!http_get_header(req, "Content-Length"))
        req->keep_alive = false; /* HTTP/1.0: the close ends the body */
    if (write_head(req, out, status, reason, -1) < 0) {
        log_error("http: no memory for a %d answer; closing the connection", status);
        http_conn_drop(req->c);
    }
}

void http_reply_chunk(struct http_req *req, struct evbuffer *buf)
{
    struct evbuffer *out = answer_out(req);
    size_t n = evbuffer_get_length(buf);
    if (!out || n == 0 || req->method == HTTP_HEAD) {
        (void)evbuffer_drain(buf, n);
        return;
    }
    if ((req->chunked && evbuffer_add_printf(out, "%zx\r\n", n) < 0) ||
        evbuffer_add_buffer(out, buf) < 0 || (req->chunked && evbuffer_add(out, "\r\n", 2) < 0)) {
        log_error("http: no memory for a stream's chunk; closing the connection");
        http_conn_drop(req->c);
    }
}

void http_reply_end(struct http_req *req)
{
    struct evbuffer *out = answer_out(req);
    if (out && req->chunked && req->method != HTTP_HEAD && evbuffer_add(out, "0\r\n\r\n", 5) < 0) {
        log_error("http: no memory for a stream's end; closing the connection");
        return http_conn_drop(req->c);
    }
    req_done(req);
}
