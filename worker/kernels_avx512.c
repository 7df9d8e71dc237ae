/* The AVX-512 (F/BW/VL/VNNI) kernel set: Q8_0 and Q4_0 weights take two blocks per 512-bit
 * step with vpdpbusd (u8 x s8 -> s32 in one instruction); the other types reuse the AVX2
 * kernels, where 512-bit code has not been shown faster. Reached only through kern_ops_get
 * after a CPU check. As in the AVX2 set, a sequence's instruction stream does not depend on
 * how many sequences share the tile, so batching is bit-exact. */
#include "kernels.h"

#include <immintrin.h>
#include <stddef.h>

#include "quant.h"

#define AI __attribute__((always_inline)) inline

static AI float hsum16(__m512 v)
{
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Two f16 scales as 16 floats: a in lanes 0-7, b in lanes 8-15. */
static AI __m512 scales2(uint16_t a, uint16_t b)
{
    __m256i h = _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
    return _mm512_cvtph_ps(h);
}

static AI __m512i load2(const int8_t *a, const int8_t *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* The 32 signed weights of Q4_0 block b, in element order. */
static AI __m256i q4_0_weights(const struct quant_block_q4_0 *b)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i q = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_sub_epi8(_mm256_and_si256(q, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
}

/* One weight row (nb blocks of signed 8-bit weights, Q8_0 or Q4_0) against S Q8_0
 * activations: pairs of blocks in 512 bits, then a last odd block in 256 bits. The sign of w
 * moves onto x so vpdpbusd sees |w| as unsigned. */
static AI void tile_i8(const void *w, int q4, const char *x, size_t xs, int nb, const int S,
                       float *y, size_t ys)
{
    const struct quant_block_q8_0 *w8 = w;
    const struct quant_block_q4_0 *w4 = w;
    __m512 acc[4];
    int i = 0;
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2) {
        __m512i qw;
        __m512 dw;
        if (q4) {
            qw = _mm512_inserti64x4(_mm512_castsi256_si512(q4_0_weights(w4 + i)),
                                    q4_0_weights(w4 + i + 1), 1);
            dw = scales2(w4[i].d, w4[i + 1].d);
        } else {
            qw = load2(w8[i].qs, w8[i + 1].qs);
            dw = scales2(w8[i].d, w8[i + 1].d);
        }
        __m512i aw = _mm512_abs_epi8(qw);
        __mmask64 neg = _mm512_movepi8_mask(qw);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            __m512i qx = load2(b[0].qs, b[1].qs);
            __m512i sx = _mm512_mask_sub_epi8(qx, neg, _mm512_setzero_si512(), qx);
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sx);
            __m512 d = _mm512_mul_ps(dw, scales2(b[0].d, b[1].d));
            acc[k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[k]);
        }
    }
    if (i < nb) {
        __m256i qw = q4 ? q4_0_weights(w4 + i)
                        : _mm256_loadu_si256((const __m256i *)w8[i].qs);
        float dw = _cvtsh_ss(q4 ? w4[i].d : w8[i].d);
        __m256i aw = _mm256_abs_epi8(qw);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            __m256i qx = _mm256_loadu_si256((const __m256i *)b->qs);
            __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(qx, qw));
            __m256 v = _mm256_mul_ps(_mm256_set1_ps(dw * _cvtsh_ss(b->d)), _mm256_cvtepi32_ps(p));
            acc[k] = _mm512_add_ps(acc[k], _mm512_zextps256_ps512(v));
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum16(acc[k]);
}

static AI void row_i8(const void *w, int q4, const char *x, size_t xs, int n, int ns, float *y,
                   size_t ys)
{
    int s = 0, nb = n / QUANT_QK;
    for (; s + 4 <= ns; s += 4)
        tile_i8(w, q4, x + s * xs, xs, nb, 4, y + s * ys, ys);
    for (; s < ns; s++)
        tile_i8(w, q4, x + s * xs, xs, nb, 1, y + s * ys, ys);
}

static void avx512_matmul(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                          float *Y, int y_stride, int row_begin, int row_end)
{
    if (W->type != GGML_TYPE_Q8_0 && W->type != GGML_TYPE_Q4_0) {
        kern_avx2_matmul(W, X, n_seq, Y, y_stride, row_begin, row_end);
        return;
    }
    int q4 = W->type == GGML_TYPE_Q4_0;
    const char *wd = W->data, *xd = X->data;
    int chunk = kern_seq_chunk(X->stride);
    for (int s0 = 0; s0 < n_seq; s0 += chunk) {
        int ns = n_seq - s0 < chunk ? n_seq - s0 : chunk;
        for (int r = row_begin; r < row_end; r++) {
            const void *row = wd + (size_t)r * W->row_bytes;
            if (q4)
                row_i8(row, 1, xd + (size_t)s0 * X->stride, X->stride, X->n, ns,
                       Y + (size_t)s0 * y_stride + r, (size_t)y_stride);
            else
                row_i8(row, 0, xd + (size_t)s0 * X->stride, X->stride, X->n, ns,
                       Y + (size_t)s0 * y_stride + r, (size_t)y_stride);
        }
    }
}

static const struct kern_ops avx512_ops = {
    .name = "avx512",
    .matmul = avx512_matmul,
    .dot_f32 = kern_avx2_dot_f32,
    .dot_f16 = kern_avx2_dot_f16,
    .axpy_f32 = kern_avx2_axpy_f32,
    .axpy_f16 = kern_avx2_axpy_f16,
    .rmsnorm = kern_avx2_rmsnorm,
    .softmax = kern_avx2_softmax,
    .swiglu = kern_avx2_swiglu,
    .add = kern_avx2_add,
};

const struct kern_ops *kern_ops_avx512_table(void)
{
    return &avx512_ops;
}
