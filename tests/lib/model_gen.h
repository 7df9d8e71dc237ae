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
    /* "llama" (default), "qwen2" (Q/K/V biases), "qwen3" (per-head Q/K norms), "gemma2",
     * "gemma3" (post-norms, tied output, sliding-window layers), "phi3" (fused QKV and
     * gate/up), "granite" (the four multipliers), "smollm3" (every 4th layer without RoPE):
     * each with the keys and tensors llama.cpp reads for that architecture. */
    const char *arch;
    int dim, layers, heads, kv_heads, ffn, ctx;
    int head_dim; /* attention.key_length/value_length; 0: dim / heads */
    int window;   /* attention.sliding_window; 0: none (gemma: 4096) */
    /* RoPE scaling written into the file: NULL none, "yarn" (factor 4 over ctx / 4),
     * "longrope" (phi3: short and long factor tensors, original context ctx / 4), "linear"
     * (factor 2). */
    const char *rope_scaling;
    /* Greater than 0: the logits' standard deviation is about peak (the output matrix, or
     * the tied embedding, scaled to it), so a greedy path is the same in two correct
     * implementations; 0: about 1. */
    float peak;
    enum ggml_type type; /* of the matrices; norms and biases are F32 */
    /* A llama.cpp quantization preset ("Q4_K_M", "Q3_K_S", "IQ4_XS", "Q5_0", ...): the
     * matrices get the types llama-quantize gives them, type is ignored. NULL: type. */
    const char *quant;
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
    /* For refusal tests: the tensor or the key (without the "{arch}." prefix) left out, and
     * an architecture name written in place of arch's (arch still shapes the file). */
    const char *omit_tensor, *omit_key, *arch_written;
    int verbose; /* a progress line per layer on stderr */
};

/* Presets by name: "tinyllama" (dim 2048, 22 layers, 32/4 heads, ffn 5632, ctx 2048),
 * "smollm" (SmolLM 135M: 576, 30, 9/3, 1536, 2048), "tiny" (256, 2, 4/2, 512, 256),
 * "qwen2.5-0.5b" (896, 24, 14/2, 4864, 4096; use with arch "qwen2"), and with their
 * architecture, head size and window: "qwen3-0.6b", "gemma2-2b", "gemma3-1b", "phi3-mini",
 * "granite-2b", "smollm3-3b" (model_gen.c has the numbers).
 * Returns 0 or -ENOENT. Leaves type, seed and vocabulary alone. */
int model_gen_preset(struct model_gen_opts *o, const char *name);

/* 1 when kiln-mkmodel can write architecture name. */
int model_gen_arch_known(const char *name);

/* Write the model to path. Returns 0 or -errno with a message in err. */
int model_gen_write(const struct model_gen_opts *o, const char *path, char *err,
                    size_t errlen);

/* Parse a type name as kiln-mkmodel takes it ("q8_0", "Q4_K", "f16", ...). Returns
 * GGML_TYPE_COUNT when unknown. */
enum ggml_type model_gen_type(const char *name);

/* The base type of a llama.cpp preset name (Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K,
 * IQ4_XS, IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; any case), GGML_TYPE_COUNT if unknown. */
enum ggml_type model_gen_quant_base(const char *preset);
/* The type o->quant gives the matrix name (GGUF tensor name) with rows of cols elements:
 * the preset's base type, more bits for output, attn_v, ffn_down and attn_output as
 * llama.cpp does, and for rows that are not a multiple of 256 the 32-element stand-in
 * (Q2_K/Q3_K/IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; output -> Q8_0).
 * o->type when o->quant is NULL or unknown. */
enum ggml_type model_gen_quant_type(const struct model_gen_opts *o, const char *name, int cols);

#endif
