/* Helpers the benchmarks share: a monotonic clock in seconds and the machine's memory read
 * bandwidth, against which decode speed is judged (bytes of weights per token). */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

/* Monotonic time in seconds. */
double bench_now(void);

/* GB/s of a plain one-thread read loop over 512 MiB, the best of three; 0 when the buffer
 * cannot be allocated. cpu_gbs, unless NULL, gets the same bytes over the loop's thread CPU
 * seconds (best of three): what a thread reads while it runs, which other work time-sharing
 * the machine lowers less than the wall-clock figure. */
double bench_read_bandwidth(double *cpu_gbs);

/* Billions of int8 multiply-adds per second of CPU time (so a machine shared with other
 * work does not lower it) one thread reaches with the instructions the
 * kernel set path ("avx512": vpdpbusd on zmm; "avxvnni": VEX vpdpbusd on ymm; "avx2": vpmaddubsw + vpmaddwd + vpaddd on ymm;
 * "amx": TDPBSSD on full 16 x 64-byte tiles, which the Q8_0 kernels use at half depth, one
 * 32-element block per product) runs its integer dots with, independent chains and no
 * memory: the peak a prefill's matrix products are judged against. 0 for another path or a
 * CPU without them; "amx" only after the amx kernel set was selected (the tile state). */
double bench_peak_int8(const char *path);

#endif
