/* X-Request-Id: taken from the client (or the balancer in front, e.g. nginx's $request_id)
 * when it is a sane token, else made; returned in the response's headers either way, so a
 * client, a balancer and kiln can name the same request. */
#ifndef REQUEST_ID_H
#define REQUEST_ID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http_req;

/* Longest id taken from a client; a longer one is replaced by a made one. */
#define REQUEST_ID_MAX 128

/* Whether s is an id we take: 1..REQUEST_ID_MAX bytes of [A-Za-z0-9._:-]. */
bool request_id_valid(const char *s);

/* The id of http (the client's when valid, else one made from salt and seq: 32 hex digits)
 * into out (at least REQUEST_ID_MAX + 1 bytes), and set as its X-Request-Id response header. */
void request_id_assign(struct http_req *http, uint64_t salt, uint64_t seq, char *out,
                       size_t cap);

#endif
