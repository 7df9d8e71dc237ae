/* Latency histograms with fixed log-spaced buckets, in microseconds. No pointers, so one can
 * live in shared memory (the worker writes, the front reads) or in the front's own memory. */
#ifndef HIST_H
#define HIST_H

#include <stdatomic.h>
#include <stdint.h>

/* Upper bounds of the buckets, in microseconds; the last bucket is unbounded (+Inf). */
#define HIST_BUCKETS 24
extern const uint64_t hist_bounds_us[HIST_BUCKETS - 1];

/* One writer; readers in any process see counts that may be one observation apart. */
struct hist {
    _Atomic uint64_t count[HIST_BUCKETS];
    _Atomic uint64_t total;
    _Atomic uint64_t sum_us;
};

void hist_init(struct hist *h);
void hist_observe(struct hist *h, uint64_t us);

/* The q quantile (0 < q <= 1), as the upper bound of its bucket, in microseconds; 0 when
 * empty. */
uint64_t hist_quantile(const struct hist *h, double q);

/* Monotonic time in microseconds. */
uint64_t hist_now_us(void);

#endif
