/* The tokenizer's hash maps (token text -> id, merge pair -> rank), built once at load so no
 * encode step scans the vocabulary. */
#include "tokenizer_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

/* FNV-1a, its high bits folded down: the table index takes the low bits. */
static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = hash_fnv1a(s, len);
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Smallest power of two >= 2n (load factor at most 1/2). */
static uint32_t table_size(size_t n)
{
    uint32_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

int tok_text_map_build(struct tok_text_map *m, const struct tokenizer *t)
{
    uint32_t size = table_size(t->n_vocab);
    m->slots = malloc(size * sizeof(*m->slots));
    if (!m->slots)
        return -ENOMEM;
    memset(m->slots, 0xFF, size * sizeof(*m->slots));
    m->mask = size - 1;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        uint32_t len;
        const char *s = tok_text(t, id, &len);
        uint32_t i = (uint32_t)hash_bytes(s, len) & m->mask;
        for (;; i = (i + 1) & m->mask) {
            uint32_t other = m->slots[i], olen;
            if (other == TOK_NONE) {
                m->slots[i] = id;
                break;
            }
            const char *os = tok_text(t, other, &olen);
            if (olen == len && memcmp(os, s, len) == 0) {
                m->slots[i] = id; /* the later id wins */
                break;
            }
        }
    }
    return 0;
}

void tok_text_map_free(struct tok_text_map *m)
{
    free(m->slots);
    m->slots = NULL;
}

uint32_t tok_text_map_get(const struct tok_text_map *m, const struct tokenizer *t, const char *s,
                          size_t len)
{
    if (!m->slots || len > t->max_token_len)
        return TOK_NONE;
    for (uint32_t i = (uint32_t)hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t id = m->slots[i], olen;
        if (id == TOK_NONE)
            return TOK_NONE;
        const char *os = tok_text(t, id, &olen);
        if (olen == len && memcmp(os, s, len) == 0)
            return id;
    }
}

int tok_pair_map_init(struct tok_pair_map *m, size_t n)
{
    uint32_t size = table_size(n);
    m->keys = calloc(size, sizeof(*m->keys));
    m->rank = malloc(size * sizeof(*m->rank));
    m->result = malloc(size * sizeof(*m->result));
    m->mask = size - 1;
    if (!m->keys || !m->rank || !m->result) {
        tok_pair_map_free(m);
        return -ENOMEM;
    }
    return 0;
}

void tok_pair_map_free(struct tok_pair_map *m)
{
    free(m->keys);
    free(m->rank);
    free(m->result);
    m->keys = NULL;
    m->rank = m->result = NULL;
}

void tok_pair_map_put(struct tok_pair_map *m, uint32_t left, uint32_t right, uint32_t rank,
                      uint32_t result)
{
    uint64_t key = ((uint64_t)left << 32 | right) + 1;
    for (uint32_t i = (uint32_t)hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key)
            return; /* an earlier merge of the same pair has the better rank */
        if (m->keys[i] == 0) {
            m->keys[i] = key;
            m->rank[i] = rank;
            m->result[i] = result;
            return;
        }
    }
}

bool tok_pair_map_get(const struct tok_pair_map *m, uint32_t left, uint32_t right,
                      uint32_t *rank, uint32_t *result)
{
    if (!m->keys)
        return false;
    uint64_t key = ((uint64_t)left << 32 | right) + 1;
    for (uint32_t i = (uint32_t)hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) {
            *rank = m->rank[i];
            *result = m->result[i];
            return true;
        }
        if (m->keys[i] == 0)
            return false;
    }
}
