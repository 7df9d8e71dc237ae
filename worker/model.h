/* The model interface the scheduler runs (DESIGN's StepModel): prefill a prompt, decode one
 * token, decode a ragged batch. A sequence is a slot index in [0, max_sequences): its KV
 * memory is allocated at load and freed for reuse by seq_free. Logits are written into the
 * caller's buffers of n_vocab floats. Implementations: model_mock.c, model_llama.c. */
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

struct model;

/* The outcome of one sequence in a decode_batch: 0 or -errno, with a message. */
struct model_result {
    int status;
    char error[256];
};

/* A paged KV cache's counts (kv_cache.h's, for the worker's shared header). */
struct model_cache_stats {
    uint32_t blocks, used, cached;
    uint64_t evictions, reused_tokens;
};

struct model_ops {
    /* Run the prompt into slot; logits are for the token after it. Returns 0 or -errno with
     * a message in m->error. */
    int (*prefill)(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                   float *logits);
    /* Append token to slot; logits are for the token after it. Returns 0 or -errno with a
     * message in m->error. */
    int (*decode)(struct model *m, int slot, uint32_t token, float *logits);
    /* One decode step over n sequences: logits is n rows of n_vocab. Returns the number of
     * results written to res (n when all is well). NULL: model_decode_batch_default. */
    int (*decode_batch)(struct model *m, const int *slots, const uint32_t *tokens, int n,
                        float *logits, struct model_result *res);
    /* Forget slot's tokens; its memory is reused by a later prefill. */
    void (*seq_free)(struct model *m, int slot);
    /* Optional (NULL: every sequence fits and nothing is reused): before prefill, claims
     * room for a sequence of prompt (n tokens) growing to max_len positions, and links the
     * cached part of the prompt when reuse. Returns the prompt positions reused (the
     * following prefill computes only the rest), -EAGAIN when the cache has no room now
     * (try again after a sequence ends), or -ENOSPC with a message when it never would. */
    int (*seq_begin)(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                     uint32_t max_len, int reuse);
    /* Optional (NULL: prefill one at a time): the prompts of count distinct slots in shared
     * forward passes; logits is count rows; res[i] says how sequence i went. Returns count. */
    int (*prefill_batch)(struct model *m, const int *slots, const uint32_t *const *prompts,
                         const uint32_t *ns, int count, float *logits, struct model_result *res);
    /* Optional (NULL: a prompt is prefilled whole): prefill_batch over part of each prompt,
     * for a scheduler that spreads a long prompt over several passes: sequence i (begun by
     * seq_begin) computes from the positions its slot holds up to ns[i]; last[i] says ns[i]
     * is the prompt's end, and only then are its logits written (row i). The results are
     * those of one whole prefill, bit for bit. Returns count. */
    int (*prefill_part)(struct model *m, const int *slots, const uint32_t *const *prompts,
                        const uint32_t *ns, const uint8_t *last, int count, float *logits,
                        struct model_result *res);
    /* Optional: moves up to cap KV-cache events (kv_cache_take_events) into out. */
    uint32_t (*cache_events)(struct model *m, uint64_t *out, uint32_t cap, int *lost);
    /* Optional: the KV cache's counts now. */
    void (*cache_stats)(const struct model *m, struct model_cache_stats *st);
    void (*destroy)(struct model *m);
};

/* Fields set by the implementation at create; heartbeat set by the caller. */
struct model {
    const struct model_ops *ops;
    char name[128];
    uint32_t max_context;   /* tokens of prompt and output together */
    uint32_t max_sequences; /* slots */
    uint32_t n_vocab;
    uint32_t n_eos;         /* end-of-generation ids */
    uint32_t eos[16];
    char error[256];        /* the last failure's message */
    /* Called now and then during long calls (each layer of a prefill), so the front's
     * watchdog sees progress. May be NULL. */
    void (*heartbeat)(void *ctx);
    void *heartbeat_ctx;
};

/* Runs ops->decode for each sequence in turn. */
int model_decode_batch_default(struct model *m, const int *slots, const uint32_t *tokens, int n,
                               float *logits, struct model_result *res);

/* Dispatchers: the scheduler calls these. */
int model_prefill(struct model *m, int slot, const uint32_t *prompt, uint32_t n, float *logits);
int model_decode_batch(struct model *m, const int *slots, const uint32_t *tokens, int n,
                       float *logits, struct model_result *res);
void model_seq_free(struct model *m, int slot);
int model_seq_begin(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                    uint32_t max_len, int reuse);
void model_destroy(struct model *m);
/* ops->prefill_batch, or ops->prefill for each in turn. Returns count. */
int model_prefill_batch(struct model *m, const int *slots, const uint32_t *const *prompts,
                        const uint32_t *ns, int count, float *logits, struct model_result *res);
/* 0 events for a model without a cache. */
uint32_t model_cache_events(struct model *m, uint64_t *out, uint32_t cap, int *lost);
/* Zeroes *st for a model without a cache. */
void model_cache_stats(const struct model *m, struct model_cache_stats *st);

#endif
