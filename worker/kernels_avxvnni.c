/* The AVX-VNNI kernel set: for CPUs with VEX-encoded vpdpbusd/vpdpwssd on 256 bits but no
 * AVX-512 (Intel Alder Lake and later client chips, AMD Zen 5 client). kernels_avx2.c built
 * again with -mavx2 -mfma -mf16c -mavxvnni: its integer dots go through kernels_simd.h's
 * dot_u8s8 and dot_u8s8_scaled, which become those instructions here, and KSET names what
 * it exports (kern_avxvnni_matmul, kern_ops_avxvnni_table). The float kernels are the avx2
 * set's. Reached only through kern_ops_get after a CPU check. */
#include "kernels_avx2.c"
