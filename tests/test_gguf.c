/* gguf: the real tiny model's known facts, v2/v3 files from the writer, every value type
 * round-tripping, and hostile files (truncations, huge counts, bad types, bad offsets,
 * duplicates) each rejected with a message naming the problem. */
#include "gguf.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "lib/gguf_write.h"

/* A built file: the bytes and the reader's last message. */
struct file {
    uint8_t *buf;
    size_t len;
    char err[512];
};

static int setup_file(void **state)
{
    struct file *f = calloc(1, sizeof(*f));
    *state = f;
    return f ? 0 : -1;
}

static int teardown_file(void **state)
{
    struct file *f = *state;
    free(f->buf);
    free(f);
    return 0;
}

static void finish(struct file *f, struct gguf_writer *w)
{
    free(f->buf);
    f->buf = NULL;
    assert_int_equal(gguf_writer_finish(w, &f->buf, &f->len), 0);
    gguf_writer_destroy(w);
}

/* A small valid file: a few keys, a string array, two tensors with known bytes. */
static void build_small(struct file *f, uint32_t version)
{
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81hi"};
    struct gguf_writer *w = gguf_writer_create(version);
    assert_non_null(w);
    assert_int_equal(gguf_write_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(gguf_write_u32(w, "test.u32", 7), 0);
    assert_int_equal(gguf_write_str(w, "test.str", "hello"), 0);
    assert_int_equal(gguf_write_arr_str(w, "tokenizer.ggml.tokens", toks, 4), 0);
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t ne_a[2] = {4, 2};
    assert_int_equal(gguf_write_tensor(w, "tensor.a", 2, ne_a, GGML_TYPE_F32, a, sizeof(a)), 0);
    uint8_t q[34];
    for (int i = 0; i < 34; i++)
        q[i] = (uint8_t)i;
    uint64_t ne_q[1] = {32};
    assert_int_equal(gguf_write_tensor(w, "tensor.q", 1, ne_q, GGML_TYPE_Q8_0, q, 34), 0);
    finish(f, w);
}

/* Offset of the first occurrence of the NUL-terminated needle in the file. */
static size_t find(const struct file *f, const char *needle)
{
    const void *p = memmem(f->buf, f->len, needle, strlen(needle));
    assert_non_null(p);
    return (size_t)((const uint8_t *)p - f->buf);
}

static void put_u64(struct file *f, size_t off, uint64_t v)
{
    assert_true(off + 8 <= f->len);
    memcpy(f->buf + off, &v, 8);
}

static void put_u32(struct file *f, size_t off, uint32_t v)
{
    assert_true(off + 4 <= f->len);
    memcpy(f->buf + off, &v, 4);
}

/* The file must be refused with a message naming "<memory>" and containing each needle. */
static void expect_reject(struct file *f, const char *needle, const char *needle2)
{
    struct gguf *g = gguf_open_mem(f->buf, f->len, f->err, sizeof(f->err));
    if (g)
        gguf_close(g);
    assert_null(g);
    if (strncmp(f->err, "<memory>: ", 10) || !strstr(f->err, needle) ||
        (needle2 && !strstr(f->err, needle2)))
        fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", f->err, needle,
                 needle2 ? needle2 : "");
}

static const char *shared_path(char *buf, size_t cap, const char *rel)
{
    const char *dir = getenv("KILN_SHARED");
    snprintf(buf, cap, "%s/%s", dir && *dir ? dir : "../shared", rel);
    return buf;
}

/* ---- the real model ---- */

static void test_gguf_stories260k_known_facts(void **state)
{
    (void)state;
    char path[4096], err[512];
    struct gguf *g = gguf_open(shared_path(path, sizeof(path), "models/stories260K.gguf"), err,
                               sizeof(err));
    if (!g)
        fail_msg("%s", err);
    assert_true(g->mapped);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 32);
    assert_int_equal(g->data_off % 32, 0);

    struct gguf_str s;
    uint32_t v;
    float eps;
    assert_int_equal(gguf_get_str(g, "general.architecture", &s), 0);
    assert_true(gguf_str_eq(s, "llama"));
    assert_int_equal(gguf_get_u32(g, "llama.embedding_length", &v), 0);
    assert_int_equal(v, 64);
    assert_int_equal(gguf_get_u32(g, "llama.block_count", &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(gguf_get_u32(g, "llama.attention.head_count", &v), 0);
    assert_int_equal(v, 8);
    assert_int_equal(gguf_get_u32(g, "llama.attention.head_count_kv", &v), 0);
    assert_int_equal(v, 4);
    assert_int_equal(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps), 0);
    assert_true(eps > 0.9e-5f && eps < 1.1e-5f);

    const struct gguf_kv *toks = gguf_find(g, "tokenizer.ggml.tokens");
    assert_non_null(toks);
    assert_int_equal(toks->type, GGUF_TYPE_ARRAY);
    assert_int_equal(toks->arr_type, GGUF_TYPE_STRING);
    assert_int_equal(toks->arr_n, 512);
    assert_true(gguf_str_eq(gguf_arr_str(toks, 1), "<s>"));
    assert_true(gguf_str_eq(gguf_arr_str(toks, 2), "</s>"));

    /* 2 + 1 + 9 per block (attn q/k/v/output, ffn gate/down/up, 2 norms) x 5 blocks */
    assert_int_equal(g->n_tensors, 48);
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        assert_int_equal(t->type, GGML_TYPE_F32);
        assert_true((const uint8_t *)t->data + t->nbytes <= g->base + g->size);
        total += t->nbytes;
    }
    assert_int_equal(total, 1171200);
    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->n_dims, 2);
    assert_int_equal(emb->ne[0], 64);
    assert_int_equal(emb->ne[1], 512);
    assert_int_equal(emb->nbytes, 64 * 512 * 4);
    const struct gguf_tensor *q = gguf_find_tensor(g, "blk.4.attn_k.weight");
    assert_non_null(q);
    assert_int_equal(q->ne[1], 32); /* 4 KV heads x head dim 8 */
    assert_null(gguf_find_tensor(g, "blk.5.attn_k.weight"));
    gguf_close(g);
}

/* ---- files from the writer ---- */

static void check_small(struct file *f, uint32_t version)
{
    struct gguf *g = gguf_open_mem(f->buf, f->len, f->err, sizeof(f->err));
    if (!g)
        fail_msg("%s", f->err);
    assert_false(g->mapped);
    assert_int_equal(g->version, version);
    assert_int_equal(g->n_kv, 4);
    assert_int_equal(g->n_tensors, 2);
    const struct gguf_kv *toks = gguf_find(g, "tokenizer.ggml.tokens");
    assert_non_null(toks);
    assert_int_equal(toks->arr_n, 4);
    assert_true(gguf_str_eq(gguf_arr_str(toks, 3), "\xe2\x96\x81hi"));
    assert_int_equal(gguf_arr_str(toks, 4).len, 0); /* out of range: empty */
    const struct gguf_tensor *a = gguf_find_tensor(g, "tensor.a");
    const struct gguf_tensor *q = gguf_find_tensor(g, "tensor.q");
    assert_non_null(a);
    assert_non_null(q);
    assert_int_equal(a->nbytes, 32);
    assert_int_equal(a->ne[2], 1);
    assert_int_equal(q->nbytes, 34);
    assert_int_equal(q->offset % 32, 0);
    float a7;
    memcpy(&a7, (const uint8_t *)a->data + 28, 4);
    assert_true(a7 == 8.0f);
    assert_int_equal(((const uint8_t *)q->data)[33], 33);
    gguf_close(g);
}

static void test_gguf_v3_file_parses(void **state)
{
    build_small(*state, 3);
    check_small(*state, 3);
}

static void test_gguf_v2_file_parses(void **state)
{
    build_small(*state, 2);
    check_small(*state, 2);
}

static void test_gguf_every_value_type_round_trips(void **state)
{
    struct file *f = *state;
    struct gguf_writer *w = gguf_writer_create(3);
    static const int16_t i16s[] = {-1, 2, -3};
    static const char *const empty[] = {""};
    assert_int_equal(gguf_write_u8(w, "u8", 250), 0);
    assert_int_equal(gguf_write_i8(w, "i8", -100), 0);
    assert_int_equal(gguf_write_u16(w, "u16", 65000), 0);
    assert_int_equal(gguf_write_i16(w, "i16", -32000), 0);
    assert_int_equal(gguf_write_u32(w, "u32", 4000000000u), 0);
    assert_int_equal(gguf_write_i32(w, "i32", -2000000000), 0);
    assert_int_equal(gguf_write_u64(w, "u64", UINT64_MAX), 0);
    assert_int_equal(gguf_write_i64(w, "i64", INT64_MIN), 0);
    assert_int_equal(gguf_write_f32(w, "f32", 0.25f), 0);
    assert_int_equal(gguf_write_f64(w, "f64", -1.5e300), 0);
    assert_int_equal(gguf_write_bool(w, "bool", 1), 0);
    assert_int_equal(gguf_write_strn(w, "str", "a\0b", 3), 0);
    assert_int_equal(gguf_write_arr(w, "i16s", GGUF_TYPE_INT16, i16s, 3), 0);
    assert_int_equal(gguf_write_arr(w, "none", GGUF_TYPE_UINT8, NULL, 0), 0);
    assert_int_equal(gguf_write_arr_str(w, "empty", empty, 1), 0);
    finish(f, w);

    struct gguf *g = gguf_open_mem(f->buf, f->len, f->err, sizeof(f->err));
    if (!g)
        fail_msg("%s", f->err);
    assert_int_equal(gguf_find(g, "u8")->v.u64, 250);
    assert_int_equal(gguf_find(g, "i8")->v.i64, -100);
    assert_int_equal(gguf_find(g, "u16")->v.u64, 65000);
    assert_int_equal(gguf_find(g, "i16")->v.i64, -32000);
    assert_int_equal(gguf_find(g, "u32")->v.u64, 4000000000u);
    assert_int_equal(gguf_find(g, "i32")->v.i64, -2000000000);
    assert_true(gguf_find(g, "u64")->v.u64 == UINT64_MAX);
    assert_true(gguf_find(g, "i64")->v.i64 == INT64_MIN);
    assert_true(gguf_find(g, "f32")->v.f64 == 0.25);
    assert_true(gguf_find(g, "f64")->v.f64 == -1.5e300);
    assert_int_equal(gguf_find(g, "bool")->type, GGUF_TYPE_BOOL);
    const struct gguf_kv *s = gguf_find(g, "str");
    assert_int_equal(s->v.str.len, 3);
    assert_memory_equal(s->v.str.ptr, "a\0b", 3);
    const struct gguf_kv *arr = gguf_find(g, "i16s");
    assert_int_equal(arr->arr_type, GGUF_TYPE_INT16);
    assert_int_equal(arr->arr_n, 3);
    assert_memory_equal(arr->arr_data, i16s, sizeof(i16s));
    assert_int_equal(gguf_find(g, "none")->arr_n, 0);
    assert_int_equal(gguf_arr_str(gguf_find(g, "empty"), 0).len, 0);

    /* getters: conversions, wrong types, ranges, absence */
    uint32_t u32;
    uint64_t u64;
    float f32;
    bool b;
    struct gguf_str str;
    assert_int_equal(gguf_get_u32(g, "u8", &u32), 0);
    assert_int_equal(u32, 250);
    assert_int_equal(gguf_get_u32(g, "u64", &u32), -ERANGE);
    assert_int_equal(gguf_get_u64(g, "i8", &u64), -ERANGE);
    assert_int_equal(gguf_get_u32(g, "str", &u32), -EINVAL);
    assert_int_equal(gguf_get_u32(g, "bool", &u32), -EINVAL);
    assert_int_equal(gguf_get_u32(g, "missing", &u32), -ENOENT);
    assert_int_equal(gguf_get_f32(g, "f64", &f32), 0);
    assert_int_equal(gguf_get_f32(g, "u8", &f32), -EINVAL);
    assert_int_equal(gguf_get_bool(g, "bool", &b), 0);
    assert_true(b);
    assert_int_equal(gguf_get_bool(g, "u8", &b), -EINVAL);
    assert_int_equal(gguf_get_str(g, "str", &str), 0);
    assert_int_equal(gguf_get_str(g, "i16s", &str), -EINVAL);
    assert_null(gguf_find(g, "st"));
    gguf_close(g);
}

static void test_gguf_type_tables_match_ggml(void **state)
{
    (void)state;
    static const struct {
        enum ggml_type t;
        const char *name;
        uint32_t blk, bytes;
    } want[] = {
        {GGML_TYPE_F32, "F32", 1, 4},       {GGML_TYPE_F16, "F16", 1, 2},
        {GGML_TYPE_Q4_0, "Q4_0", 32, 18},   {GGML_TYPE_Q4_1, "Q4_1", 32, 20},
        {GGML_TYPE_Q5_0, "Q5_0", 32, 22},   {GGML_TYPE_Q5_1, "Q5_1", 32, 24},
        {GGML_TYPE_Q8_0, "Q8_0", 32, 34},   {GGML_TYPE_Q8_1, "Q8_1", 32, 36},
        {GGML_TYPE_Q2_K, "Q2_K", 256, 84},  {GGML_TYPE_Q3_K, "Q3_K", 256, 110},
        {GGML_TYPE_Q4_K, "Q4_K", 256, 144}, {GGML_TYPE_Q5_K, "Q5_K", 256, 176},
        {GGML_TYPE_Q6_K, "Q6_K", 256, 210}, {GGML_TYPE_Q8_K, "Q8_K", 256, 292},
        {GGML_TYPE_I8, "I8", 1, 1},         {GGML_TYPE_I16, "I16", 1, 2},
        {GGML_TYPE_I32, "I32", 1, 4},       {GGML_TYPE_I64, "I64", 1, 8},
        {GGML_TYPE_F64, "F64", 1, 8},       {GGML_TYPE_BF16, "BF16", 1, 2},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_string_equal(ggml_type_name(want[i].t), want[i].name);
        assert_int_equal(ggml_type_block_elems(want[i].t), want[i].blk);
        assert_int_equal(ggml_type_block_bytes(want[i].t), want[i].bytes);
    }
    assert_null(ggml_type_name((enum ggml_type)4)); /* Q4_2, removed from ggml */
    assert_int_equal(ggml_type_block_elems((enum ggml_type)4), 0);
    assert_null(ggml_type_name(GGML_TYPE_COUNT));
    assert_string_equal(gguf_type_name(GGUF_TYPE_FLOAT64), "float64");
    assert_null(gguf_type_name(GGUF_TYPE_COUNT));
}

static void test_gguf_nested_arrays_are_skipped(void **state)
{
    struct file *f = *state;
    /* [[u8 7, 9], ["z"]] */
    static const uint8_t body[] = {9, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,                 /* outer */
                                   0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 7, 9,           /* [u8] */
                                   8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                   'z'};
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_write_raw_kv(w, "nested", GGUF_TYPE_ARRAY, body, sizeof(body)), 0);
    assert_int_equal(gguf_write_u32(w, "after", 5), 0);
    finish(f, w);
    struct gguf *g = gguf_open_mem(f->buf, f->len, f->err, sizeof(f->err));
    if (!g)
        fail_msg("%s", f->err);
    const struct gguf_kv *kv = gguf_find(g, "nested");
    assert_int_equal(kv->arr_type, GGUF_TYPE_ARRAY);
    assert_int_equal(kv->arr_n, 2);
    assert_null(kv->arr_data);
    assert_int_equal(gguf_find(g, "after")->v.u64, 5);
    gguf_close(g);
}

/* ---- hostile files ---- */

static void test_gguf_every_truncation_is_rejected(void **state)
{
    struct file *f = *state;
    build_small(f, 3);
    size_t full = f->len;
    /* each prefix in its own exact-size allocation, so ASan sees a read past its end */
    for (size_t len = 0; len < full; len++) {
        uint8_t *p = malloc(len ? len : 1);
        assert_non_null(p);
        memcpy(p, f->buf, len);
        struct gguf *g = gguf_open_mem(p, len, f->err, sizeof(f->err));
        if (g)
            fail_msg("prefix of %zu of %zu bytes parsed", len, full);
        assert_true(strncmp(f->err, "<memory>: ", 10) == 0);
        free(p);
    }
}

static void test_gguf_bad_magic_is_rejected(void **state)
{
    struct file *f = *state;
    build_small(f, 3);
    f->buf[0] = 'X';
    expect_reject(f, "not a GGUF file", NULL);
}

static void test_gguf_version_1_and_unknown_versions_are_rejected(void **state)
{
    struct file *f = *state;
    build_small(f, 3);
    put_u32(f, 4, 1);
    expect_reject(f, "version 1 is not supported", NULL);
    put_u32(f, 4, 4);
    expect_reject(f, "unsupported GGUF version 4", NULL);
    put_u32(f, 4, 0x03000000u);
    expect_reject(f, "big-endian", NULL);
}

static void test_gguf_huge_counts_are_rejected_before_allocating(void **state)
{
    struct file *f = *state;
    build_small(f, 3);
    put_u64(f, 16, UINT64_MAX);
    expect_reject(f, "metadata count 18446744073709551615", "bytes left");
    build_small(f, 3);
    put_u64(f, 8, 1ull << 40);
    expect_reject(f, "tensor count 1099511627776", "bytes left");
}

static void test_gguf_huge_string_length_is_rejected(void **state)
{
    struct file *f = *state;
    build_small(f, 3);
    put_u64(f, find(f, "test.str") + 8 + 4, UINT64_MAX - 3);
    expect_reject(f, "key 'test.str'", "runs past the end of the file");
}

static void test_gguf_huge_array_counts_are_rejected(void **state)
{
    struct file *f = *state;
    build_small(f, 3);
    /* tokens: key, type u32, element type u32, count u64 */
    size_t at = find(f, "tokenizer.ggml.tokens") + strlen("tokenizer.ggml.tokens") + 8;
    put_u64(f, at, 1ull << 61);
    expect_reject(f, "key 'tokenizer.ggml.tokens'", "strings is more than");

    struct gguf_writer *w = gguf_writer_create(3);
    uint32_t v[2] = {1, 2};
    assert_int_equal(gguf_write_arr(w, "arr", GGUF_TYPE_UINT32, v, 2), 0);
    finish(f, w);
    put_u64(f, find(f, "arr") + 3 + 8, UINT64_MAX / 2);
    expect_reject(f, "key 'arr'", "runs past the end of the file");
}

static void test_gguf_bad_value_types_are_rejected(void **state)
{
    struct file *f = *state;
    build_small(f, 3);
    put_u32(f, find(f, "test.u32") + 8, 13);
    expect_reject(f, "key 'test.u32'", "unknown value type 13");
    build_small(f, 3);
    put_u32(f, find(f, "tokenizer.ggml.tokens") + strlen("tokenizer.ggml.tokens") + 4,
            0xffffffffu);
    expect_reject(f, "array element type: unknown value type 4294967295", NULL);
}

static void test_gguf_deep_nesting_is_rejected(void **state)
{
    struct file *f = *state;
    uint8_t body[12 * 20];
    for (int i = 0; i < 20; i++) { /* 20 levels of [array x 1] */
        uint32_t t = GGUF_TYPE_ARRAY;
        uint64_t n = 1;
        memcpy(body + 12 * i, &t, 4);
        memcpy(body + 12 * i + 4, &n, 8);
    }
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_write_raw_kv(w, "deep", GGUF_TYPE_ARRAY, body, sizeof(body)), 0);
    finish(f, w);
    expect_reject(f, "key 'deep'", "nested deeper");
}

/* A one-tensor file with the given info fields. */
static void build_tensor(struct file *f, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                         size_t nbytes)
{
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_write_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(gguf_write_tensor(w, "blk.0.attn_q.weight", n_dims, ne, type, NULL, nbytes),
                     0);
    finish(f, w);
}

static void test_gguf_bad_tensor_infos_are_rejected(void **state)
{
    struct file *f = *state;
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    build_tensor(f, 2, ne, 99, 256);
    expect_reject(f, "tensor 'blk.0.attn_q.weight'", "unknown tensor type 99");
    build_tensor(f, 2, ne, 4, 256);
    expect_reject(f, "unknown tensor type 4", NULL);
    build_tensor(f, 5, ne, GGML_TYPE_F32, 256);
    expect_reject(f, "tensor 'blk.0.attn_q.weight'", "n_dims 5 is not in 1..4");
    build_tensor(f, 0, ne, GGML_TYPE_F32, 256);
    expect_reject(f, "n_dims 0", NULL);

    uint64_t zero[2] = {32, 0};
    build_tensor(f, 2, zero, GGML_TYPE_F32, 0);
    expect_reject(f, "tensor 'blk.0.attn_q.weight'", "dimension 1 is zero");
    uint64_t big[3] = {1ull << 32, 1ull << 32, 4};
    build_tensor(f, 3, big, GGML_TYPE_F32, 0);
    expect_reject(f, "tensor 'blk.0.attn_q.weight'", "overflows");
    uint64_t huge[1] = {UINT64_MAX};
    build_tensor(f, 1, huge, GGML_TYPE_I8, 0);
    expect_reject(f, "overflows", NULL);
    uint64_t odd[2] = {33, 2};
    build_tensor(f, 2, odd, GGML_TYPE_Q8_0, 0);
    expect_reject(f, "first dimension 33 is not a multiple of the Q8_0 block size 32", NULL);
}

static void test_gguf_tensor_data_past_the_end_is_rejected(void **state)
{
    struct file *f = *state;
    uint64_t ne[2] = {64, 64};
    build_tensor(f, 2, ne, GGML_TYPE_F32, 1000); /* 16384 bytes announced, 1000 written */
    expect_reject(f, "tensor 'blk.0.attn_q.weight': data [offset", "16384 bytes] runs past the "
                                                                  "end of the file");
    build_tensor(f, 2, ne, GGML_TYPE_F32, 16384);
    size_t off = find(f, "blk.0.attn_q.weight") + strlen("blk.0.attn_q.weight") + 4 + 16 + 4;
    put_u64(f, off, UINT64_MAX - 31); /* aligned, and adding it to anything overflows */
    expect_reject(f, "runs past the end of the file", NULL);
}

static void test_gguf_misaligned_tensor_offset_is_rejected(void **state)
{
    struct file *f = *state;
    uint64_t ne[1] = {64};
    build_tensor(f, 1, ne, GGML_TYPE_F32, 512);
    size_t off = find(f, "blk.0.attn_q.weight") + strlen("blk.0.attn_q.weight") + 4 + 8 + 4;
    put_u64(f, off, 4);
    expect_reject(f, "data offset 4 is not a multiple of the alignment 32", NULL);
}

static void test_gguf_bad_alignment_is_rejected(void **state)
{
    struct file *f = *state;
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_write_u32(w, "general.alignment", 48), 0);
    finish(f, w);
    expect_reject(f, "'general.alignment': 48 is not a power of two", NULL);
    w = gguf_writer_create(3);
    assert_int_equal(gguf_write_u32(w, "general.alignment", 0), 0);
    finish(f, w);
    expect_reject(f, "0 is not a power of two", NULL);
    w = gguf_writer_create(3);
    assert_int_equal(gguf_write_u64(w, "general.alignment", 1ull << 40), 0);
    finish(f, w);
    expect_reject(f, "not a power of two up to", NULL);
    w = gguf_writer_create(3);
    assert_int_equal(gguf_write_str(w, "general.alignment", "32"), 0);
    finish(f, w);
    expect_reject(f, "'general.alignment': has type string", NULL);
}

static void test_gguf_custom_alignment_lays_out_data(void **state)
{
    struct file *f = *state;
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_writer_set_alignment(w, 128, 1), 0);
    uint64_t ne[1] = {3};
    assert_int_equal(gguf_write_tensor(w, "a", 1, ne, GGML_TYPE_F32, NULL, 12), 0);
    assert_int_equal(gguf_write_tensor(w, "b", 1, ne, GGML_TYPE_F32, NULL, 12), 0);
    finish(f, w);
    struct gguf *g = gguf_open_mem(f->buf, f->len, f->err, sizeof(f->err));
    if (!g)
        fail_msg("%s", f->err);
    assert_int_equal(g->alignment, 128);
    assert_int_equal(g->data_off % 128, 0);
    assert_int_equal(gguf_find_tensor(g, "b")->offset, 128);
    gguf_close(g);
}

static void test_gguf_duplicates_are_rejected(void **state)
{
    struct file *f = *state;
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_write_u32(w, "llama.block_count", 1), 0);
    assert_int_equal(gguf_write_str(w, "general.name", "x"), 0);
    assert_int_equal(gguf_write_u32(w, "llama.block_count", 2), 0);
    finish(f, w);
    expect_reject(f, "duplicate key 'llama.block_count'", NULL);

    w = gguf_writer_create(3);
    uint64_t ne[1] = {8};
    assert_int_equal(gguf_write_tensor(w, "output.weight", 1, ne, GGML_TYPE_F32, NULL, 32), 0);
    assert_int_equal(gguf_write_tensor(w, "output.weight", 1, ne, GGML_TYPE_F32, NULL, 32), 0);
    finish(f, w);
    expect_reject(f, "duplicate tensor name 'output.weight'", NULL);
}

static void test_gguf_names_in_messages_are_escaped(void **state)
{
    struct file *f = *state;
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_write_raw_kv(w, "bad\nkey'", 77, NULL, 0), 0);
    finish(f, w);
    expect_reject(f, "key 'bad\\x0akey\\x27'", "unknown value type 77");
    w = gguf_writer_create(3);
    assert_int_equal(gguf_write_strn(w, "", "x", 1), 0);
    finish(f, w);
    expect_reject(f, "empty key", NULL);
}

static void test_gguf_open_names_the_file(void **state)
{
    struct file *f = *state;
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct gguf *g = gguf_open(path, f->err, sizeof(f->err));
    assert_null(g);
    assert_true(strstr(f->err, path) && strstr(f->err, "empty file"));

    build_small(f, 3);
    f->len -= 1;
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(f->buf, 1, f->len, fp), f->len);
    fclose(fp);
    g = gguf_open(path, f->err, sizeof(f->err));
    assert_null(g);
    assert_true(strncmp(f->err, path, strlen(path)) == 0);
    assert_non_null(strstr(f->err, "tensor 'tensor.q': data"));
    unlink(path);

    g = gguf_open("/nonexistent/model.gguf", f->err, sizeof(f->err));
    assert_null(g);
    assert_non_null(strstr(f->err, "/nonexistent/model.gguf: cannot open"));
}

static void test_gguf_writer_file_round_trips_through_open(void **state)
{
    struct file *f = *state;
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct gguf_writer *w = gguf_writer_create(3);
    assert_int_equal(gguf_write_str(w, "general.architecture", "llama"), 0);
    uint64_t ne[2] = {256, 2};
    assert_int_equal(gguf_write_tensor(w, "q4k", 2, ne, GGML_TYPE_Q4_K, NULL,
                                       gguf_tensor_bytes(GGML_TYPE_Q4_K, 2, ne)),
                     0);
    assert_int_equal(gguf_writer_write_file(w, path), 0);
    gguf_writer_destroy(w);
    struct gguf *g = gguf_open(path, f->err, sizeof(f->err));
    if (!g)
        fail_msg("%s", f->err);
    assert_true(g->mapped);
    assert_int_equal(gguf_find_tensor(g, "q4k")->nbytes, 2 * 144);
    gguf_close(g);
    unlink(path);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup_file, teardown_file)
    const struct CMUnitTest tests[] = {
        T(test_gguf_stories260k_known_facts),
        T(test_gguf_v3_file_parses),
        T(test_gguf_v2_file_parses),
        T(test_gguf_every_value_type_round_trips),
        T(test_gguf_type_tables_match_ggml),
        T(test_gguf_nested_arrays_are_skipped),
        T(test_gguf_every_truncation_is_rejected),
        T(test_gguf_bad_magic_is_rejected),
        T(test_gguf_version_1_and_unknown_versions_are_rejected),
        T(test_gguf_huge_counts_are_rejected_before_allocating),
        T(test_gguf_huge_string_length_is_rejected),
        T(test_gguf_huge_array_counts_are_rejected),
        T(test_gguf_bad_value_types_are_rejected),
        T(test_gguf_deep_nesting_is_rejected),
        T(test_gguf_bad_tensor_infos_are_rejected),
        T(test_gguf_tensor_data_past_the_end_is_rejected),
        T(test_gguf_misaligned_tensor_offset_is_rejected),
        T(test_gguf_bad_alignment_is_rejected),
        T(test_gguf_custom_alignment_lays_out_data),
        T(test_gguf_duplicates_are_rejected),
        T(test_gguf_names_in_messages_are_escaped),
        T(test_gguf_open_names_the_file),
        T(test_gguf_writer_file_round_trips_through_open),
    };
#undef T
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
