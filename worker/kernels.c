/* The scalar reference kernels, the shared non-SIMD helpers (activation quantization, rope,
 * get_rows) and the run-time choice of kernel set. The SIMD sets are checked against the
 * functions here; keep these plain and obviously right rather than fast. */
#include "kernels.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum ggml_type kern_act_type(enum ggml_type wtype)
{
    switch (wtype) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
        return GGML_TYPE_F32;
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_IQ4_NL:
        return GGML_TYPE_Q8_0;
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ4_XS:
        return GGML_TYPE_Q8_K;
    default:
        return GGML_TYPE_COUNT;
    }
}

size_t kern_act_bytes(enum ggml_type wtype, int n)
{
    enum ggml_type at = kern_act_type(wtype);
    if (at == GGML_TYPE_COUNT)
        return 0;
    return quant_row_bytes(at, n);
}

int kern_quantize_act(enum ggml_type wtype, const float *restrict x, int n, void *restrict out)
{
    enum ggml_type at = kern_act_type(wtype);
    if (at == GGML_TYPE_COUNT || (n > 0 && quant_row_bytes(at, n) == 0))
        return -EINVAL;
    return quant_quantize_row(at, x, out, n);
}

int kern_seq_chunk(size_t act_bytes)
{
    size_t c = act_bytes ? KERN_SEQ_CHUNK_BYTES / act_bytes : 64;
    c &= ~(size_t)3;
    if (c < 4)
        c = 4;
    if (c > 1024)
        c = 1024;
    return (int)c;
}

/* ---- scalar dot products of one weight row with one activation vector ---- */

static float dot_row_f32(const void *w, const void *x, int n)
{
    const float *a = w, *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

static float dot_row_f16(const void *w, const void *x, int n)
{
    const uint16_t *a = w;
    const float *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n; i++)
        acc += quant_f16_to_f32(a[i]) * b[i];
    return acc;
}

static float dot_row_bf16(const void *w, const void *x, int n)
{
    const uint16_t *a = w;
    const float *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n; i++)
        acc += quant_bf16_to_f32(a[i]) * b[i];
    return acc;
}

static float dot_row_q8_0(const void *w, const void *x, int n)
{
    const struct quant_block_q8_0 *a = w, *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK; i++) {
        int sum = 0;
        for (int j = 0; j < QUANT_QK; j++)
            sum += a[i].qs[j] * b[i].qs[j];
        acc += quant_f16_to_f32(a[i].d) * quant_f16_to_f32(b[i].d) * (float)sum;
    }
    return acc;
}

static float dot_row_q4_0(const void *w, const void *x, int n)
{
    const struct quant_block_q4_0 *a = w;
    const struct quant_block_q8_0 *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK; i++) {
        int sum = 0;
        for (int j = 0; j < QUANT_QK / 2; j++) {
            sum += ((a[i].qs[j] & 15) - 8) * b[i].qs[j];
            sum += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        acc += quant_f16_to_f32(a[i].d) * quant_f16_to_f32(b[i].d) * (float)sum;
    }
    return acc;
}

static float dot_row_q4_k(const void *w, const void *x, int n)
{
    const struct quant_block_q4_k *a = w;
    const struct quant_block_q8_k *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK_K; i++) {
        /* sum_j sc_j * (q . x)_j - m_j * (sum x)_j, all in integers until the end */
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4_k_scale_min(a[i].scales, j, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            int shift = (j % 2) * 4, s = 0;
            for (int l = 0; l < 32; l++)
                s += ((q[l] >> shift) & 15) * b[i].qs[32 * j + l];
            sum_q += sc * s;
            sum_m += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        float d = quant_f16_to_f32(a[i].d), dmin = quant_f16_to_f32(a[i].dmin);
        acc += b[i].d * (d * (float)sum_q - dmin * (float)sum_m);
    }
    return acc;
}

static float dot_row_q6_k(const void *w, const void *x, int n)
{
    const struct quant_block_q6_k *a = w;
    const struct quant_block_q8_k *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK_K; i++) {
        int sum = 0;
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l, h = e / 128, r = e % 128, ll = r % 32, part = r / 32;
                int lo = (a[i].ql[64 * h + ll + (part & 1) * 32] >> ((part >> 1) * 4)) & 15;
                int hi = (a[i].qh[32 * h + ll] >> (2 * part)) & 3;
                s += ((lo | hi << 4) - 32) * b[i].qs[e];
            }
            sum += a[i].scales[k] * s;
        }
        acc += quant_f16_to_f32(a[i].d) * b[i].d * (float)sum;
    }
    return acc;
}

/* Q4_1 and Q5_1 take Q8_0 activations: d_w d_x sum(q qx) + m_w d_x sum(qx), both integer
 * sums exact. */
static int nib(const uint8_t qs[16], int j)
{
    return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
}

static uint32_t qh32(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static float dot_row_q4_1(const void *w, const void *x, int n)
{
    const struct quant_block_q4_1 *a = w;
    const struct quant_block_q8_0 *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK; i++) {
        int sum = 0, sx = 0;
        for (int j = 0; j < QUANT_QK; j++) {
            sum += nib(a[i].qs, j) * b[i].qs[j];
            sx += b[i].qs[j];
        }
        float dx = quant_f16_to_f32(b[i].d);
        acc += quant_f16_to_f32(a[i].d) * dx * (float)sum + quant_f16_to_f32(a[i].m) * dx * (float)sx;
    }
    return acc;
}

static float dot_row_q5_0(const void *w, const void *x, int n)
{
    const struct quant_block_q5_0 *a = w;
    const struct quant_block_q8_0 *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK; i++) {
        uint32_t h = qh32(a[i].qh);
        int sum = 0;
        for (int j = 0; j < QUANT_QK; j++)
            sum += ((nib(a[i].qs, j) | (int)((h >> j) & 1) << 4) - 16) * b[i].qs[j];
        acc += quant_f16_to_f32(a[i].d) * quant_f16_to_f32(b[i].d) * (float)sum;
    }
    return acc;
}

static float dot_row_q5_1(const void *w, const void *x, int n)
{
    const struct quant_block_q5_1 *a = w;
    const struct quant_block_q8_0 *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK; i++) {
        uint32_t h = qh32(a[i].qh);
        int sum = 0, sx = 0;
        for (int j = 0; j < QUANT_QK; j++) {
            sum += (nib(a[i].qs, j) | (int)((h >> j) & 1) << 4) * b[i].qs[j];
            sx += b[i].qs[j];
        }
        float dx = quant_f16_to_f32(b[i].d);
        acc += quant_f16_to_f32(a[i].d) * dx * (float)sum + quant_f16_to_f32(a[i].m) * dx * (float)sx;
    }
    return acc;
}

static float dot_row_iq4_nl(const void *w, const void *x, int n)
{
    const struct quant_block_iq4_nl *a = w;
    const struct quant_block_q8_0 *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK; i++) {
        int sum = 0;
        for (int j = 0; j < QUANT_QK; j++)
            sum += quant_iq4_values[nib(a[i].qs, j)] * b[i].qs[j];
        acc += quant_f16_to_f32(a[i].d) * quant_f16_to_f32(b[i].d) * (float)sum;
    }
    return acc;
}

/* Q2_K: d_x (d sum_k sc_k (q . x)_k - dmin sum_k m_k bsum_k), integers until the end. */
static float dot_row_q2_k(const void *w, const void *x, int n)
{
    const struct quant_block_q2_k *a = w;
    const struct quant_block_q8_k *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK_K; i++) {
        int sum_q = 0, sum_m = 0;
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l, nn = e / 128, j = (e % 128) / 32, ll = e % 32;
                s += ((a[i].qs[32 * nn + ll] >> (2 * j)) & 3) * b[i].qs[e];
            }
            sum_q += (a[i].scales[k] & 15) * s;
            sum_m += (a[i].scales[k] >> 4) * b[i].bsums[k];
        }
        float d = quant_f16_to_f32(a[i].d), dmin = quant_f16_to_f32(a[i].dmin);
        acc += b[i].d * (d * (float)sum_q - dmin * (float)sum_m);
    }
    return acc;
}

/* Q3_K: codes u = low | high << 2 (0..7) stand for u - 4: sum_k sc_k ((u . x)_k - 4 bsum_k). */
static float dot_row_q3_k(const void *w, const void *x, int n)
{
    const struct quant_block_q3_k *a = w;
    const struct quant_block_q8_k *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK_K; i++) {
        int sum = 0;
        for (int k = 0; k < 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l, nn = e / 128, j = (e % 128) / 32, ll = e % 32;
                int lo = (a[i].qs[32 * nn + ll] >> (2 * j)) & 3;
                int hi = (a[i].hmask[ll] >> (4 * nn + j)) & 1;
                s += (lo | hi << 2) * b[i].qs[e];
            }
            sum += (quant_q3_k_scale(a[i].scales, k) - 32) * (s - 4 * b[i].bsums[k]);
        }
        acc += quant_f16_to_f32(a[i].d) * b[i].d * (float)sum;
    }
    return acc;
}

static float dot_row_q5_k(const void *w, const void *x, int n)
{
    const struct quant_block_q5_k *a = w;
    const struct quant_block_q8_k *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK_K; i++) {
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4_k_scale_min(a[i].scales, j, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j / 2);
            int shift = (j % 2) * 4, s = 0;
            for (int l = 0; l < 32; l++)
                s += (((q[l] >> shift) & 15) | ((a[i].qh[l] >> j) & 1) << 4) * b[i].qs[32 * j + l];
            sum_q += sc * s;
            sum_m += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        float d = quant_f16_to_f32(a[i].d), dmin = quant_f16_to_f32(a[i].dmin);
        acc += b[i].d * (d * (float)sum_q - dmin * (float)sum_m);
    }
    return acc;
}

static float dot_row_iq4_xs(const void *w, const void *x, int n)
{
    const struct quant_block_iq4_xs *a = w;
    const struct quant_block_q8_k *b = x;
    float acc = 0.0f;
    for (int i = 0; i < n / QUANT_QK_K; i++) {
        int sum = 0;
        for (int j = 0; j < 8; j++) {
            int s = 0;
            for (int l = 0; l < 32; l++)
                s += quant_iq4_values[nib(a[i].qs + 16 * j, l)] * b[i].qs[32 * j + l];
            sum += (quant_iq4_xs_scale(&a[i], j) - 32) * s;
        }
        acc += quant_f16_to_f32(a[i].d) * b[i].d * (float)sum;
    }
    return acc;
}

typedef float (*dot_row_fn)(const void *w, const void *x, int n);

static dot_row_fn scalar_dot_for(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_F32:
        return dot_row_f32;
    case GGML_TYPE_F16:
        return dot_row_f16;
    case GGML_TYPE_BF16:
        return dot_row_bf16;
    case GGML_TYPE_Q8_0:
        return dot_row_q8_0;
    case GGML_TYPE_Q4_0:
        return dot_row_q4_0;
    case GGML_TYPE_Q4_K:
        return dot_row_q4_k;
    case GGML_TYPE_Q6_K:
        return dot_row_q6_k;
    case GGML_TYPE_Q4_1:
        return dot_row_q4_1;
    case GGML_TYPE_Q5_0:
        return dot_row_q5_0;
    case GGML_TYPE_Q5_1:
        return dot_row_q5_1;
    case GGML_TYPE_IQ4_NL:
        return dot_row_iq4_nl;
    case GGML_TYPE_Q2_K:
        return dot_row_q2_k;
    case GGML_TYPE_Q3_K:
        return dot_row_q3_k;
    case GGML_TYPE_Q5_K:
        return dot_row_q5_k;
    case GGML_TYPE_IQ4_XS:
        return dot_row_iq4_xs;
    default:
        return NULL;
    }
}

static void scalar_matmul(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                          float *Y, int y_stride, int row_begin, int row_end)
{
    dot_row_fn dot = scalar_dot_for(W->type);
    const char *wd = W->data, *xd = X->data;
    int chunk = kern_seq_chunk(X->stride);

    if (!dot)
        abort(); /* an unsupported type got past model load */
    for (int s0 = 0; s0 < n_seq; s0 += chunk) {
        int s1 = s0 + chunk < n_seq ? s0 + chunk : n_seq;
        for (int r = row_begin; r < row_end; r++) {
            const void *row = wd + (size_t)r * W->row_bytes;
            for (int s = s0; s < s1; s++)
                Y[(size_t)s * y_stride + r] = dot(row, xd + (size_t)s * X->stride, X->n);
        }
    }
}

/* ---- scalar float kernels ---- */

static float scalar_dot_f32(const float *a, const float *b, int n)
{
    return dot_row_f32(a, b, n);
}

static float scalar_dot_f16(const uint16_t *a, const float *b, int n)
{
    return dot_row_f16(a, b, n);
}

static void scalar_axpy_f32(float *restrict y, float alpha, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

static void scalar_axpy_f16(float *restrict y, float alpha, const uint16_t *restrict x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += alpha * quant_f16_to_f32(x[i]);
}

static void scalar_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * r * w[i];
}

static void scalar_softmax(float *x, int n)
{
    if (n <= 0)
        return;
    float mx = x[0], sum = 0.0f;
    for (int i = 1; i < n; i++)
        mx = fmaxf(mx, x[i]);
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

static void scalar_swiglu(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void scalar_add(float *restrict y, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += x[i];
}

/* gemm is matmul here. */
static int scalar_rows_agree(enum ggml_type wtype)
{
    (void)wtype;
    return 1;
}

static const struct kern_ops scalar_ops = {
    .name = "scalar",
    .matmul = scalar_matmul,
    .gemm = scalar_matmul,
    .rows_agree = scalar_rows_agree,
    .dot_f32 = scalar_dot_f32,
    .dot_f16 = scalar_dot_f16,
    .axpy_f32 = scalar_axpy_f32,
    .axpy_f16 = scalar_axpy_f16,
    .rmsnorm = scalar_rmsnorm,
    .softmax = scalar_softmax,
    .swiglu = scalar_swiglu,
    .add = scalar_add,
    .quantize_act = kern_quantize_act,
};

/* ---- dispatch ---- */

static int cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("avx"); /* f16c ships with every avx2 CPU */
}

static int cpu_has_avxvnni(void)
{
    return cpu_has_avx2() && __builtin_cpu_supports("avxvnni");
}

static int cpu_has_avx512(void)
{
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
}

const struct kern_ops *kern_ops_get(enum kern_set set)
{
    switch (set) {
    case KERN_SET_SCALAR:
        return &scalar_ops;
    case KERN_SET_AVX2:
        return cpu_has_avx2() ? kern_ops_avx2_table() : NULL;
    case KERN_SET_AVXVNNI:
        return cpu_has_avxvnni() ? kern_ops_avxvnni_table() : NULL;
    case KERN_SET_AVX512:
        return cpu_has_avx512() ? kern_ops_avx512_table() : NULL;
    case KERN_SET_AMX:
        return cpu_has_avx512() ? kern_ops_amx_table() : NULL;
    }
    return NULL;
}

const struct kern_ops *kern_ops_select(void)
{
    const char *env = getenv("KILN_KERNELS");
    const struct kern_ops *k;

    if (env && *env) {
        if (strcmp(env, "scalar") == 0)
            return kern_ops_get(KERN_SET_SCALAR);
        if (strcmp(env, "avx2") == 0)
            return kern_ops_get(KERN_SET_AVX2);
        if (strcmp(env, "avxvnni") == 0)
            return kern_ops_get(KERN_SET_AVXVNNI);
        if (strcmp(env, "avx512") == 0)
            return kern_ops_get(KERN_SET_AVX512);
        if (strcmp(env, "amx") == 0)
            return kern_ops_get(KERN_SET_AMX);
        return NULL;
    }
    if ((k = kern_ops_get(KERN_SET_AMX)))
        return k;
    if ((k = kern_ops_get(KERN_SET_AVX512)))
        return k;
    if ((k = kern_ops_get(KERN_SET_AVXVNNI)))
        return k;
    if ((k = kern_ops_get(KERN_SET_AVX2)))
        return k;
    return &scalar_ops;
}

/* ---- shared helpers ---- */

void kern_rope_table(float *cs, int n_rot, int pos, float base, float freq_scale)
{
    kern_rope_table_ff(cs, n_rot, pos, base, freq_scale, NULL);
}

void kern_rope_table_ff(float *cs, int n_rot, int pos, float base, float freq_scale,
                        const float *factors)
{
    for (int i = 0; i < n_rot / 2; i++) {
        /* double: pos * theta reaches 1e5 rad at long contexts, where float loses the angle */
        double theta = (double)pos * freq_scale * pow(base, -2.0 * i / n_rot);
        if (factors)
            theta /= factors[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void kern_rope_apply(float *x, int n_heads, int head_dim, int n_rot, const float *cs,
                     int neox)
{
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float c = cs[2 * i], s = cs[2 * i + 1];
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void kern_get_row(enum ggml_type type, const void *table, size_t row_bytes, int row, int cols,
                  float *out)
{
    (void)quant_dequantize_row(type, (const char *)table + (size_t)row * row_bytes, out, cols);
}

#if defined(__x86_64__)
/* F16C's conversion rounds to nearest even as quant_f32_to_f16 does: the same bits. */
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *out, const float *x,
                                                                 int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++)
        out[i] = quant_f32_to_f16(x[i]);
}
#endif

/* Each row's keys and values into the cache, every layer: F16C where the CPU has it. */
void kern_f32_to_f16(uint16_t *out, const float *x, int n)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("f16c")) {
        f32_to_f16_f16c(out, x, n);
        return;
    }
#endif
    for (int i = 0; i < n; i++)
        out[i] = quant_f32_to_f16(x[i]);
}
