/* The front's view of one worker's KV cache: the set of block keys (kv_hash.h) the worker
 * reported as cached (CACHE records: added, evicted, or a reset when its report overflowed),
 * and the routing rule that uses it (DESIGN "Prompt reuse"). Dropped when the worker dies.
 * Single-threaded (the front's loop). */
#ifndef PREFIX_INDEX_H
#define PREFIX_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct prefix_index;

/* Returns NULL when out of memory. */
struct prefix_index *prefix_index_create(void);
void prefix_index_destroy(struct prefix_index *x);

/* Adds key h (no-op if present). Returns 0 or -ENOMEM (the set is left as it was). */
int prefix_index_add(struct prefix_index *x, uint64_t h);
void prefix_index_remove(struct prefix_index *x, uint64_t h);
void prefix_index_clear(struct prefix_index *x);
size_t prefix_index_count(const struct prefix_index *x);

/* The keys of the prompt's blocks a worker could link (the first (n - 1) / 16, as the worker
 * always computes the last prompt token), at most cap, into out. Returns how many. */
uint32_t prefix_index_keys(const uint32_t *prompt, uint32_t n, uint64_t *out, uint32_t cap);

/* How many of keys[0..n), from the first, x holds. */
uint32_t prefix_index_match(const struct prefix_index *x, const uint64_t *keys, uint32_t n);

/* The routing rule. Among the workers that may take a job now (each with its running
 * sequences and the blocks of the prompt its cache holds): the one with the longest cached
 * prefix (ties: fewer running, then the first), unless it runs more than slack sequences
 * more than the least loaded, which then gets the job; with no cached prefix anywhere, the
 * least loaded (ties: the first). */
enum prefix_route_reason {
    PREFIX_ROUTE_PREFIX,       /* the longest cached prefix */
    PREFIX_ROUTE_LEAST_LOADED, /* no worker holds a prefix of it */
    PREFIX_ROUTE_BUSY,         /* the one holding its prefix was much busier */
    PREFIX_ROUTE_COUNT
};

struct prefix_route_cand {
    uint32_t used;  /* sequences running */
    uint32_t match; /* leading blocks of the prompt cached */
};

/* The index in c (n >= 1) of the worker for the job; *why says which rule chose it. */
int prefix_route(const struct prefix_route_cand *c, int n, uint32_t slack,
                 enum prefix_route_reason *why);

/* "prefix", "least_loaded", "busy". */
const char *prefix_route_name(enum prefix_route_reason r);

/* The slack for workers of max_sequences slots: max(2, max_sequences / 2). */
uint32_t prefix_route_slack(uint32_t max_sequences);

#endif
