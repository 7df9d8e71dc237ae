/* attn_kern.h's AVX2 (also the avxvnni set's) and AVX-512 sets: the scalar twin's operations
 * lane by lane, 8 or 16 lanes at a time. Built through target attributes, so only a CPU with
 * the features reaches them (kernels.c chose the set). */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "attn_kern.h"
#include "kv_cache.h"
#include "vexp.h"

_Static_assert(KV_BLOCK == 16, "the tiles below cover a block of 16 keys");

#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX2I __attribute__((target("avx2,fma,f16c"), always_inline)) static inline
#define AVX512_TARGET "avx512f,avx512bw,avx2,fma,f16c" /* the avx512 kernel set has BW */
#define AVX512 __attribute__((target(AVX512_TARGET)))
#define AVX512I __attribute__((target(AVX512_TARGET), always_inline)) static inline

/* ---- AVX2 ---------------------------------------------------------------------------- */

/* Keys [ub, ub + NK) of kf, NV vectors of 8 lanes. */
AVX2I void sc_avx2(float *S, const float *Qt, const float *kf, int ub, int u0, int u1, int hd,
                   float scale, const int NK, const int NV)
{
    __m256 acc[8][2];
#pragma GCC unroll 8
    for (int u = 0; u < NK; u++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            acc[u][v] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 q[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            q[v] = _mm256_loadu_ps(Qt + d * ATTN_LANES + 8 * v);
#pragma GCC unroll 8
        for (int u = 0; u < NK; u++) {
            __m256 k = _mm256_broadcast_ss(kf + (ub + u) * hd + d);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                acc[u][v] = _mm256_fmadd_ps(q[v], k, acc[u][v]);
        }
    }
    __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 8
    for (int u = 0; u < NK; u++)
        if (ub + u >= u0 && ub + u < u1)
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                _mm256_storeu_ps(S + (ub + u - u0) * ATTN_LANES + 8 * v, _mm256_mul_ps(acc[u][v], sc));
}

static AVX2 void scores_avx2(float *S, const float *Qt, const float *kf, int u0, int u1, int hd,
                             int nv, float scale)
{
    if (nv == 1) {
        for (int ub = 0; ub < KV_BLOCK; ub += 8)
            if (ub < u1 && ub + 8 > u0)
                sc_avx2(S, Qt, kf, ub, u0, u1, hd, scale, 8, 1);
        return;
    }
    /* keys 0-5, 6-11, 12-15: 12 accumulators and 2 query vectors of 16 registers */
    if (u0 < 6)
        sc_avx2(S, Qt, kf, 0, u0, u1, hd, scale, 6, 2);
    if (u0 < 12 && u1 > 6)
        sc_avx2(S, Qt, kf, 6, u0, u1, hd, scale, 6, 2);
    if (u1 > 12)
        sc_avx2(S, Qt, kf, 12, u0, u1, hd, scale, 4, 2);
}

static AVX2 void softmax_avx2(float *S, int n, int nv)
{
    for (int v = 0; v < nv; v++) {
        float *s = S + 8 * v;
        __m256 m = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps(), inv;
        for (int t = 0; t < n; t++)
            m = _mm256_max_ps(m, _mm256_loadu_ps(s + t * ATTN_LANES));
        m = _mm256_andnot_ps(_mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ), m);
        for (int t = 0; t < n; t++) {
            __m256 e = vexp8(_mm256_sub_ps(_mm256_loadu_ps(s + t * ATTN_LANES), m));
            _mm256_storeu_ps(s + t * ATTN_LANES, e);
            sum = _mm256_add_ps(sum, e);
        }
        inv = _mm256_and_ps(_mm256_cmp_ps(sum, _mm256_setzero_ps(), _CMP_GT_OQ),
                            _mm256_div_ps(_mm256_set1_ps(1.0f), sum));
        for (int t = 0; t < n; t++) {
            __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s + t * ATTN_LANES), inv);
            _mm256_storeu_ps(s + t * ATTN_LANES, _mm256_cvtph_ps(_mm256_cvtps_ph(p, RNE)));
        }
    }
}

/* Elements [d0, d0 + D) of every lane's output, NV vectors of 8 lanes. */
AVX2I void va_avx2(float *Ot, const float *S, const float *vf, int u0, int u1, int hd, int d0,
                   const int D, const int NV)
{
    __m256 acc[12][2];
#pragma GCC unroll 12
    for (int i = 0; i < D; i++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            acc[i][v] = _mm256_loadu_ps(Ot + (d0 + i) * ATTN_LANES + 8 * v);
    for (int u = u0; u < u1; u++) {
        __m256 p[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            p[v] = _mm256_loadu_ps(S + (u - u0) * ATTN_LANES + 8 * v);
#pragma GCC unroll 12
        for (int i = 0; i < D; i++) {
            __m256 x = _mm256_broadcast_ss(vf + u * hd + d0 + i);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
                acc[i][v] = _mm256_fmadd_ps(p[v], x, acc[i][v]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < D; i++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(Ot + (d0 + i) * ATTN_LANES + 8 * v, acc[i][v]);
}

static AVX2 void values_avx2(float *Ot, const float *S, const float *vf, int u0, int u1, int hd,
                             int nv)
{
    int d = 0;
    if (nv == 1) {
        for (; d + 12 <= hd; d += 12)
            va_avx2(Ot, S, vf, u0, u1, hd, d, 12, 1);
        for (; d < hd; d++)
            va_avx2(Ot, S, vf, u0, u1, hd, d, 1, 1);
        return;
    }
    for (; d + 6 <= hd; d += 6)
        va_avx2(Ot, S, vf, u0, u1, hd, d, 6, 2);
    for (; d < hd; d++)
        va_avx2(Ot, S, vf, u0, u1, hd, d, 1, 2);
}

/* Rows r[0..7] (8 floats each) transposed: r[i] holds element i of the eight rows. */
AVX2I void tr8_avx2(__m256 r[8])
{
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++) {
        u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        r[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
        r[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
    }
}

/* Keys [kb, kb + 8)'s F16 elements [d0, d0 + 16), transposed: c[e] holds element d0 + e of the
 * 8 keys, then element d0 + 8 + e (keys outside [u0, u1) read as 0). */
AVX2I void tr16_avx2(__m256i c[8], const uint16_t *k, int stride, int kb, int u0, int u1, int d0)
{
    __m256i z[8], a[8], b[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++)
        z[u] = kb + u >= u0 && kb + u < u1
                   ? _mm256_loadu_si256((const __m256i *)(k + (size_t)(kb + u) * stride + d0))
                   : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        a[2 * m] = _mm256_unpacklo_epi16(z[2 * m], z[2 * m + 1]);
        a[2 * m + 1] = _mm256_unpackhi_epi16(z[2 * m], z[2 * m + 1]);
    }
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++) {
        b[4 * g] = _mm256_unpacklo_epi32(a[4 * g], a[4 * g + 2]);
        b[4 * g + 1] = _mm256_unpackhi_epi32(a[4 * g], a[4 * g + 2]);
        b[4 * g + 2] = _mm256_unpacklo_epi32(a[4 * g + 1], a[4 * g + 3]);
        b[4 * g + 3] = _mm256_unpackhi_epi32(a[4 * g + 1], a[4 * g + 3]);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        c[2 * p] = _mm256_unpacklo_epi64(b[p], b[4 + p]);
        c[2 * p + 1] = _mm256_unpackhi_epi64(b[p], b[4 + p]);
    }
}

/* scores_f16 for G groups of 8 keys, [kb, kb + 8 * G) of the block (those outside [u0, u1) read
 * as 0), NQ queries: lane u of acc[g * NQ + j] sums q_j[d] * k_{kb + 8g + u}[d] over d in order.
 * Each sum is one chain of dependent FMAs; the groups' chains are independent, so with G = 2
 * twice as many run side by side (G * NQ <= ATTN_FEW accumulators). */
AVX2I void scf_avx2(float *Sq, int ns, const float *Qt, const uint16_t *k, int stride, int kb,
                    int u0, int u1, int hd, float scale, const int NQ, const int G)
{
    __m256 acc[ATTN_FEW];
#pragma GCC unroll 8
    for (int i = 0; i < G * NQ; i++)
        acc[i] = _mm256_setzero_ps();
    int d0 = 0;
    for (; d0 + 16 <= hd; d0 += 16) /* transposed as F16: two elements' rows a step */
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            __m256i c[8];
            tr16_avx2(c, k, stride, kb + 8 * g, u0, u1, d0);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                __m256 col = _mm256_cvtph_ps(i < 8 ? _mm256_castsi256_si128(c[i])
                                                   : _mm256_extracti128_si256(c[i - 8], 1));
#pragma GCC unroll 8
                for (int j = 0; j < NQ; j++)
                    acc[g * NQ + j] =
                        _mm256_fmadd_ps(_mm256_broadcast_ss(Qt + (d0 + i) * ATTN_LANES + j), col,
                                        acc[g * NQ + j]);
            }
        }
    for (; d0 < hd; d0 += 8)
#pragma GCC unroll 2
        for (int g = 0; g < G; g++) {
            __m256 r[8];
            int k0 = kb + 8 * g;
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++)
                r[u] = k0 + u >= u0 && k0 + u < u1
                           ? _mm256_cvtph_ps(_mm_loadu_si128(
                                 (const __m128i *)(k + (size_t)(k0 + u) * stride + d0)))
                           : _mm256_setzero_ps();
            tr8_avx2(r);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
#pragma GCC unroll 8
                for (int j = 0; j < NQ; j++)
                    acc[g * NQ + j] =
                        _mm256_fmadd_ps(_mm256_broadcast_ss(Qt + (d0 + i) * ATTN_LANES + j), r[i],
                                        acc[g * NQ + j]);
        }
#pragma GCC unroll 2
    for (int g = 0; g < G; g++) {
        int k0 = kb + 8 * g;
        if (k0 >= u0 && k0 + 8 <= u1) {
#pragma GCC unroll 8
            for (int j = 0; j < NQ; j++)
                _mm256_storeu_ps(Sq + j * ns + k0 - u0,
                                 _mm256_mul_ps(acc[g * NQ + j], _mm256_set1_ps(scale)));
            continue;
        }
        float out[8];
#pragma GCC unroll 8
        for (int j = 0; j < NQ; j++) {
            _mm256_storeu_ps(out, _mm256_mul_ps(acc[g * NQ + j], _mm256_set1_ps(scale)));
            for (int u = k0 > u0 ? k0 : u0; u < k0 + 8 && u < u1; u++)
                Sq[j * ns + u - u0] = out[u - k0];
        }
    }
}

/* The block's keys [u0, u1): with at most 3 queries, its two groups of 8 side by side when the
 * range covers both (G * NQ accumulators and the 8 transposed rows fit the 16 registers; 4
 * queries in 2 groups measured slower, spilling), else a group at a time. */
AVX2I void scf_avx2_n(float *Sq, int ns, const float *Qt, const uint16_t *k, int stride, int u0,
                      int u1, int hd, float scale, const int NQ)
{
    if (NQ <= 3 && u0 < 8 && u1 > 8) {
        scf_avx2(Sq, ns, Qt, k, stride, 0, u0, u1, hd, scale, NQ, 2);
        return;
    }
    for (int kb = 0; kb < KV_BLOCK; kb += 8)
        if (kb < u1 && kb + 8 > u0)
            scf_avx2(Sq, ns, Qt, k, stride, kb, u0, u1, hd, scale, NQ, 1);
}

/* scf_avx2_n for each NQ, each a function of its own, so that the register allocation of one
 * does not weigh on the others (inlined into one switch, the 8-query form measured ~1.5x
 * slower). */
#define SCF(q)                                                                                 \
    static AVX2 void scf_avx2_##q(float *Sq, int ns, const float *Qt, const uint16_t *k,       \
                                  int stride, int u0, int u1, int hd, float scale)             \
    {                                                                                          \
        scf_avx2_n(Sq, ns, Qt, k, stride, u0, u1, hd, scale, q);                              \
    }
SCF(1) SCF(2) SCF(3) SCF(4) SCF(5) SCF(6) SCF(7) SCF(8)
#undef SCF

static AVX2 void scores_f16_avx2(float *Sq, int ns, const float *Qt, const uint16_t *k,
                                 int stride, int u0, int u1, int hd, int nq, float scale)
{
    static void (*const by_nq[ATTN_FEW])(float *, int, const float *, const uint16_t *, int,
                                         int, int, int, float) = {
        scf_avx2_1, scf_avx2_2, scf_avx2_3, scf_avx2_4,
        scf_avx2_5, scf_avx2_6, scf_avx2_7, scf_avx2_8};
    if (hd % 8 || nq < 1 || nq > ATTN_FEW) {
        attn_kern_scalar.scores_f16(Sq, ns, Qt, k, stride, u0, u1, hd, nq, scale);
        return;
    }
    by_nq[nq - 1](Sq, ns, Qt, k, stride, u0, u1, hd, scale);
}

/* sum[j] = the sum over t in [0, n), one add after another, of Sq[j * ns + t], for j < NQ:
 * the rows' chains side by side, one scalar add each (written with intrinsics, so that the
 * compiler does not gather the chains into vectors through shuffles). */
AVX2I void sums_n(float *sum, const float *Sq, int ns, int n, const int NQ)
{
    __m128 s[ATTN_FEW];
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
        s[j] = _mm_setzero_ps();
    for (int t = 0; t < n; t++)
#pragma GCC unroll 8
        for (int j = 0; j < NQ; j++)
            s[j] = _mm_add_ss(s[j], _mm_load_ss(Sq + j * ns + t));
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
        sum[j] = _mm_cvtss_f32(s[j]);
}

static AVX2 void sums_q(float *sum, const float *Sq, int ns, int n, int nq)
{
    switch (nq) {
#define SUMS(k)                                                                                \
    case k:                                                                                    \
        sums_n(sum, Sq, ns, n, k);                                                             \
        break;
        SUMS(1) SUMS(2) SUMS(3) SUMS(4) SUMS(5) SUMS(6) SUMS(7) SUMS(8)
#undef SUMS
    }
}

static AVX2 void softmax_q_avx2(float *Sq, int ns, int n, int nq)
{
    float sum[ATTN_FEW];
    int n8 = n / 8 * 8;
    if (nq < 1 || nq > ATTN_FEW) {
        attn_kern_scalar.softmax_q(Sq, ns, n, nq);
        return;
    }
    for (int j = 0; j < nq; j++) {
        float *s = Sq + j * ns, m;
        __m256 vm = _mm256_set1_ps(-INFINITY);
        for (int t = 0; t < n8; t += 8)
            vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + t));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        m = _mm_cvtss_f32(h);
        for (int t = n8; t < n; t++)
            m = m > s[t] ? m : s[t];
        if (m == -INFINITY)
            m = 0.0f;
        vm = _mm256_set1_ps(m);
        for (int t = 0; t < n8; t += 8)
            _mm256_storeu_ps(s + t, vexp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm)));
        for (int t = n8; t < n; t++)
            s[t] = attn_exp(s[t] - m);
    }
    sums_q(sum, Sq, ns, n, nq);
    for (int j = 0; j < nq; j++) {
        float *s = Sq + j * ns, inv = sum[j] > 0.0f ? 1.0f / sum[j] : 0.0f;
        __m256 vi = _mm256_set1_ps(inv);
        for (int t = 0; t < n8; t += 8)
            _mm256_storeu_ps(s + t, _mm256_cvtph_ps(_mm256_cvtps_ph(
                                        _mm256_mul_ps(_mm256_loadu_ps(s + t), vi), RNE)));
        for (int t = n8; t < n; t++)
            s[t] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(s[t] * inv), RNE)));
    }
}

/* values_f16's elements [d0, d0 + 8 * DV) of NQ queries' outputs. */
AVX2I void vaf_avx2(float *O, const float *Sq, int ns, const uint16_t *v, int stride, int u0,
                    int u1, int hd, int d0, const int NQ, const int DV)
{
    __m256 acc[ATTN_FEW][4];
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++)
            acc[j][c] = _mm256_loadu_ps(O + j * hd + d0 + 8 * c);
    for (int u = u0; u < u1; u++) {
        __m256 x[4];
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++)
            x[c] = _mm256_cvtph_ps(
                _mm_loadu_si128((const __m128i *)(v + (size_t)u * stride + d0 + 8 * c)));
#pragma GCC unroll 8
        for (int j = 0; j < NQ; j++) {
            __m256 p = _mm256_broadcast_ss(Sq + j * ns + u - u0);
#pragma GCC unroll 4
            for (int c = 0; c < DV; c++)
                acc[j][c] = _mm256_fmadd_ps(p, x[c], acc[j][c]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++)
            _mm256_storeu_ps(O + j * hd + d0 + 8 * c, acc[j][c]);
}

/* All of hd, in chunks of 8 * DV elements (at most 12 accumulators), then of 8. */
AVX2I void vaf_avx2_n(float *O, const float *Sq, int ns, const uint16_t *v, int stride, int u0,
                      int u1, int hd, const int NQ)
{
    const int DV = NQ <= 3 ? 4 : NQ <= 6 ? 2 : 1;
    int d = 0;
    for (; d + 8 * DV <= hd; d += 8 * DV)
        vaf_avx2(O, Sq, ns, v, stride, u0, u1, hd, d, NQ, DV);
    for (; d < hd; d += 8)
        vaf_avx2(O, Sq, ns, v, stride, u0, u1, hd, d, NQ, 1);
}

static AVX2 void values_f16_avx2(float *O, const float *Sq, int ns, const uint16_t *v,
                                 int stride, int u0, int u1, int hd, int nq)
{
    if (hd % 8 || nq < 1 || nq > ATTN_FEW) {
        attn_kern_scalar.values_f16(O, Sq, ns, v, stride, u0, u1, hd, nq);
        return;
    }
    switch (nq) {
#define VAF(n)                                                                                 \
    case n:                                                                                    \
        vaf_avx2_n(O, Sq, ns, v, stride, u0, u1, hd, n);                                      \
        break;
        VAF(1) VAF(2) VAF(3) VAF(4) VAF(5) VAF(6) VAF(7) VAF(8)
#undef VAF
    }
}

static AVX2 void rows_f32_avx2(float *dst, const uint16_t *src, int stride, int n, int hd)
{
    for (int r = 0; r < n; r++) {
        const uint16_t *s = src + (size_t)r * stride;
        float *o = dst + r * hd;
        int i = 0;
        for (; i + 8 <= hd; i += 8)
            _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
        for (; i < hd; i++)
            o[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(s[i])));
    }
}

static AVX2 void round16_avx2(float *x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), RNE)));
    for (; i < n; i++)
        x[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(x[i]), RNE)));
}

const struct attn_kern attn_kern_avx2 = {
    .name = "avx2",
    .scores = scores_avx2,
    .softmax = softmax_avx2,
    .values = values_avx2,
    .scores_f16 = scores_f16_avx2,
    .softmax_q = softmax_q_avx2,
    .values_f16 = values_f16_avx2,
    .rows_f32 = rows_f32_avx2,
    .round16 = round16_avx2,
};

/* ---- AVX-512: all 16 lanes in one register --------------------------------------------- */

static AVX512 void scores_avx512(float *S, const float *Qt, const float *kf, int u0, int u1,
                                 int hd, int nv, float scale)
{
    __m512 acc[KV_BLOCK];
    (void)nv;
#pragma GCC unroll 16
    for (int u = 0; u < KV_BLOCK; u++)
        acc[u] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 q = _mm512_loadu_ps(Qt + d * ATTN_LANES);
#pragma GCC unroll 16
        for (int u = 0; u < KV_BLOCK; u++)
            acc[u] = _mm512_fmadd_ps(q, _mm512_set1_ps(kf[u * hd + d]), acc[u]);
    }
    __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 16
    for (int u = 0; u < KV_BLOCK; u++)
        if (u >= u0 && u < u1)
            _mm512_storeu_ps(S + (u - u0) * ATTN_LANES, _mm512_mul_ps(acc[u], sc));
}

static AVX512 void softmax_avx512(float *S, int n, int nv)
{
    __m512 m = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps(), inv;
    (void)nv;
    for (int t = 0; t < n; t++)
        m = _mm512_max_ps(m, _mm512_loadu_ps(S + t * ATTN_LANES));
    m = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ), m);
    for (int t = 0; t < n; t++) {
        __m512 e = vexp16(_mm512_sub_ps(_mm512_loadu_ps(S + t * ATTN_LANES), m));
        _mm512_storeu_ps(S + t * ATTN_LANES, e);
        sum = _mm512_add_ps(sum, e);
    }
    inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(sum, _mm512_setzero_ps(), _CMP_GT_OQ),
                              _mm512_set1_ps(1.0f), sum);
    for (int t = 0; t < n; t++) {
        __m512 p = _mm512_mul_ps(_mm512_loadu_ps(S + t * ATTN_LANES), inv);
        _mm512_storeu_ps(S + t * ATTN_LANES, _mm512_cvtph_ps(_mm512_cvtps_ph(p, RNE)));
    }
}

/* Elements [d0, d0 + D) of the 16 lanes' outputs. */
AVX512I void va_avx512(float *Ot, const float *S, const float *vf, int u0, int u1, int hd,
                       int d0, const int D)
{
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < D; i++)
        acc[i] = _mm512_loadu_ps(Ot + (d0 + i) * ATTN_LANES);
    for (int u = u0; u < u1; u++) {
        __m512 p = _mm512_loadu_ps(S + (u - u0) * ATTN_LANES);
#pragma GCC unroll 16
        for (int i = 0; i < D; i++)
            acc[i] = _mm512_fmadd_ps(p, _mm512_set1_ps(vf[u * hd + d0 + i]), acc[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < D; i++)
        _mm512_storeu_ps(Ot + (d0 + i) * ATTN_LANES, acc[i]);
}

static AVX512 void values_avx512(float *Ot, const float *S, const float *vf, int u0, int u1,
                                 int hd, int nv)
{
    int d = 0;
    (void)nv;
    for (; d + 16 <= hd; d += 16)
        va_avx512(Ot, S, vf, u0, u1, hd, d, 16);
    for (; d < hd; d++)
        va_avx512(Ot, S, vf, u0, u1, hd, d, 1);
}

/* Keys u and u + 8's F16 elements [d0, d0 + 16) (0 outside [u0, u1)), interleaved by 128
 * bits: u's first 8, u + 8's first 8, u's last 8, u + 8's last 8. */
AVX512I __m512i two_rows(const uint16_t *k, int stride, int u, int u0, int u1, int d0)
{
    __m256i a = u >= u0 && u < u1
                    ? _mm256_loadu_si256((const __m256i *)(k + (size_t)u * stride + d0))
                    : _mm256_setzero_si256();
    __m256i b = u + 8 >= u0 && u + 8 < u1
                    ? _mm256_loadu_si256((const __m256i *)(k + (size_t)(u + 8) * stride + d0))
                    : _mm256_setzero_si256();
    return _mm512_permutex2var_epi64(_mm512_castsi256_si512(a),
                                     _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0),
                                     _mm512_castsi256_si512(b));
}

/* c[e] (e < 8): element d0 + e of keys 0-7 and of keys 8-15 (256 bits of F16 each), then
 * element d0 + 8 + e of both; keys outside [u0, u1) read as 0. The rows are transposed as
 * 16-bit elements, 8 by 8 within each 128 bits, two rows' halves a step. */
AVX512I void tr_chunk(__m512i c[8], const uint16_t *k, int stride, int u0, int u1, int d0)
{
    __m512i z[8], a[8], b[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        z[i] = two_rows(k, stride, i, u0, u1, d0);
    /* a[2m], a[2m + 1]: rows 2m, 2m + 1's elements 0-3 and 4-7, interleaved */
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        a[2 * m] = _mm512_unpacklo_epi16(z[2 * m], z[2 * m + 1]);
        a[2 * m + 1] = _mm512_unpackhi_epi16(z[2 * m], z[2 * m + 1]);
    }
    /* b[4g + p]: rows 4g .. 4g + 3's elements 2p, 2p + 1 */
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++) {
        b[4 * g] = _mm512_unpacklo_epi32(a[4 * g], a[4 * g + 2]);
        b[4 * g + 1] = _mm512_unpackhi_epi32(a[4 * g], a[4 * g + 2]);
        b[4 * g + 2] = _mm512_unpacklo_epi32(a[4 * g + 1], a[4 * g + 3]);
        b[4 * g + 3] = _mm512_unpackhi_epi32(a[4 * g + 1], a[4 * g + 3]);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        c[2 * p] = _mm512_unpacklo_epi64(b[p], b[4 + p]);
        c[2 * p + 1] = _mm512_unpackhi_epi64(b[p], b[4 + p]);
    }
}

/* Lanes [u0, u1) of x to dst[0 .. u1 - u0). */
AVX512I void store_keys(float *dst, __m512 x, int u0, int u1)
{
    if (u0 == 0 && u1 == 16) {
        _mm512_storeu_ps(dst, x);
        return;
    }
    __mmask16 in = (__mmask16)(((1u << u1) - 1) & ~((1u << u0) - 1));
    _mm512_mask_storeu_ps(dst, (__mmask16)((1u << (u1 - u0)) - 1),
                          _mm512_maskz_compress_ps(in, x));
}

/* scores_f16 for the block's 16 keys in the lanes, NQ queries. */
AVX512I void scf_avx512(float *Sq, int ns, const float *Qt, const uint16_t *k, int stride,
                        int u0, int u1, int hd, float scale, const int NQ)
{
    __m512 acc[ATTN_FEW];
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
        acc[j] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512i c[8];
        tr_chunk(c, k, stride, u0, u1, d0);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            __m512 col = _mm512_cvtph_ps(i < 8 ? _mm512_castsi512_si256(c[i])
                                               : _mm512_extracti64x4_epi64(c[i - 8], 1));
#pragma GCC unroll 8
            for (int j = 0; j < NQ; j++)
                acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(Qt[(d0 + i) * ATTN_LANES + j]), col,
                                         acc[j]);
        }
    }
    __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
        store_keys(Sq + j * ns, _mm512_mul_ps(acc[j], sc), u0, u1);
}

static AVX512 void scores_f16_avx512(float *Sq, int ns, const float *Qt, const uint16_t *k,
                                     int stride, int u0, int u1, int hd, int nq, float scale)
{
    if (hd % 16 || nq < 1 || nq > ATTN_FEW) {
        attn_kern_scalar.scores_f16(Sq, ns, Qt, k, stride, u0, u1, hd, nq, scale);
        return;
    }
    switch (nq) {
#define SCF(n)                                                                                 \
    case n:                                                                                    \
        scf_avx512(Sq, ns, Qt, k, stride, u0, u1, hd, scale, n);                              \
        break;
        SCF(1) SCF(2) SCF(3) SCF(4) SCF(5) SCF(6) SCF(7) SCF(8)
#undef SCF
    }
}

static AVX512 void softmax_q_avx512(float *Sq, int ns, int n, int nq)
{
    float sum[ATTN_FEW];
    if (nq < 1 || nq > ATTN_FEW) {
        attn_kern_scalar.softmax_q(Sq, ns, n, nq);
        return;
    }
    for (int j = 0; j < nq; j++) {
        float *s = Sq + j * ns, m;
        __m512 vm = _mm512_set1_ps(-INFINITY);
        for (int t = 0; t < n; t += 16) {
            __mmask16 k = n - t >= 16 ? 0xFFFF : (__mmask16)((1u << (n - t)) - 1);
            vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + t));
        }
        m = _mm512_reduce_max_ps(vm);
        if (m == -INFINITY)
            m = 0.0f;
        vm = _mm512_set1_ps(m);
        for (int t = 0; t < n; t += 16) {
            __mmask16 k = n - t >= 16 ? 0xFFFF : (__mmask16)((1u << (n - t)) - 1);
            _mm512_mask_storeu_ps(s + t, k, vexp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + t),
                                                                 vm)));
        }
    }
    sums_q(sum, Sq, ns, n, nq);
    for (int j = 0; j < nq; j++) {
        float *s = Sq + j * ns;
        __m512 vi = _mm512_set1_ps(sum[j] > 0.0f ? 1.0f / sum[j] : 0.0f);
        for (int t = 0; t < n; t += 16) {
            __mmask16 k = n - t >= 16 ? 0xFFFF : (__mmask16)((1u << (n - t)) - 1);
            __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + t), vi);
            _mm512_mask_storeu_ps(s + t, k, _mm512_cvtph_ps(_mm512_cvtps_ph(p, RNE)));
        }
    }
}

/* values_f16's elements [d0, d0 + 16 * DV) of NQ queries' outputs. */
AVX512I void vaf_avx512(float *O, const float *Sq, int ns, const uint16_t *v, int stride,
                        int u0, int u1, int hd, int d0, const int NQ, const int DV)
{
    __m512 acc[ATTN_FEW][4];
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++)
            acc[j][c] = _mm512_loadu_ps(O + j * hd + d0 + 16 * c);
    for (int u = u0; u < u1; u++) {
        __m512 x[4];
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++)
            x[c] = _mm512_cvtph_ps(
                _mm256_loadu_si256((const __m256i *)(v + (size_t)u * stride + d0 + 16 * c)));
#pragma GCC unroll 8
        for (int j = 0; j < NQ; j++) {
            __m512 p = _mm512_set1_ps(Sq[j * ns + u - u0]);
#pragma GCC unroll 4
            for (int c = 0; c < DV; c++)
                acc[j][c] = _mm512_fmadd_ps(p, x[c], acc[j][c]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NQ; j++)
#pragma GCC unroll 4
        for (int c = 0; c < DV; c++)
            _mm512_storeu_ps(O + j * hd + d0 + 16 * c, acc[j][c]);
}

/* All of hd, in chunks of 16 * DV elements (at most 24 accumulators), then of 16. */
AVX512I void vaf_avx512_n(float *O, const float *Sq, int ns, const uint16_t *v, int stride,
                          int u0, int u1, int hd, const int NQ)
{
    const int DV = NQ <= 6 ? 4 : 2;
    int d = 0;
    for (; d + 16 * DV <= hd; d += 16 * DV)
        vaf_avx512(O, Sq, ns, v, stride, u0, u1, hd, d, NQ, DV);
    for (; d < hd; d += 16)
        vaf_avx512(O, Sq, ns, v, stride, u0, u1, hd, d, NQ, 1);
}

static AVX512 void values_f16_avx512(float *O, const float *Sq, int ns, const uint16_t *v,
                                     int stride, int u0, int u1, int hd, int nq)
{
    if (hd % 16 || nq < 1 || nq > ATTN_FEW) {
        attn_kern_scalar.values_f16(O, Sq, ns, v, stride, u0, u1, hd, nq);
        return;
    }
    switch (nq) {
#define VAF(n)                                                                                 \
    case n:                                                                                    \
        vaf_avx512_n(O, Sq, ns, v, stride, u0, u1, hd, n);                                    \
        break;
        VAF(1) VAF(2) VAF(3) VAF(4) VAF(5) VAF(6) VAF(7) VAF(8)
#undef VAF
    }
}

const struct attn_kern attn_kern_avx512 = {
    .name = "avx512",
    .scores = scores_avx512,
    .softmax = softmax_avx512,
    .values = values_avx512,
    .scores_f16 = scores_f16_avx512,
    .softmax_q = softmax_q_avx512,
    .values_f16 = values_f16_avx512,
    .rows_f32 = rows_f32_avx2,
    .round16 = round16_avx2,
};
#endif
