/* GGUF v2/v3 reader: maps the file, walks the header, metadata and tensor infos with every
 * count and length checked against the bytes left, and points into the mapping. It never
 * copies tensor data and never writes; a hostile file gets one message naming what is wrong. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"

#define GGUF_MAGIC             0x46554747u /* "GGUF" read little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ALIGNMENT     (1u << 20) /* a sane bound: real files use 32 or 64 */
#define GGUF_MAX_DIMS          4
#define GGUF_MAX_ARRAY_DEPTH   8 /* arrays of arrays are skipped; bound the recursion */
/* Smallest encodings, used to refuse counts the remaining bytes could never hold. */
#define GGUF_MIN_KV_BYTES      (8 + 1 + 4 + 1)         /* key len, 1-byte key, type, u8 */
#define GGUF_MIN_TENSOR_BYTES  (8 + 1 + 4 + 8 + 4 + 8) /* name len, name, n_dims, ne, type, off */

/* Parsed file plus the private hash indexes for name lookups (kept behind the public part). */
struct gguf_impl {
    struct gguf g;
    size_t *kv_tab; /* open addressing: kv index + 1, 0 = empty */
    size_t kv_cap;
    size_t *t_tab; /* same for tensors */
    size_t t_cap;
};

struct type_info {
    const char *name;
    uint32_t blk;   /* elements per block */
    uint32_t bytes; /* bytes per block */
};

/* ggml's block layouts (facts of the format). Types beyond the header's enum are listed so
 * the reader can size and name them; the engine decides what it runs. */
static const struct type_info ggml_types[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"F32", 1, 4},         [GGML_TYPE_F16] = {"F16", 1, 2},
    [GGML_TYPE_Q4_0] = {"Q4_0", 32, 18},     [GGML_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [GGML_TYPE_Q5_0] = {"Q5_0", 32, 22},     [GGML_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [GGML_TYPE_Q8_0] = {"Q8_0", 32, 34},     [GGML_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [GGML_TYPE_Q2_K] = {"Q2_K", 256, 84},    [GGML_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [GGML_TYPE_Q4_K] = {"Q4_K", 256, 144},   [GGML_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [GGML_TYPE_Q6_K] = {"Q6_K", 256, 210},   [GGML_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},             [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},             [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},               [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},               [23] = {"IQ4_XS", 256, 136},
    [GGML_TYPE_I8] = {"I8", 1, 1},           [GGML_TYPE_I16] = {"I16", 1, 2},
    [GGML_TYPE_I32] = {"I32", 1, 4},         [GGML_TYPE_I64] = {"I64", 1, 8},
    [GGML_TYPE_F64] = {"F64", 1, 8},         [29] = {"IQ1_M", 256, 56},
    [GGML_TYPE_BF16] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},
};

static const char *const gguf_type_names[GGUF_TYPE_COUNT] = {
    "uint8", "int8",  "uint16", "int16", "uint32", "int32",  "float32",
    "bool",  "string", "array", "uint64", "int64", "float64",
};

/* Fixed element sizes of the scalar value types; 0 for string and array. */
static const uint8_t gguf_type_size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(enum gguf_type t)
{
    return (unsigned)t < GGUF_TYPE_COUNT ? gguf_type_names[t] : NULL;
}

const char *ggml_type_name(enum ggml_type t)
{
    return (unsigned)t < GGML_TYPE_COUNT ? ggml_types[t].name : NULL;
}

uint32_t ggml_type_block_elems(enum ggml_type t)
{
    return (unsigned)t < GGML_TYPE_COUNT ? ggml_types[t].blk : 0;
}

uint32_t ggml_type_block_bytes(enum ggml_type t)
{
    return (unsigned)t < GGML_TYPE_COUNT ? ggml_types[t].bytes : 0;
}

bool gguf_str_eq(struct gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/* ---- the cursor: every read is checked against the bytes left ---- */

struct rd {
    const uint8_t *base;
    size_t size;
    size_t off;
    const char *path;
    char *err;
    size_t errlen;
};

static size_t rd_left(const struct rd *r)
{
    return r->size - r->off;
}

__attribute__((format(printf, 2, 3))) static int rd_fail(struct rd *r, const char *fmt, ...)
{
    if (r->err && r->errlen) {
        int n = snprintf(r->err, r->errlen, "%s: ", r->path);
        if (n >= 0 && (size_t)n < r->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

/* A name from the file, made printable for a message: escapes, cut at 64 bytes. */
static const char *show(struct gguf_str s, char *buf, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (uint64_t i = 0; i < s.len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (i == 64) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o] = '\0';
    return buf;
}

#define SHOW(s) show((s), (char[300]){0}, 300)

static uint64_t le_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8); /* unaligned-safe; the format and the host are little-endian */
    return v;
}

static uint32_t le_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Read a u32/u64 field; what names the field for the message. */
static int rd_u32(struct rd *r, uint32_t *v, const char *ctx, const char *what)
{
    *v = 0;
    if (rd_left(r) < 4)
        return rd_fail(r, "%s%s: truncated (need 4 bytes at offset %zu, file is %zu bytes)",
                       ctx, what, r->off, r->size);
    *v = le_u32(r->base + r->off);
    r->off += 4;
    return 0;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *ctx, const char *what)
{
    *v = 0;
    if (rd_left(r) < 8)
        return rd_fail(r, "%s%s: truncated (need 8 bytes at offset %zu, file is %zu bytes)",
                       ctx, what, r->off, r->size);
    *v = le_u64(r->base + r->off);
    r->off += 8;
    return 0;
}

/* A length-prefixed string, pointing into the mapping. */
static int rd_str(struct rd *r, struct gguf_str *s, const char *ctx, const char *what)
{
    uint64_t len = 0;
    int err = rd_u64(r, &len, ctx, what);
    if (err)
        return err;
    if (len > rd_left(r))
        return rd_fail(r, "%s%s: length %llu runs past the end of the file (offset %zu, %zu bytes)",
                       ctx, what, (unsigned long long)len, r->off, r->size);
    s->ptr = (const char *)r->base + r->off;
    s->len = len;
    r->off += (size_t)len;
    return 0;
}

static int rd_value_type(struct rd *r, enum gguf_type *t, const char *ctx, const char *what)
{
    uint32_t v = 0;
    int err = rd_u32(r, &v, ctx, what);
    if (err)
        return err;
    if (v >= GGUF_TYPE_COUNT)
        return rd_fail(r, "%s%s: unknown value type %u", ctx, what, v);
    *t = (enum gguf_type)v;
    return 0;
}

/* Skip one array's body (after its type, at its count) without keeping anything: arrays of
 * arrays are accepted but not exposed. Every element consumes bytes, so the walk is bounded
 * by the file's size; depth bounds the recursion. */
static int skip_array(struct rd *r, const char *ctx, int depth)
{
    enum gguf_type t = GGUF_TYPE_UINT8;
    uint64_t n = 0;
    int err;

    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return rd_fail(r, "%sarrays nested deeper than %d", ctx, GGUF_MAX_ARRAY_DEPTH);
    if ((err = rd_value_type(r, &t, ctx, "nested array type")) ||
        (err = rd_u64(r, &n, ctx, "nested array count")))
        return err;
    if (gguf_type_size[t]) {
        if (n > rd_left(r) / gguf_type_size[t])
            return rd_fail(r, "%snested array of %llu %s runs past the end of the file", ctx,
                           (unsigned long long)n, gguf_type_names[t]);
        r->off += (size_t)n * gguf_type_size[t];
        return 0;
    }
    if (n > rd_left(r) / (t == GGUF_TYPE_STRING ? 8 : 12))
        return rd_fail(r, "%snested array count %llu is more than the %zu bytes left could hold",
                       ctx, (unsigned long long)n, rd_left(r));
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s;
        err = t == GGUF_TYPE_STRING ? rd_str(r, &s, ctx, "nested string")
                                    : skip_array(r, ctx, depth + 1);
        if (err)
            return err;
    }
    return 0;
}

/* Read an array value into kv (type and count included). */
static int rd_array(struct rd *r, struct gguf_kv *kv, const char *ctx)
{
    enum gguf_type t = GGUF_TYPE_UINT8;
    uint64_t n = 0;
    int err;

    if ((err = rd_value_type(r, &t, ctx, "array element type")) ||
        (err = rd_u64(r, &n, ctx, "array count")))
        return err;
    kv->arr_type = t;
    kv->arr_n = n;
    if (gguf_type_size[t]) {
        if (n > rd_left(r) / gguf_type_size[t])
            return rd_fail(r,
                           "%sarray of %llu %s (%u bytes each) runs past the end of the file "
                           "(offset %zu, %zu bytes)",
                           ctx, (unsigned long long)n, gguf_type_names[t], gguf_type_size[t],
                           r->off, r->size);
        kv->arr_data = r->base + r->off;
        r->off += (size_t)n * gguf_type_size[t];
        return 0;
    }
    if (t == GGUF_TYPE_ARRAY) {
        if (n > rd_left(r) / 12)
            return rd_fail(r, "%sarray count %llu is more than the %zu bytes left could hold",
                           ctx, (unsigned long long)n, rd_left(r));
        for (uint64_t i = 0; i < n; i++)
            if ((err = skip_array(r, ctx, 2)))
                return err;
        kv->arr_data = NULL;
        return 0;
    }
    /* strings: each at least its 8-byte length, so the count is checked before allocating */
    if (n > rd_left(r) / 8)
        return rd_fail(r, "%sarray of %llu strings is more than the %zu bytes left could hold",
                       ctx, (unsigned long long)n, rd_left(r));
    size_t start = r->off;
    uint64_t *offs = malloc((n ? (size_t)n : 1) * sizeof(*offs));
    if (!offs)
        return rd_fail(r, "%sout of memory for %llu string offsets", ctx, (unsigned long long)n);
    kv->arr_str_off = offs;
    kv->arr_data = r->base + start;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s;
        char what[48];
        offs[i] = r->off - start;
        snprintf(what, sizeof(what), "string %llu", (unsigned long long)i);
        if ((err = rd_str(r, &s, ctx, what)))
            return err; /* offs is freed with the kv */
    }
    return 0;
}

static int rd_value(struct rd *r, struct gguf_kv *kv, const char *ctx)
{
    const uint8_t *p = r->base + r->off;
    enum gguf_type t = kv->type;

    if (t == GGUF_TYPE_STRING)
        return rd_str(r, &kv->v.str, ctx, "string value");
    if (t == GGUF_TYPE_ARRAY)
        return rd_array(r, kv, ctx);
    if (rd_left(r) < gguf_type_size[t])
        return rd_fail(r, "%s%s value truncated (offset %zu, file is %zu bytes)", ctx,
                       gguf_type_names[t], r->off, r->size);
    switch (t) {
    case GGUF_TYPE_UINT8: kv->v.u64 = p[0]; break;
    case GGUF_TYPE_BOOL: kv->v.u64 = p[0] != 0; break;
    case GGUF_TYPE_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case GGUF_TYPE_UINT16: kv->v.u64 = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_TYPE_INT16: kv->v.i64 = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_TYPE_UINT32: kv->v.u64 = le_u32(p); break;
    case GGUF_TYPE_INT32: kv->v.i64 = (int32_t)le_u32(p); break;
    case GGUF_TYPE_UINT64: kv->v.u64 = le_u64(p); break;
    case GGUF_TYPE_INT64: kv->v.i64 = (int64_t)le_u64(p); break;
    case GGUF_TYPE_FLOAT32: {
        float f;
        memcpy(&f, p, 4);
        kv->v.f64 = f;
        break;
    }
    case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f64, p, 8); break;
    default: break; /* string and array handled above */
    }
    r->off += gguf_type_size[t];
    return 0;
}

/* ---- name indexes (duplicate detection at open, lookups afterwards) ---- */

static uint64_t hash_bytes(const char *p, uint64_t n)
{
    return hash_fnv1a(p, (size_t)n);
}

static bool str_same(struct gguf_str a, struct gguf_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* Build an index over n names (name(i) gives each). Returns 0, -ENOMEM, or -EEXIST with the
 * index of the second of two equal names in *dup. */
static int index_build(size_t **tab, size_t *cap, size_t n, const void *items, size_t stride,
                       size_t name_off, size_t *dup)
{
    size_t c = 16;
    while (c < 2 * n)
        c *= 2;
    size_t *t = calloc(c, sizeof(*t));
    if (!t)
        return -ENOMEM;
    *tab = t;
    *cap = c;
    for (size_t i = 0; i < n; i++) {
        struct gguf_str s;
        memcpy(&s, (const char *)items + i * stride + name_off, sizeof(s));
        size_t h = (size_t)hash_bytes(s.ptr, s.len) & (c - 1);
        while (t[h]) {
            struct gguf_str o;
            memcpy(&o, (const char *)items + (t[h] - 1) * stride + name_off, sizeof(o));
            if (str_same(s, o)) {
                *dup = i;
                return -EEXIST;
            }
            h = (h + 1) & (c - 1);
        }
        t[h] = i + 1;
    }
    return 0;
}

static const void *index_find(const size_t *tab, size_t cap, const void *items, size_t stride,
                              size_t name_off, const char *name)
{
    if (!tab)
        return NULL;
    size_t n = strlen(name);
    size_t h = (size_t)hash_bytes(name, n) & (cap - 1);
    while (tab[h]) {
        const char *item = (const char *)items + (tab[h] - 1) * stride;
        struct gguf_str s;
        memcpy(&s, item + name_off, sizeof(s));
        if (gguf_str_eq(s, name))
            return item;
        h = (h + 1) & (cap - 1);
    }
    return NULL;
}

const struct gguf_kv *gguf_find(const struct gguf *g, const char *key)
{
    const struct gguf_impl *im = (const struct gguf_impl *)g;
    return index_find(im->kv_tab, im->kv_cap, g->kv, sizeof(*g->kv),
                      offsetof(struct gguf_kv, key), key);
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
    const struct gguf_impl *im = (const struct gguf_impl *)g;
    return index_find(im->t_tab, im->t_cap, g->tensors, sizeof(*g->tensors),
                      offsetof(struct gguf_tensor, name), name);
}

/* ---- the file ---- */

static int parse_header(struct rd *r, struct gguf *g)
{
    uint32_t magic;
    int err;

    if (r->size < 4)
        return rd_fail(r, "too short to be a GGUF file (%zu bytes)", r->size);
    magic = le_u32(r->base);
    if (magic != GGUF_MAGIC)
        return rd_fail(r, "not a GGUF file (bad magic %02x %02x %02x %02x, want \"GGUF\")",
                       r->base[0], r->base[1], r->base[2], r->base[3]);
    r->off = 4;
    if ((err = rd_u32(r, &g->version, "", "header version")))
        return err;
    if (g->version == 1)
        return rd_fail(r, "GGUF version 1 is not supported (only v2 and v3; re-convert the "
                          "model with a current converter)");
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return rd_fail(r, "big-endian GGUF files are not supported");
    if (g->version != 2 && g->version != 3)
        return rd_fail(r, "unsupported GGUF version %u (only v2 and v3)", g->version);
    if ((err = rd_u64(r, &g->n_tensors, "", "header tensor count")) ||
        (err = rd_u64(r, &g->n_kv, "", "header metadata count")))
        return err;
    if (g->n_kv > rd_left(r) / GGUF_MIN_KV_BYTES)
        return rd_fail(r, "metadata count %llu is more than the %zu bytes left could hold",
                       (unsigned long long)g->n_kv, rd_left(r));
    if (g->n_tensors > rd_left(r) / GGUF_MIN_TENSOR_BYTES)
        return rd_fail(r, "tensor count %llu is more than the %zu bytes left could hold",
                       (unsigned long long)g->n_tensors, rd_left(r));
    return 0;
}

static int parse_kvs(struct rd *r, struct gguf_impl *im)
{
    struct gguf *g = &im->g;
    int err;

    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof(*g->kv));
    if (!g->kv)
        return rd_fail(r, "out of memory for %llu metadata entries",
                       (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        struct gguf_kv *kv = &g->kv[i];
        char ctx[340];
        snprintf(ctx, sizeof(ctx), "metadata entry %llu: ", (unsigned long long)i);
        if ((err = rd_str(r, &kv->key, ctx, "key")))
            return err;
        if (kv->key.len == 0)
            return rd_fail(r, "metadata entry %llu: empty key", (unsigned long long)i);
        snprintf(ctx, sizeof(ctx), "key '%s': ", SHOW(kv->key));
        if ((err = rd_value_type(r, &kv->type, ctx, "value type")) ||
            (err = rd_value(r, kv, ctx)))
            return err;
    }
    size_t dup;
    err = index_build(&im->kv_tab, &im->kv_cap, (size_t)g->n_kv, g->kv, sizeof(*g->kv),
                      offsetof(struct gguf_kv, key), &dup);
    if (err == -EEXIST)
        return rd_fail(r, "duplicate key '%s'", SHOW(g->kv[dup].key));
    if (err)
        return rd_fail(r, "out of memory for the key index");

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *al = gguf_find(g, "general.alignment");
    if (al) {
        uint64_t a;
        if (gguf_get_u64(g, "general.alignment", &a) < 0)
            return rd_fail(r, "key 'general.alignment': has type %s, want an unsigned integer",
                           gguf_type_names[al->type]);
        if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
            return rd_fail(r, "key 'general.alignment': %llu is not a power of two up to %u",
                           (unsigned long long)a, GGUF_MAX_ALIGNMENT);
        g->alignment = a;
    }
    return 0;
}

/* Bytes of a tensor of type t and shape ne, or an error naming the problem. */
static int tensor_nbytes(struct rd *r, struct gguf_tensor *t)
{
    const char *name = SHOW(t->name);
    uint32_t blk = ggml_type_block_elems(t->type);
    uint32_t bsz = ggml_type_block_bytes(t->type);
    uint64_t n = 1;

    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] == 0)
            return rd_fail(r, "tensor '%s': dimension %u is zero", name, d);
        if (t->ne[d] > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX / t->ne[d])
            return rd_fail(r, "tensor '%s': element count overflows (dimension %u is %llu)",
                           name, d, (unsigned long long)t->ne[d]);
        n *= t->ne[d];
    }
    if (t->ne[0] % blk)
        return rd_fail(r, "tensor '%s': first dimension %llu is not a multiple of the %s block "
                          "size %u",
                       name, (unsigned long long)t->ne[0], ggml_types[t->type].name, blk);
    uint64_t blocks = n / blk;
    if (blocks > UINT64_MAX / bsz)
        return rd_fail(r, "tensor '%s': byte size overflows", name);
    t->nbytes = blocks * bsz;
    return 0;
}

static int parse_tensor_info(struct rd *r, struct gguf_tensor *t, uint64_t i)
{
    char ctx[340];
    uint32_t type;
    int err;

    snprintf(ctx, sizeof(ctx), "tensor %llu: ", (unsigned long long)i);
    if ((err = rd_str(r, &t->name, ctx, "name")))
        return err;
    if (t->name.len == 0)
        return rd_fail(r, "tensor %llu: empty name", (unsigned long long)i);
    snprintf(ctx, sizeof(ctx), "tensor '%s': ", SHOW(t->name));
    if ((err = rd_u32(r, &t->n_dims, ctx, "n_dims")))
        return err;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return rd_fail(r, "%sn_dims %u is not in 1..%d", ctx, t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < t->n_dims && (err = rd_u64(r, &t->ne[d], ctx, "dimension")))
            return err;
    }
    if ((err = rd_u32(r, &type, ctx, "type")))
        return err;
    if (type >= GGML_TYPE_COUNT || !ggml_types[type].name)
        return rd_fail(r, "%sunknown tensor type %u", ctx, type);
    t->type = (enum ggml_type)type;
    if ((err = rd_u64(r, &t->offset, ctx, "data offset")))
        return err;
    return tensor_nbytes(r, t);
}

static int parse_tensors(struct rd *r, struct gguf_impl *im)
{
    struct gguf *g = &im->g;
    int err;

    if (g->n_tensors > rd_left(r) / GGUF_MIN_TENSOR_BYTES)
        return rd_fail(r, "tensor count %llu is more than the %zu bytes left could hold",
                       (unsigned long long)g->n_tensors, rd_left(r));
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof(*g->tensors));
    if (!g->tensors)
        return rd_fail(r, "out of memory for %llu tensors", (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((err = parse_tensor_info(r, &g->tensors[i], i)))
            return err;
    size_t dup;
    err = index_build(&im->t_tab, &im->t_cap, (size_t)g->n_tensors, g->tensors,
                      sizeof(*g->tensors), offsetof(struct gguf_tensor, name), &dup);
    if (err == -EEXIST)
        return rd_fail(r, "duplicate tensor name '%s'", SHOW(g->tensors[dup].name));
    if (err)
        return rd_fail(r, "out of memory for the tensor index");

    /* r->off <= size and alignment <= 1 MiB, so this cannot overflow */
    g->data_off = (r->off + g->alignment - 1) & ~(g->alignment - 1);
    if (!g->n_tensors && g->data_off > r->size)
        g->data_off = r->size; /* no data section: files may end without the padding */
    if (g->data_off > r->size)
        return rd_fail(r, "data section (offset %llu) starts past the end of the file (%zu "
                          "bytes)",
                       (unsigned long long)g->data_off, r->size);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        uint64_t room = r->size - g->data_off;
        if (t->offset % g->alignment)
            return rd_fail(r, "tensor '%s': data offset %llu is not a multiple of the "
                              "alignment %llu",
                           SHOW(t->name), (unsigned long long)t->offset,
                           (unsigned long long)g->alignment);
        if (t->offset > room || t->nbytes > room - t->offset)
            return rd_fail(r, "tensor '%s': data [offset %llu, %llu bytes] runs past the end "
                              "of the file (%zu bytes)",
                           SHOW(t->name),
                           (unsigned long long)(t->offset > room ? t->offset
                                                                 : g->data_off + t->offset),
                           (unsigned long long)t->nbytes, r->size);
        t->data = r->base + g->data_off + t->offset;
    }
    return 0;
}

static struct gguf *gguf_parse(const uint8_t *base, size_t size, const char *path, bool mapped,
                               char *err, size_t errlen)
{
    struct gguf_impl *im = calloc(1, sizeof(*im));
    struct rd r = {.base = base, .size = size, .path = path, .err = err, .errlen = errlen};

    if (err && errlen)
        err[0] = '\0';
    if (!im) {
        rd_fail(&r, "out of memory");
        return NULL;
    }
    struct gguf *g = &im->g;
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    if (!(g->path = strdup(path))) {
        rd_fail(&r, "out of memory");
        goto fail;
    }
    if (parse_header(&r, g) || parse_kvs(&r, im) || parse_tensors(&r, im))
        goto fail;
    return g;
fail:
    g->mapped = false; /* the caller unmaps on failure */
    gguf_close(g);
    return NULL;
}

struct gguf *gguf_open_mem(const void *buf, size_t len, char *err, size_t errlen)
{
    return gguf_parse(buf, len, "<memory>", false, err, errlen);
}

struct gguf *gguf_open(const char *path, char *err, size_t errlen)
{
    struct stat st;
    struct gguf *g;
    void *map;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    if (st.st_size == 0) {
        snprintf(err, errlen, "%s: empty file", path);
        goto fail;
    }
    /* Read-only and private: every worker maps the same file and the page cache holds one
     * copy of the weights. */
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap of %lld bytes failed: %s", path,
                 (long long)st.st_size, strerror(errno));
        goto fail;
    }
    (void)close(fd); /* the mapping keeps the file */
    g = gguf_parse(map, (size_t)st.st_size, path, true, err, errlen);
    if (!g)
        (void)munmap(map, (size_t)st.st_size);
    return g;
fail:
    (void)close(fd); /* already failing */
    return NULL;
}

void gguf_close(struct gguf *g)
{
    if (!g)
        return;
    struct gguf_impl *im = (struct gguf_impl *)g;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free((void *)g->kv[i].arr_str_off);
    free(g->kv);
    free(g->tensors);
    free(im->kv_tab);
    free(im->t_tab);
    if (g->mapped)
        (void)munmap((void *)g->base, g->size);
    free(g->path);
    free(im);
}

/* ---- typed getters ---- */

static bool type_is_signed(enum gguf_type t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

static bool type_is_unsigned(enum gguf_type t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (type_is_unsigned(kv->type)) {
        *out = kv->v.u64;
        return 0;
    }
    if (!type_is_signed(kv->type))
        return -EINVAL;
    if (kv->v.i64 < 0)
        return -ERANGE;
    *out = (uint64_t)kv->v.i64;
    return 0;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
    uint64_t v;
    int err = gguf_get_u64(g, key, &v);
    if (err)
        return err;
    if (v > UINT32_MAX)
        return -ERANGE;
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64)
        return -EINVAL;
    *out = (float)kv->v.f64;
    return 0;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != GGUF_TYPE_BOOL)
        return -EINVAL;
    *out = kv->v.u64 != 0;
    return 0;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    if (!kv)
        return -ENOENT;
    if (kv->type != GGUF_TYPE_STRING)
        return -EINVAL;
    *out = kv->v.str;
    return 0;
}

struct gguf_str gguf_arr_str(const struct gguf_kv *kv, uint64_t i)
{
    struct gguf_str s = {"", 0};
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING || !kv->arr_str_off ||
        i >= kv->arr_n)
        return s;
    const uint8_t *p = (const uint8_t *)kv->arr_data + kv->arr_str_off[i];
    s.len = le_u64(p);
    s.ptr = (const char *)p + 8;
    return s;
}
