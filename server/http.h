/* The HTTP listener: libevent's evhttp bound on --host/--port with the front's limits
 * (body size, methods, timeouts), every request handed to one callback. */
#ifndef HTTP_H
#define HTTP_H

#include <stdint.h>

struct evhttp;
struct evhttp_request;
struct event_base;
struct kiln_config;

/* Bind and listen; *port gets the bound port (useful with --port 0). Returns NULL with a
 * message logged. */
struct evhttp *http_create(struct event_base *base, const struct kiln_config *cfg,
                           void (*cb)(struct evhttp_request *, void *), void *arg,
                           uint16_t *port);

/* Stop listening and close every connection. NULL is fine. */
void http_destroy(struct evhttp *http);

#endif
