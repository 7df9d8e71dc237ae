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

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "api.h"
#include "config.h"
#include "http_guard.h"
#include "log.h"

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

/* One per connection; owned by the filter bufferevent (freed by its free_context). Touched only
 * from the event loop's thread. */
struct http_filter {
    struct http_guard guard;
    struct bufferevent *under; /* the socket */
    struct bufferevent *bev;   /* the filter evhttp reads and writes */
    struct event *ev;          /* the refusal's steps: activated, then the linger timer */
    struct event *wev;         /* the socket can take more of evhttp's output */
    struct evbuffer_cb_entry *drain_cb; /* on under's output: tells when the refusal is sent */
    struct evbuffer_cb_entry *out_cb;   /* on the filter's output: evhttp wrote an answer */
    size_t pending;            /* bytes at the front of under's input fed to the guard, not passed */
    enum filter_phase phase;
    bool idle_seen;            /* REFUSE_WAIT: evhttp looked idle at the previous look */
    bool write_failed;         /* the socket refused evhttp's output: end the connection */
    bool flushing;             /* on_writable is flushing: filter_out may write */
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
        /* the answer is with the kernel: a FIN after it, then read until the client closes */
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
    if (f->guard.verdict != HTTP_GUARD_OK) {
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

static void filter_free(void *ctx)
{
    struct http_filter *f = ctx;
    if (f->out_cb)
        evbuffer_remove_cb_entry(bufferevent_get_output(f->bev), f->out_cb);
    if (f->drain_cb)
        evbuffer_remove_cb_entry(bufferevent_get_output(f->under), f->drain_cb);
    event_free(f->ev);
    event_free(f->wev);
    free(f);
}

/* evhttp's bevcb: the bufferevent of a new connection (evhttp sets its fd). NULL leaves
 * evhttp to make a plain one (only libevent's backstop limits then apply). */
static struct bufferevent *new_connection(struct event_base *base, void *arg)
{
    const struct kiln_config *cfg = arg;
    struct http_filter *f = calloc(1, sizeof(*f));

    if (!f)
        goto fail;
    http_guard_init(&f->guard, cfg->max_body_bytes, cfg->max_header_bytes);
    if (!(f->under = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE)))
        goto fail;
    if (!(f->ev = event_new(base, -1, 0, on_step, f)))
        goto fail;
    /* the fd is known only once evhttp sets it: wev is bound to it on first use */
    if (!(f->wev = event_new(base, -1, EV_WRITE, on_writable, f)))
        goto fail;
    if (!(f->drain_cb = evbuffer_add_cb(bufferevent_get_output(f->under), on_under_output, f)))
        goto fail;
    f->bev = bufferevent_filter_new(f->under, filter_in, filter_out, BEV_OPT_CLOSE_ON_FREE,
                                    filter_free, f);
    if (!f->bev)
        goto fail;
    /* from here the filter owns f and the socket bufferevent */
    if (!(f->out_cb = evbuffer_add_cb(bufferevent_get_output(f->bev), on_out_added, f))) {
        bufferevent_free(f->bev);
        log_error("http: no memory for a guarded connection");
        return NULL;
    }
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
        free(f);
    }
    return NULL;
}

void http_filter_install(struct evhttp *http, const struct kiln_config *cfg)
{
    /* evhttp takes a non-const argument; new_connection only reads it */
    evhttp_set_bevcb(http, new_connection, (void *)cfg);
}
