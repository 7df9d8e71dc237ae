/* Small x86 helpers shared by the SIMD kernel files (kernels_avx2*.c, kernels_avx512*.c).
 * Private to worker/: each kernel file is compiled with its own -m flags (see the Makefile),
 * so these are inlined into code built for that instruction set. The AVX-512 ones exist
 * only where the including file is built with AVX-512F. */
#ifndef KERNELS_SIMD_H
#define KERNELS_SIMD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

#define AI __attribute__((always_inline)) inline

/* kernels_avx2.c and kernels_avx2_ext.c are built twice: as the avx2 set, and included by
 * kernels_avxvnni*.c built with -mavxvnni, where dot_u8s8 and dot_u8s8_scaled below become
 * vpdpbusd / vpdpwssd. KSET(name) is the name such a file exports in the set it is built
 * for. */
#ifdef __AVXVNNI__
#define KSET(name)  kern_avxvnni_##name
#define KSET_NAME   "avxvnni"
#define KSET_TABLE  kern_ops_avxvnni_table
#else
#define KSET(name)  kern_avx2_##name
#define KSET_NAME   "avx2"
#define KSET_TABLE  kern_ops_avx2_table
#endif

/* The sum of the 8 floats of v. */
static AI float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static AI float f16(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* Broadcast int16 lane lo of a 128-bit vector (copied to both halves of v) to the low half
 * of the result and lane hi to the high half: one byte shuffle. */
static AI __m256i bcast16(__m256i v, int lo, int hi)
{
    __m256i ctl = _mm256_set_m128i(_mm_set1_epi16((short)((2 * hi + 1) << 8 | 2 * hi)),
                                   _mm_set1_epi16((short)((2 * lo + 1) << 8 | 2 * lo)));
    return _mm256_shuffle_epi8(v, ctl);
}

/* bcast16 with each int32 lane as dot_u8s8_pair takes a scale: (sc, sc) here, (sc, 0) with
 * AVX-VNNI. */
static AI __m256i bcast16_pair(__m256i v, int lo, int hi)
{
#ifdef __AVXVNNI__
    __m256i ctl = _mm256_set_m128i(_mm_set1_epi32((int)(0x80800000u | (unsigned)(2 * hi + 1) << 8 |
                                                        (unsigned)(2 * hi))),
                                   _mm_set1_epi32((int)(0x80800000u | (unsigned)(2 * lo + 1) << 8 |
                                                        (unsigned)(2 * lo))));
    return _mm256_shuffle_epi8(v, ctl);
#else
    return bcast16(v, lo, hi);
#endif
}

/* Sub-block scales and mins of a Q4_K or Q5_K block (quant.h's packing), as 8 int16 each,
 * decoded 4 bytes at a time. */
static AI void q4_k_scales(const uint8_t s[12], __m128i *sc16, __m128i *m16)
{
    uint32_t u[3];
    memcpy(u, s, sizeof u);
    uint32_t s_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
    uint32_t s_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 6) & 0x03030303u) << 4;
    uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 6) & 0x03030303u) << 4;
    *sc16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)s_hi, (int)s_lo));
    *m16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
}

/* The 32 nibbles of 16 packed bytes in element order: low nibbles are elements 0..15, high
 * nibbles 16..31 (Q4_0's packing, shared by Q4_1, Q5_*, IQ4_*). */
static AI __m256i nibbles(const uint8_t *qs)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
}

/* IQ4's 16 non-linear values in both 128-bit halves, for a byte shuffle. */
static AI __m256i iq4_table(void)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4_values));
}

/* The int32 lanes of the u8 x s8 products of u and s, summed in fours: vpdpbusd where the
 * including file is built with AVX-VNNI, else maddubs + madd by ones (the same sums: callers
 * keep u <= 128, so no pair saturates int16). */
static AI __m256i dot_u8s8(__m256i u, __m256i s)
{
#ifdef __AVXVNNI__
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* acc + each int32 lane's four u8 x s8 products of u and s times the lane's scale, scv
 * holding it twice as int16 (sc, sc): maddubs + madd by scv, or with AVX-VNNI vpdpbusd and
 * vpdpwssd against (sc, 0). Exact both ways where u <= 64 (|s| <= 127): each four-product
 * sum then fits int16, the low half vpdpwssd multiplies (Q2_K..Q6_K; not IQ4_XS's |w| up to
 * 127). */
static AI __m256i dot_u8s8_scaled(__m256i acc, __m256i u, __m256i s, __m256i scv)
{
#ifdef __AVXVNNI__
    __m256i p = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
    return _mm256_dpwssd_avx_epi32(acc, p, _mm256_and_si256(scv, _mm256_set1_epi32(0xffff)));
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scv));
#endif
}

/* dot_u8s8_scaled with the scale as the including set takes it without a mask: scv holds
 * (sc, sc) as int16 per int32 lane here, (sc, 0) with AVX-VNNI (vpdpwssd's high-half product
 * is then 0). The same sums, under the same bound on u. SCALE_PAIRS_CTL is the vpshufb
 * control giving int32 j of such a vector from unsigned byte j (j < 4) of a 128-bit lane. */
#ifdef __AVXVNNI__
#define SCALE_PAIRS_CTL                                                                        \
    _mm_set_epi8(-128, -128, -128, 3, -128, -128, -128, 2, -128, -128, -128, 1, -128, -128,     \
                 -128, 0)
#else
#define SCALE_PAIRS_CTL                                                                        \
    _mm_set_epi8(-128, 3, -128, 3, -128, 2, -128, 2, -128, 1, -128, 1, -128, 0, -128, 0)
#endif

static AI __m256i dot_u8s8_pair(__m256i acc, __m256i u, __m256i s, __m256i scv)
{
#ifdef __AVXVNNI__
    return _mm256_dpwssd_avx_epi32(acc, _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s),
                                   scv);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scv));
#endif
}

/* Superblocks ahead a K-type decode row (one row streamed start to end) prefetches its own
 * stream: rows follow each other in memory, so near a row's end this reaches into the next. */
#ifndef ROW_PFK
#define ROW_PFK 16
#endif

/* Prefetch the n bytes of a unit at p (n > 0): a line every 64 bytes, so consecutive units
 * cover every line of their stream. */
static AI void prefetch_unit(const void *p, const size_t n)
{
    for (size_t o = 0; o < n; o += 64)
        _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Steps (a superblock of each of four rows) ahead that the one-sequence K rows taken four at a
 * time (kernels_avx512.c rows4_q*_k1, kernels_avx2.c tile_q*_k_r4) prefetch. Four rows read at
 * once are four streams, which the hardware prefetcher follows less well than one row's, and
 * each row's own stream ahead would skip rows of the next group; so the group prefetches where
 * it will read ROW4_PFK steps on, in this group or the next ones (groups of four rows follow
 * each other in memory), the four rows at once. By bench_model's CPU ms per step (TinyLlama
 * Q4_K and Q4_K_M) 32 beat 16 and 24 on the avx512 set, and 16, 24 and 48 on avx2. */
#ifndef ROW4_PFK
#define ROW4_PFK 32
#endif

/* Where a group of four rows (rb bytes apart, nb superblocks of bs bytes) prefetches now: the
 * superblock ROW4_PFK steps on, p for row 0 and p + r * rb for row r. */
struct pf4 {
    const char *p, *group;
    size_t rb, bs;
    int j, nb;
};

/* The prefetch point of the group starting at w, at its first step. */
static AI struct pf4 pf4_start(const char *w, size_t rb, int nb, size_t bs)
{
    struct pf4 pf = {.group = w + (size_t)(ROW4_PFK / nb) * 4 * rb, .rb = rb, .bs = bs,
                     .j = ROW4_PFK % nb, .nb = nb};
    pf.p = pf.group + (size_t)pf.j * bs;
    return pf;
}

/* Move the prefetch point on a step. */
static AI void pf4_next(struct pf4 *pf)
{
    if (++pf->j == pf->nb) {
        pf->j = 0;
        pf->group += 4 * pf->rb;
        pf->p = pf->group;
    } else {
        pf->p += pf->bs;
    }
}

/* Prefetch the step's four superblocks, then move on a step. */
static AI void pf4_step(struct pf4 *pf)
{
    _Pragma("GCC unroll 4")
    for (int r = 0; r < 4; r++)
        prefetch_unit(pf->p + r * pf->rb, pf->bs);
    pf4_next(pf);
}

/* The sum of v's eight int32 lanes in every lane (exact): two adds of halves, no vphaddd. */
static AI __m128i hsum8_all(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
}

/* ---- kernels_avx2*.c's decode rows: integer lanes summed exactly, then one float step for up
 * to four sequences (lane k = sequence k); not in the AVX-512 files, which have their own ---- */
#ifndef __AVX512F__

/* Lane k of the result: the sum of v_k's eight int32 lanes. */
static AI __m128i hsum4(__m256i v0, __m256i v1, __m256i v2, __m256i v3)
{
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* S (<= 4) vectors' lane sums, lane k for vector k (the others repeat vector 0). */
static AI __m128i hsum_s(const __m256i *v, const int S)
{
    if (S == 1)
        return hsum8_all(v[0]);
    return hsum4(v[0], S > 1 ? v[1] : v[0], S > 2 ? v[2] : v[0], S > 3 ? v[3] : v[0]);
}

static AI void store_s(__m128 acc, const int S, float *y, size_t ys)
{
    float a[4];
    _mm_storeu_ps(a, acc);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        y[k * ys] = a[k];
}

/* The Q8_K scales of superblock i of S activations, lane k for sequence k. */
static AI __m128 act_dk4(const char *x, size_t xs, int i, const int S)
{
#define DK(k) (S > (k) ? ((const struct quant_block_q8_k *)(x + (k) * xs))[i].d : 0.0f)
    return _mm_set_ps(DK(3), DK(2), DK(1), DK(0));
#undef DK
}

/* The float step of superblock i: acc += isum * (dw * dx) [- msum * (dmin * dx)]. */
static AI __m128 k_step(__m128 acc, const __m256i *isum, const __m256i *msum, const int S,
                        float dw, float dmin, const char *x, size_t xs, int i)
{
    __m128 dx = act_dk4(x, xs, i, S);
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum_s(isum, S)), _mm_mul_ps(_mm_set1_ps(dw), dx), acc);
    if (msum)
        acc = _mm_fnmadd_ps(_mm_cvtepi32_ps(hsum_s(msum, S)), _mm_mul_ps(_mm_set1_ps(dmin), dx),
                            acc);
    return acc;
}

#endif

#ifdef __AVX512F__
static AI __m512i join(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Two f16 scales as 16 floats: a in lanes 0-7, b in lanes 8-15. */
static AI __m512 scales2(uint16_t a, uint16_t b)
{
    __m256i h = _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
    return _mm512_cvtph_ps(h);
}
#endif

#endif
