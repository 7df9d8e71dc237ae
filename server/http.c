/* evhttp set-up for the front: bind, limits and the one callback. Routing and answers are
 * api.c's; connection-close tracking is request.c's. */
#include "http.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <event2/http.h>

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

struct evhttp *http_create(struct event_base *base, const struct kiln_config *cfg,
                           void (*cb)(struct evhttp_request *, void *), void *arg,
                           uint16_t *port)
{
    struct evhttp *http = evhttp_new(base);
    struct evhttp_bound_socket *bs;
    int err;

    if (!http) {
        log_error("evhttp_new failed");
        return NULL;
    }
    /* Requests over the limits are refused by http_filter.c's guard, in the API's JSON,
     * before libevent reads them; libevent's own limits (which it answers in HTML) stay a
     * little above as a backstop. */
    evhttp_set_max_body_size(http, (ev_ssize_t)(cfg->max_body_bytes + HTTP_FILTER_BACKSTOP));
    evhttp_set_max_headers_size(http, (ev_ssize_t)cfg->max_header_bytes + HTTP_FILTER_BACKSTOP);
    http_filter_install(http, cfg);
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
    return http;
fail:
    evhttp_free(http);
    return NULL;
}

void http_destroy(struct evhttp *http)
{
    if (http)
        evhttp_free(http);
}
