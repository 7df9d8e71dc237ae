/* Streaming detokenization (detok.h): token pieces are raw bytes; this joins them into whole
 * UTF-8 characters, holding the bytes of an incomplete character until the next token, and
 * replaces each maximal ill-formed subsequence with U+FFFD (Unicode's "maximal subpart"
 * policy), so pushes plus flush decode exactly as the whole byte string would. */
#include "detok.h"

#include <errno.h>
#include <string.h>

#include "tokenizer.h"

/* The longest piece we accept from the tokenizer. */
#define DETOK_PIECE_MAX 1024

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

void detok_init(struct detok *d, const struct tokenizer *tok)
{
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->first = true;
}

/* The number of continuation bytes after lead byte b and the range its first continuation
 * byte must be in (which rules out overlongs, surrogates and code points past U+10FFFF), or
 * -1 when b cannot start a character. */
static int utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80)
        return 0;
    if (b >= 0xC2 && b <= 0xDF)
        return 1;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0)
            *lo = 0xA0;
        else if (b == 0xED)
            *hi = 0x9F;
        return 2;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0)
            *lo = 0x90;
        else if (b == 0xF4)
            *hi = 0x8F;
        return 3;
    }
    return -1;
}

/* Decode in[0, n) into out (which holds at least 3 * n bytes). A valid but incomplete
 * character at the end is left undecoded unless final; its length goes to *tail. Returns the
 * bytes written. */
static size_t utf8_sanitize(const unsigned char *in, size_t n, bool final, char *out,
                            size_t *tail)
{
    size_t i = 0, o = 0;
    *tail = 0;
    while (i < n) {
        unsigned char lo, hi;
        int need = utf8_lead(in[i], &lo, &hi);
        if (need < 0) {
            memcpy(out + o, replacement, 3);
            o += 3;
            i++;
            continue;
        }
        int k = 1;
        while (k <= need && i + (size_t)k < n) {
            unsigned char c = in[i + (size_t)k];
            if (c < lo || c > hi)
                break;
            lo = 0x80;
            hi = 0xBF;
            k++;
        }
        if (k == need + 1) {
            memcpy(out + o, in + i, (size_t)k);
            o += (size_t)k;
        } else if (i + (size_t)k == n && !final) {
            *tail = (size_t)k; /* may still be completed by the next token */
            break;
        } else {
            /* the maximal subpart in[i, i+k) can never become valid: one U+FFFD */
            memcpy(out + o, replacement, 3);
            o += 3;
        }
        i += (size_t)k;
    }
    return o;
}

/* Decode pending+piece, keep the new incomplete tail, apply the leading-space rule, copy to
 * out. State changes only when the result fits. */
static int detok_emit(struct detok *d, const char *piece, size_t len, bool final, char *out,
                      size_t cap)
{
    unsigned char in[sizeof d->pending + DETOK_PIECE_MAX];
    char dec[3 * sizeof in];
    size_t n = d->n_pending, tail;
    memcpy(in, d->pending, n);
    memcpy(in + n, piece, len);
    n += len;
    size_t o = utf8_sanitize(in, n, final, dec, &tail);
    const char *start = dec;
    bool first = d->first;
    if (first && o > 0) {
        /* SentencePiece puts a space before the first word; decoding drops it once. */
        if (dec[0] == ' ' && d->tok && tokenizer_strips_leading_space(d->tok)) {
            start++;
            o--;
        }
        first = false;
    }
    if (o > cap)
        return -ENOSPC;
    memcpy(out, start, o);
    memcpy(d->pending, in + n - tail, tail);
    d->n_pending = (uint32_t)tail;
    d->first = first;
    return (int)o;
}

int detok_push(struct detok *d, uint32_t id, char *out, size_t cap)
{
    char piece[DETOK_PIECE_MAX];
    int len = tokenizer_piece(d->tok, id, false, piece, sizeof piece);
    if (len < 0)
        return len;
    if ((size_t)len > sizeof piece)
        return -EOVERFLOW;
    return detok_emit(d, piece, (size_t)len, false, out, cap);
}

int detok_flush(struct detok *d, char *out, size_t cap)
{
    return detok_emit(d, "", 0, true, out, cap);
}
