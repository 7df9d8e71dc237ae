/* Per-client token buckets for the front: `rate` requests per second with bursts of up to
 * `burst`, keyed by a client identity string (the API key's index when keys are configured,
 * the client address otherwise). A fixed-capacity table allocated once; when it is full the
 * least recently seen client is forgotten, so many addresses cannot grow memory. The clock
 * is passed in (microseconds), which keeps the module testable without sleeping. */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

/* Longest identity, including its NUL ("k4294967295", "a" + an IPv6 address fit). */
#define RATELIMIT_ID_MAX 64

struct ratelimit;

/* A limiter of rate tokens per second (> 0, may be fractional), buckets of burst tokens
 * (>= 1; a new client starts full), remembering at most capacity clients (>= 1). Everything
 * is allocated here. Returns NULL with errno EINVAL (bad parameters) or ENOMEM. */
struct ratelimit *ratelimit_create(double rate, uint32_t burst, uint32_t capacity);
/* Free it. NULL is fine. */
void ratelimit_destroy(struct ratelimit *rl);

/* Take one token from identity's bucket at time now_us (any monotonic microsecond clock,
 * e.g. hist_now_us(); a clock that steps back adds nothing). Returns 0 when the request may
 * go, -EAGAIN when it must be refused (answer 429) with *retry_after_s set to the whole
 * seconds until a token is there (>= 1, for Retry-After), or -EINVAL when identity is empty
 * or RATELIMIT_ID_MAX bytes or longer. An unknown identity may evict the least recently
 * seen one, which then starts again with a full bucket. */
int ratelimit_take(struct ratelimit *rl, const char *identity, uint64_t now_us,
                   uint32_t *retry_after_s);

/* Clients remembered now (<= capacity), and clients forgotten to make room, ever. */
size_t ratelimit_size(const struct ratelimit *rl);
uint64_t ratelimit_evictions(const struct ratelimit *rl);

/* Write the identity for a request: "k<index>" when key_index is an API key's index
 * (0 <= key_index < AUTH_OPEN from auth_check_request()), else "a<addr>". Returns 0 or
 * -ENAMETOOLONG when it does not fit in cap (at most RATELIMIT_ID_MAX is needed). */
int ratelimit_identity(char *buf, size_t cap, int key_index, const char *addr);

#endif
