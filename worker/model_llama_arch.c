/* The architectures of the Llama family kiln runs, what sets each apart, and the parts of
 * the config that differ between them: RoPE (linear, YaRN, LongRoPE, per-layer bases),
 * sliding windows, soft-caps and multipliers. Facts from the GGUF conventions llama.cpp
 * reads; the oracle test (tests/test_oracle.c) holds kiln to llama.cpp's output. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "model_llama_impl.h"

#define msg model_llama_msg

/*                name       neox bias qkn post gelu fused gemma granite swa nope */
static const struct llama_arch archs[] = {
    {"llama",   0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen2",   1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3",   1, 0, 1, 0, 0, 0, 0, 0, 0, 0},
    {"gemma2",  1, 0, 0, 1, 1, 0, 1, 0, 2, 0},
    {"gemma3",  1, 0, 1, 1, 1, 0, 1, 0, 6, 0},
    {"phi3",    1, 0, 0, 0, 0, 1, 0, 0, 0, 0},
    {"granite", 0, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"smollm3", 0, 0, 0, 0, 0, 0, 0, 0, 0, 4},
};

const struct llama_arch *llama_arch_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0)
            return &archs[i];
    return NULL;
}

const char *llama_arch_names(void)
{
    return "llama, qwen2, qwen3, gemma2, gemma3, phi3, granite, smollm3";
}

void llama_rope_table(const struct llama_rope *r, int n_rot, int pos, float *cs)
{
    for (int i = 0; i < n_rot / 2; i++) {
        /* double: pos * theta reaches 1e5 rad at long contexts, where float loses the angle */
        double extrap = (double)pos * pow(r->base, -2.0 * i / n_rot);
        if (r->factors)
            extrap /= r->factors[i];
        double theta = extrap * r->freq_scale;
        if (r->ext_factor != 0.0f) {
            /* YaRN: high frequencies (i below corr[0]) keep their unscaled angle, low ones
             * (above corr[1]) are interpolated, a linear ramp between */
            double y = (i - r->corr[0]) / fmax(0.001, (double)(r->corr[1] - r->corr[0]));
            double mix = (1.0 - fmin(1.0, fmax(0.0, y))) * r->ext_factor;
            theta = theta * (1.0 - mix) + extrap * mix;
        }
        cs[2 * i] = (float)cos(theta) * r->mscale;
        cs[2 * i + 1] = (float)sin(theta) * r->mscale;
    }
}

static int get_f32(const struct gguf *g, const char *arch, const char *key, bool required,
                   float *out, char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    int rc = gguf_get_f32(g, full, out);
    if (rc == -ENOENT && !required)
        return 0;
    if (rc < 0)
        msg(err, errlen, "%s: %s model: %s key %s", g->path, arch,
            rc == -ENOENT ? "missing" : "bad type of", full);
    return rc;
}

static int get_u32(const struct gguf *g, const char *arch, const char *key, bool required,
                   uint32_t *out, char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    int rc = gguf_get_u32(g, full, out);
    if (rc == -ENOENT && !required)
        return 0;
    if (rc < 0)
        msg(err, errlen, "%s: %s model: %s key %s", g->path, arch,
            rc == -ENOENT ? "missing" : "bad type of", full);
    return rc;
}

/* The YaRN ramp's ends: the pair index whose wavelength turns n_rot / beta... times around
 * in the original context (the YaRN paper's correction dimensions). */
static float yarn_dim(int n_rot, uint32_t orig_ctx, float turns, float base)
{
    return (float)n_rot * logf((float)orig_ctx / (turns * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

/* RoPE scaling from {arch}.rope.scaling.*: none, linear, yarn; LongRoPE (phi3) from its
 * factor tensors is read with the weights. */
static int read_rope(struct llama_config *c, const struct gguf *g, uint32_t ctx, char *err,
                     size_t errlen)
{
    struct llama_rope *r = &c->rope[0];
    const char *arch = c->arch;
    struct gguf_str s;
    char full[128];
    int rc;

    r->base = 10000.0f;
    r->freq_scale = 1.0f;
    r->mscale = 1.0f;
    if ((rc = get_f32(g, arch, "rope.freq_base", false, &r->base, err, errlen)) < 0)
        return rc;
    snprintf(full, sizeof(full), "%s.rope.scaling.type", arch);
    if (gguf_get_str(g, full, &s) == 0 && !gguf_str_eq(s, "none")) {
        float factor = 1.0f;
        bool yarn = gguf_str_eq(s, "yarn");
        if (!yarn && !gguf_str_eq(s, "linear")) {
            msg(err, errlen, "%s: %s model: rope scaling '%.*s' is not supported (linear, yarn)",
                g->path, arch, (int)(s.len < 32 ? s.len : 32), s.ptr);
            return -EINVAL;
        }
        if ((rc = get_f32(g, arch, "rope.scaling.factor", false, &factor, err, errlen)) < 0)
            return rc;
        if (factor > 0.0f)
            r->freq_scale = 1.0f / factor;
        if (yarn) {
            uint32_t orig = c->train_ctx;
            float beta_fast = 32.0f, beta_slow = 1.0f, attn = 1.0f;
            r->ext_factor = 1.0f;
            if ((rc = get_u32(g, arch, "rope.scaling.original_context_length", false, &orig,
                              err, errlen)) < 0 ||
                (rc = get_f32(g, arch, "rope.scaling.yarn_ext_factor", false, &r->ext_factor,
                              err, errlen)) < 0 ||
                (rc = get_f32(g, arch, "rope.scaling.yarn_attn_factor", false, &attn, err,
                              errlen)) < 0 ||
                (rc = get_f32(g, arch, "rope.scaling.yarn_beta_fast", false, &beta_fast, err,
                              errlen)) < 0 ||
                (rc = get_f32(g, arch, "rope.scaling.yarn_beta_slow", false, &beta_slow, err,
                              errlen)) < 0)
                return rc;
            if (orig == 0)
                orig = c->train_ctx;
            r->corr[0] = fmaxf(0.0f, floorf(yarn_dim(c->n_rot, orig, beta_fast, r->base)));
            r->corr[1] = fminf((float)(c->n_rot - 1),
                               ceilf(yarn_dim(c->n_rot, orig, beta_slow, r->base)));
            /* attention temperature: angles (so q.k) grow by 0.1 ln(factor) + 1 */
            r->mscale = attn * (r->freq_scale < 1.0f ? 1.0f + 0.1f * logf(1.0f / r->freq_scale)
                                                     : 1.0f);
        }
    }
    if (c->a->fused) {
        /* LongRoPE: the factors are tensors; their attention factor is a key, and the long
         * factors apply past the original context (chosen with the weights) */
        if ((rc = get_f32(g, arch, "rope.scaling.attn_factor", false, &r->mscale, err,
                          errlen)) < 0)
            return rc;
    }
    (void)ctx;
    c->n_rope = 1;
    c->rope[1] = c->rope[0];
    if (strcmp(arch, "gemma3") == 0) {
        /* local layers: their own base (10000 unless the file says), never scaled */
        struct llama_rope *l = &c->rope[1];
        *l = (struct llama_rope){.base = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f};
        if ((rc = get_f32(g, arch, "rope.freq_base_swa", false, &l->base, err, errlen)) < 0)
            return rc;
        c->n_rope = 2;
    }
    return 0;
}

int llama_arch_config(struct llama_config *c, const struct gguf *g, char *err, size_t errlen)
{
    const struct llama_arch *a = c->a;
    const char *arch = c->arch;
    int rc;

    c->neox = a->neox;
    c->qkv_bias = a->qkv_bias;
    if ((rc = read_rope(c, g, 0, err, errlen)) < 0)
        return rc;

    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (a->gemma) {
        /* query_pre_attn_scalar: the head size, but dim / heads in the 27B models */
        if ((strcmp(arch, "gemma2") == 0 && c->n_layers == 46) ||
            (strcmp(arch, "gemma3") == 0 && c->n_layers == 62))
            c->attn_scale = 1.0f / sqrtf((float)(c->dim / c->n_heads));
        c->embd_scale = sqrtf((float)c->dim);
    } else {
        c->embd_scale = 1.0f;
    }
    c->resid_scale = 1.0f;
    c->logit_scale = 1.0f;
    if (a->granite) {
        if ((rc = get_f32(g, arch, "embedding_scale", true, &c->embd_scale, err, errlen)) < 0 ||
            (rc = get_f32(g, arch, "residual_scale", true, &c->resid_scale, err, errlen)) < 0 ||
            (rc = get_f32(g, arch, "attention.scale", true, &c->attn_scale, err, errlen)) < 0 ||
            (rc = get_f32(g, arch, "logit_scale", true, &c->logit_scale, err, errlen)) < 0)
            return rc;
        if (!(c->logit_scale != 0.0f)) {
            msg(err, errlen, "%s: granite model: logit_scale is 0", g->path);
            return -EINVAL;
        }
    }
    if (strcmp(arch, "gemma2") == 0 &&
        ((rc = get_f32(g, arch, "attn_logit_softcapping", false, &c->softcap_attn, err,
                       errlen)) < 0 ||
         (rc = get_f32(g, arch, "final_logit_softcapping", false, &c->softcap_final, err,
                       errlen)) < 0))
        return rc;
    c->n_swa = 0;
    if (a->swa_pattern >= 0 &&
        (rc = get_u32(g, arch, "attention.sliding_window", a->gemma, &c->n_swa, err, errlen)) <
            0)
        return rc;
    return 0;
}

void llama_arch_layers(struct llama_config *c, struct llama_layer *layers)
{
    const struct llama_arch *a = c->a;
    for (int l = 0; l < c->n_layers; l++) {
        int n = a->swa_pattern;
        bool local = c->n_swa > 0 && (n == 0 || (n > 1 && l % n < n - 1));
        layers[l].window = local ? c->n_swa : 0;
        layers[l].rope = local && c->n_rope > 1 ? 1 : 0;
        if (a->nope_interval > 0 && (l + 1) % a->nope_interval == 0)
            layers[l].rope = -1;
    }
}
