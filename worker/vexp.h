/* exp(x) for x <= 0 (0 below -87) by one polynomial, the same operations in the same order in
 * the scalar form and the 8- and 16-lane forms, so every lane of every form gives the same
 * bits: 2^n * e^r with n = rint(x log2 e), r = x - n ln 2 in two parts (Cody and Waite), e^r
 * by Cephes' expf polynomial, every step an FMA or a product. Within 2e-7 of exp (test_attn).
 * Used by attention's softmax (attn_scalar.c, attn_simd.c) and the AVX2 sets' SiLU. */
#ifndef VEXP_H
#define VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define VEXP_LOG2E 1.44269504088896341f
#define VEXP_C1    0.693359375f
#define VEXP_C2    (-2.12194440e-4f)
#define VEXP_P0    1.9875691500e-4f
#define VEXP_P1    1.3981999507e-3f
#define VEXP_P2    8.3334519073e-3f
#define VEXP_P3    4.1665795894e-2f
#define VEXP_P4    1.6666665459e-1f
#define VEXP_P5    5.0000001201e-1f
#define VEXP_MIN   (-87.0f)

static inline float vexp_f32(float x)
{
    float xc = x < VEXP_MIN ? VEXP_MIN : x, n, r, p, y, two;
    uint32_t bits;

    n = rintf(xc * VEXP_LOG2E);
    r = fmaf(n, -VEXP_C1, xc);
    r = fmaf(n, -VEXP_C2, r);
    p = fmaf(VEXP_P0, r, VEXP_P1);
    p = fmaf(p, r, VEXP_P2);
    p = fmaf(p, r, VEXP_P3);
    p = fmaf(p, r, VEXP_P4);
    p = fmaf(p, r, VEXP_P5);
    y = fmaf(p, r * r, r) + 1.0f;
    bits = (uint32_t)((int32_t)n + 127) << 23;
    memcpy(&two, &bits, sizeof two);
    return x < VEXP_MIN ? 0.0f : y * two;
}

#if defined(__x86_64__)
#define VEXP_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

__attribute__((target("avx2,fma"), always_inline)) static inline __m256 vexp8(__m256 x)
{
    __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(VEXP_MIN));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(VEXP_LOG2E)), VEXP_RNE);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-VEXP_C1), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-VEXP_C2), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(VEXP_P0), r, _mm256_set1_ps(VEXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(VEXP_P5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(VEXP_MIN), _CMP_LT_OQ), y);
}

__attribute__((target("avx512f,avx2,fma"), always_inline)) static inline __m512 vexp16(__m512 x)
{
    __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(VEXP_MIN));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(VEXP_LOG2E)), VEXP_RNE);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-VEXP_C1), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-VEXP_C2), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(VEXP_P0), r, _mm512_set1_ps(VEXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VEXP_P5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(VEXP_MIN), _CMP_GE_OQ), y);
}
#endif

#endif
