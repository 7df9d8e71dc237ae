/* The serving defaults a GGUF model implies, computed in one place for the front (which
 * passes a resolved --ctx and --threads to its workers) and the engine (which applies the same
 * rule when run alone): the context a sequence gets when none is given, and the threads a
 * worker uses. */
#ifndef MODEL_INFO_H
#define MODEL_INFO_H

#include <stddef.h>
#include <stdint.h>

struct gguf;

/* Smallest default context (unless the model's own is smaller). */
#define MODEL_INFO_MIN_CTX 256u

struct model_info {
    uint32_t train_ctx;          /* <arch>.context_length */
    uint64_t kv_bytes_per_token; /* F16 K and V of one token over every layer */
};

/* KV-cache bytes of one token: K and V, F16, n_layers x kv_dim each. */
uint64_t model_info_kv_bytes(uint32_t n_layers, uint32_t kv_dim);

/* Reads the architecture's context_length, block_count, embedding_length, head counts and
 * key/value lengths. Returns 0, or -EINVAL with a message in err when a key is missing or
 * inconsistent. */
int model_info_read(const struct gguf *g, struct model_info *mi, char *err, size_t errlen);

/* KV-cache bytes the default context may use on this machine: a quarter of physical memory,
 * at most 8 GiB. */
uint64_t model_info_kv_budget(void);

/* The default context: train_ctx, capped so that sequences x ctx tokens of KV cache fit
 * budget bytes (0: model_info_kv_budget()), never below MODEL_INFO_MIN_CTX unless train_ctx
 * is smaller. */
uint32_t model_info_default_ctx(uint32_t train_ctx, uint64_t kv_bytes_per_token,
                                uint32_t sequences, uint64_t budget);

/* Threads per worker by default: the online cores divided among workers, at least 1. */
uint32_t model_info_default_threads(uint32_t workers);

#endif
