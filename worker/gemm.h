/* The prefill GEMM (worker/gemm_*.c): kern_ops.gemm of the AVX2 and AVX-512 sets hands prompt
 * rows to these register- and cache-tiled products. Each returns 0 when it computed Y as
 * kern_ops.gemm is specified (kernels.h), -1 for a weight type it does not take (the set's
 * matmul runs instead). A (row, sequence) result is the same bits for every n_seq, row range
 * and set of other sequences. Private to worker/. */
#ifndef GEMM_H
#define GEMM_H

#include "kernels.h"

int kern_gemm_avx512(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                     int y_stride, int row_begin, int row_end);
/* 1 for the weight types whose decode rows kern_gemm_avx512 computes too (the AVX-512 set's
 * matmul runs them through it, so prompt and decode rows agree bit for bit) and the types
 * it does not take; 0 for the 256-element types, whose matmul keeps its own kernels. */
int kern_gemm_avx512_agrees(enum ggml_type t);
/* Test hook: 0 keeps the one-sequence-tile rows of Q4_0, Q5_0 and IQ4_NL on the
 * F/BW/VL/VNNI path even where the CPU has VBMI and BITALG; 1 (the default) lets them take
 * the VBMI one there. Both give the same bits. */
void kern_gemm_avx512_vbmi(int on);
/* Up to 16 sequences of Q8_0, Q4_0 or IQ4_NL weights, lane = sequence (gemm_avx512_cols.c):
 * the bits of kern_gemm_avx512, or -1 (nothing done) for another type or shape. */
int kern_gemm_avx512_cols(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                          float *Y, int y_stride, int row_begin, int row_end);
/* Q8_0 on AMX-INT8 tiles (gemm_amx.c): the bits of kern_gemm_avx512 for any n_seq, or -1
 * (nothing done) for another type or shape. Only after kern_ops_amx_table() gave a table
 * (the process holds the tile state). */
int kern_gemm_amx(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                  int y_stride, int row_begin, int row_end);
/* Q4_K and Q6_K rows in groups of 16 on AMX-INT8 tiles (gemm_amx_k.c): the bits of the
 * avx512 set's matmul for the rows [row_begin, row_begin + n) it returns n of (a multiple of
 * 16; the caller runs the rest), or -1 (nothing done) for another type or shape. */
int kern_gemm_amx_k(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                    int y_stride, int row_begin, int row_end);
/* 1 to 16 sequences of Q4_K or Q6_K weights, lane = sequence (gemm_avx512_colsk.c): the bits
 * of the AVX-512 set's matmul, or -1 (nothing done) for another type or shape. */
int kern_gemm_avx512_colsk(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                           float *Y, int y_stride, int row_begin, int row_end);
/* -1 also for fewer than 32 sequences: the avx2 and avxvnni sets' matmul gives the same bits
 * (rows_agree) for less. */
int kern_gemm_avx2(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                   int y_stride, int row_begin, int row_end);
/* gemm_avx2.c built with -mavxvnni (gemm_avxvnni.c): the same results. */
int kern_gemm_avxvnni(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                      int y_stride, int row_begin, int row_end);
/* Up to 16 sequences of Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K or Q6_K weights on AVX2, lane = sequence
 * (gemm_avx2_cols.c, and its -mavxvnni build gemm_avxvnni_cols.c): the bits of the set's
 * matmul and gemm, or -1 (nothing done) for another type or shape. */
int kern_gemm_avx2_cols(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                        float *Y, int y_stride, int row_begin, int row_end);
int kern_gemm_avxvnni_cols(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                           float *Y, int y_stride, int row_begin, int row_end);

#endif
