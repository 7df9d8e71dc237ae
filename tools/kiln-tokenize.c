/* kiln-tokenize: encode stdin's UTF-8 text with a GGUF's tokenizer (a vocabulary-only file
 * is enough) and print the ids on one line, or decode ids back to text with --decode. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln-tokenize [--no-add-special] [--parse-special] [--decode] FILE.gguf\n"
               "  reads UTF-8 text on stdin (all of it, newlines included) and prints its token\n"
               "  ids on one line; --decode reads ids and prints the text\n");
}

/* All of stdin, NUL-terminated. */
static char *read_all(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (n < cap) {
            if (ferror(stdin)) {
                free(buf);
                return NULL;
            }
            break;
        }
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger)
            free(buf);
        buf = bigger;
        cap *= 2;
    }
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

static int encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags)
{
    long n = tokenizer_encode(t, text, len, flags, NULL, 0);
    if (n < 0) {
        fprintf(stderr, "kiln-tokenize: encode: %s\n", strerror((int)-n));
        return 1;
    }
    uint32_t *ids = malloc(((size_t)n + 1) * sizeof(*ids));
    if (!ids || tokenizer_encode(t, text, len, flags, ids, (size_t)n) != n) {
        fprintf(stderr, "kiln-tokenize: out of memory\n");
        free(ids);
        return 1;
    }
    for (long i = 0; i < n; i++)
        printf(i ? " %u" : "%u", ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

static int decode(const struct tokenizer *t, char *text)
{
    char piece[512];
    bool first = true;
    char *save = NULL;
    for (char *tok = strtok_r(text, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        char *end;
        errno = 0;
        unsigned long id = strtoul(tok, &end, 10);
        if (errno || *end || id >= tokenizer_n_vocab(t)) {
            fprintf(stderr, "kiln-tokenize: '%s' is not a token id of this vocabulary (0..%u)\n",
                    tok, tokenizer_n_vocab(t) - 1);
            return 1;
        }
        int n = tokenizer_piece(t, (uint32_t)id, false, piece, sizeof(piece));
        if (n < 0 || (size_t)n > sizeof(piece)) {
            fprintf(stderr, "kiln-tokenize: token %lu has no piece\n", id);
            return 1;
        }
        const char *p = piece;
        if (first && n > 0) {
            /* The space SentencePiece put before the first word is not part of the text. */
            if (tokenizer_strips_leading_space(t) && piece[0] == ' ') {
                p++;
                n--;
            }
            first = false;
        }
        fwrite(p, 1, (size_t)n, stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    unsigned flags = TOKENIZER_ADD_SPECIAL;
    bool do_decode = false;
    const char *path = NULL;
    char err[256];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--no-add-special") == 0) {
            flags &= ~TOKENIZER_ADD_SPECIAL;
        } else if (strcmp(argv[i], "--parse-special") == 0) {
            flags |= TOKENIZER_PARSE_SPECIAL;
        } else if (strcmp(argv[i], "--decode") == 0) {
            do_decode = true;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "kiln-tokenize: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 1;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 1;
    }
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "kiln-tokenize: %s\n", err);
        return 1;
    }
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    if (!t) {
        fprintf(stderr, "kiln-tokenize: %s: %s\n", path, err);
        gguf_close(g);
        return 1;
    }
    size_t len;
    char *text = read_all(&len);
    int rc = 1;
    if (!text)
        fprintf(stderr, "kiln-tokenize: reading stdin: %s\n", strerror(errno));
    else
        rc = do_decode ? decode(t, text) : encode(t, text, len, flags);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "kiln-tokenize: writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
    free(text);
    tokenizer_destroy(t);
    gguf_close(g);
    return rc;
}
