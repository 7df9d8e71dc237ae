/* Serving defaults from a GGUF's architecture keys (model_info.h). The engine validates the
 * whole config again at load; here only what the defaults need is read. */
#include "model_info.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "gguf.h"

uint64_t model_info_kv_bytes(uint32_t n_layers, uint32_t kv_dim)
{
    return 2ull * n_layers * kv_dim * sizeof(uint16_t);
}

static int arch_u32(const struct gguf *g, const char *arch, const char *key, uint32_t *v)
{
    char name[160];
    snprintf(name, sizeof(name), "%s.%s", arch, key);
    return gguf_get_u32(g, name, v);
}

int model_info_read(const struct gguf *g, struct model_info *mi, char *err, size_t errlen)
{
    struct gguf_str s;
    char arch[64];
    uint32_t ctx = 0, layers = 0, dim = 0, heads = 0, kv_heads, key_len;

    if (gguf_get_str(g, "general.architecture", &s) < 0 || s.len == 0 || s.len >= sizeof(arch)) {
        snprintf(err, errlen, "no general.architecture");
        return -EINVAL;
    }
    snprintf(arch, sizeof(arch), "%.*s", (int)s.len, s.ptr);
    if (arch_u32(g, arch, "context_length", &ctx) < 0 || !ctx ||
        arch_u32(g, arch, "block_count", &layers) < 0 || !layers ||
        arch_u32(g, arch, "embedding_length", &dim) < 0 || !dim ||
        arch_u32(g, arch, "attention.head_count", &heads) < 0 || !heads) {
        snprintf(err, errlen, "%s: missing or zero context_length, block_count, "
                 "embedding_length or attention.head_count", arch);
        return -EINVAL;
    }
    kv_heads = heads;
    (void)arch_u32(g, arch, "attention.head_count_kv", &kv_heads);
    key_len = dim / heads;
    (void)arch_u32(g, arch, "attention.key_length", &key_len);
    if (!kv_heads || !key_len || kv_heads > heads) {
        snprintf(err, errlen, "%s: bad attention head counts", arch);
        return -EINVAL;
    }
    mi->train_ctx = ctx;
    mi->kv_bytes_per_token = model_info_kv_bytes(layers, kv_heads * key_len);
    return 0;
}

uint64_t model_info_kv_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t b = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : (1ull << 30);
    return b > (8ull << 30) ? 8ull << 30 : b;
}

uint32_t model_info_default_ctx(uint32_t train_ctx, uint64_t kv_bytes_per_token,
                                uint32_t sequences, uint64_t budget)
{
    uint64_t ctx;

    if (!budget)
        budget = model_info_kv_budget();
    if (!sequences)
        sequences = 1;
    if (!kv_bytes_per_token)
        return train_ctx;
    ctx = budget / (kv_bytes_per_token * sequences);
    if (ctx > train_ctx)
        ctx = train_ctx;
    if (ctx < MODEL_INFO_MIN_CTX)
        ctx = MODEL_INFO_MIN_CTX < train_ctx ? MODEL_INFO_MIN_CTX : train_ctx;
    return (uint32_t)ctx;
}

uint32_t model_info_default_threads(uint32_t workers)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t t;

    if (n < 1)
        n = 1;
    t = (uint32_t)n / (workers ? workers : 1);
    return t ? t : 1;
}
