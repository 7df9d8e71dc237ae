/* Encoding speed of the GGUF tokenizers: MB/s over ~1 MB of generated English-ish text
 * (deterministic), with each vocabulary of ../shared/vocab, and over ~1 MB of HTML-ish text
 * with a Gemma-shaped vocabulary of thousands of special tokens that share a first byte
 * (<unusedN> control and <tN> user-defined ones), the splitter's worst case. Best of a few
 * runs. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "lib/gguf_write.h"
#include "tokenizer.h"

#define TEXT_BYTES (1u << 20)
#define RUNS 3

static const char *const words[] = {
    "the",     "of",    "and",     "to",       "a",       "in",       "is",    "it",
    "that",    "was",   "for",     "on",       "are",     "with",     "as",    "they",
    "be",      "at",    "one",     "have",     "this",    "from",     "by",    "hot",
    "word",    "but",   "what",    "some",     "tokenizer", "server", "model", "inference",
    "weights", "cache", "quickly", "language", "Tuesday", "London's", "don't", "1984",
    "3.14",    "(see",  "below)",  "e-mail",   "naïve",   "café",     "—",     "\"quoted\"",
};

static char *make_text(size_t len)
{
    char *s = malloc(len + 1);
    size_t n = 0;
    unsigned x = 2024, sentence = 0;
    if (!s)
        return NULL;
    while (n + 32 < len) {
        x = x * 1103515245u + 12345u;
        const char *w = words[(x >> 16) % (sizeof(words) / sizeof(words[0]))];
        size_t wl = strlen(w);
        memcpy(s + n, w, wl);
        n += wl;
        if (++sentence % 13 == 0) {
            memcpy(s + n, ".\n", 2);
            n += 2;
        } else {
            s[n++] = (x >> 8) % 11 == 0 ? ',' : ' ';
            if (s[n - 1] == ',')
                s[n++] = ' ';
        }
    }
    s[n] = '\0';
    return s;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* SentencePiece, 6000 control <unusedN>, 1000 user-defined <tN>, the byte pieces and a
 * few words: the shape of Gemma's vocabulary where it matters to the special splitter. */
#define N_SPECIAL_VOCAB 8000
static struct gguf *special_vocab(uint8_t **buf)
{
    struct gguf_writer *w = gguf_writer_create(3);
    static char names[N_SPECIAL_VOCAB][16];
    const char *tok[N_SPECIAL_VOCAB];
    int32_t type[N_SPECIAL_VOCAB];
    float score[N_SPECIAL_VOCAB];
    static const char *const head[] = {"<pad>", "<eos>", "<bos>", "<unk>", "\xe2\x96\x81",
                                       "\xe2\x96\x81hello", "hello", "p", "<p>", "</p>"};
    size_t n = 0, len;
    char err[256];
    for (; n < sizeof(head) / sizeof(head[0]); n++) {
        tok[n] = head[n];
        type[n] = n < 3 ? 3 : n == 3 ? 2 : n >= 8 ? 4 : 1;
        score[n] = -(float)n;
    }
    for (unsigned b = 0; b < 256; b++, n++) {
        snprintf(names[n], sizeof(names[n]), "<0x%02X>", b);
        tok[n] = names[n];
        type[n] = 6;
        score[n] = 0;
    }
    for (; n < N_SPECIAL_VOCAB; n++) {
        snprintf(names[n], sizeof(names[n]), n < 6266 ? "<unused%zu>" : "<t%zu>", n);
        tok[n] = names[n];
        type[n] = n < 6266 ? 3 : 4;
        score[n] = 0;
    }
    if (!w)
        return NULL;
    gguf_write_str(w, "tokenizer.ggml.model", "llama");
    gguf_write_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    gguf_write_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    gguf_write_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, type, n);
    gguf_write_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, score, n);
    struct gguf *g = NULL;
    if (gguf_writer_finish(w, buf, &len) == 0)
        g = gguf_open_mem(*buf, len, err, sizeof(err));
    gguf_writer_destroy(w);
    return g;
}

/* The chat memo's cut (tokenizer_encode_masked_from) in the middle of the text, one run:
 * at a word's start and inside a word, each as a ratio to encoding the whole text (whole,
 * seconds); what a chat turn adds to its tokenizing on the front's loop per point tried. */
static void bench_from(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                       double whole, uint32_t *ids, size_t cap)
{
    size_t word = len / 2;
    while (word < len && text[word] != ' ')
        word++;
    const size_t points[2] = {word, word + 3};
    const char *names[2] = {"a word's start", "inside a word"};
    for (int k = 0; k < 2; k++) {
        double best = 1e30;
        long n = 0;
        for (int r = 0; r < RUNS; r++) {
            double t0 = now();
            n = tokenizer_encode_masked_from(t, text, len, flags, NULL, 0, points[k], ids, cap);
            double dt = now() - t0;
            if (dt < best)
                best = dt;
        }
        printf("  from %s: %.2fx the whole text's time (%s, %.1f ms)\n", names[k],
               best / whole, n >= 0 ? "taken" : "not a point", best * 1e3);
    }
}

static int bench(const char *label, const char *file, const char *text, size_t len,
                 uint32_t *ids, size_t cap, bool from)
{
    const char *dir = getenv("KILN_SHARED");
    char path[1024], err[256];
    uint8_t *buf = NULL;
    unsigned flags = 0;
    struct gguf *g;
    if (file) {
        snprintf(path, sizeof(path), "%s/vocab/%s", dir && *dir ? dir : "../shared", file);
        g = gguf_open(path, err, sizeof(err));
    } else {
        snprintf(path, sizeof(path), "(generated)");
        snprintf(err, sizeof(err), "could not build the vocabulary");
        g = special_vocab(&buf);
        flags = TOKENIZER_PARSE_SPECIAL;
    }
    if (!g) {
        fprintf(stderr, "bench_tokenizer: %s\n", err);
        free(buf);
        return 1;
    }
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    gguf_close(g);
    free(buf);
    if (!t) {
        fprintf(stderr, "bench_tokenizer: %s: %s\n", path, err);
        return 1;
    }
    double best = 1e30;
    long n = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        n = tokenizer_encode(t, text, len, flags, ids, cap);
        double dt = now() - t0;
        if (n < 0) {
            fprintf(stderr, "bench_tokenizer: encode failed: %ld\n", n);
            tokenizer_destroy(t);
            return 1;
        }
        if (dt < best)
            best = dt;
    }
    printf("tokenizer %s: %.1f MB/s (%zu bytes -> %ld tokens in %.1f ms)\n", label,
           (double)len / best / 1e6, len, n, best * 1e3);
    if (from)
        bench_from(t, text, len, flags, best, ids, cap);
    tokenizer_destroy(t);
    return 0;
}

int main(void)
{
    char *text = make_text(TEXT_BYTES);
    uint32_t *ids = malloc(TEXT_BYTES * sizeof(*ids));
    int rc = 1;
    if (text && ids) {
        size_t len = strlen(text);
        rc = bench("llama-spm", "ggml-vocab-llama-spm.gguf", text, len, ids, TEXT_BYTES, false);
        rc |= bench("gpt-2", "ggml-vocab-gpt-2.gguf", text, len, ids, TEXT_BYTES, true);
        for (size_t i = 0; i < len; i++) /* "<p>hello</p> " over and over */
            text[i] = "<p>hello</p> "[i % 13];
        rc |= bench("8000 specials, HTML", NULL, text, len, ids, TEXT_BYTES, false);
    }
    free(ids);
    free(text);
    return rc;
}
