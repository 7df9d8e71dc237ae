/* AVX2 matmul rows for Q4_1 and Q5_1 against Q8_0 activations, Q2_K and Q3_K against Q8_K.
 * Weights are decoded to bytes once per block and reused for the sequences of a tile; the
 * integer dots are maddubs (unsigned x signed bytes) + madd, exact, so only the float
 * accumulation order differs from the scalar reference. Q3_K and Q2_K, which gemm_avx2.c
 * tiles for prompt rows, take that GEMM's float chain (one step per superblock), so their
 * prompt and decode rows agree bit for bit. As in kernels_avx2.c a sequence's instruction stream does not depend on how many
 * sequences share the tile: batching is bit-exact. Built with -mavx2 -mfma -mf16c, reached
 * only through the avx2 table after a CPU check; built again with -mavxvnni by
 * kernels_avxvnni_ext.c for the avxvnni set (vpdpbusd/vpdpwssd). */
#include "kernels.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels_simd.h"
#include "quant.h"

/* 0x10 in byte j where bit j of the little-endian uint32 at qh is set. */
static AI __m256i high_bits(const uint8_t qh[4])
{
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                             0x0101010101010101LL, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

enum b32_kind { B32_Q4_1, B32_Q5_1 };

/* Block i of a 32-element type: its 32 codes as unsigned bytes, its scale and min. */
static AI __m256i b32_decode(const char *w, const enum b32_kind kind, int i, float *d, float *m)
{
    if (kind == B32_Q4_1) {
        const struct quant_block_q4_1 *b = (const struct quant_block_q4_1 *)w + i;
        *d = f16(b->d);
        *m = f16(b->m);
        return nibbles(b->qs);
    }
    const struct quant_block_q5_1 *b = (const struct quant_block_q5_1 *)w + i;
    *d = f16(b->d);
    *m = f16(b->m);
    return _mm256_or_si256(nibbles(b->qs), high_bits(b->qh));
}

/* Block i's contribution for one sequence: maddubs(q, x) for d into acc and maddubs(1, x),
 * the block sum the min multiplies, into accm (its own chain, so the two FMAs do not wait on
 * each other). */
static AI void b32_step(__m256i q, float dw, float mw, const struct quant_block_q8_0 *a,
                        __m256 *acc, __m256 *accm)
{
    const __m256i ones8 = _mm256_set1_epi8(1);
    __m256i qx = _mm256_loadu_si256((const __m256i *)a->qs);
    float dx = f16(a->d);
    __m256i p = dot_u8s8(q, qx);
    __m256i sx = dot_u8s8(ones8, qx);
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx), _mm256_cvtepi32_ps(p), *acc);
    *accm = _mm256_fmadd_ps(_mm256_set1_ps(mw * dx), _mm256_cvtepi32_ps(sx), *accm);
}

/* One weight row of nb 32-element blocks against S Q8_0 activations, two blocks a step:
 * even blocks in acc0, odd ones in acc1 (mins in accm, accm1), independent FMA chains. */
static AI void tile_b32(const char *w, const enum b32_kind kind, const char *x, size_t xs,
                        int nb, const int S, float *y, size_t ys)
{
    __m256 acc0[4], acc1[4], accm[4], accm1[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc0[k] = acc1[k] = accm[k] = accm1[k] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 2 <= nb; i += 2) {
        float d0, m0, d1, m1;
        __m256i q0 = b32_decode(w, kind, i, &d0, &m0), q1 = b32_decode(w, kind, i + 1, &d1, &m1);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *a = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            b32_step(q0, d0, m0, a, &acc0[k], &accm[k]);
            b32_step(q1, d1, m1, a + 1, &acc1[k], &accm1[k]);
        }
    }
    if (i < nb) {
        float d0, m0;
        __m256i q0 = b32_decode(w, kind, i, &d0, &m0);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            b32_step(q0, d0, m0, (const struct quant_block_q8_0 *)(x + k * xs) + i, &acc0[k],
                     &accm[k]);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = hsum8(_mm256_add_ps(_mm256_add_ps(acc0[k], acc1[k]),
                                        _mm256_add_ps(accm[k], accm1[k])));
}

/* Q2_K: vector v = 4n + j holds elements 32v..32v+31 (bits 2j of qs[32n..]), which are
 * sub-blocks 2v and 2v+1. Per superblock the exact sums isum (scales folded in) and msum
 * (mins times bsums), then one float step (k_step): gemm_avx2.c's chain. */
static AI void tile_q2_k(const struct quant_block_q2_k *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    const __m256i three = _mm256_set1_epi8(3);
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i q[8], scv[8], isum[4], msum[4];
        for (int n = 0; n < 2; n++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * n));
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++)
                q[4 * n + j] = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), three);
        }
        __m128i s = _mm_loadu_si128((const __m128i *)w[i].scales);
        __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, _mm_set1_epi8(15)));
        __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(15)));
        __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        __m256i hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        for (int v = 0; v < 4; v++) {
            scv[v] = bcast16(lo, 2 * v, 2 * v + 1);
            scv[v + 4] = bcast16(hi, 2 * v, 2 * v + 1);
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)(x + k * xs) + i;
            __m256i t = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 8; v++) {
                __m256i qx = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * v));
                t = dot_u8s8_scaled(t, q[v], qx, scv[v]);
            }
            isum[k] = t;
            msum[k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), m16);
        }
        acc = k_step(acc, isum, msum, S, f16(w[i].d), f16(w[i].dmin), x, xs, i);
    }
    store_s(acc, S, y, ys);
}

/* Q3_K's 16 scales minus 32 as int16 (quant.h's packing, four bytes at a time). */
static AI __m256i q3_k_scales(const uint8_t s[12])
{
    uint32_t a[3];
    memcpy(a, s, sizeof a);
    uint32_t s0 = (a[0] & 0x0f0f0f0fu) | (a[2] & 0x03030303u) << 4;
    uint32_t s1 = (a[1] & 0x0f0f0f0fu) | ((a[2] >> 2) & 0x03030303u) << 4;
    uint32_t s2 = ((a[0] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 4) & 0x03030303u) << 4;
    uint32_t s3 = ((a[1] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 6) & 0x03030303u) << 4;
    __m256i v = _mm256_cvtepu8_epi16(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0));
    return _mm256_sub_epi16(v, _mm256_set1_epi16(32));
}

/* Q3_K: codes u = low | high << 2 in 0..7 by maddubs, then 4 * sum_k sc_k bsum_k off; per
 * superblock the exact sum and one float step (k_step): gemm_avx2.c's chain, so prompt and
 * decode rows agree bit for bit. */
static AI void tile_q3_k(const struct quant_block_q3_k *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i q[8], scv[8], isum[4];
        __m256i hm = _mm256_loadu_si256((const __m256i *)w[i].hmask);
        for (int n = 0; n < 2; n++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * n));
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                int v = 4 * n + j;
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), three);
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, v), one);
                q[v] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
            }
        }
        __m256i sc16 = q3_k_scales(w[i].scales);
        __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        __m256i hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        for (int v = 0; v < 4; v++) {
            scv[v] = bcast16(lo, 2 * v, 2 * v + 1);
            scv[v + 4] = bcast16(hi, 2 * v, 2 * v + 1);
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)(x + k * xs) + i;
            __m256i s = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int v = 0; v < 8; v++) {
                __m256i qx = _mm256_loadu_si256((const __m256i *)(a->qs + 32 * v));
                s = dot_u8s8_scaled(s, q[v], qx, scv[v]);
            }
            __m256i bs = _mm256_loadu_si256((const __m256i *)a->bsums);
            isum[k] = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 2));
        }
        acc = k_step(acc, isum, NULL, S, f16(w[i].d), 0.0f, x, xs, i);
    }
    store_s(acc, S, y, ys);
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

#define CALL_Q4_1(w, x, xs, n, S, y, ys)   tile_b32(w, B32_Q4_1, x, xs, (n) / QUANT_QK, S, y, ys)
#define CALL_Q5_1(w, x, xs, n, S, y, ys)   tile_b32(w, B32_Q5_1, x, xs, (n) / QUANT_QK, S, y, ys)
#define CALL_Q2_K(w, x, xs, n, S, y, ys)   tile_q2_k(w, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_Q3_K(w, x, xs, n, S, y, ys)   tile_q3_k(w, x, xs, (n) / QUANT_QK_K, S, y, ys)

ROW_FN(row_q4_1, CALL_Q4_1)
ROW_FN(row_q5_1, CALL_Q5_1)
ROW_FN(row_q2_k, CALL_Q2_K)
ROW_FN(row_q3_k, CALL_Q3_K)

kern_row_fn KSET(ext_row)(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_Q4_1: return row_q4_1;
    case GGML_TYPE_Q5_1: return row_q5_1;
    case GGML_TYPE_Q2_K: return row_q2_k;
    case GGML_TYPE_Q3_K: return row_q3_k;
    default: return NULL;
    }
}
