/* Every connection of the front's evhttp goes through a filtering bufferevent that runs
 * http_guard over the request bytes: a request over --max-body-bytes or --max-header-bytes
 * (or with framing the guard cannot follow) never reaches libevent; the filter answers it
 * itself with an OpenAI-shaped JSON error (413, 431, 400) and Connection: close, after the
 * answers to the requests pipelined before it. */
#ifndef HTTP_FILTER_H
#define HTTP_FILTER_H

#include <stdbool.h>
#include <stdint.h>

struct evhttp;
struct event;
struct event_base;
struct evconnlistener;
struct kiln_config;
struct metrics;
struct tls;

/* The front's connections: how many are open, the limit, and the listener that pauses at it.
 * Owned by http.c (http_create); read by the filter of each connection. */
struct http_conns {
    const struct kiln_config *cfg;
    struct metrics *metrics;
    struct evconnlistener *listener; /* NULL once kiln stopped listening */
    struct tls *tls;                 /* --tls-cert: connections speak TLS; NULL: plain */
    struct event *ev_resume;         /* after an accept error: try again later */
    struct event *ev_probe;          /* the loop-lag probe, while connections are open */
    uint64_t probe_due_us;
    uint32_t open, max;
    bool at_limit;                   /* the listener is disabled for the limit */
    bool backing_off;                /* ... or for an accept error */
};

/* How far above the guard's limits libevent's own limits are set: a backstop the guard
 * always reaches first (it counts line ends too, libevent does not). */
#define HTTP_FILTER_BACKSTOP 1024

/* Make every new connection of http a guarded one, with c's limits and deadlines
 * (--header-timeout-ms, --body-timeout-ms: 408 and close; --keepalive-timeout-ms: close),
 * counted in c (the listener pauses at c->max). c must outlive http. */
void http_filter_install(struct evhttp *http, struct http_conns *c);

/* Set up c's timer (c->cfg, metrics, max are the caller's). Returns 0 or -ENOMEM. */
int http_conns_init(struct http_conns *c, struct event_base *base);

/* While hold is set on a connection's bufferevent (evhttp's), its socket is not read, so a
 * client that half-closed (EOF) still gets the answer being streamed; one that closed
 * entirely is found by the writes. For request.c around a streamed answer. */
struct bufferevent;
void http_filter_hold_eof(struct bufferevent *bev, bool hold);

/* The listener's accept() failed (no fd, no memory): pause it for a moment rather than spin,
 * and say so at most once a second. For evconnlistener_set_error_cb (arg: the http_conns). */
void http_filter_accept_error(struct evconnlistener *l, void *arg);

#endif
