/* llama.cpp's quantization presets (llama-quantize's "Q4_K_M" and friends) as the per-tensor
 * type choice model_gen makes: a base type for the matrices, more bits for the output
 * matrix, for attn_v and ffn_down of some layers and for attn_output, and the fallback of the
 * 256-element types to 32-element ones for rows that are not a multiple of 256. These are
 * the published rules of llama.cpp's quantizer (facts about the files people download),
 * written here for the architectures model_gen writes; the IQ1-IQ3 and MoE special cases
 * are left out because kiln does not run those presets. */
#include "model_gen.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum qp {
    QP_Q2_K, QP_Q3_K_S, QP_Q3_K_M, QP_Q3_K_L, QP_Q4_K_S, QP_Q4_K_M, QP_Q5_K_S, QP_Q5_K_M,
    QP_Q6_K, QP_IQ4_XS, QP_IQ4_NL, QP_Q4_0, QP_Q4_1, QP_Q5_0, QP_Q5_1, QP_Q8_0, QP_COUNT
};

static const struct {
    const char *name;
    enum ggml_type base;
} presets[QP_COUNT] = {
    [QP_Q2_K] = {"Q2_K", GGML_TYPE_Q2_K},       [QP_Q3_K_S] = {"Q3_K_S", GGML_TYPE_Q3_K},
    [QP_Q3_K_M] = {"Q3_K_M", GGML_TYPE_Q3_K},   [QP_Q3_K_L] = {"Q3_K_L", GGML_TYPE_Q3_K},
    [QP_Q4_K_S] = {"Q4_K_S", GGML_TYPE_Q4_K},   [QP_Q4_K_M] = {"Q4_K_M", GGML_TYPE_Q4_K},
    [QP_Q5_K_S] = {"Q5_K_S", GGML_TYPE_Q5_K},   [QP_Q5_K_M] = {"Q5_K_M", GGML_TYPE_Q5_K},
    [QP_Q6_K] = {"Q6_K", GGML_TYPE_Q6_K},       [QP_IQ4_XS] = {"IQ4_XS", GGML_TYPE_IQ4_XS},
    [QP_IQ4_NL] = {"IQ4_NL", GGML_TYPE_IQ4_NL}, [QP_Q4_0] = {"Q4_0", GGML_TYPE_Q4_0},
    [QP_Q4_1] = {"Q4_1", GGML_TYPE_Q4_1},       [QP_Q5_0] = {"Q5_0", GGML_TYPE_Q5_0},
    [QP_Q5_1] = {"Q5_1", GGML_TYPE_Q5_1},       [QP_Q8_0] = {"Q8_0", GGML_TYPE_Q8_0},
};

static int preset_index(const char *name)
{
    for (int i = 0; name && i < QP_COUNT; i++)
        if (strcasecmp(name, presets[i].name) == 0)
            return i;
    return -1;
}

enum ggml_type model_gen_quant_base(const char *preset)
{
    int p = preset_index(preset);
    return p < 0 ? GGML_TYPE_COUNT : presets[p].base;
}

/* Layers that get more bits in the _M presets: the first and last eighth and every third
 * layer between. */
static int more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The 256-element types' stand-ins for rows they cannot hold. */
static enum ggml_type fallback(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_IQ4_XS:
        return GGML_TYPE_IQ4_NL;
    case GGML_TYPE_Q4_K:
        return GGML_TYPE_Q5_0;
    case GGML_TYPE_Q5_K:
        return GGML_TYPE_Q5_1;
    case GGML_TYPE_Q6_K:
        return GGML_TYPE_Q8_0;
    default:
        return t;
    }
}

static int is_k(enum ggml_type t)
{
    return t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K ||
           t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_IQ4_XS;
}

enum ggml_type model_gen_quant_type(const struct model_gen_opts *o, const char *name, int cols)
{
    int p = preset_index(o->quant), layer = -1, n = o->layers;
    int gqa = o->kv_heads > 0 ? o->heads / o->kv_heads : 1;
    const char *dot;
    enum ggml_type t;

    if (p < 0)
        return o->type;
    t = presets[p].base;
    if (sscanf(name, "blk.%d.", &layer) != 1)
        layer = -1;
    dot = layer >= 0 ? strchr(name + 4, '.') + 1 : name;
    if (strcmp(name, "output.weight") == 0 ||
        (o->tied && strcmp(name, "token_embd.weight") == 0)) {
        /* the output matrix: Q6_K, or Q8_0 where rows do not fit 256-element blocks */
        if (cols % 256 != 0)
            return GGML_TYPE_Q8_0;
        return t == GGML_TYPE_Q8_0 ? t : GGML_TYPE_Q6_K;
    }
    if (strncmp(dot, "attn_v.", 7) == 0 || strncmp(dot, "attn_qkv.", 9) == 0) {
        if (p == QP_Q2_K)
            t = gqa >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
        else if (p == QP_Q3_K_M)
            t = layer < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        else if (p == QP_Q3_K_L)
            t = GGML_TYPE_Q5_K;
        else if ((p == QP_IQ4_NL || p == QP_IQ4_XS) && gqa >= 4)
            t = GGML_TYPE_Q5_K;
        else if ((p == QP_Q4_K_M || p == QP_Q5_K_M) && more_bits(layer, n))
            t = GGML_TYPE_Q6_K;
        else if (p == QP_Q4_K_S && layer < 4)
            t = GGML_TYPE_Q5_K;
    } else if (strncmp(dot, "ffn_down", 8) == 0) {
        if (p == QP_Q2_K)
            t = GGML_TYPE_Q3_K;
        else if (p == QP_Q3_K_M)
            t = layer < n / 16 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        else if (p == QP_Q3_K_L)
            t = GGML_TYPE_Q5_K;
        else if ((p == QP_Q4_K_M || p == QP_Q5_K_M) && more_bits(layer, n))
            t = GGML_TYPE_Q6_K;
        else if (p == QP_Q4_K_S && layer < n / 8)
            t = GGML_TYPE_Q5_K;
    } else if (strncmp(dot, "attn_output", 11) == 0) {
        if (p == QP_Q2_K)
            t = GGML_TYPE_Q3_K;
        else if (p == QP_Q3_K_M)
            t = GGML_TYPE_Q4_K;
        else if (p == QP_Q3_K_L)
            t = GGML_TYPE_Q5_K;
    }
    if (is_k(t) && cols % 256 != 0)
        t = fallback(t);
    return t;
}
