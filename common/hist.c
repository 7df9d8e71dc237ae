/* Latency histograms: HIST_BUCKETS fixed, roughly log-spaced buckets from 50 us to 60 s, plus
 * +Inf. One writer per histogram; relaxed atomics, so a reader in another process sees counts at
 * most one observation apart. No allocation, no pointers (a hist may sit in shared memory). */
#include "hist.h"

#include <time.h>

/* Upper bounds in microseconds: 50 us, then about x1.8-x2.5 per step (a 1-2-5 style series),
 * up to 60 s; a 24th bucket holds everything above 60 s. */
const uint64_t hist_bounds_us[HIST_BUCKETS - 1] = {
    50,      100,     200,      500,      1000,     2000,     5000,     10000,
    20000,   50000,   100000,   200000,   350000,   500000,   750000,   1000000,
    1500000, 2500000, 5000000,  10000000, 20000000, 40000000, 60000000,
};

void hist_init(struct hist *h)
{
    for (int i = 0; i < HIST_BUCKETS; i++)
        atomic_init(&h->count[i], 0);
    atomic_init(&h->total, 0);
    atomic_init(&h->sum_us, 0);
}

void hist_observe(struct hist *h, uint64_t us)
{
    int i = 0;

    while (i < HIST_BUCKETS - 1 && us > hist_bounds_us[i])
        i++;
    /* Relaxed: each counter is monotonic and readers tolerate being one observation behind. */
    atomic_fetch_add_explicit(&h->count[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->total, 1, memory_order_relaxed);
}

uint64_t hist_quantile(const struct hist *h, double q)
{
    uint64_t counts[HIST_BUCKETS];
    uint64_t total = 0, seen = 0, rank;

    /* Sum our own snapshot of the buckets rather than trusting `total`, which a concurrent
     * writer may have updated at a different moment. */
    for (int i = 0; i < HIST_BUCKETS; i++) {
        counts[i] = atomic_load_explicit(&h->count[i], memory_order_relaxed);
        total += counts[i];
    }
    if (total == 0)
        return 0;
    if (!(q > 0.0))
        q = 1e-9;
    if (q > 1.0)
        q = 1.0;
    rank = (uint64_t)(q * (double)total + 0.999999999);
    if (rank < 1)
        rank = 1;
    if (rank > total)
        rank = total;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += counts[i];
        if (seen >= rank)
            return i < HIST_BUCKETS - 1 ? hist_bounds_us[i] : UINT64_MAX;
    }
    return UINT64_MAX;
}

uint64_t hist_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
