/* Loading a Llama-family GGUF: the config from {arch}.* keys, every tensor found and checked
 * (type and shape, each named in the error), the EOS ids from the tokenizer, and every
 * buffer the forward pass will use, allocated once. No arithmetic here. */
#include "model_llama.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn_kern.h"
#include "log.h"
#include "model_llama_impl.h"
#include "model_info.h"
#include "quant.h"
#include "threadpool.h"
#include "tokenizer.h"

#define msg model_llama_msg

static int key_u32(const struct gguf *g, const char *arch, const char *key, bool required,
                   uint32_t *out, char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    int rc = gguf_get_u32(g, full, out);
    if (rc == -ENOENT && !required)
        return 0;
    if (rc < 0)
        msg(err, errlen, "%s: %s model: %s key %s", g->path, arch,
            rc == -ENOENT ? "missing" : "bad type of",
            full);
    return rc;
}

static int key_f32(const struct gguf *g, const char *arch, const char *key, float *out,
                   char *err, size_t errlen)
{
    char full[128];
    snprintf(full, sizeof(full), "%s.%s", arch, key);
    int rc = gguf_get_f32(g, full, out);
    if (rc == -ENOENT)
        return 0; /* keep the default */
    if (rc < 0)
        msg(err, errlen, "%s: bad type of key %s", g->path, full);
    return rc;
}

static int read_config(struct llama *L, char *err, size_t errlen)
{
    const struct gguf *g = L->g;
    struct llama_config *c = &L->c;
    struct gguf_str s;
    uint32_t v[8] = {0};
    int rc;

    if (gguf_get_str(g, "general.architecture", &s) < 0) {
        msg(err, errlen, "%s: no general.architecture: not a model file", g->path);
        return -EINVAL;
    }
    if (g->n_tensors == 0) {
        msg(err, errlen, "%s: no tensors: not a model file (a vocabulary-only GGUF?)", g->path);
        return -EINVAL;
    }
    if (!(c->a = llama_arch_find(s.ptr, s.len))) {
        msg(err, errlen, "%s: architecture '%.*s' is not supported (%s)", g->path,
            (int)(s.len < 32 ? s.len : 32), s.ptr, llama_arch_names());
        return -EINVAL;
    }
    snprintf(c->arch, sizeof(c->arch), "%.*s", (int)s.len, s.ptr);
    static const char *const req[] = {"context_length", "embedding_length", "block_count",
                                      "feed_forward_length", "attention.head_count"};
    for (int i = 0; i < 5; i++)
        if ((rc = key_u32(g, c->arch, req[i], true, &v[i], err, errlen)) < 0)
            return rc;
    v[5] = v[4]; /* head_count_kv defaults to head_count */
    if ((rc = key_u32(g, c->arch, "attention.head_count_kv", false, &v[5], err, errlen)) < 0)
        return rc;
    c->train_ctx = v[0];
    c->dim = (int)v[1];
    c->n_layers = (int)v[2];
    c->ffn = (int)v[3];
    c->n_heads = (int)v[4];
    c->n_kv_heads = (int)v[5];
    if (!c->dim || c->dim > MAX_DIM || !c->n_layers || c->n_layers > 4096 || !c->ffn ||
        c->ffn > MAX_DIM || !c->n_heads || !c->n_kv_heads || c->n_heads % c->n_kv_heads ||
        !c->train_ctx) {
        msg(err, errlen,
            "%s: inconsistent config: dim %d, layers %d, ffn %d, heads %d, kv heads %d, "
            "context %u",
            g->path, c->dim, c->n_layers, c->ffn, c->n_heads, c->n_kv_heads, c->train_ctx);
        return -EINVAL;
    }
    /* attention.key_length/value_length: the head size, where it is not dim / heads */
    uint32_t kl = (uint32_t)(c->dim / c->n_heads), vl, rot;
    if ((rc = key_u32(g, c->arch, "attention.key_length", false, &kl, err, errlen)) < 0)
        return rc;
    vl = kl;
    if ((rc = key_u32(g, c->arch, "attention.value_length", false, &vl, err, errlen)) < 0)
        return rc;
    if (kl == 0 || kl > 4096 || kl % 2 || (kl == (uint32_t)(c->dim / c->n_heads) &&
                                            c->dim % c->n_heads)) {
        msg(err, errlen, "%s: %s model: bad head size %u (attention.key_length)", g->path,
            c->arch, kl);
        return -EINVAL;
    }
    if (vl != kl) {
        msg(err, errlen, "%s: %s model: attention.value_length %u differs from key_length %u",
            g->path, c->arch, vl, kl);
        return -ENOTSUP;
    }
    c->head_dim = (int)kl;
    c->q_dim = c->n_heads * c->head_dim;
    c->kv_dim = c->n_kv_heads * c->head_dim;
    rot = (uint32_t)c->head_dim;
    if ((rc = key_u32(g, c->arch, "rope.dimension_count", false, &rot, err, errlen)) < 0)
        return rc;
    if (rot == 0 || rot > (uint32_t)c->head_dim || rot % 2) {
        msg(err, errlen, "%s: rope.dimension_count %u does not fit head size %d", g->path, rot,
            c->head_dim);
        return -EINVAL;
    }
    c->n_rot = (int)rot;
    c->eps = 1e-5f;
    if ((rc = key_f32(g, c->arch, "attention.layer_norm_rms_epsilon", &c->eps, err, errlen)) <
            0 ||
        (rc = llama_arch_config(c, g, err, errlen)) < 0)
        return rc;
    const struct gguf_kv *tok = gguf_find(g, "tokenizer.ggml.tokens");
    if (!tok || tok->type != GGUF_TYPE_ARRAY || tok->arr_type != GGUF_TYPE_STRING ||
        tok->arr_n == 0 || tok->arr_n > (1u << 24)) {
        msg(err, errlen, "%s: no tokenizer.ggml.tokens vocabulary", g->path);
        return -EINVAL;
    }
    c->n_vocab = (int)tok->arr_n;
    return 0;
}

static const struct gguf_tensor *find(struct llama *L, const char *name, bool optional,
                                      char *err, size_t errlen)
{
    const struct gguf_tensor *t = gguf_find_tensor(L->g, name);
    if (!t && !optional)
        msg(err, errlen, "%s: %s model: missing tensor %s", L->g->path, L->c.arch, name);
    return t;
}

/* A weight matrix of rows x cols (GGUF ne = [cols, rows]). */
static int get_mat(struct llama *L, const char *name, int rows, int cols, struct kern_mat *m,
                   char *err, size_t errlen)
{
    const struct gguf_tensor *t = find(L, name, false, err, errlen);
    if (!t)
        return -ENOENT;
    if (t->type == GGML_TYPE_Q8_K || !quant_type_supported(t->type) ||
        kern_act_type(t->type) == GGML_TYPE_COUNT) {
        const char *tn = ggml_type_name(t->type);
        msg(err, errlen,
            "%s: tensor %s has type %s, which kiln does not run (F32, F16, BF16, Q8_0, Q4_0, "
            "Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)",
            L->g->path, name, tn ? tn : "unknown");
        return -ENOTSUP;
    }
    if (t->n_dims != 2 || t->ne[0] != (uint64_t)cols || t->ne[1] != (uint64_t)rows) {
        msg(err, errlen, "%s: tensor %s has shape [%llu, %llu], expected [%d, %d] for this config",
            L->g->path, name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], cols,
            rows);
        return -EINVAL;
    }
    size_t rb = quant_row_bytes(t->type, cols);
    if (rb == 0 || kern_act_bytes(t->type, cols) == 0 || t->nbytes < rb * (size_t)rows) {
        msg(err, errlen, "%s: tensor %s: %d columns do not fit %s blocks", L->g->path, name,
            cols, quant_type_name(t->type));
        return -EINVAL;
    }
    m->type = t->type;
    m->data = t->data;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = rb;
    size_t ab = kern_act_bytes(t->type, cols);
    if (ab > L->act_row)
        L->act_row = ab;
    return 0;
}

/* A vector of n floats: F32 in place, F16/BF16 decoded into the arena. */
static int get_vec(struct llama *L, const char *name, int n, bool optional, const float **out,
                   char *err, size_t errlen)
{
    const struct gguf_tensor *t = find(L, name, optional, err, errlen);
    *out = NULL;
    if (!t)
        return optional ? 0 : -ENOENT;
    if (t->n_dims != 1 || t->ne[0] != (uint64_t)n) {
        msg(err, errlen, "%s: tensor %s has %u dims of %llu, expected [%d]", L->g->path, name,
            t->n_dims, (unsigned long long)t->ne[0], n);
        return -EINVAL;
    }
    if (t->type == GGML_TYPE_F32) {
        *out = t->data;
        return 0;
    }
    if ((t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16) ||
        L->vec_used + (size_t)n > L->vec_cap) {
        msg(err, errlen, "%s: tensor %s has type %s (a norm or bias must be F32, F16 or BF16)",
            L->g->path, name, ggml_type_name(t->type) ? ggml_type_name(t->type) : "unknown");
        return -ENOTSUP;
    }
    float *dst = L->vec_arena + L->vec_used;
    (void)quant_dequantize_row(t->type, t->data, dst, n);
    L->vec_used += (size_t)n;
    *out = dst;
    return 0;
}

/* Rows [r0, r0 + rows) of a matrix as a matrix of their own (a fused tensor's parts). */
static struct kern_mat mat_rows(const struct kern_mat *m, int r0, int rows)
{
    struct kern_mat v = *m;
    v.data = (const char *)m->data + (size_t)r0 * m->row_bytes;
    v.rows = rows;
    return v;
}

static int read_layer(struct llama *L, int l, char *err, size_t errlen)
{
    const struct llama_config *c = &L->c;
    const struct llama_arch *a = c->a;
    struct llama_layer *ly = &L->layers[l];
    struct kern_mat qkv, gu;
    char name[96];
    int rc;

#define NAME(s) snprintf(name, sizeof(name), "blk.%d.%s", l, s)
    if (a->fused) {
        /* phi3: one Q|K|V matrix, and ffn_up holding the gate's rows then the up's */
        NAME("attn_qkv.weight");
        if ((rc = get_mat(L, name, c->q_dim + 2 * c->kv_dim, c->dim, &qkv, err, errlen)) < 0)
            return rc;
        ly->wq = mat_rows(&qkv, 0, c->q_dim);
        ly->wk = mat_rows(&qkv, c->q_dim, c->kv_dim);
        ly->wv = mat_rows(&qkv, c->q_dim + c->kv_dim, c->kv_dim);
        NAME("ffn_up.weight");
        if ((rc = get_mat(L, name, 2 * c->ffn, c->dim, &gu, err, errlen)) < 0)
            return rc;
        ly->w_gate = mat_rows(&gu, 0, c->ffn);
        ly->w_up = mat_rows(&gu, c->ffn, c->ffn);
    }
    const struct {
        const char *n;
        struct kern_mat *m;
        int rows, cols, split;
    } mats[] = {
        {"attn_q", &ly->wq, c->q_dim, c->dim, 1},     {"attn_k", &ly->wk, c->kv_dim, c->dim, 1},
        {"attn_v", &ly->wv, c->kv_dim, c->dim, 1},    {"attn_output", &ly->wo, c->dim, c->q_dim, 0},
        {"ffn_gate", &ly->w_gate, c->ffn, c->dim, 1}, {"ffn_up", &ly->w_up, c->ffn, c->dim, 1},
        {"ffn_down", &ly->w_down, c->dim, c->ffn, 0},
    };
    for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) {
        if (!(a->fused && mats[i].split)) {
            snprintf(name, sizeof(name), "blk.%d.%s.weight", l, mats[i].n);
            if ((rc = get_mat(L, name, mats[i].rows, mats[i].cols, mats[i].m, err, errlen)) < 0)
                return rc;
        }
        L->weight_bytes += mats[i].m->row_bytes * (uint64_t)mats[i].rows;
    }
    const struct {
        const char *n;
        const float **v;
        int len, want;
    } vecs[] = {
        {"attn_norm.weight", &ly->attn_norm, c->dim, 1},
        {"ffn_norm.weight", &ly->ffn_norm, c->dim, 1},
        {"post_attention_norm.weight", &ly->post_attn_norm, c->dim, a->post_norms},
        {"post_ffw_norm.weight", &ly->post_ffn_norm, c->dim, a->post_norms},
        {"attn_q_norm.weight", &ly->q_norm, c->head_dim, a->qk_norm},
        {"attn_k_norm.weight", &ly->k_norm, c->head_dim, a->qk_norm},
        /* biases: required in qwen2, used where another architecture's file has them */
        {"attn_q.bias", &ly->bq, c->q_dim, c->qkv_bias ? 1 : 2},
        {"attn_k.bias", &ly->bk, c->kv_dim, c->qkv_bias ? 1 : 2},
        {"attn_v.bias", &ly->bv, c->kv_dim, c->qkv_bias ? 1 : 2},
    };
    for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) {
        if (vecs[i].want == 0)
            continue;
        NAME(vecs[i].n);
        if ((rc = get_vec(L, name, vecs[i].len, vecs[i].want == 2, vecs[i].v, err, errlen)) < 0)
            return rc;
    }
    if (!ly->bq != !ly->bk || !ly->bq != !ly->bv) {
        msg(err, errlen, "%s: layer %d has some but not all of the Q, K, V biases", L->g->path, l);
        return -EINVAL;
    }
#undef NAME
    return 0;
}

static int read_weights(struct llama *L, char *err, size_t errlen)
{
    struct llama_config *c = &L->c;
    int rc;

    L->vec_cap = (size_t)c->n_layers * (4u * c->dim + c->q_dim + 2u * c->kv_dim +
                                        2u * c->head_dim) +
                 c->dim + 2u * (size_t)c->n_rot;
    L->layers = calloc((size_t)c->n_layers, sizeof(*L->layers));
    L->vec_arena = malloc(L->vec_cap * sizeof(float));
    if (!L->layers || !L->vec_arena) {
        msg(err, errlen, "out of memory");
        return -ENOMEM;
    }
    if ((rc = get_mat(L, "token_embd.weight", c->n_vocab, c->dim, &L->tok_embd, err, errlen)) <
            0 ||
        (rc = get_vec(L, "output_norm.weight", c->dim, false, &L->output_norm, err, errlen)) < 0)
        return rc;
    if (c->a->fused) {
        /* LongRoPE: the long factors past the original context, the short ones within */
        uint32_t orig = c->train_ctx;
        char key[96];
        snprintf(key, sizeof(key), "%s.rope.scaling.original_context_length", c->arch);
        (void)gguf_get_u32(L->g, key, &orig);
        const char *fac = L->ctx > orig ? "rope_factors_long.weight" : "rope_factors_short.weight";
        if ((rc = get_vec(L, fac, c->n_rot / 2, true, &c->rope[0].factors, err, errlen)) < 0)
            return rc;
    } else if ((rc = get_vec(L, "rope_freqs.weight", c->n_rot / 2, true, &c->rope[0].factors,
                             err, errlen)) < 0) {
        /* Llama 3.1/3.2 files carry their RoPE scaling as per-frequency factors */
        return rc;
    }
    if (gguf_find_tensor(L->g, "output.weight")) {
        if ((rc = get_mat(L, "output.weight", c->n_vocab, c->dim, &L->output, err, errlen)) < 0)
            return rc;
    } else {
        L->output = L->tok_embd; /* tied embeddings */
    }
    L->weight_bytes = L->output.row_bytes * (uint64_t)c->n_vocab + L->tok_embd.row_bytes;
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = read_layer(L, l, err, errlen)) < 0)
            return rc;
    llama_arch_layers(c, L->layers);
    return 0;
}

static void read_eos(struct llama *L)
{
    char terr[256];
    struct tokenizer *t = tokenizer_create_gguf(L->g, terr, sizeof(terr));
    uint32_t id;

    L->base.n_eos = 0;
    if (t) {
        const uint32_t *ids;
        size_t n = tokenizer_eog_ids(t, &ids);
        for (size_t i = 0; i < n && L->base.n_eos < 16; i++)
            if (ids[i] < (uint32_t)L->c.n_vocab)
                L->base.eos[L->base.n_eos++] = ids[i];
        tokenizer_destroy(t);
    } else if (gguf_get_u32(L->g, "tokenizer.ggml.eos_token_id", &id) == 0 &&
               id < (uint32_t)L->c.n_vocab) {
        L->base.eos[L->base.n_eos++] = id; /* a tokenizer kiln cannot run: EOS alone */
    }
}

static uint32_t choose_ctx(const struct llama *L, const struct model_llama_opts *o,
                           uint32_t max_seq)
{
    const struct llama_config *c = &L->c;

    if (o->ctx)
        return o->ctx < c->train_ctx ? o->ctx : c->train_ctx;
    /* the front resolves the same default (model_info.h), so both agree */
    return model_info_default_ctx(c->train_ctx,
                                  model_info_kv_bytes((uint32_t)c->n_layers, (uint32_t)c->kv_dim),
                                  max_seq, o->kv_budget);
}

static int alloc_state(struct llama *L, uint32_t max_seq, char *err, size_t errlen)
{
    const struct llama_config *c = &L->c;
    size_t nb = (size_t)L->nb, kv = (size_t)L->kv_blocks * (size_t)c->n_layers * KV_BLOCK * c->kv_dim;
    bool ok = true;
    int kerr = 0;

#define ALLOC(p, n) ok = ok && ((p) = calloc((n), sizeof(*(p)))) != NULL
    ALLOC(L->kv_k, kv);
    ALLOC(L->kv_v, kv);
    ALLOC(L->begun, max_seq);
    ok = ok && (L->kvc = kv_cache_create(L->kv_blocks, max_seq, L->ctx, &kerr)) != NULL;
    ALLOC(L->mark, max_seq);
    ALLOC(L->x, nb * c->dim);
    ALLOC(L->xb, nb * c->dim);
    ALLOC(L->q, nb * c->q_dim);
    ALLOC(L->ao, nb * c->q_dim);
    ALLOC(L->kk, nb * c->kv_dim);
    ALLOC(L->vv, nb * c->kv_dim);
    ALLOC(L->hb, nb * c->ffn);
    ALLOC(L->hb2, nb * c->ffn);
    ALLOC(L->cs, (size_t)c->n_rope * nb * c->n_rot);
    ALLOC(L->row_slot, nb);
    ALLOC(L->row_pos, nb);
    ALLOC(L->row_of, nb);
    ALLOC(L->seg_seq, nb);
    ALLOC(L->seg_row, nb);
    ALLOC(L->seg_len, nb);
    ALLOC(L->tile_r0, nb);
    ALLOC(L->tile_n, nb);
    L->attn_scratch_per = llama_attn_scratch(c, L->ctx);
    ALLOC(L->attn_scratch, (size_t)L->n_threads * L->attn_scratch_per);
    ALLOC(L->row_tok, nb);
    for (int i = 0; i < MAX_MM_JOBS; i++)
        ok = ok && (L->act[i] = malloc(nb * L->act_row + 64)) != NULL;
#undef ALLOC
    if (!ok) {
        msg(err, errlen, "%s: out of memory for the KV cache (%.1f MiB) and scratch", L->g->path,
            (double)kv * 4.0 / (1 << 20));
        return -ENOMEM;
    }
    return 0;
}

struct model *model_llama_create(const char *path, const struct model_llama_opts *o, char *err,
                                 size_t errlen)
{
    struct llama *L = calloc(1, sizeof(*L));
    uint32_t max_seq = o->max_sequences ? o->max_sequences : 1;
    struct gguf_str name;

    if (!L) {
        msg(err, errlen, "out of memory");
        return NULL;
    }
    L->base.ops = &model_llama_ops;
    if (!o->quiet)
        log_info("model %s: opening", path);
    if (!(L->g = gguf_open(path, err, errlen)))
        goto fail;
    if (read_config(L, err, errlen) < 0)
        goto fail;
    L->ctx = choose_ctx(L, o, max_seq); /* before the weights: LongRoPE's factors follow it */
    if (read_weights(L, err, errlen) < 0)
        goto fail;
    if (!(L->k = o->kernels ? o->kernels : kern_ops_select())) {
        msg(err, errlen, "KILN_KERNELS names a kernel set this CPU cannot run");
        goto fail;
    }
    L->n_threads = o->threads > 0 ? o->threads : 1;
    {
        /* default: every slot its whole context, as before the cache was paged */
        uint64_t per_seq = (L->ctx + KV_BLOCK - 1) / KV_BLOCK;
        uint64_t blocks = o->kv_tokens ? (o->kv_tokens + KV_BLOCK - 1) / KV_BLOCK
                                       : (uint64_t)max_seq * per_seq;
        L->kv_blocks = blocks > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)blocks;
    }
    L->nb = max_seq > MODEL_LLAMA_CHUNK ? (int)max_seq : MODEL_LLAMA_CHUNK;
    if (alloc_state(L, max_seq, err, errlen) < 0)
        goto fail;
    L->attn_kern = attn_kern_for(L->k->name);
    L->decode_shared = L->k->rows_agree(L->output.type);
    for (int l = 0; l < L->c.n_layers; l++) {
        const struct llama_layer *ly = &L->layers[l];
        const struct kern_mat *ms[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo,
                                       &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
            L->decode_shared = L->decode_shared && L->k->rows_agree(ms[i]->type);
    }
    if (!(L->pool = threadpool_create(L->n_threads))) {
        msg(err, errlen, "cannot start %d threads: %s", L->n_threads, strerror(errno));
        goto fail;
    }
    read_eos(L);
    if (gguf_get_str(L->g, "general.name", &name) == 0)
        snprintf(L->base.name, sizeof(L->base.name), "%.*s", (int)(name.len < 127 ? name.len : 127),
                 name.ptr);
    else
        snprintf(L->base.name, sizeof(L->base.name), "%s",
                 strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    L->base.max_context = L->ctx;
    L->base.max_sequences = max_seq;
    L->base.n_vocab = (uint32_t)L->c.n_vocab;
    if (!o->quiet) {
        log_info("model %s: %s, dim %d, %d layers, %d/%d heads, ffn %d, vocab %d, "
                 "%.1f MiB of weights per token",
                 L->base.name, L->c.arch, L->c.dim, L->c.n_layers, L->c.n_heads,
                 L->c.n_kv_heads, L->c.ffn, L->c.n_vocab, (double)L->weight_bytes / (1 << 20));
        log_info("model %s: context %u, %u sequences sharing a KV cache of %u positions "
                 "(%u blocks of %d, %.1f MiB, F16), %d threads, %s kernels",
                 L->base.name, L->ctx, max_seq, L->kv_blocks * KV_BLOCK, L->kv_blocks, KV_BLOCK,
                 4.0 * L->kv_blocks * KV_BLOCK * L->c.n_layers * (double)L->c.kv_dim / (1 << 20),
                 L->n_threads, L->k->name);
    }
    return &L->base;
fail:
    model_llama_free(&L->base);
    return NULL;
}
