/* Helpers the benchmarks share; see bench_util.h. */
#include "bench_util.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_read_bandwidth(double *cpu_gbs)
{
    size_t n = (512u << 20) / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof(uint64_t));
    double best = 0.0, best_cpu = 0.0;
    volatile uint64_t sink;

    if (cpu_gbs)
        *cpu_gbs = 0.0;
    if (!buf)
        return 0.0;
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    for (int r = 0; r < 3; r++) {
        /* four independent sums, so the loop is bound by memory, not by one add chain */
        uint64_t a = 0, b = 0, c = 0, d = 0;
        double t0 = bench_now(), c0 = thread_cpu(), gbs, cgbs;
        for (size_t i = 0; i < n; i += 4) {
            a += buf[i];
            b += buf[i + 1];
            c += buf[i + 2];
            d += buf[i + 3];
        }
        gbs = (double)(n * sizeof(uint64_t)) / (bench_now() - t0) / 1e9;
        cgbs = (double)(n * sizeof(uint64_t)) / (thread_cpu() - c0) / 1e9;
        sink = a + b + c + d;
        if (gbs > best)
            best = gbs;
        if (cgbs > best_cpu)
            best_cpu = cgbs;
    }
    if (cpu_gbs)
        *cpu_gbs = best_cpu;
    (void)sink;
    free(buf);
    return best;
}


/* Twelve independent vpdpbusd zmm chains (64 u8*s8 multiply-adds each) per iteration. */
static double peak_vnni512(long iters)
{
    double t0 = thread_cpu();
    __asm__ volatile("vpxord %%zmm0, %%zmm0, %%zmm0\n\t"
                     "vpternlogd $0xff, %%zmm1, %%zmm1, %%zmm1\n\t"
                     "vpabsb %%zmm1, %%zmm2\n\t" ::: "xmm0", "xmm1", "xmm2");
    for (long i = 0; i < iters; i++)
        __asm__ volatile("vpdpbusd %%zmm1, %%zmm2, %%zmm3\n\tvpdpbusd %%zmm1, %%zmm2, %%zmm4\n\t"
                         "vpdpbusd %%zmm1, %%zmm2, %%zmm5\n\tvpdpbusd %%zmm1, %%zmm2, %%zmm6\n\t"
                         "vpdpbusd %%zmm1, %%zmm2, %%zmm7\n\tvpdpbusd %%zmm1, %%zmm2, %%zmm8\n\t"
                         "vpdpbusd %%zmm1, %%zmm2, %%zmm9\n\tvpdpbusd %%zmm1, %%zmm2, %%zmm10\n\t"
                         "vpdpbusd %%zmm1, %%zmm2, %%zmm11\n\tvpdpbusd %%zmm1, %%zmm2, %%zmm12\n\t"
                         "vpdpbusd %%zmm1, %%zmm2, %%zmm13\n\tvpdpbusd %%zmm1, %%zmm2, %%zmm14\n\t"
                         ::: "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                         "xmm11", "xmm12", "xmm13", "xmm14");
    __asm__ volatile("vzeroupper" ::: "memory");
    return (double)iters * 12 * 64 / (thread_cpu() - t0) / 1e9;
}

/* Twelve independent VEX vpdpbusd ymm chains (32 u8*s8 multiply-adds each): AVX-VNNI. */
static double peak_vnni256(long iters)
{
    double t0 = thread_cpu();
    __asm__ volatile("vpcmpeqb %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpabsb %%ymm1, %%ymm2\n\t" ::: "xmm1", "xmm2");
    for (long i = 0; i < iters; i++)
        __asm__ volatile("%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm3\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm4\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm5\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm6\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm7\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm8\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm9\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm10\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm11\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm12\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm13\n\t"
                         "%{vex%} vpdpbusd %%ymm1, %%ymm2, %%ymm14\n\t"
                         ::: "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                         "xmm11", "xmm12", "xmm13", "xmm14");
    __asm__ volatile("vzeroupper" ::: "memory");
    return (double)iters * 12 * 32 / (thread_cpu() - t0) / 1e9;
}

/* Eight independent vpmaddubsw/vpmaddwd/vpaddd ymm chains (32 multiply-adds each). */
static double peak_maddubs256(long iters)
{
    double t0 = thread_cpu();
    __asm__ volatile("vpcmpeqb %%ymm1, %%ymm1, %%ymm1\n\t"
                     "vpabsb %%ymm1, %%ymm2\n\t"
                     "vpsrlw $15, %%ymm1, %%ymm15\n\t" ::: "xmm1", "xmm2", "xmm15");
    for (long i = 0; i < iters; i++)
        __asm__ volatile("vpmaddubsw %%ymm1, %%ymm2, %%ymm3\n\tvpmaddubsw %%ymm2, %%ymm1, %%ymm4\n\t"
                         "vpmaddubsw %%ymm1, %%ymm2, %%ymm5\n\tvpmaddubsw %%ymm2, %%ymm1, %%ymm6\n\t"
                         "vpmaddwd %%ymm15, %%ymm3, %%ymm3\n\tvpmaddwd %%ymm15, %%ymm4, %%ymm4\n\t"
                         "vpmaddwd %%ymm15, %%ymm5, %%ymm5\n\tvpmaddwd %%ymm15, %%ymm6, %%ymm6\n\t"
                         "vpaddd %%ymm3, %%ymm7, %%ymm7\n\tvpaddd %%ymm4, %%ymm8, %%ymm8\n\t"
                         "vpaddd %%ymm5, %%ymm9, %%ymm9\n\tvpaddd %%ymm6, %%ymm10, %%ymm10\n\t"
                         "vpmaddubsw %%ymm1, %%ymm2, %%ymm3\n\tvpmaddubsw %%ymm2, %%ymm1, %%ymm4\n\t"
                         "vpmaddubsw %%ymm1, %%ymm2, %%ymm5\n\tvpmaddubsw %%ymm2, %%ymm1, %%ymm6\n\t"
                         "vpmaddwd %%ymm15, %%ymm3, %%ymm3\n\tvpmaddwd %%ymm15, %%ymm4, %%ymm4\n\t"
                         "vpmaddwd %%ymm15, %%ymm5, %%ymm5\n\tvpmaddwd %%ymm15, %%ymm6, %%ymm6\n\t"
                         "vpaddd %%ymm3, %%ymm11, %%ymm11\n\tvpaddd %%ymm4, %%ymm12, %%ymm12\n\t"
                         "vpaddd %%ymm5, %%ymm13, %%ymm13\n\tvpaddd %%ymm6, %%ymm14, %%ymm14\n\t"
                         ::: "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                         "xmm11", "xmm12", "xmm13", "xmm14");
    __asm__ volatile("vzeroupper" ::: "memory");
    return (double)iters * 8 * 32 / (thread_cpu() - t0) / 1e9;
}

/* Four independent TDPBSSD chains on full tiles (16 x 16 x 64 int8 multiply-adds each). The
 * process must hold the tile state already (the amx kernel set asked for it). */
__attribute__((target("amx-tile,amx-int8"))) static double peak_amx(long iters)
{
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    double t0;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 6; i++) {
        cfg.rows[i] = 16;
        cfg.colsb[i] = 64;
    }
    _tile_loadconfig(&cfg);
    _tile_zero(4);
    _tile_zero(5);
    t0 = thread_cpu();
    for (long i = 0; i < iters; i++) {
        _tile_dpbssd(0, 4, 5);
        _tile_dpbssd(1, 4, 5);
        _tile_dpbssd(2, 4, 5);
        _tile_dpbssd(3, 4, 5);
    }
    _tile_release();
    return (double)iters * 4 * 16 * 16 * 64 / (thread_cpu() - t0) / 1e9;
}

double bench_peak_int8(const char *path)
{
    if (strcmp(path, "amx") == 0) {
        double best = 0.0;
        for (int r = 0; r < 3; r++) {
            double g = peak_amx(2000000);
            if (g > best)
                best = g;
        }
        return best;
    }
    int kind = strcmp(path, "avx512") == 0 ? 2 : strcmp(path, "avxvnni") == 0 ? 1 : 0;
    double best = 0.0;

    if (kind == 2 ? !__builtin_cpu_supports("avx512vnni")
        : kind == 1 ? !__builtin_cpu_supports("avxvnni")
                    : strcmp(path, "avx2") != 0 || !__builtin_cpu_supports("avx2"))
        return 0.0;
    for (int r = 0; r < 3; r++) {
        double g = kind == 2 ? peak_vnni512(20000000)
                   : kind == 1 ? peak_vnni256(20000000) : peak_maddubs256(10000000);
        if (g > best)
            best = g;
    }
    return best;
}
