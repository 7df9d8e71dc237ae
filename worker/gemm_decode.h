/* The prefill GEMM's view of a weight type (worker/gemm_*.c): every supported type is, per
 * sub-block g of G elements (16 or 32), integer codes c (bytes) with a float scale and a
 * float bias, so that against activation sub-block (qx: signed bytes, dx: its scale)
 *
 *     dot_g = scale_g * dx * (sum c qx - off * sum qx) - bias_g * dx * sum qx
 *
 * off is a per-type integer (the codes' zero point: 8 for Q4_0's 0..15, 32 for Q6_K's
 * 0..63, 4 for Q3_K's 0..7, 0 when codes are signed or the type has a min), bias is the min
 * of Q4_K/Q5_K/Q2_K (dmin * m) and 0 otherwise. Signed codes (Q8_0, IQ4_*) are -128..127; the VNNI kernel
 * offsets them by 128 (off = 128), the AVX2 kernel moves their sign onto the activations.
 * The integer part is exact, so each kernel differs from the scalar dot only in float
 * rounding. AVX2 over one row (include only from files built with -mavx2), decoded once
 * per row block and reused for every sequence of a tile. Private to worker/. */
#ifndef GEMM_DECODE_H
#define GEMM_DECODE_H

#include <stddef.h>
#include <stdint.h>
#include <immintrin.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "q6_k_codes.h"
#include "transpose8.h"

/* Elements per K chunk of the GEMM (a multiple of 256) and the most sub-blocks in one. */
#define GEMM_KC 1024
#define GEMM_MAXG (GEMM_KC / 16)

struct gemm_type {
    int g;           /* sub-block elements, 0: not supported */
    int sgn;         /* codes are signed bytes */
    int off;         /* zero point of unsigned codes */
    int min;         /* bias (a min) present */
    int act_q8_k;    /* activations are Q8_K (else Q8_0) */
};

static inline struct gemm_type gemm_type_of(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_IQ4_NL:
        return (struct gemm_type){32, 1, 0, 0, 0};
    case GGML_TYPE_Q4_0:
        return (struct gemm_type){32, 0, 8, 0, 0};
    case GGML_TYPE_Q5_0:
        return (struct gemm_type){32, 0, 16, 0, 0};
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        return (struct gemm_type){32, 0, 0, 1, 1};
    case GGML_TYPE_Q6_K:
        return (struct gemm_type){16, 0, 32, 0, 1};
    case GGML_TYPE_IQ4_XS:
        return (struct gemm_type){32, 1, 0, 0, 1};
    default:
        return (struct gemm_type){0, 0, 0, 0, 0};
    }
}

/* The types gemm_avx2.c tiles besides gemm_type_of's: Q3_K (codes 0..7, zero point 4,
 * signed integer scales) and Q2_K (codes 0..3, 4-bit scales and mins). gemm_avx512.c does not take them: its decode paths read blocks of
 * gemm_type_of's types only. */
static inline struct gemm_type gemm_type_of_avx2(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_Q3_K:
        return (struct gemm_type){16, 0, 4, 0, 1};
    case GGML_TYPE_Q2_K:
        return (struct gemm_type){16, 0, 0, 1, 1};
    default:
        return gemm_type_of(t);
    }
}

/* Byte offset of activation sub-block g's signed bytes in an activation row. */
static inline size_t gemm_act_off(const struct gemm_type *ty, int g)
{
    if (!ty->act_q8_k)
        return (size_t)g * sizeof(struct quant_block_q8_0) + offsetof(struct quant_block_q8_0, qs);
    int per = QUANT_QK_K / ty->g;
    return (size_t)(g / per) * sizeof(struct quant_block_q8_k) +
           offsetof(struct quant_block_q8_k, qs) + (size_t)(g % per) * (size_t)ty->g;
}

/* Activation sub-blocks [g0, g0 + ng) of row x: dx (its scale) and sx (sum of its bytes). */
static inline void gemm_act_prep(const struct gemm_type *ty, const char *x, int g0, int ng,
                                 float *dx, int32_t *sx)
{
    if (!ty->act_q8_k) {
        const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)x + g0;
        for (int g = 0; g < ng; g++) {
            int s = 0;
            for (int l = 0; l < QUANT_QK; l++)
                s += b[g].qs[l];
            dx[g] = quant_f16_to_f32(b[g].d);
            sx[g] = s;
        }
        return;
    }
    int per = QUANT_QK_K / ty->g, bs = ty->g / 16;
    for (int g = 0; g < ng; g++) {
        const struct quant_block_q8_k *b = (const struct quant_block_q8_k *)x + (g0 + g) / per;
        int j = (g0 + g) % per, s = 0;
        for (int k = 0; k < bs; k++)
            s += b->bsums[j * bs + k];
        dx[g] = b->d;
        sx[g] = s;
    }
}

/* 0x10 in byte l where bit l of the little-endian uint32 at qh is set. */
static inline __m256i gemm_bits5(const uint8_t qh[4])
{
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                    _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL,
                                                      0x0101010101010101LL, 0));
    __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit),
                            _mm256_set1_epi8(0x10));
}

/* Q3_K's 16 sub-block scales less 32 (quant_q3_k_scale's packing, four at a time). */
static inline void gemm_q3_k_scales(const uint8_t s[12], int8_t out[16])
{
    uint32_t a[3], v[4];
    uint8_t u[16];
    memcpy(a, s, sizeof a);
    v[0] = (a[0] & 0x0f0f0f0fu) | (a[2] & 0x03030303u) << 4;
    v[1] = (a[1] & 0x0f0f0f0fu) | ((a[2] >> 2) & 0x03030303u) << 4;
    v[2] = ((a[0] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 4) & 0x03030303u) << 4;
    v[3] = ((a[1] >> 4) & 0x0f0f0f0fu) | ((a[2] >> 6) & 0x03030303u) << 4;
    memcpy(u, v, sizeof v);
    for (int k = 0; k < 16; k++)
        out[k] = (int8_t)(u[k] - 32);
}

/* Sub-blocks [g0, g0 + ng) of weight row w: codes (ng * G bytes, element order) and the
 * scale and bias of each, written ss floats apart. For the 256-element types g0 and ng are
 * whole blocks (the GEMM's K chunks are). */
static inline void gemm_decode_row(enum ggml_type t, const void *w, int g0, int ng,
                                   uint8_t *codes, float *scale, float *bias, size_t ss)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    switch (t) {
    case GGML_TYPE_Q8_0: {
        const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)w + g0;
        for (int g = 0; g < ng; g++) {
            _mm256_storeu_si256((__m256i *)(codes + 32 * g),
                                _mm256_loadu_si256((const __m256i *)b[g].qs));
            scale[g * ss] = _cvtsh_ss(b[g].d);
            bias[g * ss] = 0.0f;
        }
        return;
    }
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_IQ4_NL: {
        /* same layout: f16 d, then 16 bytes of nibbles */
        const int nl = t == GGML_TYPE_IQ4_NL;
        const __m256i tab = _mm256_broadcastsi128_si256(
            _mm_loadu_si128((const __m128i *)quant_iq4_values));
        const struct quant_block_q4_0 *b = (const struct quant_block_q4_0 *)w + g0;
        for (int g = 0; g < ng; g++) {
            __m128i raw = _mm_loadu_si128((const __m128i *)b[g].qs);
            __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
            if (nl)
                q = _mm256_shuffle_epi8(tab, q);
            _mm256_storeu_si256((__m256i *)(codes + 32 * g), q);
            scale[g * ss] = _cvtsh_ss(b[g].d);
            bias[g * ss] = 0.0f;
        }
        return;
    }
    case GGML_TYPE_Q5_0: {
        const struct quant_block_q5_0 *b = (const struct quant_block_q5_0 *)w + g0;
        for (int g = 0; g < ng; g++) {
            __m128i raw = _mm_loadu_si128((const __m128i *)b[g].qs);
            __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
            _mm256_storeu_si256((__m256i *)(codes + 32 * g),
                                _mm256_or_si256(q, gemm_bits5(b[g].qh)));
            scale[g * ss] = _cvtsh_ss(b[g].d);
            bias[g * ss] = 0.0f;
        }
        return;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        const int five = t == GGML_TYPE_Q5_K;
        for (int i = 0; i < ng / 8; i++) {
            const uint8_t *sc12, *qs, *qh = NULL;
            uint16_t d16, dm16;
            if (five) {
                const struct quant_block_q5_k *b = (const struct quant_block_q5_k *)w + g0 / 8 + i;
                sc12 = b->scales, qs = b->qs, qh = b->qh, d16 = b->d, dm16 = b->dmin;
            } else {
                const struct quant_block_q4_k *b = (const struct quant_block_q4_k *)w + g0 / 8 + i;
                sc12 = b->scales, qs = b->qs, d16 = b->d, dm16 = b->dmin;
            }
            uint8_t *c = codes + 256 * i;
            __m256i hb = five ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
            for (int k = 0; k < 4; k++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * k));
                __m256i lo = _mm256_and_si256(raw, low4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
                if (five) {
                    const __m256i one = _mm256_set1_epi8(1);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(
                        _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), one), 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(
                        _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k + 1), one), 4));
                }
                _mm256_storeu_si256((__m256i *)(c + 64 * k), lo);
                _mm256_storeu_si256((__m256i *)(c + 64 * k + 32), hi);
            }
            float d = _cvtsh_ss(d16), dmin = _cvtsh_ss(dm16);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                quant_q4_k_scale_min(sc12, j, &sc, &m);
                scale[(8 * i + j) * ss] = d * (float)sc;
                bias[(8 * i + j) * ss] = dmin * (float)m;
            }
        }
        return;
    }
    case GGML_TYPE_Q6_K: {
        for (int i = 0; i < ng / 16; i++) {
            const struct quant_block_q6_k *b = (const struct quant_block_q6_k *)w + g0 / 16 + i;
            uint8_t *c = codes + 256 * i;
            for (int h = 0; h < 2; h++) {
                __m256i p[4];
                q6_k_half_codes(b, h, p);
                _mm256_storeu_si256((__m256i *)(c + 128 * h), p[0]);
                _mm256_storeu_si256((__m256i *)(c + 128 * h + 32), p[1]);
                _mm256_storeu_si256((__m256i *)(c + 128 * h + 64), p[2]);
                _mm256_storeu_si256((__m256i *)(c + 128 * h + 96), p[3]);
            }
            float d = _cvtsh_ss(b->d);
            for (int k = 0; k < 16; k++) {
                scale[(16 * i + k) * ss] = d * (float)b->scales[k];
                bias[(16 * i + k) * ss] = 0.0f;
            }
        }
        return;
    }
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K: {
        /* element 128n + 32j + l: bits 2j..2j+1 of qs[32n + l] (and for Q3_K bit 4n + j of
         * hmask[l] as bit 2 of the code) */
        const int three = t == GGML_TYPE_Q3_K;
        const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
        for (int i = 0; i < ng / 16; i++) {
            const struct quant_block_q2_k *b2 = (const struct quant_block_q2_k *)w + g0 / 16 + i;
            const struct quant_block_q3_k *b3 = (const struct quant_block_q3_k *)w + g0 / 16 + i;
            const uint8_t *qs = three ? b3->qs : b2->qs;
            __m256i hm = three ? _mm256_loadu_si256((const __m256i *)b3->hmask)
                               : _mm256_setzero_si256();
            for (int n = 0; n < 2; n++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * n));
                for (int j = 0; j < 4; j++) {
                    __m256i q = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3);
                    if (three)
                        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(
                            _mm256_srli_epi16(hm, 4 * n + j), one), 2));
                    _mm256_storeu_si256((__m256i *)(codes + 256 * i + 128 * n + 32 * j), q);
                }
            }
            float d = _cvtsh_ss(three ? b3->d : b2->d), dmin = three ? 0.0f : _cvtsh_ss(b2->dmin);
            int8_t s3[16];
            if (three)
                gemm_q3_k_scales(b3->scales, s3);
            for (int k = 0; k < 16; k++) {
                int sc = three ? s3[k] : b2->scales[k] & 15;
                scale[(16 * i + k) * ss] = d * (float)sc;
                bias[(16 * i + k) * ss] = three ? 0.0f : dmin * (float)(b2->scales[k] >> 4);
            }
        }
        return;
    }
    case GGML_TYPE_IQ4_XS: {
        const __m256i tab = _mm256_broadcastsi128_si256(
            _mm_loadu_si128((const __m128i *)quant_iq4_values));
        for (int i = 0; i < ng / 8; i++) {
            const struct quant_block_iq4_xs *b = (const struct quant_block_iq4_xs *)w + g0 / 8 + i;
            float d = _cvtsh_ss(b->d);
            for (int j = 0; j < 8; j++) {
                __m128i raw = _mm_loadu_si128((const __m128i *)(b->qs + 16 * j));
                __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
                _mm256_storeu_si256((__m256i *)(codes + 256 * i + 32 * j),
                                    _mm256_shuffle_epi8(tab, q));
                scale[(8 * i + j) * ss] = d * (float)(quant_iq4_xs_scale(b, j) - 32);
                bias[(8 * i + j) * ss] = 0.0f;
            }
        }
        return;
    }
    default:
        return;
    }
}

/* Dwords t0..t0+7 of 8 rows of bytes (rs bytes apart) transposed: out[i] holds dword
 * t0 + i of rows 0..7 in lanes 0..7. */
static inline void gemm_transpose8(const uint8_t *rows, size_t rs, int t0, __m256i out[8])
{
    __m256i r[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_si256((const __m256i *)(rows + (size_t)i * rs + 4 * (size_t)t0));
    transpose8x8_epi32(r, out);
}

#endif
