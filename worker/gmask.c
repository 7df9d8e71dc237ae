/* Grammar masks for the sampler (gmask.h): the vocabulary's byte trie, the compiled-grammar
 * cache, the mask cache and the per-sequence matchers. Everything is allocated at create,
 * grammar_get (per job) or seq_create (per slot); masking and accepting allocate nothing. */
#include "gmask.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "hash.h"
#include "tokenizer.h"

#define GMASK_MAX_PIECE 256 /* longer token texts are never allowed under a grammar */
#define NIL             UINT32_MAX
#define GMASK_ARENA_NODES (1u << 17) /* a sequence's matcher: stack nodes */

struct tnode {
    uint32_t first_child, next_sibling;
    uint32_t tok; /* the first token whose text ends here, NIL: none (more in tok_next) */
    uint8_t byte;
};

struct gmask_grammar {
    struct grammar *g;
    char *src;
    size_t len;
    uint64_t hash;
    uint32_t refs;
    uint64_t last_used;
};

struct gmask_seq {
    struct grammar_matcher *m;
    struct gmask_grammar *g;
    bool first; /* no token accepted yet: a SentencePiece leading space is not text */
};

struct mask_entry {
    uint64_t key; /* 0: empty */
    uint32_t n_allowed;
};

/* A walk's memo of steps: trans[sid][byte] is the state a byte leads to from kept state sid
 * (0: not stepped yet, 1: refused, 2: taken but not kept, sid + 3). States equal by
 * grammar_state_key share one sid, so inside a string every trie node at one depth is in one
 * state and a walk over the whole vocabulary steps the matcher about once per (depth, byte).
 * Kept states stay in the matcher's arena until the walk ends; past memo_room nodes, or
 * MEMO_STATES states, the walk steps and rolls back without keeping. */
#define MEMO_STATES 1024u
#define MEMO_KEYS   4096u
#define NO_SID      UINT32_MAX

struct memo {
    uint32_t trans[MEMO_STATES * 256];
    struct grammar_state st[MEMO_STATES];
    uint64_t skey[MEMO_KEYS]; /* a kept state's grammar_state_key | 1, 0: empty */
    uint32_t ssid[MEMO_KEYS];
    uint32_t n_st;
};

/* The sid of a kept state with this key, else UINT32_MAX with *slot free for it. */
static uint32_t memo_same(struct memo *mm, uint64_t key, uint32_t *slot)
{
    uint32_t h = (uint32_t)(key >> 17) & (MEMO_KEYS - 1);

    key |= 1;
    while (mm->skey[h] && mm->skey[h] != key)
        h = (h + 1) & (MEMO_KEYS - 1);
    *slot = h;
    return mm->skey[h] == key ? mm->ssid[h] : UINT32_MAX;
}

/* The trie as the walk reads it: node i's children are ct[first .. first + n), in
 * breadth-first order, so siblings are adjacent in memory. */
struct cnode {
    uint32_t first, tok;
    uint16_t n;
    uint8_t byte;
};

struct gmask {
    uint32_t n_vocab, n_words; /* words of 64 bits per mask */
    uint32_t eos[16], n_eos;
    bool strip_space;           /* the detokenizer drops the first text's leading space */
    struct tnode *trie;         /* node 0 is the root */
    uint32_t n_trie;
    uint32_t *tok_next;         /* (n_vocab) further tokens with the same text */
    char *pieces;               /* every token's text, concatenated */
    uint32_t *piece_off;        /* (n_vocab + 1) token id's text: [off[id], off[id + 1]) */
    struct gmask_grammar *gs;   /* (max_grammars) */
    uint32_t max_grammars;
    uint64_t clock;
    struct mask_entry *entries; /* (n_entries) */
    uint64_t *masks;            /* (n_entries, n_words) */
    uint32_t n_entries;
    uint64_t walks, hits;
    struct memo *memo;    /* a walk's scratch */
    struct cnode *ct;     /* (n_trie) the trie in breadth-first order */
    uint32_t memo_room;   /* arena nodes below which a walk keeps memoised states */
};

static int trie_insert(struct gmask *gm, const unsigned char *p, size_t n, uint32_t tok,
                       uint32_t *cap)
{
    uint32_t node = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t c = gm->trie[node].first_child;

        while (c != NIL && gm->trie[c].byte != p[i])
            c = gm->trie[c].next_sibling;
        if (c == NIL) {
            if (gm->n_trie == *cap) {
                struct tnode *t = realloc(gm->trie, (size_t)*cap * 2 * sizeof(*t));

                if (!t)
                    return -ENOMEM;
                gm->trie = t;
                *cap *= 2;
            }
            c = gm->n_trie++;
            gm->trie[c] = (struct tnode){.first_child = NIL,
                                         .next_sibling = gm->trie[node].first_child,
                                         .tok = NIL,
                                         .byte = p[i]};
            gm->trie[node].first_child = c;
        }
        node = c;
    }
    gm->tok_next[tok] = gm->trie[node].tok;
    gm->trie[node].tok = tok;
    return 0;
}

/* The breadth-first copy of the linked trie: a queue of old ids, children appended together */
static int build_ct(struct gmask *gm)
{
    uint32_t *queue = malloc((size_t)gm->n_trie * sizeof(*queue)), head = 0, tail = 1;

    gm->ct = malloc((size_t)gm->n_trie * sizeof(*gm->ct));
    if (!queue || !gm->ct) {
        free(queue);
        return -ENOMEM;
    }
    queue[0] = 0;
    gm->ct[0] = (struct cnode){.tok = gm->trie[0].tok};
    while (head < tail) {
        uint32_t u = queue[head], nu = head++;

        gm->ct[nu].first = tail;
        gm->ct[nu].n = 0;
        for (uint32_t c = gm->trie[u].first_child; c != NIL; c = gm->trie[c].next_sibling) {
            gm->ct[tail] = (struct cnode){.tok = gm->trie[c].tok, .byte = gm->trie[c].byte};
            queue[tail++] = c;
            gm->ct[nu].n++;
        }
    }
    free(queue);
    free(gm->trie); /* the linked form is not needed any more */
    gm->trie = NULL;
    return 0;
}

struct gmask *gmask_create(const struct tokenizer *tok, uint32_t n_vocab, const uint32_t *eos,
                           uint32_t n_eos, uint32_t max_grammars)
{
    struct gmask *gm;
    uint32_t cap = 1024;
    char piece[GMASK_MAX_PIECE + 1];

    if (n_vocab == 0 || !tok)
        return NULL;
    if (!(gm = calloc(1, sizeof(*gm))))
        return NULL;
    gm->n_vocab = n_vocab;
    gm->n_words = (n_vocab + 63) / 64;
    gm->n_eos = n_eos < 16 ? n_eos : 16;
    memcpy(gm->eos, eos, gm->n_eos * sizeof(*eos));
    gm->strip_space = tokenizer_strips_leading_space(tok);
    gm->max_grammars = max_grammars ? max_grammars : 16;
    gm->n_entries = n_vocab > 65536 ? 256 : 1024;
    gm->trie = malloc(cap * sizeof(*gm->trie));
    gm->tok_next = malloc((size_t)n_vocab * sizeof(*gm->tok_next));
    gm->gs = calloc(gm->max_grammars, sizeof(*gm->gs));
    gm->entries = calloc(gm->n_entries, sizeof(*gm->entries));
    gm->masks = calloc((size_t)gm->n_entries * gm->n_words, sizeof(*gm->masks));
    gm->memo = malloc(sizeof(*gm->memo));
    gm->memo_room = GMASK_ARENA_NODES / 2;
    if (!gm->memo || !gm->trie || !gm->tok_next || !gm->gs || !gm->entries || !gm->masks)
        goto fail;
    gm->trie[0] = (struct tnode){.first_child = NIL, .next_sibling = NIL, .tok = NIL};
    gm->n_trie = 1;
    size_t total = 0, pcap = (size_t)n_vocab * 8;

    gm->piece_off = calloc((size_t)n_vocab + 1, sizeof(*gm->piece_off));
    gm->pieces = malloc(pcap);
    if (!gm->piece_off || !gm->pieces)
        goto fail;
    for (uint32_t id = 0; id < n_vocab; id++) {
        int n = id < tokenizer_n_vocab(tok) ? tokenizer_piece(tok, id, false, piece, sizeof(piece))
                                            : 0;
        bool is_eos = false;

        gm->tok_next[id] = NIL;
        gm->piece_off[id] = (uint32_t)total;
        for (uint32_t k = 0; k < gm->n_eos; k++)
            is_eos |= gm->eos[k] == id;
        if (n <= 0 || n > GMASK_MAX_PIECE || is_eos)
            continue; /* control tokens and end ids: never text under a grammar */
        if (total + (size_t)n > pcap) {
            char *p = realloc(gm->pieces, pcap * 2);

            if (!p)
                goto fail;
            gm->pieces = p;
            pcap *= 2;
        }
        memcpy(gm->pieces + total, piece, (size_t)n);
        total += (size_t)n;
        if (trie_insert(gm, (const unsigned char *)piece, (size_t)n, id, &cap) < 0)
            goto fail;
    }
    gm->piece_off[n_vocab] = (uint32_t)total;
    if (build_ct(gm) < 0)
        goto fail;
    return gm;
fail:
    gmask_destroy(gm);
    return NULL;
}

void gmask_destroy(struct gmask *gm)
{
    if (!gm)
        return;
    for (uint32_t i = 0; gm->gs && i < gm->max_grammars; i++) {
        grammar_destroy(gm->gs[i].g);
        free(gm->gs[i].src);
    }
    free(gm->gs);
    free(gm->trie);
    free(gm->tok_next);
    free(gm->pieces);
    free(gm->piece_off);
    free(gm->entries);
    free(gm->masks);
    free(gm->memo);
    free(gm->ct);
    free(gm);
}

struct gmask_grammar *gmask_grammar_get(struct gmask *gm, const char *src, size_t len, char *err,
                                        size_t errlen)
{
    uint64_t h = hash_fnv1a(src, len);
    struct gmask_grammar *victim = NULL;
    struct grammar *g;

    for (uint32_t i = 0; i < gm->max_grammars; i++) {
        struct gmask_grammar *e = &gm->gs[i];

        if (e->g && e->hash == h && e->len == len && memcmp(e->src, src, len) == 0) {
            e->refs++;
            e->last_used = ++gm->clock;
            return e;
        }
        if (e->refs == 0 && (!victim || !e->g || (victim->g && e->last_used < victim->last_used)))
            victim = e;
    }
    if (!victim) {
        snprintf(err, errlen, "the worker holds %u grammars in use already", gm->max_grammars);
        return NULL;
    }
    if (!(g = grammar_compile(src, len, err, errlen)))
        return NULL;
    grammar_destroy(victim->g);
    free(victim->src);
    victim->g = g;
    victim->len = len;
    victim->hash = grammar_hash(g);
    victim->refs = 1;
    victim->last_used = ++gm->clock;
    if (!(victim->src = malloc(len + 1))) {
        grammar_destroy(g);
        victim->g = NULL;
        victim->refs = 0;
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(victim->src, src, len);
    victim->src[len] = '\0';
    return victim;
}

void gmask_grammar_put(struct gmask *gm, struct gmask_grammar *g)
{
    (void)gm;
    if (g && g->refs)
        g->refs--;
}

struct gmask_seq *gmask_seq_create(void)
{
    struct gmask_seq *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    if (!(s->m = grammar_matcher_create(GMASK_ARENA_NODES))) {
        free(s);
        return NULL;
    }
    return s;
}

void gmask_seq_destroy(struct gmask_seq *s)
{
    if (!s)
        return;
    grammar_matcher_destroy(s->m);
    free(s);
}

int gmask_seq_start(struct gmask *gm, struct gmask_seq *s, struct gmask_grammar *g)
{
    (void)gm;
    s->g = g;
    s->first = true;
    return grammar_matcher_start(s->m, g->g);
}

/* Set the bits of every token under trie node t whose bytes the grammar takes from state in
 * (kept as sid, or NO_SID). */
static int walk(struct gmask *gm, struct grammar_matcher *m, uint32_t t,
                const struct grammar_state *in, uint32_t sid, bool strip, uint64_t *mask,
                uint32_t *n)
{
    const struct cnode *ct = gm->ct;
    struct memo *mm = gm->memo;
    uint32_t *row = sid != NO_SID ? mm->trans + (size_t)sid * 256 : NULL;

    for (uint32_t c = ct[t].first; c < ct[t].first + ct[t].n; c++) {
        struct grammar_mark k = grammar_mark(m);
        struct grammar_state next;
        const struct grammar_state *to = &next;
        uint32_t csid = NO_SID, v;
        uint8_t b = ct[c].byte;
        bool rolled = true;
        int rc;

        if (strip && b == ' ') {
            to = in; /* the leading space the detokenizer drops */
            csid = sid;
            rc = 1;
            rolled = sid == NO_SID; /* states kept below must outlive this child */
        } else if (row) {
            v = row[b];
            rc = 1;
            if (v == 0) {
                if ((rc = grammar_step(m, in, b, &next)) < 0)
                    return rc;
                v = rc > 0 ? 2 : 1;
                if (rc > 0 && mm->n_st < MEMO_STATES && k.nodes < gm->memo_room) {
                    uint32_t slot, same = memo_same(mm, grammar_state_key(m, &next), &slot);

                    if (same != UINT32_MAX) {
                        v = same + 3; /* an equal state is kept: this step's nodes go */
                    } else {
                        mm->skey[slot] = grammar_state_key(m, &next) | 1;
                        mm->ssid[slot] = mm->n_st;
                        mm->st[mm->n_st] = next;
                        memset(mm->trans + (size_t)mm->n_st * 256, 0, 256 * sizeof(uint32_t));
                        v = mm->n_st++ + 3;
                        rolled = false; /* kept for the rest of the walk */
                    }
                }
                row[b] = v;
            } else if (v == 2 && (rc = grammar_step(m, in, b, &next)) < 0) {
                return rc;
            }
            if (v == 1) {
                rc = 0;
            } else if (v >= 3) {
                csid = v - 3;
                to = &mm->st[csid];
                rc = 1;
                if (rolled) { /* nothing this child adds is needed below */
                    grammar_rollback(m, k);
                    rolled = false;
                }
            }
        } else if ((rc = grammar_step(m, in, b, &next)) < 0) {
            return rc;
        }
        if (rc > 0) {
            for (uint32_t id = ct[c].tok; id != NIL; id = gm->tok_next[id]) {
                mask[id >> 6] |= 1ull << (id & 63);
                (*n)++;
            }
            if (ct[c].n && (rc = walk(gm, m, c, to, csid, false, mask, n)) < 0)
                return rc;
        }
        if (rolled)
            grammar_rollback(m, k);
    }
    return 0;
}

long gmask_apply(struct gmask *gm, struct gmask_seq *s, float *logits)
{
    const struct grammar_state *st = grammar_matcher_state(s->m);
    bool strip = s->first && gm->strip_space;
    uint64_t key = hash_fnv1a(&(uint64_t[3]){s->g->hash, grammar_state_key(s->m, st), strip},
                              3 * sizeof(uint64_t));
    uint32_t slot;
    struct mask_entry *e;
    uint64_t *mask;

    key |= 1; /* never 0, the empty mark */
    slot = (uint32_t)(key >> 20) & (gm->n_entries - 1);
    e = &gm->entries[slot];
    mask = gm->masks + (size_t)slot * gm->n_words;
    if (e->key == key) {
        gm->hits++;
    } else {
        uint32_t n = 0;
        int rc;

        memset(mask, 0, (size_t)gm->n_words * sizeof(*mask));
        e->key = 0;
        struct grammar_mark k0 = grammar_mark(s->m);

        memset(gm->memo->skey, 0, sizeof(gm->memo->skey));
        memset(gm->memo->trans, 0, 256 * sizeof(uint32_t));
        gm->memo->st[0] = *st;
        gm->memo->n_st = 1;
        rc = grammar_state_must_end(st) ? 0 : walk(gm, s->m, 0, st, 0, strip, mask, &n);
        grammar_rollback(s->m, k0);
        if (rc < 0)
            return rc;
        if (grammar_state_can_end(st)) {
            for (uint32_t k = 0; k < gm->n_eos; k++) {
                if (gm->eos[k] < gm->n_vocab && !(mask[gm->eos[k] >> 6] >> (gm->eos[k] & 63) & 1)) {
                    mask[gm->eos[k] >> 6] |= 1ull << (gm->eos[k] & 63);
                    n++;
                }
            }
        }
        e->key = key;
        e->n_allowed = n;
        gm->walks++;
    }
    for (uint32_t w = 0; w < gm->n_words; w++) {
        uint64_t keep = mask[w];

        if (keep == ~0ull)
            continue;
        for (uint32_t b = 0; b < 64; b++) {
            uint32_t id = w * 64 + b;

            if (!(keep >> b & 1) && id < gm->n_vocab)
                logits[id] = -INFINITY;
        }
    }
    return e->n_allowed;
}

int gmask_accept(struct gmask *gm, struct gmask_seq *s, uint32_t token)
{
    char piece[GMASK_MAX_PIECE + 1];
    size_t n;
    int rc;

    for (uint32_t k = 0; k < gm->n_eos; k++)
        if (gm->eos[k] == token)
            return grammar_state_can_end(grammar_matcher_state(s->m)) ? 0 : -EILSEQ;
    if (token >= gm->n_vocab)
        return -EILSEQ;
    n = gm->piece_off[token + 1] - gm->piece_off[token];
    if (n == 0)
        return -EILSEQ; /* control tokens are never text under a grammar */
    memcpy(piece, gm->pieces + gm->piece_off[token], n);
    {
        const char *p = piece;

        if (s->first && gm->strip_space && n > 0 && p[0] == ' ') {
            p++;
            n--;
        }
        if ((rc = grammar_matcher_feed(s->m, p, n)) < 0)
            return rc;
    }
    s->first = false;
    return 0;
}

bool gmask_seq_must_end(const struct gmask_seq *s)
{
    return grammar_state_must_end(grammar_matcher_state(s->m));
}

void gmask_stats(const struct gmask *gm, uint64_t *walks, uint64_t *hits)
{
    *walks = gm->walks;
    *hits = gm->hits;
}
