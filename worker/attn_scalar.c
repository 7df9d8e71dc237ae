/* attn_kern.h's scalar twin (the scalar kernel set's attention, and the reference the vector
 * sets are tested against bit for bit), the shared exp polynomial, and the choice of set. */
#include <math.h>
#include <string.h>

#include "attn_kern.h"
#include "quant.h"
#include "vexp.h"

float attn_exp(float x)
{
    return vexp_f32(x);
}

static float round16(float x)
{
    return quant_f16_to_f32(quant_f32_to_f16(x));
}

static void scores(float *S, const float *Qt, const float *kf, int u0, int u1, int hd, int nv,
                   float scale)
{
    for (int u = u0; u < u1; u++)
        for (int j = 0; j < 8 * nv; j++) {
            float acc = 0.0f;
            for (int d = 0; d < hd; d++)
                acc = fmaf(Qt[d * ATTN_LANES + j], kf[u * hd + d], acc);
            S[(u - u0) * ATTN_LANES + j] = acc * scale;
        }
}

static void softmax(float *S, int n, int nv)
{
    for (int j = 0; j < 8 * nv; j++) {
        float m = -INFINITY, sum = 0.0f, inv;
        for (int t = 0; t < n; t++) {
            float s = S[t * ATTN_LANES + j];
            m = m > s ? m : s;
        }
        if (m == -INFINITY)
            m = 0.0f;
        for (int t = 0; t < n; t++) {
            float e = attn_exp(S[t * ATTN_LANES + j] - m);
            S[t * ATTN_LANES + j] = e;
            sum += e;
        }
        inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int t = 0; t < n; t++)
            S[t * ATTN_LANES + j] = round16(S[t * ATTN_LANES + j] * inv);
    }
}

static void values(float *Ot, const float *S, const float *vf, int u0, int u1, int hd, int nv)
{
    for (int d = 0; d < hd; d++)
        for (int j = 0; j < 8 * nv; j++) {
            float acc = Ot[d * ATTN_LANES + j];
            for (int u = u0; u < u1; u++)
                acc = fmaf(S[(u - u0) * ATTN_LANES + j], vf[u * hd + d], acc);
            Ot[d * ATTN_LANES + j] = acc;
        }
}

/* F16 elements [d0, d0 + n) of a row as floats in buf (n <= 64): each key or value element
 * converted once for all the tile's queries. */
static int row_chunk(float *buf, const uint16_t *row, int d0, int hd)
{
    int n = hd - d0 < 64 ? hd - d0 : 64;
    for (int d = 0; d < n; d++)
        buf[d] = quant_f16_to_f32(row[d0 + d]);
    return n;
}

static void scores_f16(float *Sq, int ns, const float *Qt, const uint16_t *k, int stride, int u0,
                       int u1, int hd, int nq, float scale)
{
    float buf[64], acc[ATTN_FEW];
    for (int u = u0; u < u1; u++) {
        for (int j = 0; j < nq; j++)
            acc[j] = 0.0f;
        for (int d0 = 0; d0 < hd; d0 += 64) {
            int n = row_chunk(buf, k + (size_t)u * stride, d0, hd);
            for (int j = 0; j < nq; j++)
                for (int d = 0; d < n; d++)
                    acc[j] = fmaf(Qt[(d0 + d) * ATTN_LANES + j], buf[d], acc[j]);
        }
        for (int j = 0; j < nq; j++)
            Sq[j * ns + u - u0] = acc[j] * scale;
    }
}

static void softmax_q(float *Sq, int ns, int n, int nq)
{
    for (int j = 0; j < nq; j++) {
        float *s = Sq + j * ns, m = -INFINITY, sum = 0.0f, inv;
        for (int t = 0; t < n; t++)
            m = m > s[t] ? m : s[t];
        if (m == -INFINITY)
            m = 0.0f;
        for (int t = 0; t < n; t++) {
            s[t] = attn_exp(s[t] - m);
            sum += s[t];
        }
        inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int t = 0; t < n; t++)
            s[t] = round16(s[t] * inv);
    }
}

static void values_f16(float *O, const float *Sq, int ns, const uint16_t *v, int stride, int u0,
                       int u1, int hd, int nq)
{
    float buf[64];
    for (int u = u0; u < u1; u++)
        for (int d0 = 0; d0 < hd; d0 += 64) {
            int n = row_chunk(buf, v + (size_t)u * stride, d0, hd);
            for (int j = 0; j < nq; j++)
                for (int d = 0; d < n; d++)
                    O[j * hd + d0 + d] = fmaf(Sq[j * ns + u - u0], buf[d], O[j * hd + d0 + d]);
        }
}

static void rows_f32(float *dst, const uint16_t *src, int stride, int n, int hd)
{
    for (int r = 0; r < n; r++)
        for (int d = 0; d < hd; d++)
            dst[r * hd + d] = quant_f16_to_f32(src[(size_t)r * stride + d]);
}

static void round16_n(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = round16(x[i]);
}

const struct attn_kern attn_kern_scalar = {
    .name = "scalar",
    .scores = scores,
    .softmax = softmax,
    .values = values,
    .scores_f16 = scores_f16,
    .softmax_q = softmax_q,
    .values_f16 = values_f16,
    .rows_f32 = rows_f32,
    .round16 = round16_n,
};

const struct attn_kern *attn_kern_for(const char *kernels)
{
#if defined(__x86_64__)
    if (strcmp(kernels, "avx512") == 0 || strcmp(kernels, "amx") == 0)
        return &attn_kern_avx512;
    if (strcmp(kernels, "scalar") != 0)
        return &attn_kern_avx2;
#endif
    (void)kernels;
    return &attn_kern_scalar;
}
