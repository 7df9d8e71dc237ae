/* The AVX2+FMA+F16C kernel set. Integer dot products use maddubs (unsigned x signed bytes)
 * + madd; float types use FMA. Built with -mavx2 -mfma -mf16c: reached only through
 * kern_ops_get after a CPU check. kernels_avxvnni.c builds this file again with -mavxvnni
 * as the avxvnni set: the integer dots (kernels_simd.h's dot_u8s8*) become vpdpbusd and
 * vpdpwssd with the same sums, so the two sets give the same bits. Every (row, sequence) dot runs the same instruction
 * sequence whether it is computed alone or in a tile of 4 sequences, so batching never
 * changes a result bit. */
#include "kernels.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gemm.h"
#include "kernels_simd.h"
#include "quant.h"

/* The 32 weights of a Q4_0 block as signed bytes, in element order (low nibbles are
 * elements 0..15, high nibbles 16..31). */
static AI __m256i q4_0_signed(const struct quant_block_q4_0 *b)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i q = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_sub_epi8(_mm256_and_si256(q, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
}

/* 8 partial sums of w . x as floats: the sign of w moves onto x so maddubs sees |w|. */
static AI __m256 i8_dot(__m256i aw, __m256i qw, const int8_t *x)
{
    __m256i qx = _mm256_loadu_si256((const __m256i *)x);
    return _mm256_cvtepi32_ps(dot_u8s8(aw, _mm256_sign_epi8(qx, qw)));
}

/* ---- one weight row against S activation vectors (x, x + xs, ...); y[k * ys] ---- */

static AI void tile_q8_0(const struct quant_block_q8_0 *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    __m256 acc0[4], acc1[4];
    int i = 0;
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc0[k] = acc1[k] = _mm256_setzero_ps();
    /* two blocks a step, one FMA chain each, so a block need not wait for the last */
    for (; i + 2 <= nb; i += 2) {
        __m256i qw0 = _mm256_loadu_si256((const __m256i *)w[i + 0].qs);
        __m256i qw1 = _mm256_loadu_si256((const __m256i *)w[i + 1].qs);
        __m256i aw0 = _mm256_abs_epi8(qw0), aw1 = _mm256_abs_epi8(qw1);
        float dw0 = f16(w[i].d), dw1 = f16(w[i + 1].d);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            acc0[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw0 * f16(b[0].d)),
                                      i8_dot(aw0, qw0, b[0].qs), acc0[k]);
            acc1[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw1 * f16(b[1].d)),
                                      i8_dot(aw1, qw1, b[1].qs), acc1[k]);
        }
    }
    if (i < nb) {
        __m256i qw0 = _mm256_loadu_si256((const __m256i *)w[i + 0].qs);
        __m256i aw0 = _mm256_abs_epi8(qw0);
        float dw0 = f16(w[i].d);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            acc0[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw0 * f16(b[0].d)),
                                      i8_dot(aw0, qw0, b[0].qs), acc0[k]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum8(_mm256_add_ps(acc0[k], acc1[k]));
}

static AI void tile_q4_0(const struct quant_block_q4_0 *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    __m256 acc0[4], acc1[4];
    int i = 0;
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc0[k] = acc1[k] = _mm256_setzero_ps();
    /* two blocks a step, one FMA chain each, so a block need not wait for the last */
    for (; i + 2 <= nb; i += 2) {
        __m256i qw0 = q4_0_signed(w + i + 0);
        __m256i qw1 = q4_0_signed(w + i + 1);
        __m256i aw0 = _mm256_abs_epi8(qw0), aw1 = _mm256_abs_epi8(qw1);
        float dw0 = f16(w[i].d), dw1 = f16(w[i + 1].d);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            acc0[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw0 * f16(b[0].d)),
                                      i8_dot(aw0, qw0, b[0].qs), acc0[k]);
            acc1[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw1 * f16(b[1].d)),
                                      i8_dot(aw1, qw1, b[1].qs), acc1[k]);
        }
    }
    if (i < nb) {
        __m256i qw0 = q4_0_signed(w + i + 0);
        __m256i aw0 = _mm256_abs_epi8(qw0);
        float dw0 = f16(w[i].d);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            acc0[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw0 * f16(b[0].d)),
                                      i8_dot(aw0, qw0, b[0].qs), acc0[k]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum8(_mm256_add_ps(acc0[k], acc1[k]));
}

/* Sub-block by sub-block, each (weights, scales) pair used by all S sequences before the next
 * is decoded, so the tile fits AVX2's 16 registers (decoding all eight sub-blocks first,
 * then running the sequences, spilled them). Integer sums: the same bits in either order. */
static AI void tile_q4_k(const struct quant_block_q4_k *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m128i sc16, m16;
        q4_k_scales(w[i].scales, &sc16, &m16);
        __m256i sc2 = _mm256_broadcastsi128_si256(sc16), isum[4];
        const struct quant_block_q8_k *a[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            isum[k] = _mm256_setzero_si256();
            a[k] = (const struct quant_block_q8_k *)(x + k * xs) + i;
        }
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            __m256i q0 = _mm256_and_si256(raw, low4);
            __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            __m256i s0 = bcast16(sc2, 2 * c, 2 * c), s1 = bcast16(sc2, 2 * c + 1, 2 * c + 1);
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m256i x0 = _mm256_loadu_si256((const __m256i *)(a[k]->qs + 64 * c));
                __m256i x1 = _mm256_loadu_si256((const __m256i *)(a[k]->qs + 64 * c + 32));
                isum[k] = dot_u8s8_scaled(dot_u8s8_scaled(isum[k], q0, x0, s0), q1, x1, s1);
            }
        }
        /* bsums k covers 16 elements; sub-block j is bsums 2j and 2j+1 */
        __m256i mv = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
        float d = f16(w[i].d), dmin = f16(w[i].dmin);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m256i bs = _mm256_loadu_si256((const __m256i *)a[k]->bsums);
            __m256 ms = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mv));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * a[k]->d), _mm256_cvtepi32_ps(isum[k]),
                                     acc[k]);
            acc[k] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a[k]->d), ms, acc[k]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum8(acc[k]);
}

/* As tile_q4_k: each 32-weight vector (two 16-element sub-blocks) and its scales are
 * decoded once and used by all S sequences before the next, within AVX2's 16 registers. */
static AI void tile_q6_k(const struct quant_block_q6_k *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    const __m256i low4 = _mm256_set1_epi8(15), hi2 = _mm256_set1_epi8(0x30);
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        /* vector v holds sub-blocks 2v (int16 lanes 0-7) and 2v+1 (lanes 8-15) */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        __m256i isum[4];
        const struct quant_block_q8_k *a[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            a[k] = (const struct quant_block_q8_k *)(x + k * xs) + i;
            /* q was stored +32: start from -32 * sum_k sc_k * bsum_k */
            __m256i bs = _mm256_loadu_si256((const __m256i *)a[k]->bsums);
            isum[k] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
        }
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m256i half = _mm256_permute2x128_si256(sc16, sc16, h ? 0x11 : 0x00);
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            _Pragma("GCC unroll 4")
            for (int v = 0; v < 4; v++) {
                __m256i l = v & 1 ? l1 : l0;
                __m256i lo = v < 2 ? _mm256_and_si256(l, low4)
                                   : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
                __m256i hb = v == 0 ? _mm256_slli_epi16(qh, 4)
                           : v == 1 ? _mm256_slli_epi16(qh, 2)
                           : v == 2 ? qh : _mm256_srli_epi16(qh, 2);
                __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hb, hi2));
                __m256i scv = bcast16(half, 2 * v, 2 * v + 1);
                _Pragma("GCC unroll 4")
                for (int k = 0; k < S; k++) {
                    __m256i qx = _mm256_loadu_si256((const __m256i *)(a[k]->qs + 128 * h + 32 * v));
                    isum[k] = dot_u8s8_scaled(isum[k], q, qx, scv);
                }
            }
        }
        float d = f16(w[i].d);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * a[k]->d), _mm256_cvtepi32_ps(isum[k]),
                                     acc[k]);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum8(acc[k]);
}

/* Float weights (F32, F16, BF16) against F32 activations: 16 elements a step in two
 * chains, then 8, then a scalar tail. */
static AI __m256 load_w(const void *w, enum ggml_type t, int i)
{
    if (t == GGML_TYPE_F32)
        return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (t == GGML_TYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static AI float load_w1(const void *w, enum ggml_type t, int i)
{
    if (t == GGML_TYPE_F32)
        return ((const float *)w)[i];
    if (t == GGML_TYPE_F16)
        return f16(((const uint16_t *)w)[i]);
    return quant_bf16_to_f32(((const uint16_t *)w)[i]);
}

static AI void tile_float(const void *w, enum ggml_type t, const char *x, size_t xs, int n,
                          const int S, float *y, size_t ys)
{
    __m256 acc0[4], acc1[4];
    int i = 0;
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc0[k] = acc1[k] = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = load_w(w, t, i), w1 = load_w(w, t, i + 8);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const float *xf = (const float *)(x + k * xs);
            acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xf + i), acc0[k]);
            acc1[k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xf + i + 8), acc1[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 w0 = load_w(w, t, i);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps((const float *)(x + k * xs) + i),
                                      acc0[k]);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++) {
        const float *xf = (const float *)(x + k * xs);
        float s = hsum8(_mm256_add_ps(acc0[k], acc1[k]));
        for (int j = i; j < n; j++)
            s += load_w1(w, t, j) * xf[j];
        y[k * ys] = s;
    }
}

/* One row against sequences [0, ns): tiles of 4, then 1 at a time. */
#define ROW_FN(name, call)                                                                     \
    static void name(const void *w, const char *x, size_t xs, int n, int ns, float *y,         \
                     size_t ys)                                                                \
    {                                                                                          \
        int s = 0;                                                                             \
        for (; s + 4 <= ns; s += 4)                                                            \
            call(w, x + s * xs, xs, n, 4, y + s * ys, ys);                                     \
        for (; s < ns; s++)                                                                    \
            call(w, x + s * xs, xs, n, 1, y + s * ys, ys);                                     \
    }

#define CALL_Q8_0(w, x, xs, n, S, y, ys) tile_q8_0(w, x, xs, (n) / QUANT_QK, S, y, ys)
#define CALL_Q4_0(w, x, xs, n, S, y, ys) tile_q4_0(w, x, xs, (n) / QUANT_QK, S, y, ys)
#define CALL_Q4_K(w, x, xs, n, S, y, ys) tile_q4_k(w, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_Q6_K(w, x, xs, n, S, y, ys) tile_q6_k(w, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_F32(w, x, xs, n, S, y, ys)  tile_float(w, GGML_TYPE_F32, x, xs, n, S, y, ys)
#define CALL_F16(w, x, xs, n, S, y, ys)  tile_float(w, GGML_TYPE_F16, x, xs, n, S, y, ys)
#define CALL_BF16(w, x, xs, n, S, y, ys) tile_float(w, GGML_TYPE_BF16, x, xs, n, S, y, ys)

ROW_FN(row_q8_0, CALL_Q8_0)
ROW_FN(row_q4_0, CALL_Q4_0)
ROW_FN(row_q4_k, CALL_Q4_K)
ROW_FN(row_q6_k, CALL_Q6_K)
ROW_FN(row_f32, CALL_F32)
ROW_FN(row_f16, CALL_F16)
ROW_FN(row_bf16, CALL_BF16)

typedef kern_row_fn row_fn;

void KSET(matmul)(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                  int y_stride, int row_begin, int row_end)
{
    row_fn f;
    switch (W->type) {
    case GGML_TYPE_Q8_0:
        f = row_q8_0;
        break;
    case GGML_TYPE_Q4_0:
        f = row_q4_0;
        break;
    case GGML_TYPE_Q4_K:
        f = row_q4_k;
        break;
    case GGML_TYPE_Q6_K:
        f = row_q6_k;
        break;
    case GGML_TYPE_F32:
        f = row_f32;
        break;
    case GGML_TYPE_F16:
        f = row_f16;
        break;
    case GGML_TYPE_BF16:
        f = row_bf16;
        break;
    default:
        if (!(f = KSET(ext_row)(W->type)))
            __builtin_trap(); /* an unsupported type got past model load */
    }
    const char *wd = W->data, *xd = X->data;
    int chunk = kern_seq_chunk(X->stride);
    for (int s0 = 0; s0 < n_seq; s0 += chunk) {
        int ns = n_seq - s0 < chunk ? n_seq - s0 : chunk;
        for (int r = row_begin; r < row_end; r++)
            f(wd + (size_t)r * W->row_bytes, xd + (size_t)s0 * X->stride, X->stride, X->n, ns,
              Y + (size_t)s0 * y_stride + r, (size_t)y_stride);
    }
}

/* ---- float kernels (built once, in the avx2 set; the avxvnni set shares them) ---- */
#ifndef __AVXVNNI__

float kern_avx2_dot_f32(const float *a, const float *b, int n)
{
    float r;
    tile_float(a, GGML_TYPE_F32, (const char *)b, 0, n, 1, &r, 0);
    return r;
}

float kern_avx2_dot_f16(const uint16_t *a, const float *b, int n)
{
    float r;
    tile_float(a, GGML_TYPE_F16, (const char *)b, 0, n, 1, &r, 0);
    return r;
}

void kern_avx2_axpy_f32(float *restrict y, float alpha, const float *restrict x, int n)
{
    __m256 a = _mm256_set1_ps(alpha);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += alpha * x[i];
}

void kern_avx2_axpy_f16(float *restrict y, float alpha, const uint16_t *restrict x, int n)
{
    __m256 a = _mm256_set1_ps(alpha);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, v, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++)
        y[i] += alpha * f16(x[i]);
}

void kern_avx2_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    float ss = kern_avx2_dot_f32(x, x, n);
    __m256 r = _mm256_set1_ps(1.0f / sqrtf(ss / (float)n + eps));
    float rs = 1.0f / sqrtf(ss / (float)n + eps);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), r),
                                                _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        out[i] = x[i] * rs * w[i];
}

void kern_avx2_softmax(float *x, int n)
{
    if (n <= 0)
        return;
    float mx = x[0], sum = 0.0f;
    for (int i = 1; i < n; i++)
        mx = fmaxf(mx, x[i]);
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    __m256 inv = _mm256_set1_ps(1.0f / sum);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= 1.0f / sum;
}

void kern_avx2_swiglu(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void kern_avx2_add(float *restrict y, const float *restrict x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] += x[i];
}

#endif

static void avx2_gemm(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                      int y_stride, int row_begin, int row_end)
{
    if (kern_gemm_avx2(W, X, n_seq, Y, y_stride, row_begin, row_end) < 0)
        KSET(matmul)(W, X, n_seq, Y, y_stride, row_begin, row_end);
}

static const struct kern_ops ops = {
    .name = KSET_NAME,
    .matmul = KSET(matmul),
    .gemm = avx2_gemm,
    .dot_f32 = kern_avx2_dot_f32,
    .dot_f16 = kern_avx2_dot_f16,
    .axpy_f32 = kern_avx2_axpy_f32,
    .axpy_f16 = kern_avx2_axpy_f16,
    .rmsnorm = kern_avx2_rmsnorm,
    .softmax = kern_avx2_softmax,
    .swiglu = kern_avx2_swiglu,
    .add = kern_avx2_add,
    .quantize_act = kern_quantize_act,
};

const struct kern_ops *KSET_TABLE(void)
{
    return &ops;
}
