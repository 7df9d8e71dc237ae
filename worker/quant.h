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

/* Q4_1: 20 bytes, x[i] = d * q + m, q 4 bits unsigned, packed as Q4_0's nibbles. */
struct quant_block_q4_1 {
    uint16_t d; /* f16 */
    uint16_t m; /* f16 */
    uint8_t qs[QUANT_QK / 2];
};

/* Q5_0: 22 bytes, x[i] = d * (q - 16), q 5 bits: the low 4 as Q4_0's nibbles, bit 4 of
 * element j is bit j of qh (read as a little-endian uint32). */
struct quant_block_q5_0 {
    uint16_t d; /* f16 */
    uint8_t qh[4];
    uint8_t qs[QUANT_QK / 2];
};

/* Q5_1: 24 bytes, x[i] = d * q + m, q 5 bits packed as Q5_0's. */
struct quant_block_q5_1 {
    uint16_t d; /* f16 */
    uint16_t m; /* f16 */
    uint8_t qh[4];
    uint8_t qs[QUANT_QK / 2];
};

/* IQ4_NL: 18 bytes, x[i] = d * quant_iq4_values[q], q 4 bits packed as Q4_0's nibbles. */
struct quant_block_iq4_nl {
    uint16_t d; /* f16 */
    uint8_t qs[QUANT_QK / 2];
};

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml's table). */
extern const int8_t quant_iq4_values[16];

/* Q2_K: 84 bytes for 256 elements, 16 sub-blocks of 16:
 *   x = d * (scales[e/16] & 15) * q - dmin * (scales[e/16] >> 4), q 2 bits.
 *   Element e = 128n + 32j + l (n < 2, j < 4, l < 32): q = (qs[32n + l] >> 2j) & 3. */
struct quant_block_q2_k {
    uint8_t scales[QUANT_QK_K / 16];
    uint8_t qs[QUANT_QK_K / 4];
    uint16_t d;    /* f16 */
    uint16_t dmin; /* f16 */
};

/* Q3_K: 110 bytes for 256 elements, 16 sub-blocks of 16: x = d * (sc[e/16] - 32) * q,
 * q = low - 4 * !high in -4..3 (equivalently (low | high << 2) - 4). Element e = 128n +
 * 32j + l: low = (qs[32n + l] >> 2j) & 3, high = bit 4n + j of hmask[l]. The 6-bit sc[k]
 * (quant_q3_k_scale): low 4 bits from scales[k] (k < 8, low nibble) or scales[k - 8]
 * (high nibble), high 2 bits from bits 2(k/4)..+1 of scales[8 + k % 4]. */
struct quant_block_q3_k {
    uint8_t hmask[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t scales[12];
    uint16_t d; /* f16 */
};

/* Q5_K: 176 bytes for 256 elements: Q4_K's scales and nibbles, plus bit 4 of element
 * 32j + l of sub-block j in bit j of qh[l]. x = d * sc[j] * q - dmin * m[j], q 5 bits. */
struct quant_block_q5_k {
    uint16_t d;    /* f16 */
    uint16_t dmin; /* f16 */
    uint8_t scales[12];
    uint8_t qh[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 2];
};

/* IQ4_XS: 136 bytes for 256 elements, 8 sub-blocks of 32: x = d * (ls[j] - 32) *
 * quant_iq4_values[q]; ls[j] 6 bits: low 4 from nibble j % 2 of scales_l[j / 2], high 2 from
 * bits 2j..2j+1 of scales_h. Sub-block j's nibbles are qs[16j..16j+15] as Q4_0's. */
struct quant_block_iq4_xs {
    uint16_t d; /* f16 */
    uint16_t scales_h;
    uint8_t scales_l[QUANT_QK_K / 64];
    uint8_t qs[QUANT_QK_K / 2];
};

_Static_assert(sizeof(struct quant_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(struct quant_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(struct quant_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(struct quant_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(struct quant_block_q2_k) == 84, "q2_k layout");
_Static_assert(sizeof(struct quant_block_q3_k) == 110, "q3_k layout");
_Static_assert(sizeof(struct quant_block_q5_k) == 176, "q5_k layout");
_Static_assert(sizeof(struct quant_block_iq4_xs) == 136, "iq4_xs layout");
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
 * Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (and Q8_K as an activation
 * format, for (de)quantization only). */
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

/* Q4_K's (and Q5_K's) packed 6-bit scale and min of sub-block j (0..7). */
void quant_q4_k_scale_min(const uint8_t scales[12], int j, uint8_t *sc, uint8_t *m);
/* Q3_K's 6-bit scale of sub-block k (0..15), 0..63 (the value used is this minus 32). */
int quant_q3_k_scale(const uint8_t scales[12], int k);
/* IQ4_XS's 6-bit scale of sub-block j (0..7), 0..63 (the value used is this minus 32). */
int quant_iq4_xs_scale(const struct quant_block_iq4_xs *b, int j);

/* Internal, quant_ext.c: the types beyond Q8_0/Q4_0/Q4_K/Q6_K. Same contracts as
 * quant_quantize_row/quant_dequantize_row for nb whole blocks; -EINVAL for another type. */
int quant_ext_quantize(enum ggml_type type, const float *restrict x, void *restrict out,
                       int64_t nb);
int quant_ext_dequantize(enum ggml_type type, const void *restrict in, float *restrict y,
                         int64_t nb);

#endif /* QUANT_H */
