/* A set of 64-bit block keys: open addressing, linear probing, deletion by backward shift;
 * it doubles past half full. */
#include "prefix_index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_hash.h"

struct prefix_index {
    uint64_t *slot; /* 0: empty (keys are never 0) */
    size_t cap, n;  /* cap a power of two */
};

struct prefix_index *prefix_index_create(void)
{
    struct prefix_index *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->cap = 1024;
    if (!(x->slot = calloc(x->cap, sizeof(uint64_t)))) {
        free(x);
        return NULL;
    }
    return x;
}

void prefix_index_destroy(struct prefix_index *x)
{
    if (!x)
        return;
    free(x->slot);
    free(x);
}

static size_t home(const struct prefix_index *x, uint64_t h)
{
    return (size_t)(h ^ (h >> 32)) & (x->cap - 1);
}

static bool has(const struct prefix_index *x, uint64_t h)
{
    for (size_t i = home(x, h);; i = (i + 1) & (x->cap - 1)) {
        if (x->slot[i] == h)
            return true;
        if (x->slot[i] == 0)
            return false;
    }
}

static void put(uint64_t *slot, size_t cap, uint64_t h)
{
    size_t i = (size_t)(h ^ (h >> 32)) & (cap - 1);
    while (slot[i] && slot[i] != h)
        i = (i + 1) & (cap - 1);
    slot[i] = h;
}

int prefix_index_add(struct prefix_index *x, uint64_t h)
{
    if (h == 0 || has(x, h))
        return 0;
    if ((x->n + 1) * 2 > x->cap) {
        size_t cap = x->cap * 2;
        uint64_t *s = calloc(cap, sizeof(uint64_t));
        if (!s)
            return -ENOMEM;
        for (size_t i = 0; i < x->cap; i++)
            if (x->slot[i])
                put(s, cap, x->slot[i]);
        free(x->slot);
        x->slot = s;
        x->cap = cap;
    }
    put(x->slot, x->cap, h);
    x->n++;
    return 0;
}

void prefix_index_remove(struct prefix_index *x, uint64_t h)
{
    size_t mask = x->cap - 1, i = home(x, h);

    if (h == 0)
        return;
    while (x->slot[i] != h) {
        if (x->slot[i] == 0)
            return;
        i = (i + 1) & mask;
    }
    x->slot[i] = 0;
    x->n--;
    /* backward shift: move up each later entry of the run whose home is not in (i, j] */
    for (size_t j = (i + 1) & mask; x->slot[j]; j = (j + 1) & mask) {
        size_t k = home(x, x->slot[j]);
        if (((j - k) & mask) >= ((j - i) & mask)) {
            x->slot[i] = x->slot[j];
            x->slot[j] = 0;
            i = j;
        }
    }
}

void prefix_index_clear(struct prefix_index *x)
{
    memset(x->slot, 0, x->cap * sizeof(uint64_t));
    x->n = 0;
}

size_t prefix_index_count(const struct prefix_index *x)
{
    return x->n;
}

uint32_t prefix_index_keys(const uint32_t *prompt, uint32_t n, uint64_t *out, uint32_t cap)
{
    uint32_t k = 0;
    uint64_t parent = 0;

    for (; k < cap && n > 0 && (k + 1) * KV_HASH_BLOCK <= n - 1; k++)
        out[k] = parent = kv_hash_block(parent, prompt + (size_t)k * KV_HASH_BLOCK);
    return k;
}

uint32_t prefix_index_match(const struct prefix_index *x, const uint64_t *keys, uint32_t n)
{
    uint32_t i = 0;
    while (i < n && has(x, keys[i]))
        i++;
    return i;
}

int prefix_route(const struct prefix_route_cand *c, int n, uint32_t slack,
                 enum prefix_route_reason *why)
{
    int least = 0, best = 0;

    for (int i = 1; i < n; i++) {
        if (c[i].used < c[least].used)
            least = i;
        if (c[i].match > c[best].match || (c[i].match == c[best].match && c[i].used < c[best].used))
            best = i;
    }
    if (c[best].match == 0) {
        *why = PREFIX_ROUTE_LEAST_LOADED;
        return least;
    }
    if (c[best].used > c[least].used + slack) {
        *why = PREFIX_ROUTE_BUSY;
        return least;
    }
    *why = PREFIX_ROUTE_PREFIX;
    return best;
}

const char *prefix_route_name(enum prefix_route_reason r)
{
    static const char *const names[PREFIX_ROUTE_COUNT] = {"prefix", "least_loaded", "busy"};
    return r < PREFIX_ROUTE_COUNT ? names[r] : "unknown";
}

uint32_t prefix_route_slack(uint32_t max_sequences)
{
    return max_sequences / 2 > 2 ? max_sequences / 2 : 2;
}
