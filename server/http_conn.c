/* One client connection of the front (http_conn.h): a bufferevent (plain, or OpenSSL's with
 * --tls-cert) whose bytes go through kiln's parser one request at a time. A whole request is
 * handed to the handler and the socket is not read until it is answered, so pipelined
 * requests are answered in order and a client that half-closed still gets its answer. The
 * deadlines (--header-timeout-ms, --body-timeout-ms: 408; --keepalive-timeout-ms, and a
 * silent new connection: a close) and the refusals of what the parser refuses (an
 * OpenAI-shaped JSON error with Connection: close) are here; every close after an answer
 * waits until the output is out, shuts the write side, and lingers. */
#include "http_conn.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/ssl.h>

#include "access_log.h"
#include "api.h"
#include "config.h"
#include "hist.h"
#include "log.h"
#include "metrics.h"
#include "tls.h"

static void conn_process(struct http_conn *c);

static void conn_free(struct http_conn *c)
{
    struct http_server *s = c->s;
    LIST_REMOVE(c, link);
    if (c->bev)
        bufferevent_free(c->bev); /* closes the socket */
    if (c->ev_next)
        event_free(c->ev_next);
    if (c->ev_deadline)
        event_free(c->ev_deadline);
    if (c->body)
        evbuffer_free(c->body);
    http_parser_free(&c->p);
    free(c);
    http_server_conn_closed(s);
}

void http_conn_drop(struct http_conn *c)
{
    struct http_req *r = c->req;
    if (c->dying)
        return;
    c->dying = true;
    if (r) {
        void (*cb)(void *) = r->close_cb;
        r->close_cb = NULL;
        http_req_unwatch(r);
        if (cb)
            cb(r->close_arg);
        if (c->req == r) { /* the callback did not answer it */
            c->req = NULL;
            http_req_release(r);
        }
    }
    conn_free(c);
}

/* ---- deadlines ---- */

static void deadline_set(struct http_conn *c, enum http_deadline d)
{
    const struct kiln_config *cfg = c->s->cfg;
    uint32_t ms = 0;
    if (c->deadline == d)
        return; /* a running deadline is not pushed back by more bytes */
    c->deadline = d;
    (void)event_del(c->ev_deadline);
    switch (d) {
    case HTTP_DL_HEADER:
        ms = cfg->header_timeout_ms;
        break;
    case HTTP_DL_BODY:
        ms = cfg->body_timeout_ms;
        break;
    case HTTP_DL_KEEPALIVE:
        ms = cfg->keepalive_timeout_ms;
        break;
    case HTTP_DL_NONE:
    default:
        return;
    }
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    (void)event_add(c->ev_deadline, &tv);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    struct metrics *m = c->s->metrics;
    const struct kiln_config *cfg = c->s->cfg;
    enum http_deadline d = c->deadline;
    (void)fd;
    (void)what;
    c->deadline = HTTP_DL_NONE;
    if (c->lingering || d == HTTP_DL_NONE)
        return conn_free(c); /* the linger ended */
    if (d == HTTP_DL_KEEPALIVE) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) > 0)
            return deadline_set(c, HTTP_DL_KEEPALIVE); /* the answer is still going out */
        metrics_count_dropped(m, METRICS_DROP_KEEPALIVE_TIMEOUT);
        return http_conn_drop(c);
    }
    if (d == HTTP_DL_HEADER && !http_parser_in_request(&c->p)) {
        /* connected and sent nothing: no request to answer */
        metrics_count_dropped(m, METRICS_DROP_HEADER_TIMEOUT);
        return http_conn_drop(c);
    }
    metrics_count_dropped(m, d == HTTP_DL_BODY ? METRICS_DROP_BODY_TIMEOUT
                                               : METRICS_DROP_HEADER_TIMEOUT);
    log_info("http: a request's %s did not arrive within %u ms; 408",
             d == HTTP_DL_BODY ? "body" : "headers",
             d == HTTP_DL_BODY ? cfg->body_timeout_ms : cfg->header_timeout_ms);
    http_conn_refuse(c, 408, d == HTTP_DL_BODY ? "request body" : "request headers");
}

/* ---- closing ---- */

/* The last answer is out (the output is empty): end the connection. A client that still
 * sends is read (and dropped) until it closes or the linger ends, so that closing with its
 * bytes unread does not reset the connection before it read the answer. */
static void conn_close_drained(struct http_conn *c)
{
    struct timeval linger = {HTTP_LINGER_S, 0};
    if (c->read_eof)
        return conn_free(c);
    if (c->tls)
        (void)SSL_shutdown(bufferevent_openssl_get_ssl(c->bev));
    (void)shutdown(c->fd, SHUT_WR);
    c->lingering = true;
    c->deadline = HTTP_DL_NONE;
    (void)bufferevent_enable(c->bev, EV_READ);
    if (event_add(c->ev_deadline, &linger) < 0)
        conn_free(c);
}

/* No more requests on c: close once the output is out. */
static void conn_closing(struct http_conn *c)
{
    c->closing = true;
    deadline_set(c, HTTP_DL_NONE);
    (void)bufferevent_disable(c->bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        conn_close_drained(c);
}

static const char *refusal_code(int status)
{
    switch (status) {
    case 408:
        return "request_timeout";
    case 413:
        return "request_too_large";
    case 431:
        return "request_header_fields_too_large";
    default:
        return NULL;
    }
}

void http_conn_refuse(struct http_conn *c, int status, const char *why)
{
    const struct kiln_config *cfg = c->s->cfg;
    char msg[192];
    char *json;
    switch (status) {
    case 408:
        snprintf(msg, sizeof(msg), "the %s did not arrive in time", why);
        break;
    case 413:
        snprintf(msg, sizeof(msg),
                 "the request body is larger than the server accepts (at most %llu bytes)",
                 (unsigned long long)cfg->max_body_bytes);
        break;
    case 431:
        snprintf(msg, sizeof(msg),
                 "the request headers are larger than the server accepts (at most %u bytes)",
                 cfg->max_header_bytes);
        break;
    default:
        snprintf(msg, sizeof(msg), "malformed HTTP request: %s", why ? why : "framing");
        break;
    }
    access_log_make_id(c->rid, sizeof(c->rid));
    if (status != 408)
        log_info("http: refusing a request with %d (%s) [%s]", status, why ? why : "framing",
                 c->rid);
    json = api_json_error("invalid_request_error", msg, NULL, refusal_code(status));
    if (!json || evbuffer_add_printf(bufferevent_get_output(c->bev),
                                     "HTTP/1.1 %d %s\r\n"
                                     "Content-Type: application/json\r\n"
                                     "Content-Length: %zu\r\n"
                                     "X-Request-Id: %s\r\n"
                                     "Connection: close\r\n"
                                     "\r\n"
                                     "%s\n",
                                     status, http_reason(status), strlen(json) + 1, c->rid,
                                     json) < 0) {
        free(json);
        log_error("http: no memory for a %d answer; closing the connection", status);
        return http_conn_drop(c);
    }
    free(json);
    /* the API never saw it: its access line is here */
    access_log_refused_at(c->fd, status, c->req_start_us, c->rid);
    conn_closing(c);
}

/* ---- reading ---- */

/* A whole request: hand it over. The socket is not read until it is answered. */
static void dispatch(struct http_conn *c)
{
    struct http_server *s = c->s;
    struct http_req *r = http_req_new(c);
    if (!r) {
        log_error("http: no memory for a request");
        return http_conn_refuse(c, 503, "out of memory");
    }
    c->req = r;
    c->requests++;
    c->req_start_us = 0;
    deadline_set(c, HTTP_DL_NONE);
    (void)bufferevent_disable(c->bev, EV_READ);
    r->in_handler = true;
    s->cb(r, s->arg);
    r->in_handler = false;
    if (r->released)
        http_req_free(r);
}

/* Frame what the input holds, up to one whole request. */
static void conn_process(struct http_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    while (!c->req && !c->closing && evbuffer_get_length(in) > 0) {
        struct evbuffer_iovec v;
        size_t used = 0;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
            break;
        bool fresh = c->p.state == HP_START; /* no byte of a request read yet */
        enum http_parse_status st = http_parser_feed(&c->p, v.iov_base, v.iov_len, c->body,
                                                     &used);
        (void)evbuffer_drain(in, used);
        if (fresh && used > 0) /* for a refusal's duration */
            c->req_start_us = hist_now_us();
        if (st == HTTP_PARSE_ERROR)
            return http_conn_refuse(c, c->p.status, c->p.why);
        if (st == HTTP_PARSE_HEAD && c->p.state != HP_DONE) {
            if (c->p.expect_continue)
                (void)evbuffer_add_printf(bufferevent_get_output(c->bev),
                                          "HTTP/1.1 100 Continue\r\n\r\n");
            continue;
        }
        if (st == HTTP_PARSE_HEAD || st == HTTP_PARSE_DONE)
            return dispatch(c); /* c may be gone when it returns */
    }
    if (c->req || c->closing)
        return;
    if (c->read_eof) /* the client sent all it will */
        return conn_closing(c);
    if (c->p.state == HP_HEAD || (c->p.state == HP_START && c->requests == 0))
        deadline_set(c, HTTP_DL_HEADER);
    else if (c->p.state == HP_START)
        deadline_set(c, HTTP_DL_KEEPALIVE);
    else
        deadline_set(c, HTTP_DL_BODY);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;
    if (c->lingering || c->closing) {
        (void)evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
        return;
    }
    conn_process(c); /* the next request's first byte turns keep-alive into its header deadline */
}

/* The output went down to empty. Over TLS this runs deferred (BEV_OPT_DEFER_CALLBACKS), after
 * what the loop had queued before it: an answer's last chunks may have come since, so the
 * output is looked at again rather than taken to be empty (closing with them unsent would cut
 * the answer's end off; once they are out, this runs again). */
static void on_write(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;
    if (c->closing && !c->lingering && !c->req &&
        evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        conn_close_drained(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED)
        return; /* the TLS handshake is done */
    if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR)) {
        c->read_eof = true;
        if (c->lingering || (c->closing && !evbuffer_get_length(bufferevent_get_output(c->bev))))
            return conn_free(c);
        if (c->req || c->closing)
            return; /* a half-close: the answer still goes out */
        conn_process(c); /* nothing more comes: close (a partial request is dropped) */
        return;
    }
    /* a reset, a write the socket refused, the write timeout */
    if (c->lingering)
        return conn_free(c);
    http_conn_drop(c);
}

/* After an answer, from the loop: the next request (already buffered, or to be read), or the
 * close. */
static void on_next(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)fd;
    (void)what;
    if (c->req || c->dying)
        return;
    if (c->closing) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 && !c->lingering)
            conn_close_drained(c);
        return;
    }
    http_parser_next(&c->p);
    if (!c->read_eof)
        (void)bufferevent_enable(c->bev, EV_READ);
    conn_process(c);
}

void http_conn_answered(struct http_conn *c, struct http_req *r)
{
    c->req = NULL;
    if (c->dying)
        return;
    if (!r->keep_alive) {
        c->closing = true;
        deadline_set(c, HTTP_DL_NONE);
    }
    event_active(c->ev_next, EV_TIMEOUT, 0);
}

int http_conn_new(struct http_server *s, int fd, const struct sockaddr *sa, int salen)
{
    struct http_conn *c = calloc(1, sizeof(*c));
    struct timeval wt = {HTTP_WRITE_TIMEOUT_S, 0};
    (void)salen;
    if (!c || http_parser_init(&c->p, s->cfg->max_body_bytes, s->cfg->max_header_bytes) < 0) {
        free(c);
        goto fail;
    }
    c->s = s;
    c->fd = fd;
    snprintf(c->addr, sizeof(c->addr), "?");
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        evutil_inet_ntop(AF_INET, &in->sin_addr, c->addr, sizeof(c->addr));
        c->port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        evutil_inet_ntop(AF_INET6, &in6->sin6_addr, c->addr, sizeof(c->addr));
        c->port = ntohs(in6->sin6_port);
    }
    LIST_INSERT_HEAD(&s->conns, c, link);
    http_server_conn_opened(s); /* from here conn_free counts it closed */
    if (s->tls) {
        SSL *ssl = tls_new_ssl(s->tls);
        c->tls = true;
        /* deferred callbacks: without them libevent's OpenSSL bufferevent can run a callback
         * on a freed bufferevent (an assertion on its refcount) */
        if (ssl && !(c->bev = bufferevent_openssl_socket_new(
                         s->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                         BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS)))
            SSL_free(ssl);
        if (c->bev) /* a client that closes without close_notify ends as an EOF would */
            bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
    } else {
        c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!c->bev) {
        close(fd);
        c->fd = -1;
        conn_free(c);
        goto fail_logged;
    }
    c->body = evbuffer_new();
    c->ev_next = event_new(s->base, -1, 0, on_next, c);
    c->ev_deadline = evtimer_new(s->base, on_deadline, c);
    if (!c->body || !c->ev_next || !c->ev_deadline) {
        conn_free(c);
        goto fail_logged;
    }
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_set_timeouts(c->bev, NULL, &wt);
    deadline_set(c, HTTP_DL_HEADER); /* from the accept to the first request's headers */
    (void)bufferevent_enable(c->bev, EV_READ);
    return 0;
fail:
    close(fd);
fail_logged:
    log_error("http: no memory for a connection; closed");
    return -1;
}

/* ---- is the client still there? ---- */

/* How long after the probe (below) a reset must have come for the client to count as gone. */
#define PEER_PROBE_MS 200

void http_req_unwatch(struct http_req *r)
{
    if (r->ev_peer) {
        event_free(r->ev_peer);
        r->ev_peer = NULL;
    }
}

/* 2: the client reset the connection (it is gone); 1: it closed its sending side (EOF: it
 * may still read the answer, or have closed entirely); 0: it sent more bytes (a pipelined
 * request); -1: nothing to tell yet. Over TLS the bytes before the EOF may be its
 * close_notify alert, so there the socket's state tells an EOF. */
static int peer_state(evutil_socket_t fd, bool tls)
{
    char ch;
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    ssize_t n = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 1;
    if (n > 0 && tls && getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        ti.tcpi_state == TCP_CLOSE_WAIT)
        return 1;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : 2;
    return 0;
}

/* Whether the client's socket saw a reset: after the FIN, recv() keeps saying EOF even once
 * a reset came, so ask the socket. */
static bool peer_reset(evutil_socket_t fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int err = 0;
    socklen_t elen = sizeof(err);
    return (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err != 0) ||
           (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_CLOSE);
}

/* The client's socket is at EOF: it closed entirely, or only shut its sending side and waits
 * for the answer, as HTTP allows. When nothing was written to it yet, send an interim
 * "100 Continue" (which every HTTP/1.1 client must accept), once: a client that closed
 * entirely answers it with a reset, one that half-closed reads on. Returns 1 when the probe
 * went now, 0 when it went before or cannot go (bytes went or are queued already, so the
 * next write tells; HTTP/1.0 gets no 1xx), -1 when the client is gone. */
static int peer_probe(struct http_req *r)
{
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    struct http_conn *c = r->c;
    if (r->peer_probed || r->started || evbuffer_get_length(bufferevent_get_output(c->bev)) > 0 ||
        r->minor < 1)
        return 0;
    r->peer_probed = true;
    if (c->tls) /* through TLS: the reset comes later */
        return bufferevent_write(c->bev, probe, sizeof(probe) - 1) < 0 ? -1 : 1;
    if (send(c->fd, probe, sizeof(probe) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) !=
        (ssize_t)sizeof(probe) - 1)
        return -1;
    return 1;
}

/* The probe's answer: a reset means the client closed entirely; EOF alone means it only
 * half-closed and waits for its answer. */
static void on_peer_probe(evutil_socket_t fd, short what, void *arg)
{
    struct http_req *r = arg;
    (void)fd;
    (void)what;
    if (r->c && peer_reset(r->c->fd))
        return http_conn_drop(r->c);
    http_req_unwatch(r);
}

/* The socket is not read while a request is answered, so a client that leaves before any
 * byte is written would go unnoticed: watch it, and at EOF probe it (peer_probe). */
static void on_peer(evutil_socket_t fd, short what, void *arg)
{
    struct http_req *r = arg;
    (void)what;
    int st = peer_state(fd, r->c->tls);
    if (st < 0) {
        event_add(r->ev_peer, NULL);
        return;
    }
    if (st == 0) { /* a pipelined request: the answer's writes will tell */
        http_req_unwatch(r);
        return;
    }
    if (st == 2 || peer_probe(r) < 0)
        return http_conn_drop(r->c);
    http_req_unwatch(r);
    if (!r->peer_probed) /* no probe can go: the next write tells */
        return;
    /* the probe went (now, or from http_req_client_alive): its answer is due */
    r->ev_peer = evtimer_new(r->c->s->base, on_peer_probe, r);
    struct timeval tv = {0, PEER_PROBE_MS * 1000};
    if (!r->ev_peer || evtimer_add(r->ev_peer, &tv) < 0)
        http_req_unwatch(r);
}

void http_req_on_close(struct http_req *req, void (*cb)(void *arg), void *arg)
{
    req->close_cb = cb;
    req->close_arg = arg;
    if (!cb || !req->c) {
        http_req_unwatch(req);
        return;
    }
    if (!req->ev_peer) {
        req->ev_peer = event_new(req->c->s->base, req->c->fd, EV_READ, on_peer, req);
        if (req->ev_peer)
            event_add(req->ev_peer, NULL);
    }
}

void http_req_abort(struct http_req *req)
{
    if (req->c)
        http_conn_drop(req->c);
}

bool http_req_client_alive(struct http_req *req)
{
    if (!req->c || req->c->dying)
        return false;
    int fd = req->c->fd;
    int st = peer_state(fd, req->c->tls);
    if (st < 1)
        return true;
    if (st == 2)
        return false;
    /* EOF: a client that only half-closed waits for its answer, so it keeps its place; the
     * probe tells one that closed entirely (on loopback its reset is back before send()
     * returns; elsewhere on_peer_probe drops it once the reset comes) */
    return peer_probe(req) >= 0 && !peer_reset(fd);
}
