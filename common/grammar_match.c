/* The grammar matcher: a set of pushdown stacks over the compiled rules, advanced one UTF-8
 * byte at a time. Stacks are persistent lists in an arena (a node is a position and its
 * caller's node), so states share their tails and a walk rolls back by truncating the arena.
 * A call whose continuation is the end of an alternative pushes nothing (a tail call), so
 * right recursion (x*, x+, long strings) keeps a stack of constant depth and equal states
 * repeat, which lets the worker cache masks by state. Also the random generator for tests. */
#include "grammar.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_impl.h"
#include "utf8.h"

#define NIL              UINT32_MAX
#define MATCH_MAX_DEPTH  1024 /* nested expansions in one step */
#define MATCH_MAX_STACKS 1024 /* live stacks in one state */
#define MATCH_MAX_WORK   (1 << 16) /* expansion steps for one byte: a grammar whose nullable
                                    * rules multiply the paths gives up rather than hang */

struct gnode {
    uint32_t pos, parent;
    uint64_t hash; /* of the whole stack from here down: equal stacks hash equal */
};

struct grammar_matcher {
    const struct grammar *g;
    struct gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *tops;
    uint32_t n_tops, cap_tops;
    uint32_t *remap; /* (cap_nodes) compaction scratch */
    struct grammar_state cur;
    int work; /* expansion steps left for the current byte */
    uint8_t u8lo, u8hi; /* the committed state's first-continuation range (see below) */
};

/* While a lead byte's first continuation is due, u8val holds U8_FIRST_FLAG, the range that
 * byte must be in (bits 8..15 lo, 16..23 hi: the Unicode table, so no overlongs, surrogates
 * or code points past U+10FFFF) and the lead's bits (0..7); after it, the character's bits. */
#define U8_FIRST_FLAG 0x80000000u

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

struct grammar_matcher *grammar_matcher_create(uint32_t max_nodes)
{
    struct grammar_matcher *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    m->cap_nodes = max_nodes ? max_nodes : 65536;
    m->cap_tops = m->cap_nodes;
    m->nodes = malloc((size_t)m->cap_nodes * sizeof(*m->nodes));
    m->tops = malloc((size_t)m->cap_tops * sizeof(*m->tops));
    m->remap = malloc((size_t)m->cap_nodes * sizeof(*m->remap));
    if (!m->nodes || !m->tops || !m->remap) {
        grammar_matcher_destroy(m);
        return NULL;
    }
    return m;
}

void grammar_matcher_destroy(struct grammar_matcher *m)
{
    if (!m)
        return;
    free(m->nodes);
    free(m->tops);
    free(m->remap);
    free(m);
}

static int new_node(struct grammar_matcher *m, uint32_t pos, uint32_t parent, uint32_t *id)
{
    struct gnode *n;

    if (m->n_nodes == m->cap_nodes)
        return -E2BIG;
    n = &m->nodes[m->n_nodes];
    n->pos = pos;
    n->parent = parent;
    n->hash = mix64(((uint64_t)pos << 1 | 1) ^ (parent == NIL ? 0 : m->nodes[parent].hash * 31));
    *id = m->n_nodes++;
    return 0;
}

/* Add stack top id to out unless an equal stack is there already. */
static int emit(struct grammar_matcher *m, struct grammar_state *out, uint32_t id)
{
    uint64_t h = m->nodes[id].hash;

    for (uint32_t k = 0; k < out->n; k++)
        if (m->nodes[m->tops[out->off + k]].hash == h)
            return 0;
    if (out->n >= MATCH_MAX_STACKS || m->n_tops == m->cap_tops)
        return -E2BIG;
    m->tops[m->n_tops++] = id;
    out->n++;
    return 0;
}

/* Every stack top reachable from position pos with caller parent, without consuming. */
static int expand(struct grammar_matcher *m, uint32_t pos, uint32_t parent,
                  struct grammar_state *out, int depth)
{
    const struct grammar *g = m->g;

    if (depth > MATCH_MAX_DEPTH)
        return -E2BIG;
    for (;;) {
        if (--m->work < 0)
            return -E2BIG;
        const struct gsym *s = &g->syms[pos];
        uint32_t id;
        int rc;

        if (s->kind == GSYM_END) {
            if (parent == NIL) {
                out->accept = true;
                return 0;
            }
            /* return to the caller: its node holds the continuation, never an END */
            pos = m->nodes[parent].pos;
            if (g->syms[pos].kind == GSYM_CHARS)
                return emit(m, out, parent);
            parent = m->nodes[parent].parent;
            continue;
        }
        if (s->kind == GSYM_CHARS) {
            if ((rc = new_node(m, pos, parent, &id)) < 0)
                return rc;
            return emit(m, out, id);
        }
        /* a call: push the continuation unless it is the end (a tail call) */
        const struct grule *r = &g->rules[s->arg];
        uint32_t caller = parent;

        if (g->syms[pos + 1].kind != GSYM_END &&
            (rc = new_node(m, pos + 1, parent, &caller)) < 0)
            return rc;
        for (uint32_t a = 0; a < r->n; a++)
            if ((rc = expand(m, g->alts[r->first + a], caller, out, depth + 1)) < 0)
                return rc;
        return 0;
    }
}

int grammar_matcher_start(struct grammar_matcher *m, const struct grammar *g)
{
    const struct grule *r = &g->rules[g->root];
    int rc;

    m->g = g;
    m->n_nodes = 0;
    m->n_tops = 0;
    m->work = MATCH_MAX_WORK;
    memset(&m->cur, 0, sizeof(m->cur));
    for (uint32_t a = 0; a < r->n; a++)
        if ((rc = expand(m, g->alts[r->first + a], NIL, &m->cur, 0)) < 0)
            return rc;
    return 0;
}

const struct grammar_state *grammar_matcher_state(const struct grammar_matcher *m)
{
    return &m->cur;
}

/* Whether set s holds a code point in [lo, hi]. */
static bool set_meets(const struct grammar *g, const struct gset *s, uint32_t lo, uint32_t hi)
{
    for (uint32_t k = 0; k < s->n; k++) {
        const uint32_t *r = &g->ranges[2 * (s->first + k)];

        if (!s->neg && r[0] <= hi && r[1] >= lo)
            return true;
        if (s->neg && r[0] <= lo && r[1] >= hi)
            return false; /* wholly excluded */
    }
    return s->neg;
}

int grammar_step(struct grammar_matcher *m, const struct grammar_state *in, uint8_t byte,
                 struct grammar_state *out)
{
    const struct grammar *g = m->g;
    uint32_t val, rem, cp;
    int rc;

    m->work = MATCH_MAX_WORK;
    out->off = m->n_tops;
    out->n = 0;
    out->accept = false;
    out->u8val = 0;
    out->u8rem = 0;
    if (in->u8rem == 0) {
        unsigned char lo, hi;
        int n;

        if (byte < 0x80) {
            cp = byte;
            goto complete;
        }
        if ((n = utf8_lead(byte, &lo, &hi)) <= 0)
            return 0;
        rem = (uint32_t)n;
        val = byte & (0x3Fu >> n);
        out->u8val = U8_FIRST_FLAG | (uint32_t)hi << 16 | (uint32_t)lo << 8 | val;
    } else {
        uint32_t v = in->u8val;

        if (v & U8_FIRST_FLAG) {
            if (byte < ((v >> 8) & 0xFF) || byte > ((v >> 16) & 0xFF))
                return 0;
            v &= 0xFF;
        }
        if ((byte & 0xC0) != 0x80)
            return 0;
        val = v << 6 | (byte & 0x3Fu);
        rem = in->u8rem - 1u;
        if (rem == 0) {
            cp = val;
            goto complete;
        }
        out->u8val = val;
    }
    /* a partial character: keep the stacks whose set holds some character it may become */
    {
        /* the next byte is in [nlo, nhi]: the first continuation's range after a lead byte
         * (so an overlong start does not count as an ASCII character), else any */
        uint32_t nlo = 0x80, nhi = 0xBF, lo, hi;

        if (out->u8val & U8_FIRST_FLAG) {
            nlo = (out->u8val >> 8) & 0xFF;
            nhi = (out->u8val >> 16) & 0xFF;
        }
        lo = (val << 6 | (nlo & 0x3F)) << (6 * (rem - 1));
        hi = (val << 6 | (nhi & 0x3F)) << (6 * (rem - 1)) | ((1u << (6 * (rem - 1))) - 1);

        out->u8rem = (uint8_t)rem;
        for (uint32_t k = 0; k < in->n; k++) {
            uint32_t id = m->tops[in->off + k];

            if (set_meets(g, &g->sets[g->syms[m->nodes[id].pos].arg], lo, hi)) {
                if (m->n_tops == m->cap_tops)
                    return -E2BIG;
                m->tops[m->n_tops++] = id;
                out->n++;
            }
        }
        return out->n > 0;
    }
complete:
    for (uint32_t k = 0; k < in->n; k++) {
        const struct gnode *nd = &m->nodes[m->tops[in->off + k]];

        if (gset_has(g, &g->sets[g->syms[nd->pos].arg], cp) &&
            (rc = expand(m, nd->pos + 1, nd->parent, out, 0)) < 0)
            return rc;
    }
    return out->n > 0 || out->accept;
}

struct grammar_mark grammar_mark(const struct grammar_matcher *m)
{
    return (struct grammar_mark){.nodes = m->n_nodes, .tops = m->n_tops};
}

void grammar_rollback(struct grammar_matcher *m, struct grammar_mark k)
{
    m->n_nodes = k.nodes;
    m->n_tops = k.tops;
}

/* Keep only the nodes the committed state reaches, renumbered in order (a parent is always
 * older than its children, so one forward pass renumbers both). */
static void compact(struct grammar_matcher *m)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < m->n_nodes; i++)
        m->remap[i] = NIL;
    for (uint32_t k = 0; k < m->cur.n; k++)
        for (uint32_t id = m->tops[m->cur.off + k]; id != NIL && m->remap[id] == NIL;
             id = m->nodes[id].parent)
            m->remap[id] = 0; /* reached */
    for (uint32_t i = 0; i < m->n_nodes; i++) {
        if (m->remap[i] == NIL)
            continue;
        m->nodes[n] = m->nodes[i];
        if (m->nodes[n].parent != NIL)
            m->nodes[n].parent = m->remap[m->nodes[n].parent];
        m->remap[i] = n++;
    }
    m->n_nodes = n;
    for (uint32_t k = 0; k < m->cur.n; k++)
        m->tops[k] = m->remap[m->tops[m->cur.off + k]];
    m->cur.off = 0;
    m->n_tops = m->cur.n;
}

int grammar_matcher_feed(struct grammar_matcher *m, const void *bytes, size_t n)
{
    struct grammar_mark k = grammar_mark(m);
    struct grammar_state s = m->cur, next;
    const uint8_t *b = bytes;

    for (size_t i = 0; i < n; i++) {
        int rc = grammar_step(m, &s, b[i], &next);

        if (rc <= 0) {
            grammar_rollback(m, k);
            return rc == 0 ? -EILSEQ : rc;
        }
        s = next;
    }
    m->cur = s;
    compact(m);
    return 0;
}

uint64_t grammar_state_key(const struct grammar_matcher *m, const struct grammar_state *s)
{
    uint64_t sum = 0, x = 0;

    for (uint32_t k = 0; k < s->n; k++) {
        uint64_t h = m->nodes[m->tops[s->off + k]].hash;

        sum += mix64(h);
        x ^= mix64(h ^ 0x5bd1e995u);
    }
    return mix64(sum ^ (x << 1 | x >> 63) ^ ((uint64_t)s->u8val << 8) ^ s->u8rem ^
                 ((uint64_t)s->accept << 62) ^ ((uint64_t)s->n << 40));
}

bool grammar_accepts(const struct grammar *g, const char *text, size_t len)
{
    struct grammar_matcher *m = grammar_matcher_create(0);
    bool ok;

    if (!m)
        return false;
    ok = grammar_matcher_start(m, g) == 0 && grammar_matcher_feed(m, text, len) == 0 &&
         grammar_state_can_end(grammar_matcher_state(m));
    grammar_matcher_destroy(m);
    return ok;
}

/* --- random sentences (tests) ------------------------------------------------------------ */

struct gen {
    const struct grammar *g;
    uint64_t *rng;
    uint32_t depth_limit;
    char *out;
    size_t cap, n;
};

static uint64_t gen_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int gen_put(struct gen *ge, uint32_t cp)
{
    char b[4];
    size_t n;

    if (cp < 0x80) {
        b[0] = (char)cp, n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    } else {
        b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    }
    if (ge->n + n >= ge->cap)
        return -ENOSPC;
    memcpy(ge->out + ge->n, b, n);
    ge->n += n;
    return 0;
}

static uint32_t sat_add(uint32_t a, uint32_t b)
{
    return a > UINT32_MAX - b ? UINT32_MAX : a + b;
}

static int gen_chars(struct gen *ge, const struct gset *s)
{
    const struct grammar *g = ge->g;

    if (!s->neg && s->n > 0) {
        const uint32_t *r = &g->ranges[2 * (s->first + gen_next(ge->rng) % s->n)];
        uint32_t cp = r[0] + (uint32_t)(gen_next(ge->rng) % ((uint64_t)r[1] - r[0] + 1));

        if (cp >= 0xD800 && cp <= 0xDFFF)
            cp = r[0] < 0xD800 ? r[0] : 0xE000;
        return gen_put(ge, cp);
    }
    /* a negated class: printable ASCII first, then anything */
    for (int tries = 0; tries < 64; tries++) {
        uint32_t cp = 0x20 + (uint32_t)(gen_next(ge->rng) % 95);

        if (gset_has(g, s, cp))
            return gen_put(ge, cp);
    }
    for (uint32_t cp = 0x20; cp < 0x10FFFF; cp++)
        if ((cp < 0xD800 || cp > 0xDFFF) && gset_has(g, s, cp))
            return gen_put(ge, cp);
    return -ENOSPC;
}

static int gen_rule(struct gen *ge, uint32_t r, uint32_t depth)
{
    const struct grammar *g = ge->g;
    const struct grule *rl = &g->rules[r];
    uint32_t a = 0;

    if (rl->n == 0 || rl->min_len == UINT32_MAX)
        return -ENOSPC;
    if (depth >= ge->depth_limit) {
        uint32_t best = UINT32_MAX;

        /* the alternative with the shortest sentence, so the recursion ends */
        for (uint32_t k = 0; k < rl->n; k++) {
            uint32_t len = 0;

            for (uint32_t pos = g->alts[rl->first + k]; g->syms[pos].kind != GSYM_END; pos++)
                len = sat_add(len, g->syms[pos].kind == GSYM_CHARS
                                       ? 1
                                       : g->rules[g->syms[pos].arg].min_len);
            if (len < best) {
                best = len;
                a = k;
            }
        }
    } else {
        a = (uint32_t)(gen_next(ge->rng) % rl->n);
    }
    for (uint32_t pos = g->alts[rl->first + a]; g->syms[pos].kind != GSYM_END; pos++) {
        int rc = g->syms[pos].kind == GSYM_CHARS
                     ? gen_chars(ge, &g->sets[g->syms[pos].arg])
                     : gen_rule(ge, g->syms[pos].arg, depth + 1);

        if (rc < 0)
            return rc;
    }
    return 0;
}

long grammar_generate(const struct grammar *g, uint64_t *rng, uint32_t depth_limit, char *out,
                      size_t cap)
{
    struct gen ge = {.g = g, .rng = rng, .depth_limit = depth_limit, .out = out, .cap = cap};
    int rc;

    if (cap == 0)
        return -ENOSPC;
    rc = gen_rule(&ge, g->root, 0);
    out[ge.n] = '\0';
    return rc < 0 ? rc : (long)ge.n;
}
