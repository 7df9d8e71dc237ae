/* libFuzzer target for the GGUF reader: parse any bytes, and on success touch every key,
 * value, string-array element and tensor byte range the reader hands out, so ASan sees any
 * pointer that escapes the input. Built by `make fuzz` (clang), never by `make test`.
 * Built with -DFUZZ_GGUF_SEEDS instead (plain cc, with libtest), it writes a seed corpus. */
#include "gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifndef FUZZ_GGUF_SEEDS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Fold bytes into a sink the compiler cannot drop. */
static uint64_t touch(const void *p, uint64_t n)
{
    const uint8_t *b = p;
    uint64_t h = n;
    if (n) /* first and last byte: a pointer or length off by one shows here */
        h += b[0] * 31u + b[n - 1];
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    volatile uint64_t sink = 0;
    struct gguf *g = gguf_open_mem(data, size, err, sizeof(err));

    if (!g) {
        /* the message must be a terminated string naming the input */
        if (strncmp(err, "<memory>: ", 10) != 0)
            __builtin_trap();
        return 0;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        sink += touch(kv->key.ptr, kv->key.len);
        if (gguf_find(g, "x") == kv && !gguf_str_eq(kv->key, "x"))
            __builtin_trap();
        if (kv->type == GGUF_TYPE_STRING)
            sink += touch(kv->v.str.ptr, kv->v.str.len);
        if (kv->type != GGUF_TYPE_ARRAY)
            continue;
        if (kv->arr_type == GGUF_TYPE_STRING) {
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                struct gguf_str s = gguf_arr_str(kv, j);
                sink += touch(s.ptr, s.len);
            }
        } else if (kv->arr_data && kv->arr_n) {
            static const uint8_t esz[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
            sink += touch(kv->arr_data, kv->arr_n * esz[kv->arr_type]);
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        sink += touch(t->name.ptr, t->name.len);
        sink += touch(t->data, t->nbytes);
        if (gguf_find_tensor(g, "token_embd.weight") == NULL)
            sink++;
    }
    uint32_t u32;
    float f;
    struct gguf_str s;
    sink += gguf_get_u32(g, "general.alignment", &u32) + gguf_get_f32(g, "a", &f) +
            gguf_get_str(g, "general.architecture", &s);
    (void)sink;
    gguf_close(g);
    return 0;
}

#else /* FUZZ_GGUF_SEEDS: write small valid files of every shape into the corpus dir */

#include <stdlib.h>

#include "lib/gguf_write.h"

static int save(struct gguf_writer *w, const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int err = gguf_writer_write_file(w, path);
    gguf_writer_destroy(w);
    if (err)
        fprintf(stderr, "fuzz seeds: %s: %s\n", path, strerror(-err));
    return err;
}

/* Every value type, arrays of each kind, a nested array, tensors of block types. */
static int seed_all_types(const char *dir, uint32_t version)
{
    struct gguf_writer *w = gguf_writer_create(version);
    static const char *const strs[] = {"a", "", "<s>", "\xe2\x96\x81the"};
    static const int32_t ints[] = {1, -2, 3};
    static const double f64s[] = {0.5, -1e300};
    /* array of 2 arrays: [u8 x 2], [string x 1] */
    static const uint8_t nested[] = {0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7, 9,
                                     8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0,
                                     0, 0, 0, 0, 0, 0, 'z'};
    uint8_t body[4 + 8 + sizeof(nested)];
    uint32_t at = GGUF_TYPE_ARRAY;
    uint64_t n = 2;
    memcpy(body, &at, 4);
    memcpy(body + 4, &n, 8);
    memcpy(body + 12, nested, sizeof(nested));

    gguf_write_str(w, "general.architecture", "llama");
    gguf_write_u8(w, "u8", 200);
    gguf_write_i8(w, "i8", -5);
    gguf_write_u16(w, "u16", 60000);
    gguf_write_i16(w, "i16", -30000);
    gguf_write_u32(w, "llama.block_count", 2);
    gguf_write_i32(w, "i32", -7);
    gguf_write_u64(w, "u64", 1ull << 40);
    gguf_write_i64(w, "i64", -(1ll << 40));
    gguf_write_f32(w, "f32", 1e-5f);
    gguf_write_f64(w, "f64", 3.25);
    gguf_write_bool(w, "bool", 1);
    gguf_write_arr_str(w, "tokenizer.ggml.tokens", strs, 4);
    gguf_write_arr(w, "i32s", GGUF_TYPE_INT32, ints, 3);
    gguf_write_arr(w, "f64s", GGUF_TYPE_FLOAT64, f64s, 2);
    gguf_write_raw_kv(w, "nested", GGUF_TYPE_ARRAY, body, sizeof(body));
    uint64_t ne[2] = {32, 2};
    gguf_write_tensor(w, "token_embd.weight", 2, ne, GGML_TYPE_F32, NULL,
                      gguf_tensor_bytes(GGML_TYPE_F32, 2, ne));
    gguf_write_tensor(w, "q8", 2, ne, GGML_TYPE_Q8_0, NULL,
                      gguf_tensor_bytes(GGML_TYPE_Q8_0, 2, ne));
    uint64_t nk[1] = {256};
    gguf_write_tensor(w, "q4k", 1, nk, GGML_TYPE_Q4_K, NULL,
                      gguf_tensor_bytes(GGML_TYPE_Q4_K, 1, nk));
    return save(w, dir, version == 2 ? "all_types_v2.gguf" : "all_types_v3.gguf");
}

static int seed_aligned(const char *dir)
{
    struct gguf_writer *w = gguf_writer_create(3);
    gguf_writer_set_alignment(w, 64, 1);
    uint64_t ne[4] = {4, 3, 2, 1};
    gguf_write_tensor(w, "a", 4, ne, GGML_TYPE_F16, NULL, gguf_tensor_bytes(GGML_TYPE_F16, 4, ne));
    gguf_write_tensor(w, "b", 1, ne, GGML_TYPE_I8, NULL, 4);
    return save(w, dir, "aligned64.gguf");
}

/* stories260K's metadata and first tensors, so the fuzzer starts from a real layout. */
static int seed_from_file(const char *dir, const char *path)
{
    char err[512];
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "fuzz seeds: skipping %s\n", err);
        return 0;
    }
    struct gguf_writer *w = gguf_writer_create(g->version);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.ptr);
        /* the raw value bytes run from after the type field to the next key */
        const uint8_t *start = (const uint8_t *)kv->key.ptr + kv->key.len + 4;
        const uint8_t *end = i + 1 < g->n_kv ? (const uint8_t *)g->kv[i + 1].key.ptr - 8
                             : g->n_tensors  ? (const uint8_t *)g->tensors[0].name.ptr - 8
                                             : start;
        if (kv->type == GGUF_TYPE_ARRAY && kv->arr_n > 16)
            continue; /* keep seeds small: drop the vocabulary arrays */
        gguf_write_raw_kv(w, key, kv->type, start, (size_t)(end - start));
    }
    for (uint64_t i = 0; i < g->n_tensors && i < 4; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.ptr);
        uint64_t ne[4] = {t->ne[0], t->n_dims > 1 ? 2 : 1, 1, 1};
        gguf_write_tensor(w, name, t->n_dims, ne, t->type, t->data,
                          gguf_tensor_bytes(t->type, t->n_dims, ne));
    }
    gguf_close(g);
    return save(w, dir, "stories_head.gguf");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [MODEL.gguf]\n", argv[0]);
        return 2;
    }
    int err = seed_all_types(argv[1], 3) || seed_all_types(argv[1], 2) ||
              seed_aligned(argv[1]) || (argc > 2 && seed_from_file(argv[1], argv[2]));
    return err ? 1 : 0;
}

#endif
