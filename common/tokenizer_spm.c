/* SentencePiece-style BPE over scores ("llama" vocabularies): spaces become U+2581, the text
 * starts as one symbol per UTF-8 character, and the adjacent pair whose merged piece has the
 * highest score is merged first (ties: leftmost), from a heap over a linked list of symbols,
 * so a long run without spaces costs O(n log n). Characters left without a token fall back
 * to <0xNN> byte tokens, or the unknown token. */
#include "tokenizer_impl.h"
#include "tok_heap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct spm_sym {
    int32_t prev, next;
    uint32_t off, len; /* len 0: merged into its left neighbour */
};

/* Whether ordinary text may become this token (control, byte, unknown, unused and
 * user-defined pieces only come from the special-token splitter or the byte fallback). */
static bool spm_mergeable(const struct tokenizer *t, uint32_t id)
{
    uint8_t ty = t->types[id];
    return ty == TOK_TYPE_NORMAL || ty == TOK_TYPE_UNDEFINED;
}

static int spm_try_pair(const struct tokenizer *t, const char *buf, const struct spm_sym *sym,
                        int32_t left, int32_t right, struct tok_heap *h)
{
    if (left < 0 || right < 0)
        return 0;
    uint32_t size = sym[left].len + sym[right].len;
    if (size > t->max_token_len)
        return 0;
    uint32_t id = tok_text_map_get(&t->by_text, t, buf + sym[left].off, size);
    if (id == TOK_NONE || !spm_mergeable(t, id))
        return 0;
    /* higher score first, ties leftmost; size drops the entry once a side has grown */
    struct tok_merge m = {.key = tok_merge_key(tok_score_prio(t->scores[id]), left),
                          .left = left,
                          .right = right,
                          .id = id,
                          .seen = {size}};
    return tok_heap_push(h, &m);
}

static void spm_emit(const struct tokenizer *t, const char *s, uint32_t len, struct tok_out *o)
{
    uint32_t id = tok_text_map_get(&t->by_text, t, s, len);
    if (id != TOK_NONE && spm_mergeable(t, id)) {
        tok_out_push(o, id);
        return;
    }
    /* Only single characters get here: merges always make tokens. */
    for (uint32_t i = 0; i < len; i++) {
        uint32_t b = t->byte_ids[(unsigned char)s[i]];
        if (b != TOK_NONE) {
            tok_out_push(o, b);
        } else if (t->unk >= 0) {
            tok_out_push(o, (uint32_t)t->unk);
            return; /* one unknown token for the whole character */
        }
    }
}

static bool is_space_at(const char *s, size_t i, size_t n)
{
    return i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0;
}

void tok_spm_prepare(struct tokenizer *t)
{
    t->spm_word_split = true;
    for (uint32_t id = 0; id < t->n_vocab && t->spm_word_split; id++) {
        uint32_t len;
        const char *s = tok_text(t, id, &len);
        if (!spm_mergeable(t, id))
            continue;
        for (uint32_t i = 1; i < len; i++)
            if (is_space_at(s, i, len) && !(i >= 3 && is_space_at(s, i - 3, len)))
                t->spm_word_split = false;
    }
}

/* Merge one word (or the whole text) of the escaped buffer; sym has room for n symbols. */
static int spm_word(const struct tokenizer *t, const char *buf, size_t n, struct spm_sym *sym,
                    struct tok_heap *h, struct tok_out *o)
{
    int err;
    int32_t n_sym = 0;
    for (size_t i = 0; i < n; n_sym++) {
        size_t cl = utf8_char_len((const unsigned char *)buf + i, n - i);
        if (cl == 0)
            cl = 1; /* an invalid byte is a symbol of its own; it falls back to <0xNN> */
        sym[n_sym] = (struct spm_sym){
            .prev = n_sym - 1, .next = n_sym + 1, .off = (uint32_t)i, .len = (uint32_t)cl};
        i += cl;
    }
    if (n_sym == 0)
        return 0;
    sym[n_sym - 1].next = -1;
    h->n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        if ((err = spm_try_pair(t, buf, sym, i - 1, i, h)) < 0)
            return err;

    while (h->n > 0) {
        struct tok_merge b = tok_heap_pop(h);
        struct spm_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->len == 0 || r->len == 0 || l->next != b.right || l->len + r->len != b.seen[0])
            continue; /* one side was merged since this pair was queued */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = b.left;
        if ((err = spm_try_pair(t, buf, sym, l->prev, b.left, h)) < 0 ||
            (err = spm_try_pair(t, buf, sym, b.left, l->next, h)) < 0)
            return err;
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        spm_emit(t, buf + sym[i].off, sym[i].len, o);
    return 0;
}

int tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, bool prefix_space,
                   struct tok_out *o)
{
    static const char space[3] = {(char)0xE2, (char)0x96, (char)0x81}; /* U+2581 */
    struct tok_heap h = {0};
    struct spm_sym *sym = NULL;
    char *buf = NULL;
    int err = -ENOMEM;

    if (len > UINT32_MAX / 4)
        return -E2BIG;
    buf = malloc(3 * (len + 1));
    sym = malloc((len + 1) * sizeof(*sym));
    if (!buf || !sym)
        goto out;
    size_t n = 0;
    if (prefix_space) {
        memcpy(buf, space, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, space, 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    /* Word by word when no merge can cross a word start (small heaps stay in cache), else
     * the whole text at once. */
    size_t word = 0;
    if (t->spm_word_split) {
        for (size_t i = 1; i < n; i++) {
            if (!is_space_at(buf, i, n) || (i >= 3 && is_space_at(buf, i - 3, n)))
                continue; /* not a word start: a run of spaces stays together */
            if ((err = spm_word(t, buf + word, i - word, sym, &h, o)) < 0)
                goto out;
            word = i;
            i += 2;
        }
    }
    err = spm_word(t, buf + word, n - word, sym, &h, o);
out:
    tok_heap_free(&h);
    free(sym);
    free(buf);
    return err;
}
