/* The AVX-VNNI build of kernels_avx2_ext.c (see kernels_avxvnni.c): kern_avxvnni_ext_row,
 * the rows of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K and IQ4_XS with vpdpbusd/vpdpwssd. */
#include "kernels_avx2_ext.c"
