/* GGUF writer for tests and the test-model tool: byte buffers for the metadata, the tensor
 * infos and the data, joined at finish. Writes what it is told; the reader does the checks. */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct gguf_writer {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv, n_tensors;
    struct buf kv;    /* encoded metadata entries */
    struct buf info;  /* encoded tensor infos */
    struct buf data;  /* tensor data, each tensor at an aligned offset */
};

static int buf_put(struct buf *b, const void *p, size_t n)
{
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2)
                return -ENOMEM;
            cap *= 2;
        }
        uint8_t *np = realloc(b->p, cap);
        if (!np)
            return -ENOMEM;
        b->p = np;
        b->cap = cap;
    }
    if (n) {
        if (p)
            memcpy(b->p + b->len, p, n);
        else
            memset(b->p + b->len, 0, n);
    }
    b->len += n;
    return 0;
}

static int buf_u32(struct buf *b, uint32_t v)
{
    return buf_put(b, &v, 4); /* the host is little-endian, like the format */
}

static int buf_u64(struct buf *b, uint64_t v)
{
    return buf_put(b, &v, 8);
}

static int buf_str(struct buf *b, const char *s, uint64_t len)
{
    int err = buf_u64(b, len);
    return err ? err : buf_put(b, s, (size_t)len);
}

struct gguf_writer *gguf_writer_create(uint32_t version)
{
    struct gguf_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->version = version;
    w->alignment = 32;
    return w;
}

void gguf_writer_destroy(struct gguf_writer *w)
{
    if (!w)
        return;
    free(w->kv.p);
    free(w->info.p);
    free(w->data.p);
    free(w);
}

/* key + type field; the caller appends the value */
static int kv_begin(struct gguf_writer *w, const char *key, uint32_t type)
{
    int err = buf_str(&w->kv, key, strlen(key));
    if (!err)
        err = buf_u32(&w->kv, type);
    if (!err)
        w->n_kv++;
    return err;
}

static int kv_scalar(struct gguf_writer *w, const char *key, enum gguf_type t, const void *v,
                     size_t n)
{
    int err = kv_begin(w, key, t);
    return err ? err : buf_put(&w->kv, v, n);
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t a, int write_key)
{
    if (a == 0)
        return -EINVAL;
    w->alignment = a;
    return write_key ? gguf_write_u32(w, "general.alignment", a) : 0;
}

int gguf_write_u8(struct gguf_writer *w, const char *key, uint8_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_UINT8, &v, 1);
}

int gguf_write_i8(struct gguf_writer *w, const char *key, int8_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_INT8, &v, 1);
}

int gguf_write_u16(struct gguf_writer *w, const char *key, uint16_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_UINT16, &v, 2);
}

int gguf_write_i16(struct gguf_writer *w, const char *key, int16_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_INT16, &v, 2);
}

int gguf_write_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_UINT32, &v, 4);
}

int gguf_write_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_INT32, &v, 4);
}

int gguf_write_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_UINT64, &v, 8);
}

int gguf_write_i64(struct gguf_writer *w, const char *key, int64_t v)
{
    return kv_scalar(w, key, GGUF_TYPE_INT64, &v, 8);
}

int gguf_write_f32(struct gguf_writer *w, const char *key, float v)
{
    return kv_scalar(w, key, GGUF_TYPE_FLOAT32, &v, 4);
}

int gguf_write_f64(struct gguf_writer *w, const char *key, double v)
{
    return kv_scalar(w, key, GGUF_TYPE_FLOAT64, &v, 8);
}

int gguf_write_bool(struct gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return kv_scalar(w, key, GGUF_TYPE_BOOL, &b, 1);
}

int gguf_write_strn(struct gguf_writer *w, const char *key, const char *s, uint64_t len)
{
    int err = kv_begin(w, key, GGUF_TYPE_STRING);
    return err ? err : buf_str(&w->kv, s, len);
}

int gguf_write_str(struct gguf_writer *w, const char *key, const char *s)
{
    return gguf_write_strn(w, key, s, strlen(s));
}

int gguf_write_arr(struct gguf_writer *w, const char *key, enum gguf_type t, const void *data,
                   uint64_t n)
{
    static const uint8_t size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    int err;

    if ((unsigned)t >= GGUF_TYPE_COUNT || !size[t])
        return -EINVAL;
    if ((err = kv_begin(w, key, GGUF_TYPE_ARRAY)) || (err = buf_u32(&w->kv, t)) ||
        (err = buf_u64(&w->kv, n)))
        return err;
    return buf_put(&w->kv, data, (size_t)n * size[t]);
}

int gguf_write_arr_str(struct gguf_writer *w, const char *key, const char *const *s,
                       uint64_t n)
{
    int err;

    if ((err = kv_begin(w, key, GGUF_TYPE_ARRAY)) || (err = buf_u32(&w->kv, GGUF_TYPE_STRING)) ||
        (err = buf_u64(&w->kv, n)))
        return err;
    for (uint64_t i = 0; i < n; i++)
        if ((err = buf_str(&w->kv, s[i], strlen(s[i]))))
            return err;
    return 0;
}

int gguf_write_raw_kv(struct gguf_writer *w, const char *key, uint32_t type, const void *body,
                      size_t len)
{
    int err = kv_begin(w, key, type);
    return err ? err : buf_put(&w->kv, body, len);
}

size_t gguf_tensor_bytes(uint32_t type, uint32_t n_dims, const uint64_t *ne)
{
    uint32_t blk = ggml_type_block_elems((enum ggml_type)type);
    uint32_t bsz = ggml_type_block_bytes((enum ggml_type)type);
    uint64_t n = 1;

    if (!blk || !n_dims || ne[0] % blk)
        return 0;
    for (uint32_t d = 0; d < n_dims; d++)
        n *= ne[d];
    return (size_t)(n / blk * bsz);
}

int gguf_write_tensor(struct gguf_writer *w, const char *name, uint32_t n_dims,
                      const uint64_t *ne, uint32_t type, const void *data, size_t nbytes)
{
    size_t pad = (w->alignment - w->data.len % w->alignment) % w->alignment;
    int err;

    if ((err = buf_put(&w->data, NULL, pad)))
        return err;
    uint64_t off = w->data.len;
    if ((err = buf_str(&w->info, name, strlen(name))) || (err = buf_u32(&w->info, n_dims)))
        return err;
    for (uint32_t d = 0; d < n_dims; d++)
        if ((err = buf_u64(&w->info, ne[d])))
            return err;
    if ((err = buf_u32(&w->info, type)) || (err = buf_u64(&w->info, off)) ||
        (err = buf_put(&w->data, data, nbytes)))
        return err;
    w->n_tensors++;
    return 0;
}

int gguf_writer_finish(const struct gguf_writer *w, uint8_t **out, size_t *len)
{
    struct buf b = {0};
    int err;

    if ((err = buf_put(&b, "GGUF", 4)) || (err = buf_u32(&b, w->version)) ||
        (err = buf_u64(&b, w->n_tensors)) || (err = buf_u64(&b, w->n_kv)) ||
        (err = buf_put(&b, w->kv.p, w->kv.len)) || (err = buf_put(&b, w->info.p, w->info.len)))
        goto fail;
    /* data starts at the next multiple of the alignment, as the reader expects */
    if (w->n_tensors) {
        size_t pad = (w->alignment - b.len % w->alignment) % w->alignment;
        if ((err = buf_put(&b, NULL, pad)) || (err = buf_put(&b, w->data.p, w->data.len)))
            goto fail;
    }
    *out = b.p;
    *len = b.len;
    return 0;
fail:
    free(b.p);
    return err;
}

int gguf_writer_write_file(const struct gguf_writer *w, const char *path)
{
    uint8_t *p = NULL;
    size_t len = 0, done = 0;
    int fd, err = gguf_writer_finish(w, &p, &len);

    if (err)
        return err;
    if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        err = -errno;
        goto out;
    }
    while (done < len) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err = -errno;
            break;
        }
        done += (size_t)n;
    }
    if (close(fd) < 0 && !err)
        err = -errno;
out:
    free(p);
    return err;
}
