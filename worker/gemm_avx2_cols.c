/* Decode rows of 8 to 16 sequences on AVX2, lane = sequence: gemm_avx512_cols.c's scheme in
 * 256 bits. The activations are transposed once per call into a panel whose vector (t, v)
 * holds dword t (elements 4t..4t+3) of sequences 8v..8v+7, one sequence per int32 lane, and
 * each weight row is read once, straight from W: per 4 elements one broadcast of the row's 4
 * codes serves the 8 or 16 sequences (one or two vectors). No horizontal sums, no per-tile
 * activation scale shuffles, and the cost per weight byte does not grow with the number of
 * sequences up to 8, then up to 16.
 *
 * The integer dot: with AVX-VNNI (gemm_avxvnni_cols.c builds this file with -mavxvnni) one
 * vpdpbusd per vector, the codes made unsigned (Q8_0 and IQ4_NL xor 0x80, Q4_0's nibbles as
 * they are) and their zero point taken off as -zero * sum(activation bytes) per block, from
 * which each sum starts. Without it maddubs + madd: Q8_0 and IQ4_NL give maddubs |w| and move
 * w's sign onto the activations (each pair at most 2 * 128 * 127, which fits int16), Q4_0's
 * nibbles (<= 15) multiply the activations directly and a whole block of pairs is summed in
 * int16 (16 products of at most 15 * 128: 30720) before one madd.
 *
 * Either way the block's integer sum is exact, and the float step per (row, sequence) is
 * kernels_avx2.c's matmul_b32 and gemm_avx2.c's tile: acc = fma(float(sum), dw * dx, acc)
 * block by block from 0. So a result is the same bits whichever path computed it and however
 * many sequences shared the call (the prompt cache relies on it, rows_agree). */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "kernels_simd.h"

#ifdef __AVXVNNI__
#define COLS_FN kern_gemm_avxvnni_cols
#else
#define COLS_FN kern_gemm_avx2_cols
#endif

/* The longest row taken (elements), for the thread's panel. */
#define COLS_MAXK 16384
/* Blocks ahead each row is prefetched (as gemm_avx512_cols.c). */
#define COLS_PF 12
/* Rows computed together for one vector of sequences (up to 8) and for two (up to 16). */
#ifndef COLS_R1
#define COLS_R1 8
#endif
#ifndef COLS_R2
#define COLS_R2 4
#endif
#define COLS_RMAX (COLS_R1 > COLS_R2 ? COLS_R1 : COLS_R2)

struct cols_panel {
    __m256i x[COLS_MAXK / 4][2];        /* [t][v], lane l: dword t of sequence 8v + l */
    __m256 dx[COLS_MAXK / QUANT_QK][2]; /* lane l: the block's scale */
    __m256i ic[COLS_MAXK / QUANT_QK][2]; /* lane l: -zero * sum of the block's bytes */
};

static AI int32_t ld32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#ifndef __AVXVNNI__
/* ia[v] += the four-product sums of the signed codes q and x[v]: maddubs of |q| and x with
 * q's sign, then madd by ones. */
static AI void sgn_dot(__m256i q, const int V, const __m256i *x, __m256i *ia)
{
    __m256i a = _mm256_abs_epi8(q);
    _Pragma("GCC unroll 2")
    for (int v = 0; v < V; v++)
        ia[v] = _mm256_add_epi32(ia[v], _mm256_madd_epi16(
            _mm256_maddubs_epi16(a, _mm256_sign_epi8(x[v], q)), _mm256_set1_epi16(1)));
}
#endif

/* The block's sum of products of one row's broadcast codes and V vectors of sequences, on
 * top of ia. Q8_0: 8 dwords of codes (w + 4j); Q4_0 and IQ4_NL: 4 dwords of nibble pairs. */
static AI void cols_dot(const enum ggml_type t, const int V, const char *w, const __m256i *x,
                        __m256i *ia)
{
    const __m256i low4 = _mm256_set1_epi8(15);
#ifdef __AVXVNNI__
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    if (t == GGML_TYPE_Q8_0) {
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            __m256i c = _mm256_xor_si256(_mm256_set1_epi32(ld32(w + 4 * j)), flip);
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia[v] = _mm256_dpbusd_avx_epi32(ia[v], c, x[2 * j + v]);
        }
        return;
    }
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        __m256i c = _mm256_set1_epi32(ld32(w + 4 * j));
        __m256i lo = _mm256_and_si256(c, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
        if (t == GGML_TYPE_IQ4_NL) {
            lo = _mm256_xor_si256(_mm256_shuffle_epi8(iq4_table(), lo), flip);
            hi = _mm256_xor_si256(_mm256_shuffle_epi8(iq4_table(), hi), flip);
        }
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++) {
            ia[v] = _mm256_dpbusd_avx_epi32(ia[v], lo, x[2 * j + v]);
            ia[v] = _mm256_dpbusd_avx_epi32(ia[v], hi, x[2 * (4 + j) + v]);
        }
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (t == GGML_TYPE_Q4_0) {
        __m256i p[2];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            __m256i c = _mm256_set1_epi32(ld32(w + 4 * j));
            __m256i lo = _mm256_and_si256(c, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++) {
                __m256i q = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x[2 * j + v]),
                                             _mm256_maddubs_epi16(hi, x[2 * (4 + j) + v]));
                p[v] = j ? _mm256_add_epi16(p[v], q) : q;
            }
        }
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            ia[v] = _mm256_add_epi32(ia[v], _mm256_madd_epi16(p[v], ones));
        return;
    }
    if (t == GGML_TYPE_Q8_0) {
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++)
            sgn_dot(_mm256_set1_epi32(ld32(w + 4 * j)), V, x + 2 * j, ia);
        return;
    }
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        __m256i c = _mm256_set1_epi32(ld32(w + 4 * j));
        sgn_dot(_mm256_shuffle_epi8(iq4_table(), _mm256_and_si256(c, low4)), V, x + 2 * j, ia);
        sgn_dot(_mm256_shuffle_epi8(iq4_table(), _mm256_and_si256(_mm256_srli_epi16(c, 4), low4)),
                V, x + 2 * (4 + j), ia);
    }
#endif
}

/* R rows (rb bytes apart, from w0) over ng blocks against V vectors of the panel:
 * out[16 * r + 8 * v + l]. */
static AI void cols_rows(const enum ggml_type t, const int R, const int V, const char *w0,
                         size_t rb, int ng, const struct cols_panel *P, float *out)
{
    const size_t bb = t == GGML_TYPE_Q8_0 ? sizeof(struct quant_block_q8_0)
                                          : sizeof(struct quant_block_q4_0);
    __m256 acc[COLS_RMAX][2];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const char *wb = w0 + (size_t)g * bb;
        const __m256i *x = P->x[8 * g];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            _mm_prefetch(wb + (size_t)r * rb + COLS_PF * bb, _MM_HINT_T0);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            __m256i ia[2];
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia[v] = _mm256_load_si256(&P->ic[g][v]);
            cols_dot(t, V, wb + (size_t)r * rb + 2, x, ia);
            uint16_t h;
            memcpy(&h, wb + (size_t)r * rb, sizeof h);
            __m256 sc = _mm256_set1_ps(_cvtsh_ss(h));
            /* matmul_b32's step: the same operations in the same order */
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[v]),
                                            _mm256_mul_ps(sc, _mm256_load_ps((const float *)&P->dx[g][v])),
                                            acc[r][v]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            _mm256_storeu_ps(out + 16 * r + 8 * v, acc[r][v]);
}

#define COLS_T(T)                                                                              \
    do {                                                                                       \
        if (V == 1)                                                                            \
            R == COLS_R1 ? cols_rows(T, COLS_R1, 1, w0, rb, ng, P, out)                        \
                         : cols_rows(T, 1, 1, w0, rb, ng, P, out);                             \
        else                                                                                   \
            R == COLS_R2 ? cols_rows(T, COLS_R2, 2, w0, rb, ng, P, out)                        \
                         : cols_rows(T, 1, 2, w0, rb, ng, P, out);                             \
    } while (0)

static void cols_any(enum ggml_type t, int V, int R, const char *w0, size_t rb, int ng,
                     const struct cols_panel *P, float *out)
{
    if (t == GGML_TYPE_Q8_0)
        COLS_T(GGML_TYPE_Q8_0);
    else if (t == GGML_TYPE_Q4_0)
        COLS_T(GGML_TYPE_Q4_0);
    else
        COLS_T(GGML_TYPE_IQ4_NL);
}

int COLS_FN(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
            int y_stride, int row_begin, int row_end)
{
    static _Thread_local struct cols_panel P __attribute__((aligned(32)));
    const enum ggml_type t = W->type;
    if ((t != GGML_TYPE_Q8_0 && t != GGML_TYPE_Q4_0 && t != GGML_TYPE_IQ4_NL) || n_seq < 1 ||
        n_seq > 16 || W->cols > COLS_MAXK || W->cols % QUANT_QK)
        return -1;
#ifdef __AVXVNNI__
    const int zero = t == GGML_TYPE_Q4_0 ? 8 : 128;
#else
    const int zero = t == GGML_TYPE_Q4_0 ? 8 : 0;
#endif
    const int ng = W->cols / QUANT_QK, V = n_seq > 8 ? 2 : 1;
    for (int g = 0; g < ng; g++) {
        int32_t xd[8][16], ic[16];
        float dx[16];
        for (int s = 0; s < 8 * V; s++) {
            if (s >= n_seq) {
                for (int j = 0; j < 8; j++)
                    xd[j][s] = 0;
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
                xd[j][s] = ld32(b->qs + 4 * j);
            dx[s] = _cvtsh_ss(b->d);
            ic[s] = -zero * sum;
        }
        for (int v = 0; v < V; v++) {
            for (int j = 0; j < 8; j++)
                P.x[8 * g + j][v] = _mm256_loadu_si256((const __m256i *)&xd[j][8 * v]);
            P.dx[g][v] = _mm256_loadu_ps(&dx[8 * v]);
            P.ic[g][v] = _mm256_loadu_si256((const __m256i *)&ic[8 * v]);
        }
    }
    float out[COLS_RMAX * 16] __attribute__((aligned(32)));
    const size_t rb = W->row_bytes;
    const int RV = V == 1 ? COLS_R1 : COLS_R2;
    for (int r = row_begin; r < row_end;) {
        int R = row_end - r >= RV ? RV : 1;
        cols_any(t, V, R, (const char *)W->data + (size_t)r * rb, rb, ng, &P, out);
        for (int i = 0; i < R; i++)
            for (int s = 0; s < n_seq; s++)
                Y[(size_t)s * y_stride + r + i] = out[16 * i + s];
        r += R;
    }
    return 0;
}
