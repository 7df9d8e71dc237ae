/* The compiled form of a grammar, private to grammar.c (the compiler) and grammar_match.c
 * (the matcher and generator).
 *
 * Every rule is a list of alternatives; every alternative is a run of symbols in syms[]
 * ended by a GSYM_END. A position is an index into syms[]. Repetition and groups are
 * compiled into extra (unnamed) rules, so a symbol is only a character set or a rule. */
#ifndef GRAMMAR_IMPL_H
#define GRAMMAR_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar.h"

enum gsym_kind {
    GSYM_END = 0,   /* the end of an alternative */
    GSYM_CHARS = 1, /* one character of set arg */
    GSYM_RULE = 2,  /* rule arg */
};

struct gsym {
    uint32_t kind;
    uint32_t arg;
};

/* A set of code points: sorted, disjoint ranges[first .. first + n) (lo, hi pairs),
 * complemented when neg. ascii: membership of code points 0..127, neg applied. */
struct gset {
    uint32_t first, n;
    bool neg;
    uint64_t ascii[2];
};

struct grule {
    uint32_t first, n; /* alts[first .. first + n): the alternatives' first positions */
    uint32_t line, col; /* where it is defined (or the group that made it) */
    uint32_t min_len;   /* the fewest characters a sentence of it has (for generation) */
};

struct grammar {
    struct gsym *syms;
    uint32_t n_syms;
    struct gset *sets;
    uint32_t n_sets;
    uint32_t *ranges; /* (2 * n_ranges) */
    uint32_t n_ranges;
    struct grule *rules;
    uint32_t n_rules;
    uint32_t *alts;
    uint32_t n_alts;
    uint32_t root;
    uint64_t hash;
};

/* Whether code point cp is in set s. */
static inline bool gset_has(const struct grammar *g, const struct gset *s, uint32_t cp)
{
    uint32_t lo = 0, hi;

    if (cp < 128)
        return (s->ascii[cp >> 6] >> (cp & 63)) & 1;
    hi = s->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        const uint32_t *r = &g->ranges[2 * (s->first + mid)];

        if (cp < r[0])
            hi = mid;
        else if (cp > r[1])
            lo = mid + 1;
        else
            return !s->neg;
    }
    return s->neg;
}

#endif
