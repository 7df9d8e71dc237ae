/* Activation quantization for the AVX2 and avxvnni sets: quant.c's Q8_0 and Q8_K byte for
 * byte (test_kernels checks every set against the scalar quantizer), 8 lanes at a time.
 * Every matrix input of a forward pass goes through it; the scalar loop cost a prefill on
 * the AVX2 path about a tenth of its time. Built through target attributes: only the AVX2
 * sets, chosen after a CPU check, call it. */
#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels.h"
#include "quant.h"

#define AI __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

/* 8 floats to int32 as quant.c rounds them: x * id, then +-0.5 by the sign and truncation,
 * clamped to [-127, 127]. */
AI __m256i q8_round(__m256 x, __m256 id)
{
    __m256 v = _mm256_mul_ps(x, id);
    __m256 pos = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
    __m256 h = _mm256_blendv_ps(_mm256_set1_ps(-0.5f), _mm256_set1_ps(0.5f), pos);
    __m256i q = _mm256_cvttps_epi32(_mm256_add_ps(v, h));
    return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

/* max |x| over n floats (a multiple of 8); NaN never wins, as in quant.c's max_abs. */
AI float q8_amax(const float *x, int n)
{
    __m256 m = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    for (int j = 0; j < n; j += 8) {
        __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
        m = _mm256_blendv_ps(m, a, _mm256_cmp_ps(a, m, _CMP_GT_OQ));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

/* 32 floats into 32 int8 at qs; the four 8-lane sums of their codes into s (when not NULL). */
AI void q8_32(const float *x, __m256 id, int8_t *qs, __m256i *s)
{
    __m256i q0 = q8_round(_mm256_loadu_ps(x), id), q1 = q8_round(_mm256_loadu_ps(x + 8), id);
    __m256i q2 = q8_round(_mm256_loadu_ps(x + 16), id), q3 = q8_round(_mm256_loadu_ps(x + 24), id);
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, b);
    if (s) {
        s[0] = _mm256_add_epi32(q0, q1);
        s[1] = _mm256_add_epi32(q2, q3);
    }
}

AI int hsum_i32(__m256i v)
{
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

__attribute__((target("avx2,fma,f16c"))) int
kern_avx2_quantize_act(enum ggml_type wtype, const float *restrict x, int n, void *restrict out)
{
    enum ggml_type at = kern_act_type(wtype);

    if (at == GGML_TYPE_Q8_0 && n % QUANT_QK == 0) {
        struct quant_block_q8_0 *b = out;
        for (int i = 0; i < n / QUANT_QK; i++, x += QUANT_QK) {
            float d = q8_amax(x, QUANT_QK) / 127.0f;
            b[i].d = quant_f32_to_f16(d);
            q8_32(x, _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f), b[i].qs, NULL);
        }
        return 0;
    }
    if (at == GGML_TYPE_Q8_K && n % QUANT_QK_K == 0) {
        struct quant_block_q8_k *b = out;
        for (int i = 0; i < n / QUANT_QK_K; i++, x += QUANT_QK_K) {
            float d = q8_amax(x, QUANT_QK_K) / 127.0f;
            __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
            b[i].d = d;
            for (int k = 0; k < 8; k++) {
                __m256i s[2];
                q8_32(x + 32 * k, id, b[i].qs + 32 * k, s);
                b[i].bsums[2 * k] = (int16_t)hsum_i32(s[0]);
                b[i].bsums[2 * k + 1] = (int16_t)hsum_i32(s[1]);
            }
        }
        return 0;
    }
    return kern_quantize_act(wtype, x, n, out);
}
#endif
