/* Text <-> token ids: the mock model's byte tokenizer. The GGUF tokenizers (SentencePiece
 * "llama", byte-level BPE "gpt2") land next; until then tokenizer_create_gguf() refuses. */
#include "tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tokenizer_kind {
    TOKENIZER_KIND_BYTES,
};

struct tokenizer {
    enum tokenizer_kind kind;
    uint32_t n_vocab;
    uint32_t *eog;
    size_t n_eog;
};

struct tokenizer *tokenizer_create_bytes(void)
{
    struct tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->kind = TOKENIZER_KIND_BYTES;
    t->n_vocab = TOKENIZER_BYTES_EOS + 1;
    t->eog = malloc(sizeof(*t->eog));
    if (!t->eog) {
        free(t);
        return NULL;
    }
    t->eog[0] = TOKENIZER_BYTES_EOS;
    t->n_eog = 1;
    return t;
}

struct tokenizer *tokenizer_create_gguf(const struct gguf *g, char *err, size_t errlen)
{
    (void)g;
    snprintf(err, errlen, "GGUF tokenizers are not implemented yet");
    return NULL;
}

void tokenizer_destroy(struct tokenizer *t)
{
    if (!t)
        return;
    free(t->eog);
    free(t);
}

uint32_t tokenizer_n_vocab(const struct tokenizer *t)
{
    return t->n_vocab;
}

long tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                      uint32_t *out, size_t cap)
{
    (void)flags; /* no BOS; EOS is never added to a prompt; no special texts */
    if (t->kind != TOKENIZER_KIND_BYTES)
        return -EINVAL;
    for (size_t i = 0; i < len && i < cap; i++)
        out[i] = (unsigned char)text[i];
    return (long)len;
}

int tokenizer_piece(const struct tokenizer *t, uint32_t id, bool render_special, char *buf,
                    size_t cap)
{
    if (id >= t->n_vocab)
        return -EINVAL;
    if (id == TOKENIZER_BYTES_EOS) {
        static const char eos[] = "<eos>";
        if (!render_special)
            return 0;
        memcpy(buf, eos, cap < sizeof(eos) - 1 ? cap : sizeof(eos) - 1);
        return (int)(sizeof(eos) - 1);
    }
    if (cap > 0)
        buf[0] = (char)id;
    return 1;
}

bool tokenizer_strips_leading_space(const struct tokenizer *t)
{
    (void)t;
    return false;
}

size_t tokenizer_eog_ids(const struct tokenizer *t, const uint32_t **ids)
{
    *ids = t->eog;
    return t->n_eog;
}

long tokenizer_bos_id(const struct tokenizer *t)
{
    (void)t;
    return -1;
}

long tokenizer_find_special(const struct tokenizer *t, const char *text)
{
    (void)t;
    return strcmp(text, "<eos>") == 0 ? (long)TOKENIZER_BYTES_EOS : -1;
}
