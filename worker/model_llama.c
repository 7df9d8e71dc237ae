/* The Llama-family forward pass over a mapped GGUF: config and weights read and checked at
 * load, then a batched forward over rows of (slot, position, token) that serves both the
 * prefill chunks and the decode steps. No sampling here, no tokenizing beyond the EOS ids. */
#include "model_llama.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "quant.h"
#include "threadpool.h"
#include "model_llama_impl.h"

void model_llama_msg(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- the forward pass ---------------------------------------------------------------- */

static void mm_task(void *ctx, int task, int thread)
{
    struct llama *L = ctx;
    struct mm_job *j = L->jobs;
    (void)thread;
    while (task >= j->n_tasks) {
        task -= j->n_tasks;
        j++;
    }
    int r0 = task * j->rows_per_task;
    int r1 = r0 + j->rows_per_task < j->W->rows ? r0 + j->rows_per_task : j->W->rows;
    (j->gemm ? L->k->gemm : L->k->matmul)(j->W, &j->X, j->n_seq, j->Y, j->y_stride, r0, r1);
}

/* Activation formats kiln quantizes into, one buffer each: bit 0 Q8_0 (act[0]), bit 1 Q8_K
 * (act[1]); float weights read the floats themselves. */
#define NEED_Q8_0 1u
#define NEED_Q8_K 2u

static unsigned act_need(const struct kern_mat *W)
{
    enum ggml_type at = kern_act_type(W->type);
    return at == GGML_TYPE_Q8_0 ? NEED_Q8_0 : at == GGML_TYPE_Q8_K ? NEED_Q8_K : 0;
}

/* A representative weight type per activation format, for kern_act_bytes/kern_quantize_act. */
static enum ggml_type act_wtype(unsigned bit)
{
    return bit == NEED_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_K;
}

/* Quantizes row b of an input (cols floats) into each format of need, at row b of its
 * buffer. Runs inside the per-row pool tasks, so activation quantization is spread over the
 * threads with the norms and residual adds. */
static void quant_in(struct llama *L, const float *src, int cols, int b, unsigned need)
{
    for (unsigned bit = NEED_Q8_0; bit <= NEED_Q8_K; bit <<= 1) {
        if (!(need & bit))
            continue;
        size_t stride = kern_act_bytes(act_wtype(bit), cols);
        (void)L->k->quantize_act(act_wtype(bit), src, cols,
                                (char *)L->act[bit == NEED_Q8_0 ? 0 : 1] + (size_t)b * stride);
    }
}

/* Job i of the next pool run: Y = W X over rows [r0, r0 + n) of the input, whose floats are
 * src (rows of W->cols) and whose quantized copies quant_in made. */
static void mm_set(struct llama *L, int i, const struct kern_mat *W, const float *src, float *Y,
                   int y_stride, int r0, int n)
{
    struct mm_job *j = &L->jobs[i];
    unsigned need = act_need(W);
    int cols = W->cols;

    j->W = W;
    j->gemm = L->prompt;
    j->n_seq = n;
    j->Y = Y;
    j->y_stride = y_stride ? y_stride : W->rows;
    j->X.type = kern_act_type(W->type);
    j->X.n = cols;
    if (!need) {
        j->X.stride = (size_t)cols * sizeof(float);
        j->X.data = src + (size_t)r0 * cols;
    } else {
        j->X.stride = kern_act_bytes(act_wtype(need), cols);
        j->X.data = (const char *)L->act[need == NEED_Q8_0 ? 0 : 1] + (size_t)r0 * j->X.stride;
    }
    /* rows split into about 4 tasks per thread, so a descheduled thread's share is taken up
     * by the others (one thread: one task, no other thread to take a share up, and each task
     * is a kernel call that sets up its activation's scales again); a multiple of 16 rows, so
     * the kernels' 4-row tiles divide it and no two tasks write one cache line of a Y row */
    int parts = L->n_threads > 1 ? L->n_threads * 4 : 1;
    j->rows_per_task = ((W->rows + parts - 1) / parts + 15) & ~15;
    j->n_tasks = (W->rows + j->rows_per_task - 1) / j->rows_per_task;
}

static void mm_go(struct llama *L, int n_jobs)
{
    int total = 0;
    for (int i = 0; i < n_jobs; i++)
        total += L->jobs[i].n_tasks;
    L->n_jobs = n_jobs;
    threadpool_run(L->pool, mm_task, L, total);
}

static size_t kv_index(const struct llama *L, int slot, int layer, int pos)
{
    return llama_kv_at(L, kv_cache_block(L->kvc, slot, (uint32_t)pos), layer, (uint32_t)pos % KV_BLOCK);
}

/* Row b: biases, per-head norms, RoPE at its position (the layer's table, or none), then its
 * K and V into the cache. */
static void rope_store_task(void *ctx, int b, int thread)
{
    struct llama *L = ctx;
    const struct llama_config *c = &L->c;
    const struct llama_layer *ly = &L->layers[L->layer];
    float *q = L->q + (size_t)b * c->q_dim;
    float *k = L->kk + (size_t)b * c->kv_dim, *v = L->vv + (size_t)b * c->kv_dim;
    size_t at = kv_index(L, L->row_slot[b], L->layer, L->row_pos[b]);
    (void)thread;

    if (ly->bq) {
        L->k->add(q, ly->bq, c->q_dim);
        L->k->add(k, ly->bk, c->kv_dim);
        L->k->add(v, ly->bv, c->kv_dim);
    }
    if (ly->q_norm) {
        for (int h = 0; h < c->n_heads; h++)
            L->k->rmsnorm(q + (size_t)h * c->head_dim, q + (size_t)h * c->head_dim, ly->q_norm,
                          c->head_dim, c->eps);
        for (int h = 0; h < c->n_kv_heads; h++)
            L->k->rmsnorm(k + (size_t)h * c->head_dim, k + (size_t)h * c->head_dim, ly->k_norm,
                          c->head_dim, c->eps);
    }
    if (ly->rope >= 0) {
        const float *cs = L->cs + ((size_t)ly->rope * L->nb + (size_t)b) * c->n_rot;
        kern_rope_apply(q, c->n_heads, c->head_dim, c->n_rot, cs, c->neox);
        kern_rope_apply(k, c->n_kv_heads, c->head_dim, c->n_rot, cs, c->neox);
    }
    kern_f32_to_f16(L->kv_k + at, k, c->kv_dim);
    kern_f32_to_f16(L->kv_v + at, v, c->kv_dim);
}

/* Row b of a block input: the residual add of the previous block's output (when add; that
 * output first normed by stage_post (gemma) and scaled by resid_scale (granite)), the norm
 * (weights norm_w) into xb, and its activation formats (need). */
static void block_in_task(void *ctx, int b, int thread)
{
    struct llama *L = ctx;
    int dim = L->c.dim;
    float *x = L->x + (size_t)b * dim, *xb = L->xb + (size_t)b * dim;
    (void)thread;
    if (L->stage_add) {
        if (L->stage_post)
            L->k->rmsnorm(xb, xb, L->stage_post, dim, L->c.eps);
        if (L->c.resid_scale != 1.0f)
            for (int i = 0; i < dim; i++)
                xb[i] *= L->c.resid_scale;
        L->k->add(x, xb, dim);
    }
    L->k->rmsnorm(xb, x, L->stage_norm, dim, L->c.eps);
    quant_in(L, xb, dim, b, L->stage_need);
}

static void attn_out_task(void *ctx, int b, int thread)
{
    struct llama *L = ctx;
    (void)thread;
    quant_in(L, L->ao + (size_t)b * L->c.q_dim, L->c.q_dim, b, L->stage_need);
}

/* GELU, tanh form: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), times up (gemma). */
static void geglu(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float x = gate[i];
        out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))) * up[i];
    }
}

static void swiglu_task(void *ctx, int b, int thread)
{
    struct llama *L = ctx;
    size_t off = (size_t)b * L->c.ffn;
    (void)thread;
    if (L->c.a->gelu)
        geglu(L->hb + off, L->hb + off, L->hb2 + off, L->c.ffn);
    else
        L->k->swiglu(L->hb + off, L->hb + off, L->hb2 + off, L->c.ffn);
    quant_in(L, L->hb + off, L->c.ffn, b, L->stage_need);
}

static void stage(struct llama *L, threadpool_fn fn, int n, int add, const float *post,
                  const float *norm, unsigned need)
{
    L->stage_add = add;
    L->stage_post = post;
    L->stage_norm = norm;
    L->stage_need = need;
    threadpool_run(L->pool, fn, L, n);
}

/* Runs n rows (row_tok, row_slot, row_pos) through every layer and the output norm; their
 * keys and values land in the cache, the normed rows are left in xb and quantized for the
 * output matrix. Each row's arithmetic depends on its own row and its own slot's cache
 * only. */
static void forward(struct llama *L, int n)
{
    const struct llama_config *c = &L->c;

    for (int b = 0; b < n; b++) {
        float *x = L->x + (size_t)b * c->dim;
        kern_get_row(L->tok_embd.type, L->tok_embd.data, L->tok_embd.row_bytes,
                     (int)L->row_tok[b], c->dim, x);
        if (c->embd_scale != 1.0f)
            for (int i = 0; i < c->dim; i++)
                x[i] *= c->embd_scale;
        for (int r = 0; r < c->n_rope; r++)
            llama_rope_table(&c->rope[r], c->n_rot, L->row_pos[b],
                             L->cs + ((size_t)r * L->nb + (size_t)b) * c->n_rot);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const struct llama_layer *ly = &L->layers[l];
        L->layer = l;

        stage(L, block_in_task, n, l > 0, l > 0 ? L->layers[l - 1].post_ffn_norm : NULL,
              ly->attn_norm, act_need(&ly->wq) | act_need(&ly->wk) | act_need(&ly->wv));
        mm_set(L, 0, &ly->wq, L->xb, L->q, 0, 0, n);
        mm_set(L, 1, &ly->wk, L->xb, L->kk, 0, 0, n);
        mm_set(L, 2, &ly->wv, L->xb, L->vv, 0, 0, n);
        mm_go(L, 3);
        threadpool_run(L->pool, rope_store_task, L, n);
        llama_attn_run(L, n);
        stage(L, attn_out_task, n, 0, NULL, NULL, act_need(&ly->wo));
        mm_set(L, 0, &ly->wo, L->ao, L->xb, 0, 0, n);
        mm_go(L, 1);

        stage(L, block_in_task, n, 1, ly->post_attn_norm, ly->ffn_norm,
              act_need(&ly->w_gate) | act_need(&ly->w_up));
        mm_set(L, 0, &ly->w_gate, L->xb, L->hb, 0, 0, n);
        mm_set(L, 1, &ly->w_up, L->xb, L->hb2, 0, 0, n);
        mm_go(L, 2);
        stage(L, swiglu_task, n, 0, NULL, NULL, act_need(&ly->w_down));
        mm_set(L, 0, &ly->w_down, L->hb, L->xb, 0, 0, n);
        mm_go(L, 1);

        if (L->base.heartbeat)
            L->base.heartbeat(L->base.heartbeat_ctx);
    }
    stage(L, block_in_task, n, 1, L->layers[c->n_layers - 1].post_ffn_norm, L->output_norm,
          act_need(&L->output));
}

/* Logits of rows [r0, r0 + n) of the last forward into dst, n_vocab apart: the output
 * matrix, then granite's divisor and gemma2's final soft-cap. */
static void logits_rows(struct llama *L, int r0, int n, float *dst)
{
    const struct llama_config *c = &L->c;
    mm_set(L, 0, &L->output, L->xb, dst, c->n_vocab, r0, n);
    mm_go(L, 1);
    if (c->logit_scale != 1.0f || c->softcap_final > 0.0f) {
        float inv = 1.0f / c->logit_scale, cap = c->softcap_final;
        for (size_t i = 0; i < (size_t)n * c->n_vocab; i++) {
            float v = dst[i] * inv;
            dst[i] = cap > 0.0f ? cap * tanhf(v / cap) : v;
        }
    }
}

/* ---- the interface ------------------------------------------------------------------- */

static int check_slot(struct llama *L, int slot, char *err, size_t errlen)
{
    if (slot < 0 || (uint32_t)slot >= L->base.max_sequences) {
        model_llama_msg(err, errlen, "slot %d out of range (%u sequences)", slot, L->base.max_sequences);
        return -EINVAL;
    }
    return 0;
}

static void llama_seq_free(struct model *m, int slot)
{
    struct llama *L = (struct llama *)m;
    if (slot >= 0 && (uint32_t)slot < m->max_sequences) {
        kv_cache_end(L->kvc, slot);
        L->begun[slot] = 0;
    }
}

static int llama_seq_begin(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                           uint32_t max_len, int reuse)
{
    struct llama *L = (struct llama *)m;
    struct kv_copy cp;
    int rc;

    if ((rc = check_slot(L, slot, m->error, sizeof(m->error))) < 0)
        return rc;
    if (n == 0 || n > L->ctx) {
        model_llama_msg(m->error, sizeof(m->error), "prompt of %u tokens: the context holds 1 to %u",
                        n, L->ctx);
        return n ? -ENOSPC : -EINVAL;
    }
    if (max_len > L->ctx)
        max_len = L->ctx;
    llama_seq_free(m, slot);
    rc = kv_cache_begin(L->kvc, slot, prompt, n, max_len, reuse != 0, &cp);
    for (int l = 0; rc >= 0 && cp.n && l < L->c.n_layers; l++) { /* a partial block's copy */
        size_t bytes = (size_t)cp.n * L->c.kv_dim * sizeof(uint16_t);
        memcpy(L->kv_k + llama_kv_at(L, cp.dst, l, 0), L->kv_k + llama_kv_at(L, cp.src, l, 0), bytes);
        memcpy(L->kv_v + llama_kv_at(L, cp.dst, l, 0), L->kv_v + llama_kv_at(L, cp.src, l, 0), bytes);
    }
    if (rc == -ENOSPC)
        model_llama_msg(m->error, sizeof(m->error),
                        "a sequence of up to %u positions needs %u KV blocks of %d; the cache "
                        "holds %u (--kv-cache-tokens)", max_len < n ? n : max_len,
                        ((max_len < n ? n : max_len) + KV_BLOCK - 1) / KV_BLOCK, KV_BLOCK,
                        L->kv_blocks);
    if (rc >= 0)
        L->begun[slot] = 1;
    return rc;
}

/* A prompt's checks before any work: the slot, its length and its tokens; then room in the
 * cache (seq_begin, reusing what it can) unless the caller claimed it. */
static int prefill_check(struct llama *L, int slot, const uint32_t *prompt, uint32_t n,
                         bool last, char *err, size_t errlen)
{
    int rc;

    if ((rc = check_slot(L, slot, err, errlen)) < 0)
        return rc;
    if (L->mark[slot] == L->stamp) {
        model_llama_msg(err, errlen, "slot %d twice in one prefill", slot);
        return -EINVAL;
    }
    if (n == 0) {
        model_llama_msg(err, errlen, "empty prompt");
        return -EINVAL;
    }
    if (n > L->ctx) {
        model_llama_msg(err, errlen, "prompt of %u tokens exceeds the context of %u", n, L->ctx);
        return -ENOSPC;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (prompt[i] >= (uint32_t)L->c.n_vocab) {
            model_llama_msg(err, errlen, "token %u out of range (vocabulary %d)", prompt[i],
                            L->c.n_vocab);
            return -EINVAL;
        }
    }
    if (!L->begun[slot]) { /* a caller that did not claim room: reuse what it can */
        if ((rc = llama_seq_begin(&L->base, slot, prompt, n, n, 1)) < 0) {
            model_llama_msg(err, errlen, "%s",
                            rc == -EAGAIN ? "the KV cache has no room now" : L->base.error);
            return rc;
        }
    }
    if (n <= kv_cache_len(L->kvc, slot)) {
        model_llama_msg(err, errlen, "slot %d holds %u positions already, the prompt %u", slot,
                        kv_cache_len(L->kvc, slot), n);
        return -EINVAL;
    }
    L->begun[slot] = !last; /* a part: the next part goes on from here */
    L->mark[slot] = L->stamp;
    return 0;
}

/* The prompts of count sequences packed together, MODEL_LLAMA_CHUNK rows per forward pass
 * (a pass holds the next rows of as many sequences as fit, each row attending to its own
 * sequence), each from what its slot holds up to ns[i]; the logits after position ns[i] - 1
 * go to row i of logits when last is NULL or last[i]. */
static int llama_prefill_part(struct model *m, const int *slots, const uint32_t *const *prompts,
                              const uint32_t *ns, const uint8_t *last, int count, float *logits,
                              struct model_result *res)
{
    struct llama *L = (struct llama *)m;
    int next = 0; /* the first sequence with rows left */

    L->stamp++;
    for (int i = 0; i < count; i++) {
        res[i].error[0] = '\0';
        res[i].status = prefill_check(L, slots[i], prompts[i], ns[i], !last || last[i],
                                      res[i].error, sizeof(res[i].error));
    }
    for (;;) {
        int rows = 0, segs = 0;

        while (next < count && (res[next].status < 0 ||
                                kv_cache_len(L->kvc, slots[next]) >= ns[next]))
            next++;
        if (next == count)
            break;
        for (int i = next; i < count && rows < MODEL_LLAMA_CHUNK; i++) {
            uint32_t at = kv_cache_len(L->kvc, slots[i]), len;
            if (res[i].status < 0 || at >= ns[i])
                continue;
            len = ns[i] - at;
            if (len > (uint32_t)(MODEL_LLAMA_CHUNK - rows))
                len = (uint32_t)(MODEL_LLAMA_CHUNK - rows);
            if (kv_cache_grow(L->kvc, slots[i], len) < 0) {
                res[i].status = -ENOSPC;
                model_llama_msg(res[i].error, sizeof(res[i].error), "the KV cache is full");
                continue;
            }
            L->seg_seq[segs] = i;
            L->seg_row[segs] = rows;
            L->seg_len[segs++] = (int)len;
            for (uint32_t r = 0; r < len; r++) {
                L->row_tok[rows] = prompts[i][at + r];
                L->row_slot[rows] = slots[i];
                L->row_pos[rows++] = (int)(at + r);
            }
        }
        if (rows == 0)
            continue;
        L->prompt = 1;
        forward(L, rows);
        for (int g = 0; g < segs; g++) {
            int i = L->seg_seq[g];
            uint32_t at = kv_cache_len(L->kvc, slots[i]);
            kv_cache_commit(L->kvc, slots[i], prompts[i] + at, (uint32_t)L->seg_len[g], true);
            if (at + (uint32_t)L->seg_len[g] == ns[i] && (!last || last[i]))
                logits_rows(L, L->seg_row[g] + L->seg_len[g] - 1, 1,
                            logits + (size_t)i * L->c.n_vocab);
        }
    }
    return count;
}

static int llama_prefill_batch(struct model *m, const int *slots, const uint32_t *const *prompts,
                               const uint32_t *ns, int count, float *logits,
                               struct model_result *res)
{
    return llama_prefill_part(m, slots, prompts, ns, NULL, count, logits, res);
}

static int llama_prefill(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                         float *logits)
{
    struct model_result r;
    llama_prefill_batch(m, &slot, &prompt, &n, 1, logits, &r);
    if (r.status < 0)
        snprintf(m->error, sizeof(m->error), "%s", r.error);
    return r.status;
}

static int llama_decode_batch(struct model *m, const int *slots, const uint32_t *tokens, int n,
                              float *logits, struct model_result *res)
{
    struct llama *L = (struct llama *)m;
    int rows = 0;

    if (n <= 0)
        return 0;
    L->stamp++;
    for (int i = 0; i < n; i++) {
        int s = slots[i];
        res[i].status = 0;
        res[i].error[0] = '\0';
        if (n > L->nb) {
            res[i].status = -EINVAL;
            model_llama_msg(res[i].error, sizeof(res[i].error), "batch of %d exceeds %d sequences", n,
                L->nb);
        } else if ((res[i].status = check_slot(L, s, res[i].error, sizeof(res[i].error))) < 0) {
            /* message written */
        } else if (L->mark[s] == L->stamp) {
            res[i].status = -EINVAL;
            model_llama_msg(res[i].error, sizeof(res[i].error), "slot %d twice in one decode step", s);
        } else if (tokens[i] >= (uint32_t)L->c.n_vocab) {
            res[i].status = -EINVAL;
            model_llama_msg(res[i].error, sizeof(res[i].error), "token %u out of range (vocabulary %d)",
                tokens[i], L->c.n_vocab);
        } else if (kv_cache_len(L->kvc, s) >= L->ctx) {
            res[i].status = -ENOSPC;
            model_llama_msg(res[i].error, sizeof(res[i].error), "the context of %u tokens is full", L->ctx);
        } else if (kv_cache_grow(L->kvc, s, 1) < 0) {
            res[i].status = -ENOSPC;
            model_llama_msg(res[i].error, sizeof(res[i].error), "the KV cache of %u blocks is full",
                            L->kv_blocks);
        }
        if (res[i].status < 0)
            continue;
        L->mark[s] = L->stamp;
        L->row_tok[rows] = tokens[i];
        L->row_slot[rows] = s;
        L->row_pos[rows] = (int)kv_cache_len(L->kvc, s);
        L->row_of[rows] = i;
        rows++;
    }
    if (rows > 0) {
        L->prompt = 0;
        forward(L, rows);
        if (rows == n) {
            logits_rows(L, 0, rows, logits);
        } else {
            for (int r = 0; r < rows; r++)
                logits_rows(L, r, 1, logits + (size_t)L->row_of[r] * L->c.n_vocab);
        }
        for (int r = 0; r < rows; r++)
            kv_cache_commit(L->kvc, L->row_slot[r], &L->row_tok[r], 1, L->decode_shared);
    }
    return n;
}

static int llama_decode(struct model *m, int slot, uint32_t token, float *logits)
{
    struct model_result r;
    llama_decode_batch(m, &slot, &token, 1, logits, &r);
    if (r.status < 0)
        snprintf(m->error, sizeof(m->error), "%s", r.error);
    return r.status;
}

static void llama_cache_stats(const struct model *m, struct model_cache_stats *st)
{
    struct kv_cache_stats ks;
    kv_cache_get_stats(((const struct llama *)m)->kvc, &ks);
    st->blocks = ks.blocks;
    st->used = ks.used;
    st->cached = ks.cached;
    st->evictions = ks.evictions;
    st->reused_tokens = ks.reused_tokens;
}

static uint32_t llama_cache_events(struct model *m, uint64_t *out, uint32_t cap, int *lost)
{
    bool l = false;
    uint32_t n = kv_cache_take_events(((struct llama *)m)->kvc, out, cap, &l);
    *lost = l;
    return n;
}

void model_llama_free(struct model *m)
{
    struct llama *L = (struct llama *)m;
    if (!L)
        return;
    threadpool_destroy(L->pool);
    for (int i = 0; i < MAX_MM_JOBS; i++)
        free(L->act[i]);
    free(L->x);
    free(L->xb);
    free(L->q);
    free(L->ao);
    free(L->kk);
    free(L->vv);
    free(L->hb);
    free(L->hb2);
    free(L->cs);
    free(L->row_slot);
    free(L->row_pos);
    free(L->row_of);
    free(L->seg_seq);
    free(L->seg_row);
    free(L->seg_len);
    free(L->tile_r0);
    free(L->tile_n);
    free(L->attn_scratch);
    free(L->row_tok);
    free(L->kv_k);
    free(L->kv_v);
    kv_cache_destroy(L->kvc);
    free(L->begun);
    free(L->mark);
    free(L->layers);
    free(L->vec_arena);
    gguf_close(L->g);
    free(L);
}

const struct model_ops model_llama_ops = {
    .prefill = llama_prefill,
    .decode = llama_decode,
    .decode_batch = llama_decode_batch,
    .seq_free = llama_seq_free,
    .seq_begin = llama_seq_begin,
    .prefill_batch = llama_prefill_batch,
    .prefill_part = llama_prefill_part,
    .cache_stats = llama_cache_stats,
    .cache_events = llama_cache_events,
    .destroy = model_llama_free,
};

uint64_t model_llama_weight_bytes(const struct model *m)
{
    return ((const struct llama *)m)->weight_bytes;
}
