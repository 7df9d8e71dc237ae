/* The front's HTTP server: the listener on --host/--port, the connection count that pauses it
 * at --max-connections, the pause after an accept() error, TLS, and the loop-lag probe. Each
 * accepted socket becomes an http_conn (http_conn.c), which frames requests with kiln's own
 * parser (http_parse.c); the request API is http_response.c's. */
#include "http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "config.h"
#include "hist.h"
#include "http_conn.h"
#include "log.h"
#include "metrics.h"
#include "tls.h"

/* ---- the connection count and the listener ---- */

static void listener_update(struct http_server *s)
{
    if (!s->listener)
        return;
    if (s->at_limit || s->backing_off)
        (void)evconnlistener_disable(s->listener);
    else
        (void)evconnlistener_enable(s->listener);
}

/* The loop-lag probe: a timer due every HTTP_PROBE_MS; how late it runs is how long the loop
 * was held by something else (one long callback, or many). It runs only while connections are
 * open, so an idle kiln does not wake for it. */
static void probe_arm(struct http_server *s)
{
    struct timeval tv = {0, HTTP_PROBE_MS * 1000};
    s->probe_due_us = hist_now_us() + HTTP_PROBE_MS * 1000;
    (void)evtimer_add(s->ev_probe, &tv);
}

static void on_probe(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    uint64_t now = hist_now_us();
    (void)fd;
    (void)what;
    metrics_observe_loop_lag(s->metrics, now > s->probe_due_us ? now - s->probe_due_us : 0);
    if (s->open > 0)
        probe_arm(s);
}

void http_server_conn_opened(struct http_server *s)
{
    if (s->open == 0 && !evtimer_pending(s->ev_probe, NULL))
        probe_arm(s);
    s->open++;
    s->metrics->connections = s->open;
    if (s->open >= s->max && !s->at_limit) {
        s->at_limit = true;
        s->metrics->listener_paused++;
        log_warn("http: %u connections open (--max-connections): not accepting until one "
                 "closes", s->open);
        listener_update(s);
    }
}

void http_server_conn_closed(struct http_server *s)
{
    s->open--;
    s->metrics->connections = s->open;
    if (s->at_limit && s->open < s->max) {
        s->at_limit = false;
        listener_update(s);
    }
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    (void)fd;
    (void)what;
    s->backing_off = false;
    listener_update(s);
}

/* accept() failed (no fd, no memory): pause the listener for a moment rather than spin; the
 * line is written once per pause, so at most ten times a second. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct http_server *s = arg;
    int err = EVUTIL_SOCKET_ERROR();
    struct timeval tv = {0, HTTP_ACCEPT_BACKOFF_MS * 1000};
    (void)l;
    log_warn("http: accept() failed with %u connections open: %s; pausing the listener for "
             "%d ms",
             s->open, strerror(err), HTTP_ACCEPT_BACKOFF_MS);
    s->backing_off = true;
    listener_update(s);
    (void)event_add(s->ev_resume, &tv);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    (void)l;
    (void)http_conn_new(arg, fd, sa, salen);
}

/* ---- the server ---- */

/* The fd limit in force (the soft one: `ulimit -n` is the operator's choice). */
static uint64_t fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 1024;
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_C(1) << 20 : (uint64_t)rl.rlim_cur;
}

/* Listen on host:port (the first address it resolves to that binds). */
static int listen_on(struct http_server *s, const char *host, uint32_t port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char serv[16];
    int rc, err = EADDRNOTAVAIL;
    snprintf(serv, sizeof(serv), "%u", port);
    if ((rc = getaddrinfo(host, serv, &hints, &res)) != 0) {
        log_error("cannot listen on %s:%u: %s", host ? host : "*", port, gai_strerror(rc));
        return -1;
    }
    for (struct addrinfo *ai = res; ai && !s->listener; ai = ai->ai_next) {
        s->listener = evconnlistener_new_bind(
            s->base, on_accept, s,
            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, -1, ai->ai_addr,
            (int)ai->ai_addrlen);
        if (!s->listener)
            err = errno;
    }
    freeaddrinfo(res);
    if (!s->listener) {
        log_error("cannot listen on %s:%u: %s", host ? host : "*", port, strerror(err));
        return -1;
    }
    /* at the limit, or when accept() fails (no fd), the listener pauses instead of spinning */
    evconnlistener_set_error_cb(s->listener, on_accept_error);
    return 0;
}

static int bound_port(struct evconnlistener *l, uint16_t *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    if (ss.ss_family == AF_INET)
        *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    else
        return -EAFNOSUPPORT;
    return 0;
}

struct http_server *http_create(struct event_base *base, const struct kiln_config *cfg,
                                struct metrics *metrics, http_handler cb, void *arg,
                                uint16_t *port)
{
    struct http_server *s = calloc(1, sizeof(*s));
    uint64_t limit = fd_limit();
    int err;

    if (!s) {
        log_error("http: out of memory");
        return NULL;
    }
    s->base = base;
    s->cfg = cfg;
    s->metrics = metrics;
    s->cb = cb;
    s->arg = arg;
    LIST_INIT(&s->conns);
    s->ev_resume = evtimer_new(base, on_accept_resume, s);
    s->ev_probe = evtimer_new(base, on_probe, s);
    if (!s->ev_resume || !s->ev_probe) {
        log_error("http: out of memory");
        goto fail;
    }
    if (cfg->tls_cert || cfg->tls_key) {
        char why[512];
        if (!(s->tls = tls_create(cfg->tls_cert, cfg->tls_key, why, sizeof(why)))) {
            log_error("%s", why);
            goto fail;
        }
        log_info("HTTPS with %s (TLS 1.2 and 1.3)", cfg->tls_cert);
    }
    s->max = config_max_connections(cfg, limit);
    log_info("at most %u connections (fd limit %llu, %u fds kept for %u worker(s) and the "
             "front)",
             s->max, (unsigned long long)limit,
             cfg->workers * CONFIG_FDS_PER_WORKER + CONFIG_FDS_RESERVED, cfg->workers);
    if (listen_on(s, cfg->host, cfg->port) < 0)
        goto fail;
    if ((err = bound_port(s->listener, port)) < 0) {
        log_error("getsockname: %s", strerror(-err));
        goto fail;
    }
    return s;
fail:
    http_destroy(s);
    return NULL;
}

int http_reload_tls(struct http_server *s, const struct kiln_config *n, char *err,
                    size_t errlen)
{
    if (!s->tls)
        return n->tls_cert || n->tls_key ? 1 : 0;
    if (!n->tls_cert && !n->tls_key)
        return 1;
    return tls_reload(s->tls, n->tls_cert, n->tls_key, err, errlen);
}

void http_stop_listening(struct http_server *s)
{
    if (s->ev_resume)
        (void)event_del(s->ev_resume);
    if (s->listener)
        evconnlistener_free(s->listener);
    s->listener = NULL;
}

void http_destroy(struct http_server *s)
{
    if (!s)
        return;
    http_stop_listening(s);
    while (!LIST_EMPTY(&s->conns))
        http_conn_drop(LIST_FIRST(&s->conns));
    if (s->ev_resume)
        event_free(s->ev_resume);
    if (s->ev_probe)
        event_free(s->ev_probe);
    tls_free(s->tls);
    free(s);
}
