/* The GGUF Llama-family engine behind the model interface (model.h): architectures "llama"
 * (Llama 2/3, TinyLlama, Mistral, SmolLM, the stories models) and "qwen2" (Q/K/V biases,
 * NeoX RoPE). Weights stay in the read-only mapping of the file (N workers share them
 * through the page cache); the KV cache and every scratch buffer are allocated at create, so
 * the token loop allocates nothing. Prefill runs the prompt in chunks of up to
 * MODEL_LLAMA_CHUNK tokens as batched matrix products; decode_batch runs every sequence of a
 * step in one pass over the weights. */
#ifndef MODEL_LLAMA_H
#define MODEL_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

struct kern_ops;

/* Prompt tokens per prefill pass: each weight matrix is read once per chunk. */
#define MODEL_LLAMA_CHUNK 128

struct model_llama_opts {
    uint32_t max_sequences; /* slots; 0: 1 */
    /* Context per sequence, prompt and output. 0: model_info_default_ctx (model_info.h): the
     * model's context_length, capped so the KV cache of max_sequences sequences fits
     * kv_budget (never below 256 tokens, or the model's context if that is smaller). A value above the model's context_length is
     * capped to it (RoPE was not trained past it). */
    uint32_t ctx;
    /* KV-cache bytes that ctx 0 may use. 0: a quarter of physical memory, at most 8 GiB. */
    uint64_t kv_budget;
    /* Positions of the paged KV cache shared by all sequences. 0: max_sequences x ctx. */
    uint32_t kv_tokens;
    int threads;                   /* threads for the matrix products, caller included; 0: 1 */
    const struct kern_ops *kernels; /* NULL: kern_ops_select() (env KILN_KERNELS) */
    int quiet;                     /* no progress lines on stderr */
};

/* Load path. Returns NULL with a one-line message in err: a file that is not GGUF, an
 * unknown architecture, a missing key or tensor, a tensor of a type kiln does not run or of
 * the wrong shape (each named), or memory that cannot be allocated. Prints a line per
 * stage on stderr unless o->quiet. Free it with model_destroy(). */
struct model *model_llama_create(const char *path, const struct model_llama_opts *o, char *err,
                                 size_t errlen);

/* Facts for benchmarks and tests: bytes of weights one token reads (every matrix and the
 * embedding row), and the context chosen. */
uint64_t model_llama_weight_bytes(const struct model *m);

#endif
