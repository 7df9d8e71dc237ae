/* The HTTP listener: libevent's evhttp bound on --host/--port with the front's limits
 * (body size, methods, timeouts), every request handed to one callback. */
#ifndef HTTP_H
#define HTTP_H

#include <stdint.h>

struct evhttp;
struct evhttp_request;
struct event_base;
struct kiln_config;
struct metrics;
struct http_conns;

/* Bind and listen; *port gets the bound port (useful with --port 0), *conns the connection
 * count that pauses the listener at --max-connections (config_max_connections of the fd
 * limit). Returns NULL with a message logged. */
struct evhttp *http_create(struct event_base *base, const struct kiln_config *cfg,
                           struct metrics *metrics, void (*cb)(struct evhttp_request *, void *),
                           void *arg, uint16_t *port, struct http_conns **conns);

/* Close the listening sockets: new connections are refused from now on. */
void http_stop_listening(struct evhttp *http, struct http_conns *conns);

/* Stop listening and close every connection. NULL is fine. */
void http_destroy(struct evhttp *http, struct http_conns *conns);

#endif
