/* The avxvnni set's decode rows of 8 to 16 sequences: gemm_avx2_cols.c built again with
 * -mavxvnni, its integer dots as VEX vpdpbusd with the same exact sums, so it gives the avx2
 * kernel's bits (kern_gemm_avxvnni_cols). Reached only through the avxvnni table after a CPU
 * check. */
#include "gemm_avx2_cols.c"
