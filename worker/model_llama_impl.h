/* Private to model_llama.c (the forward pass) and model_llama_load.c (reading and checking
 * the file, allocating everything): the engine's config, weights, KV cache and scratch. */
#ifndef MODEL_LLAMA_IMPL_H
#define MODEL_LLAMA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "kernels.h"
#include "kv_cache.h"
#include "model_llama.h"

#define MAX_MM_JOBS  3
#define MAX_DIM      (1 << 20)

/* What sets an architecture apart (model_llama_arch.c holds the table). */
struct llama_arch {
    const char *name;
    unsigned neox : 1;       /* RoPE rotates the halves of a head, not adjacent pairs */
    unsigned qkv_bias : 1;   /* Q, K, V biases (qwen2) */
    unsigned qk_norm : 1;    /* per-head RMSNorm of q and k before RoPE (qwen3, gemma3) */
    unsigned post_norms : 1; /* RMSNorm of each block's output before the residual (gemma) */
    unsigned gelu : 1;       /* GELU-tanh gated FFN instead of SiLU */
    unsigned fused : 1;      /* attn_qkv and a gate/up ffn_up (phi3) */
    unsigned gemma : 1;      /* embedding times sqrt(dim), tied output, sliding window read */
    unsigned granite : 1;    /* embedding, residual, attention and logit multipliers */
    /* Sliding-window layers: 0 every layer (when the file gives a window), n > 1 layer l is
     * local when l % n < n - 1, -1 the window is ignored (as llama.cpp does for this arch) */
    int swa_pattern;
    int nope_interval;       /* > 0: layer l has no RoPE when (l + 1) % it == 0 (smollm3) */
};

/* Looks an architecture up by its general.architecture value; NULL when kiln lacks it. */
const struct llama_arch *llama_arch_find(const char *name, size_t len);
/* "llama, qwen2, ..." for messages. */
const char *llama_arch_names(void);

/* One RoPE: frequencies base^(-2i/n_rot), times freq_scale, divided by factors[i] (Llama 3
 * rope_freqs, LongRoPE), YaRN-mixed with the unscaled ones by ext_factor over the ramp
 * corr[0]..corr[1], cos and sin times mscale. */
struct llama_rope {
    float base, freq_scale, ext_factor, mscale, corr[2];
    const float *factors; /* (n_rot / 2) or NULL */
};

struct llama_config;
struct llama_layer;
struct attn_kern;

/* The architecture's part of the config (c->a, arch, dims and train_ctx already read): RoPE
 * and its scaling, attention scale, soft-caps, multipliers, sliding window. Returns 0 or
 * -errno with a message naming the file, the architecture and the key. */
int llama_arch_config(struct llama_config *c, const struct gguf *g, char *err, size_t errlen);

/* Each layer's window and RoPE (global, local, none), once the config is read. */
void llama_arch_layers(struct llama_config *c, struct llama_layer *layers);

/* Fills cs (n_rot floats: cos, sin per pair) for position pos. */
void llama_rope_table(const struct llama_rope *r, int n_rot, int pos, float *cs);

struct llama_config {
    char arch[16];
    const struct llama_arch *a;
    int dim, n_layers, n_heads, n_kv_heads, head_dim, q_dim, kv_dim, ffn, n_vocab, n_rot;
    uint32_t train_ctx;
    float eps;
    int neox, qkv_bias;
    uint32_t n_swa;           /* sliding window in tokens, 0 none */
    int n_rope;               /* 1, or 2 when local layers have their own RoPE (gemma3) */
    struct llama_rope rope[2]; /* [0] global layers, [1] sliding-window layers */
    float attn_scale;         /* q.k multiplier (1/sqrt(head_dim) unless the arch says) */
    float softcap_attn, softcap_final; /* 0: none; else x = cap * tanh(x / cap) */
    float embd_scale, resid_scale, logit_scale; /* logits are divided by logit_scale */
};

struct llama_layer {
    const float *attn_norm, *ffn_norm; /* (dim) */
    const float *post_attn_norm, *post_ffn_norm; /* (dim) gemma, else NULL */
    const float *q_norm, *k_norm;      /* (head_dim) qwen3, gemma3, else NULL */
    const float *bq, *bk, *bv;         /* (q_dim), (kv_dim), (kv_dim); qwen2 only, else NULL */
    uint32_t window;                   /* keys older than pos - window + 1 unseen; 0 none */
    int rope;                          /* index into c.rope, -1 no RoPE */
    struct kern_mat wq;                /* (q_dim, dim) */
    struct kern_mat wk, wv;            /* (kv_dim, dim) */
    struct kern_mat wo;                /* (dim, q_dim) */
    struct kern_mat w_gate, w_up;      /* (ffn, dim); views of one tensor in phi3 */
    struct kern_mat w_down;            /* (dim, ffn) */
};

/* One matrix product of a pool run: W times the nx activation rows of X into Y. */
struct mm_job {
    const struct kern_mat *W;
    struct kern_act X;
    int n_seq, y_stride, rows_per_task, n_tasks;
    int gemm; /* prompt rows: kern_ops.gemm, else matmul */
    float *Y;
};

/* Synchronization: one caller thread at a time (the worker's loop); pool threads touch only
 * the rows and heads their tasks name, and the fields of the run in progress (jobs, layer),
 * which the caller writes before threadpool_run and not during it. */
struct llama {
    struct model base; /* first: the interface casts between the two */
    struct llama_config c;
    struct gguf *g;
    const struct kern_ops *k;
    struct threadpool *pool;
    int n_threads;

    struct kern_mat tok_embd;  /* (n_vocab, dim) */
    const float *output_norm;  /* (dim) */
    struct kern_mat output;    /* (n_vocab, dim); token_embd when the file ties them */
    struct llama_layer *layers; /* (n_layers) */
    float *vec_arena;          /* norms and biases stored as F16/BF16, decoded at load */
    size_t vec_used, vec_cap;
    uint64_t weight_bytes;     /* read per token: all matrices and one embedding row */

    /* KV cache, F16, paged (kv_cache.h): (kv_blocks, n_layers, KV_BLOCK, kv_dim) each for K
     * and V, addressed through each slot's block table. */
    uint32_t ctx;
    uint32_t kv_blocks;
    struct kv_cache *kvc;
    uint16_t *kv_k, *kv_v;
    uint8_t *begun;    /* (max_sequences) seq_begin ran and prefill has not yet */
    uint32_t *mark;    /* (max_sequences) duplicate-slot check of a decode step */
    uint32_t stamp;

    /* Scratch for nb rows (max(MODEL_LLAMA_CHUNK, max_sequences)), all made at create. */
    int nb;
    float *x, *xb;       /* (nb, dim) residual stream, normed input */
    float *q, *ao;       /* (nb, q_dim) queries, attention output */
    float *kk, *vv;      /* (nb, kv_dim) this step's keys and values */
    float *hb, *hb2;     /* (nb, ffn) gate and up */
    float *cs;           /* (n_rope, nb, n_rot) RoPE cos/sin of each row's position */
    void *act[MAX_MM_JOBS];
    size_t act_row;      /* bytes of one quantized activation row, the widest input */
    int *row_slot, *row_pos, *row_of;
    int *seg_seq, *seg_row, *seg_len; /* (nb) a batched prefill pass: one run of rows each */
    int *tile_r0, *tile_n; /* (nb) attn.c: the runs of rows one attention task takes */
    float *attn_scratch;   /* (n_threads, attn_scratch_per) attn.c: keys as floats, scores */
    size_t attn_scratch_per;
    int attn_nh, attn_hchunks; /* attn.c, the run in progress: query heads per task */
    int attn_kvg;              /* and KV heads per task */
    const struct attn_kern *attn_kern; /* attn_kern_for(the kernel set), chosen at load */
    bool decode_shared; /* the kernels' prompt and decode rows agree for every weight (rows_agree):
                         * positions decode steps computed are shared in the KV cache too */
    uint32_t *row_tok;   /* (nb) */

    /* The pool run in progress. */
    struct mm_job jobs[MAX_MM_JOBS];
    int n_jobs, layer;
    int prompt;               /* the forward pass in progress runs prompt rows (prefill) */
    int stage_add;            /* per-row stage: add xb into x first */
    const float *stage_post;  /* and before that, norm xb with these weights (or NULL) */
    const float *stage_norm;  /* its norm weights */
    unsigned stage_need;      /* activation formats it quantizes into */
};

extern const struct model_ops model_llama_ops;

/* Element offset of position off of a block's layer in kv_k / kv_v. */
static inline size_t llama_kv_at(const struct llama *L, uint32_t block, int layer, uint32_t off)
{
    return (((size_t)block * (size_t)L->c.n_layers + (size_t)layer) * KV_BLOCK + off) *
           (size_t)L->c.kv_dim;
}

/* attn.c: queries one attention task takes at most. */
#define ATTN_QMAX 16

/* Floats of attn.c's scratch per thread. */
size_t llama_attn_scratch(const struct llama_config *c, uint32_t ctx);

/* The attention of layer L->layer for the forward's n rows (their queries in q, their keys
 * and values already in the cache) into ao, on the pool. */
void llama_attn_run(struct llama *L, int n);

/* snprintf into err. */
void model_llama_msg(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Frees everything of a whole or partly built engine (NULL pointers skipped). */
void model_llama_free(struct model *m);

#endif
