/* kiln's compute kernels for the CPU engine: matrix x activations products over every stored
 * weight type, and the float kernels a Llama forward pass needs. One table of function
 * pointers per instruction set (scalar, avx2, avx512), picked once at load; the scalar set is
 * the reference the others are tested against. Kernels never allocate and never fail: callers
 * validate shapes at model load. Single-threaded: a thread pool splits rows across calls.
 *
 * KV cache: kiln stores K and V in F16 (half the bytes the attention streams per token);
 * dot_f16/axpy_f16 read it, quant_f32_to_f16 or kern_f32_to_f16 write it. F32 caches work
 * with dot_f32/axpy_f32. */
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* A weight matrix: rows x cols, each row cols elements of type, row_bytes apart.
 * Y = W X, so an activation vector has cols elements. */
struct kern_mat {
    enum ggml_type type; /* any type quant_type_supported accepts, Q8_K excepted */
    const void *data;    /* (rows, cols) */
    int rows, cols;
    size_t row_bytes;    /* quant_row_bytes(type, cols) for a dense tensor */
};

/* n_seq activation vectors of n elements, made by kern_quantize_act for a given weight type
 * (F32 stays F32), stride bytes apart (>= kern_act_bytes(wtype, n)). */
struct kern_act {
    enum ggml_type type; /* kern_act_type(wtype): F32, Q8_0 or Q8_K */
    const void *data;    /* (n_seq, n) */
    int n;
    size_t stride;
};

/* The activation format matmul wants for weights of wtype: Q8_0 for the 32-element block
 * types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: the kernels sum a block's activations for the
 * min of Q4_1/Q5_1 themselves), Q8_K for the 256-element ones (Q2_K..Q6_K, IQ4_XS), F32 for
 * float weights. GGML_TYPE_COUNT for an unsupported wtype. */
enum ggml_type kern_act_type(enum ggml_type wtype);
/* Bytes of one quantized activation vector of n elements for weights of wtype (0 if n is not
 * a multiple of the block size or wtype is unsupported). Allocate at load. */
size_t kern_act_bytes(enum ggml_type wtype, int n);
/* Quantize the n floats of x into out (kern_act_bytes(wtype, n) bytes) in wtype's activation
 * format. Do it once per matmul input vector, shared by all rows and threads. Deterministic
 * and the same whatever kernel set runs (so batching and kernel choice see the same input).
 * Returns 0 or -EINVAL. */
int kern_quantize_act(enum ggml_type wtype, const float *restrict x, int n, void *restrict out);

/* Per instruction set. All pointers are set in every table. */
struct kern_ops {
    const char *name; /* "scalar", "avx2", "avxvnni", "avx512", "amx" */

    /* Y[s * y_stride + r] = dot(W row r, X vector s) for r in [row_begin, row_end) and
     * s in [0, n_seq). X->type must be kern_act_type(W->type) and X->n == W->cols.
     * Each weight row is read from memory once per call for up to KERN_SEQ_CHUNK_BYTES of
     * activations (all sequences of a decode step) and reused from cache.
     * The float result for one (r, s) does not depend on n_seq, the row range, or which
     * other vectors are in X: batching changes nothing, bit for bit. */
    void (*matmul)(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                   int y_stride, int row_begin, int row_end);
    /* The same product for prompt rows (prefill), register- and cache-tiled where the set
     * has a tiled kernel for W's type (worker/gemm_*.c), else matmul itself. Its results
     * obey matmul's rule among gemm calls (the same bits whatever n_seq, row range or other
     * vectors); where rows_agree says so they are matmul's bits too. A model runs every
     * prompt row through gemm and every decode row through matmul. */
    void (*gemm)(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                 int y_stride, int row_begin, int row_end);
    /* 1 when gemm and matmul give the same bits for weights of wtype (they then share one
     * reduction order: a prompt row and a decode row of the same input agree), 0 when they
     * may differ in float rounding. The KV cache shares positions a decode step computed
     * only where every weight of the model agrees. */
    int (*rows_agree)(enum ggml_type wtype);

    /* sum a[i] * b[i]. */
    float (*dot_f32)(const float *a, const float *b, int n);
    /* sum f16(a[i]) * b[i]: one KV-cache key against a query. */
    float (*dot_f16)(const uint16_t *a, const float *b, int n);
    /* y[i] += alpha * x[i]. */
    void (*axpy_f32)(float *restrict y, float alpha, const float *restrict x, int n);
    /* y[i] += alpha * f16(x[i]): one KV-cache value into the attention output. */
    void (*axpy_f16)(float *restrict y, float alpha, const uint16_t *restrict x, int n);
    /* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]. out may equal x. */
    void (*rmsnorm)(float *out, const float *x, const float *w, int n, float eps);
    /* x = softmax(x), in place, max-subtracted. */
    void (*softmax)(float *x, int n);
    /* out[i] = silu(gate[i]) * up[i] (SwiGLU). out may equal gate or up. */
    void (*swiglu)(float *out, const float *gate, const float *up, int n);
    /* y[i] += x[i] (the residual). */
    void (*add)(float *restrict y, const float *restrict x, int n);
    /* kern_quantize_act, vectorized where the set can: the same bytes as the scalar code
     * for every input (it runs on every matmul input of every step). */
    int (*quantize_act)(enum ggml_type wtype, const float *restrict x, int n,
                        void *restrict out);
};

/* Activation bytes one matmul pass keeps hot in cache; more sequences than fit are done in
 * several passes over the weights (prefill). */
#define KERN_SEQ_CHUNK_BYTES (256 * 1024)

enum kern_set {
    KERN_SET_SCALAR,
    KERN_SET_AVX2,
    KERN_SET_AVXVNNI,
    KERN_SET_AVX512,
    KERN_SET_AMX,
};

/* The table for set, or NULL when this CPU lacks what it needs (avx2: avx2+fma+f16c;
 * avxvnni: the avx2 set and AVX-VNNI; avx512: avx512f+bw+vl+vnni and the avx2 set; amx: the
 * avx512 set, AMX-TILE, AMX-INT8 and the kernel's grant of the tile state). */
const struct kern_ops *kern_ops_get(enum kern_set set);
/* The best table for this CPU (amx, else avx512, else avxvnni, else avx2, else scalar),
 * unless env KILN_KERNELS=scalar|avx2|avxvnni|avx512|amx names one (an
 * unknown or unsupported name gives NULL, so a benchmark never runs a set silently
 * replaced). Call once at load and keep the pointer. */
const struct kern_ops *kern_ops_select(void);

/* Rotary embedding, in two steps so one table serves every head and layer of a position.
 * kern_rope_table: cs[2i] = cos(t_i), cs[2i+1] = sin(t_i), t_i = pos * freq_scale *
 * base^(-2i / n_rot), for i < n_rot / 2 (cs has n_rot floats). */
void kern_rope_table(float *cs, int n_rot, int pos, float base, float freq_scale);
/* The same with per-pair frequency factors (Llama 3's rope_freqs tensor, n_rot / 2 floats):
 * t_i is divided by factors[i]. factors NULL: kern_rope_table. */
void kern_rope_table_ff(float *cs, int n_rot, int pos, float base, float freq_scale,
                        const float *factors);
/* Rotate the first n_rot dims of each of n_heads heads of x (n_heads * head_dim floats).
 * neox = 0: pairs (2i, 2i+1) (GGUF llama's layout); neox = 1: pairs (i, i + n_rot/2). */
void kern_rope_apply(float *x, int n_heads, int head_dim, int n_rot, const float *cs,
                     int neox);

/* Row row of an embedding table of type (cols elements per row) as floats: get_rows for
 * every weight type. */
void kern_get_row(enum ggml_type type, const void *table, size_t row_bytes, int row, int cols,
                  float *out);
/* Write n floats as F16 (a KV-cache row). */
void kern_f32_to_f16(uint16_t *out, const float *x, int n);

/* Convenience over ops->matmul. */
static inline void kern_matmul(const struct kern_ops *k, const struct kern_mat *W,
                               const struct kern_act *X, int n_seq, float *Y, int y_stride,
                               int row_begin, int row_end)
{
    k->matmul(W, X, n_seq, Y, y_stride, row_begin, row_end);
}

/* Internal: the tables of kernels_avx2.c, kernels_avxvnni.c and kernels_avx512.c (built with
 * their flags; call only after checking the CPU, through kern_ops_get). */
const struct kern_ops *kern_ops_avx2_table(void);
const struct kern_ops *kern_ops_avxvnni_table(void);
const struct kern_ops *kern_ops_avx512_table(void);
/* kernels_amx.c: NULL unless the CPU has AMX-TILE and AMX-INT8 and the kernel grants this
 * process the tile state (asked once; a refusal is logged once). */
const struct kern_ops *kern_ops_amx_table(void);
/* Internal: number of sequences matmul takes per pass over the weights for vectors of
 * act_bytes each (a multiple of 4, >= 4). */
int kern_seq_chunk(size_t act_bytes);
/* Internal: one weight row (n elements) against ns activation vectors xs bytes apart, results
 * ys floats apart. kern_avx2_ext_row: the AVX2 row of Q4_1, Q5_1, Q2_K or Q3_K weights
 * (kernels_avx2_ext.c), NULL for another type. */
typedef void (*kern_row_fn)(const void *w, const char *x, size_t xs, int n, int ns, float *y,
                            size_t ys);
kern_row_fn kern_avx2_ext_row(enum ggml_type t);
/* The same for the AVX-VNNI set (kernels_avxvnni_ext.c). */
kern_row_fn kern_avxvnni_ext_row(enum ggml_type t);
/* The same for the AVX-512 set (kernels_avx512_ext.c). */
kern_row_fn kern_avx512_ext_row(enum ggml_type t);
/* Internal: AVX2 kernels the AVX-512 set reuses where 512-bit code would not be faster. */
void kern_avx2_matmul(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                      int y_stride, int row_begin, int row_end);
void kern_avxvnni_matmul(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                         float *Y, int y_stride, int row_begin, int row_end);
float kern_avx2_dot_f32(const float *a, const float *b, int n);
float kern_avx2_dot_f16(const uint16_t *a, const float *b, int n);
void kern_avx2_axpy_f32(float *restrict y, float alpha, const float *restrict x, int n);
void kern_avx2_axpy_f16(float *restrict y, float alpha, const uint16_t *restrict x, int n);
void kern_avx2_add(float *restrict y, const float *restrict x, int n);
void kern_avx2_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void kern_avx2_softmax(float *x, int n);
void kern_avx2_swiglu(float *out, const float *gate, const float *up, int n);
/* kernels_act_avx2.c: kern_quantize_act's bytes, Q8_0 and Q8_K 8 lanes at a time. */
int kern_avx2_quantize_act(enum ggml_type wtype, const float *restrict x, int n,
                           void *restrict out);

#endif /* KERNELS_H */
