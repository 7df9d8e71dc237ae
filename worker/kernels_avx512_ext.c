/* AVX-512 (F/BW/VL/VNNI) matmul rows for Q4_1 and Q5_1 (two 32-element blocks per 512-bit
 * step against Q8_0 activations, vpdpbusd; Q5_0 and IQ4_NL run kernels_avx512.c's signed
 * 8-bit tiles with Q8_0 and Q4_0) and Q2_K, Q3_K, Q5_K, IQ4_XS (64
 * elements per 512-bit maddubs + madd against Q8_K). Integer parts are exact; only the
 * float accumulation order differs from the scalar reference. A sequence's instruction
 * stream does not depend on how many sequences share a tile, so batching is bit-exact.
 * Reached only through the avx512 table after a CPU check. */
#include "kernels.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels_simd.h"
#include "quant.h"

static AI float hsum16(__m512 v)
{
    return _mm512_reduce_add_ps(v);
}

/* 0x10 in byte j where bit j of the little-endian uint32 at qh is set. */
static AI __m256i high_bits(const uint8_t qh[4])
{
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10));
}

enum b32_kind { B32_Q4_1, B32_Q5_0, B32_Q5_1, B32_IQ4_NL };

/* Block i of a 32-element type: its 32 codes as bytes (signed for Q5_0/IQ4_NL, unsigned
 * for Q4_1/Q5_1), its scale and min. */
static AI __m256i b32_decode(const char *w, const enum b32_kind kind, int i, uint16_t *d,
                             uint16_t *m)
{
    if (kind == B32_Q4_1) {
        const struct quant_block_q4_1 *b = (const struct quant_block_q4_1 *)w + i;
        *d = b->d;
        *m = b->m;
        return nibbles(b->qs);
    }
    if (kind == B32_Q5_1) {
        const struct quant_block_q5_1 *b = (const struct quant_block_q5_1 *)w + i;
        *d = b->d;
        *m = b->m;
        return _mm256_or_si256(nibbles(b->qs), high_bits(b->qh));
    }
    if (kind == B32_Q5_0) {
        const struct quant_block_q5_0 *b = (const struct quant_block_q5_0 *)w + i;
        *d = b->d;
        *m = 0;
        return _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), high_bits(b->qh)),
                               _mm256_set1_epi8(16));
    }
    const struct quant_block_iq4_nl *b = (const struct quant_block_iq4_nl *)w + i;
    *d = b->d;
    *m = 0;
    return _mm256_shuffle_epi8(iq4_table(), nibbles(b->qs));
}

static AI __m512i load2(const int8_t *a, const int8_t *b)
{
    return join(_mm256_loadu_si256((const __m256i *)a), _mm256_loadu_si256((const __m256i *)b));
}

/* One weight row of nb 32-element blocks against S Q8_0 activations, two blocks per step,
 * a last odd block in the low half with a zero high half (its products are zero). */
static AI void tile_b32(const char *w, const enum b32_kind kind, const char *x, size_t xs,
                        int nb, const int S, float *y, size_t ys)
{
    const int sgn = kind == B32_Q5_0 || kind == B32_IQ4_NL;
    const __m512i ones8 = _mm512_set1_epi8(1);
    __m512 acc[4], accm[4]; /* the mins in a chain of their own */
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = accm[k] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i += 2) {
        int two = i + 1 < nb;
        uint16_t d0, m0, d1 = 0, m1 = 0;
        __m256i q0 = b32_decode(w, kind, i, &d0, &m0);
        __m256i q1 = two ? b32_decode(w, kind, i + 1, &d1, &m1) : _mm256_setzero_si256();
        __m512i q = join(q0, q1), aq = sgn ? _mm512_abs_epi8(q) : q;
        __mmask64 neg = sgn ? _mm512_movepi8_mask(q) : 0;
        __m512 dw = scales2(d0, d1), mw = scales2(m0, m1);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *a = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            __m512i qx = two ? load2(a[0].qs, a[1].qs)
                             : _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a[0].qs));
            if (!two)
                qx = _mm512_inserti64x4(qx, _mm256_setzero_si256(), 1);
            __m512 dx = scales2(a[0].d, two ? a[1].d : 0);
            if (sgn) {
                __m512i sx = _mm512_mask_sub_epi8(qx, neg, _mm512_setzero_si512(), qx);
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aq, sx);
                acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(p), acc[k]);
            } else {
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, qx);
                __m512i sx = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, qx);
                acc[k] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(p), acc[k]);
                accm[k] = _mm512_fmadd_ps(_mm512_mul_ps(mw, dx), _mm512_cvtepi32_ps(sx), accm[k]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum16(_mm512_add_ps(acc[k], accm[k]));
}

/* int16 scale vectors for 64 elements at 16 per sub-block: vector j gets sub-blocks
 * 4j..4j+3 of sc (16 int16 in the low 256 bits) in its four quarters. */
static AI void quarter_scales(__m256i sc16, __m512i scv[4])
{
    const __m512i quarter = join(_mm256_set_m128i(_mm_set1_epi16(1), _mm_set1_epi16(0)),
                                 _mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(2)));
    __m512i sc = _mm512_castsi256_si512(sc16);
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++)
        scv[j] = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_set1_epi16((short)(4 * j))), sc);
}

/* Q2_K and Q3_K: vector u holds elements 64u..64u+63 (Q2_K's 32-element vectors 2u, 2u+1). */
static AI void tile_q23_k(const char *w, const int q3, const char *x, size_t xs, int nb,
                          const int S, float *y, size_t ys)
{
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct quant_block_q2_k *b2 = (const struct quant_block_q2_k *)w + i;
        const struct quant_block_q3_k *b3 = (const struct quant_block_q3_k *)w + i;
        const uint8_t *qs = q3 ? b3->qs : b2->qs;
        __m256i v8[8], sc16, m16 = _mm256_setzero_si256();
        __m256i hm = q3 ? _mm256_loadu_si256((const __m256i *)b3->hmask) : _mm256_setzero_si256();
        for (int n = 0; n < 2; n++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * n));
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                int v = 4 * n + j;
                v8[v] = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), three);
                if (q3)
                    v8[v] = _mm256_or_si256(
                        v8[v], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, v), one), 2));
            }
        }
        if (q3) {
            uint32_t a[3];
            memcpy(a, b3->scales, sizeof a);
            uint32_t s0 = (a[0] & 0x0f0f0f0fu) | (a[2] & 0x03030303u) << 4;
            uint32_t s1 = (a[1] & 0x0f0f0f0fu) | ((a[2] >> 2) & 0x03030303u) << 4;
            uint32_t s2 = ((a[0] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 4) & 0x03030303u) << 4;
            uint32_t s3 = ((a[1] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 6) & 0x03030303u) << 4;
            sc16 = _mm256_sub_epi16(
                _mm256_cvtepu8_epi16(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0)),
                _mm256_set1_epi16(32));
        } else {
            __m128i s = _mm_loadu_si128((const __m128i *)b2->scales);
            sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, _mm_set1_epi8(15)));
            m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(15)));
        }
        __m512i q[4], scv[4];
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++)
            q[u] = join(v8[2 * u], v8[2 * u + 1]);
        quarter_scales(sc16, scv);
        float d = _cvtsh_ss(q3 ? b3->d : b2->d), dmin = q3 ? 0.0f : _cvtsh_ss(b2->dmin);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)(x + k * xs) + i;
            __m512i isum = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int u = 0; u < 4; u++) {
                __m512i p = _mm512_maddubs_epi16(q[u], _mm512_loadu_si512(a->qs + 64 * u));
                isum = _mm512_add_epi32(isum, _mm512_madd_epi16(p, scv[u]));
            }
            __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
            if (q3) {
                __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 2);
                isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(off));
                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(d * a->d), _mm512_cvtepi32_ps(isum), acc[k]);
            } else {
                __m256 ms = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, m16));
                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(d * a->d), _mm512_cvtepi32_ps(isum), acc[k]);
                acc[k] = _mm512_fnmadd_ps(_mm512_set1_ps(dmin * a->d), _mm512_zextps256_ps512(ms),
                                          acc[k]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum16(acc[k]);
}

/* Q5_K: chunk c's low and high nibbles (plus their bit of qh) are elements 64c..64c+63. */
static AI void tile_q5_k(const struct quant_block_q5_k *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        uint32_t u[3];
        memcpy(u, w[i].scales, sizeof u);
        uint32_t s_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
        uint32_t s_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
        uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
        __m128i sc16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)s_hi, (int)s_lo));
        __m128i m16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
        __m512i sc = _mm512_castsi128_si512(sc16), q[4], scv[4];
        __m256i hq = _mm256_loadu_si256((const __m256i *)w[i].qh);
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hq, 2 * c), one);
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hq, 2 * c + 1), one);
            q[c] = join(_mm256_or_si256(_mm256_and_si256(raw, low4), _mm256_slli_epi16(h0, 4)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low4),
                                        _mm256_slli_epi16(h1, 4)));
            __m512i idx = join(_mm256_set1_epi16((short)(2 * c)),
                               _mm256_set1_epi16((short)(2 * c + 1)));
            scv[c] = _mm512_permutexvar_epi16(idx, sc);
        }
        __m256i mv = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
        float d = _cvtsh_ss(w[i].d), dmin = _cvtsh_ss(w[i].dmin);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)(x + k * xs) + i;
            __m512i isum = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) {
                __m512i p = _mm512_maddubs_epi16(q[c], _mm512_loadu_si512(a->qs + 64 * c));
                isum = _mm512_add_epi32(isum, _mm512_madd_epi16(p, scv[c]));
            }
            __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
            __m256 ms = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mv));
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(d * a->d), _mm512_cvtepi32_ps(isum), acc[k]);
            acc[k] = _mm512_fnmadd_ps(_mm512_set1_ps(dmin * a->d), _mm512_zextps256_ps512(ms),
                                      acc[k]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum16(acc[k]);
}

/* IQ4_XS: sub-blocks 2u and 2u+1 (64 elements) per vector: the table lookup in each 128-bit
 * lane, the sign onto x, maddubs, then madd by each sub-block's scale. */
static AI void tile_iq4_xs(const struct quant_block_iq4_xs *w, const char *x, size_t xs,
                           int nb, const int S, float *y, size_t ys)
{
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4_values));
    const __m512i low4 = _mm512_set1_epi8(15);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m512i q[4], aq[4], scv[4];
        __mmask64 neg[4];
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++) {
            __m512i raw = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * u)));
            raw = _mm512_shuffle_i64x2(raw, raw, _MM_SHUFFLE(1, 1, 0, 0));
            __m512i nib = _mm512_mask_blend_epi64(0xcc, _mm512_and_si512(raw, low4),
                                                  _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4));
            q[u] = _mm512_shuffle_epi8(table, nib);
            aq[u] = _mm512_abs_epi8(q[u]);
            neg[u] = _mm512_movepi8_mask(q[u]);
        }
        /* the 8 scales as int16 minus 32: low nibbles of scales_l, two bits each of scales_h */
        int16_t l16[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++)
            l16[j] = (int16_t)((((w[i].scales_l[j / 2] >> (4 * (j % 2))) & 15) |
                                ((w[i].scales_h >> (2 * j)) & 3) << 4) - 32);
        __m512i ls512 = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)l16));
        _Pragma("GCC unroll 4")
        for (int u = 0; u < 4; u++)
            scv[u] = _mm512_permutexvar_epi16(join(_mm256_set1_epi16((short)(2 * u)),
                                                   _mm256_set1_epi16((short)(2 * u + 1))),
                                              ls512);
        float d = _cvtsh_ss(w[i].d);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)(x + k * xs) + i;
            __m512i isum = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int u = 0; u < 4; u++) {
                __m512i qx = _mm512_loadu_si512(a->qs + 64 * u);
                __m512i sx = _mm512_mask_sub_epi8(qx, neg[u], _mm512_setzero_si512(), qx);
                isum = _mm512_add_epi32(isum, _mm512_madd_epi16(_mm512_maddubs_epi16(aq[u], sx),
                                                                scv[u]));
            }
            acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(d * a->d), _mm512_cvtepi32_ps(isum), acc[k]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum16(acc[k]);
}

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

#define CALL_Q4_1(w, x, xs, n, S, y, ys)   tile_b32(w, B32_Q4_1, x, xs, (n) / QUANT_QK, S, y, ys)
#define CALL_Q5_1(w, x, xs, n, S, y, ys)   tile_b32(w, B32_Q5_1, x, xs, (n) / QUANT_QK, S, y, ys)
#define CALL_Q2_K(w, x, xs, n, S, y, ys)   tile_q23_k(w, 0, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_Q3_K(w, x, xs, n, S, y, ys)   tile_q23_k(w, 1, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_Q5_K(w, x, xs, n, S, y, ys)   tile_q5_k(w, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_IQ4_XS(w, x, xs, n, S, y, ys) tile_iq4_xs(w, x, xs, (n) / QUANT_QK_K, S, y, ys)

ROW_FN(row_q4_1, CALL_Q4_1)
ROW_FN(row_q5_1, CALL_Q5_1)
ROW_FN(row_q2_k, CALL_Q2_K)
ROW_FN(row_q3_k, CALL_Q3_K)
ROW_FN(row_q5_k, CALL_Q5_K)
ROW_FN(row_iq4_xs, CALL_IQ4_XS)

kern_row_fn kern_avx512_ext_row(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_Q4_1: return row_q4_1;
    case GGML_TYPE_Q5_1: return row_q5_1;
    case GGML_TYPE_Q2_K: return row_q2_k;
    case GGML_TYPE_Q3_K: return row_q3_k;
    case GGML_TYPE_Q5_K: return row_q5_k;
    case GGML_TYPE_IQ4_XS: return row_iq4_xs;
    default: return NULL;
    }
}
