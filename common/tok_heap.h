/* Private to the tokenizer files: the binary min-heap of candidate merges that both the
 * SentencePiece (tokenizer_spm.c) and the byte-level BPE (tokenizer_bpe.c) merge loops pop
 * from. Both order their candidates the same way, best priority first and on a tie the
 * leftmost pair, so one 64-bit key carries both and one heap serves both. Inline: the merge
 * loops push and pop once per candidate, and a call for each cost ~15% of encoding speed. */
#ifndef TOK_HEAP_H
#define TOK_HEAP_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A pair of adjacent symbols that could merge */
struct tok_merge {
    uint64_t key; /* smaller pops first: tok_merge_key() */
    int32_t left, right;
    uint32_t id;      /* the merged token */
    uint32_t seen[2]; /* what the caller saw of the two sides when it queued the pair, so it
                       * can drop the entry if a neighbour merged since */
};

struct tok_heap {
    struct tok_merge *v;
    size_t n, cap;
};

/* The key of a merge of priority prio (smaller first) whose left symbol is left (>= 0): the
 * leftmost pair wins a tie, as SentencePiece and BPE both do */
static inline uint64_t tok_merge_key(uint32_t prio, int32_t left)
{
    return (uint64_t)prio << 32 | (uint32_t)left;
}

/* A priority for a SentencePiece score: a higher score gives a smaller priority, and
 * scores that compare equal (0.0 and -0.0 too) give the same one */
static inline uint32_t tok_score_prio(float score)
{
    uint32_t u;

    if (score == 0.0f)
        score = 0.0f; /* -0.0 compares equal to 0.0, so it must tie with it */
    memcpy(&u, &score, sizeof(u));
    /* IEEE-754 bits to an unsigned order: negatives reversed below the positives */
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u; /* the highest score first */
}

/* Room for n entries, so that pushes up to n do not allocate. Returns 0 or -ENOMEM. */
static inline int tok_heap_reserve(struct tok_heap *h, size_t n)
{
    struct tok_merge *v;

    if (n <= h->cap)
        return 0;
    if (!(v = realloc(h->v, n * sizeof(*v))))
        return -ENOMEM;
    h->v = v;
    h->cap = n;
    return 0;
}

/* Queue m, growing the heap when full. Returns 0 or -ENOMEM (the heap is unchanged). */
static inline int tok_heap_push(struct tok_heap *h, const struct tok_merge *m)
{
    size_t i;
    int err;

    if (h->n == h->cap && (err = tok_heap_reserve(h, h->cap ? 2 * h->cap : 64)) < 0)
        return err;
    /* sift up: move parents down until m's place is found */
    for (i = h->n++; i > 0;) {
        size_t parent = (i - 1) / 2;

        if (h->v[parent].key <= m->key)
            break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = *m;
    return 0;
}

/* Take the entry with the smallest key. h->n must be > 0. */
static inline struct tok_merge tok_heap_pop(struct tok_heap *h)
{
    struct tok_merge top = h->v[0], last = h->v[--h->n];
    size_t i = 0;

    /* sift the last entry down from the root: move the smaller child up */
    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1].key < h->v[c].key)
            c++;
        if (h->v[c].key >= last.key)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

/* Free the entries; h is empty again. */
static inline void tok_heap_free(struct tok_heap *h)
{
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

#endif
