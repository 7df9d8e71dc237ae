/* A reader for GGUF v2 and v3 files: metadata, tensor infos and the mapped tensor data.
 * Every count, length, offset and size is checked against the file before use: a hostile
 * file gets an error that names the file, the key or tensor, and what is wrong. Reads only;
 * writing GGUF files is the test-model tool's business (tests/). */
#ifndef GGUF_H
#define GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Metadata value types, as numbered in the file. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

/* Tensor element types (ggml's numbering). kiln's engine runs the ones named; the reader
 * knows the block size of every type below so it can check tensor sizes. */
enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 40
};

/* A string inside the mapping: not NUL-terminated, valid while the gguf is open. */
struct gguf_str {
    const char *ptr;
    uint64_t len;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;
    /* Scalars, converted: u64 for unsigned types and bool, i64 for signed, f64 for floats. */
    union {
        uint64_t u64;
        int64_t i64;
        double f64;
        struct gguf_str str;
    } v;
    /* Arrays (type GGUF_TYPE_ARRAY): element type, count and the raw elements in the file.
     * Arrays of strings carry an index made at open, read with gguf_arr_str(). Arrays of
     * arrays are accepted and skipped (arr_data NULL). */
    enum gguf_type arr_type;
    uint64_t arr_n;
    const void *arr_data;
    const uint64_t *arr_str_off; /* string arrays: offset of each element's length field */
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;
    uint64_t ne[4];      /* elements per dimension, ne[0] fastest; 1 beyond n_dims */
    enum ggml_type type;
    uint64_t offset;     /* from the start of the data section */
    uint64_t nbytes;
    const void *data;    /* in the mapping */
};

struct gguf {
    char *path;          /* as opened, or "<memory>" */
    const uint8_t *base; /* the whole file */
    size_t size;
    bool mapped;         /* base is an mmap of the file (else borrowed memory) */
    uint32_t version;
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_off;   /* start of the data section */
};

/* Map and parse path (read-only, MAP_PRIVATE). Returns NULL with a one-line message in err
 * (naming the file, the key or tensor, and what is wrong). */
struct gguf *gguf_open(const char *path, char *err, size_t errlen);

/* Parse a file already in memory (borrowed: buf must outlive the result). For tests and
 * fuzzing. */
struct gguf *gguf_open_mem(const void *buf, size_t len, char *err, size_t errlen);

void gguf_close(struct gguf *g);

/* Lookups return NULL / -ENOENT when the key is absent and -EINVAL when it has another type.
 * Integer getters accept any integer type whose value fits (-ERANGE when it does not);
 * gguf_get_f32 accepts float32 and float64. */
const struct gguf_kv *gguf_find(const struct gguf *g, const char *key);
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);

/* Element i of a string array (i < kv->arr_n; checked at open). */
struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i);

/* Whether s equals the NUL-terminated c. */
bool gguf_str_eq(struct gguf_str s, const char *c);

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

/* Type facts: name ("Q4_K"), elements per block, bytes per block; NULL / 0 for an unknown
 * type. */
const char *gguf_type_name(enum gguf_type t);
const char *ggml_type_name(enum ggml_type t);
uint32_t ggml_type_block_elems(enum ggml_type t);
uint32_t ggml_type_block_bytes(enum ggml_type t);

#endif
