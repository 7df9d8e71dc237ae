/* Small non-cryptographic hashes shared by the modules that index names (GGUF keys, token
 * texts, test presets) and seed generators: one definition of each. */
#ifndef HASH_H
#define HASH_H

#include <stddef.h>
#include <stdint.h>

/* FNV-1a (64-bit) over p[0, n): names are short, so a byte-at-a-time hash is enough. */
static inline uint64_t hash_fnv1a(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* splitmix64 (Vigna): advances *x and returns a well-mixed 64-bit value; used to spread a
 * seed over a generator's state. */
static inline uint64_t hash_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
