/* The per-connection glue between libevent and http_guard: a socket bufferevent wrapped in a
 * filter whose input side feeds the guard and passes bytes on unchanged, holding back a header
 * block until it is whole. On a verdict it passes the requests before the bad one, drops the
 * rest, waits until evhttp has answered them (it reads again with nothing left to read), writes
 * its own answer to the socket, shuts the write side once that drained, and ends the
 * connection when the client closes or after a short linger. It parses nothing itself. */
#include "http_filter.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include "access_log.h"
#include "api.h"
#include "config.h"
#include "hist.h"
#include "http_guard.h"
#include "log.h"
#include "metrics.h"
#include "tls.h"

/* After the refusal is written, how long the client may keep sending before the connection
 * is closed: reading (and dropping) meanwhile keeps a close with unread input from turning
 * into a reset that could destroy the answer before the client reads it. */
#define HTTP_FILTER_LINGER_S 2

enum filter_phase {
    FILTER_PASS,         /* following requests */
    FILTER_REFUSE_WAIT,  /* a verdict: waiting for evhttp to answer the requests before it */
    FILTER_REFUSE_DRAIN, /* the refusal is written: waiting for the socket to take it */
    FILTER_LINGER,       /* write side shut: dropping input until close or the linger ends */
};

/* Which deadline the connection's timer runs. */
enum filter_deadline {
    DEADLINE_NONE,      /* evhttp is answering a request */
    DEADLINE_HEADER,    /* a request's line and headers (from its first byte, or the accept) */
    DEADLINE_BODY,      /* its body, once the headers came */
    DEADLINE_KEEPALIVE, /* the answer went out: idle until the next request */
};

/* Accepting again after an accept() error (EMFILE and the like), in ms. */
#define HTTP_FILTER_ACCEPT_BACKOFF_MS 100
/* The loop-lag probe's period, in ms. */
#define HTTP_FILTER_PROBE_MS 10

/* One per connection; owned by the filter bufferevent (freed by its free_context). Touched only
 * from the event loop's thread. */
struct http_filter {
    struct http_guard guard;
    struct bufferevent *under; /* the socket (a TLS bufferevent over it with --tls-cert) */
    struct bufferevent *bev;   /* the filter evhttp reads and writes */
    struct event *ev;          /* the refusal's steps: activated, then the linger timer */
    struct event *wev;         /* the socket can take more of evhttp's output */
    struct evbuffer_cb_entry *drain_cb; /* on under's output: tells when the refusal is sent */
    struct evbuffer_cb_entry *out_cb;   /* on the filter's output: evhttp wrote an answer */
    size_t pending;            /* bytes at the front of under's input fed to the guard, not passed */
    struct event *ev_deadline; /* the current deadline */
    struct http_conns *conns;
    enum filter_deadline deadline;
    enum filter_phase phase;
    uint64_t requests_seen;    /* guard.requests when the deadline was last set */
    bool idle_seen;            /* REFUSE_WAIT: evhttp looked idle at the previous look */
    bool write_failed;         /* the socket refused evhttp's output: end the connection */
    bool flushing;             /* on_writable is flushing: filter_out may write */
    bool tls;                  /* under is TLS: answers go through it (tls_out) */
    size_t in_flight;          /* TLS: bytes at the front of the output copied into under */
};

/* The refusal: status line, headers and the JSON error. Returns 0 or -ENOMEM. */
static int write_refusal(struct http_filter *f)
{
    const struct http_guard *g = &f->guard;
    int status = http_guard_status(g->verdict);
    char msg[192];
    const char *reason, *code;
    char *json;

    switch (g->verdict) {
    case HTTP_GUARD_BODY_TOO_LARGE:
        reason = "Payload Too Large";
        code = "request_too_large";
        snprintf(msg, sizeof(msg),
                 "the request body is larger than the server accepts (at most %llu bytes)",
                 (unsigned long long)g->max_body);
        break;
    case HTTP_GUARD_HEADERS_TOO_LARGE:
        reason = "Request Header Fields Too Large";
        code = "request_header_fields_too_large";
        snprintf(msg, sizeof(msg),
                 "the request headers are larger than the server accepts (at most %llu bytes)",
                 (unsigned long long)g->max_header);
        break;
    case HTTP_GUARD_TIMEOUT:
        reason = "Request Timeout";
        code = "request_timeout";
        snprintf(msg, sizeof(msg), "the %s did not arrive in time", g->why ? g->why : "request");
        break;
    case HTTP_GUARD_MALFORMED:
    default:
        reason = "Bad Request";
        code = NULL;
        snprintf(msg, sizeof(msg), "malformed HTTP request: %s", g->why ? g->why : "framing");
        break;
    }
    if (!(json = api_json_error("invalid_request_error", msg, NULL, code)))
        return -ENOMEM;
    int rc = evbuffer_add_printf(bufferevent_get_output(f->under),
                                 "HTTP/1.1 %d %s\r\n"
                                 "Content-Type: application/json\r\n"
                                 "Content-Length: %zu\r\n"
                                 "Connection: close\r\n"
                                 "\r\n"
                                 "%s\n",
                                 status, reason, strlen(json) + 1, json);
    free(json);
    if (rc >= 0) /* the API never saw it: its access line is written here */
        access_log_refused(bufferevent_getfd(f->under), status);
    return rc < 0 ? -ENOMEM : 0;
}

/* End the connection the way a client close would: evhttp frees it (and f with it). */
static void finish(struct http_filter *f)
{
    bufferevent_trigger_event(f->bev, BEV_EVENT_EOF | BEV_EVENT_READING, 0);
}

/* Whether evhttp has answered every request passed to it: it reads again (it stops reading
 * while a request is handled and answered) with nothing unsent, and nothing unread, unless the
 * refused request is the one it is reading (a chunked body past the limit: its last partial
 * chunk stays unread in evhttp's input). */
static bool evhttp_idle(const struct http_filter *f)
{
    return (bufferevent_get_enabled(f->bev) & EV_READ) &&
           evbuffer_get_length(bufferevent_get_output(f->bev)) == 0 &&
           (evbuffer_get_length(bufferevent_get_input(f->bev)) == 0 ||
            !f->guard.stopped_in_head);
}

static void on_step(evutil_socket_t fd, short what, void *arg)
{
    struct http_filter *f = arg;
    struct timeval linger = {HTTP_FILTER_LINGER_S, 0};
    (void)fd;
    (void)what;

    if (f->write_failed) {
        bufferevent_trigger_event(f->bev, BEV_EVENT_ERROR | BEV_EVENT_WRITING, 0);
        return; /* f is gone */
    }
    switch (f->phase) {
    case FILTER_REFUSE_WAIT:
        if (!evhttp_idle(f)) {
            f->idle_seen = false;
            return; /* the output filter activates us again as evhttp writes */
        }
        if (!f->idle_seen) {
            /* seen idle right after an answer, evhttp's own deferred read of the next
             * pipelined request may still be queued: look again after it */
            f->idle_seen = true;
            event_active(f->ev, EV_TIMEOUT, 0);
            return;
        }
        if (write_refusal(f) < 0) {
            log_error("http: no memory for a %d answer; closing the connection",
                      http_guard_status(f->guard.verdict));
            return finish(f);
        }
        f->phase = FILTER_REFUSE_DRAIN;
        return;
    case FILTER_REFUSE_DRAIN:
        if (evbuffer_get_length(bufferevent_get_output(f->under)) > 0)
            return;
        /* the answer is with the kernel: a FIN after it (after TLS's close_notify), then read
         * until the client closes */
        if (f->tls)
            (void)SSL_shutdown(bufferevent_openssl_get_ssl(f->under));
        (void)shutdown(bufferevent_getfd(f->under), SHUT_WR); /* a reset peer: EOF follows */
        f->phase = FILTER_LINGER;
        if (event_add(f->ev, &linger) < 0)
            finish(f);
        return;
    case FILTER_LINGER:
        return finish(f); /* the linger ended; f is gone after this */
    case FILTER_PASS:
    default:
        return;
    }
}

/* under's output changed: once the refusal has left it, take the next step. */
static void on_under_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_filter *f = arg;
    (void)info;
    if (f->phase == FILTER_REFUSE_DRAIN && evbuffer_get_length(buf) == 0)
        event_active(f->ev, EV_TIMEOUT, 0);
    if (f->in_flight && evbuffer_get_length(buf) == 0)
        event_active(f->wev, EV_WRITE, 0); /* TLS took the bytes in flight: flush on */
}

static void deadline_set(struct http_filter *f, enum filter_deadline d)
{
    const struct kiln_config *cfg = f->conns->cfg;
    uint32_t ms = 0;
    if (f->deadline == d)
        return; /* a running deadline is not pushed back by more bytes */
    f->deadline = d;
    (void)event_del(f->ev_deadline);
    switch (d) {
    case DEADLINE_HEADER:
        ms = cfg->header_timeout_ms;
        break;
    case DEADLINE_BODY:
        ms = cfg->body_timeout_ms;
        break;
    case DEADLINE_KEEPALIVE:
        ms = cfg->keepalive_timeout_ms;
        break;
    case DEADLINE_NONE:
    default:
        return;
    }
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    (void)event_add(f->ev_deadline, &tv);
}

/* Whether evhttp waits for a request (it stops reading while it answers one). */
static bool evhttp_reading(const struct http_filter *f)
{
    return (bufferevent_get_enabled(f->bev) & EV_READ) != 0;
}

/* After bytes came: a request being read runs the header deadline, then the body's; once
 * whole it is evhttp's to answer (no deadline until the answer went out). */
static void deadline_after_input(struct http_filter *f)
{
    if (f->guard.requests != f->requests_seen) {
        f->requests_seen = f->guard.requests;
        deadline_set(f, DEADLINE_NONE);
    }
    if (f->deadline == DEADLINE_NONE && !evhttp_reading(f))
        return; /* a pipelined request waits for the answer before it */
    if (http_guard_in_body(&f->guard))
        deadline_set(f, DEADLINE_BODY);
    else if (http_guard_in_request(&f->guard))
        deadline_set(f, DEADLINE_HEADER);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct http_filter *f = arg;
    struct metrics *m = f->conns->metrics;
    enum filter_deadline d = f->deadline;
    (void)fd;
    (void)what;
    f->deadline = DEADLINE_NONE;
    if (f->phase != FILTER_PASS)
        return;
    if (d == DEADLINE_KEEPALIVE) {
        if (http_guard_in_request(&f->guard))
            return deadline_set(f, DEADLINE_HEADER);
        /* still answering: an answer being written, or a stream waiting for its next token
         * (http_filter_hold_eof stopped reading the socket until it ends); the next write
         * re-arms */
        if (!evhttp_reading(f) || evbuffer_get_length(bufferevent_get_output(f->bev)) > 0 ||
            !(bufferevent_get_enabled(f->under) & EV_READ))
            return;
        metrics_count_dropped(m, METRICS_DROP_KEEPALIVE_TIMEOUT);
        return finish(f); /* f is gone */
    }
    if (d == DEADLINE_HEADER && !http_guard_in_request(&f->guard)) {
        /* connected and sent nothing: no request to answer */
        metrics_count_dropped(m, METRICS_DROP_HEADER_TIMEOUT);
        return finish(f);
    }
    metrics_count_dropped(m, d == DEADLINE_BODY ? METRICS_DROP_BODY_TIMEOUT
                                                : METRICS_DROP_HEADER_TIMEOUT);
    log_info("http: a request's %s did not arrive within %u ms; 408",
             d == DEADLINE_BODY ? "body" : "headers",
             d == DEADLINE_BODY ? f->conns->cfg->body_timeout_ms
                                : f->conns->cfg->header_timeout_ms);
    http_guard_timeout(&f->guard, d == DEADLINE_BODY ? "request body" : "request headers");
    f->pending = 0;
    f->phase = FILTER_REFUSE_WAIT;
    event_active(f->ev, EV_TIMEOUT, 0);
}

/* Feed the guard what it has not seen of src. */
static void feed(struct http_filter *f, struct evbuffer *src)
{
    size_t len = evbuffer_get_length(src);
    while (f->pending < len && f->guard.verdict == HTTP_GUARD_OK) {
        struct evbuffer_ptr pos;
        struct evbuffer_iovec v[4];
        int n, i;
        if (evbuffer_ptr_set(src, &pos, f->pending, EVBUFFER_PTR_SET) < 0)
            break;
        n = evbuffer_peek(src, (ev_ssize_t)(len - f->pending), &pos, v, 4);
        for (i = 0; i < n && i < 4; i++) {
            size_t used = http_guard_feed(&f->guard, v[i].iov_base, v[i].iov_len);
            f->pending += used;
            if (used < v[i].iov_len)
                break;
        }
        if (n <= 0)
            break;
    }
}

/* The input filter. dst_limit (evhttp sets no read watermark) is not needed: what is passed
 * is at most what the guard allows. */
static enum bufferevent_filter_result filter_in(struct evbuffer *src, struct evbuffer *dst,
                                                ev_ssize_t dst_limit,
                                                enum bufferevent_flush_mode mode, void *ctx)
{
    struct http_filter *f = ctx;
    uint64_t held;
    size_t pass;
    (void)dst_limit;
    (void)mode;

    if (f->phase != FILTER_PASS) {
        evbuffer_drain(src, evbuffer_get_length(src)); /* after a refusal nothing is read */
        return BEV_NEED_MORE;
    }
    feed(f, src);
    held = http_guard_held(&f->guard);
    pass = f->pending - (held < f->pending ? (size_t)held : f->pending);
    if (pass > 0 && evbuffer_remove_buffer(src, dst, pass) != (int)pass)
        return BEV_ERROR;
    f->pending -= pass;
    deadline_after_input(f);
    if (f->guard.verdict != HTTP_GUARD_OK) {
        deadline_set(f, DEADLINE_NONE);
        log_info("http: refusing a request with %d (%s)", http_guard_status(f->guard.verdict),
                 f->guard.why);
        evbuffer_drain(src, evbuffer_get_length(src));
        f->pending = 0;
        f->phase = FILTER_REFUSE_WAIT;
        event_active(f->ev, EV_TIMEOUT, 0);
    }
    return pass > 0 ? BEV_OK : BEV_NEED_MORE;
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct http_filter *f = arg;
    (void)fd;
    (void)what;
    f->flushing = true;
    bufferevent_flush(f->bev, EV_WRITE, BEV_NORMAL);
    f->flushing = false;
}

/* The output filter writes evhttp's answers straight to the socket, past the socket
 * bufferevent's buffer: evhttp takes an empty output for a sent answer and, on Connection:
 * close, shuts and frees the connection at once, which would lose bytes still queued in a
 * buffer below it. So the bytes leave evhttp's buffer only once the kernel has them, and what
 * the kernel cannot take yet waits there for wev. While a refusal waits its turn, each answer
 * written is a moment evhttp may have become idle.
 * It writes only when on_writable flushes, never from inside evhttp's evbuffer_add: a filter
 * that writes there calls evhttp's write callback (output drained) before evhttp has set what
 * it waits for, e.g. evhttp_send_reply_end adds the last chunk and only then waits for the
 * drain to finish the request; that drain would never come again and the connection would
 * hang (never read again, never closed). Deferred to the loop, the write callback comes after
 * evhttp has set it up, as it does for a socket. */
/* The output filter over TLS: the same rule (bytes leave evhttp's buffer only once the kernel
 * has them) with the TLS bufferevent as the way to the kernel. A piece is copied into it and
 * left in evhttp's buffer until the TLS bufferevent's output is empty again (SSL_write took
 * it: on a socket that means the kernel has it); then it is dropped and the next one goes. */
static enum bufferevent_filter_result tls_out(struct http_filter *f, struct evbuffer *src)
{
    struct evbuffer *out = bufferevent_get_output(f->under);
    if (evbuffer_get_length(out) > 0)
        return BEV_NEED_MORE; /* on_under_output flushes again once it is empty */
    if (f->in_flight) {
        (void)evbuffer_drain(src, f->in_flight);
        f->in_flight = 0;
    }
    size_t n = evbuffer_get_length(src);
    if (n > 0) {
        if (n > 65536)
            n = 65536;
        const unsigned char *p = evbuffer_pullup(src, (ev_ssize_t)n);
        if (!p || evbuffer_add(out, p, n) < 0) {
            f->write_failed = true;
            event_active(f->ev, EV_TIMEOUT, 0);
            return BEV_ERROR;
        }
        f->in_flight = n;
        if (evbuffer_get_length(out) == 0)
            event_active(f->wev, EV_WRITE, 0); /* taken at once: flush on from the loop */
        return BEV_NEED_MORE;
    }
    if (f->phase == FILTER_PASS && f->deadline == DEADLINE_NONE)
        deadline_set(f, DEADLINE_KEEPALIVE); /* an answer (or part of one) went out */
    return BEV_OK;
}

static enum bufferevent_filter_result filter_out(struct evbuffer *src, struct evbuffer *dst,
                                                 ev_ssize_t dst_limit,
                                                 enum bufferevent_flush_mode mode, void *ctx)
{
    struct http_filter *f = ctx;
    evutil_socket_t fd = bufferevent_getfd(f->under);
    (void)dst;
    (void)dst_limit;
    (void)mode;

    if (f->phase == FILTER_REFUSE_WAIT)
        event_active(f->ev, EV_TIMEOUT, 0);
    if (!f->flushing) {
        event_active(f->wev, EV_WRITE, 0); /* on_out_added did too; flush from the loop */
        return BEV_NEED_MORE;
    }
    if (f->tls)
        return tls_out(f, src);
    while (evbuffer_get_length(src) > 0) {
        if (evbuffer_write(src, fd) >= 0)
            continue;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (event_get_fd(f->wev) != fd) {
                (void)event_del(f->wev); /* event_assign wants it neither added nor active */
                (void)event_assign(f->wev, event_get_base(f->ev), fd, EV_WRITE, on_writable, f);
            }
            (void)event_add(f->wev, NULL); /* once writable, flush again */
            return BEV_NEED_MORE;
        }
        f->write_failed = true; /* the peer is gone: end it from the loop, not from here */
        event_active(f->ev, EV_TIMEOUT, 0);
        return BEV_ERROR;
    }
    if (f->phase == FILTER_PASS && f->deadline == DEADLINE_NONE)
        deadline_set(f, DEADLINE_KEEPALIVE); /* an answer (or part of one) went out */
    return BEV_OK;
}


/* evhttp adds an answer to the filter's output, at times while the filter's writing is
 * disabled, and enabling a filter's writing does not run it: flush once the loop is back. */
static void on_out_added(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct http_filter *f = arg;
    (void)buf;
    if (info->n_added > 0)
        event_active(f->wev, EV_WRITE, 0);
}

/* While a stream is answered, evhttp reads the socket only to learn of a close, and takes
 * an EOF for one; but a client may half-close (shut its sending side) and still read. So the
 * socket is not read meanwhile: a client that closed entirely is found by the writes (a reset
 * fails them), and its EOF is read once the answer is out. */
void http_filter_hold_eof(struct bufferevent *bev, bool hold)
{
    struct bufferevent *under = bev ? bufferevent_get_underlying(bev) : NULL;
    if (!under)
        return; /* a plain connection (no filter) */
    if (hold)
        (void)bufferevent_disable(under, EV_READ);
    else
        (void)bufferevent_enable(under, EV_READ);
}

/* ---- the connection count and the listener ---- */

static void listener_update(struct http_conns *c)
{
    bool want_off = c->at_limit || c->backing_off;
    if (!c->listener)
        return;
    if (want_off)
        (void)evconnlistener_disable(c->listener);
    else
        (void)evconnlistener_enable(c->listener);
}

/* The loop-lag probe: a timer due every HTTP_FILTER_PROBE_MS; how late it runs is how long
 * the loop was held by something else (one long callback, or many). It runs only while
 * connections are open, so an idle kiln does not wake for it. */
static void probe_arm(struct http_conns *c)
{
    struct timeval tv = {0, HTTP_FILTER_PROBE_MS * 1000};
    c->probe_due_us = hist_now_us() + HTTP_FILTER_PROBE_MS * 1000;
    (void)evtimer_add(c->ev_probe, &tv);
}

static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    struct http_conns *c = arg;
    uint64_t now = hist_now_us();
    (void)fd;
    (void)what;
    metrics_observe_loop_lag(c->metrics, now > c->probe_due_us ? now - c->probe_due_us : 0);
    if (c->open > 0)
        probe_arm(c);
}

static void conns_opened(struct http_conns *c)
{
    if (c->open == 0 && !evtimer_pending(c->ev_probe, NULL))
        probe_arm(c);
    c->open++;
    c->metrics->connections = c->open;
    if (c->open >= c->max && !c->at_limit) {
        c->at_limit = true;
        c->metrics->listener_paused++;
        log_warn("http: %u connections open (--max-connections): not accepting until one "
                 "closes", c->open);
        listener_update(c);
    }
}

static void conns_closed(struct http_conns *c)
{
    c->open--;
    c->metrics->connections = c->open;
    if (c->at_limit && c->open < c->max) {
        c->at_limit = false;
        listener_update(c);
    }
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct http_conns *c = arg;
    (void)fd;
    (void)what;
    c->backing_off = false;
    listener_update(c);
}

/* The front's connections, for the listener's error callback: libevent hands that callback
 * the listener's own user data, which for evhttp's listener is the struct evhttp, not ours.
 * One front has one set of connections. */
static struct http_conns *listener_conns;

void http_filter_accept_error(struct evconnlistener *l, void *arg)
{
    struct http_conns *c = listener_conns;
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval tv = {0, HTTP_FILTER_ACCEPT_BACKOFF_MS * 1000};
    (void)l;
    (void)arg; /* evhttp's */
    log_warn("http: accept() failed with %d connections open: %s; pausing the listener for "
             "%d ms",
             c->open, strerror(err), HTTP_FILTER_ACCEPT_BACKOFF_MS);
    c->backing_off = true;
    listener_update(c);
    (void)event_add(c->ev_resume, &tv);
}

static void filter_free(void *ctx)
{
    struct http_filter *f = ctx;
    if (f->out_cb)
        evbuffer_remove_cb_entry(bufferevent_get_output(f->bev), f->out_cb);
    if (f->drain_cb)
        evbuffer_remove_cb_entry(bufferevent_get_output(f->under), f->drain_cb);
    event_free(f->ev);
    event_free(f->wev);
    event_free(f->ev_deadline);
    conns_closed(f->conns);
    free(f);
}

/* evhttp's bevcb: the bufferevent of a new connection (evhttp sets its fd). NULL leaves
 * evhttp to make a plain one (only libevent's backstop limits then apply). */
static struct bufferevent *new_connection(struct event_base *base, void *arg)
{
    struct http_conns *c = arg;
    const struct kiln_config *cfg = c->cfg;
    struct http_filter *f = calloc(1, sizeof(*f));

    if (!f)
        goto fail;
    f->conns = c;
    http_guard_init(&f->guard, cfg->max_body_bytes, cfg->max_header_bytes);
    if (c->tls) {
        /* evhttp sets the fd through the filter; the handshake starts then */
        SSL *ssl = tls_new_ssl(c->tls);
        f->tls = true;
        if (!ssl)
            goto fail;
        if (!(f->under = bufferevent_openssl_socket_new(base, -1, ssl,
                                                        BUFFEREVENT_SSL_ACCEPTING,
                                                        BEV_OPT_CLOSE_ON_FREE |
                                                            BEV_OPT_DEFER_CALLBACKS))) {
            SSL_free(ssl);
            goto fail;
        }
        /* a client that closes without close_notify ends the connection as an EOF would */
        bufferevent_openssl_set_allow_dirty_shutdown(f->under, 1);
    } else if (!(f->under = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE))) {
        goto fail;
    }
    if (!(f->ev = event_new(base, -1, 0, on_step, f)))
        goto fail;
    /* the fd is known only once evhttp sets it: wev is bound to it on first use */
    if (!(f->wev = event_new(base, -1, EV_WRITE, on_writable, f)))
        goto fail;
    if (!(f->ev_deadline = evtimer_new(base, on_deadline, f)))
        goto fail;
    if (!(f->drain_cb = evbuffer_add_cb(bufferevent_get_output(f->under), on_under_output, f)))
        goto fail;
    f->bev = bufferevent_filter_new(f->under, filter_in, filter_out, BEV_OPT_CLOSE_ON_FREE,
                                    filter_free, f);
    if (!f->bev)
        goto fail;
    /* from here the filter owns f and the socket bufferevent (and counts as open) */
    conns_opened(c);
    if (!(f->out_cb = evbuffer_add_cb(bufferevent_get_output(f->bev), on_out_added, f))) {
        bufferevent_free(f->bev);
        log_error("http: no memory for a guarded connection");
        return NULL;
    }
    deadline_set(f, DEADLINE_HEADER); /* from the accept to the first request's headers */
    return f->bev;
fail:
    log_error("http: no memory for a guarded connection; it runs unguarded");
    if (f) {
        if (f->under)
            bufferevent_free(f->under);
        if (f->ev)
            event_free(f->ev);
        if (f->wev)
            event_free(f->wev);
        if (f->ev_deadline)
            event_free(f->ev_deadline);
        free(f);
    }
    return NULL;
}

void http_filter_install(struct evhttp *http, struct http_conns *c)
{
    evhttp_set_bevcb(http, new_connection, c);
}

int http_conns_init(struct http_conns *c, struct event_base *base)
{
    listener_conns = c;
    c->ev_resume = evtimer_new(base, on_accept_resume, c);
    c->ev_probe = evtimer_new(base, on_probe, c);
    return c->ev_resume && c->ev_probe ? 0 : -ENOMEM;
}
