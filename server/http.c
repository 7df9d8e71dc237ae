/* The front's HTTP server over libevent's evhttp: bind, limits, the one callback, and the
 * struct http_req the rest of the front answers through. Routing and answers are api.c's;
 * framing limits and deadlines are http_filter.c's. */
#include "http.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/listener.h>

#include "config.h"
#include "http_filter.h"
#include "log.h"
#include "tls.h"

/* Seconds a connection may sit without reading or writing: idle keep-alive connections and
 * clients that stop reading are dropped after it; a queued request is not affected since
 * libevent does not read while a request is being handled. */
#define HTTP_TIMEOUT_S 600

/* How long after the probe (below) a reset must have come for the client to count as gone. */
#define PEER_PROBE_MS 200

struct http_server {
    struct evhttp *evh;
    struct http_conns *conns;
    struct event_base *base;
    http_handler cb;
    void *arg;
};

/* One per request evhttp hands over; freed when the answer is sent (evhttp's on_complete) or
 * the connection closes, whichever comes first, but never before the callback returned. */
struct http_req {
    struct http_server *s;
    struct evhttp_request *ev;
    struct evhttp_connection *evcon;
    void (*close_cb)(void *arg);
    void *close_arg;
    void (*drain_cb)(void *arg, size_t unsent);
    void *drain_arg;
    struct evbuffer_cb_entry *drain_entry;
    struct event *ev_peer; /* the client's socket readable: did it leave? */
    int status;            /* of the answer given, 0 before */
    bool started;          /* http_reply_start() was called */
    bool in_handler;       /* the server's callback is running: freed once it returns */
    bool released;         /* answered or gone while in_handler: free once it returns */
    bool peer_probed;      /* the interim "100 Continue" probe went to the client */
};

/* ---- the request's lifetime ---- */

static void unwatch_peer(struct http_req *r)
{
    if (r->ev_peer) {
        event_free(r->ev_peer);
        r->ev_peer = NULL;
    }
}

static struct bufferevent *req_bev(const struct http_req *r)
{
    return r->evcon ? evhttp_connection_get_bufferevent(r->evcon) : NULL;
}

static void drain_stop(struct http_req *r)
{
    struct bufferevent *bev = req_bev(r);
    if (r->drain_entry && bev)
        evbuffer_remove_cb_entry(bufferevent_get_output(bev), r->drain_entry);
    r->drain_entry = NULL;
    r->drain_cb = NULL;
}

/* evhttp is done with r (the answer went, or the connection closed): nothing of it is
 * touched again; r itself goes once the callback that got it returned. */
static void req_release(struct http_req *r)
{
    unwatch_peer(r);
    drain_stop(r);
    r->close_cb = NULL;
    r->evcon = NULL;
    r->ev = NULL;
    if (r->in_handler)
        r->released = true;
    else
        free(r);
}

/* evhttp sent the answer whole: the connection may carry the next request. */
static void on_complete(struct evhttp_request *ev, void *arg)
{
    struct http_req *r = arg;
    (void)ev;
    if (r->evcon)
        evhttp_connection_set_closecb(r->evcon, NULL, NULL);
    req_release(r);
}

static void on_conn_close(struct evhttp_connection *evcon, void *arg)
{
    struct http_req *r = arg;
    void (*cb)(void *) = r->close_cb;
    struct evhttp_request *ev = r->ev;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    unwatch_peer(r);
    r->close_cb = NULL;
    if (cb)
        cb(r->close_arg);
    req_release(r);
    /* libevent detaches an unanswered request from a failed connection and leaves its
     * freeing to us; one still attached is freed with the connection right after. */
    if (!evhttp_request_get_connection(ev))
        evhttp_request_free(ev);
}

static void on_request(struct evhttp_request *ev, void *arg)
{
    struct http_server *s = arg;
    struct http_req *r = calloc(1, sizeof(*r));
    if (!r) {
        evhttp_send_error(ev, 503, NULL);
        return;
    }
    r->s = s;
    r->ev = ev;
    r->evcon = evhttp_request_get_connection(ev);
    evhttp_request_set_on_complete_cb(ev, on_complete, r);
    if (r->evcon)
        evhttp_connection_set_closecb(r->evcon, on_conn_close, r);
    r->in_handler = true;
    s->cb(r, s->arg);
    r->in_handler = false;
    if (r->released)
        free(r);
}

/* ---- the request ---- */

enum http_method http_req_method(const struct http_req *req)
{
    switch (evhttp_request_get_command(req->ev)) {
    case EVHTTP_REQ_GET:
        return HTTP_GET;
    case EVHTTP_REQ_POST:
        return HTTP_POST;
    case EVHTTP_REQ_HEAD:
        return HTTP_HEAD;
    case EVHTTP_REQ_PUT:
        return HTTP_PUT;
    case EVHTTP_REQ_DELETE:
        return HTTP_DELETE;
    case EVHTTP_REQ_OPTIONS:
        return HTTP_OPTIONS;
    case EVHTTP_REQ_TRACE:
        return HTTP_TRACE;
    case EVHTTP_REQ_CONNECT:
        return HTTP_CONNECT;
    case EVHTTP_REQ_PATCH:
        return HTTP_PATCH;
    default:
        return HTTP_OTHER;
    }
}

const char *http_req_path(const struct http_req *req)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req->ev);
    if (!evhttp_request_get_uri(req->ev) || !uri)
        return NULL;
    return evhttp_uri_get_path(uri);
}

int http_req_status(const struct http_req *req)
{
    return req->status;
}

int http_req_failed_status(const struct http_req *req)
{
    return evhttp_request_get_response_code(req->ev);
}

const char *http_req_header(const struct http_req *req, const char *name)
{
    return evhttp_find_header(evhttp_request_get_input_headers(req->ev), name);
}

const char *http_req_body(struct http_req *req, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req->ev);
    *len = evbuffer_get_length(in);
    return *len ? (const char *)evbuffer_pullup(in, -1) : "";
}

void http_req_peer(const struct http_req *req, const char **addr, uint16_t *port)
{
    char *a = NULL;
    ev_uint16_t p = 0;
    if (req->evcon)
        evhttp_connection_get_peer(req->evcon, &a, &p);
    *addr = a ? a : "?";
    *port = p;
}

/* ---- the answer ---- */

void http_set_header(struct http_req *req, const char *name, const char *value)
{
    evhttp_add_header(evhttp_request_get_output_headers(req->ev), name, value);
}

void http_remove_header(struct http_req *req, const char *name)
{
    evhttp_remove_header(evhttp_request_get_output_headers(req->ev), name);
}

const char *http_get_header(const struct http_req *req, const char *name)
{
    return evhttp_find_header(evhttp_request_get_output_headers(req->ev), name);
}

static void reply_buf(struct http_req *req, int status, const char *reason, const void *body,
                      size_t len, bool copy)
{
    struct evbuffer *b = NULL;
    if (body && len) {
        b = evbuffer_new();
        if (!b || (copy ? evbuffer_add(b, body, len)
                        : evbuffer_add_reference(b, body, len, NULL, NULL)) < 0) {
            if (b)
                evbuffer_free(b);
            http_reply_error(req, 500);
            return;
        }
    }
    req->status = status;
    evhttp_send_reply(req->ev, status, reason, b);
    if (b)
        evbuffer_free(b);
}

void http_reply(struct http_req *req, int status, const char *reason, const void *body,
                size_t len)
{
    reply_buf(req, status, reason, body, len, true);
}

void http_reply_static(struct http_req *req, int status, const char *reason, const void *body,
                       size_t len)
{
    reply_buf(req, status, reason, body, len, false);
}

void http_reply_error(struct http_req *req, int status)
{
    req->status = status;
    evhttp_send_error(req->ev, status, NULL);
}

void http_reply_start(struct http_req *req, int status, const char *reason)
{
    req->started = true;
    req->status = status;
    http_filter_hold_eof(req_bev(req), true); /* a half-closed client still reads its stream */
    evhttp_send_reply_start(req->ev, status, reason);
}

void http_reply_chunk(struct http_req *req, struct evbuffer *buf)
{
    evhttp_send_reply_chunk(req->ev, buf);
}

void http_reply_end(struct http_req *req)
{
    http_filter_hold_eof(req_bev(req), false);
    evhttp_send_reply_end(req->ev);
}

/* ---- the connection ---- */

/* The client's socket as libevent has it, or -1. */
static evutil_socket_t client_fd(const struct http_req *r)
{
    struct bufferevent *bev = req_bev(r);
    return bev ? bufferevent_getfd(bev) : -1;
}

/* 2: the client reset the connection (it is gone); 1: it closed its sending side (EOF: it
 * may still read the answer, or have closed entirely); 0: it sent more bytes (a pipelined
 * request); -1: nothing to tell yet. Over TLS the bytes before the EOF may be its
 * close_notify alert, so there the socket's state tells an EOF. */
static int peer_state(evutil_socket_t fd, bool tls)
{
    char c;
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 1;
    if (n > 0 && tls && getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
        ti.tcpi_state == TCP_CLOSE_WAIT)
        return 1;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : 2;
    return 0;
}

static void drop_client(struct http_req *r)
{
    unwatch_peer(r);
    /* frees the connection and its request; on_conn_close runs first */
    evhttp_connection_free(r->evcon);
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
static int peer_probe(struct http_req *r, evutil_socket_t fd)
{
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    struct bufferevent *bev = req_bev(r);
    if (r->peer_probed || r->started || !bev ||
        evbuffer_get_length(bufferevent_get_output(bev)) > 0 || r->ev->major != 1 ||
        r->ev->minor < 1)
        return 0;
    r->peer_probed = true;
    if (r->s->conns->tls) /* through TLS, below evhttp's buffer: the reset comes later */
        return bufferevent_write(bufferevent_get_underlying(bev), probe, sizeof(probe) - 1) < 0
                   ? -1
                   : 1;
    if (send(fd, probe, sizeof(probe) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(probe) - 1)
        return -1;
    return 1;
}

/* The probe's answer: a reset means the client closed entirely; EOF alone means it only
 * half-closed and waits for its answer. */
static void on_peer_probe(evutil_socket_t fd, short what, void *arg)
{
    struct http_req *r = arg;
    evutil_socket_t cfd = client_fd(r);
    (void)fd;
    (void)what;
    if (cfd >= 0 && peer_reset(cfd))
        return drop_client(r);
    unwatch_peer(r);
}

/* libevent does not read a connection while its request is being answered, so a client that
 * leaves before any byte is written would go unnoticed: watch its socket ourselves, and at
 * EOF probe it (peer_probe). */
static void on_peer(evutil_socket_t fd, short what, void *arg)
{
    struct http_req *r = arg;
    (void)what;
    int st = peer_state(fd, r->s->conns->tls != NULL);
    if (st < 0) {
        event_add(r->ev_peer, NULL);
        return;
    }
    if (st == 0) { /* a pipelined request: the reply's writes will tell */
        unwatch_peer(r);
        return;
    }
    if (st == 2)
        return drop_client(r);
    if (peer_probe(r, fd) < 0)
        return drop_client(r);
    event_free(r->ev_peer);
    r->ev_peer = NULL;
    if (!r->peer_probed) /* no probe can go: the next write tells */
        return;
    /* the probe went (now, or from http_req_client_alive): its answer is due */
    r->ev_peer = evtimer_new(r->s->base, on_peer_probe, r);
    struct timeval tv = {0, PEER_PROBE_MS * 1000};
    if (!r->ev_peer || evtimer_add(r->ev_peer, &tv) < 0)
        unwatch_peer(r);
}

static void watch_peer(struct http_req *r)
{
    evutil_socket_t fd = client_fd(r);
    if (fd < 0 || r->ev_peer)
        return;
    r->ev_peer = event_new(r->s->base, fd, EV_READ, on_peer, r);
    if (r->ev_peer)
        event_add(r->ev_peer, NULL);
}

void http_req_on_close(struct http_req *req, void (*cb)(void *arg), void *arg)
{
    req->close_cb = cb;
    req->close_arg = arg;
    if (cb)
        watch_peer(req);
    else
        unwatch_peer(req);
}

size_t http_req_unsent(const struct http_req *req)
{
    struct bufferevent *bev = req_bev(req);
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void on_out(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_req *r = arg;
    if (info->n_deleted > 0 && r->drain_cb)
        r->drain_cb(r->drain_arg, evbuffer_get_length(buf));
}

void http_req_on_drain(struct http_req *req, void (*cb)(void *arg, size_t unsent), void *arg)
{
    struct bufferevent *bev = req_bev(req);
    if (!cb) {
        drain_stop(req);
        return;
    }
    req->drain_cb = cb;
    req->drain_arg = arg;
    if (!req->drain_entry && bev)
        req->drain_entry = evbuffer_add_cb(bufferevent_get_output(bev), on_out, req);
}

void http_req_abort(struct http_req *req)
{
    if (req->evcon)
        drop_client(req);
}

bool http_req_client_alive(struct http_req *req)
{
    evutil_socket_t fd = client_fd(req);
    if (fd < 0)
        return false;
    int st = peer_state(fd, req->s->conns->tls != NULL);
    if (st < 1)
        return true;
    if (st == 2)
        return false;
    /* EOF: a client that only half-closed waits for its answer, so it keeps its place; the
     * probe tells one that closed entirely (on loopback its reset is back before send()
     * returns; elsewhere on_peer_probe drops it once the reset comes) */
    return peer_probe(req, fd) >= 0 && !peer_reset(fd);
}

/* ---- the server ---- */

static int bound_port(struct evhttp_bound_socket *bs, uint16_t *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    evutil_socket_t fd = evhttp_bound_socket_get_fd(bs);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    if (ss.ss_family == AF_INET)
        *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else
        return -EAFNOSUPPORT;
    return 0;
}

/* The fd limit in force (the soft one: `ulimit -n` is the operator's choice). */
static uint64_t fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 1024;
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_C(1) << 20 : (uint64_t)rl.rlim_cur;
}

struct http_server *http_create(struct event_base *base, const struct kiln_config *cfg,
                                struct metrics *metrics, http_handler cb, void *arg,
                                uint16_t *port)
{
    struct http_server *s = calloc(1, sizeof(*s));
    struct http_conns *conns = calloc(1, sizeof(*conns));
    struct evhttp_bound_socket *bs;
    uint64_t limit = fd_limit();
    int err;

    if (!s || !conns) {
        free(s);
        free(conns);
        log_error("http: out of memory");
        return NULL;
    }
    s->conns = conns;
    s->base = base;
    s->cb = cb;
    s->arg = arg;
    if (!(s->evh = evhttp_new(base)) || http_conns_init(conns, base) < 0) {
        log_error("evhttp_new failed");
        goto fail;
    }
    conns->cfg = cfg;
    conns->metrics = metrics;
    if (cfg->tls_cert || cfg->tls_key) {
        char why[512];
        if (!(conns->tls = tls_create(cfg->tls_cert, cfg->tls_key, why, sizeof(why)))) {
            log_error("%s", why);
            goto fail;
        }
        log_info("HTTPS with %s (TLS 1.2 and 1.3)", cfg->tls_cert);
    }
    conns->max = config_max_connections(cfg, limit);
    log_info("at most %u connections (fd limit %llu, %u fds kept for %u worker(s) and the "
             "front)",
             conns->max, (unsigned long long)limit,
             cfg->workers * CONFIG_FDS_PER_WORKER + CONFIG_FDS_RESERVED, cfg->workers);
    /* Requests over the limits are refused by http_filter.c's guard, in the API's JSON,
     * before libevent reads them; libevent's own limits (which it answers in HTML) stay a
     * little above as a backstop. */
    evhttp_set_max_body_size(s->evh, (ev_ssize_t)(cfg->max_body_bytes + HTTP_FILTER_BACKSTOP));
    evhttp_set_max_headers_size(s->evh,
                                (ev_ssize_t)cfg->max_header_bytes + HTTP_FILTER_BACKSTOP);
    http_filter_install(s->evh, conns);
    /* every method reaches the callback, which answers 405 itself in the API's shape */
    evhttp_set_allowed_methods(s->evh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                           EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                           EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                           EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_timeout(s->evh, HTTP_TIMEOUT_S);
    evhttp_set_gencb(s->evh, on_request, s);
    bs = evhttp_bind_socket_with_handle(s->evh, cfg->host, (ev_uint16_t)cfg->port);
    if (!bs) {
        log_error("cannot listen on %s:%u: %s", cfg->host, cfg->port, strerror(errno));
        goto fail;
    }
    if ((err = bound_port(bs, port)) < 0) {
        log_error("getsockname: %s", strerror(-err));
        goto fail;
    }
    /* at the limit, or when accept() fails (no fd), the listener pauses instead of spinning */
    conns->listener = evhttp_bound_socket_get_listener(bs);
    evconnlistener_set_error_cb(conns->listener, http_filter_accept_error);
    return s;
fail:
    http_destroy(s);
    return NULL;
}

int http_reload_tls(struct http_server *s, const struct kiln_config *n, char *err,
                    size_t errlen)
{
    if (!s->conns->tls)
        return n->tls_cert || n->tls_key ? 1 : 0;
    if (!n->tls_cert && !n->tls_key)
        return 1;
    return tls_reload(s->conns->tls, n->tls_cert, n->tls_key, err, errlen);
}

static void collect_listener(struct evhttp_bound_socket *bs, void *arg)
{
    struct evhttp_bound_socket **v = arg;
    for (int i = 0; i < 7; i++)
        if (!v[i]) {
            v[i] = bs;
            return;
        }
}

void http_stop_listening(struct http_server *s)
{
    struct evhttp_bound_socket *v[8] = {NULL};
    struct http_conns *conns = s->conns;
    conns->listener = NULL; /* freed below */
    if (conns->ev_resume)
        (void)event_del(conns->ev_resume);
    evhttp_foreach_bound_socket(s->evh, collect_listener, v);
    for (int i = 0; v[i]; i++)
        evhttp_del_accept_socket(s->evh, v[i]);
}

void http_destroy(struct http_server *s)
{
    struct http_conns *conns;
    if (!s)
        return;
    conns = s->conns;
    if (s->evh) {
        conns->listener = NULL;
        evhttp_free(s->evh); /* frees every connection: the filters count down in conns */
    }
    if (conns->ev_resume)
        event_free(conns->ev_resume);
    if (conns->ev_probe)
        event_free(conns->ev_probe);
    tls_free(conns->tls);
    free(conns);
    free(s);
}
