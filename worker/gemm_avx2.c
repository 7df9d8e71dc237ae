/* The prefill GEMM on AVX2 (placeholder until its tiles land: the per-row path runs). */
#include "gemm.h"

int kern_gemm_avx2(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                   int y_stride, int row_begin, int row_end)
{
    (void)W, (void)X, (void)n_seq, (void)Y, (void)y_stride, (void)row_begin, (void)row_end;
    return -1;
}
