/* Tokenizer tests: the conformance cases of ../shared/vocab (exact ids, and decoding back),
 * the byte tokenizer, and behaviours checked on tiny vocabularies built here as GGUF bytes:
 * special-token parsing on and off, BOS/EOS, end-of-generation ids, byte fallback, rejected
 * models and pre-tokenizers, and 100 KB inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

/* ---- helpers ---- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b)
                free(buf);
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static void shared_path(char *out, size_t cap, const char *name)
{
    const char *dir = getenv("KILN_SHARED");
    snprintf(out, cap, "%s/vocab/%s", dir && *dir ? dir : "../shared", name);
}

/* The decoded text of ids, as a client sees it (SentencePiece's first space dropped). */
static size_t decode_all(const struct tokenizer *t, const uint32_t *ids, size_t n, char *out,
                         size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        int k = tokenizer_piece(t, ids[i], false, out + len, cap - len);
        assert_true(k >= 0);
        assert_true((size_t)k <= cap - len);
        len += (size_t)k;
    }
    if (tokenizer_strips_leading_space(t) && len > 0 && out[0] == ' ') {
        memmove(out, out + 1, len - 1);
        len--;
    }
    return len;
}

static long encode(const struct tokenizer *t, const char *s, unsigned flags, uint32_t *ids,
                   size_t cap)
{
    long n = tokenizer_encode(t, s, strlen(s), flags, ids, cap);
    assert_true(n >= 0);
    assert_true((size_t)n <= cap);
    return n;
}

static bool contains(const uint32_t *ids, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* ---- conformance with ../shared/vocab ---- */

#define SEP "\n__ggml_vocab_test__\n"

/* Each case of the .inp is the text before a separator line; the .out has one line of ids
 * per case. Cases whose decoding is known not to give the input back are listed in lossy. */
static void run_conformance(const char *name, const int *lossy, size_t n_lossy)
{
    char path[1024], err[256];
    size_t inp_len, out_len;
    shared_path(path, sizeof(path), name);
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "%s\n", err);
        fail_msg("cannot open %s", path);
    }
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    if (!t)
        fail_msg("%s: %s", path, err);
    gguf_close(g);
    snprintf(path + strlen(path), sizeof(path) - strlen(path), ".inp");
    char *inp = read_file(path, &inp_len);
    assert_non_null(inp);
    path[strlen(path) - 4] = '\0';
    snprintf(path + strlen(path), sizeof(path) - strlen(path), ".out");
    char *out = read_file(path, &out_len);
    assert_non_null(out);

    size_t n_cases = 0, n_pass = 0, n_decoded = 0;
    char *p = inp, *line = out;
    uint32_t *ids = malloc(65536 * sizeof(*ids));
    char *dec = malloc(1 << 20);
    assert_non_null(ids);
    assert_non_null(dec);
    for (char *sep; (sep = strstr(p, SEP)); p = sep + strlen(SEP), n_cases++) {
        size_t len = (size_t)(sep - p);
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        const char *want_line = line;
        uint32_t want[4096];
        size_t n_want = 0;
        for (char *q = line, *end;; q = end) {
            unsigned long v = strtoul(q, &end, 10);
            if (end == q)
                break;
            want[n_want++] = (uint32_t)v;
        }
        line = eol + 1;

        long n = tokenizer_encode(t, p, len, 0, ids, 65536);
        assert_true(n >= 0 && n <= 65536);
        bool ok = (size_t)n == n_want && memcmp(ids, want, n_want * sizeof(*ids)) == 0;
        if (ok) {
            n_pass++;
        } else {
            fprintf(stderr, "%s case %zu '%.*s': got", name, n_cases, (int)len, p);
            for (long i = 0; i < n; i++)
                fprintf(stderr, " %u", ids[i]);
            fprintf(stderr, ", want %s\n", want_line);
        }
        bool expect_lossless = true;
        for (size_t i = 0; i < n_lossy; i++)
            if ((size_t)lossy[i] == n_cases)
                expect_lossless = false;
        size_t dl = decode_all(t, ids, (size_t)n, dec, 1 << 20);
        bool same = dl == len && memcmp(dec, p, len) == 0;
        if (same != expect_lossless)
            fprintf(stderr, "%s case %zu '%.*s': decodes to '%.*s'%s\n", name, n_cases,
                    (int)len, p, (int)dl, dec, same ? " (listed as lossy)" : "");
        assert_true(same == expect_lossless);
        n_decoded += same;
    }
    printf("tokenizer conformance %s: %zu of %zu cases encode exactly, %zu decode back\n", name,
           n_pass, n_cases, n_decoded);
    assert_true(n_cases > 0);
    assert_int_equal(n_pass, n_cases);
    assert_true(*line == '\0');
    free(dec);
    free(ids);
    free(out);
    free(inp);
    tokenizer_destroy(t);
}

static void test_tokenizer_llama_spm_conformance(void **state)
{
    (void)state;
    run_conformance("ggml-vocab-llama-spm.gguf", NULL, 0);
}

static void test_tokenizer_gpt2_conformance(void **state)
{
    (void)state;
    run_conformance("ggml-vocab-gpt-2.gguf", NULL, 0);
}

/* ---- the byte tokenizer ---- */

static void test_tokenizer_bytes_roundtrip(void **state)
{
    (void)state;
    struct tokenizer *t = tokenizer_create_bytes();
    uint32_t ids[8];
    char buf[16];
    const uint32_t *eog;
    assert_non_null(t);
    assert_int_equal(tokenizer_n_vocab(t), 257);
    assert_int_equal(tokenizer_encode(t, "h\xc3\xa9", 3, TOKENIZER_ADD_SPECIAL, ids, 8), 3);
    assert_int_equal(ids[0], 'h');
    assert_int_equal(ids[1], 0xc3);
    assert_int_equal(ids[2], 0xa9);
    assert_int_equal(tokenizer_encode(t, "abcdef", 6, 0, ids, 2), 6); /* count beyond cap */
    assert_int_equal(tokenizer_piece(t, 0xc3, false, buf, sizeof(buf)), 1);
    assert_int_equal((unsigned char)buf[0], 0xc3);
    assert_int_equal(tokenizer_piece(t, TOKENIZER_BYTES_EOS, false, buf, sizeof(buf)), 0);
    assert_true(tokenizer_piece(t, TOKENIZER_BYTES_EOS, true, buf, sizeof(buf)) > 0);
    assert_int_equal(tokenizer_piece(t, 257, false, buf, sizeof(buf)), -EINVAL);
    assert_int_equal(tokenizer_eog_ids(t, &eog), 1);
    assert_int_equal(eog[0], TOKENIZER_BYTES_EOS);
    assert_int_equal(tokenizer_bos_id(t), -1);
    assert_false(tokenizer_strips_leading_space(t));
    tokenizer_destroy(t);
}

/* ---- encoding from a point on (tokenizer_encode_masked_from) ---- */

/* For every byte of text: either -ESRCH, or tokens that end the whole encoding, whose
 * head's pieces (when exact: check_head) are text[0, from). Returns how many points took. */
static size_t from_points(const struct tokenizer *t, const char *text, unsigned flags,
                          bool check_head)
{
    size_t len = strlen(text), took = 0;
    uint32_t full[512], out[512];
    long nf = tokenizer_encode_masked(t, text, len, flags, NULL, 0, full, 512);
    assert_true(nf > 0 && nf <= 512);
    for (size_t from = 0; from <= len; from++) {
        long n = tokenizer_encode_masked_from(t, text, len, flags, NULL, 0, from, out, 512);
        if (n == -ESRCH)
            continue;
        assert_true(n >= 0 && n <= nf);
        assert_memory_equal(out, full + (nf - n), (size_t)n * sizeof(uint32_t));
        if (check_head) {
            char buf[1024];
            size_t at = 0;
            for (long i = 0; i < nf - n; i++) {
                int k = tokenizer_piece(t, full[i], true, buf + at, sizeof(buf) - at);
                assert_true(k >= 0);
                at += (size_t)k;
            }
            assert_int_equal(at, from);
            assert_memory_equal(buf, text, from);
        }
        took++;
    }
    return took;
}

static void test_tokenizer_encode_from_starts_afresh_only_where_the_encoding_does(void **state)
{
    char path[512], err[256];
    uint32_t out[64];
    const char *text = "Hello world<|endoftext|>user: hi there";
    size_t len = strlen(text), sp = strlen("Hello world");
    (void)state;

    shared_path(path, sizeof(path), "ggml-vocab-gpt-2.gguf");
    struct gguf *g = gguf_open(path, err, sizeof(err));
    assert_non_null(g);
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    assert_non_null(t);
    long eot = tokenizer_find_special(t, "<|endoftext|>");
    assert_true(eot >= 0);
    unsigned f = TOKENIZER_PARSE_SPECIAL | TOKENIZER_ADD_SPECIAL;
    /* a word's start, a special token's start and end; not inside a word or a special */
    assert_true(tokenizer_encode_masked_from(t, text, len, f, NULL, 0, 5, out, 64) > 0);
    long n = tokenizer_encode_masked_from(t, text, len, f, NULL, 0, sp, out, 64);
    assert_true(n > 0);
    assert_int_equal(out[0], (uint32_t)eot);
    assert_true(tokenizer_encode_masked_from(t, text, len, f, NULL, 0, sp + 13, out, 64) > 0);
    assert_int_equal(tokenizer_encode_masked_from(t, text, len, f, NULL, 0, 2, out, 64), -ESRCH);
    assert_int_equal(tokenizer_encode_masked_from(t, text, len, f, NULL, 0, sp + 2, out, 64),
                     -ESRCH);
    /* the special text inside a plain range is ordinary characters: words, no token */
    struct tokenizer_span plain = {sp, 13};
    n = tokenizer_encode_masked_from(t, text, len, f, &plain, 1, sp, out, 64);
    assert_true(n > 0);
    assert_int_not_equal(out[0], (uint32_t)eot);
    assert_int_equal(tokenizer_encode_masked_from(t, text, len, f, &plain, 1, sp + 4, out, 64),
                     -ESRCH);
    /* every point it takes ends the whole encoding, and the pieces before are the bytes */
    assert_true(from_points(t, text, f, true) >= 8);
    assert_true(from_points(t, "  two  spaces\n\nand\tmore 123 456!? ok", f, true) >= 6);
    tokenizer_destroy(t);
    gguf_close(g);

    /* SentencePiece: no point inside a run, only at special tokens */
    shared_path(path, sizeof(path), "ggml-vocab-llama-spm.gguf");
    assert_non_null(g = gguf_open(path, err, sizeof(err)));
    assert_non_null(t = tokenizer_create_gguf(g, err, sizeof(err)));
    text = "Hello world</s>user: hi";
    len = strlen(text);
    assert_int_equal(tokenizer_encode_masked_from(t, text, len, f, NULL, 0, 5, out, 64), -ESRCH);
    n = tokenizer_encode_masked_from(t, text, len, f, NULL, 0, sp, out, 64);
    assert_true(n > 0);
    assert_int_equal(out[0], 2); /* </s>, and no BOS */
    assert_int_equal(from_points(t, text, f, false), 4); /* 0, at and after </s>, the end */
    tokenizer_destroy(t);
    gguf_close(g);

    /* the byte tokenizer: every byte */
    assert_non_null(t = tokenizer_create_bytes());
    assert_int_equal(tokenizer_encode_masked_from(t, "abc", 3, f, NULL, 0, 1, out, 64), 2);
    assert_int_equal(out[0], 'b');
    assert_int_equal(from_points(t, "abc", f, true), 4);
    tokenizer_destroy(t);
}

/* ---- tiny vocabularies as GGUF bytes ---- */

struct gbuf {
    unsigned char *p;
    size_t n, cap;
    uint64_t n_kv;
};

static void g_put(struct gbuf *b, const void *src, size_t len)
{
    if (b->n + len > b->cap) {
        b->cap = (b->n + len) * 2 + 1024;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, len);
    b->n += len;
}

static void g_u32(struct gbuf *b, uint32_t v)
{
    g_put(b, &v, 4);
}

static void g_u64(struct gbuf *b, uint64_t v)
{
    g_put(b, &v, 8);
}

static void g_str(struct gbuf *b, const char *s)
{
    g_u64(b, strlen(s));
    g_put(b, s, strlen(s));
}

static void g_key(struct gbuf *b, const char *key, uint32_t type)
{
    g_str(b, key);
    g_u32(b, type);
    b->n_kv++;
}

static void kv_str(struct gbuf *b, const char *key, const char *v)
{
    g_key(b, key, GGUF_TYPE_STRING);
    g_str(b, v);
}

static void kv_u32(struct gbuf *b, const char *key, uint32_t v)
{
    g_key(b, key, GGUF_TYPE_UINT32);
    g_u32(b, v);
}

static void kv_bool(struct gbuf *b, const char *key, bool v)
{
    unsigned char c = v;
    g_key(b, key, GGUF_TYPE_BOOL);
    g_put(b, &c, 1);
}

static void kv_arr_head(struct gbuf *b, const char *key, uint32_t type, size_t n)
{
    g_key(b, key, GGUF_TYPE_ARRAY);
    g_u32(b, type);
    g_u64(b, n);
}

/* A vocabulary under construction: texts, types, scores. */
struct vocab {
    char *text[600];
    int32_t type[600];
    float score[600];
    size_t n;
};

static uint32_t v_add(struct vocab *v, const char *text, int32_t type, float score)
{
    assert_true(v->n < 600);
    v->text[v->n] = strdup(text);
    v->type[v->n] = type;
    v->score[v->n] = score;
    return (uint32_t)v->n++;
}

static void v_free(struct vocab *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->text[i]);
}

/* The GGUF bytes: header, then every key; the caller adds more keys with kv_* first. */
static void v_write(struct gbuf *kvs, const struct vocab *v)
{
    kv_arr_head(kvs, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, v->n);
    for (size_t i = 0; i < v->n; i++)
        g_str(kvs, v->text[i]);
    kv_arr_head(kvs, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->n);
    g_put(kvs, v->type, v->n * 4);
    kv_arr_head(kvs, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->n);
    g_put(kvs, v->score, v->n * 4);
}

static struct tokenizer *open_tiny(const struct gbuf *kvs, char *err, size_t errlen)
{
    struct gbuf f = {0};
    g_put(&f, "GGUF", 4);
    g_u32(&f, 3);
    g_u64(&f, 0);
    g_u64(&f, kvs->n_kv);
    g_put(&f, kvs->p, kvs->n);
    while (f.n % 32)
        g_put(&f, "", 1);
    struct gguf *g = gguf_open_mem(f.p, f.n, err, errlen);
    if (!g)
        fail_msg("tiny GGUF rejected: %s", err);
    struct tokenizer *t = tokenizer_create_gguf(g, err, errlen);
    gguf_close(g); /* the tokenizer keeps its own copy */
    free(f.p);
    return t;
}

/* GPT-2's byte->char table, for a byte-level tiny vocabulary. */
static void byte_char(unsigned b, char *out)
{
    unsigned cp = b;
    if (b <= 32)
        cp = 256 + b;
    else if (b >= 127 && b <= 160)
        cp = 256 + 33 + (b - 127);
    else if (b == 173)
        cp = 256 + 67;
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

struct bpe_fixture {
    struct tokenizer *t;
    uint32_t hi, im_end, eot, eos, user;
};

/* Byte-level: the 256 byte chars, "hi", "Ġhi", control <|im_end|>, <|eot_id|>, <|endoftext|>
 * (EOS), a user-defined <tool>. */
static struct tokenizer *make_bpe(struct bpe_fixture *fx, const char *pre, char *err,
                                  size_t errlen)
{
    struct vocab v = {0};
    struct gbuf kvs = {0};
    char c[3];
    for (unsigned b = 0; b < 256; b++) {
        byte_char(b, c);
        v_add(&v, c, 1, 0);
    }
    fx->hi = v_add(&v, "hi", 1, 0);
    v_add(&v, "\xc4\xa0h", 1, 0);
    uint32_t ghi = v_add(&v, "\xc4\xa0hi", 1, 0);
    (void)ghi;
    fx->im_end = v_add(&v, "<|im_end|>", 3, 0);
    fx->eot = v_add(&v, "<|eot_id|>", 3, 0);
    fx->eos = v_add(&v, "<|endoftext|>", 3, 0);
    fx->user = v_add(&v, "<tool>", 4, 0);
    kv_str(&kvs, "tokenizer.ggml.model", "gpt2");
    if (pre)
        kv_str(&kvs, "tokenizer.ggml.pre", pre);
    kv_u32(&kvs, "tokenizer.ggml.eos_token_id", fx->eos);
    kv_u32(&kvs, "tokenizer.ggml.bos_token_id", fx->eos);
    v_write(&kvs, &v);
    kv_arr_head(&kvs, "tokenizer.ggml.merges", GGUF_TYPE_STRING, 3);
    g_str(&kvs, "h i");
    g_str(&kvs, "\xc4\xa0 h");
    g_str(&kvs, "\xc4\xa0h i");
    struct tokenizer *t = open_tiny(&kvs, err, errlen);
    free(kvs.p);
    v_free(&v);
    return t;
}

static int bpe_setup(void **state)
{
    struct bpe_fixture *fx = calloc(1, sizeof(*fx));
    char err[256];
    if (!fx)
        return -1;
    fx->t = make_bpe(fx, "gpt2", err, sizeof(err));
    if (!fx->t) {
        fprintf(stderr, "%s\n", err);
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int bpe_teardown(void **state)
{
    struct bpe_fixture *fx = *state;
    tokenizer_destroy(fx->t);
    free(fx);
    return 0;
}

static void test_tokenizer_parse_special_makes_one_token(void **state)
{
    struct bpe_fixture *fx = *state;
    uint32_t ids[64];
    long n = encode(fx->t, "hi<|im_end|> hi<tool>", TOKENIZER_PARSE_SPECIAL, ids, 64);
    /* " hi" is "Ġ" "hi": the "h i" merge outranks "Ġ h" */
    assert_int_equal(n, 5);
    assert_int_equal(ids[0], fx->hi);
    assert_int_equal(ids[1], fx->im_end);
    assert_int_equal(ids[3], fx->hi);
    assert_int_equal(ids[4], fx->user);
    char buf[64];
    /* control pieces are empty unless rendered; user-defined ones are text */
    assert_int_equal(tokenizer_piece(fx->t, fx->im_end, false, buf, sizeof(buf)), 0);
    assert_int_equal(tokenizer_piece(fx->t, fx->im_end, true, buf, sizeof(buf)), 10);
    assert_memory_equal(buf, "<|im_end|>", 10);
    assert_int_equal(tokenizer_piece(fx->t, fx->user, false, buf, sizeof(buf)), 6);
}

static void test_tokenizer_control_text_is_plain_without_parse_special(void **state)
{
    struct bpe_fixture *fx = *state;
    uint32_t ids[64];
    char buf[256];
    const char *s = "hi<|im_end|><tool>";
    long n = encode(fx->t, s, 0, ids, 64);
    assert_false(contains(ids, (size_t)n, fx->im_end));
    /* a user-defined token is matched in raw text all the same (llama.cpp does) */
    assert_int_equal(ids[n - 1], fx->user);
    assert_int_equal(ids[0], fx->hi);
    size_t len = decode_all(fx->t, ids, (size_t)n, buf, sizeof(buf));
    assert_int_equal(len, strlen(s));
    assert_memory_equal(buf, s, len);
}

static void test_tokenizer_find_special_and_eog(void **state)
{
    struct bpe_fixture *fx = *state;
    const uint32_t *eog;
    assert_int_equal(tokenizer_find_special(fx->t, "<|im_end|>"), fx->im_end);
    assert_int_equal(tokenizer_find_special(fx->t, "<|im_end"), -1);
    assert_int_equal(tokenizer_find_special(fx->t, "hi"), -1);
    size_t n = tokenizer_eog_ids(fx->t, &eog);
    assert_int_equal(n, 3);
    assert_true(contains(eog, n, fx->eos));
    assert_true(contains(eog, n, fx->im_end));
    assert_true(contains(eog, n, fx->eot));
    /* gpt2 adds no BOS unless the file says so */
    uint32_t ids[8];
    assert_int_equal(encode(fx->t, "hi", TOKENIZER_ADD_SPECIAL, ids, 8), 1);
}

static void test_tokenizer_unknown_pre_rejected(void **state)
{
    (void)state;
    struct bpe_fixture fx;
    char err[256] = "";
    assert_null(make_bpe(&fx, "no-such-pre", err, sizeof(err)));
    assert_non_null(strstr(err, "no-such-pre"));
}

static void test_tokenizer_pre_names_compile(void **state)
{
    (void)state;
    static const char *const names[] = {
        "default", "gpt2",      "gpt-2",          "llama-bpe",    "llama3",    "qwen2",
        "smollm",  "falcon",    "starcoder",      "refact",       "mpt",       "deepseek-llm",
        "deepseek-coder", "dbrx", "smaug-bpe",    "gpt-4o",       "llama4",    "tekken",
        "pixtral", "olmo",      "stablelm2",      "command-r",    "bloom",     "viking",
        "chatglm-bpe", "exaone", "deepseek-r1-qwen", "falcon3",   "phi-2",     "jais",
        "qwen35",  "deepseek-v3", "seed-coder",   "bailingmoe",   "exaone-moe", "minicpm5",
        "tiny_aya", "minimax-m2", "grok-2",       "hunyuan-dense"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct bpe_fixture fx;
        char err[256] = "";
        struct tokenizer *t = make_bpe(&fx, names[i], err, sizeof(err));
        if (!t)
            fail_msg("pre %s: %s", names[i], err);
        uint32_t ids[64];
        char buf[256];
        const char *s = "hi there, 12345 \xe4\xb8\xad\xe6\x96\x87\n\n  hi!";
        long n = encode(t, s, 0, ids, 64);
        assert_int_equal(decode_all(t, ids, (size_t)n, buf, sizeof(buf)), strlen(s));
        assert_memory_equal(buf, s, strlen(s));
        tokenizer_destroy(t);
    }
}

/* MPT-style: byte-level characters plus user-defined runs of 2, 3 and 4 raw spaces (and a
 * control-looking user-defined <|im_start|>), optionally a whole-word token "hello" that no
 * merge builds. */
struct ud_fixture {
    uint32_t sp[5], a, b, g, im_start, hello, h;
};

static struct tokenizer *make_user_defined(struct ud_fixture *fx, const char *pre)
{
    struct vocab v = {0};
    struct gbuf kvs = {0};
    char c[3], err[256];
    for (unsigned b = 0; b < 256; b++) {
        byte_char(b, c);
        uint32_t id = v_add(&v, c, 1, 0);
        if (b == 'a')
            fx->a = id;
        if (b == 'b')
            fx->b = id;
        if (b == 'h')
            fx->h = id;
        if (b == ' ')
            fx->g = id;
    }
    fx->sp[2] = v_add(&v, "  ", 4, 0);
    fx->sp[3] = v_add(&v, "   ", 4, 0);
    fx->sp[4] = v_add(&v, "    ", 4, 0);
    fx->im_start = v_add(&v, "<|im_start|>", 4, 0);
    fx->hello = v_add(&v, "hello", 1, 0);
    kv_str(&kvs, "tokenizer.ggml.model", "gpt2");
    kv_str(&kvs, "tokenizer.ggml.pre", pre);
    v_write(&kvs, &v);
    kv_arr_head(&kvs, "tokenizer.ggml.merges", GGUF_TYPE_STRING, 0);
    struct tokenizer *t = open_tiny(&kvs, err, sizeof(err));
    if (!t)
        fail_msg("%s", err);
    free(kvs.p);
    v_free(&v);
    return t;
}

static void test_tokenizer_user_defined_matched_without_parse_special(void **state)
{
    (void)state;
    struct ud_fixture fx;
    struct tokenizer *t = make_user_defined(&fx, "mpt");
    uint32_t ids[64];
    char buf[256];
    /* "a" + 5 spaces + "b": the 4-space token, then " b" by the merges (none: bytes) */
    const char *s = "a     b";
    long n = encode(t, s, 0, ids, 64);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], fx.a);
    assert_int_equal(ids[1], fx.sp[4]);
    assert_int_equal(ids[2], fx.g);
    assert_int_equal(ids[3], fx.b);
    assert_int_equal(decode_all(t, ids, (size_t)n, buf, sizeof(buf)), strlen(s));
    assert_memory_equal(buf, s, strlen(s));
    /* runs of 2, 3 and 4+2 spaces */
    n = encode(t, "a  b   a      b", 0, ids, 64);
    assert_int_equal(n, 8);
    assert_int_equal(ids[1], fx.sp[2]);
    assert_int_equal(ids[3], fx.sp[3]);
    assert_int_equal(ids[5], fx.sp[4]);
    assert_int_equal(ids[6], fx.sp[2]);
    /* the same with special parsing on, and inside a span kept plain */
    assert_int_equal(encode(t, "a     b", TOKENIZER_PARSE_SPECIAL, ids, 64), 4);
    assert_int_equal(ids[1], fx.sp[4]);
    struct tokenizer_span plain = {0, 7};
    assert_int_equal(tokenizer_encode_masked(t, "a     b", 7, TOKENIZER_PARSE_SPECIAL, &plain, 1,
                                             ids, 64),
                     4);
    assert_int_equal(ids[1], fx.sp[4]);
    /* a user-defined turn marker counts as control: not forged from raw text */
    n = encode(t, "<|im_start|>", 0, ids, 64);
    assert_false(contains(ids, (size_t)n, fx.im_start));
    assert_int_equal(encode(t, "<|im_start|>", TOKENIZER_PARSE_SPECIAL, ids, 64), 1);
    assert_int_equal(ids[0], fx.im_start);
    n = tokenizer_encode_masked(t, "<|im_start|>", 12, TOKENIZER_PARSE_SPECIAL,
                                &(struct tokenizer_span){0, 12}, 1, ids, 64);
    assert_false(contains(ids, (size_t)n, fx.im_start));
    tokenizer_destroy(t);
}

/* Llama 3's and Tekken's pre-tokenizers take a word that is a whole token as it is
 * ("ignore_merges"); the others build words from the merges only. */
static void test_tokenizer_whole_word_tokens_skip_merges(void **state)
{
    (void)state;
    static const struct {
        const char *pre;
        bool whole;
    } cases[] = {{"llama-bpe", true}, {"tekken", true}, {"qwen2", false}, {"gpt-4o", false}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ud_fixture fx;
        struct tokenizer *t = make_user_defined(&fx, cases[i].pre);
        uint32_t ids[16];
        long n = encode(t, "hello", 0, ids, 16);
        if (cases[i].whole) {
            assert_int_equal(n, 1);
            assert_int_equal(ids[0], fx.hello);
        } else {
            assert_int_equal(n, 5);
            assert_int_equal(ids[0], fx.h);
        }
        tokenizer_destroy(t);
    }
}

/* A SentencePiece vocabulary named as the file's general.name says, with Phi-3's markers. */
static struct tokenizer *make_phi(const char *name, uint32_t *user, uint32_t *end,
                                  uint32_t *sphi, uint32_t *nl)
{
    struct vocab v = {0};
    struct gbuf kvs = {0};
    char err[256];
    v_add(&v, "<unk>", 2, 0);
    v_add(&v, "<s>", 3, 0);
    v_add(&v, "</s>", 3, 0);
    *user = v_add(&v, "<|user|>", 3, 0);
    *end = v_add(&v, "<|end|>", 3, 0);
    v_add(&v, "\xe2\x96\x81", 1, -1);
    v_add(&v, "h", 1, -2);
    v_add(&v, "i", 1, -3);
    v_add(&v, "hi", 1, -5);
    *sphi = v_add(&v, "\xe2\x96\x81hi", 1, -4);
    *nl = v_add(&v, "<0x0A>", 6, 0);
    if (name)
        kv_str(&kvs, "general.name", name);
    kv_str(&kvs, "tokenizer.ggml.model", "llama");
    v_write(&kvs, &v);
    struct tokenizer *t = open_tiny(&kvs, err, sizeof(err));
    if (!t)
        fail_msg("%s", err);
    free(kvs.p);
    v_free(&v);
    return t;
}

/* llama.cpp gives a Phi-3 model's special tokens the rstrip attribute (by the model's name:
 * GGUF has no field for it): the newline after <|user|> and <|end|> is dropped. */
static void test_tokenizer_phi3_special_tokens_strip_whitespace_after(void **state)
{
    (void)state;
    uint32_t user, end, sphi, nl, ids[32];
    const char *s = "<|user|>\nhi<|end|>\n";
    struct tokenizer *t = make_phi("Phi-3-mini-4k-instruct", &user, &end, &sphi, &nl);
    long n = encode(t, s, TOKENIZER_PARSE_SPECIAL, ids, 32);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], user);
    assert_int_equal(ids[1], sphi);
    assert_int_equal(ids[2], end);
    tokenizer_destroy(t);

    t = make_phi("Llama 2", &user, &end, &sphi, &nl); /* any other name keeps the newlines */
    n = encode(t, s, TOKENIZER_PARSE_SPECIAL, ids, 32);
    assert_true(n > 3);
    assert_true(contains(ids, (size_t)n, nl));
    tokenizer_destroy(t);
}

/* Gemma 3's shape: a SentencePiece vocabulary of 262144 tokens, no space prefix, control
 * turn markers and user-defined whitespace runs (raw spaces, as the converter stores them). */
static void test_tokenizer_spm_262k_vocabulary_with_user_defined_whitespace(void **state)
{
    (void)state;
    enum { N = 262144 };
    struct gbuf kvs = {0};
    char err[256], name[16];
    int32_t *type = malloc(N * sizeof(*type));
    float *score = calloc(N, sizeof(*score));
    assert_non_null(type);
    assert_non_null(score);
    kv_str(&kvs, "tokenizer.ggml.model", "llama");
    kv_u32(&kvs, "tokenizer.ggml.bos_token_id", 2);
    kv_u32(&kvs, "tokenizer.ggml.eos_token_id", 1);
    kv_bool(&kvs, "tokenizer.ggml.add_space_prefix", false);
    kv_arr_head(&kvs, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, N);
    static const char *const head[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>",
                                       "<end_of_turn>", "  ", "   ", "\n\n", "\xe2\x96\x81",
                                       "u", "s", "e", "r", "\n", "H", "i", "t", "h",
                                       "\xe2\x96\x81there", "user", "Hi"};
    static const int32_t head_type[] = {3, 3, 3, 2, 3, 3, 4, 4, 4, 1, 1, 1, 1, 1, 1,
                                        1, 1, 1, 1, 1, 1, 1};
    size_t nh = sizeof(head) / sizeof(head[0]);
    for (size_t i = 0; i < N; i++) {
        if (i < nh) {
            g_str(&kvs, head[i]);
            type[i] = head_type[i];
            score[i] = -(float)i;
        } else {
            snprintf(name, sizeof(name), "x%07zu", i);
            g_str(&kvs, name);
            type[i] = 1;
            score[i] = -1e6f;
        }
    }
    kv_arr_head(&kvs, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, N);
    g_put(&kvs, type, N * 4);
    kv_arr_head(&kvs, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, N);
    g_put(&kvs, score, N * 4);
    struct tokenizer *t = open_tiny(&kvs, err, sizeof(err));
    if (!t)
        fail_msg("%s", err);
    assert_int_equal(tokenizer_n_vocab(t), N);
    uint32_t ids[64];
    long n = encode(t, "<start_of_turn>user\nHi   there<end_of_turn>\n\n",
                    TOKENIZER_PARSE_SPECIAL | TOKENIZER_ADD_SPECIAL, ids, 64);
    /* <bos> <start_of_turn> u s e r \n Hi "   " t h e r e <end_of_turn> "\n\n" (no "us"
     * token, so "user" stays letters) */
    assert_true(n >= 8);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 4);
    long hi = -1;
    for (long i = 0; i < n && hi < 0; i++)
        if (ids[i] == 21)
            hi = i;
    assert_true(hi > 1 && hi + 1 < n);
    assert_int_equal(ids[hi + 1], 7); /* the user-defined three-space run */
    assert_int_equal(ids[n - 2], 5);
    assert_int_equal(ids[n - 1], 8);
    /* without special parsing the turn markers are text, the whitespace runs still tokens */
    n = encode(t, "<end_of_turn>  ", 0, ids, 64);
    assert_false(contains(ids, (size_t)n, 5));
    assert_int_equal(ids[n - 1], 6);
    tokenizer_destroy(t);
    free(kvs.p);
    free(type);
    free(score);
}

static void test_tokenizer_unknown_model_rejected(void **state)
{
    (void)state;
    struct vocab v = {0};
    struct gbuf kvs = {0};
    char err[256] = "";
    v_add(&v, "a", 1, 0);
    kv_str(&kvs, "tokenizer.ggml.model", "bert");
    v_write(&kvs, &v);
    assert_null(open_tiny(&kvs, err, sizeof(err)));
    assert_non_null(strstr(err, "bert"));
    free(kvs.p);
    v_free(&v);
}

struct spm_ids {
    uint32_t unk, bos, eos, eot, sp, h, i, hi, sphi, ws, byte0, extra;
};

/* SentencePiece: <unk> <s> </s>, optional <0xNN> bytes, "▁", "h", "i", "hi", "▁hi". */
static struct tokenizer *make_spm_extra(struct spm_ids *id, bool bytes, bool add_eos,
                                        const char *extra)
{
    struct vocab v = {0};
    struct gbuf kvs = {0};
    char err[256];
    id->unk = v_add(&v, "<unk>", 2, 0);
    id->bos = v_add(&v, "<s>", 3, 0);
    id->eos = v_add(&v, "</s>", 3, 0);
    id->eot = v_add(&v, "<end_of_turn>", 3, 0);
    id->byte0 = (uint32_t)v.n;
    for (unsigned b = 0; bytes && b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        v_add(&v, name, 6, 0);
    }
    id->sp = v_add(&v, "\xe2\x96\x81", 1, -1);
    id->h = v_add(&v, "h", 1, -2);
    id->i = v_add(&v, "i", 1, -3);
    id->hi = v_add(&v, "hi", 1, -5);
    id->sphi = v_add(&v, "\xe2\x96\x81hi", 1, -4);
    id->ws = v_add(&v, "\xe2\x96\x81\xe2\x96\x81", 1, -6);
    if (extra)
        id->extra = v_add(&v, extra, 1, -0.5f);
    kv_str(&kvs, "tokenizer.ggml.model", "llama");
    kv_u32(&kvs, "tokenizer.ggml.bos_token_id", id->bos);
    kv_u32(&kvs, "tokenizer.ggml.eos_token_id", id->eos);
    kv_u32(&kvs, "tokenizer.ggml.unknown_token_id", id->unk);
    kv_u32(&kvs, "tokenizer.ggml.padding_token_id", 99999); /* stale: ignored */
    kv_bool(&kvs, "tokenizer.ggml.add_eos_token", add_eos);
    v_write(&kvs, &v);
    struct tokenizer *t = open_tiny(&kvs, err, sizeof(err));
    if (!t)
        fail_msg("%s", err);
    free(kvs.p);
    v_free(&v);
    return t;
}

static struct tokenizer *make_spm(struct spm_ids *id, bool bytes, bool add_eos)
{
    return make_spm_extra(id, bytes, add_eos, NULL);
}

/* A token with U+2581 inside ("h▁") can span a word start: the encoder must then merge the
 * text as a whole, not word by word. */
static void test_tokenizer_spm_merge_across_word_start(void **state)
{
    (void)state;
    struct spm_ids id;
    struct tokenizer *t = make_spm_extra(&id, true, false, "h\xe2\x96\x81");
    uint32_t ids[16];
    long n = encode(t, "h hi", 0, ids, 16);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], id.sp);
    assert_int_equal(ids[1], id.extra);
    assert_int_equal(ids[2], id.hi);
    tokenizer_destroy(t);
}

static void test_tokenizer_spm_add_bos_and_eos(void **state)
{
    (void)state;
    struct spm_ids id;
    struct tokenizer *t = make_spm(&id, true, true);
    uint32_t ids[16];
    long n = encode(t, "hi", TOKENIZER_ADD_SPECIAL, ids, 16);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], id.bos);
    assert_int_equal(ids[1], id.sphi); /* "▁hi" scores above "▁" + "hi" */
    assert_int_equal(ids[2], id.eos);
    assert_int_equal(encode(t, "hi", 0, ids, 16), 1);
    assert_int_equal(tokenizer_bos_id(t), id.bos);
    assert_true(tokenizer_strips_leading_space(t));
    const uint32_t *eog;
    size_t ne = tokenizer_eog_ids(t, &eog);
    assert_int_equal(ne, 2);
    assert_true(contains(eog, ne, id.eos));
    assert_true(contains(eog, ne, id.eot));
    tokenizer_destroy(t);
}

static void test_tokenizer_spm_byte_fallback_and_unknown(void **state)
{
    (void)state;
    struct spm_ids id;
    struct tokenizer *t = make_spm(&id, true, false);
    uint32_t ids[16];
    char buf[64];
    /* "é" has no token: its two bytes */
    long n = encode(t, "h\xc3\xa9", 0, ids, 16);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], id.sp);
    assert_int_equal(ids[1], id.h);
    assert_int_equal(ids[2], id.byte0 + 0xc3);
    assert_int_equal(ids[3], id.byte0 + 0xa9);
    assert_int_equal(decode_all(t, ids, (size_t)n, buf, sizeof(buf)), 3);
    assert_memory_equal(buf, "h\xc3\xa9", 3);
    /* "<s>" in user text is never BOS */
    n = encode(t, "<s>", 0, ids, 16);
    assert_false(contains(ids, (size_t)n, id.bos));
    assert_int_equal(encode(t, "<s>hi", TOKENIZER_PARSE_SPECIAL, ids, 16), 2);
    assert_int_equal(ids[0], id.bos);
    assert_int_equal(ids[1], id.sphi); /* the space prefix follows a special token */
    tokenizer_destroy(t);

    t = make_spm(&id, false, false);
    n = encode(t, "h\xc3\xa9", 0, ids, 16);
    assert_int_equal(n, 3);
    assert_int_equal(ids[2], id.unk);
    tokenizer_destroy(t);
}

/* ---- big inputs on the real vocabularies ---- */

static char *make_text(size_t len, bool spaces)
{
    static const char *const words[] = {"the",    "quick", "brown",   "fox", "jumps",
                                        "over",   "lazy",  "dog",     "42,", "caf\xc3\xa9",
                                        "don't",  "\n",    "Tokyo's", "\xe6\x97\xa5"};
    char *s = malloc(len + 1);
    size_t n = 0;
    uint32_t x = 12345;
    assert_non_null(s);
    while (n < len) {
        x = x * 1103515245u + 12345u;
        const char *w = spaces ? words[(x >> 16) % 14] : "ab";
        size_t wl = strlen(w);
        if (n + wl + 1 > len)
            break;
        memcpy(s + n, w, wl);
        n += wl;
        if (spaces)
            s[n++] = ' ';
    }
    s[n] = '\0';
    return s;
}

static void roundtrip_big(const char *name, bool spaces)
{
    char path[1024], err[256];
    shared_path(path, sizeof(path), name);
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g)
        fail_msg("%s", err);
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    assert_non_null(t);
    gguf_close(g);
    char *s = make_text(100 * 1024, spaces);
    size_t len = strlen(s);
    long n = tokenizer_encode(t, s, len, 0, NULL, 0);
    assert_true(n > 0);
    uint32_t *ids = malloc((size_t)n * sizeof(*ids));
    char *dec = malloc(len + 1024);
    assert_int_equal(tokenizer_encode(t, s, len, 0, ids, (size_t)n), n);
    assert_int_equal(decode_all(t, ids, (size_t)n, dec, len + 1024), len);
    assert_memory_equal(dec, s, len);
    free(dec);
    free(ids);
    free(s);
    tokenizer_destroy(t);
}

static void test_tokenizer_100k_input_roundtrips(void **state)
{
    (void)state;
    roundtrip_big("ggml-vocab-llama-spm.gguf", true);
    roundtrip_big("ggml-vocab-gpt-2.gguf", true);
}

static void test_tokenizer_100k_run_without_spaces_roundtrips(void **state)
{
    (void)state;
    roundtrip_big("ggml-vocab-llama-spm.gguf", false);
    roundtrip_big("ggml-vocab-gpt-2.gguf", false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_llama_spm_conformance),
        cmocka_unit_test(test_tokenizer_gpt2_conformance),
        cmocka_unit_test(test_tokenizer_bytes_roundtrip),
        cmocka_unit_test(test_tokenizer_encode_from_starts_afresh_only_where_the_encoding_does),
        cmocka_unit_test_setup_teardown(test_tokenizer_parse_special_makes_one_token, bpe_setup,
                                        bpe_teardown),
        cmocka_unit_test_setup_teardown(test_tokenizer_control_text_is_plain_without_parse_special,
                                        bpe_setup, bpe_teardown),
        cmocka_unit_test_setup_teardown(test_tokenizer_find_special_and_eog, bpe_setup,
                                        bpe_teardown),
        cmocka_unit_test(test_tokenizer_unknown_pre_rejected),
        cmocka_unit_test(test_tokenizer_pre_names_compile),
        cmocka_unit_test(test_tokenizer_unknown_model_rejected),
        cmocka_unit_test(test_tokenizer_user_defined_matched_without_parse_special),
        cmocka_unit_test(test_tokenizer_whole_word_tokens_skip_merges),
        cmocka_unit_test(test_tokenizer_spm_262k_vocabulary_with_user_defined_whitespace),
        cmocka_unit_test(test_tokenizer_phi3_special_tokens_strip_whitespace_after),
        cmocka_unit_test(test_tokenizer_spm_add_bos_and_eos),
        cmocka_unit_test(test_tokenizer_spm_merge_across_word_start),
        cmocka_unit_test(test_tokenizer_spm_byte_fallback_and_unknown),
        cmocka_unit_test(test_tokenizer_100k_input_roundtrips),
        cmocka_unit_test(test_tokenizer_100k_run_without_spaces_roundtrips),
    };
    return cmocka_run_group_tests_name("tokenizer", tests, NULL, NULL);
}
