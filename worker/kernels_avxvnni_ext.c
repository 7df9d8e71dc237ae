/* The AVX-VNNI build of kernels_avx2_ext.c (see kernels_avxvnni.c): kern_avxvnni_ext_row,
 * the rows of Q4_1, Q5_1, Q2_K and Q3_K with vpdpbusd/vpdpwssd. */
#include "kernels_avx2_ext.c"
