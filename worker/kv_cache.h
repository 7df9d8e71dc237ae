/* The bookkeeping of a paged KV cache (DESIGN "Prompt reuse"): a pool of fixed-size blocks of
 * KV_BLOCK positions, a block table per sequence slot, and an index of full blocks by the
 * hash of every token up to and including the block, so a new sequence whose prompt starts
 * like an earlier one links those blocks (reference counted, read-only) and computes only
 * the rest. Blocks no sequence holds stay indexed until space is needed, then are reused
 * least recently released first; a block a sequence holds is never taken from it.
 *
 * Admission is by reservation: kv_cache_begin counts the blocks a sequence may grow into
 * (prompt and output) against the blocks free or evictable, so a running sequence always
 * finds a block when it needs one. Only numbers here: the engine owns the K and V memory
 * and addresses it by block id. Single-threaded (the worker's loop); nothing allocated
 * after kv_cache_create. */
#ifndef KV_CACHE_H
#define KV_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_hash.h"

#define KV_BLOCK KV_HASH_BLOCK /* positions per block */

struct kv_cache;

struct kv_cache_stats {
    uint32_t blocks, used, cached; /* all, held by a sequence, held by none but indexed */
    uint64_t evictions;            /* indexed blocks reused for other tokens */
    uint64_t reused_tokens;        /* prompt positions linked instead of computed */
};

/* A pool of n_blocks blocks for n_slots sequences of at most max_ctx positions. Returns NULL
 * with *err = -ENOMEM or -EINVAL (a zero count). */
struct kv_cache *kv_cache_create(uint32_t n_blocks, uint32_t n_slots, uint32_t max_ctx, int *err);
void kv_cache_destroy(struct kv_cache *c);

/* Positions the engine must copy at once: the first n of block src into block dst, every
 * layer's keys and values (n 0: none). */
struct kv_copy {
    uint32_t src, dst, n;
};

/* Starts slot (which must be empty) for a prompt of n tokens that may grow to max_len
 * positions: links the longest run of indexed blocks the prompt starts with (when reuse; at
 * most n - 1 positions, so the last prompt token is always computed), then, when a cached
 * block (an indexed one, or the partial last block of a finished sequence) continues the
 * same history with the prompt's next tokens, gives the slot a fresh block holding those
 * positions by copy (*cp), and reserves the blocks it may still need. Returns the positions
 * reused, -EAGAIN when the free and evictable blocks do not cover it now (nothing changed),
 * or -ENOSPC when the whole pool would not (nothing changed). */
int kv_cache_begin(struct kv_cache *c, int slot, const uint32_t *prompt, uint32_t n,
                   uint32_t max_len, bool reuse, struct kv_copy *cp);

/* Makes sure slot has blocks for positions [len, len + n): within its reservation always,
 * past it only from blocks no other slot reserved. Returns 0 or -ENOSPC. */
int kv_cache_grow(struct kv_cache *c, int slot, uint32_t n);

/* Records that positions [len, len + n) of slot now hold tokens' keys and values: the
 * length advances and each block filled is indexed (unless an equal one is). shareable:
 * a prompt computing these positions would get the same bits (a prefill's, or a decode
 * step's where the kernels' prompt and decode rows agree, kern_ops.rows_agree). From the
 * first position that is not, nothing more of the slot is shared: a prompt that links a
 * block must get what computing it would. */
void kv_cache_commit(struct kv_cache *c, int slot, const uint32_t *tokens, uint32_t n,
                     bool shareable);

/* Positions slot holds. */
uint32_t kv_cache_len(const struct kv_cache *c, int slot);

/* Releases slot's blocks (full ones stay indexed, a partial last one is kept for copies
 * until space is needed) and its reservation. Empty slots: no-op. */
void kv_cache_end(struct kv_cache *c, int slot);

void kv_cache_get_stats(const struct kv_cache *c, struct kv_cache_stats *st);

/* Events kept for the front's prefix index (kv_hash.h keys): a block indexed (its key) or
 * evicted (its key - 1), in order, at most KV_CACHE_EVENTS held. */
#define KV_CACHE_EVENTS 4096u

/* Moves up to cap of the oldest events into out; *lost is set (once) when some were
 * dropped because the log was full. Returns how many. */
uint32_t kv_cache_take_events(struct kv_cache *c, uint64_t *out, uint32_t cap, bool *lost);

/* Slot's block table: entry i holds positions [i * KV_BLOCK, (i + 1) * KV_BLOCK). */
const uint32_t *kv_cache_table(const struct kv_cache *c, int slot);

static inline uint32_t kv_cache_block(const struct kv_cache *c, int slot, uint32_t pos)
{
    return kv_cache_table(c, slot)[pos / KV_BLOCK];
}

#endif
