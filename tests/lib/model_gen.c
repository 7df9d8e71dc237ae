/* Writes random-weight Llama-family GGUFs through gguf_write and the reference quantizers.
 * Weights are N(0, 1/cols) (the embedding N(0, 1)), so activations stay of order one through
 * any depth and logits are spread enough for greedy decoding to be stable; norms are 1. */
#include "model_gen.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../worker/quant.h"
#include "hash.h"
#include "gguf_write.h"

struct gen_rng {
    uint64_t s;
};

static uint64_t rng_next(struct gen_rng *r)
{
    return hash_splitmix64(&r->s);
}

/* About N(0, 1): four uniforms summed (Irwin-Hall), variance scaled to one. */
static float rng_normal(struct gen_rng *r)
{
    uint64_t v = rng_next(r);
    float s = 0.0f;
    for (int i = 0; i < 4; i++)
        s += (float)((v >> (16 * i)) & 0xffff) * (1.0f / 65536.0f);
    return (s - 2.0f) * 1.7320508f;
}

static uint64_t name_hash(const char *s)
{
    return hash_fnv1a(s, strlen(s));
}

int model_gen_preset(struct model_gen_opts *o, const char *name)
{
    static const struct {
        const char *name;
        int dim, layers, heads, kv_heads, ffn, ctx;
        const char *arch; /* NULL: leave o->arch */
        int head_dim, window;
    } p[] = {
        {"tinyllama", 2048, 22, 32, 4, 5632, 2048, NULL, 0, 0},
        {"smollm", 576, 30, 9, 3, 1536, 2048, NULL, 0, 0},
        {"tiny", 256, 2, 4, 2, 512, 256, NULL, 0, 0},
        /* its 896-wide rows: K-quant fallbacks */
        {"qwen2.5-0.5b", 896, 24, 14, 2, 4864, 4096, NULL, 0, 0},
        /* the shapes of the smallest published model of each newer architecture */
        {"qwen3-0.6b", 1024, 28, 16, 8, 3072, 40960, "qwen3", 128, 0},
        {"gemma2-2b", 2304, 26, 8, 4, 9216, 8192, "gemma2", 256, 4096},
        {"gemma3-1b", 1152, 26, 4, 1, 6912, 32768, "gemma3", 256, 512},
        {"phi3-mini", 3072, 32, 32, 32, 8192, 4096, "phi3", 0, 2047},
        {"granite-2b", 2048, 40, 32, 8, 8192, 131072, "granite", 0, 0},
        {"smollm3-3b", 2048, 36, 16, 4, 11008, 65536, "smollm3", 0, 0},
    };
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        if (strcasecmp(name, p[i].name) == 0) {
            o->dim = p[i].dim;
            o->layers = p[i].layers;
            o->heads = p[i].heads;
            o->kv_heads = p[i].kv_heads;
            o->ffn = p[i].ffn;
            o->ctx = p[i].ctx;
            if (p[i].arch) {
                o->arch = p[i].arch;
                o->head_dim = p[i].head_dim;
                o->window = p[i].window;
            }
            return 0;
        }
    }
    return -ENOENT;
}

enum ggml_type model_gen_type(const char *name)
{
    static const enum ggml_type t[] = {
        GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,   GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
        GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,   GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,
        GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,   GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (strcasecmp(name, quant_type_name(t[i])) == 0)
            return t[i];
    return GGML_TYPE_COUNT;
}

/* Every tokenizer.* key of the vocabulary file, copied with its type. */
static int copy_vocab(struct gguf_writer *w, const char *path, int *n_vocab, char *err,
                      size_t errlen)
{
    struct gguf *g = gguf_open(path, err, errlen);
    int rc = 0;

    if (!g)
        return -EINVAL;
    for (uint64_t i = 0; i < g->n_kv && rc == 0; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        char key[256];
        if (kv->key.len >= sizeof(key) || strncmp(kv->key.ptr, "tokenizer.", 10) != 0)
            continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = '\0';
        switch (kv->type) {
        case GGUF_TYPE_UINT8: rc = gguf_write_u8(w, key, (uint8_t)kv->v.u64); break;
        case GGUF_TYPE_INT8: rc = gguf_write_i8(w, key, (int8_t)kv->v.i64); break;
        case GGUF_TYPE_UINT16: rc = gguf_write_u16(w, key, (uint16_t)kv->v.u64); break;
        case GGUF_TYPE_INT16: rc = gguf_write_i16(w, key, (int16_t)kv->v.i64); break;
        case GGUF_TYPE_UINT32: rc = gguf_write_u32(w, key, (uint32_t)kv->v.u64); break;
        case GGUF_TYPE_INT32: rc = gguf_write_i32(w, key, (int32_t)kv->v.i64); break;
        case GGUF_TYPE_UINT64: rc = gguf_write_u64(w, key, kv->v.u64); break;
        case GGUF_TYPE_INT64: rc = gguf_write_i64(w, key, kv->v.i64); break;
        case GGUF_TYPE_FLOAT32: rc = gguf_write_f32(w, key, (float)kv->v.f64); break;
        case GGUF_TYPE_FLOAT64: rc = gguf_write_f64(w, key, kv->v.f64); break;
        case GGUF_TYPE_BOOL: rc = gguf_write_bool(w, key, kv->v.u64 != 0); break;
        case GGUF_TYPE_STRING:
            rc = gguf_write_strn(w, key, kv->v.str.ptr, kv->v.str.len);
            break;
        case GGUF_TYPE_ARRAY:
            if (!kv->arr_data)
                break; /* arrays of arrays: none in tokenizer keys kiln reads */
            if (kv->arr_type == GGUF_TYPE_STRING) {
                char **s = calloc(kv->arr_n ? kv->arr_n : 1, sizeof(*s));
                rc = s ? 0 : -ENOMEM;
                for (uint64_t j = 0; j < kv->arr_n && rc == 0; j++) {
                    struct gguf_str e = gguf_arr_str(kv, j);
                    if (!(s[j] = strndup(e.ptr, e.len)))
                        rc = -ENOMEM;
                }
                if (rc == 0)
                    rc = gguf_write_arr_str(w, key, (const char *const *)s, kv->arr_n);
                if (rc == 0 && strcmp(key, "tokenizer.ggml.tokens") == 0)
                    *n_vocab = (int)kv->arr_n;
                for (uint64_t j = 0; s && j < kv->arr_n; j++)
                    free(s[j]);
                free(s);
            } else {
                rc = gguf_write_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
            }
            break;
        default:
            break;
        }
    }
    gguf_close(g);
    if (rc == 0 && *n_vocab <= 0) {
        snprintf(err, errlen, "%s: no tokenizer.ggml.tokens", path);
        rc = -EINVAL;
    }
    return rc;
}

/* <unk>, <s>, </s>, the 256 byte tokens, then "▁w<i>" pieces; with chat, the last two are
 * <|end|> and <|endoftext|> (llama.cpp looks phi3's end-of-turn up by that text). */
static int synth_vocab(struct gguf_writer *w, int n, int chat)
{
    char **tok = calloc((size_t)n, sizeof(*tok));
    float *score = calloc((size_t)n, sizeof(*score));
    int32_t *type = calloc((size_t)n, sizeof(*type));
    int rc = -ENOMEM;

    if (!tok || !score || !type)
        goto out;
    for (int i = 0; i < n; i++) {
        char buf[32];
        if (i < 3) {
            snprintf(buf, sizeof(buf), "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            type[i] = i == 0 ? 2 : 3;
        } else if (i < 259) {
            snprintf(buf, sizeof(buf), "<0x%02X>", i - 3);
            type[i] = 6;
        } else if (chat && i >= n - 2) {
            snprintf(buf, sizeof(buf), "%s", i == n - 2 ? "<|end|>" : "<|endoftext|>");
            type[i] = 3;
        } else {
            snprintf(buf, sizeof(buf), "\xe2\x96\x81w%d", i);
            type[i] = 1;
            score[i] = -(float)i;
        }
        if (!(tok[i] = strdup(buf)))
            goto out;
    }
    if ((rc = gguf_write_str(w, "tokenizer.ggml.model", "llama")) < 0 ||
        (rc = gguf_write_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok,
                                 (uint64_t)n)) < 0 ||
        (rc = gguf_write_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, score,
                             (uint64_t)n)) < 0 ||
        (rc = gguf_write_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, type,
                             (uint64_t)n)) < 0 ||
        (rc = gguf_write_u32(w, "tokenizer.ggml.unknown_token_id", 0)) < 0 ||
        (rc = gguf_write_u32(w, "tokenizer.ggml.bos_token_id", 1)) < 0 ||
        (rc = gguf_write_u32(w, "tokenizer.ggml.eos_token_id", 2)) < 0)
        goto out;
    rc = 0;
out:
    for (int i = 0; tok && i < n; i++)
        free(tok[i]);
    free(tok);
    free(score);
    free(type);
    return rc;
}

/* One tensor of rows x cols (1-D when rows is 0): fill plus noise of standard deviation std
 * (none when 0), stored as type. */
static int add_tensor(struct gguf_writer *w, const struct model_gen_opts *o, const char *name,
                      int rows, int cols, enum ggml_type type, float std, float fill)
{
    struct gen_rng r = {o->seed ^ name_hash(name)};
    int n_dims = rows ? 2 : 1, nrows = rows ? rows : 1;
    uint64_t ne[2];
    float *row = NULL;
    uint8_t *data = NULL;
    size_t rb;
    int rc = -ENOMEM;

    if (o->omit_tensor && strcmp(o->omit_tensor, name) == 0)
        return 0;
    if (o->quant && type == o->type)
        type = model_gen_quant_type(o, name, cols);
    if (o->defect_tensor && strcmp(o->defect_tensor, name) == 0) {
        if (o->defect_rows > 0)
            nrows = rows = o->defect_rows;
        if (o->defect_type_set)
            type = o->defect_type;
    }
    ne[0] = (uint64_t)cols;
    ne[1] = (uint64_t)nrows;
    if (!quant_type_supported(type)) /* a defect: zeros of the right size */
        return gguf_write_tensor(w, name, (uint32_t)n_dims, ne, type, NULL,
                                 gguf_tensor_bytes(type, (uint32_t)n_dims, ne));
    rb = quant_row_bytes(type, cols);
    if (rb == 0)
        return -EINVAL;
    row = malloc((size_t)cols * sizeof(float));
    data = malloc(rb * (size_t)nrows);
    if (!row || !data)
        goto out;
    for (int i = 0; i < nrows; i++) {
        for (int j = 0; j < cols; j++)
            row[j] = fill + (std > 0.0f ? rng_normal(&r) * std : 0.0f);
        if ((rc = quant_quantize_row(type, row, data + rb * (size_t)i, cols)) < 0)
            goto out;
    }
    rc = gguf_write_tensor(w, name, (uint32_t)n_dims, ne, type, data, rb * (size_t)nrows);
out:
    free(row);
    free(data);
    return rc;
}

/* What sets each architecture's file apart. */
struct gen_arch {
    const char *name;
    unsigned bias : 1, qk_norm : 1, post_norms : 1, tied : 1, fused : 1, gemma : 1;
    float softcap_attn, softcap_final;
};

static const struct gen_arch gen_archs[] = {
    {"llama", 0, 0, 0, 0, 0, 0, 0, 0},   {"qwen2", 1, 0, 0, 0, 0, 0, 0, 0},
    {"qwen3", 0, 1, 0, 0, 0, 0, 0, 0},   {"gemma2", 0, 0, 1, 1, 0, 1, 50.0f, 30.0f},
    {"gemma3", 0, 1, 1, 1, 0, 1, 0, 0},  {"phi3", 0, 0, 0, 0, 1, 0, 0, 0},
    {"granite", 0, 0, 0, 0, 0, 0, 0, 0}, {"smollm3", 0, 0, 0, 0, 0, 0, 0, 0},
};

int model_gen_arch_known(const char *name)
{
    for (size_t i = 0; i < sizeof(gen_archs) / sizeof(gen_archs[0]); i++)
        if (strcmp(gen_archs[i].name, name) == 0)
            return 1;
    return 0;
}

static const struct gen_arch *arch_of(const char *name)
{
    for (size_t i = 0; i < sizeof(gen_archs) / sizeof(gen_archs[0]); i++)
        if (strcmp(gen_archs[i].name, name) == 0)
            return &gen_archs[i];
    return NULL;
}

static int write_meta(struct gguf_writer *w, const struct model_gen_opts *o,
                      const struct gen_arch *a, int head_dim)
{
    const char *arch = o->arch_written ? o->arch_written : a->name;
    char k[128], name[128];
    int rc = 0, window = o->window ? o->window : a->gemma ? 4096 : 0;

    snprintf(name, sizeof(name), "kiln random %s %dx%d %s", arch, o->dim, o->layers,
             o->quant ? o->quant : quant_type_name(o->type));
    rc = gguf_write_str(w, "general.architecture", arch);
    rc = rc ? rc : gguf_write_str(w, "general.name", name);
#define KEY(key) snprintf(k, sizeof(k), "%s.%s", arch, key)
#define SKIP(key) (o->omit_key && strcmp(o->omit_key, key) == 0)
#define U32(key, v) (KEY(key), rc = rc || SKIP(key) ? rc : gguf_write_u32(w, k, (uint32_t)(v)))
#define F32(key, v) (KEY(key), rc = rc || SKIP(key) ? rc : gguf_write_f32(w, k, (float)(v)))
    U32("context_length", o->ctx);
    U32("embedding_length", o->dim);
    U32("block_count", o->layers);
    U32("feed_forward_length", o->ffn);
    U32("attention.head_count", o->heads);
    U32("attention.head_count_kv", o->kv_heads);
    U32("rope.dimension_count", head_dim);
    if (head_dim != o->dim / o->heads || a->gemma) {
        U32("attention.key_length", head_dim);
        U32("attention.value_length", head_dim);
    }
    if (window)
        U32("attention.sliding_window", window);
    F32("attention.layer_norm_rms_epsilon", a->gemma ? 1e-6f : 1e-5f);
    F32("rope.freq_base", strcmp(a->name, "gemma3") == 0 ? 1000000.0f : 10000.0f);
    if (a->softcap_attn > 0.0f) {
        F32("attn_logit_softcapping", a->softcap_attn);
        F32("final_logit_softcapping", a->softcap_final);
    }
    if (strcmp(a->name, "granite") == 0) {
        F32("embedding_scale", 12.0f);
        F32("residual_scale", 0.22f);
        F32("attention.scale", 0.015625f);
        F32("logit_scale", 2.0f);
    }
    if (o->rope_scaling && strcmp(o->rope_scaling, "yarn") == 0) {
        KEY("rope.scaling.type");
        rc = rc ? rc : gguf_write_str(w, k, "yarn");
        F32("rope.scaling.factor", 4.0f);
        U32("rope.scaling.original_context_length", o->ctx / 4);
    } else if (o->rope_scaling && strcmp(o->rope_scaling, "linear") == 0) {
        KEY("rope.scaling.type");
        rc = rc ? rc : gguf_write_str(w, k, "linear");
        F32("rope.scaling.factor", 2.0f);
    } else if (o->rope_scaling && strcmp(o->rope_scaling, "longrope") == 0) {
        U32("rope.scaling.original_context_length", o->ctx / 4);
        F32("rope.scaling.attn_factor", sqrtf(1.0f + logf(4.0f) / logf((float)(o->ctx / 4))));
    }
#undef F32
#undef U32
#undef SKIP
#undef KEY
    return rc;
}

/* A norm's weights: 1, or on peaked models 1 + N(0, 0.1^2), so that a norm applied wrongly
 * (or as 1 + w) shows in the logits the oracle compares. */
static int add_norm(struct gguf_writer *w, const struct model_gen_opts *o, const char *name,
                    int n)
{
    return add_tensor(w, o, name, 0, n, GGML_TYPE_F32, o->peak > 0.0f ? 0.1f : 0.0f, 1.0f);
}

int model_gen_write(const struct model_gen_opts *o, const char *path, char *err,
                    size_t errlen)
{
    const struct gen_arch *a = arch_of(o->arch ? o->arch : "llama");
    int n_vocab = o->n_vocab;
    struct gguf_writer *w;
    char name[96];
    int rc;

    if (errlen)
        err[0] = '\0';
    if (!a) {
        snprintf(err, errlen, "unknown architecture %s", o->arch);
        return -EINVAL;
    }
    int head_dim = o->head_dim ? o->head_dim : o->heads > 0 ? o->dim / o->heads : 0;
    if (o->dim <= 0 || o->heads <= 0 || o->kv_heads <= 0 || o->layers <= 0 || o->ffn <= 0 ||
        o->ctx <= 0 || head_dim <= 0 || head_dim % 2 || (!o->head_dim && o->dim % o->heads) ||
        o->heads % o->kv_heads || !quant_type_supported(o->type)) {
        snprintf(err, errlen, "bad model shape or type");
        return -EINVAL;
    }
    if (o->quant && (model_gen_quant_base(o->quant) == GGML_TYPE_COUNT || o->dim % 32 ||
                     o->ffn % 32)) {
        snprintf(err, errlen, "unknown quantization preset %s, or dim %d / ffn %d not multiples "
                 "of 32", o->quant, o->dim, o->ffn);
        return -EINVAL;
    }
    int q_dim = head_dim * o->heads, kv_dim = head_dim * o->kv_heads;
    if (!o->quant && (!quant_row_bytes(o->type, o->dim) || !quant_row_bytes(o->type, o->ffn) ||
                      !quant_row_bytes(o->type, q_dim))) {
        snprintf(err, errlen, "dim %d, ffn %d and q_dim %d must be multiples of the %s block of %d",
                 o->dim, o->ffn, q_dim, quant_type_name(o->type), quant_block_elems(o->type));
        return -EINVAL;
    }
    if (!(w = gguf_writer_create(3))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    float sd = 1.0f / sqrtf((float)o->dim), sf = 1.0f / sqrtf((float)o->ffn);
    float sq = 1.0f / sqrtf((float)q_dim);
    int tied = o->tied || a->tied;
    /* logits ~ N(0, peak^2) from a normed row: output rows of standard deviation
     * peak / sqrt(dim); a tied embedding is that matrix (gemma scales its rows back up) */
    float s_out = (o->peak > 0.0f ? o->peak : 1.0f) * sd;
    if ((rc = write_meta(w, o, a, head_dim)) < 0)
        goto fail;
    if (o->vocab_path)
        rc = copy_vocab(w, o->vocab_path, &n_vocab, err, errlen);
    else
        rc = synth_vocab(w, n_vocab > 261 ? n_vocab : (n_vocab = 512), a->fused);
    if (rc < 0)
        goto fail;
    if ((rc = add_tensor(w, o, "token_embd.weight", n_vocab, o->dim, o->type,
                         tied && (o->peak > 0.0f || a->gemma) ? s_out : 1.0f, 0)) < 0 ||
        (rc = add_norm(w, o, "output_norm.weight", o->dim)) < 0)
        goto fail;
    if (!tied && (rc = add_tensor(w, o, "output.weight", n_vocab, o->dim, o->type, s_out, 0)) < 0)
        goto fail;
    if (a->fused && o->rope_scaling && strcmp(o->rope_scaling, "longrope") == 0) {
        /* per-frequency divisors: 1 at high frequencies up to about 4 at the lowest */
        if ((rc = add_tensor(w, o, "rope_factors_short.weight", 0, head_dim / 2, GGML_TYPE_F32,
                             0.05f, 1.0f)) < 0 ||
            (rc = add_tensor(w, o, "rope_factors_long.weight", 0, head_dim / 2, GGML_TYPE_F32,
                             0.5f, 3.0f)) < 0)
            goto fail;
    }
    for (int l = 0; l < o->layers; l++) {
        struct {
            const char *n;
            int rows, cols;
            float std;
        } t[8];
        int nt = 0;
#define T(n_, r_, c_, s_) (t[nt].n = n_, t[nt].rows = r_, t[nt].cols = c_, t[nt++].std = s_)
        if (a->fused) {
            T("attn_qkv.weight", q_dim + 2 * kv_dim, o->dim, sd);
        } else {
            T("attn_q.weight", q_dim, o->dim, sd);
            T("attn_k.weight", kv_dim, o->dim, sd);
            T("attn_v.weight", kv_dim, o->dim, sd);
        }
        T("attn_output.weight", o->dim, q_dim, sq);
        if (a->fused) {
            T("ffn_up.weight", 2 * o->ffn, o->dim, sd);
        } else {
            T("ffn_gate.weight", o->ffn, o->dim, sd);
            T("ffn_up.weight", o->ffn, o->dim, sd);
        }
        T("ffn_down.weight", o->dim, o->ffn, sf);
#undef T
        for (int i = 0; i < nt; i++) {
            snprintf(name, sizeof(name), "blk.%d.%s", l, t[i].n);
            if ((rc = add_tensor(w, o, name, t[i].rows, t[i].cols, o->type, t[i].std, 0)) < 0)
                goto fail;
        }
        static const char *const norms[] = {"attn_norm", "ffn_norm", "post_attention_norm",
                                            "post_ffw_norm"};
        for (int i = 0; i < (a->post_norms ? 4 : 2); i++) {
            snprintf(name, sizeof(name), "blk.%d.%s.weight", l, norms[i]);
            if ((rc = add_norm(w, o, name, o->dim)) < 0)
                goto fail;
        }
        for (int i = 0; a->qk_norm && i < 2; i++) {
            snprintf(name, sizeof(name), "blk.%d.attn_%c_norm.weight", l, "qk"[i]);
            if ((rc = add_norm(w, o, name, head_dim)) < 0)
                goto fail;
        }
        for (int b = 0; a->bias && b < 3; b++) {
            snprintf(name, sizeof(name), "blk.%d.attn_%c.bias", l, "qkv"[b]);
            if ((rc = add_tensor(w, o, name, 0, b ? kv_dim : q_dim, GGML_TYPE_F32, 0.1f, 0)) < 0)
                goto fail;
        }
        if (o->verbose)
            fprintf(stderr, "\rmodel_gen: layer %d/%d", l + 1, o->layers);
    }
    if (o->verbose)
        fprintf(stderr, "\n");
    if ((rc = gguf_writer_write_file(w, path)) < 0)
        snprintf(err, errlen, "%s: %s", path, strerror(-rc));
    gguf_writer_destroy(w);
    return rc;
fail:
    if (!err[0] || rc == -ENOMEM)
        snprintf(err, errlen, "cannot build the model: %s", strerror(-rc));
    gguf_writer_destroy(w);
    return rc;
}
