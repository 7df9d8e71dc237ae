/* evhttp set-up for the front: bind, limits and the one callback. Routing and answers are
 * api.c's; connection-close tracking is request.c's. */
#include "http.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "config.h"
#include "http_filter.h"
#include "log.h"

/* Seconds a connection may sit without reading or writing: idle keep-alive connections and
 * clients that stop reading are dropped after it; a queued request is not affected since
 * libevent does not read while a request is being handled. */
#define HTTP_TIMEOUT_S 600

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

struct evhttp *http_create(struct event_base *base, const struct kiln_config *cfg,
                           struct metrics *metrics, void (*cb)(struct evhttp_request *, void *),
                           void *arg, uint16_t *port, struct http_conns **conns_out)
{
    struct evhttp *http = evhttp_new(base);
    struct http_conns *conns = calloc(1, sizeof(*conns));
    struct evhttp_bound_socket *bs;
    uint64_t limit = fd_limit();
    int err;

    if (!http || !conns || http_conns_init(conns, base) < 0) {
        log_error("evhttp_new failed");
        goto fail;
    }
    conns->cfg = cfg;
    conns->metrics = metrics;
    conns->max = config_max_connections(cfg, limit);
    log_info("at most %u connections (fd limit %llu, %u fds kept for %u worker(s) and the "
             "front)",
             conns->max, (unsigned long long)limit,
             cfg->workers * CONFIG_FDS_PER_WORKER + CONFIG_FDS_RESERVED, cfg->workers);
    /* Requests over the limits are refused by http_filter.c's guard, in the API's JSON,
     * before libevent reads them; libevent's own limits (which it answers in HTML) stay a
     * little above as a backstop. */
    evhttp_set_max_body_size(http, (ev_ssize_t)(cfg->max_body_bytes + HTTP_FILTER_BACKSTOP));
    evhttp_set_max_headers_size(http, (ev_ssize_t)cfg->max_header_bytes + HTTP_FILTER_BACKSTOP);
    http_filter_install(http, conns);
    /* every method reaches the callback, which answers 405 itself in the API's shape */
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                         EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                         EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                         EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_timeout(http, HTTP_TIMEOUT_S);
    evhttp_set_gencb(http, cb, arg);
    bs = evhttp_bind_socket_with_handle(http, cfg->host, (ev_uint16_t)cfg->port);
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
    *conns_out = conns;
    return http;
fail:
    if (http)
        evhttp_free(http);
    http_destroy(NULL, conns);
    return NULL;
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

void http_stop_listening(struct evhttp *http, struct http_conns *conns)
{
    struct evhttp_bound_socket *v[8] = {NULL};
    if (conns) {
        conns->listener = NULL; /* freed below */
        if (conns->ev_resume)
            (void)event_del(conns->ev_resume);
    }
    evhttp_foreach_bound_socket(http, collect_listener, v);
    for (int i = 0; v[i]; i++)
        evhttp_del_accept_socket(http, v[i]);
}

void http_destroy(struct evhttp *http, struct http_conns *conns)
{
    if (http) {
        if (conns)
            conns->listener = NULL;
        evhttp_free(http); /* frees every connection: the filters count down in conns */
    }
    if (conns) {
        if (conns->ev_resume)
            event_free(conns->ev_resume);
        if (conns->ev_probe)
            event_free(conns->ev_probe);
        free(conns);
    }
}
