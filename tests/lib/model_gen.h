/* Random-weight Llama-family GGUF files for tests, benchmarks and kiln-mkmodel: the shapes of
 * a real model, weights drawn from a seeded generator, the vocabulary copied from a
 * vocabulary GGUF (or a small synthetic one). Optional defects (a tensor of another type or
 * shape) make the hostile files the loader must refuse. Never for the server. */
#ifndef MODEL_GEN_H
#define MODEL_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

struct model_gen_opts {
    const char *arch;   /* "llama" (default) or "qwen2" (Q/K/V biases) */
    int dim, layers, heads, kv_heads, ffn, ctx;
    enum ggml_type type; /* of the matrices; norms and biases are F32 */
    uint64_t seed;
    /* Copy every tokenizer.* key from this GGUF; NULL: a synthetic SentencePiece vocabulary
     * of n_vocab tokens (<unk>, <s>, </s>, the 256 byte tokens, then filler pieces). */
    const char *vocab_path;
    int n_vocab;
    int tied; /* no output.weight: the engine must use token_embd */
    /* A defect for loader tests: the tensor named defect_tensor gets defect_type (when
     * defect_type_set) and/or defect_rows rows (when > 0). */
    const char *defect_tensor;
    enum ggml_type defect_type;
    int defect_type_set, defect_rows;
    int verbose; /* a progress line per layer on stderr */
};

/* Presets by name: "tinyllama" (dim 2048, 22 layers, 32/4 heads, ffn 5632, ctx 2048),
 * "smollm" (SmolLM 135M: 576, 30, 9/3, 1536, 2048), "tiny" (256, 2, 4/2, 512, 256).
 * Returns 0 or -ENOENT. Leaves type, seed and vocabulary alone. */
int model_gen_preset(struct model_gen_opts *o, const char *name);

/* Write the model to path. Returns 0 or -errno with a message in err. */
int model_gen_write(const struct model_gen_opts *o, const char *path, char *err,
                    size_t errlen);

/* Parse a type name as kiln-mkmodel takes it ("q8_0", "Q4_K", "f16", ...). Returns
 * GGML_TYPE_COUNT when unknown. */
enum ggml_type model_gen_type(const char *name);

#endif
