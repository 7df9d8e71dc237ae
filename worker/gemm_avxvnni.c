/* The prefill GEMM of the avxvnni set: gemm_avx2.c built again with -mavxvnni, its integer
 * dots as VEX vpdpbusd (and vpdpwssd for the K types' sub-block scales) with the same exact
 * sums, so it gives the avx2 GEMM's bits (kern_gemm_avxvnni). Reached only through the
 * avxvnni table after a CPU check. */
#include "gemm_avx2.c"
