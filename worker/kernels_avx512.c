/* The AVX-512 (F/BW/VL/VNNI) kernel set: Q8_0, Q4_0, Q5_0 and IQ4_NL weights take two blocks
 * per 512-bit step with vpdpbusd (u8 x s8 -> s32 in one instruction), Q4_K and Q6_K 64
 * elements per 512-bit vpdpbusd + vpdpwssd (the sub-block scale), in the avx2 set's integer
 * chain (one float step per superblock; gemm_avx512_colsk.c takes 5 to 16 sequences); float
 * weights and the float kernels reuse the AVX2 code. Reached only through kern_ops_get after
 * a CPU check. As in the AVX2 set, a sequence's instruction stream does not depend on how
 * many sequences share the tile, so batching is bit-exact. */
#include "kernels.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "gemm.h"
#include "kernels_simd.h"
#include "quant.h"

static AI float hsum16(__m512 v)
{
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
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

/* The 32-element block types whose weights are one f16 scale times signed bytes, run by
 * the i8 tiles below: kind 0 Q8_0, 1 Q4_0, 2 Q5_0 (q - 16), 3 IQ4_NL (the table's levels). */
enum { I8_Q8_0, I8_Q4_0, I8_Q5_0, I8_IQ4_NL };

/* The 32 signed weights of block i of a row of kind, in element order. */
static AI __m256i i8_weights(const void *w, const int kind, int i)
{
    if (kind == I8_Q8_0)
        return _mm256_loadu_si256((const __m256i *)((const struct quant_block_q8_0 *)w)[i].qs);
    if (kind == I8_Q4_0)
        return q4_0_weights((const struct quant_block_q4_0 *)w + i);
    const uint8_t *qs = kind == I8_Q5_0 ? ((const struct quant_block_q5_0 *)w)[i].qs
                                        : ((const struct quant_block_iq4_nl *)w)[i].qs;
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
                                 _mm256_set1_epi8(15));
    if (kind == I8_IQ4_NL)
        return _mm256_shuffle_epi8(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4_values)), q);
    uint32_t h;
    memcpy(&h, ((const struct quant_block_q5_0 *)w)[i].qh, sizeof h);
    q = _mm256_or_si256(q, _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10)));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
}

/* The 32 weights of block i of a 4- or 5-bit kind as unsigned codes u = w + i8_bias(kind):
 * Q4_0's and Q5_0's stored codes, IQ4_NL's levels with the sign bit flipped (+128). */
static AI __m256i i8_codes(const void *w, const int kind, int i)
{
    const uint8_t *qs = kind == I8_Q4_0   ? ((const struct quant_block_q4_0 *)w)[i].qs
                      : kind == I8_Q5_0 ? ((const struct quant_block_q5_0 *)w)[i].qs
                                        : ((const struct quant_block_iq4_nl *)w)[i].qs;
    __m256i q = nibbles(qs);
    if (kind == I8_IQ4_NL)
        return _mm256_shuffle_epi8(_mm256_xor_si256(iq4_table(), _mm256_set1_epi8((char)0x80)), q);
    if (kind == I8_Q4_0)
        return q;
    uint32_t h;
    memcpy(&h, ((const struct quant_block_q5_0 *)w)[i].qh, sizeof h);
    return _mm256_or_si256(q, _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10)));
}

static AI int i8_bias(const int kind)
{
    return kind == I8_Q4_0 ? 8 : kind == I8_Q5_0 ? 16 : 128;
}

/* The f16 scale of block i of a row of kind. */
static AI uint16_t i8_scale(const void *w, const int kind, int i)
{
    if (kind == I8_Q8_0)
        return ((const struct quant_block_q8_0 *)w)[i].d;
    if (kind == I8_Q4_0)
        return ((const struct quant_block_q4_0 *)w)[i].d;
    if (kind == I8_Q5_0)
        return ((const struct quant_block_q5_0 *)w)[i].d;
    return ((const struct quant_block_iq4_nl *)w)[i].d;
}

/* One weight row (nb blocks of signed 8-bit weights of an i8 kind) against S Q8_0
 * activations: pairs of blocks in 512 bits, then a last odd block in 256 bits. The sign of w
 * moves onto x so vpdpbusd sees |w| as unsigned. */
static AI void tile_i8(const void *w, const int kind, const char *x, size_t xs, int nb,
                       const int S, float *y, size_t ys)
{
    __m512 acc[4];
    int i = 0;
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm512_setzero_ps();
    for (; i + 2 <= nb; i += 2) {
        __m512i qw = _mm512_inserti64x4(_mm512_castsi256_si512(i8_weights(w, kind, i)),
                                        i8_weights(w, kind, i + 1), 1);
        __m512 dw = scales2(i8_scale(w, kind, i), i8_scale(w, kind, i + 1));
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
        __m256i qw = i8_weights(w, kind, i);
        float dw = _cvtsh_ss(i8_scale(w, kind, i));
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

static AI void row_i8(const void *w, const int kind, const char *x, size_t xs, int n, int ns,
                      float *y, size_t ys)
{
    int s = 0, nb = n / QUANT_QK;
    for (; s + 4 <= ns; s += 4)
        tile_i8(w, kind, x + s * xs, xs, nb, 4, y + s * ys, ys);
    for (; s < ns; s++)
        tile_i8(w, kind, x + s * xs, xs, nb, 1, y + s * ys, ys);
}

/* R adjacent weight rows of an i8 kind (rb bytes apart) against S Q8_0 activations: each
 * activation block is loaded and its scale converted once for the R rows, and each weight
 * block decoded once for the S sequences. Q8_0: x is offset to unsigned (x + 128, an xor) and
 * vpdpbusd multiplies it by the signed weights starting from -128 * (sum of the weights of
 * each group of four), a per-row term. The 4- and 5-bit kinds multiply their unsigned codes
 * w + c by the signed x starting from -c * (sum of x), a per-sequence term, so a row costs
 * only its decode and the products. Each product sum is exactly tile_i8's, and so is every
 * float operation after it: results match tile_i8 bit for bit whatever shares a tile. */
static AI void tile_rows_i8(const char *w, size_t rb, const int R, const int kind, const char *x,
                            size_t xs, int nb, const int S, float *y, size_t ys)
{
    const __m512i off = _mm512_set1_epi8((char)0x80);
    __m512 acc[4][4];
    int i = 0;
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            acc[r][k] = _mm512_setzero_ps();
    }
    for (; i + 2 <= nb && kind != I8_Q8_0; i += 2) {
        __m512i qx[4], nx[4];
        __m512 dx[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            qx[k] = load2(b[0].qs, b[1].qs);
            nx[k] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                         _mm512_set1_epi8((char)i8_bias(kind)),
                                                         qx[k]));
            dx[k] = scales2(b[0].d, b[1].d);
        }
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const char *wr = w + r * rb;
            __m512i uw = join(i8_codes(wr, kind, i), i8_codes(wr, kind, i + 1));
            __m512 dw = scales2(i8_scale(wr, kind, i), i8_scale(wr, kind, i + 1));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m512i p = _mm512_dpbusd_epi32(nx[k], uw, qx[k]);
                __m512 d = _mm512_mul_ps(dw, dx[k]);
                acc[r][k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r][k]);
            }
        }
    }
    for (; i + 2 <= nb; i += 2) {
        __m512i ux[4];
        __m512 dx[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            ux[k] = _mm512_xor_si512(load2(b[0].qs, b[1].qs), off);
            dx[k] = scales2(b[0].d, b[1].d);
        }
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const char *wr = w + r * rb;
            __m512i qw = _mm512_inserti64x4(_mm512_castsi256_si512(i8_weights(wr, kind, i)),
                                            i8_weights(wr, kind, i + 1), 1);
            __m512 dw = scales2(i8_scale(wr, kind, i), i8_scale(wr, kind, i + 1));
            __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(),
                                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, qw));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m512i p = _mm512_dpbusd_epi32(neg, ux[k], qw);
                __m512 d = _mm512_mul_ps(dw, dx[k]);
                acc[r][k] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r][k]);
            }
        }
    }
    if (i < nb) {
        const __m256i off8 = _mm256_set1_epi8((char)0x80);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const char *wr = w + r * rb;
            __m256i qw = i8_weights(wr, kind, i);
            float dw = _cvtsh_ss(i8_scale(wr, kind, i));
            __m256i neg = _mm256_sub_epi32(_mm256_setzero_si256(),
                                           _mm256_dpbusd_epi32(_mm256_setzero_si256(), off8, qw));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                const struct quant_block_q8_0 *b =
                    (const struct quant_block_q8_0 *)(x + k * xs) + i;
                __m256i ux = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), off8);
                __m256i p = _mm256_dpbusd_epi32(neg, ux, qw);
                __m256 v = _mm256_mul_ps(_mm256_set1_ps(dw * _cvtsh_ss(b->d)),
                                         _mm256_cvtepi32_ps(p));
                acc[r][k] = _mm512_add_ps(acc[r][k], _mm512_zextps256_ps512(v));
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            y[k * ys + r] = hsum16(acc[r][k]);
    }
}

/* Rows [0, R) of a tile against ns sequences, four at a time. */
static AI void rows_i8(const char *w, size_t rb, const int R, const int kind, const char *x,
                       size_t xs,
                       int n, int ns, float *y, size_t ys)
{
    int s = 0, nb = n / QUANT_QK;
    for (; s + 4 <= ns; s += 4)
        tile_rows_i8(w, rb, R, kind, x + s * xs, xs, nb, 4, y + s * ys, ys);
    for (; s < ns; s++)
        tile_rows_i8(w, rb, R, kind, x + s * xs, xs, nb, 1, y + s * ys, ys);
}

/* Four rows of kind (each kind its own specialised copy). */
static void rows4_i8(const char *w, size_t rb, int kind, const char *x, size_t xs, int n, int ns,
                     float *y, size_t ys)
{
    switch (kind) {
    case I8_Q8_0: rows_i8(w, rb, 4, I8_Q8_0, x, xs, n, ns, y, ys); break;
    case I8_Q4_0: rows_i8(w, rb, 4, I8_Q4_0, x, xs, n, ns, y, ys); break;
    case I8_Q5_0: rows_i8(w, rb, 4, I8_Q5_0, x, xs, n, ns, y, ys); break;
    default: rows_i8(w, rb, 4, I8_IQ4_NL, x, xs, n, ns, y, ys); break;
    }
}

/* The i8 kind of a weight type, -1 for another type. */
static int i8_kind(enum ggml_type t)
{
    return t == GGML_TYPE_Q8_0 ? I8_Q8_0 : t == GGML_TYPE_Q4_0 ? I8_Q4_0
         : t == GGML_TYPE_Q5_0 ? I8_Q5_0 : t == GGML_TYPE_IQ4_NL ? I8_IQ4_NL : -1;
}

/* Q4_K and Q6_K with vpdpbusd: each 32-bit lane's sum of four u8 x s8 products (at most
 * 4 * 63 * 127 = 32004 in magnitude, so it is its low int16) is multiplied by its sub-block's
 * scale by vpdpwssd against the scale zero-extended to 32 bits (the high int16, 0 or -1, meets
 * a 0). Per (row, sequence) the result is the avx2 set's chain (kernels_avx2.c), superblock by
 * superblock: the superblock's exact integer sum isum (sub-block scales folded in) and for
 * Q4_K the min sum msum, summed across lanes, then acc = fma(isum, d * dx, acc) and
 * acc = fnma(msum, dmin * dx, acc). So a row is the same bits here, in the avx2 set and in
 * gemm_avx512_colsk.c. A tile is one weight row x S sequences:
 * each block is decoded once for the S sequences; the float step covers the S sequences at
 * once, lane k being sequence k. */

/* Q4_K's scales and mins from their 12 packed bytes (q4_k_scales' formulas) with broadcast
 * loads and lane-wise operations, every 128-bit lane the same: r1 bytes 0..3 are scales 0..3,
 * bytes 4..7 mins 0..3, bytes 8..11 mins 4..7; r2 bytes 0..3 scales 4..7. Words u0..u2 of the
 * packed bytes are lined up by where the loads start (the block's head, its scales, and 8
 * bytes on), all inside the block, so no shuffles are spent on them. */
static AI void q4_k_scales_v(__m512i v, __m512i vh, __m512i v8, __m512i *r1, __m512i *r2)
{
    /* lanes: v u0 u1 u2 u3, vh (d, dmin) u0 u1 u2, v8 u2 u3 (codes) */
    __m512i x = _mm512_srlv_epi32(v, _mm512_set4_epi32(0, 4, 0, 0));
    __m512i t = _mm512_and_si512(_mm512_srli_epi32(vh, 2), _mm512_set4_epi32(0, 0x30303030, 0, 0));
    /* (a & b) | c */
    *r1 = _mm512_ternarylogic_epi32(
        x, _mm512_set4_epi32(0, 0x0f0f0f0f, 0x3f3f3f3f, 0x3f3f3f3f), t, 0xea);
    __m512i h = _mm512_and_si512(_mm512_srli_epi32(v, 2), _mm512_set1_epi32(0x30303030));
    *r2 = _mm512_ternarylogic_epi32(v8, _mm512_set1_epi32(0x0f0f0f0f), h, 0xea);
}

static AI void q4_k_scales_b(const struct quant_block_q4_k *b, __m512i *r1, __m512i *r2)
{
    q4_k_scales_v(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)b->scales)),
                  _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)b)),
                  _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(b->scales + 8))),
                  r1, r2);
}

/* The same for blocks b0..b3 at once, block k in 128-bit lane k: the words of the block's
 * head and of 8 bytes on are the scales' 16 bytes shifted within each lane (the head's d,
 * dmin come out 0 and are not used). */
static AI void q4_k_scales_4(const struct quant_block_q4_k *b0, size_t rb, __m512i *r1,
                             __m512i *r2)
{
    const char *s = (const char *)b0->scales;
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)s));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(s + rb)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(s + 2 * rb)), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(s + 3 * rb)), 3);
    q4_k_scales_v(v, _mm512_bslli_epi128(v, 4), _mm512_bsrli_epi128(v, 8), r1, r2);
}

/* Q4_K block b as four 64-byte vectors (chunk c's low nibbles are elements 64c..64c+31, its
 * high nibbles 64c+32..64c+63: sub-blocks 2c and 2c+1) and the matching scale vectors (each
 * lane's scale zero-extended to 32 bits); mv the mins, each twice, as int16 for the bsums. A
 * chunk is one broadcast load, one per-word shift and one and; a scale vector one byte shuffle. */
static AI void q4_k_decode_r(const struct quant_block_q4_k *b, __m512i r1, __m512i r2,
                             __m512i q[4], __m512i scv[4], __m256i *mv)
{
#define SC2(a, b) (int)(0x80808000u | (b)), (int)(0x80808000u | (b)), (int)(0x80808000u | (b)), \
                  (int)(0x80808000u | (b)), (int)(0x80808000u | (b)), (int)(0x80808000u | (b)), \
                  (int)(0x80808000u | (b)), (int)(0x80808000u | (b)), (int)(0x80808000u | (a)), \
                  (int)(0x80808000u | (a)), (int)(0x80808000u | (a)), (int)(0x80808000u | (a)), \
                  (int)(0x80808000u | (a)), (int)(0x80808000u | (a)), (int)(0x80808000u | (a)), \
                  (int)(0x80808000u | (a))
    /* lanes 0..7 byte a of r, lanes 8..15 byte b */
    const __m512i pick01 = _mm512_set_epi32(SC2(0, 1)), pick23 = _mm512_set_epi32(SC2(2, 3));
#undef SC2
    const __m256i mins = _mm256_set_epi8(
        -128, 11, -128, 11, -128, 10, -128, 10, -128, 9, -128, 9, -128, 8, -128, 8,
        -128, 7, -128, 7, -128, 6, -128, 6, -128, 5, -128, 5, -128, 4, -128, 4);
    const __m512i low4 = _mm512_set1_epi8(15);
    /* words 16..31 (the upper 256 bits) shifted by 4: the high nibbles */
    const __m512i hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    _Pragma("GCC unroll 4")
    for (int c = 0; c < 4; c++) {
        __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * c)));
        q[c] = _mm512_and_si512(_mm512_srlv_epi16(raw, hi), low4);
        scv[c] = _mm512_shuffle_epi8(c < 2 ? r1 : r2, c % 2 ? pick23 : pick01);
    }
    /* bsums k covers 16 elements; sub-block j is bsums 2j and 2j+1 */
    *mv = _mm256_shuffle_epi8(_mm512_castsi512_si256(r1), mins);
}

static AI void q4_k_decode(const struct quant_block_q4_k *b, __m512i q[4], __m512i scv[4],
                           __m256i *mv)
{
    __m512i r1, r2;
    q4_k_scales_b(b, &r1, &r2);
    q4_k_decode_r(b, r1, r2, q, scv, mv);
}

/* The block's scaled sums, lane-wise: the first chunk by vpmaddwd (no zero to start from). */
static AI __m512i k_dot(const __m512i q[4], const __m512i scv[4], const __m512i xv[4])
{
    __m512i isum = _mm512_madd_epi16(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], xv[0]),
                                     scv[0]);
    _Pragma("GCC unroll 3")
    for (int c = 1; c < 4; c++)
        isum = _mm512_dpwssd_epi32(isum, _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[c], xv[c]),
                                   scv[c]);
    return isum;
}

/* The 16 int32 lanes of v added pairwise into 8 (exact). */
static AI __m256i fold16(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* Lane k: the sum of v[k]'s eight int32 lanes, for k < S (the others repeat v[0]). */
static AI __m128i hsum8_s(const __m256i *v, const int S)
{
    if (S == 1)
        return hsum8_all(v[0]);
    __m256i a = v[0], b = S > 1 ? v[1] : v[0], c = S > 2 ? v[2] : v[0], d = S > 3 ? v[3] : v[0];
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* The Q8_K scales of superblock i of S activations, lane k for sequence k. */
static AI __m128 act_dk4(const char *x, size_t xs, int i, const int S)
{
#define DK(k) (S > (k) ? ((const struct quant_block_q8_k *)(x + (k) * xs))[i].d : 0.0f)
    return _mm_set_ps(DK(3), DK(2), DK(1), DK(0));
#undef DK
}

/* One superblock's float step for S sequences (lane k): acc = fma(isum, d * dx, acc), then
 * with mins acc = fnma(msum, dmin * dx, acc). */
static AI __m128 k_step(__m128 acc, __m128i isum, __m128i msum, const int min, float d,
                        float dmin, __m128 dx)
{
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(_mm_set1_ps(d), dx), acc);
    if (min)
        acc = _mm_fnmadd_ps(_mm_cvtepi32_ps(msum), _mm_mul_ps(_mm_set1_ps(dmin), dx), acc);
    return acc;
}

static AI void store_s(__m128 acc, const int S, float *y, size_t ys)
{
    float a[4];
    _mm_storeu_ps(a, acc);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = a[k];
}

static AI void tile_q4_k(const char *w, const char *x, size_t xs, int nb, const int S, float *y,
                         size_t ys)
{
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m512i q[4], scv[4];
        __m256i mv, is[4], ms[4];
        const struct quant_block_q4_k *b = (const struct quant_block_q4_k *)w + i;
        prefetch_unit(b + ROW_PFK, sizeof *b);
        q4_k_decode(b, q, scv, &mv);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)(x + k * xs) + i;
            __m512i xv[4];
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++)
                xv[c] = _mm512_loadu_si512(a->qs + 64 * c);
            is[k] = fold16(k_dot(q, scv, xv));
            ms[k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), mv);
        }
        if (S == 1) {
            /* both sums in one reduction (lanes 0 and 2), then k_step's two operations in
             * lane 0: d and dmin converted together, each times dx */
            __m256i h = _mm256_hadd_epi32(is[0], ms[0]);
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            __m128 f = _mm_cvtepi32_ps(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
            uint32_t dd;
            memcpy(&dd, &b->d, sizeof dd); /* d, dmin */
            __m128 g = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)),
                                  _mm_set1_ps(((const struct quant_block_q8_k *)x)[i].d));
            acc = _mm_fmadd_ps(f, g, acc);
            acc = _mm_fnmadd_ps(_mm_movehl_ps(f, f), _mm_movehdup_ps(g), acc);
        } else {
            acc = k_step(acc, hsum8_s(is, S), hsum8_s(ms, S), 1, _cvtsh_ss(b->d),
                         _cvtsh_ss(b->dmin), act_dk4(x, xs, i, S));
        }
    }
    store_s(acc, S, y, ys);
}

/* Q6_K block b as four 64-byte vectors of codes + 32 (0..63; vector j holds sub-blocks
 * 4j..4j+3 of 16 elements each: q6_k_codes.h's p0|p1 and p2|p3 of half j / 2) and the
 * matching scale vectors; sc16 the 16 scales. A half is one 64-byte load of its low bits, a
 * broadcast of its high bits, per-word shifts by half (the two 32-byte halves' qh bits sit
 * two apart) and masks: no inserts. */
static AI void q6_k_decode(const struct quant_block_q6_k *b, __m512i q[4], __m512i scv[4],
                           __m256i *sc16)
{
    const __m512i low4 = _mm512_set1_epi8(15), hi2 = _mm512_set1_epi8(0x30);
    /* words 0..15 (the first 32 codes) by the first count, 16..31 by the second */
    const __m512i up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        /* (a & b) | c */
        q[2 * h] = _mm512_ternarylogic_epi32(_mm512_sllv_epi16(qh, up), hi2,
                                             _mm512_and_si512(l, low4), 0xea);
        q[2 * h + 1] = _mm512_ternarylogic_epi32(
            _mm512_srli_epi16(l, 4), low4, _mm512_and_si512(_mm512_srlv_epi16(qh, down), hi2),
            0xea);
    }
    *sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    /* each scale's int16 bits zero-extended: the high int16 of each lane is 0 */
    __m512i sc32 = _mm512_cvtepu16_epi32(*sc16);
    const __m512i quarter = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++)
        scv[j] = _mm512_permutexvar_epi32(_mm512_add_epi32(quarter, _mm512_set1_epi32(4 * j)),
                                          sc32);
}

static AI void tile_q6_k(const char *w, const char *x, size_t xs, int nb, const int S, float *y,
                         size_t ys)
{
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m512i q[4], scv[4];
        __m256i sc16, is[4];
        const struct quant_block_q6_k *b = (const struct quant_block_q6_k *)w + i;
        prefetch_unit(b + ROW_PFK, sizeof *b);
        q6_k_decode(b, q, scv, &sc16);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)(x + k * xs) + i;
            __m512i xv[4];
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++)
                xv[c] = _mm512_loadu_si512(a->qs + 64 * c);
            /* q was stored +32: subtract 32 * sum_k sc_k * bsum_k */
            __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
            __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
            is[k] = _mm256_sub_epi32(fold16(k_dot(q, scv, xv)), off);
        }
        if (S == 1) /* k_step in lane 0 */
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum8_all(is[0])),
                               _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(b->d)),
                                          _mm_load_ss(&((const struct quant_block_q8_k *)x)[i].d)),
                               acc);
        else
            acc = k_step(acc, hsum8_s(is, S), _mm_setzero_si128(), 0, _cvtsh_ss(b->d), 0.0f,
                         act_dk4(x, xs, i, S));
    }
    store_s(acc, S, y, ys);
}

/* ---- four rows against one sequence (batch-1 decode) ----
 * Four adjacent rows share each activation superblock's loads and, the point of it, reduce
 * their superblock sums together: one transposed reduction leaves row k's exact sums in lane
 * k, and the four rows' float steps are then lane-wise operations, lane k being tile_q*_k's
 * S = 1 chain of row k (the same integers, conversions and order: the same bits). On a
 * Zen 5 a lone Q4_K row in cache spent about a third of its time on its own reduction and
 * float step (dropping them took it from 4.5 to 3.2 ns per superblock), which left it
 * compute-bound at ~30 GB/s; four rows share one reduction instead. */

/* Lanes 0..7 the sums of the 16 lanes of a, b, c, d and of the 8 lanes of e, f, g, h, each
 * a row's, in the order a, b, c, d, e, f, g, h (exact). */
static AI __m256i sum4x2(__m512i a, __m512i b, __m512i c, __m512i d, __m256i e, __m256i f,
                         __m256i g, __m256i h)
{
    /* halves folded: [a | b] and [c | d], 8 lanes each; [e | f] and [g | h] */
    __m512i ab = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44),
                                  _mm512_shuffle_i64x2(a, b, 0xee));
    __m512i cd = _mm512_add_epi32(_mm512_shuffle_i64x2(c, d, 0x44),
                                  _mm512_shuffle_i64x2(c, d, 0xee));
    __m512i ef = join(e, f), gh = join(g, h);
    /* each 128-bit lane: two-lane sums of ab, cd interleaved, then of ef, gh */
    __m512i p = _mm512_add_epi32(_mm512_unpacklo_epi32(ab, cd), _mm512_unpackhi_epi32(ab, cd));
    __m512i q = _mm512_add_epi32(_mm512_unpacklo_epi32(ef, gh), _mm512_unpackhi_epi32(ef, gh));
    /* each 128-bit lane: four-lane sums (ab, cd, ef, gh) */
    __m512i r = _mm512_add_epi32(_mm512_unpacklo_epi64(p, q), _mm512_unpackhi_epi64(p, q));
    /* 128-bit lanes 0 + 1 (a, c, e, g) and 2 + 3 (b, d, f, h) */
    __m512i t = _mm512_add_epi32(r, _mm512_shuffle_i64x2(r, r, 0xb1));
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(
        _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 11, 3, 10, 2, 9, 1, 8, 0), t));
}

/* Rows w, w + rb, w + 2 rb, w + 3 rb (nb superblocks each) against one Q8_K activation x:
 * y[r] for row r, the bits of tile_q4_k at S = 1. */
static AI void rows4_q4_k1(const char *w, size_t rb, const char *x, int nb, float *y)
{
    struct pf4 pf = pf4_start(w, rb, nb, sizeof(struct quant_block_q4_k));
    /* per dword (d, dmin): the four d, then the four dmin */
    const __m128i dsplit = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)x + i;
        __m512i xv[4], is[4];
        __m256i ms[4];
        uint32_t dd[4];
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++)
            xv[c] = _mm512_loadu_si512(a->qs + 64 * c);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
        __m512i r1, r2;
        q4_k_scales_4((const struct quant_block_q4_k *)w + i, rb, &r1, &r2);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < 4; r++) {
            __m512i q[4], scv[4];
            __m256i mv;
            const struct quant_block_q4_k *b = (const struct quant_block_q4_k *)(w + r * rb) + i;
            prefetch_unit(pf.p + r * rb, sizeof *b);
            q4_k_decode_r(b, _mm512_shuffle_i32x4(r1, r1, 0x55 * r),
                          _mm512_shuffle_i32x4(r2, r2, 0x55 * r), q, scv, &mv);
            is[r] = k_dot(q, scv, xv);
            ms[r] = _mm256_madd_epi16(bs, mv);
            memcpy(&dd[r], &b->d, sizeof dd[r]); /* d, dmin */
        }
        /* lanes 0..3 isum of rows 0..3, lanes 4..7 msum; g: d * dx, then dmin * dx */
        __m256 f = _mm256_cvtepi32_ps(sum4x2(is[0], is[1], is[2], is[3], ms[0], ms[1], ms[2],
                                             ms[3]));
        __m128i h = _mm_insert_epi32(_mm_insert_epi32(_mm_insert_epi32(
            _mm_cvtsi32_si128((int)dd[0]), (int)dd[1], 1), (int)dd[2], 2), (int)dd[3], 3);
        __m256 g = _mm256_mul_ps(_mm256_cvtph_ps(_mm_shuffle_epi8(h, dsplit)),
                                 _mm256_set1_ps(a->d));
        acc = _mm_fmadd_ps(_mm256_castps256_ps128(f), _mm256_castps256_ps128(g), acc);
        acc = _mm_fnmadd_ps(_mm256_extractf128_ps(f, 1), _mm256_extractf128_ps(g, 1), acc);
        pf4_next(&pf);
    }
    _mm_storeu_ps(y, acc);
}

/* The same for Q6_K: the bits of tile_q6_k at S = 1 (the +32 offsets' sums subtracted
 * after the reduction rather than before: the same integers). */
static AI void rows4_q6_k1(const char *w, size_t rb, const char *x, int nb, float *y)
{
    struct pf4 pf = pf4_start(w, rb, nb, sizeof(struct quant_block_q6_k));
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)x + i;
        __m512i xv[4], is[4];
        __m256i off[4];
        uint64_t d4 = 0;
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++)
            xv[c] = _mm512_loadu_si512(a->qs + 64 * c);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < 4; r++) {
            __m512i q[4], scv[4];
            __m256i sc16;
            const struct quant_block_q6_k *b = (const struct quant_block_q6_k *)(w + r * rb) + i;
            prefetch_unit(pf.p + r * rb, sizeof *b);
            q6_k_decode(b, q, scv, &sc16);
            is[r] = k_dot(q, scv, xv);
            /* q was stored +32: 32 * sum_k sc_k * bsum_k, subtracted below */
            off[r] = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
            d4 |= (uint64_t)b->d << 16 * r;
        }
        __m256i s = sum4x2(is[0], is[1], is[2], is[3], off[0], off[1], off[2], off[3]);
        __m128 f = _mm_cvtepi32_ps(_mm_sub_epi32(_mm256_castsi256_si128(s),
                                                 _mm256_extracti128_si256(s, 1)));
        __m128 g = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)d4)), _mm_set1_ps(a->d));
        acc = _mm_fmadd_ps(f, g, acc);
        pf4_next(&pf);
    }
    _mm_storeu_ps(y, acc);
}

/* One K row against ns sequences, four at a time. */
#define ROWS_K(name, tile)                                                                     \
    static void name(const char *w, const char *x, size_t xs, int n, int ns, float *y,        \
                     size_t ys)                                                                \
    {                                                                                          \
        int s = 0;                                                                             \
        for (; s + 4 <= ns; s += 4)                                                            \
            tile(w, x + s * xs, xs, n / QUANT_QK_K, 4, y + s * ys, ys);                        \
        for (; s < ns; s++)                                                                    \
            tile(w, x + s * xs, xs, n / QUANT_QK_K, 1, y + s * ys, ys);                        \
    }

ROWS_K(row_q4_k, tile_q4_k)
ROWS_K(row_q6_k, tile_q6_k)

/* Calls of this many sequences up to 16 take kern_gemm_avx512_colsk for Q4_K and Q6_K (at 4,
 * its two-lanes-a-sequence form was slower than the row tiles in bench; at 8, faster). */
#ifndef K_COLS
#define K_COLS 5
#endif

static void avx512_matmul(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                          float *Y, int y_stride, int row_begin, int row_end)
{
    enum ggml_type t = W->type;
    if (kern_gemm_avx512_agrees(t) && kern_gemm_avx512(W, X, n_seq, Y, y_stride, row_begin,
                                                        row_end) == 0)
        return;
    if ((t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K) && n_seq >= K_COLS && n_seq <= 16 &&
        kern_gemm_avx512_colsk(W, X, n_seq, Y, y_stride, row_begin, row_end) == 0)
        return;
    kern_row_fn ext = kern_avx512_ext_row(t);
    if (ext) {
        int chunk = kern_seq_chunk(X->stride);
        for (int s0 = 0; s0 < n_seq; s0 += chunk) {
            int ns = n_seq - s0 < chunk ? n_seq - s0 : chunk;
            for (int r = row_begin; r < row_end; r++)
                ext((const char *)W->data + (size_t)r * W->row_bytes,
                    (const char *)X->data + (size_t)s0 * X->stride, X->stride, X->n, ns,
                    Y + (size_t)s0 * y_stride + r, (size_t)y_stride);
        }
        return;
    }
    int kind = i8_kind(t);
    if (kind < 0 && t != GGML_TYPE_Q4_K && t != GGML_TYPE_Q6_K) {
        kern_avx2_matmul(W, X, n_seq, Y, y_stride, row_begin, row_end);
        return;
    }
    const char *wd = W->data, *xd = X->data;
    int chunk = kern_seq_chunk(X->stride);
    for (int s0 = 0; s0 < n_seq; s0 += chunk) {
        int ns = n_seq - s0 < chunk ? n_seq - s0 : chunk;
        const char *xs0 = xd + (size_t)s0 * X->stride;
        int r = row_begin;
        /* i8 kinds four rows at a time (tile_i8 gives the same bits): each activation block
         * is loaded, offset and its scale converted once for four rows. By process CPU time
         * at one thread (bench_kernels, 2048x5632 and 5632x2048) fours beat pairs by 15-25%
         * for Q8_0 at 4, 8 and 16 sequences and by 5-15% for IQ4_NL, and at one sequence
         * neither lost to single rows. Q4_K/Q6_K rows take fours at one sequence (their
         * sums reduced together, rows4_q*_k1), else one row at a time. */
        if (kind >= 0) {
            for (; r + 4 <= row_end; r += 4)
                rows4_i8(wd + (size_t)r * W->row_bytes, W->row_bytes, kind, xs0, X->stride,
                         X->n, ns, Y + (size_t)s0 * y_stride + r, (size_t)y_stride);
        }
        if (ns == 1 && t == GGML_TYPE_Q4_K) {
            for (; r + 4 <= row_end; r += 4)
                rows4_q4_k1(wd + (size_t)r * W->row_bytes, W->row_bytes, xs0,
                            X->n / QUANT_QK_K, Y + (size_t)s0 * y_stride + r);
        } else if (ns == 1 && t == GGML_TYPE_Q6_K) {
            for (; r + 4 <= row_end; r += 4)
                rows4_q6_k1(wd + (size_t)r * W->row_bytes, W->row_bytes, xs0,
                            X->n / QUANT_QK_K, Y + (size_t)s0 * y_stride + r);
        }
        for (; r < row_end; r++) {
            const void *row = wd + (size_t)r * W->row_bytes;
            float *y = Y + (size_t)s0 * y_stride + r;
            if (kind == I8_Q8_0)
                row_i8(row, I8_Q8_0, xs0, X->stride, X->n, ns, y, (size_t)y_stride);
            else if (kind == I8_Q4_0)
                row_i8(row, I8_Q4_0, xs0, X->stride, X->n, ns, y, (size_t)y_stride);
            else if (kind == I8_Q5_0)
                row_i8(row, I8_Q5_0, xs0, X->stride, X->n, ns, y, (size_t)y_stride);
            else if (kind == I8_IQ4_NL)
                row_i8(row, I8_IQ4_NL, xs0, X->stride, X->n, ns, y, (size_t)y_stride);
            else if (t == GGML_TYPE_Q4_K)
                row_q4_k(row, xs0, X->stride, X->n, ns, y, (size_t)y_stride);
            else
                row_q6_k(row, xs0, X->stride, X->n, ns, y, (size_t)y_stride);
        }
    }
}

/* ---- activation quantization, byte for byte quant.c's Q8_0 and Q8_K ---- */

/* 16 floats to int32 as quant.c rounds them: x * id, then +-0.5 by the sign and truncation
 * ((int) of a float: cvtt, INT_MIN out of range and for NaN, as the scalar cvttss2si),
 * clamped to [-127, 127]. */
static AI __m512i q8_round(__m512 x, __m512 id)
{
    __m512 v = _mm512_mul_ps(x, id);
    __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
    __m512 h = _mm512_mask_blend_ps(pos, _mm512_set1_ps(-0.5f), _mm512_set1_ps(0.5f));
    __m512i q = _mm512_cvttps_epi32(_mm512_add_ps(v, h));
    return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)),
                            _mm512_set1_epi32(127));
}

/* max |x| over n floats (n a multiple of 16); NaN never wins, as in quant.c's max_abs */
static AI float q8_amax(const float *x, int n)
{
    __m512 m = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + j));
        m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(a, m, _CMP_GT_OQ), a);
    }
    return _mm512_reduce_max_ps(m);
}

static int avx512_quantize_act(enum ggml_type wtype, const float *restrict x, int n,
                               void *restrict out)
{
    enum ggml_type at = kern_act_type(wtype);

    if (at == GGML_TYPE_Q8_0 && n % QUANT_QK == 0) {
        struct quant_block_q8_0 *b = out;
        for (int i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
            float d = q8_amax(x, QUANT_QK) / 127.0f;
            __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
            b[i].d = quant_f32_to_f16(d);
            _mm_storeu_si128((__m128i *)b[i].qs,
                             _mm512_cvtepi32_epi8(q8_round(_mm512_loadu_ps(x), id)));
            _mm_storeu_si128((__m128i *)(b[i].qs + 16),
                             _mm512_cvtepi32_epi8(q8_round(_mm512_loadu_ps(x + 16), id)));
        }
        return 0;
    }
    if (at == GGML_TYPE_Q8_K && n % QUANT_QK_K == 0) {
        struct quant_block_q8_k *b = out;
        for (int i = 0; i < n / QUANT_QK_K; i++, x += QUANT_QK_K) {
            float d = q8_amax(x, QUANT_QK_K) / 127.0f;
            __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
            b[i].d = d;
            for (int k = 0; k < 16; k++) {
                __m512i q = q8_round(_mm512_loadu_ps(x + 16 * k), id);
                _mm_storeu_si128((__m128i *)(b[i].qs + 16 * k), _mm512_cvtepi32_epi8(q));
                b[i].bsums[k] = (int16_t)_mm512_reduce_add_epi32(q);
            }
        }
        return 0;
    }
    return kern_quantize_act(wtype, x, n, out);
}

/* Q4_K and Q6_K prompt rows are decode rows, in even chunks of at most 16 sequences
 * (gemm_avx512_colsk.c, or the row tiles for 4 or fewer): a position's keys and values are
 * then the same bits whether a prompt or a decode step computed them, and the KV cache
 * shares both (rows_agree). The panel tiles decode each block once for up to 128 sequences,
 * but spend a float step per sub-block; in cache, 2048x5632, 512 sequences, CPU ms: Q4_K
 * 241.95, 112.23 (panel) / 155.23, 91.12 (chunks), Q6_K 115.56, 117.74 / 117.35, 115.20. */
static int k_by_decode_rows(enum ggml_type t)
{
    return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K;
}

static void avx512_gemm(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                        int y_stride, int row_begin, int row_end)
{
    if (k_by_decode_rows(W->type)) {
        int nc = (n_seq + 15) / 16, per = nc ? (n_seq + nc - 1) / nc : 0;
        for (int s0 = 0; s0 < n_seq; s0 += per) {
            struct kern_act Xc = *X;
            Xc.data = (const char *)X->data + (size_t)s0 * X->stride;
            avx512_matmul(W, &Xc, n_seq - s0 < per ? n_seq - s0 : per,
                          Y + (size_t)s0 * y_stride, y_stride, row_begin, row_end);
        }
        return;
    }
    if (kern_gemm_avx512(W, X, n_seq, Y, y_stride, row_begin, row_end) < 0)
        avx512_matmul(W, X, n_seq, Y, y_stride, row_begin, row_end);
}

static int avx512_rows_agree(enum ggml_type t)
{
    return k_by_decode_rows(t) || kern_gemm_avx512_agrees(t);
}

static const struct kern_ops avx512_ops = {
    .name = "avx512",
    .matmul = avx512_matmul,
    .gemm = avx512_gemm,
    .rows_agree = avx512_rows_agree,
    .dot_f32 = kern_avx2_dot_f32,
    .dot_f16 = kern_avx2_dot_f16,
    .axpy_f32 = kern_avx2_axpy_f32,
    .axpy_f16 = kern_avx2_axpy_f16,
    .rmsnorm = kern_avx2_rmsnorm,
    .softmax = kern_avx2_softmax,
    .swiglu = kern_avx2_swiglu,
    .add = kern_avx2_add,
    .quantize_act = avx512_quantize_act,
};

const struct kern_ops *kern_ops_avx512_table(void)
{
    return &avx512_ops;
}
