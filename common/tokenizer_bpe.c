/* Byte-level BPE ("gpt2" vocabularies): the pre-tokenizer splits the text into words, each
 * byte of a word becomes its GPT-2 unicode character, and adjacent pairs are merged lowest
 * merge rank first (ties: leftmost) from a heap over a linked list of symbols. Merges are
 * looked up by the pair of token ids, so no strings are built while encoding. */
#include "tokenizer_impl.h"
#include "tok_heap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

/* GPT-2's bytes->unicode table: printable Latin-1 bytes stand for themselves, the other 68
 * (0-32, 127-160, 173) take code points 256.. in byte order. */
static uint32_t byte_to_cp(unsigned b)
{
    if (b <= 32)
        return 256 + b;
    if (b >= 127 && b <= 160)
        return 256 + 33 + (b - 127);
    if (b == 173)
        return 256 + 67;
    return b;
}

/* The inverse; -1 for a code point outside the table. */
static int cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_to_cp(cp) == cp ? (int)cp : -1;
    uint32_t n = cp - 256;
    if (n <= 32)
        return (int)n;
    if (n <= 66)
        return (int)(127 + n - 33);
    if (n == 67)
        return 173;
    return -1;
}

static size_t cp_to_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6)); /* the table only reaches U+0143 */
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

size_t tok_bpe_decode_text(const char *s, size_t len, char *buf, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        const unsigned char *u = (const unsigned char *)s + i;
        size_t cl = utf8_char_len(u, len - i);
        int b = -1;
        if (cl == 1)
            b = cp_to_byte(u[0]);
        else if (cl == 2)
            b = cp_to_byte((uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F));
        if (cl == 0)
            cl = 1;
        if (b >= 0) {
            if (n < cap)
                buf[n] = (char)b;
            n++;
        } else {
            for (size_t k = 0; k < cl; k++, n++)
                if (n < cap)
                    buf[n] = s[i + k];
        }
        i += cl;
    }
    return n;
}

int tok_bpe_load(struct tokenizer *t, const struct gguf_kv *merges, char *err, size_t errlen)
{
    char *cat = NULL;
    int ret;

    for (unsigned b = 0; b < 256; b++) {
        char u[2];
        size_t n = cp_to_utf8(byte_to_cp(b), u);
        t->char_ids[b] = tok_text_map_get(&t->by_text, t, u, n);
    }
    if (!merges || merges->type != GGUF_TYPE_ARRAY || merges->arr_type != GGUF_TYPE_STRING) {
        snprintf(err, errlen, "tokenizer.ggml.merges: missing or not a string array");
        return -EINVAL;
    }
    if ((ret = tok_pair_map_init(&t->merges, merges->arr_n)) < 0)
        return ret;
    for (uint64_t r = 0; r < merges->arr_n; r++) {
        struct gguf_str m = gguf_arr_str(merges, r);
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp)
            continue; /* malformed: skipped, as it can never apply */
        size_t ll = (size_t)(sp - m.ptr), rl = m.len - ll - 1;
        if (ll + rl > t->max_token_len)
            continue;
        uint32_t left = tok_text_map_get(&t->by_text, t, m.ptr, ll);
        uint32_t right = tok_text_map_get(&t->by_text, t, sp + 1, rl);
        if (!(cat = realloc(cat, ll + rl + 1))) {
            tok_pair_map_free(&t->merges);
            return -ENOMEM;
        }
        memcpy(cat, m.ptr, ll);
        memcpy(cat + ll, sp + 1, rl);
        uint32_t result = tok_text_map_get(&t->by_text, t, cat, ll + rl);
        if (left != TOK_NONE && right != TOK_NONE && result != TOK_NONE)
            tok_pair_map_put(&t->merges, left, right, (uint32_t)r, result);
    }
    free(cat);
    return 0;
}

struct bpe_sym {
    int32_t prev, next;
    uint32_t id; /* TOK_NONE: a byte whose character is not in the vocabulary */
    bool alive;
};

/* Scratch reused for every word of one encode call. */
struct bpe_ctx {
    const struct tokenizer *t;
    const char *text;
    struct tok_out *o;
    struct bpe_sym *sym;
    size_t sym_cap;
    struct tok_heap heap;
    char *word;      /* the word in byte-level characters, for whole-word look-ups */
    size_t word_cap;
};

/* The token whose text is the whole word, or TOK_NONE: pre-tokenizers with "ignore_merges"
 * (Llama 3's, Tekken's) take such a word as one token without running the merges, as the
 * Hugging Face tokenizer does. */
static uint32_t whole_word(struct bpe_ctx *c, const unsigned char *w, size_t len)
{
    const struct tokenizer *t = c->t;
    size_t n = 0;
    if (len > t->max_token_len)
        return TOK_NONE; /* every character is at least one byte */
    if (2 * len > c->word_cap) {
        size_t cap = 2 * len < 256 ? 256 : 4 * len;
        char *b = realloc(c->word, cap);
        if (!b)
            return TOK_NONE; /* the merges give a valid answer anyway */
        c->word = b;
        c->word_cap = cap;
    }
    for (size_t i = 0; i < len; i++) {
        uint32_t cl;
        if (t->char_ids[w[i]] == TOK_NONE)
            return TOK_NONE;
        const char *ch = tok_text(t, t->char_ids[w[i]], &cl);
        if (cl > 2 || n + cl > c->word_cap)
            return TOK_NONE;
        memcpy(c->word + n, ch, cl);
        n += cl;
    }
    return tok_text_map_get(&t->by_text, t, c->word, n);
}

/* Queue the merge of left and right if there is one: lowest rank first, ties leftmost. The
 * heap never outgrows 3 entries per byte of the word (one per initial pair and two per
 * merge), and bpe_word reserves that, so this does not allocate. */
static int try_pair(struct bpe_ctx *c, int32_t left, int32_t right)
{
    uint32_t rank, result;
    if (left < 0 || right < 0)
        return 0;
    uint32_t lid = c->sym[left].id, rid = c->sym[right].id;
    if (lid == TOK_NONE || rid == TOK_NONE ||
        !tok_pair_map_get(&c->t->merges, lid, rid, &rank, &result))
        return 0;
    struct tok_merge m = {.key = tok_merge_key(rank, left),
                          .left = left,
                          .right = right,
                          .id = result,
                          .seen = {lid, rid}};
    return tok_heap_push(&c->heap, &m);
}

static int bpe_word(void *arg, size_t off, size_t len)
{
    struct bpe_ctx *c = arg;
    const struct tokenizer *t = c->t;
    const unsigned char *w = (const unsigned char *)c->text + off;
    int err;

    if (len == 1) {
        uint32_t id = t->char_ids[w[0]];
        if (id != TOK_NONE || t->unk >= 0)
            tok_out_push(c->o, id != TOK_NONE ? id : (uint32_t)t->unk);
        return 0;
    }
    if (t->ignore_merges) {
        uint32_t id = whole_word(c, w, len);
        if (id != TOK_NONE) {
            tok_out_push(c->o, id);
            return 0;
        }
    }
    if (len > c->sym_cap) {
        size_t cap = len < 256 ? 256 : 2 * len;
        struct bpe_sym *s = realloc(c->sym, cap * sizeof(*s));
        if (!s)
            return -ENOMEM;
        c->sym = s;
        if (tok_heap_reserve(&c->heap, 3 * cap) < 0)
            return -ENOMEM;
        c->sym_cap = cap;
    }
    for (size_t i = 0; i < len; i++)
        c->sym[i] = (struct bpe_sym){.prev = (int32_t)i - 1,
                                     .next = i + 1 < len ? (int32_t)i + 1 : -1,
                                     .id = t->char_ids[w[i]],
                                     .alive = true};
    c->heap.n = 0;
    for (size_t i = 1; i < len; i++)
        if ((err = try_pair(c, (int32_t)i - 1, (int32_t)i)) < 0)
            return err;
    while (c->heap.n > 0) {
        struct tok_merge p = tok_heap_pop(&c->heap);
        struct bpe_sym *l = &c->sym[p.left], *r = &c->sym[p.right];
        if (!l->alive || !r->alive || l->next != p.right || l->id != p.seen[0] ||
            r->id != p.seen[1])
            continue; /* a neighbour merged since this pair was queued */
        l->id = p.id;
        r->alive = false;
        l->next = r->next;
        if (r->next >= 0)
            c->sym[r->next].prev = p.left;
        if ((err = try_pair(c, l->prev, p.left)) < 0 || (err = try_pair(c, p.left, l->next)) < 0)
            return err;
    }
    for (int32_t i = 0; i >= 0; i = c->sym[i].next) {
        uint32_t id = c->sym[i].id;
        if (id != TOK_NONE)
            tok_out_push(c->o, id);
        else if (t->unk >= 0)
            tok_out_push(c->o, (uint32_t)t->unk);
    }
    return 0;
}

int tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_out *o)
{
    struct bpe_ctx c = {.t = t, .text = text, .o = o};
    int err = tok_pre_split(t->pre, text, len, bpe_word, &c);
    free(c.sym);
    free(c.word);
    tok_heap_free(&c.heap);
    return err;
}
