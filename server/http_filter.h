/* Every connection of the front's evhttp goes through a filtering bufferevent that runs
 * http_guard over the request bytes: a request over --max-body-bytes or --max-header-bytes
 * (or with framing the guard cannot follow) never reaches libevent; the filter answers it
 * itself with an OpenAI-shaped JSON error (413, 431, 400) and Connection: close, after the
 * answers to the requests pipelined before it. */
#ifndef HTTP_FILTER_H
#define HTTP_FILTER_H

struct evhttp;
struct kiln_config;

/* How far above the guard's limits libevent's own limits are set: a backstop the guard
 * always reaches first (it counts line ends too, libevent does not). */
#define HTTP_FILTER_BACKSTOP 1024

/* Make every new connection of http a guarded one, with cfg's limits. cfg must outlive
 * http. */
void http_filter_install(struct evhttp *http, const struct kiln_config *cfg);

#endif
