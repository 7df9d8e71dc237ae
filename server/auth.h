/* API keys for the front: a set gathered from --api-key flags, an --api-key-file and the
 * KILN_API_KEYS variable, a "Bearer KEY" check in constant time, and which routes need a
 * key. No I/O beyond reading the key file; the caller logs and answers 401. */
#ifndef AUTH_H
#define AUTH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest key accepted. Every comparison covers this many bytes whatever the lengths, so
 * timing says nothing about a key's length or content. */
#define AUTH_KEY_MAX 128

/* auth_check()'s result when the request passes without a key (none are configured, or the
 * route is open): not a key index, so rate limiting falls back to the client address. */
#define AUTH_OPEN INT_MAX

struct auth_key {
    uint32_t len;
    unsigned char bytes[AUTH_KEY_MAX]; /* zero past len */
};

/* Caller storage; zero-initialise with auth_init(), release with auth_free(). */
struct auth {
    struct auth_key *keys; /* n_keys of them; the index is the key's identity */
    size_t n_keys, cap;
    struct auth_key metrics_key; /* used when has_metrics_key */
    bool has_metrics_key;
};

void auth_init(struct auth *a);
/* Wipe and free the keys. Safe twice. */
void auth_free(struct auth *a);

/* Add one key (len bytes; surrounding whitespace trimmed). A key already present is not
 * added again. Returns its index (>= 0), -EINVAL when it is empty, longer than AUTH_KEY_MAX,
 * or holds whitespace or control characters, or -ENOMEM. */
int auth_add_key(struct auth *a, const char *key, size_t len);

/* Add every key of a file: one per line, whitespace trimmed, blank lines and lines whose
 * first non-blank character is '#' ignored. Returns the number of lines that gave a key, or
 * -errno (-EINVAL with "path:line: why" in err for a bad key; keys before it stay added). */
int auth_load_file(struct auth *a, const char *path, char *err, size_t errlen);

/* Add the comma-separated keys of value (e.g. getenv("KILN_API_KEYS"); NULL adds nothing;
 * empty items are skipped). Returns the number added or -EINVAL / -ENOMEM. */
int auth_load_list(struct auth *a, const char *value);

/* Require key (as auth_add_key validates it) on /metrics. Returns 0 or -EINVAL. */
int auth_set_metrics_key(struct auth *a, const char *key);

/* Whether any API key is configured (otherwise every route is open). */
bool auth_enabled(const struct auth *a);

/* Check an Authorization header value ("Bearer KEY": scheme case-insensitive, blanks around
 * either part allowed; NULL means no header) against every key in constant time. Returns the
 * matching key's index, AUTH_OPEN when no keys are configured, or -EACCES. */
int auth_check(const struct auth *a, const char *authorization);

/* Whether path (a query string after '?' is ignored) needs a credential. With API keys
 * configured, every path under /v1/ (known or not: deny by default there), /tokenize and
 * /detokenize need one; other paths are not the API's (the front answers 404 to them).
 * /metrics needs the metrics key when one is set, and nothing otherwise; /health is always
 * open. */
bool auth_route_needs_key(const struct auth *a, const char *path);

/* The whole decision for one request: the key's index for a route that needs an API key and
 * got one, AUTH_OPEN for an open route (or no keys configured, or /metrics with the right
 * metrics key), or -EACCES (answer 401 with "WWW-Authenticate: Bearer"). */
int auth_check_request(const struct auth *a, const char *path, const char *authorization);

/* Whether a caller may see /health's details (PIDs, exit causes, stderr lines): always
 * without keys; with a metrics key, that key; with API keys only, any of them. */
bool auth_may_see_details(const struct auth *a, const char *authorization);

#endif
