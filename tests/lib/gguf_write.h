/* A GGUF writer for tests and the test-model tool: collect metadata and tensors in memory,
 * then serialize a v3 (or v2) file to a buffer or a path. It writes what it is told, checks
 * nothing about meaning (so tests can build hostile files too), and is not for the server. */
#ifndef GGUF_WRITE_H
#define GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

struct gguf_writer;

/* A writer for a file of the given version (2 or 3; anything else is written as told).
 * Returns NULL on allocation failure. */
struct gguf_writer *gguf_writer_create(uint32_t version);
void gguf_writer_destroy(struct gguf_writer *w);

/* Lay tensor data out on multiples of a (default 32) and, when write_key, add the
 * general.alignment key (uint32). a must be non-zero. Returns 0 or -EINVAL/-ENOMEM. */
int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t a, int write_key);

/* Add one metadata entry. All return 0 or -ENOMEM. Keys are NUL-terminated. */
int gguf_write_u8(struct gguf_writer *w, const char *key, uint8_t v);
int gguf_write_i8(struct gguf_writer *w, const char *key, int8_t v);
int gguf_write_u16(struct gguf_writer *w, const char *key, uint16_t v);
int gguf_write_i16(struct gguf_writer *w, const char *key, int16_t v);
int gguf_write_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_write_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_write_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_write_i64(struct gguf_writer *w, const char *key, int64_t v);
int gguf_write_f32(struct gguf_writer *w, const char *key, float v);
int gguf_write_f64(struct gguf_writer *w, const char *key, double v);
int gguf_write_bool(struct gguf_writer *w, const char *key, int v);
int gguf_write_str(struct gguf_writer *w, const char *key, const char *s);
/* A string of len bytes (may hold NULs). */
int gguf_write_strn(struct gguf_writer *w, const char *key, const char *s, uint64_t len);

/* An array of n fixed-size elements of type t (not string or array), copied from data in the
 * file's little-endian layout. Returns -EINVAL for string/array element types. */
int gguf_write_arr(struct gguf_writer *w, const char *key, enum gguf_type t, const void *data,
                   uint64_t n);
/* An array of n NUL-terminated strings. */
int gguf_write_arr_str(struct gguf_writer *w, const char *key, const char *const *s,
                       uint64_t n);
/* A metadata entry whose type field is type (any number) followed by len raw bytes: for
 * arrays of arrays and for hostile files. */
int gguf_write_raw_kv(struct gguf_writer *w, const char *key, uint32_t type, const void *body,
                      size_t len);

/* Add a tensor: its info (n_dims dimensions from ne, type written as is) and nbytes of data
 * (copied from data, or zeros when data is NULL), placed at the next aligned offset. n_dims
 * may exceed 4 for hostile files (ne must then hold n_dims values). Returns 0 or -ENOMEM. */
int gguf_write_tensor(struct gguf_writer *w, const char *name, uint32_t n_dims,
                      const uint64_t *ne, uint32_t type, const void *data, size_t nbytes);

/* Bytes of a well-formed tensor of this type and shape (ne[0..n_dims)), from the reader's
 * type tables; 0 for an unknown type or a first dimension that is not a block multiple. */
size_t gguf_tensor_bytes(uint32_t type, uint32_t n_dims, const uint64_t *ne);

/* Serialize: header, metadata, tensor infos, padding, data. *buf is malloc'd (free it).
 * The writer stays usable. Returns 0 or -ENOMEM. */
int gguf_writer_finish(const struct gguf_writer *w, uint8_t **buf, size_t *len);

/* Serialize to path (created or truncated). Returns 0 or -errno. */
int gguf_writer_write_file(const struct gguf_writer *w, const char *path);

#endif
