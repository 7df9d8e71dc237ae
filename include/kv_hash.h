/* The key of a full KV-cache block (KV_HASH_BLOCK tokens): a chain hash of the key of the
 * block before it (0 for the first) and the block's tokens, so it stands for every token up
 * to and including the block. The worker indexes its blocks by it (worker/kv_cache.c) and
 * reports them; the front computes the same keys from a request's prompt to route it to the
 * worker that holds the longest prefix (server/prefix_index.c). */
#ifndef KV_HASH_H
#define KV_HASH_H

#include <stdint.h>

#define KV_HASH_BLOCK 16 /* positions per block */

/* Odd, and never 1: 0 means "no parent", and a key minus 1 (never 0) reports its eviction. */
static inline uint64_t kv_hash_block(uint64_t parent, const uint32_t *tok)
{
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < KV_HASH_BLOCK; i++) {
        h = (h ^ tok[i]) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 32)) | 1;
    return h == 1 ? 3 : h;
}

#endif
