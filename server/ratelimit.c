/* Token buckets in a fixed table: chained hashing over preallocated entries (indices, not
 * pointers) plus an LRU list; a new client past capacity takes the least recently seen
 * client's entry. Nothing is allocated after ratelimit_create(). Single-threaded (the
 * front's event loop). */
#include "ratelimit.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define NIL UINT32_MAX

struct rl_entry {
    uint64_t hash;
    uint64_t last_us; /* when tokens was last brought up to date */
    double tokens;    /* 0..burst */
    uint32_t chain;   /* next entry in the same hash bucket */
    uint32_t newer, older; /* LRU neighbours */
    char id[RATELIMIT_ID_MAX];
};

struct ratelimit {
    double rate;      /* tokens per second */
    double burst;
    uint32_t capacity, n;
    uint32_t mask;     /* n_buckets - 1 */
    uint32_t *buckets; /* head entry index, or NIL */
    struct rl_entry *e;
    uint32_t newest, oldest; /* LRU ends */
    uint64_t seed;
    uint64_t evictions;
};

/* Seeded FNV-1a with a final avalanche. The random seed keeps a client from choosing
 * identities (e.g. IPv6 addresses) that all land in one bucket; chains are bounded by the
 * capacity in any case. */
static uint64_t id_hash(const struct ratelimit *rl, const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull ^ rl->seed;

    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static uint64_t make_seed(const void *salt)
{
    uint64_t seed = 0;
    struct timespec ts;

    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed))
        return seed;
    /* No entropy yet (early boot): weaker, but still not known in advance to a client. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)salt;
}

struct ratelimit *ratelimit_create(double rate, uint32_t burst, uint32_t capacity)
{
    struct ratelimit *rl;
    uint32_t nb = 1;

    if (!(rate > 0.0) || !isfinite(rate) || burst == 0 || capacity == 0 ||
        capacity > (UINT32_MAX >> 2)) {
        errno = EINVAL;
        return NULL;
    }
    while (nb < capacity * 2u)
        nb <<= 1;
    if (!(rl = calloc(1, sizeof(*rl))))
        goto fail;
    rl->buckets = malloc(nb * sizeof(*rl->buckets));
    rl->e = calloc(capacity, sizeof(*rl->e));
    if (!rl->buckets || !rl->e)
        goto fail;
    for (uint32_t i = 0; i < nb; i++)
        rl->buckets[i] = NIL;
    rl->rate = rate;
    rl->burst = burst;
    rl->capacity = capacity;
    rl->mask = nb - 1;
    rl->newest = rl->oldest = NIL;
    rl->seed = make_seed(rl);
    return rl;
fail:
    ratelimit_destroy(rl);
    errno = ENOMEM;
    return NULL;
}

void ratelimit_destroy(struct ratelimit *rl)
{
    if (!rl)
        return;
    free(rl->buckets);
    free(rl->e);
    free(rl);
}

size_t ratelimit_size(const struct ratelimit *rl)
{
    return rl->n;
}

uint64_t ratelimit_evictions(const struct ratelimit *rl)
{
    return rl->evictions;
}

static void lru_unlink(struct ratelimit *rl, uint32_t i)
{
    struct rl_entry *x = &rl->e[i];

    if (x->newer != NIL)
        rl->e[x->newer].older = x->older;
    else
        rl->newest = x->older;
    if (x->older != NIL)
        rl->e[x->older].newer = x->newer;
    else
        rl->oldest = x->newer;
}

static void lru_push_newest(struct ratelimit *rl, uint32_t i)
{
    struct rl_entry *x = &rl->e[i];

    x->newer = NIL;
    x->older = rl->newest;
    if (rl->newest != NIL)
        rl->e[rl->newest].newer = i;
    rl->newest = i;
    if (rl->oldest == NIL)
        rl->oldest = i;
}

static void chain_unlink(struct ratelimit *rl, uint32_t i)
{
    uint32_t *p = &rl->buckets[rl->e[i].hash & rl->mask];

    while (*p != i)
        p = &rl->e[*p].chain;
    *p = rl->e[i].chain;
}

/* The entry for id, made (possibly by evicting the oldest) when unknown; it becomes the
 * newest either way. */
static struct rl_entry *entry_get(struct ratelimit *rl, const char *id, size_t len,
                                  uint64_t now_us)
{
    uint64_t h = id_hash(rl, id);
    uint32_t *head = &rl->buckets[h & rl->mask];
    uint32_t i;
    struct rl_entry *x;

    for (i = *head; i != NIL; i = rl->e[i].chain) {
        if (rl->e[i].hash == h && strcmp(rl->e[i].id, id) == 0) {
            lru_unlink(rl, i);
            lru_push_newest(rl, i);
            return &rl->e[i];
        }
    }
    if (rl->n < rl->capacity) {
        i = rl->n++;
    } else {
        /* The least recently seen client: if its bucket has refilled, nothing is lost. */
        i = rl->oldest;
        lru_unlink(rl, i);
        chain_unlink(rl, i);
        rl->evictions++;
    }
    x = &rl->e[i];
    x->hash = h;
    x->last_us = now_us;
    x->tokens = rl->burst;
    memcpy(x->id, id, len + 1);
    x->chain = *head;
    *head = i;
    lru_push_newest(rl, i);
    return x;
}

int ratelimit_take(struct ratelimit *rl, const char *identity, uint64_t now_us,
                   uint32_t *retry_after_s)
{
    size_t len = strnlen(identity, RATELIMIT_ID_MAX);
    struct rl_entry *x;
    double wait;

    if (len == 0 || len >= RATELIMIT_ID_MAX)
        return -EINVAL;
    x = entry_get(rl, identity, len, now_us);
    if (now_us > x->last_us) {
        double add = (double)(now_us - x->last_us) * rl->rate / 1e6;

        x->tokens = add >= rl->burst - x->tokens ? rl->burst : x->tokens + add;
        x->last_us = now_us;
    }
    /* The epsilon absorbs rounding in rate * elapsed, so a token due exactly now counts. */
    if (x->tokens >= 1.0 - 1e-9) {
        x->tokens = x->tokens >= 1.0 ? x->tokens - 1.0 : 0.0;
        return 0;
    }
    wait = ceil((1.0 - x->tokens) / rl->rate - 1e-9);
    *retry_after_s = wait < 1.0 ? 1u : wait >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)wait;
    return -EAGAIN;
}

int ratelimit_identity(char *buf, size_t cap, int key_index, const char *addr)
{
    int n;

    if (key_index >= 0 && key_index < INT_MAX)
        n = snprintf(buf, cap, "k%d", key_index);
    else
        n = snprintf(buf, cap, "a%s", addr ? addr : "");
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}
