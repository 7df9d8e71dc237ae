/* detok over the byte tokenizer: incremental output equals the whole decoding for every
 * prefix, no delta ever holds a broken character, and ill-formed input becomes U+FFFD. The
 * same properties over random token sequences of the real vocabularies in ../shared/vocab
 * (llama-spm: <0xNN> byte fallback and U+2581 spaces; gpt-2: byte-level pieces that split
 * characters), and encode -> stream-decode gives every .inp text back. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "detok.h"
#include "gguf.h"
#include "lib/gguf_write.h"
#include "tokenizer.h"

#define FFFD "\xEF\xBF\xBD"

static int setup(void **state)
{
    struct tokenizer *t = tokenizer_create_bytes();
    if (!t)
        return -1;
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    tokenizer_destroy(*state);
    return 0;
}

/* Whether s[0, n) is well-formed UTF-8 (checked by code point value, independently of
 * detok's table of lead bytes). */
static bool utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n)
            return false;
        uint32_t cp = len == 1 ? b : (uint32_t)(b & (0x7F >> len));
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

/* Whether s[0, k) can begin a well-formed character: complete it with the smallest and the
 * largest continuation bytes; the code points in between form one range that is either all
 * valid or all invalid at the lengths UTF-8 uses. */
static bool utf8_valid_prefix(const unsigned char *s, size_t k, size_t len)
{
    unsigned char lo[4], hi[4];
    memcpy(lo, s, k);
    memcpy(hi, s, k);
    for (size_t i = k; i < len; i++) {
        lo[i] = 0x80;
        hi[i] = 0xBF;
    }
    return utf8_valid(lo, len) || utf8_valid(hi, len);
}

/* The reference decoding of the whole byte string: maximal subparts become U+FFFD. */
static size_t reference_decode(const unsigned char *s, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (len > 0 && i + len <= n && utf8_valid(s + i, len)) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
            continue;
        }
        size_t k = 0;
        if (len > 1)
            for (k = (n - i < len ? n - i : len - 1); k > 0; k--)
                if (utf8_valid_prefix(s + i, k, len))
                    break;
        memcpy(out + o, FFFD, 3);
        o += 3;
        i += k > 0 ? k : 1;
    }
    return o;
}

/* A byte that is likely to make interesting UTF-8: ASCII, leads, continuations, junk. */
static unsigned char random_byte(unsigned *seed)
{
    static const unsigned char pool[] = {'a',  ' ',  0xC3, 0xA9, 0xE4, 0xB8, 0x96, 0xF0,
                                         0x9F, 0x98, 0x80, 0xBF, 0xED, 0xA0, 0xE0, 0xF4,
                                         0x90, 0x8F, 0xC0, 0xFF, 0xC2, 0xF5, 0x7F, 0x00};
    int r = rand_r(seed);
    if (r % 8 == 0)
        return (unsigned char)(rand_r(seed) & 0xFF);
    return pool[(unsigned)rand_r(seed) % sizeof pool];
}

static void test_detok_every_prefix_matches_whole_decoding(void **state)
{
    const struct tokenizer *t = *state;
    unsigned seed = 12345;
    unsigned char bytes[48];
    char want[3 * sizeof bytes], got[3 * sizeof bytes + 64], delta[1024];
    for (int iter = 0; iter < 400; iter++) {
        size_t n = 1 + (size_t)rand_r(&seed) % sizeof bytes;
        for (size_t i = 0; i < n; i++)
            bytes[i] = random_byte(&seed);
        for (size_t p = 0; p <= n; p++) {
            struct detok d;
            detok_init(&d, t);
            size_t len = 0;
            for (size_t i = 0; i < p; i++) {
                int r = detok_push(&d, bytes[i], delta, sizeof delta);
                assert_true(r >= 0);
                assert_true(utf8_valid((unsigned char *)delta, (size_t)r));
                memcpy(got + len, delta, (size_t)r);
                len += (size_t)r;
            }
            int r = detok_flush(&d, delta, sizeof delta);
            assert_true(r >= 0);
            assert_true(utf8_valid((unsigned char *)delta, (size_t)r));
            memcpy(got + len, delta, (size_t)r);
            len += (size_t)r;
            size_t wlen = reference_decode(bytes, p, want);
            assert_int_equal(len, wlen);
            assert_memory_equal(got, want, len);
        }
    }
}

static void test_detok_multibyte_reply_never_splits_a_character(void **state)
{
    const char *text = "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89 na\xC3\xAFve "
                       "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82";
    struct detok d;
    char delta[1024], got[256];
    size_t len = 0, n_empty = 0;
    detok_init(&d, *state);
    for (size_t i = 0; text[i]; i++) {
        int r = detok_push(&d, (unsigned char)text[i], delta, sizeof delta);
        assert_true(r >= 0);
        /* each delta is whole characters: valid on its own */
        assert_true(utf8_valid((unsigned char *)delta, (size_t)r));
        n_empty += r == 0;
        memcpy(got + len, delta, (size_t)r);
        len += (size_t)r;
    }
    assert_int_equal(detok_flush(&d, delta, sizeof delta), 0);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(got, text, len);
    assert_true(n_empty > 0); /* something was held, or the test proves nothing */
}

static void test_detok_holds_incomplete_character_until_completed(void **state)
{
    struct detok d;
    char out[64];
    detok_init(&d, *state);
    assert_int_equal(detok_push(&d, 0xF0, out, sizeof out), 0);
    assert_int_equal(detok_push(&d, 0x9F, out, sizeof out), 0);
    assert_int_equal(detok_push(&d, 0x98, out, sizeof out), 0);
    assert_int_equal(detok_push(&d, 0x80, out, sizeof out), 4);
    assert_memory_equal(out, "\xF0\x9F\x98\x80", 4);
}

static void test_detok_invalid_sequences_become_replacement(void **state)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"\xC3(", FFFD "("},
        {"\xE0\x80\x80", FFFD FFFD FFFD},   /* overlong: E0 80 is no valid prefix */
        {"\xED\xA0\x80", FFFD FFFD FFFD},   /* surrogate */
        {"\xF0\x9F\x98", FFFD},             /* truncated at the end: one U+FFFD */
        {"\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD}, /* past U+10FFFF */
        {"a\xFF" "b", "a" FFFD "b"},
        {"\xE4\xB8" "x", FFFD "x"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct detok d;
        char out[256], delta[1024];
        size_t len = 0;
        detok_init(&d, *state);
        for (size_t i = 0; cases[c].in[i]; i++) {
            int r = detok_push(&d, (unsigned char)cases[c].in[i], delta, sizeof delta);
            assert_true(r >= 0);
            memcpy(out + len, delta, (size_t)r);
            len += (size_t)r;
        }
        int r = detok_flush(&d, delta, sizeof delta);
        assert_true(r >= 0);
        memcpy(out + len, delta, (size_t)r);
        len += (size_t)r;
        out[len] = '\0';
        assert_string_equal(out, cases[c].out);
    }
}

static void test_detok_eos_is_empty_and_bad_id_is_einval(void **state)
{
    struct detok d;
    char out[64];
    detok_init(&d, *state);
    assert_int_equal(detok_push(&d, TOKENIZER_BYTES_EOS, out, sizeof out), 0);
    assert_int_equal(detok_push(&d, 100000, out, sizeof out), -EINVAL);
}

static void test_detok_small_buffer_is_enospc_without_losing_text(void **state)
{
    struct detok d;
    char out[8];
    detok_init(&d, *state);
    assert_int_equal(detok_push(&d, 0xC3, out, sizeof out), 0);
    assert_int_equal(detok_push(&d, 0xA9, out, 1), -ENOSPC);
    /* the pending lead byte is still there; the next push completes nothing by itself */
    assert_int_equal(detok_push(&d, 0xA9, out, sizeof out), 2);
    assert_memory_equal(out, "\xC3\xA9", 2);
}

/* ---- the real vocabularies ---- */

static struct tokenizer *open_vocab(const char *name)
{
    char path[1024], err[256];
    const char *dir = getenv("KILN_SHARED");
    snprintf(path, sizeof(path), "%s/vocab/%s", dir && *dir ? dir : "../shared", name);
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    if (!t)
        fprintf(stderr, "%s: %s\n", path, err);
    gguf_close(g);
    return t;
}

static int setup_spm(void **state)
{
    return (*state = open_vocab("ggml-vocab-llama-spm.gguf")) ? 0 : -1;
}

static int setup_gpt2(void **state)
{
    return (*state = open_vocab("ggml-vocab-gpt-2.gguf")) ? 0 : -1;
}

/* The whole decoding of ids, defined independently of detok: the pieces' bytes joined,
 * maximal ill-formed subparts as U+FFFD, and SentencePiece's first space dropped. */
static size_t whole_decode(const struct tokenizer *t, const uint32_t *ids, size_t n, char *out)
{
    unsigned char bytes[64 * 256];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        int k = tokenizer_piece(t, ids[i], false, (char *)bytes + len, sizeof(bytes) - len);
        assert_true(k >= 0 && (size_t)k <= sizeof(bytes) - len);
        len += (size_t)k;
    }
    size_t o = reference_decode(bytes, len, out);
    if (tokenizer_strips_leading_space(t) && o > 0 && out[0] == ' ') {
        memmove(out, out + 1, o - 1);
        o--;
    }
    return o;
}

/* Ids whose piece is one byte: what splits characters across tokens. */
static size_t single_byte_ids(const struct tokenizer *t, uint32_t *ids, size_t cap)
{
    size_t n = 0;
    char buf[64];
    for (uint32_t id = 0; id < tokenizer_n_vocab(t) && n < cap; id++)
        if (tokenizer_piece(t, id, false, buf, sizeof(buf)) == 1)
            ids[n++] = id;
    return n;
}

/* Random sequences, half single-byte ids (many of them UTF-8 leads and continuations), half
 * anything in the vocabulary. Pushed one by one: every delta is valid UTF-8; what was
 * streamed plus a flush (of a copy of the state) is the whole decoding of that prefix; and
 * what was streamed is never taken back (a prefix of the whole decoding of the sequence). */
static void check_random_sequences(const struct tokenizer *t, unsigned seed, int iters)
{
    static uint32_t bytes_ids[4096];
    size_t n_bytes = single_byte_ids(t, bytes_ids, 4096);
    uint32_t n_vocab = tokenizer_n_vocab(t), ids[32];
    static char want[64 * 256 * 3], final_text[64 * 256 * 3], got[64 * 256 * 3];
    char delta[1024];
    size_t n_held = 0;
    assert_true(n_bytes >= 256);
    for (int iter = 0; iter < iters; iter++) {
        size_t n = 1 + (size_t)rand_r(&seed) % 32;
        for (size_t i = 0; i < n; i++)
            ids[i] = rand_r(&seed) % 2 ? bytes_ids[(size_t)rand_r(&seed) % n_bytes]
                                       : (uint32_t)rand_r(&seed) % n_vocab;
        size_t final_len = whole_decode(t, ids, n, final_text);
        struct detok d;
        size_t len = 0;
        detok_init(&d, t);
        for (size_t p = 1; p <= n; p++) {
            int r = detok_push(&d, ids[p - 1], delta, sizeof(delta));
            assert_true(r >= 0);
            assert_true(utf8_valid((unsigned char *)delta, (size_t)r));
            memcpy(got + len, delta, (size_t)r);
            len += (size_t)r;
            n_held += r == 0;
            assert_true(len <= final_len);
            assert_memory_equal(got, final_text, len);
            struct detok copy = d;
            int f = detok_flush(&copy, delta, sizeof(delta));
            assert_true(f >= 0);
            assert_true(utf8_valid((unsigned char *)delta, (size_t)f));
            size_t wlen = whole_decode(t, ids, p, want);
            assert_int_equal(len + (size_t)f, wlen);
            assert_memory_equal(got, want, len);
            assert_memory_equal(delta, want + len, (size_t)f);
        }
        int f = detok_flush(&d, delta, sizeof(delta));
        assert_true(f >= 0);
        assert_int_equal(len + (size_t)f, final_len);
    }
    assert_true(n_held > 0); /* some token completed no character: the test saw splits */
}

static void test_detok_spm_random_sequences_match_whole_decoding(void **state)
{
    check_random_sequences(*state, 777, 300);
}

static void test_detok_gpt2_random_sequences_match_whole_decoding(void **state)
{
    check_random_sequences(*state, 4242, 300);
}

/* The single-byte token of b (a <0xNN> byte-fallback token or a byte-level piece). */
static uint32_t byte_token(const struct tokenizer *t, unsigned char b)
{
    char buf[8];
    for (uint32_t id = 0; id < tokenizer_n_vocab(t); id++)
        if (tokenizer_piece(t, id, false, buf, sizeof(buf)) == 1 && (unsigned char)buf[0] == b)
            return id;
    fail_msg("no token for byte %02x", b);
    return 0;
}

/* U+4E16 (E4 B8 96) fed a byte per token: nothing until the third, then the character. */
static void check_split_character_waits(const struct tokenizer *t)
{
    struct detok d;
    char out[64];
    detok_init(&d, t);
    assert_int_equal(detok_push(&d, byte_token(t, 'x'), out, sizeof out), 1);
    assert_int_equal(detok_push(&d, byte_token(t, 0xE4), out, sizeof out), 0);
    assert_int_equal(detok_push(&d, byte_token(t, 0xB8), out, sizeof out), 0);
    assert_int_equal(detok_push(&d, byte_token(t, 0x96), out, sizeof out), 3);
    assert_memory_equal(out, "\xE4\xB8\x96", 3);
    /* a lead byte left at the end is one U+FFFD at the flush */
    assert_int_equal(detok_push(&d, byte_token(t, 0xE4), out, sizeof out), 0);
    assert_int_equal(detok_flush(&d, out, sizeof out), 3);
    assert_memory_equal(out, FFFD, 3);
}

static void test_detok_spm_byte_fallback_waits_for_whole_character(void **state)
{
    check_split_character_waits(*state);
}

static void test_detok_gpt2_byte_pieces_wait_for_whole_character(void **state)
{
    check_split_character_waits(*state);
}

/* SentencePiece: the space the encoder puts before the first word is dropped once, even when
 * BOS (an empty piece) comes first; later spaces stay. */
static void test_detok_spm_drops_only_the_first_leading_space(void **state)
{
    const struct tokenizer *t = *state;
    uint32_t ids[16];
    char out[64], delta[1024];
    size_t len = 0;
    long n = tokenizer_encode(t, "Hello world", 11, TOKENIZER_ADD_SPECIAL, ids, 16);
    assert_true(n >= 3 && n <= 16);
    assert_int_equal(ids[0], tokenizer_bos_id(t));
    struct detok d;
    detok_init(&d, t);
    for (long i = 0; i < n; i++) {
        int r = detok_push(&d, ids[i], delta, sizeof delta);
        assert_true(r >= 0);
        memcpy(out + len, delta, (size_t)r);
        len += (size_t)r;
    }
    assert_int_equal(len, 11);
    assert_memory_equal(out, "Hello world", 11);
}

/* GGUF allows user-defined tokens of any length: a 3000-byte one decodes whole, in one push,
 * into a buffer of detok_out_max() (it used to fail with -EOVERFLOW past 1024 bytes). */
static void test_detok_piece_longer_than_1024_bytes_decodes(void **state)
{
    enum { LONG_LEN = 3000 };
    char *long_tok = malloc(LONG_LEN + 1), err[256];
    assert_non_null(long_tok);
    for (size_t i = 0; i < LONG_LEN; i += 3)
        memcpy(long_tok + i, i % 2 ? "x\xC3\xA9" : "yz ", 3); /* ASCII and U+00E9 */
    long_tok[LONG_LEN] = '\0';
    const char *texts[] = {"<unk>", "<s>", "</s>", "a", long_tok};
    int32_t types[] = {2, 3, 3, 1, 4}; /* unknown, control, control, normal, user-defined */
    float scores[] = {0, 0, 0, -1, 0};
    struct gguf_writer *w = gguf_writer_create(3);
    uint8_t *buf = NULL;
    size_t len = 0;
    (void)state;
    assert_non_null(w);
    assert_int_equal(gguf_write_str(w, "tokenizer.ggml.model", "llama"), 0);
    assert_int_equal(gguf_write_arr_str(w, "tokenizer.ggml.tokens", texts, 5), 0);
    assert_int_equal(gguf_write_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 5),
                     0);
    assert_int_equal(gguf_write_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, 5),
                     0);
    assert_int_equal(gguf_writer_finish(w, &buf, &len), 0);
    struct gguf *g = gguf_open_mem(buf, len, err, sizeof(err));
    if (!g)
        fail_msg("GGUF rejected: %s", err);
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    if (!t)
        fail_msg("tokenizer rejected: %s", err);
    gguf_close(g);

    size_t cap = detok_out_max(t);
    assert_true(cap >= 3 * LONG_LEN);
    char *out = malloc(cap);
    assert_non_null(out);
    struct detok d;
    detok_init(&d, t);
    assert_int_equal(detok_push(&d, 3, out, cap), 1); /* "a" */
    assert_int_equal(detok_push(&d, 4, out, cap), LONG_LEN);
    assert_memory_equal(out, long_tok, LONG_LEN);
    assert_int_equal(detok_push(&d, 3, out, cap), 1);
    assert_int_equal(detok_flush(&d, out, cap), 0);
    /* a buffer too small says so instead of writing past it */
    assert_int_equal(detok_push(&d, 4, out, 2 * LONG_LEN), -ENOSPC);

    free(out);
    tokenizer_destroy(t);
    free(buf);
    gguf_writer_destroy(w);
    free(long_tok);
}

#define SEP "\n__ggml_vocab_test__\n"

/* Every .inp text, encoded (with and without BOS) and decoded token by token, comes back. */
static void check_inp_round_trips(const struct tokenizer *t, const char *name)
{
    char path[1024];
    const char *dir = getenv("KILN_SHARED");
    snprintf(path, sizeof(path), "%s/vocab/%s.inp", dir && *dir ? dir : "../shared", name);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static char inp[1 << 20];
    size_t inp_len = fread(inp, 1, sizeof(inp) - 1, fp);
    fclose(fp);
    inp[inp_len] = '\0';
    uint32_t *ids = malloc(65536 * sizeof(*ids));
    char *got = malloc(1 << 20), delta[1024];
    assert_non_null(ids);
    assert_non_null(got);
    size_t n_cases = 0;
    for (char *p = inp, *sep; (sep = strstr(p, SEP)); p = sep + strlen(SEP), n_cases++) {
        size_t len = (size_t)(sep - p);
        for (unsigned flags = 0; flags <= TOKENIZER_ADD_SPECIAL; flags += TOKENIZER_ADD_SPECIAL) {
            long n = tokenizer_encode(t, p, len, flags, ids, 65536);
            assert_true(n >= 0 && n <= 65536);
            struct detok d;
            size_t glen = 0;
            detok_init(&d, t);
            for (long i = 0; i <= n; i++) {
                int r = i < n ? detok_push(&d, ids[i], delta, sizeof delta)
                              : detok_flush(&d, delta, sizeof delta);
                assert_true(r >= 0);
                assert_true(utf8_valid((unsigned char *)delta, (size_t)r));
                memcpy(got + glen, delta, (size_t)r);
                glen += (size_t)r;
            }
            if (glen != len || memcmp(got, p, len) != 0)
                fail_msg("%s case %zu '%.*s' streams back as '%.*s'", name, n_cases, (int)len,
                         p, (int)glen, got);
        }
    }
    assert_true(n_cases > 40);
    free(got);
    free(ids);
}

static void test_detok_spm_inp_texts_round_trip(void **state)
{
    check_inp_round_trips(*state, "ggml-vocab-llama-spm.gguf");
}

static void test_detok_gpt2_inp_texts_round_trip(void **state)
{
    check_inp_round_trips(*state, "ggml-vocab-gpt-2.gguf");
}

/* Control tokens are dropped unless special is set (a reply read for tool-call markers). */
static void test_detok_special_writes_control_tokens(void **state)
{
    struct detok d;
    char out[64];
    detok_init(&d, *state);
    assert_int_equal(detok_push(&d, TOKENIZER_BYTES_EOS, out, sizeof out), 0);
    d.special = true;
    assert_int_equal(detok_push(&d, TOKENIZER_BYTES_EOS, out, sizeof out), 5);
    assert_memory_equal(out, "<eos>", 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_detok_special_writes_control_tokens, setup,
                                        teardown),
        cmocka_unit_test(test_detok_piece_longer_than_1024_bytes_decodes),
        cmocka_unit_test_setup_teardown(test_detok_every_prefix_matches_whole_decoding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_detok_multibyte_reply_never_splits_a_character,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_detok_holds_incomplete_character_until_completed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_detok_invalid_sequences_become_replacement, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_detok_eos_is_empty_and_bad_id_is_einval, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_detok_small_buffer_is_enospc_without_losing_text,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_detok_spm_random_sequences_match_whole_decoding,
                                        setup_spm, teardown),
        cmocka_unit_test_setup_teardown(test_detok_gpt2_random_sequences_match_whole_decoding,
                                        setup_gpt2, teardown),
        cmocka_unit_test_setup_teardown(test_detok_spm_byte_fallback_waits_for_whole_character,
                                        setup_spm, teardown),
        cmocka_unit_test_setup_teardown(test_detok_gpt2_byte_pieces_wait_for_whole_character,
                                        setup_gpt2, teardown),
        cmocka_unit_test_setup_teardown(test_detok_spm_drops_only_the_first_leading_space,
                                        setup_spm, teardown),
        cmocka_unit_test_setup_teardown(test_detok_spm_inp_texts_round_trip, setup_spm,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_detok_gpt2_inp_texts_round_trip, setup_gpt2,
                                        teardown),
    };
    return cmocka_run_group_tests_name("detok", tests, NULL, NULL);
}
