/* Decode rows of a few sequences on AVX-512 VNNI, lane = sequence: the activations of up to
 * 16 sequences are transposed once per call into a panel whose 512-bit vector t holds
 * dword t (elements 4t..4t+3) of each sequence (lane = sequence), and each weight row is
 * read once, straight from W: per 4 elements one broadcast of the row's 4 codes and one
 * vpdpbusd serve every sequence. Neither the weights' transposes (the panel tile) nor the
 * horizontal sums of the row-major tiles (reduce16) are needed, so the cost per weight byte
 * does not grow with the number of sequences up to 16.
 *
 * The integers and the float steps per (row, sequence) are those of gemm_avx512.c's tiles:
 * the sum over a sub-block of the codes (offset to unsigned) times the activation bytes,
 * started from -zero * sum(activation bytes), then acc = fma(float(sum), scale * dx, acc)
 * sub-block by sub-block. So a result is the same bits as the other paths give it (the
 * prompt cache relies on it, kern_gemm_avx512_agrees). 32-element types with Q8_0
 * activations and no min: Q8_0, Q4_0, IQ4_NL.
 *
 * Q8_0 with at most 15 sequences spares the xor that makes signed codes unsigned: the panel
 * holds the activations plus 128 (unsigned) and the codes are vpdpbusd's signed operand,
 * broadcast straight from memory; lane 15 holds ones, so it sums the row's codes, and
 * 128 times that sum comes off each lane: the same integers. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "gemm_decode.h"
#include "kernels_simd.h"

/* The longest row taken (elements), for the thread's panel. */
#define COLS_MAXK 16384
/* Rows computed together: each activation vector loaded serves this many rows. */
#define COLS_R 8
/* Blocks ahead each row is prefetched (bench_kernels, Q8_0 2048x5632 and 5632x2048 at 8 and
 * 16 sequences, two alternating rounds on a loaded machine: 4 rows without prefetch
 * 2.368-3.774 CPU ms/call, 8 rows prefetching 12 blocks ahead 2.191-3.020). */
#define COLS_PF 12

struct cols_panel {
    __m512i x[COLS_MAXK / 4];           /* lane s: dword t of sequence s */
    __m512 dx[COLS_MAXK / QUANT_QK];    /* lane s: the sub-block's scale */
    __m512i ic[COLS_MAXK / QUANT_QK];   /* lane s: -zero * sum of the sub-block's bytes */
};

static AI uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* R rows (rb bytes apart, from w0) over ng blocks against the panel: out[r * 16 + s]. */
static AI void cols_rows(const enum ggml_type t, const int ones, const char *w0, size_t rb,
                         const int R, int ng, const struct cols_panel *P, float *out)
{
    const size_t bb = t == GGML_TYPE_Q8_0 ? sizeof(struct quant_block_q8_0)
                                          : sizeof(struct quant_block_q4_0);
    const __m512i flip = _mm512_set1_epi8(t == GGML_TYPE_Q4_0 ? 0 : (char)0x80);
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4_values));
    __m512 acc[COLS_R];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const char *wb = w0 + (size_t)g * bb;
        /* past a row's end the next block's row (as gemm_avx512_colsk.c) */
        const size_t pfo = g + COLS_PF < ng ? COLS_PF * bb : COLS_PF * bb + (size_t)(R - 1) * rb;
        __m512i ia[COLS_R];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            _mm_prefetch(wb + (size_t)r * rb + pfo, _MM_HINT_T0);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            ia[r] = P->ic[g];
        if (t == GGML_TYPE_Q8_0 && ones) {
            /* activations offset to unsigned (x + 128) and the codes signed, straight from
             * W; lane 15 (all ones) sums the codes, for the offset's 128 * sum */
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 8; j++) {
                __m512i xv = _mm512_load_si512(&P->x[8 * g + j]);
                _Pragma("GCC unroll 8")
                for (int r = 0; r < R; r++)
                    ia[r] = _mm512_dpbusd_epi32(
                        ia[r], xv, _mm512_set1_epi32((int)ld32(wb + (size_t)r * rb + 2 + 4 * j)));
            }
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++)
                ia[r] = _mm512_sub_epi32(ia[r], _mm512_slli_epi32(
                    _mm512_permutexvar_epi32(_mm512_set1_epi32(15), ia[r]), 7));
        } else if (t == GGML_TYPE_Q8_0) {
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 8; j++) {
                __m512i xv = _mm512_load_si512(&P->x[8 * g + j]);
                _Pragma("GCC unroll 8")
                for (int r = 0; r < R; r++) {
                    __m512i w = _mm512_xor_si512(
                        _mm512_set1_epi32((int)ld32(wb + (size_t)r * rb + 2 + 4 * j)), flip);
                    ia[r] = _mm512_dpbusd_epi32(ia[r], w, xv);
                }
            }
        } else {
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 4; j++) {
                __m512i xl = _mm512_load_si512(&P->x[8 * g + j]);
                __m512i xh = _mm512_load_si512(&P->x[8 * g + 4 + j]);
                _Pragma("GCC unroll 8")
                for (int r = 0; r < R; r++) {
                    __m512i v = _mm512_set1_epi32((int)ld32(wb + (size_t)r * rb + 2 + 4 * j));
                    __m512i lo = _mm512_and_si512(v, low4);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                    if (t == GGML_TYPE_IQ4_NL) {
                        lo = _mm512_xor_si512(_mm512_shuffle_epi8(tab, lo), flip);
                        hi = _mm512_xor_si512(_mm512_shuffle_epi8(tab, hi), flip);
                    }
                    ia[r] = _mm512_dpbusd_epi32(ia[r], lo, xl);
                    ia[r] = _mm512_dpbusd_epi32(ia[r], hi, xh);
                }
            }
        }
        __m512 d = _mm512_load_ps(&P->dx[g]);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            uint16_t h;
            memcpy(&h, wb + (size_t)r * rb, sizeof h);
            __m512 sc = _mm512_set1_ps(_cvtsh_ss(h));
            /* step() of gemm_avx512.c: the same operations in the same order */
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r]), _mm512_mul_ps(sc, d), acc[r]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(out + 16 * r, acc[r]);
}

#define COLS_T(T, ONES)                                                                        \
    do {                                                                                       \
        if (R == COLS_R)                                                                       \
            cols_rows(T, ONES, w0, rb, COLS_R, ng, P, out);                                    \
        else                                                                                   \
            cols_rows(T, ONES, w0, rb, 1, ng, P, out);                                         \
    } while (0)

static void cols_any(enum ggml_type t, int ones, const char *w0, size_t rb, int R, int ng,
                     const struct cols_panel *P, float *out)
{
    if (t == GGML_TYPE_Q8_0 && ones)
        COLS_T(GGML_TYPE_Q8_0, 1);
    else if (t == GGML_TYPE_Q8_0)
        COLS_T(GGML_TYPE_Q8_0, 0);
    else if (t == GGML_TYPE_Q4_0)
        COLS_T(GGML_TYPE_Q4_0, 0);
    else
        COLS_T(GGML_TYPE_IQ4_NL, 0);
}

int kern_gemm_avx512_cols(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                          float *Y, int y_stride, int row_begin, int row_end)
{
    static _Thread_local struct cols_panel P __attribute__((aligned(64)));
    const enum ggml_type t = W->type;
    if ((t != GGML_TYPE_Q8_0 && t != GGML_TYPE_Q4_0 && t != GGML_TYPE_IQ4_NL) || n_seq < 1 ||
        n_seq > 16 || W->cols > COLS_MAXK || W->cols % QUANT_QK)
        return -1;
    const int ng = W->cols / QUANT_QK, zero = t == GGML_TYPE_Q4_0 ? 8 : 128;
    /* Q8_0 with a lane to spare: the panel holds x + 128 and lane 15 ones (cols_rows) */
    const int ones = t == GGML_TYPE_Q8_0 && n_seq < 16;
    const uint32_t bias = ones ? 0x80808080u : 0;
    for (int g = 0; g < ng; g++) {
        uint32_t xd[8][16];
        float dx[16];
        int32_t ic[16];
        for (int s = 0; s < 16; s++) {
            if (s >= n_seq) {
                for (int j = 0; j < 8; j++)
                    xd[j][s] = ones && s == 15 ? 0x01010101u : 0;
                dx[s] = 0.0f;
                ic[s] = 0;
                continue;
            }
            const struct quant_block_q8_0 *b =
                (const struct quant_block_q8_0 *)((const char *)X->data +
                                                  (size_t)s * X->stride) + g;
            int sum = 0;
            for (int l = 0; l < QUANT_QK; l++)
                sum += b->qs[l];
            for (int j = 0; j < 8; j++)
                xd[j][s] = ld32(b->qs + 4 * j) ^ bias;
            dx[s] = _cvtsh_ss(b->d);
            ic[s] = ones ? 0 : -zero * sum;
        }
        for (int j = 0; j < 8; j++)
            P.x[8 * g + j] = _mm512_loadu_si512(xd[j]);
        P.dx[g] = _mm512_loadu_ps(dx);
        P.ic[g] = _mm512_loadu_si512(ic);
    }
    float out[COLS_R * 16] __attribute__((aligned(64)));
    const size_t rb = W->row_bytes;
    for (int r = row_begin; r < row_end;) {
        int R = row_end - r >= COLS_R ? COLS_R : 1;
        cols_any(t, ones, (const char *)W->data + (size_t)r * rb, rb, R, ng, &P, out);
        for (int i = 0; i < R; i++)
            for (int s = 0; s < n_seq; s++)
                Y[(size_t)s * y_stride + r + i] = out[16 * i + s];
        r += R;
    }
    return 0;
}
