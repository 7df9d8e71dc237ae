/* Helpers the benchmarks share: a monotonic clock in seconds and the machine's memory read
 * bandwidth, against which decode speed is judged (bytes of weights per token). */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

/* Monotonic time in seconds. */
double bench_now(void);

/* GB/s of a plain one-thread read loop over 512 MiB, the best of three; 0 when the buffer
 * cannot be allocated. */
double bench_read_bandwidth(void);

#endif
