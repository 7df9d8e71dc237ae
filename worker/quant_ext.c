/* Reference quantizers and dequantizers of the types beyond Q8_0/Q4_0/Q4_K/Q6_K: Q4_1, Q5_0,
 * Q5_1, IQ4_NL (32-element blocks) and Q2_K, Q3_K, Q5_K, IQ4_XS (256-element super-blocks).
 * The block layouts are ggml's (quant.h); the quantizers are kiln's own simple fits (any
 * valid encoding loads anywhere), written to be quick enough to make billion-weight test
 * models and to keep every element within a stated bound of its input (tests/test_quant.c). */
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <string.h>

const int8_t quant_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

/* Round half away from zero (as quant.c). */
static int round_int(float v)
{
    return (int)(v >= 0.0f ? v + 0.5f : v - 0.5f);
}

static int clamp_int(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* The element of largest magnitude of x[0..n), with its sign (0 for an all-zero block). */
static float signed_max(const float *x, int n)
{
    float v = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(v))
            v = x[i];
    return v;
}

int quant_q3_k_scale(const uint8_t scales[12], int k)
{
    int lo = k < 8 ? scales[k] & 15 : scales[k - 8] >> 4;
    int hi = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
    return lo | hi << 4;
}

int quant_iq4_xs_scale(const struct quant_block_iq4_xs *b, int j)
{
    int lo = (b->scales_l[j / 2] >> (4 * (j % 2))) & 15;
    int hi = (b->scales_h >> (2 * j)) & 3;
    return lo | hi << 4;
}

/* ---- Q4_1, Q5_1: affine min + steps; Q5_0: symmetric like Q4_0 ---- */

/* The 32 element codes of a block on an affine grid of `levels` steps from the block's
 * minimum; d and m as the decoder sees them (rounded through f16). */
static void affine_block(const float *x, int levels, uint16_t *dh, uint16_t *mh, int q[32])
{
    float lo = x[0], hi = x[0];
    for (int j = 1; j < QUANT_QK; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    *dh = quant_f32_to_f16((hi - lo) / (float)levels);
    *mh = quant_f32_to_f16(lo);
    float d = quant_f16_to_f32(*dh), m = quant_f16_to_f32(*mh);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QUANT_QK; j++)
        q[j] = clamp_int(round_int((x[j] - m) * id), 0, levels);
}

static void pack_nibbles(const int q[32], uint8_t qs[16])
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

static void pack_high_bits(const int q[32], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < QUANT_QK; j++)
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; k++)
        qh[k] = (uint8_t)(h >> (8 * k));
}

static void quantize_q4_1(const float *x, struct quant_block_q4_1 *b, int64_t nb)
{
    int q[32];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK) {
        affine_block(x, 15, &b[i].d, &b[i].m, q);
        pack_nibbles(q, b[i].qs);
    }
}

static void quantize_q5_1(const float *x, struct quant_block_q5_1 *b, int64_t nb)
{
    int q[32];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK) {
        affine_block(x, 31, &b[i].d, &b[i].m, q);
        pack_nibbles(q, b[i].qs);
        pack_high_bits(q, b[i].qh);
    }
}

static void quantize_q5_0(const float *x, struct quant_block_q5_0 *b, int64_t nb)
{
    int q[32];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK) {
        /* the value of largest magnitude maps to -16 exactly, as Q4_0's maps to -8 */
        b[i].d = quant_f32_to_f16(signed_max(x, QUANT_QK) / -16.0f);
        float d = quant_f16_to_f32(b[i].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            q[j] = clamp_int(round_int(x[j] * id) + 16, 0, 31);
        pack_nibbles(q, b[i].qs);
        pack_high_bits(q, b[i].qh);
    }
}

/* ---- IQ4_NL, IQ4_XS: the 16 non-linear levels ---- */

/* Index of the level nearest v (in units of the block scale). */
static int iq4_nearest(float v)
{
    const int8_t *K = quant_iq4_values;
    if (v <= K[0])
        return 0;
    if (v >= K[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < K[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - K[lo] < K[hi] - v ? lo : hi;
}

/* Codes of n elements for scale d (d == 0: the level nearest zero). */
static void iq4_assign(const float *x, int n, float d, uint8_t *L)
{
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; j++)
        L[j] = (uint8_t)iq4_nearest(x[j] * id);
}

/* A block scale for n elements: the largest magnitude maps near the outermost level (three
 * candidates), each refined by least squares on its codes; the one of least squared error. */
static float iq4_fit(const float *x, int n)
{
    float vmax = signed_max(x, n), best_d = 0.0f, best_err = INFINITY;
    uint8_t L[32];
    if (vmax == 0.0f)
        return 0.0f;
    for (int t = -1; t <= 1; t++) {
        float d = vmax / (float)(quant_iq4_values[0] + 4 * t);
        iq4_assign(x, n, d, L);
        double sxv = 0.0, svv = 0.0;
        for (int j = 0; j < n; j++) {
            double v = quant_iq4_values[L[j]];
            sxv += x[j] * v;
            svv += v * v;
        }
        if (svv > 0.0)
            d = (float)(sxv / svv);
        float err = 0.0f;
        for (int j = 0; j < n; j++) {
            float e = x[j] - d * (float)quant_iq4_values[L[j]];
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
        }
    }
    return best_d;
}

static void pack_iq4(const uint8_t L[32], uint8_t qs[16])
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

static void quantize_iq4_nl(const float *x, struct quant_block_iq4_nl *b, int64_t nb)
{
    uint8_t L[32];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK) {
        b[i].d = quant_f32_to_f16(iq4_fit(x, QUANT_QK));
        iq4_assign(x, QUANT_QK, quant_f16_to_f32(b[i].d), L);
        pack_iq4(L, b[i].qs);
    }
}

static void quantize_iq4_xs(const float *x, struct quant_block_iq4_xs *b, int64_t nb)
{
    uint8_t L[32];
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float dj[8], dmax = 0.0f;
        for (int j = 0; j < 8; j++) {
            dj[j] = iq4_fit(x + 32 * j, 32);
            if (fabsf(dj[j]) > fabsf(dmax))
                dmax = dj[j];
        }
        b[i].d = quant_f32_to_f16(dmax / -32.0f);
        float d = quant_f16_to_f32(b[i].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int j = 0; j < 8; j++) {
            int ls = clamp_int(round_int(dj[j] * id), -32, 31) + 32;
            b[i].scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
            b[i].scales_h |= (uint16_t)((ls >> 4) << (2 * j));
            iq4_assign(x + 32 * j, 32, d * (float)(ls - 32), L);
            pack_iq4(L, b[i].qs + 16 * j);
        }
    }
}

/* ---- Q2_K, Q3_K, Q5_K ---- */

static void quantize_q2_k(const float *x, struct quant_block_q2_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float scale[16], min[16], max_scale = 0.0f, max_min = 0.0f;
        /* per 16 elements an affine map of [lo, hi] (lo <= 0) onto 0..3 */
        for (int k = 0; k < 16; k++) {
            float lo = 0.0f, hi = -INFINITY;
            for (int l = 0; l < 16; l++) {
                lo = fminf(lo, x[16 * k + l]);
                hi = fmaxf(hi, x[16 * k + l]);
            }
            scale[k] = (hi - lo) / 3.0f;
            min[k] = -lo;
            max_scale = fmaxf(max_scale, scale[k]);
            max_min = fmaxf(max_min, min[k]);
        }
        b[i].d = quant_f32_to_f16(max_scale / 15.0f);
        b[i].dmin = quant_f32_to_f16(max_min / 15.0f);
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int k = 0; k < 16; k++) {
            /* both rounded up, so the sub-block's range stays covered */
            int sc = d > 0.0f ? clamp_int((int)ceilf(scale[k] / d), 0, 15) : 0;
            int m = dmin > 0.0f ? clamp_int((int)ceilf(min[k] / dmin), 0, 15) : 0;
            b[i].scales[k] = (uint8_t)(sc | m << 4);
            float s = d * (float)sc, mn = dmin * (float)m, is = s != 0.0f ? 1.0f / s : 0.0f;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l, n = e / 128, j = (e % 128) / 32, ll = e % 32;
                int q = clamp_int(round_int((x[e] + mn) * is), 0, 3);
                b[i].qs[32 * n + ll] |= (uint8_t)(q << (2 * j));
            }
        }
    }
}

static void quantize_q3_k(const float *x, struct quant_block_q3_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float scale[16], vmax_scale = 0.0f;
        /* per 16 elements the value of largest magnitude maps to -4; the signed sub-block
         * scales share one f16 scale where the largest maps to -32 */
        for (int k = 0; k < 16; k++) {
            scale[k] = signed_max(x + 16 * k, 16) / -4.0f;
            if (fabsf(scale[k]) > fabsf(vmax_scale))
                vmax_scale = scale[k];
        }
        b[i].d = quant_f32_to_f16(vmax_scale / -32.0f);
        float d = quant_f16_to_f32(b[i].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        memset(b[i].qs, 0, sizeof b[i].qs);
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int k = 0; k < 16; k++) {
            int sc = clamp_int(round_int(scale[k] * id), -32, 31) + 32;
            if (k < 8)
                b[i].scales[k] |= (uint8_t)(sc & 15);
            else
                b[i].scales[k - 8] |= (uint8_t)((sc & 15) << 4);
            b[i].scales[8 + k % 4] |= (uint8_t)((sc >> 4) << (2 * (k / 4)));
            float s = d * (float)(sc - 32), is = s != 0.0f ? 1.0f / s : 0.0f;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l, n = e / 128, j = (e % 128) / 32, ll = e % 32;
                int u = clamp_int(round_int(x[e] * is), -4, 3) + 4;
                b[i].qs[32 * n + ll] |= (uint8_t)((u & 3) << (2 * j));
                if (u & 4)
                    b[i].hmask[ll] |= (uint8_t)(1u << (4 * n + j));
            }
        }
    }
}

static void quantize_q5_k(const float *x, struct quant_block_q5_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
        /* as Q4_K's quantizer, onto 0..31 */
        for (int j = 0; j < 8; j++) {
            float lo = 0.0f, hi = -INFINITY;
            for (int l = 0; l < 32; l++) {
                lo = fminf(lo, x[32 * j + l]);
                hi = fmaxf(hi, x[32 * j + l]);
            }
            scale[j] = (hi - lo) / 31.0f;
            min[j] = -lo;
            max_scale = fmaxf(max_scale, scale[j]);
            max_min = fmaxf(max_min, min[j]);
        }
        b[i].d = quant_f32_to_f16(max_scale / 63.0f);
        b[i].dmin = quant_f32_to_f16(max_min / 63.0f);
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)(d > 0.0f ? clamp_int((int)ceilf(scale[j] / d), 0, 63) : 0);
            m[j] = (uint8_t)(dmin > 0.0f ? clamp_int((int)ceilf(min[j] / dmin), 0, 63) : 0);
        }
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int j = 0; j < 4; j++) {
            b[i].scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            b[i].scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
            b[i].scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
        }
        memset(b[i].qh, 0, sizeof b[i].qh);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < 8; j++) {
            float s = d * sc[j], mn = dmin * m[j], is = s != 0.0f ? 1.0f / s : 0.0f;
            uint8_t *q = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = clamp_int(round_int((x[32 * j + l] + mn) * is), 0, 31);
                q[l] |= (uint8_t)((v & 15) << (4 * (j % 2)));
                b[i].qh[l] |= (uint8_t)((v >> 4) << j);
            }
        }
    }
}

int quant_ext_quantize(enum ggml_type type, const float *restrict x, void *restrict out,
                       int64_t nb)
{
    switch (type) {
    case GGML_TYPE_Q4_1: quantize_q4_1(x, out, nb); return 0;
    case GGML_TYPE_Q5_0: quantize_q5_0(x, out, nb); return 0;
    case GGML_TYPE_Q5_1: quantize_q5_1(x, out, nb); return 0;
    case GGML_TYPE_IQ4_NL: quantize_iq4_nl(x, out, nb); return 0;
    case GGML_TYPE_Q2_K: quantize_q2_k(x, out, nb); return 0;
    case GGML_TYPE_Q3_K: quantize_q3_k(x, out, nb); return 0;
    case GGML_TYPE_Q5_K: quantize_q5_k(x, out, nb); return 0;
    case GGML_TYPE_IQ4_XS: quantize_iq4_xs(x, out, nb); return 0;
    default: return -EINVAL;
    }
}

/* ---- dequantization ---- */

/* The 5-bit code of element j of a Q5_0/Q5_1 block. */
static int q5_code(const uint8_t qs[16], const uint8_t qh[4], int j)
{
    uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                 (uint32_t)qh[3] << 24;
    int lo = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    return lo | (int)((h >> j) & 1) << 4;
}

static int nibble(const uint8_t qs[16], int j)
{
    return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

static void dequantize_small(enum ggml_type type, const void *in, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK) {
        for (int j = 0; j < QUANT_QK; j++) {
            if (type == GGML_TYPE_Q4_1) {
                const struct quant_block_q4_1 *b = (const struct quant_block_q4_1 *)in + i;
                y[j] = quant_f16_to_f32(b->d) * (float)nibble(b->qs, j) + quant_f16_to_f32(b->m);
            } else if (type == GGML_TYPE_Q5_0) {
                const struct quant_block_q5_0 *b = (const struct quant_block_q5_0 *)in + i;
                y[j] = quant_f16_to_f32(b->d) * (float)(q5_code(b->qs, b->qh, j) - 16);
            } else if (type == GGML_TYPE_Q5_1) {
                const struct quant_block_q5_1 *b = (const struct quant_block_q5_1 *)in + i;
                y[j] = quant_f16_to_f32(b->d) * (float)q5_code(b->qs, b->qh, j) +
                       quant_f16_to_f32(b->m);
            } else {
                const struct quant_block_iq4_nl *b = (const struct quant_block_iq4_nl *)in + i;
                y[j] = quant_f16_to_f32(b->d) * (float)quant_iq4_values[nibble(b->qs, j)];
            }
        }
    }
}

static void dequantize_q2_k(const struct quant_block_q2_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK_K) {
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        for (int e = 0; e < QUANT_QK_K; e++) {
            int n = e / 128, j = (e % 128) / 32, l = e % 32, sc = b[i].scales[e / 16];
            int q = (b[i].qs[32 * n + l] >> (2 * j)) & 3;
            y[e] = d * (float)(sc & 15) * (float)q - dmin * (float)(sc >> 4);
        }
    }
}

static void dequantize_q3_k(const struct quant_block_q3_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK_K) {
        float d = quant_f16_to_f32(b[i].d);
        for (int e = 0; e < QUANT_QK_K; e++) {
            int n = e / 128, j = (e % 128) / 32, l = e % 32;
            int lo = (b[i].qs[32 * n + l] >> (2 * j)) & 3;
            int hi = (b[i].hmask[l] >> (4 * n + j)) & 1;
            int sc = quant_q3_k_scale(b[i].scales, e / 16) - 32;
            y[e] = d * (float)sc * (float)((lo | hi << 2) - 4);
        }
    }
}

static void dequantize_q5_k(const struct quant_block_q5_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK_K) {
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4_k_scale_min(b[i].scales, j, &sc, &m);
            float s = d * sc, mn = dmin * m;
            const uint8_t *q = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> (4 * (j % 2))) & 15) | ((b[i].qh[l] >> j) & 1) << 4;
                y[32 * j + l] = s * (float)v - mn;
            }
        }
    }
}

static void dequantize_iq4_xs(const struct quant_block_iq4_xs *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK_K) {
        float d = quant_f16_to_f32(b[i].d);
        for (int j = 0; j < 8; j++) {
            float dl = d * (float)(quant_iq4_xs_scale(&b[i], j) - 32);
            for (int l = 0; l < 32; l++)
                y[32 * j + l] = dl * (float)quant_iq4_values[nibble(b[i].qs + 16 * j, l)];
        }
    }
}

int quant_ext_dequantize(enum ggml_type type, const void *restrict in, float *restrict y,
                         int64_t nb)
{
    switch (type) {
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_IQ4_NL:
        dequantize_small(type, in, y, nb);
        return 0;
    case GGML_TYPE_Q2_K: dequantize_q2_k(in, y, nb); return 0;
    case GGML_TYPE_Q3_K: dequantize_q3_k(in, y, nb); return 0;
    case GGML_TYPE_Q5_K: dequantize_q5_k(in, y, nb); return 0;
    case GGML_TYPE_IQ4_XS: dequantize_iq4_xs(in, y, nb); return 0;
    default: return -EINVAL;
    }
}
