/* Streaming detokenization (detok.h): token pieces are raw bytes; this joins them into whole
 * UTF-8 characters, holding the bytes of an incomplete character until the next token, and
 * replaces each maximal ill-formed subsequence with U+FFFD (Unicode's "maximal subpart"
 * policy), so pushes plus flush decode exactly as the whole byte string would. */
#include "detok.h"

#include <errno.h>
#include <string.h>

#include "tokenizer.h"
#include "utf8.h"

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

void detok_init(struct detok *d, const struct tokenizer *tok)
{
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->first = true;
}

/* Decode in[0, n) into out (which holds at least 3 * n bytes). A valid but incomplete
 * character at the end is left undecoded unless final; its length goes to *tail. Returns the
 * bytes written. in may lie inside out at out + 2 * n or later: each byte consumed writes at
 * most 3, so the output never reaches a byte not yet read (hence memmove). */
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
            memmove(out + o, in + i, (size_t)k);
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

/* Decode pending+in[0, n) (in lies at the end of out, see detok_push), keep the new
 * incomplete tail, apply the leading-space rule. Returns the bytes written to out. */
static int detok_emit(struct detok *d, unsigned char *in, size_t n, bool final, char *out)
{
    size_t tail;
    /* the pending bytes go just before the piece, so the input is one run */
    in -= d->n_pending;
    memcpy(in, d->pending, d->n_pending);
    n += d->n_pending;
    size_t o = utf8_sanitize(in, n, final, out, &tail);
    memcpy(d->pending, in + n - tail, tail); /* not yet overwritten: o <= 3 * (n - tail) */
    d->n_pending = (uint32_t)tail;
    if (d->first && o > 0) {
        /* SentencePiece puts a space before the first word; decoding drops it once. */
        if (out[0] == ' ' && d->tok && tokenizer_strips_leading_space(d->tok))
            memmove(out, out + 1, --o);
        d->first = false;
    }
    return (int)o;
}

size_t detok_out_max(const struct tokenizer *tok)
{
    return 3 * (tokenizer_piece_max(tok) + sizeof ((struct detok *)0)->pending);
}

int detok_push(struct detok *d, uint32_t id, char *out, size_t cap)
{
    /* The piece is written at the end of out and decoded forward into it, so a piece of any
     * length needs no buffer of ours: first ask its length. */
    int len = tokenizer_piece(d->tok, id, d->special, out, 0);
    if (len < 0)
        return len;
    if (3 * ((size_t)len + d->n_pending) > cap)
        return -ENOSPC;
    unsigned char *in = (unsigned char *)out + cap - (size_t)len;
    (void)tokenizer_piece(d->tok, id, d->special, (char *)in, (size_t)len);
    return detok_emit(d, in, (size_t)len, false, out);
}

int detok_flush(struct detok *d, char *out, size_t cap)
{
    if (3 * (size_t)d->n_pending > cap)
        return -ENOSPC;
    return detok_emit(d, (unsigned char *)out + cap, 0, true, out);
}
