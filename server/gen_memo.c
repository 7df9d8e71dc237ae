/* Recent generations for the chat route (gen_memo.h): a list in LRU order, searched whole
 * (it is bounded, and an entry of another conversation is told apart by the last bytes of
 * its prompt before its text is compared). */
#include "gen_memo.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "tokenizer.h"

struct entry {
    TAILQ_ENTRY(entry) link; /* most recently used first */
    char *text;              /* the prompt's text, then the generated pieces */
    size_t len;
    uint32_t *ids; /* the prompt's ids, then the generated ones */
    size_t n_prompt, n_gen;
    size_t *ends; /* n_gen + 1: text[0, ends[k]) is ids[0, n_prompt + k) */
    unsigned flags;                /* the prompt's tokenizer flags */
    struct tokenizer_span *plain;  /* its plain spans within text[0, ends[0]), none empty */
    size_t n_plain;
    size_t bytes; /* what it holds */
};

TAILQ_HEAD(entry_list, entry);

struct gen_memo {
    struct entry_list lru;
    uint32_t n, max_entries;
    size_t bytes, max_bytes;
    uint64_t evictions;
};

struct gen_memo *gen_memo_create(uint32_t max_entries, size_t max_bytes)
{
    struct gen_memo *m;
    if (max_entries == 0 || !(m = calloc(1, sizeof(*m))))
        return NULL;
    TAILQ_INIT(&m->lru);
    m->max_entries = max_entries;
    m->max_bytes = max_bytes;
    return m;
}

static void entry_free(struct entry *e)
{
    free(e->text);
    free(e->ids);
    free(e->ends);
    free(e->plain);
    free(e);
}

static void drop(struct gen_memo *m, struct entry *e)
{
    TAILQ_REMOVE(&m->lru, e, link);
    m->n--;
    m->bytes -= e->bytes;
    entry_free(e);
}

void gen_memo_destroy(struct gen_memo *m)
{
    if (!m)
        return;
    while (!TAILQ_EMPTY(&m->lru))
        drop(m, TAILQ_FIRST(&m->lru));
    free(m);
}

/* The non-empty spans of p's plain ones, cut at end, into e->plain (NULL: none). The
 * request's spans over text[0, end) are compared with these (spans_over()). */
static int keep_spans(struct entry *e, const struct gen_memo_text *p, size_t end)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_plain && p->plain[i].off < end; i++)
        n += p->plain[i].len > 0;
    if (n == 0 || !(p->flags & TOKENIZER_PARSE_SPECIAL)) /* all of it is plain then */
        return 0;
    if (!(e->plain = malloc(n * sizeof(*e->plain))))
        return -ENOMEM;
    for (size_t i = 0; i < p->n_plain && p->plain[i].off < end; i++) {
        size_t off = p->plain[i].off, stop = off + p->plain[i].len;
        if (stop > off)
            e->plain[e->n_plain++] = (struct tokenizer_span){off, (stop < end ? stop : end) - off};
    }
    return 0;
}

/* The generated pieces after the prompt's text; e->n_gen and e->ends set. */
static int spell(struct entry *e, const struct tokenizer *tok, const uint32_t *gen,
                 size_t n_gen, size_t cap)
{
    size_t piece_max = tokenizer_piece_max(tok);
    e->ends[0] = e->len;
    for (size_t k = 0; k < n_gen; k++) {
        if (e->len + piece_max > cap) {
            char *t = realloc(e->text, (cap = 2 * cap + piece_max));
            if (!t)
                return -ENOMEM;
            e->text = t;
        }
        int n = tokenizer_piece(tok, gen[k], false, e->text + e->len, cap - e->len);
        if (n <= 0 || (size_t)n > piece_max)
            break; /* a control token (or an id the tokenizer does not know) */
        e->len += (size_t)n;
        e->ends[++e->n_gen] = e->len;
    }
    return 0;
}

/* The text buffer grew by doubling and ids/ends were sized for every generated id: cut
 * them to what the entry holds, so that e->bytes is what it allocated (a failing shrink
 * keeps the larger buffer, which is still valid). */
static void shrink(struct entry *e, size_t n_gen)
{
    char *t = e->len ? realloc(e->text, e->len) : NULL;
    if (t)
        e->text = t;
    if (e->n_gen == n_gen)
        return;
    uint32_t *ids = realloc(e->ids, (e->n_prompt + e->n_gen) * sizeof(uint32_t));
    if (ids)
        e->ids = ids;
    size_t *ends = realloc(e->ends, (e->n_gen + 1) * sizeof(size_t));
    if (ends)
        e->ends = ends;
}

int gen_memo_add(struct gen_memo *m, const struct tokenizer *tok, const struct gen_memo_text *p,
                 const uint32_t *prompt, size_t n_prompt, const uint32_t *gen, size_t n_gen)
{
    struct entry *e;
    size_t cap;

    if (!m || n_prompt == 0)
        return 0;
    cap = p->len + 64;
    if (!(e = calloc(1, sizeof(*e))) || !(e->text = malloc(cap)) ||
        !(e->ids = malloc((n_prompt + n_gen) * sizeof(uint32_t))) ||
        !(e->ends = malloc((n_gen + 1) * sizeof(size_t))) || keep_spans(e, p, p->len) < 0)
        goto oom;
    memcpy(e->text, p->text, p->len);
    e->len = p->len;
    e->flags = p->flags;
    e->n_prompt = n_prompt;
    if (spell(e, tok, gen, n_gen, cap) < 0)
        goto oom;
    memcpy(e->ids, prompt, n_prompt * sizeof(uint32_t));
    memcpy(e->ids + n_prompt, gen, e->n_gen * sizeof(uint32_t));
    shrink(e, n_gen);
    e->bytes = sizeof(*e) + e->len + (n_prompt + e->n_gen) * sizeof(uint32_t) +
               (e->n_gen + 1) * sizeof(size_t) + e->n_plain * sizeof(*e->plain);
    if (e->bytes > m->max_bytes) {
        entry_free(e);
        return 0;
    }
    while (m->n > 0 && (m->n >= m->max_entries || m->bytes + e->bytes > m->max_bytes)) {
        drop(m, TAILQ_LAST(&m->lru, entry_list));
        m->evictions++;
    }
    TAILQ_INSERT_HEAD(&m->lru, e, link);
    m->n++;
    m->bytes += e->bytes;
    return 0;
oom:
    if (e)
        entry_free(e);
    return -ENOMEM;
}

/* How many bytes text and e's text share from the start, or 0 when that is not all of e's
 * prompt (no point of e lies within it then). */
static size_t shared(const struct entry *e, const char *text, size_t len)
{
    size_t p = e->ends[0], tail = p < 16 ? p : 16, i;
    if (len < p || memcmp(text + p - tail, e->text + p - tail, tail) != 0 ||
        memcmp(text, e->text, p - tail) != 0)
        return 0;
    for (i = p; i < len && i < e->len && text[i] == e->text[i]; i++)
        ;
    return i;
}

/* How far past e's prompt t may take e's ids as far as the spans say (c: as the text says,
 * at least e->ends[0]), or 0 when t's flags or t's plain spans over e's prompt are not e's.
 * Past the prompt only within the plain span of t the answer starts in: the answer's ids are
 * ordinary text (spell() stops at a control token; a user-defined token plain text matches
 * too), which t's text outside its spans need not be. */
static size_t spans_over(const struct entry *e, const struct gen_memo_text *t, size_t c)
{
    size_t p = e->ends[0], j = 0, i;
    if (t->flags != e->flags)
        return 0;
    if (!(t->flags & TOKENIZER_PARSE_SPECIAL))
        return c; /* no text parses as special: the spans say nothing */
    for (i = 0; i < t->n_plain && t->plain[i].off < p; i++) {
        size_t off = t->plain[i].off, stop = off + t->plain[i].len;
        if (stop == off)
            continue;
        if (j == e->n_plain || e->plain[j].off != off ||
            e->plain[j].len != (stop < p ? stop : p) - off)
            return 0;
        if (++j == e->n_plain && stop > p) /* the answer starts inside this span */
            return stop < c ? stop : c;
    }
    if (j != e->n_plain)
        return 0;
    for (; i < t->n_plain && t->plain[i].off == p; i++)
        if (t->plain[i].len > 0) /* the answer starts this span */
            return p + t->plain[i].len < c ? p + t->plain[i].len : c;
    return p;
}

/* The last k with e->ends[k] <= c (e->ends[0] <= c). */
static size_t last_end(const struct entry *e, size_t c)
{
    size_t lo = 0, hi = e->n_gen; /* ends[lo] <= c */
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (e->ends[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

size_t gen_memo_find(struct gen_memo *m, const struct gen_memo_text *t, struct gen_memo_cut *out,
                     size_t max)
{
    struct entry *e, *best = NULL;
    size_t best_k = 0, n = 0;

    if (!m || max == 0)
        return 0;
    TAILQ_FOREACH(e, &m->lru, link) {
        size_t c = shared(e, t->text, t->len);
        if (c == 0 || (c = spans_over(e, t, c)) == 0)
            continue;
        size_t k = last_end(e, c);
        if (!best || e->ends[k] > best->ends[best_k]) {
            best = e;
            best_k = k;
        }
    }
    if (!best)
        return 0;
    TAILQ_REMOVE(&m->lru, best, link);
    TAILQ_INSERT_HEAD(&m->lru, best, link);
    for (size_t k = best_k + 1; k-- > 0 && n < max;)
        out[n++] = (struct gen_memo_cut){best->ends[k], best->ids, best->n_prompt + k};
    if (out[n - 1].n_ids != best->n_prompt) /* the prompt alone comes last */
        out[n - 1] = (struct gen_memo_cut){best->ends[0], best->ids, best->n_prompt};
    return n;
}

void gen_memo_stats(const struct gen_memo *m, struct gen_memo_stats *s)
{
    memset(s, 0, sizeof(*s));
    if (!m)
        return;
    s->entries = m->n;
    s->bytes = m->bytes;
    s->evictions = m->evictions;
}
