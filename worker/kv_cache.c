/* Paged KV bookkeeping: blocks, block tables, the prefix index and the LRU of released
 * blocks (kv_cache.h). */
#include "kv_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_hash.h"

#define NONE UINT32_MAX

struct kv_blk {
    uint32_t refs;
    bool indexed;
    uint8_t n_tok;               /* tokens in block_tokens: KV_BLOCK when indexed, fewer in a
                                  * kept partial block, 0 otherwise */
    uint64_t hash, parent;       /* this block's chain hash and the one before it (0: none) */
    uint32_t next_in_bucket;
    uint32_t next_in_pbucket;    /* by parent, while n_tok > 0 */
    uint32_t lru_prev, lru_next; /* in the LRU while indexed and refs == 0 */
};

struct kv_slot {
    bool active;
    uint32_t len, n_blocks, reserved;
    uint32_t shared_end; /* positions before it were committed shareable; those
                          * after are not (UINT32_MAX: all) */
    uint64_t last_hash; /* chain hash of the last full block, 0 before the first */
    uint32_t *table;    /* (max_blocks) */
    uint32_t *tokens;   /* (max_blocks * KV_BLOCK) */
};

struct kv_cache {
    uint32_t n_blocks, n_slots, max_blocks;
    struct kv_blk *blk;
    uint32_t *block_tokens; /* (n_blocks, KV_BLOCK) an indexed block's tokens */
    uint32_t *free_stack, n_free;
    uint32_t lru_head, lru_tail, n_lru; /* head: released longest ago */
    uint32_t *buckets, *pbuckets, mask; /* by hash (full blocks), by parent (and partial) */
    struct kv_slot *slots;
    uint32_t *slot_mem;
    uint32_t outstanding; /* blocks reserved by running slots and not yet taken */
    uint64_t *ev;         /* (KV_CACHE_EVENTS) keys indexed (key) and evicted (key - 1) */
    uint32_t n_ev;
    bool ev_lost;
    uint64_t evictions, reused_tokens;
};

struct kv_cache *kv_cache_create(uint32_t n_blocks, uint32_t n_slots, uint32_t max_ctx, int *err)
{
    struct kv_cache *c;
    uint32_t nb = 1;
    bool ok;

    if (!n_blocks || !n_slots || !max_ctx) {
        *err = -EINVAL;
        return NULL;
    }
    if (!(c = calloc(1, sizeof(*c)))) {
        *err = -ENOMEM;
        return NULL;
    }
    while (nb < 2 * n_blocks)
        nb <<= 1;
    c->n_blocks = n_blocks;
    c->n_slots = n_slots;
    c->max_blocks = (max_ctx + KV_BLOCK - 1) / KV_BLOCK;
    c->mask = nb - 1;
    c->blk = calloc(n_blocks, sizeof(*c->blk));
    c->block_tokens = calloc((size_t)n_blocks * KV_BLOCK, sizeof(uint32_t));
    c->free_stack = calloc(n_blocks, sizeof(uint32_t));
    c->buckets = malloc((size_t)nb * sizeof(uint32_t));
    c->pbuckets = malloc((size_t)nb * sizeof(uint32_t));
    c->slots = calloc(n_slots, sizeof(*c->slots));
    c->slot_mem = calloc((size_t)n_slots * c->max_blocks * (KV_BLOCK + 1), sizeof(uint32_t));
    c->ev = calloc(KV_CACHE_EVENTS, sizeof(uint64_t));
    ok = c->ev && c->blk && c->block_tokens && c->free_stack && c->buckets && c->pbuckets && c->slots && c->slot_mem;
    if (!ok) {
        kv_cache_destroy(c);
        *err = -ENOMEM;
        return NULL;
    }
    for (uint32_t i = 0; i < nb; i++)
        c->buckets[i] = c->pbuckets[i] = NONE;
    for (uint32_t i = 0; i < n_blocks; i++)
        c->free_stack[i] = n_blocks - 1 - i; /* block 0 first */
    c->n_free = n_blocks;
    c->lru_head = c->lru_tail = NONE;
    for (uint32_t s = 0; s < n_slots; s++) {
        uint32_t *mem = c->slot_mem + (size_t)s * c->max_blocks * (KV_BLOCK + 1);
        c->slots[s].table = mem;
        c->slots[s].tokens = mem + c->max_blocks;
    }
    return c;
}

void kv_cache_destroy(struct kv_cache *c)
{
    if (!c)
        return;
    free(c->blk);
    free(c->block_tokens);
    free(c->free_stack);
    free(c->buckets);
    free(c->pbuckets);
    free(c->slots);
    free(c->slot_mem);
    free(c->ev);
    free(c);
}

static void lru_remove(struct kv_cache *c, uint32_t b)
{
    struct kv_blk *k = &c->blk[b];
    if (k->lru_prev != NONE)
        c->blk[k->lru_prev].lru_next = k->lru_next;
    else
        c->lru_head = k->lru_next;
    if (k->lru_next != NONE)
        c->blk[k->lru_next].lru_prev = k->lru_prev;
    else
        c->lru_tail = k->lru_prev;
    c->n_lru--;
}

static void lru_push(struct kv_cache *c, uint32_t b)
{
    struct kv_blk *k = &c->blk[b];
    k->lru_next = NONE;
    k->lru_prev = c->lru_tail;
    if (c->lru_tail != NONE)
        c->blk[c->lru_tail].lru_next = b;
    else
        c->lru_head = b;
    c->lru_tail = b;
    c->n_lru++;
}

/* At the head: a kept partial block is the first to go (it saves under KV_BLOCK tokens). */
static void lru_push_head(struct kv_cache *c, uint32_t b)
{
    struct kv_blk *k = &c->blk[b];
    k->lru_prev = NONE;
    k->lru_next = c->lru_head;
    if (c->lru_head != NONE)
        c->blk[c->lru_head].lru_prev = b;
    else
        c->lru_tail = b;
    c->lru_head = b;
    c->n_lru++;
}

static uint32_t index_find(const struct kv_cache *c, uint64_t hash, uint64_t parent,
                           const uint32_t *tok)
{
    for (uint32_t b = c->buckets[hash & c->mask]; b != NONE; b = c->blk[b].next_in_bucket) {
        const struct kv_blk *k = &c->blk[b];
        if (k->hash == hash && k->parent == parent &&
            !memcmp(c->block_tokens + (size_t)b * KV_BLOCK, tok, KV_BLOCK * sizeof(uint32_t)))
            return b;
    }
    return NONE;
}

static void event(struct kv_cache *c, uint64_t e)
{
    if (c->n_ev < KV_CACHE_EVENTS)
        c->ev[c->n_ev++] = e;
    else
        c->ev_lost = true;
}

/* Into the index by parent (a full indexed block or a kept partial one, n_tok set). */
static void pindex_add(struct kv_cache *c, uint32_t b)
{
    uint32_t *head = &c->pbuckets[c->blk[b].parent & c->mask];
    c->blk[b].next_in_pbucket = *head;
    *head = b;
}

static void pindex_remove(struct kv_cache *c, uint32_t b)
{
    uint32_t *p = &c->pbuckets[c->blk[b].parent & c->mask];
    while (*p != b)
        p = &c->blk[*p].next_in_pbucket;
    *p = c->blk[b].next_in_pbucket;
    c->blk[b].n_tok = 0;
}

static void index_remove(struct kv_cache *c, uint32_t b)
{
    event(c, c->blk[b].hash - 1);
    uint32_t *p = &c->buckets[c->blk[b].hash & c->mask];
    while (*p != b)
        p = &c->blk[*p].next_in_bucket;
    *p = c->blk[b].next_in_bucket;
    c->blk[b].indexed = false;
    pindex_remove(c, b);
}

/* The cached block that continues parent with the most of tok's first max tokens: an
 * indexed block whose tokens diverge from tok inside it, or a partial block a finished
 * sequence left. Returns it (and the count in *m), or NONE. */
static uint32_t best_donor(const struct kv_cache *c, uint64_t parent, const uint32_t *tok,
                           uint32_t max, uint32_t *m)
{
    uint32_t best = NONE;
    *m = 0;
    for (uint32_t b = c->pbuckets[parent & c->mask]; b != NONE; b = c->blk[b].next_in_pbucket) {
        const uint32_t *bt = c->block_tokens + (size_t)b * KV_BLOCK;
        uint32_t k = 0, lim = c->blk[b].n_tok < max ? c->blk[b].n_tok : max;
        if (c->blk[b].parent != parent)
            continue;
        while (k < lim && bt[k] == tok[k])
            k++;
        if (k > *m) {
            *m = k;
            best = b;
        }
    }
    return best;
}

/* A block for a running slot: a free one, else the one released longest ago. */
static uint32_t take_block(struct kv_cache *c)
{
    uint32_t b;
    if (c->n_free) {
        b = c->free_stack[--c->n_free];
    } else if (c->lru_head != NONE) {
        b = c->lru_head;
        lru_remove(c, b);
        if (c->blk[b].indexed) {
            index_remove(c, b);
            c->evictions++;
        } else {
            pindex_remove(c, b); /* a partial block */
        }
    } else {
        return NONE;
    }
    c->blk[b].refs = 1;
    c->blk[b].indexed = false;
    return b;
}

int kv_cache_begin(struct kv_cache *c, int slot, const uint32_t *prompt, uint32_t n,
                   uint32_t max_len, bool reuse, struct kv_copy *cp)
{
    struct kv_slot *s = &c->slots[slot];
    uint32_t want, linked = 0, from_lru = 0, avail, need, donor = NONE, m = 0;
    uint64_t parent = 0;

    cp->n = 0;

    if (max_len < n)
        max_len = n;
    want = (max_len + KV_BLOCK - 1) / KV_BLOCK;
    if (want > c->n_blocks || want > c->max_blocks)
        return -ENOSPC;
    /* count first, change nothing until it fits */
    for (uint32_t i = 0; reuse && (i + 1) * KV_BLOCK <= n - 1; i++) {
        uint64_t h = kv_hash_block(parent, prompt + (size_t)i * KV_BLOCK);
        uint32_t b = index_find(c, h, parent, prompt + (size_t)i * KV_BLOCK);
        if (b == NONE)
            break;
        if (c->blk[b].refs == 0)
            from_lru++;
        s->table[linked++] = b;
        parent = h;
    }
    /* the next block's first tokens, copied from a cached block that starts the same way */
    if (reuse && linked * KV_BLOCK < n - 1)
        donor = best_donor(c, parent, prompt + (size_t)linked * KV_BLOCK,
                           n - 1 - linked * KV_BLOCK, &m);
    avail = c->n_free + c->n_lru - c->outstanding;
    need = want - linked + from_lru;
    if (need > avail)
        return -EAGAIN;
    if (donor != NONE && c->blk[donor].refs == 0 && need + 1 > avail)
        donor = NONE; /* held, it would leave too few blocks: compute those positions */
    for (uint32_t i = 0; i < linked; i++) {
        uint32_t b = s->table[i];
        if (c->blk[b].refs++ == 0)
            lru_remove(c, b);
    }
    memcpy(s->tokens, prompt, (size_t)linked * KV_BLOCK * sizeof(uint32_t));
    s->active = true;
    s->len = linked * KV_BLOCK;
    s->n_blocks = linked;
    s->reserved = want;
    s->last_hash = parent;
    s->shared_end = UINT32_MAX;
    c->outstanding += want - linked;
    c->reused_tokens += (uint64_t)linked * KV_BLOCK;
    if (donor != NONE) {
        /* held while the slot takes its block, so that cannot evict it; the engine copies
         * at once, before anything else takes a block */
        if (c->blk[donor].refs++ == 0)
            lru_remove(c, donor);
        (void)kv_cache_grow(c, slot, m); /* within the reservation just made */
        cp->src = donor;
        cp->dst = s->table[linked];
        cp->n = m;
        kv_cache_commit(c, slot, prompt + (size_t)linked * KV_BLOCK, m, true);
        if (--c->blk[donor].refs == 0) {
            if (c->blk[donor].indexed)
                lru_push(c, donor);
            else
                lru_push_head(c, donor);
        }
        c->reused_tokens += m;
    }
    return (int)(s->len);
}

int kv_cache_grow(struct kv_cache *c, int slot, uint32_t n)
{
    struct kv_slot *s = &c->slots[slot];
    uint32_t end = s->len + n, need = (end + KV_BLOCK - 1) / KV_BLOCK;

    if (!s->active || need > c->max_blocks)
        return -ENOSPC;
    if (need > s->reserved) { /* past the reservation: only from blocks nobody reserved */
        if (need - s->reserved > c->n_free + c->n_lru - c->outstanding)
            return -ENOSPC;
        c->outstanding += need - s->reserved;
        s->reserved = need;
    }
    while (s->n_blocks < need) {
        uint32_t b = take_block(c);
        if (b == NONE)
            return -ENOSPC; /* the reservation rules this out */
        s->table[s->n_blocks++] = b;
        c->outstanding--;
    }
    return 0;
}

void kv_cache_commit(struct kv_cache *c, int slot, const uint32_t *tokens, uint32_t n,
                     bool shareable)
{
    struct kv_slot *s = &c->slots[slot];

    if (!shareable && s->shared_end == UINT32_MAX)
        s->shared_end = s->len;

    for (uint32_t i = 0; i < n; i++) {
        uint32_t pos = s->len++;
        s->tokens[pos] = tokens[i];
        if ((pos + 1) % KV_BLOCK == 0) {
            const uint32_t *tok = s->tokens + (pos + 1 - KV_BLOCK);
            uint32_t b = s->table[pos / KV_BLOCK];
            uint64_t h = kv_hash_block(s->last_hash, tok);

            if (!c->blk[b].indexed && pos < s->shared_end &&
                index_find(c, h, s->last_hash, tok) == NONE) {
                struct kv_blk *k = &c->blk[b];
                k->hash = h;
                k->parent = s->last_hash;
                k->indexed = true;
                k->n_tok = KV_BLOCK;
                memcpy(c->block_tokens + (size_t)b * KV_BLOCK, tok, KV_BLOCK * sizeof(uint32_t));
                k->next_in_bucket = c->buckets[h & c->mask];
                c->buckets[h & c->mask] = b;
                pindex_add(c, b);
                event(c, h);
            }
            if (pos < s->shared_end) /* the parent of the block kept at shared_end */
                s->last_hash = h;
        }
    }
}

uint32_t kv_cache_len(const struct kv_cache *c, int slot)
{
    return c->slots[slot].len;
}

const uint32_t *kv_cache_table(const struct kv_cache *c, int slot)
{
    return c->slots[slot].table;
}

void kv_cache_end(struct kv_cache *c, int slot)
{
    struct kv_slot *s = &c->slots[slot];

    if (!s->active)
        return;
    /* released last block first, so the LRU drops a chain's tail before its head */
    for (uint32_t i = s->n_blocks; i-- > 0;) {
        uint32_t b = s->table[i], end = s->len < s->shared_end ? s->len : s->shared_end;
        uint32_t k = end > i * KV_BLOCK ? end - i * KV_BLOCK : 0;
        if (--c->blk[b].refs > 0)
            continue;
        if (!c->blk[b].indexed && k > 0 && k < KV_BLOCK) {
            /* a partial block (the last, or the one where decode steps began) stays for a
             * prompt that starts the same way (copied) */
            struct kv_blk *pb = &c->blk[b];
            pb->parent = s->last_hash;
            pb->n_tok = (uint8_t)k;
            memcpy(c->block_tokens + (size_t)b * KV_BLOCK, s->tokens + (size_t)i * KV_BLOCK,
                   k * sizeof(uint32_t));
            pindex_add(c, b);
        }
        if (c->blk[b].indexed)
            lru_push(c, b);
        else if (c->blk[b].n_tok)
            lru_push_head(c, b);
        else
            c->free_stack[c->n_free++] = b;
    }
    c->outstanding -= s->reserved - s->n_blocks;
    s->active = false;
    s->len = s->n_blocks = s->reserved = 0;
    s->last_hash = 0;
}

void kv_cache_get_stats(const struct kv_cache *c, struct kv_cache_stats *st)
{
    st->blocks = c->n_blocks;
    st->cached = c->n_lru;
    st->used = c->n_blocks - c->n_free - c->n_lru;
    st->evictions = c->evictions;
    st->reused_tokens = c->reused_tokens;
}

uint32_t kv_cache_take_events(struct kv_cache *c, uint64_t *out, uint32_t cap, bool *lost)
{
    uint32_t n = c->n_ev < cap ? c->n_ev : cap;

    *lost = c->ev_lost;
    c->ev_lost = false;
    memcpy(out, c->ev, (size_t)n * sizeof(uint64_t));
    memmove(c->ev, c->ev + n, (size_t)(c->n_ev - n) * sizeof(uint64_t));
    c->n_ev -= n;
    return n;
}
