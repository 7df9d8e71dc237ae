/* Streaming detokenization: token ids in, whole UTF-8 characters out. An incomplete
 * character waits for the next token; the concatenated output of every push equals the
 * decoding of the whole sequence, for every prefix. */
#ifndef DETOK_H
#define DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

struct detok {
    const struct tokenizer *tok;
    bool first;           /* no text produced yet (SentencePiece's leading space) */
    bool special;         /* write control tokens' text (a reply read for tool-call markers,
                           * which some models have as control tokens); false by default */
    uint32_t n_pending;   /* bytes of an incomplete character */
    unsigned char pending[8];
};

void detok_init(struct detok *d, const struct tokenizer *tok);

/* Feed one token and append the complete characters it finishes to out. out is also the
 * scratch space the piece is decoded in: it must hold 3 * (piece length + pending bytes), and
 * detok_out_max(tok) bytes always do. Returns the number of bytes written, -EINVAL for an id
 * out of range, or -ENOSPC (state unchanged) when cap is short of that. */
int detok_push(struct detok *d, uint32_t id, char *out, size_t cap);

/* A cap for detok_push() and detok_flush() that suffices for every token of tok. */
size_t detok_out_max(const struct tokenizer *tok);

/* At the end of the sequence: what is still held (an invalid tail becomes U+FFFD). */
int detok_flush(struct detok *d, char *out, size_t cap);

#endif
