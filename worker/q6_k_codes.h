/* The one unpacking of Q6_K codes that the AVX2, AVX-512 and AMX kernels share. Include only
 * from files built with -mavx2 (or more). */
#ifndef KILN_Q6_K_CODES_H
#define KILN_Q6_K_CODES_H

#include <immintrin.h>

#include "quant.h"

/* Half h (0 or 1) of Q6_K block b as 128 codes 0..63 in four vectors of 32: p[0] elements
 * 128h..128h+31, p[1] the next 32, and so on (low 4 bits from ql, high 2 from qh). */
static inline __attribute__((always_inline)) void
q6_k_half_codes(const struct quant_block_q6_k *b, int h, __m256i p[4])
{
    const __m256i low4 = _mm256_set1_epi8(15), hi2 = _mm256_set1_epi8(0x30);
    __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
    __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
    p[0] = _mm256_or_si256(_mm256_and_si256(l0, low4),
                           _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2));
    p[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                           _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2));
    p[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                           _mm256_and_si256(qh, hi2));
    p[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2));
}

#endif
