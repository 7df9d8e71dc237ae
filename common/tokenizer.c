/* Text <-> token ids: the mock model's byte tokenizer, and loading a GGUF's tokenizer.ggml.*
 * keys into a vocabulary with hash maps; the special-token splitter and the piece table. The
 * merge algorithms live in tokenizer_spm.c and tokenizer_bpe.c. */
#include "tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer_impl.h"

/* Texts that end generation when a model declares them as control tokens. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|end_of_text|>", "<|im_end|>",   "<|endoftext|>",
    "</s>",       "<end_of_turn>",   "<|end|>",      "<|eom_id|>",
};

struct tokenizer *tokenizer_create_bytes(void)
{
    struct tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->kind = TOKENIZER_KIND_BYTES;
    t->n_vocab = TOKENIZER_BYTES_EOS + 1;
    t->bos = -1;
    t->eos = TOKENIZER_BYTES_EOS;
    t->unk = -1;
    t->eog = malloc(sizeof(*t->eog));
    if (!t->eog) {
        free(t);
        return NULL;
    }
    t->eog[0] = TOKENIZER_BYTES_EOS;
    t->n_eog = 1;
    return t;
}

void tokenizer_destroy(struct tokenizer *t)
{
    if (!t)
        return;
    free(t->text_pool);
    free(t->text_off);
    free(t->scores);
    free(t->types);
    tok_text_map_free(&t->by_text);
    tok_pair_map_free(&t->merges);
    tok_pre_destroy(t->pre);
    free(t->specials);
    free(t->trie);
    free(t->eog);
    free(t);
}

/* ---- loading ---- */

/* Element i of an integer or float array as a double; false for other element types. */
static bool arr_num(const struct gguf_kv *kv, uint64_t i, double *v)
{
    const unsigned char *p = kv->arr_data;
    union {
        int8_t i8;
        uint8_t u8;
        int16_t i16;
        uint16_t u16;
        int32_t i32;
        uint32_t u32;
        float f32;
    } u;
    switch (kv->arr_type) {
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_BOOL:
        memcpy(&u, p + i, 1);
        *v = kv->arr_type == GGUF_TYPE_INT8 ? u.i8 : u.u8;
        return true;
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT16:
        memcpy(&u, p + 2 * i, 2);
        *v = kv->arr_type == GGUF_TYPE_INT16 ? u.i16 : u.u16;
        return true;
    case GGUF_TYPE_INT32:
        memcpy(&u, p + 4 * i, 4);
        *v = u.i32;
        return true;
    case GGUF_TYPE_UINT32:
        memcpy(&u, p + 4 * i, 4);
        *v = u.u32;
        return true;
    case GGUF_TYPE_FLOAT32:
        memcpy(&u, p + 4 * i, 4);
        *v = u.f32;
        return true;
    default:
        return false;
    }
}

/* An optional numeric array of n_vocab elements: absent is fine, anything else is an error. */
static const struct gguf_kv *find_vocab_arr(const struct gguf *g, const char *key, uint32_t n,
                                            char *err, size_t errlen)
{
    const struct gguf_kv *kv = gguf_find(g, key);
    double v;
    if (!kv)
        return NULL;
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_n != n || !kv->arr_data || !arr_num(kv, 0, &v)) {
        snprintf(err, errlen, "%s: expected a numeric array of %u elements", key, n);
        return (const struct gguf_kv *)-1;
    }
    return kv;
}

/* An optional token id: absent or out of range gives dflt (files carry stale pad ids). */
static long get_id(const struct gguf *g, const char *key, long dflt, uint32_t n_vocab)
{
    uint32_t v;
    if (gguf_get_u32(g, key, &v) < 0)
        return dflt;
    return v < n_vocab ? (long)v : -1;
}

static bool get_bool(const struct gguf *g, const char *key, bool dflt)
{
    bool v;
    return gguf_get_bool(g, key, &v) == 0 ? v : dflt;
}

static int load_vocab(struct tokenizer *t, const struct gguf *g, char *err, size_t errlen)
{
    const struct gguf_kv *tokens = gguf_find(g, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != GGUF_TYPE_ARRAY || tokens->arr_type != GGUF_TYPE_STRING ||
        tokens->arr_n == 0 || tokens->arr_n >= INT32_MAX) {
        snprintf(err, errlen, "tokenizer.ggml.tokens: missing or not a non-empty string array");
        return -EINVAL;
    }
    uint32_t n = (uint32_t)tokens->arr_n;
    t->n_vocab = n;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += gguf_arr_str(tokens, i).len;
    t->text_pool = malloc(total + 1);
    t->text_off = malloc((n + (size_t)1) * sizeof(*t->text_off));
    t->scores = calloc(n, sizeof(*t->scores));
    t->types = malloc(n);
    if (!t->text_pool || !t->text_off || !t->scores || !t->types)
        return -ENOMEM;
    uint64_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(tokens, i);
        memcpy(t->text_pool + off, s.ptr, s.len);
        t->text_off[i] = off;
        off += s.len;
        if (s.len > t->max_token_len)
            t->max_token_len = (uint32_t)s.len;
    }
    t->text_off[n] = off;
    t->text_pool[off] = '\0';

    const struct gguf_kv *scores = find_vocab_arr(g, "tokenizer.ggml.scores", n, err, errlen);
    const struct gguf_kv *types = find_vocab_arr(g, "tokenizer.ggml.token_type", n, err, errlen);
    if (scores == (const void *)-1 || types == (const void *)-1)
        return -EINVAL;
    for (uint32_t i = 0; i < n; i++) {
        double v = 0;
        if (scores && arr_num(scores, i, &v))
            t->scores[i] = (float)v;
        v = TOK_TYPE_NORMAL;
        if (types)
            (void)arr_num(types, i, &v);
        t->types[i] = v >= 0 && v <= TOK_TYPE_BYTE ? (uint8_t)v : TOK_TYPE_NORMAL;
    }
    return tok_text_map_build(&t->by_text, t);
}

/* A user-defined token that reads like a turn marker or ends generation is a control token
 * in effect (llama.cpp overrides such types too): matched in raw text it would let a client
 * forge "<|im_end|>" or "<|eot_id|>". */
static bool looks_control(const struct tokenizer *t, uint32_t id, const long *ids, size_t n_ids)
{
    uint32_t len;
    const char *s = tok_text(t, id, &len);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] == (long)id)
            return true;
    if (len >= 4 && memcmp(s, "<|", 2) == 0 && memcmp(s + len - 2, "|>", 2) == 0)
        return true;
    for (size_t i = 0; i < sizeof(eog_texts) / sizeof(eog_texts[0]); i++)
        if (strlen(eog_texts[i]) == len && memcmp(eog_texts[i], s, len) == 0)
            return true;
    return false;
}

/* Whitespace rules the file implies (GGUF has no field for them; llama.cpp keys them on the
 * model's name): a Phi-3 model's special tokens eat the whitespace after them, except <unk>,
 * <s> and <|endoftext|>. */
static uint8_t strip_of(const struct tokenizer *t, uint32_t id, bool phi3)
{
    uint32_t len;
    const char *s = tok_text(t, id, &len);
    if (!phi3)
        return 0;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
        if (strlen(keep[i]) == len && memcmp(keep[i], s, len) == 0)
            return 0;
    return TOK_STRIP_R;
}

static bool is_special_type(uint8_t type)
{
    return type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED ||
           type == TOK_TYPE_UNKNOWN;
}

/* The trie of the n specials' texts. Specials are in id order, so of two with one text the
 * lower id is kept (as the sorted table before it did). */
static int trie_build(struct tokenizer *t, size_t n)
{
    size_t cap = 1, used = 1;
    for (size_t k = 0; k < n; k++)
        cap += t->specials[k].len;
    if (!(t->trie = calloc(cap, sizeof(*t->trie))))
        return -ENOMEM;
    memset(t->trie_root, 0, sizeof(t->trie_root));
    for (size_t k = 0; k < n; k++) {
        uint32_t len;
        const unsigned char *s = (const unsigned char *)tok_text(t, t->specials[k].id, &len);
        uint32_t *link = &t->trie_root[s[0]], node = 0;
        for (uint32_t j = 0; j < len; j++) {
            if (j > 0)
                link = &t->trie[node].child;
            while (*link && t->trie[*link].byte != s[j])
                link = &t->trie[*link].sibling;
            if (!*link) {
                t->trie[used].byte = s[j];
                *link = (uint32_t)used++;
            }
            node = *link;
        }
        if (!t->trie[node].special)
            t->trie[node].special = (uint32_t)k + 1;
    }
    return 0;
}

/* The splitter's table: control, user-defined and unknown tokens (llama.cpp's special-token
 * cache), as a trie. */
static int load_specials(struct tokenizer *t, const struct gguf *g)
{
    long marked[4] = {t->bos, t->eos, get_id(g, "tokenizer.ggml.eot_token_id", -1, t->n_vocab),
                      get_id(g, "tokenizer.ggml.eom_token_id", -1, t->n_vocab)};
    bool phi3 = false;
    struct gguf_str name;
    if (gguf_get_str(g, "general.name", &name) == 0) {
        char low[256];
        size_t n = name.len < sizeof(low) - 1 ? name.len : sizeof(low) - 1;
        for (size_t i = 0; i < n; i++)
            low[i] = (char)tolower((unsigned char)name.ptr[i]);
        low[n] = '\0';
        phi3 = strstr(low, "phi-3") || strstr(low, "phi3");
    }
    size_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->types[i]) && t->text_off[i + 1] > t->text_off[i])
            n++;
    t->specials = malloc((n ? n : 1) * sizeof(*t->specials));
    if (!t->specials)
        return -ENOMEM;
    n = 0;
    t->n_always = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint32_t len;
        (void)tok_text(t, i, &len);
        if (!is_special_type(t->types[i]) || !len)
            continue;
        if (t->types[i] == TOK_TYPE_USER_DEFINED && looks_control(t, i, marked, 4))
            t->types[i] = TOK_TYPE_CONTROL;
        bool always = t->types[i] == TOK_TYPE_USER_DEFINED;
        t->specials[n++] = (struct tok_special){
            .id = i, .len = len, .strip = strip_of(t, i, phi3), .always = always};
        t->n_always += always;
    }
    return trie_build(t, n);
}

static void add_eog(struct tokenizer *t, long id)
{
    if (id < 0)
        return;
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == (uint32_t)id)
            return;
    t->eog[t->n_eog++] = (uint32_t)id;
}

static int load_eog(struct tokenizer *t, const struct gguf *g)
{
    size_t n = 3 + sizeof(eog_texts) / sizeof(eog_texts[0]);
    t->eog = malloc(n * sizeof(*t->eog));
    if (!t->eog)
        return -ENOMEM;
    add_eog(t, t->eos);
    add_eog(t, get_id(g, "tokenizer.ggml.eot_token_id", -1, t->n_vocab));
    add_eog(t, get_id(g, "tokenizer.ggml.eom_token_id", -1, t->n_vocab));
    for (size_t i = 0; i < sizeof(eog_texts) / sizeof(eog_texts[0]); i++)
        add_eog(t, tokenizer_find_special(t, eog_texts[i]));
    return 0;
}

struct tokenizer *tokenizer_create_gguf(const struct gguf *g, char *err, size_t errlen)
{
    struct gguf_str model;
    char pre[64] = "default";
    struct tokenizer *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    err[0] = '\0';
    if (gguf_get_str(g, "tokenizer.ggml.model", &model) < 0) {
        snprintf(err, errlen, "tokenizer.ggml.model: missing or not a string");
        goto fail;
    }
    if (gguf_str_eq(model, "llama")) {
        t->kind = TOKENIZER_KIND_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        t->kind = TOKENIZER_KIND_BPE;
    } else {
        snprintf(err, errlen, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)",
                 (int)(model.len > 64 ? 64 : model.len), model.ptr);
        goto fail;
    }
    if (load_vocab(t, g, err, errlen) < 0)
        goto fail;

    bool spm = t->kind == TOKENIZER_KIND_SPM;
    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, t->n_vocab);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, t->n_vocab);
    t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, t->n_vocab);
    t->add_bos = get_bool(g, "tokenizer.ggml.add_bos_token", spm);
    t->add_eos = get_bool(g, "tokenizer.ggml.add_eos_token", false);
    t->add_space_prefix = get_bool(g, "tokenizer.ggml.add_space_prefix", spm);

    if (spm) {
        for (unsigned b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", b);
            t->byte_ids[b] = tok_text_map_get(&t->by_text, t, name, 6);
        }
        tok_spm_prepare(t);
    } else {
        struct gguf_str s;
        if (gguf_get_str(g, "tokenizer.ggml.pre", &s) == 0)
            snprintf(pre, sizeof(pre), "%.*s", (int)(s.len > 63 ? 63 : s.len), s.ptr);
        if (!(t->pre = tok_pre_create(pre, err, errlen)))
            goto fail;
        t->ignore_merges = tok_pre_ignores_merges(t->pre);
        if (tok_bpe_load(t, gguf_find(g, "tokenizer.ggml.merges"), err, errlen) < 0)
            goto fail;
    }
    if (load_specials(t, g) < 0 || load_eog(t, g) < 0)
        goto fail;
    return t;
fail:
    if (!err[0])
        snprintf(err, errlen, "out of memory loading the tokenizer");
    tokenizer_destroy(t);
    return NULL;
}

uint32_t tokenizer_n_vocab(const struct tokenizer *t)
{
    return t->n_vocab;
}

/* ---- encoding ---- */

/* Ordinary text between special tokens. prev_special: nothing or a special token came just
 * before (SentencePiece then prefixes its space, as llama.cpp does). */
static int encode_plain(const struct tokenizer *t, const char *text, size_t len,
                        bool prev_special, struct tok_out *o)
{
    if (len == 0)
        return 0;
    if (t->kind == TOKENIZER_KIND_SPM)
        return tok_spm_encode(t, text, len, t->add_space_prefix && prev_special, o);
    return tok_bpe_encode(t, text, len, o);
}

/* The longest special token whose text starts text[0..len), or NULL: user-defined ones
 * (always) anywhere in len, the others only when they end within limit (0: none of them). */
static const struct tok_special *match_special(const struct tokenizer *t, const char *text,
                                               size_t len, size_t limit)
{
    const struct tok_special *best = NULL;
    uint32_t node = t->trie_root[(unsigned char)text[0]];
    for (size_t depth = 1; node; depth++) {
        uint32_t k = t->trie[node].special;
        if (k) {
            const struct tok_special *s = &t->specials[k - 1];
            if (depth <= (s->always ? len : limit))
                best = s;
        }
        if (depth >= len)
            break;
        unsigned char b = (unsigned char)text[depth];
        for (node = t->trie[node].child; node && t->trie[node].byte != b;)
            node = t->trie[node].sibling;
    }
    return best;
}

long tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                      uint32_t *out, size_t cap)
{
    return tokenizer_encode_masked(t, text, len, flags, NULL, 0, out, cap);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* The plain run text[start, end) from byte from on (start < from < end), into o, when the
 * run's encoding has a token boundary there: its first tokens' pieces are exactly
 * text[start, from), and the rest of its tokens go out. Those are the tokens the whole
 * text's encoding has from from on, whatever ids stand for the bytes before. Only byte-level
 * BPE runs can (its pre-tokenizer cuts words; SentencePiece encodes a run as one). One
 * encoding of the run, as the whole text's takes. -ESRCH when not. */
static int plain_tail(const struct tokenizer *t, const char *text, size_t start, size_t end,
                      size_t from, struct tok_out *o)
{
    struct tok_out whole = {0};
    char buf[512];
    size_t at = start, head = 0;
    int err;

    if (t->kind != TOKENIZER_KIND_BPE)
        return -ESRCH;
    whole.cap = end - start; /* a byte-level word of L bytes is at most L tokens */
    if (!(whole.ids = malloc(whole.cap * sizeof(uint32_t))))
        return -ENOMEM;
    if ((err = tok_bpe_encode(t, text + start, end - start, &whole)) < 0)
        goto out;
    err = -ESRCH;
    if (whole.n > whole.cap)
        goto out;
    while (at < from && head < whole.n) {
        int k = tokenizer_piece(t, whole.ids[head++], true, buf, sizeof(buf));
        if (k < 0 || (size_t)k > sizeof(buf) || (size_t)k > end - at ||
            memcmp(buf, text + at, (size_t)k) != 0)
            goto out;
        at += (size_t)k;
    }
    if (at != from)
        goto out; /* from is inside a token */
    for (; head < whole.n; head++)
        tok_out_push(o, whole.ids[head]);
    err = 0;
out:
    free(whole.ids);
    return err;
}

/* The plain run text[start, end) into o, as far as it lies at or past from: *at says
 * whether the output has reached from already (at a point where the encoding starts
 * afresh); a run that holds from is cut there by plain_tail(). */
static int plain_from(const struct tokenizer *t, const char *text, size_t start, size_t end,
                      bool prev_special, size_t from, bool *at, struct tok_out *o)
{
    int err;
    if (*at)
        return encode_plain(t, text + start, end - start, prev_special, o);
    if (end <= from)
        return 0; /* wholly before from */
    if (from < start)
        return -ESRCH; /* from is in text the encoding dropped */
    if (from == start) {
        *at = true;
        return encode_plain(t, text + start, end - start, prev_special, o);
    }
    if ((err = plain_tail(t, text, start, end, from, o)) == 0)
        *at = true;
    return err;
}

/* tokenizer_encode_masked()'s tokens from byte from on (tokenizer_encode_masked_from()). */
static long encode_from(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                        const struct tokenizer_span *plain, size_t n_plain, size_t from,
                        uint32_t *out, size_t cap)
{
    struct tok_out o = {.ids = out, .cap = cap, .n = 0};
    size_t k = 0; /* the first plain span that does not end before i */
    bool parse = flags & TOKENIZER_PARSE_SPECIAL;
    bool at = from == 0; /* the output has reached from */
    int err;

    if (from > len)
        return -ESRCH;
    if (t->kind == TOKENIZER_KIND_BYTES) {
        /* no BOS; EOS is never added to a prompt; no special texts: a token per byte */
        for (size_t i = from; i < len && i - from < cap; i++)
            out[i - from] = (unsigned char)text[i];
        return (long)(len - from);
    }
    if ((flags & TOKENIZER_ADD_SPECIAL) && t->add_bos && t->bos >= 0 && at)
        tok_out_push(&o, (uint32_t)t->bos);
    size_t start = 0;
    bool prev_special = true;
    if (parse || t->n_always) {
        /* Leftmost, then longest: llama.cpp partitions by each special text in turn, longest
         * first, which gives the same tokens unless two special texts overlap. */
        for (size_t i = 0; i < len;) {
            size_t limit = parse ? len - i : 0; /* where a non-user-defined text must end */
            while (k < n_plain && plain[k].off + plain[k].len <= i)
                k++;
            if (parse && k < n_plain && plain[k].len > 0) {
                if (plain[k].off <= i) {
                    if (!t->n_always) {
                        i = plain[k].off + plain[k].len; /* ordinary text throughout */
                        continue;
                    }
                    limit = 0; /* inside: only user-defined texts */
                } else if (plain[k].off - i < limit) {
                    limit = plain[k].off - i; /* must end before the plain span */
                }
            }
            const struct tok_special *s = match_special(t, text + i, len - i, limit);
            if (!s) {
                i++;
                continue;
            }
            size_t end = i;
            if (s->strip & TOK_STRIP_L)
                while (end > start && is_blank(text[end - 1]))
                    end--;
            if (!at && from == i && end == i) {
                at = true; /* the special token starts the rest afresh */
            } else if (end > start) {
                if ((err = plain_from(t, text, start, end, prev_special, from, &at, &o)) < 0)
                    return err;
            }
            if (!at && from < i + s->len)
                return -ESRCH; /* inside the special text, or in blanks dropped before it */
            if (at)
                tok_out_push(&o, s->id);
            prev_special = true;
            i += s->len;
            if (!at && from == i)
                at = true; /* past a special token: the next run starts afresh */
            if (s->strip & TOK_STRIP_R)
                while (i < len && is_blank(text[i]))
                    i++;
            start = i;
        }
    }
    if (start < len && (err = plain_from(t, text, start, len, prev_special, from, &at, &o)) < 0)
        return err;
    if (!at && from < len)
        return -ESRCH;
    if ((flags & TOKENIZER_ADD_SPECIAL) && t->add_eos && t->eos >= 0)
        tok_out_push(&o, (uint32_t)t->eos);
    return (long)o.n;
}

long tokenizer_encode_masked(const struct tokenizer *t, const char *text, size_t len,
                             unsigned flags, const struct tokenizer_span *plain, size_t n_plain,
                             uint32_t *out, size_t cap)
{
    return encode_from(t, text, len, flags, plain, n_plain, 0, out, cap);
}

long tokenizer_encode_masked_from(const struct tokenizer *t, const char *text, size_t len,
                                  unsigned flags, const struct tokenizer_span *plain,
                                  size_t n_plain, size_t from, uint32_t *out, size_t cap)
{
    return encode_from(t, text, len, flags, plain, n_plain, from, out, cap);
}

/* ---- decoding ---- */

static int put(char *buf, size_t cap, const char *s, size_t len)
{
    memcpy(buf, s, len < cap ? len : cap);
    return (int)len;
}

static int piece_bytes(uint32_t id, bool render_special, char *buf, size_t cap)
{
    if (id == TOKENIZER_BYTES_EOS)
        return render_special ? put(buf, cap, "<eos>", 5) : 0;
    char c = (char)id;
    return put(buf, cap, &c, 1);
}

/* SentencePiece text: U+2581 is a space. */
static int piece_spm(const char *s, uint32_t len, char *buf, size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < len; i++) {
        char c = s[i];
        if (i + 2 < len && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 &&
            (unsigned char)s[i + 2] == 0x81) {
            c = ' ';
            i += 2;
        }
        if (n < cap)
            buf[n] = c;
        n++;
    }
    return (int)n;
}

int tokenizer_piece(const struct tokenizer *t, uint32_t id, bool render_special, char *buf,
                    size_t cap)
{
    uint32_t len;
    if (id >= t->n_vocab)
        return -EINVAL;
    if (t->kind == TOKENIZER_KIND_BYTES)
        return piece_bytes(id, render_special, buf, cap);
    const char *s = tok_text(t, id, &len);
    switch (t->types[id]) {
    case TOK_TYPE_CONTROL:
        return render_special ? put(buf, cap, s, len) : 0;
    case TOK_TYPE_USER_DEFINED:
        return put(buf, cap, s, len);
    case TOK_TYPE_UNKNOWN:
        return put(buf, cap, "\xe2\x96\x85", 3); /* a visible mark, as llama.cpp prints */
    case TOK_TYPE_BYTE:
        if (t->kind == TOKENIZER_KIND_SPM && len == 6 && memcmp(s, "<0x", 3) == 0) {
            char c = (char)strtoul(s + 3, NULL, 16);
            return put(buf, cap, &c, 1);
        }
        break;
    default:
        break;
    }
    if (t->kind == TOKENIZER_KIND_SPM)
        return piece_spm(s, len, buf, cap);
    return (int)tok_bpe_decode_text(s, len, buf, cap);
}

size_t tokenizer_piece_max(const struct tokenizer *t)
{
    /* a piece is never longer than its text (U+2581 and byte-level characters shrink), or
     * than "<eos>" and U+2585 */
    return t->max_token_len > 8 ? t->max_token_len : 8;
}

bool tokenizer_strips_leading_space(const struct tokenizer *t)
{
    return t->kind == TOKENIZER_KIND_SPM && t->add_space_prefix;
}

size_t tokenizer_eog_ids(const struct tokenizer *t, const uint32_t **ids)
{
    *ids = t->eog;
    return t->n_eog;
}

long tokenizer_bos_id(const struct tokenizer *t)
{
    return t->bos;
}

long tokenizer_find_special(const struct tokenizer *t, const char *text)
{
    size_t len = strlen(text);
    if (t->kind == TOKENIZER_KIND_BYTES)
        return strcmp(text, "<eos>") == 0 ? (long)TOKENIZER_BYTES_EOS : -1;
    if (len == 0)
        return -1;
    const struct tok_special *s = match_special(t, text, len, len);
    return s && s->len == len ? (long)s->id : -1;
}
