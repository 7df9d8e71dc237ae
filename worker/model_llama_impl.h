/* Private to model_llama.c (the forward pass) and model_llama_load.c (reading and checking
 * the file, allocating everything): the engine's config, weights, KV cache and scratch. */
#ifndef MODEL_LLAMA_IMPL_H
#define MODEL_LLAMA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "kernels.h"
#include "model_llama.h"

#define MAX_MM_JOBS  3
#define MAX_DIM      (1 << 20)

struct llama_config {
    char arch[16];
    int dim, n_layers, n_heads, n_kv_heads, head_dim, q_dim, kv_dim, ffn, n_vocab, n_rot;
    uint32_t train_ctx;
    float eps, rope_base, rope_freq_scale;
    int neox, qkv_bias;
};

struct llama_layer {
    const float *attn_norm, *ffn_norm; /* (dim) */
    const float *bq, *bk, *bv;         /* (q_dim), (kv_dim), (kv_dim); qwen2 only, else NULL */
    struct kern_mat wq;                /* (q_dim, dim) */
    struct kern_mat wk, wv;            /* (kv_dim, dim) */
    struct kern_mat wo;                /* (dim, q_dim) */
    struct kern_mat w_gate, w_up;      /* (ffn, dim) */
    struct kern_mat w_down;            /* (dim, ffn) */
};

/* One matrix product of a pool run: W times the nx activation rows of X into Y. */
struct mm_job {
    const struct kern_mat *W;
    struct kern_act X;
    int n_seq, y_stride, rows_per_task, n_tasks;
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
    const float *rope_factors; /* (n_rot / 2) Llama 3 RoPE frequency factors, or NULL */
    struct kern_mat output;    /* (n_vocab, dim); token_embd when the file ties them */
    struct llama_layer *layers; /* (n_layers) */
    float *vec_arena;          /* norms and biases stored as F16/BF16, decoded at load */
    size_t vec_used, vec_cap;
    uint64_t weight_bytes;     /* read per token: all matrices and one embedding row */

    /* KV cache, F16: (max_sequences, n_layers, ctx, kv_dim) each for K and V. */
    uint32_t ctx;
    uint16_t *kv_k, *kv_v;
    uint32_t *seq_len; /* (max_sequences) tokens in each slot's cache */
    uint32_t *mark;    /* (max_sequences) duplicate-slot check of a decode step */
    uint32_t stamp;

    /* Scratch for nb rows (max(MODEL_LLAMA_CHUNK, max_sequences)), all made at create. */
    int nb;
    float *x, *xb;       /* (nb, dim) residual stream, normed input */
    float *q, *ao;       /* (nb, q_dim) queries, attention output */
    float *kk, *vv;      /* (nb, kv_dim) this step's keys and values */
    float *hb, *hb2;     /* (nb, ffn) gate and up */
    float *cs;           /* (nb, n_rot) RoPE cos/sin of each row's position */
    float *att;          /* (n_threads, ctx) attention scores */
    void *act[MAX_MM_JOBS];
    size_t act_row;      /* bytes of one quantized activation row, the widest input */
    int *row_slot, *row_pos, *row_of;
    uint32_t *row_tok;   /* (nb) */

    /* The pool run in progress. */
    struct mm_job jobs[MAX_MM_JOBS];
    int n_jobs, layer;
    int stage_add;            /* per-row stage: add xb into x first */
    const float *stage_norm;  /* its norm weights */
    unsigned stage_need;      /* activation formats it quantizes into */
};

extern const struct model_ops model_llama_ops;

/* snprintf into err. */
void model_llama_msg(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Frees everything of a whole or partly built engine (NULL pointers skipped). */
void model_llama_free(struct model *m);

#endif
