/* Encoding speed of the GGUF tokenizers: MB/s over ~1 MB of generated English-ish text
 * (deterministic), with each vocabulary of ../shared/vocab. Best of a few runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
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

static int bench(const char *label, const char *file, const char *text, size_t len,
                 uint32_t *ids, size_t cap)
{
    const char *dir = getenv("KILN_SHARED");
    char path[1024], err[256];
    snprintf(path, sizeof(path), "%s/vocab/%s", dir && *dir ? dir : "../shared", file);
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "bench_tokenizer: %s\n", err);
        return 1;
    }
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    gguf_close(g);
    if (!t) {
        fprintf(stderr, "bench_tokenizer: %s: %s\n", path, err);
        return 1;
    }
    double best = 1e30;
    long n = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        n = tokenizer_encode(t, text, len, 0, ids, cap);
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
        rc = bench("llama-spm", "ggml-vocab-llama-spm.gguf", text, len, ids, TEXT_BYTES);
        rc |= bench("gpt-2", "ggml-vocab-gpt-2.gguf", text, len, ids, TEXT_BYTES);
    }
    free(ids);
    free(text);
    return rc;
}
