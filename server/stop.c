/* Stop strings (stop.h): each push joins the held text with the new text, looks for the
 * earliest complete match, and otherwise holds back the longest tail that is a proper prefix
 * of some stop string, moved back to a character boundary. */
#include "stop.h"

#include <errno.h>
#include <string.h>

void stop_init(struct stop *s)
{
    memset(s, 0, sizeof *s);
}

int stop_add(struct stop *s, const char *str, size_t len)
{
    if (len == 0)
        return -EINVAL;
    if (len > STOP_MAX_LEN)
        return -E2BIG;
    if (s->n >= STOP_MAX)
        return -ENOSPC;
    memcpy(s->str[s->n], str, len);
    s->len[s->n] = (uint32_t)len;
    s->n++;
    return 0;
}

/* The length of the longest suffix of text[0, n) that is a proper prefix of a stop string. */
static size_t stop_partial(const struct stop *s, const char *text, size_t n)
{
    size_t longest = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        size_t k = s->len[i] - 1 < n ? s->len[i] - 1 : n;
        for (; k > longest; k--)
            if (memcmp(text + n - k, s->str[i], k) == 0)
                break;
        if (k > longest)
            longest = k;
    }
    return longest;
}

/* Move cut back so that text[0, cut) does not end inside a character (text[0, n) may itself
 * end inside one: that character is held too). Bytes that are not UTF-8 are left alone. */
static size_t utf8_cut(const char *text, size_t cut)
{
    size_t p = cut;
    for (int back = 0; back < 4 && p > 0; back++) {
        unsigned char b = (unsigned char)text[--p];
        if ((b & 0xC0) == 0x80)
            continue; /* a continuation byte: its lead is further back */
        size_t need = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3
                                 : (b & 0xF8) == 0xF0   ? 4 : 1;
        return p + need > cut ? p : cut;
    }
    return cut;
}

int stop_push(struct stop *s, const char *text, size_t len, char *out, size_t cap,
              bool *matched)
{
    *matched = s->matched;
    if (s->matched)
        return 0;
    size_t total = s->n_held + len;
    if (cap < total)
        return -ENOSPC;
    memcpy(out, s->held, s->n_held);
    memcpy(out + s->n_held, text, len);
    s->n_held = 0;

    /* The earliest match wins; a match ending in the held text alone was found before. */
    const char *first = NULL;
    for (uint32_t i = 0; i < s->n; i++) {
        size_t hay = first ? (size_t)(first - out) + s->len[i] - 1 : total;
        const char *m = memmem(out, hay < total ? hay : total, s->str[i], s->len[i]);
        if (m && (!first || m < first))
            first = m;
    }
    if (first) {
        s->matched = true;
        *matched = true;
        return (int)(first - out);
    }

    size_t cut = utf8_cut(out, total - stop_partial(s, out, total));
    s->n_held = (uint32_t)(total - cut);
    memcpy(s->held, out + cut, s->n_held);
    return (int)cut;
}

size_t stop_finish(struct stop *s, char *out)
{
    size_t n = s->matched ? 0 : s->n_held;
    memcpy(out, s->held, n);
    s->n_held = 0;
    return n;
}
