/* Reference (scalar) conversions between f32 and every stored tensor type: f16/bf16 bit
 * conversion and per-block quantizers/dequantizers. Used to write model files, to look up
 * embeddings and as the ground truth for the SIMD kernels; nothing here is on a hot path. */
#include "quant.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t quant_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;

    if (a >= 0x7f800000u) { /* inf, or NaN kept quiet with the top payload bits */
        if (a == 0x7f800000u)
            return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    }
    int e = (int)(a >> 23) - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* Subnormal half: units of 2^-24; value / 2^-24 = mant * 2^(e - 14). */
        if (e < -10)
            return (uint16_t)sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 14 - e;
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1)))
            h++; /* may carry into the smallest normal: still the right encoding */
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | ((a >> 13) & 0x3ffu);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* a carry into the exponent is right, up to inf */
    return (uint16_t)(sign | h);
}

float quant_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;

    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    if (e == 31)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t quant_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float quant_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

int quant_type_supported(enum ggml_type type)
{
    return quant_block_elems(type) != 0;
}

int quant_block_elems(enum ggml_type type)
{
    switch (type) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
        return 1;
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_IQ4_NL:
        return QUANT_QK;
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ4_XS:
    case GGML_TYPE_Q8_K:
        return QUANT_QK_K;
    default:
        return 0;
    }
}

static size_t block_bytes(enum ggml_type type)
{
    switch (type) {
    case GGML_TYPE_F32:
        return 4;
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
        return 2;
    case GGML_TYPE_Q8_0:
        return sizeof(struct quant_block_q8_0);
    case GGML_TYPE_Q4_0:
        return sizeof(struct quant_block_q4_0);
    case GGML_TYPE_Q4_K:
        return sizeof(struct quant_block_q4_k);
    case GGML_TYPE_Q6_K:
        return sizeof(struct quant_block_q6_k);
    case GGML_TYPE_Q8_K:
        return sizeof(struct quant_block_q8_k);
    case GGML_TYPE_Q4_1:
        return sizeof(struct quant_block_q4_1);
    case GGML_TYPE_Q5_0:
        return sizeof(struct quant_block_q5_0);
    case GGML_TYPE_Q5_1:
        return sizeof(struct quant_block_q5_1);
    case GGML_TYPE_IQ4_NL:
        return sizeof(struct quant_block_iq4_nl);
    case GGML_TYPE_Q2_K:
        return sizeof(struct quant_block_q2_k);
    case GGML_TYPE_Q3_K:
        return sizeof(struct quant_block_q3_k);
    case GGML_TYPE_Q5_K:
        return sizeof(struct quant_block_q5_k);
    case GGML_TYPE_IQ4_XS:
        return sizeof(struct quant_block_iq4_xs);
    default:
        return 0;
    }
}

size_t quant_row_bytes(enum ggml_type type, int64_t n)
{
    int be = quant_block_elems(type);
    if (be == 0 || n < 0 || n % be != 0)
        return 0;
    return (size_t)(n / be) * block_bytes(type);
}

const char *quant_type_name(enum ggml_type type)
{
    switch (type) {
    case GGML_TYPE_F32:
        return "F32";
    case GGML_TYPE_F16:
        return "F16";
    case GGML_TYPE_BF16:
        return "BF16";
    case GGML_TYPE_Q8_0:
        return "Q8_0";
    case GGML_TYPE_Q4_0:
        return "Q4_0";
    case GGML_TYPE_Q4_K:
        return "Q4_K";
    case GGML_TYPE_Q6_K:
        return "Q6_K";
    case GGML_TYPE_Q8_K:
        return "Q8_K";
    case GGML_TYPE_Q4_1:
        return "Q4_1";
    case GGML_TYPE_Q5_0:
        return "Q5_0";
    case GGML_TYPE_Q5_1:
        return "Q5_1";
    case GGML_TYPE_IQ4_NL:
        return "IQ4_NL";
    case GGML_TYPE_Q2_K:
        return "Q2_K";
    case GGML_TYPE_Q3_K:
        return "Q3_K";
    case GGML_TYPE_Q5_K:
        return "Q5_K";
    case GGML_TYPE_IQ4_XS:
        return "IQ4_XS";
    default:
        return "?";
    }
}

void quant_q4_k_scale_min(const uint8_t scales[12], int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/* Round half away from zero, like lroundf, without the libcall's errno handling. */
static int round_int(float v)
{
    return (int)(v >= 0.0f ? v + 0.5f : v - 0.5f);
}

/* fmaxf(amax, fabsf(v)) for amax >= 0, NaN v included (it loses the comparison), written so
 * the compiler vectorizes it: activations are quantized on every matmul input. */
static inline float max_abs(float amax, float v)
{
    float a = fabsf(v);
    return a > amax ? a : amax;
}

static int clamp_int(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void quantize_q8_0(const float *x, struct quant_block_q8_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            amax = max_abs(amax, x[j]);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK; j++)
            b[i].qs[j] = (int8_t)clamp_int(round_int(x[j] * id), -127, 127);
    }
}

static void quantize_q4_0(const float *x, struct quant_block_q4_0 *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK) {
        /* The value of largest magnitude maps to -8 exactly, so it keeps its full precision;
         * the other side of the range gets 7 steps. */
        float vmax = 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            if (fabsf(x[j]) > fabsf(vmax))
                vmax = x[j];
        float d = vmax / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            int lo = clamp_int(round_int(x[j] * id) + 8, 0, 15);
            int hi = clamp_int(round_int(x[j + 16] * id) + 8, 0, 15);
            b[i].qs[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void quantize_q4_k(const float *x, struct quant_block_q4_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
        /* Per sub-block: an affine map of [lo, hi] (lo <= 0, so the min is stored positive)
         * onto 0..15. */
        for (int j = 0; j < 8; j++) {
            float lo = 0.0f, hi = -INFINITY;
            for (int l = 0; l < 32; l++) {
                lo = fminf(lo, x[32 * j + l]);
                hi = fmaxf(hi, x[32 * j + l]);
            }
            scale[j] = (hi - lo) / 15.0f;
            min[j] = -lo;
            max_scale = fmaxf(max_scale, scale[j]);
            max_min = fmaxf(max_min, min[j]);
        }
        float d = max_scale / 63.0f, dmin = max_min / 63.0f;
        b[i].d = quant_f32_to_f16(d);
        b[i].dmin = quant_f32_to_f16(dmin);
        d = quant_f16_to_f32(b[i].d); /* quantize against what the decoder will see */
        dmin = quant_f16_to_f32(b[i].dmin);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)(d > 0.0f ? clamp_int(round_int(scale[j] / d), 0, 63) : 0);
            /* Round the min up so the sub-block's lowest value stays reachable. */
            m[j] = (uint8_t)(dmin > 0.0f ? clamp_int((int)ceilf(min[j] / dmin), 0, 63) : 0);
        }
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int j = 0; j < 4; j++) {
            b[i].scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            b[i].scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
            b[i].scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
        }
        for (int j = 0; j < 8; j++) {
            float s = d * sc[j], mn = dmin * m[j];
            float is = s != 0.0f ? 1.0f / s : 0.0f;
            uint8_t *q = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l++) {
                int v = clamp_int(round_int((x[32 * j + l] + mn) * is), 0, 15);
                if (j % 2 == 0)
                    q[l] = (uint8_t)v;
                else
                    q[l] |= (uint8_t)(v << 4);
            }
        }
    }
}

static void quantize_q6_k(const float *x, struct quant_block_q6_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float scale[16], vmax_scale = 0.0f;
        /* Per 16 elements the value of largest magnitude maps to -32; the sub-block scales
         * (signed) then share one 8-bit scale where the largest maps to -128. */
        for (int k = 0; k < 16; k++) {
            float vmax = 0.0f;
            for (int l = 0; l < 16; l++)
                if (fabsf(x[16 * k + l]) > fabsf(vmax))
                    vmax = x[16 * k + l];
            scale[k] = vmax / -32.0f;
            if (fabsf(scale[k]) > fabsf(vmax_scale))
                vmax_scale = scale[k];
        }
        float d = vmax_scale / -128.0f;
        b[i].d = quant_f32_to_f16(d);
        d = quant_f16_to_f32(b[i].d);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int k = 0; k < 16; k++)
            b[i].scales[k] = (int8_t)clamp_int(round_int(scale[k] * id), -128, 127);
        for (int e = 0; e < QUANT_QK_K; e++) {
            float s = d * b[i].scales[e / 16];
            int q = s != 0.0f ? clamp_int(round_int(x[e] / s), -32, 31) + 32 : 32;
            int h = e / 128, r = e % 128, l = r % 32, part = r / 32;
            uint8_t *ql = b[i].ql + 64 * h + l + (part & 1) * 32;
            *ql |= (uint8_t)((q & 15) << ((part >> 1) * 4));
            b[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * part));
        }
    }
}

static void quantize_q8_k(const float *x, struct quant_block_q8_k *b, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK_K; j++)
            amax = max_abs(amax, x[j]);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = d;
        for (int k = 0; k < 16; k++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                int q = clamp_int(round_int(x[16 * k + l] * id), -127, 127);
                b[i].qs[16 * k + l] = (int8_t)q;
                sum += q;
            }
            b[i].bsums[k] = (int16_t)sum;
        }
    }
}

int quant_quantize_row(enum ggml_type type, const float *restrict x, void *restrict out,
                       int64_t n)
{
    if (quant_row_bytes(type, n) == 0 && n != 0)
        return -EINVAL;
    int64_t nb = n / quant_block_elems(type);
    switch (type) {
    case GGML_TYPE_F32:
        memcpy(out, x, (size_t)n * sizeof(float));
        return 0;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)out)[i] = quant_f32_to_f16(x[i]);
        return 0;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)out)[i] = quant_f32_to_bf16(x[i]);
        return 0;
    case GGML_TYPE_Q8_0:
        quantize_q8_0(x, out, nb);
        return 0;
    case GGML_TYPE_Q4_0:
        quantize_q4_0(x, out, nb);
        return 0;
    case GGML_TYPE_Q4_K:
        quantize_q4_k(x, out, nb);
        return 0;
    case GGML_TYPE_Q6_K:
        quantize_q6_k(x, out, nb);
        return 0;
    case GGML_TYPE_Q8_K:
        quantize_q8_k(x, out, nb);
        return 0;
    default:
        return quant_ext_quantize(type, x, out, nb);
    }
}

static void dequantize_q4_k(const struct quant_block_q4_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK_K) {
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4_k_scale_min(b[i].scales, j, &sc, &m);
            float s = d * sc, mn = dmin * m;
            const uint8_t *q = b[i].qs + 32 * (j / 2);
            int shift = (j % 2) * 4;
            for (int l = 0; l < 32; l++)
                y[32 * j + l] = s * (float)((q[l] >> shift) & 15) - mn;
        }
    }
}

static void dequantize_q6_k(const struct quant_block_q6_k *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QUANT_QK_K) {
        float d = quant_f16_to_f32(b[i].d);
        for (int e = 0; e < QUANT_QK_K; e++) {
            int h = e / 128, r = e % 128, l = r % 32, part = r / 32;
            int lo = (b[i].ql[64 * h + l + (part & 1) * 32] >> ((part >> 1) * 4)) & 15;
            int hi = (b[i].qh[32 * h + l] >> (2 * part)) & 3;
            y[e] = d * (float)b[i].scales[e / 16] * (float)((lo | hi << 4) - 32);
        }
    }
}

int quant_dequantize_row(enum ggml_type type, const void *restrict in, float *restrict y,
                         int64_t n)
{
    if (quant_row_bytes(type, n) == 0 && n != 0)
        return -EINVAL;
    int64_t nb = n / quant_block_elems(type);
    switch (type) {
    case GGML_TYPE_F32:
        memcpy(y, in, (size_t)n * sizeof(float));
        return 0;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            y[i] = quant_f16_to_f32(((const uint16_t *)in)[i]);
        return 0;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            y[i] = quant_bf16_to_f32(((const uint16_t *)in)[i]);
        return 0;
    case GGML_TYPE_Q8_0: {
        const struct quant_block_q8_0 *b = in;
        for (int64_t i = 0; i < nb; i++) {
            float d = quant_f16_to_f32(b[i].d);
            for (int j = 0; j < QUANT_QK; j++)
                y[i * QUANT_QK + j] = d * (float)b[i].qs[j];
        }
        return 0;
    }
    case GGML_TYPE_Q4_0: {
        const struct quant_block_q4_0 *b = in;
        for (int64_t i = 0; i < nb; i++) {
            float d = quant_f16_to_f32(b[i].d);
            for (int j = 0; j < QUANT_QK / 2; j++) {
                y[i * QUANT_QK + j] = d * (float)((b[i].qs[j] & 15) - 8);
                y[i * QUANT_QK + j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
            }
        }
        return 0;
    }
    case GGML_TYPE_Q4_K:
        dequantize_q4_k(in, y, nb);
        return 0;
    case GGML_TYPE_Q6_K:
        dequantize_q6_k(in, y, nb);
        return 0;
    case GGML_TYPE_Q8_K: {
        const struct quant_block_q8_k *b = in;
        for (int64_t i = 0; i < nb; i++)
            for (int j = 0; j < QUANT_QK_K; j++)
                y[i * QUANT_QK_K + j] = b[i].d * (float)b[i].qs[j];
        return 0;
    }
    default:
        return quant_ext_dequantize(type, in, y, nb);
    }
}
