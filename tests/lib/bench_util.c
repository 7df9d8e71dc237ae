/* Helpers the benchmarks share; see bench_util.h. */
#include "bench_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_read_bandwidth(void)
{
    size_t n = (512u << 20) / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof(uint64_t));
    double best = 0.0;
    volatile uint64_t sink;

    if (!buf)
        return 0.0;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    for (int r = 0; r < 3; r++) {
        /* four independent sums, so the loop is bound by memory, not by one add chain */
        uint64_t a = 0, b = 0, c = 0, d = 0;
        double t0 = bench_now(), gbs;
        for (size_t i = 0; i < n; i += 4) {
            a += buf[i];
            b += buf[i + 1];
            c += buf[i + 2];
            d += buf[i + 3];
        }
        gbs = (double)(n * sizeof(uint64_t)) / (bench_now() - t0) / 1e9;
        sink = a + b + c + d;
        if (gbs > best)
            best = gbs;
    }
    (void)sink;
    free(buf);
    return best;
}
