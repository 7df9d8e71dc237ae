/* Tensor block formats (ggml's layouts, bit-exact with GGUF files), f16/bf16 conversion, and
 * the reference quantize/dequantize code for every type the engine runs. Scalar only: the
 * dot products over these blocks live in kernels*.c. Element types are enum ggml_type. */
#ifndef QUANT_H
#define QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

#define QUANT_QK    32  /* elements per Q8_0 / Q4_0 block */
#define QUANT_QK_K  256 /* elements per K-quant super-block */

/* Q8_0: 34 bytes, x[i] = d * qs[i]. Also the activation format for Q8_0/Q4_0 weights. */
struct quant_block_q8_0 {
    uint16_t d; /* f16 */
    int8_t qs[QUANT_QK];
};

/* Q4_0: 18 bytes, x[i] = d * ((nibble i) - 8). Byte j holds element j in its low nibble and
 * element j+16 in its high nibble. */
struct quant_block_q4_0 {
    uint16_t d; /* f16 */
    uint8_t qs[QUANT_QK / 2];
};

/* Q4_K: 144 bytes for 256 elements, 8 sub-blocks of 32.
 *   x = d * sc[j] * q - dmin * m[j], with 6-bit sc[j], m[j] and 4-bit q.
 *   scales[12]: for j < 4: sc[j] = scales[j] & 63, m[j] = scales[j+4] & 63;
 *               for j >= 4: sc[j] = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4,
 *                           m[j]  = (scales[j+4] >> 4) | (scales[j]   >> 6) << 4.
 *   qs[128]: four chunks of 32 bytes; chunk c holds sub-block 2c in the low nibbles and
 *            sub-block 2c+1 in the high nibbles, element l of each at byte 32c + l. */
struct quant_block_q4_k {
    uint16_t d;    /* f16, scale of the sub-block scales */
    uint16_t dmin; /* f16, scale of the sub-block mins */
    uint8_t scales[12];
    uint8_t qs[QUANT_QK_K / 2];
};

/* Q6_K: 210 bytes for 256 elements, 16 sub-blocks of 16: x = d * scales[e/16] * (q - 32),
 * q 6 bits. Two halves h of 128 elements; within half h, for l < 32:
 *   element l      : low nibble of ql[64h + l],      bits 0-1 of qh[32h + l]
 *   element l + 32 : low nibble of ql[64h + l + 32], bits 2-3 of qh[32h + l]
 *   element l + 64 : high nibble of ql[64h + l],     bits 4-5 of qh[32h + l]
 *   element l + 96 : high nibble of ql[64h + l + 32], bits 6-7 of qh[32h + l]  */
struct quant_block_q6_k {
    uint8_t ql[QUANT_QK_K / 2];
    uint8_t qh[QUANT_QK_K / 4];
    int8_t scales[QUANT_QK_K / 16];
    uint16_t d; /* f16 */
};

/* Q8_K: the activation format for Q4_K/Q6_K weights (never stored in files by kiln):
 * x[i] = d * qs[i]; bsums[k] = sum of qs[16k .. 16k+15]. 292 bytes. */
struct quant_block_q8_k {
    float d;
    int8_t qs[QUANT_QK_K];
    int16_t bsums[QUANT_QK_K / 16];
};

_Static_assert(sizeof(struct quant_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct quant_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct quant_block_q4_k) == 144, "q4_k layout");
_Static_assert(sizeof(struct quant_block_q6_k) == 210, "q6_k layout");
_Static_assert(sizeof(struct quant_block_q8_k) == 292, "q8_k layout");

/* IEEE half <-> single. f32->f16 rounds to nearest even; overflow gives inf, NaN stays NaN
 * (quiet), subnormals are kept. */
uint16_t quant_f32_to_f16(float f);
float quant_f16_to_f32(uint16_t h);
/* bfloat16 <-> single. f32->bf16 rounds to nearest even, NaN stays NaN (quiet). */
uint16_t quant_f32_to_bf16(float f);
float quant_bf16_to_f32(uint16_t h);

/* Whether kiln can quantize, dequantize and multiply with type: F32, F16, BF16, Q8_0, Q4_0,
 * Q4_K, Q6_K (and Q8_K as an activation format, for (de)quantization only). */
int quant_type_supported(enum ggml_type type);
/* Elements per block of type (1 for float types), or 0 if unsupported. */
int quant_block_elems(enum ggml_type type);
/* Bytes of n elements of type; 0 if unsupported or n is not a multiple of the block. */
size_t quant_row_bytes(enum ggml_type type, int64_t n);
const char *quant_type_name(enum ggml_type type);

/* Quantize n floats into out (quant_row_bytes(type, n) bytes). Deterministic (the reference
 * for writing model files). Returns 0, or -EINVAL for an unsupported type or an n that is not
 * a multiple of the block size. */
int quant_quantize_row(enum ggml_type type, const float *restrict x, void *restrict out,
                       int64_t n);
/* Decode n elements of a row of type into y. Returns 0 or -EINVAL as above. This is the
 * embedding lookup (get_rows) for every weight type. */
int quant_dequantize_row(enum ggml_type type, const void *restrict in, float *restrict y,
                         int64_t n);

/* Q4_K's packed 6-bit scale and min of sub-block j (0..7). */
void quant_q4_k_scale_min(const uint8_t scales[12], int j, uint8_t *sc, uint8_t *m);

#endif /* QUANT_H */
