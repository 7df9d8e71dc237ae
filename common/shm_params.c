/* A worker's parameters block (shm_params.h): encoded by the front, decoded and checked by
 * the worker from a private copy. */
#include "shm_params.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

struct shm_params_str {
    uint32_t off, len; /* off 0: none (the block itself is at 0) */
};

/* The fixed part, at the area's start. */
struct shm_params_block {
    uint32_t version; /* SHM_PARAMS_VERSION */
    uint32_t size;    /* sizeof(struct shm_params_block) */
    uint32_t id, parent_pid, wake_fd, notify_fd;
    uint32_t max_sequences, max_prefill_tokens, ctx, kv_cache_tokens, threads;
    uint32_t mock_delay_ms, mock_load_ms, heartbeat_ms;
    uint32_t flags;
    struct shm_params_str model, mock_reply, mock_tool_reply;
};

/* Bytes a string takes in the area (with its NUL), 0 for none, SIZE_MAX when too long. */
static size_t str_bytes(const char *s)
{
    size_t n;
    if (!s)
        return 0;
    n = strlen(s);
    return n > SHM_PARAMS_MAX_STR ? SIZE_MAX : n + 1;
}

size_t shm_params_size(const struct shm_params *p)
{
    size_t a = str_bytes(p->model), b = str_bytes(p->mock_reply);
    size_t c = str_bytes(p->mock_tool_reply);
    if (!p->model || !p->model[0] || a == SIZE_MAX || b == SIZE_MAX || c == SIZE_MAX)
        return 0;
    return sizeof(struct shm_params_block) + a + b + c;
}

static void put_str(unsigned char *buf, size_t *at, const char *s, struct shm_params_str *out)
{
    *out = (struct shm_params_str){0, 0};
    if (!s)
        return;
    out->off = (uint32_t)*at;
    out->len = (uint32_t)strlen(s);
    memcpy(buf + *at, s, out->len + 1);
    *at += out->len + 1;
}

int shm_params_encode(const struct shm_params *p, void *buf, size_t cap)
{
    struct shm_params_block b;
    size_t need = shm_params_size(p), at = sizeof(b);
    if (!need || need > cap || need > UINT32_MAX)
        return -EINVAL;
    memset(&b, 0, sizeof(b));
    b.version = SHM_PARAMS_VERSION;
    b.size = sizeof(b);
    b.id = p->id;
    b.parent_pid = p->parent_pid;
    b.wake_fd = p->wake_fd;
    b.notify_fd = p->notify_fd;
    b.max_sequences = p->max_sequences;
    b.max_prefill_tokens = p->max_prefill_tokens;
    b.ctx = p->ctx;
    b.kv_cache_tokens = p->kv_cache_tokens;
    b.threads = p->threads;
    b.mock_delay_ms = p->mock_delay_ms;
    b.mock_load_ms = p->mock_load_ms;
    b.heartbeat_ms = p->heartbeat_ms;
    b.flags = p->mock_faults ? SHM_PARAMS_MOCK_FAULTS : 0;
    put_str(buf, &at, p->model, &b.model);
    put_str(buf, &at, p->mock_reply, &b.mock_reply);
    put_str(buf, &at, p->mock_tool_reply, &b.mock_tool_reply);
    memcpy(buf, &b, sizeof(b));
    return 0;
}

/* s's string in the copy of len bytes, or NULL (none); sets *bad when it lies outside the
 * area, is too long, or is not NUL-terminated right at its end. */
static const char *get_str(const char *copy, size_t len, struct shm_params_str s, bool *bad)
{
    if (s.off == 0 && s.len == 0)
        return NULL;
    if (s.off < sizeof(struct shm_params_block) || s.off >= len || s.len > SHM_PARAMS_MAX_STR ||
        s.len >= len - s.off || copy[s.off + s.len] != '\0' ||
        memchr(copy + s.off, '\0', s.len) != NULL) {
        *bad = true;
        return NULL;
    }
    return copy + s.off;
}

/* Whether v is in [min, max]; names the field in err when not. */
static bool in_range(const char *name, uint32_t v, uint32_t min, uint32_t max, char *err,
                     size_t errlen)
{
    if (v >= min && v <= max)
        return true;
    snprintf(err, errlen, "parameter %s is %u, not in [%u, %u]", name, v, min, max);
    return false;
}

int shm_params_decode(const void *buf, size_t len, struct shm_params *p, char **store,
                      char *err, size_t errlen)
{
    struct shm_params_block b;
    bool bad = false;
    char *copy;

    *store = NULL;
    memset(p, 0, sizeof(*p));
    if (len < sizeof(b) || len > sizeof(b) + 3 * ((size_t)SHM_PARAMS_MAX_STR + 1)) {
        snprintf(err, errlen, "parameters area of %zu bytes (a block is %zu)", len, sizeof(b));
        return -EPROTO;
    }
    /* one private copy: the checks below and the use after them see the same bytes */
    if (!(copy = malloc(len)))
        return -ENOMEM;
    memcpy(copy, buf, len);
    memcpy(&b, copy, sizeof(b));
    if (b.version != SHM_PARAMS_VERSION || b.size != sizeof(b)) {
        snprintf(err, errlen, "parameters block version %u of %u bytes (expected %u of %zu)",
                 b.version, b.size, SHM_PARAMS_VERSION, sizeof(b));
        goto fail;
    }
    if (!in_range("max_sequences", b.max_sequences, 1, SHM_PARAMS_MAX_SEQUENCES, err, errlen) ||
        !in_range("max_prefill_tokens", b.max_prefill_tokens, 1, INT32_MAX, err, errlen) ||
        !in_range("ctx", b.ctx, 2, WIRE_MAX_PROMPT, err, errlen) ||
        !in_range("kv_cache_tokens", b.kv_cache_tokens, 0, INT32_MAX, err, errlen) ||
        !in_range("threads", b.threads, 0, SHM_PARAMS_MAX_THREADS, err, errlen) ||
        !in_range("mock_delay_ms", b.mock_delay_ms, 0, SHM_PARAMS_MAX_MOCK_MS, err, errlen) ||
        !in_range("mock_load_ms", b.mock_load_ms, 0, SHM_PARAMS_MAX_MOCK_MS, err, errlen) ||
        !in_range("heartbeat_ms", b.heartbeat_ms, 0, SHM_PARAMS_MAX_HEARTBEAT, err, errlen) ||
        !in_range("id", b.id, 0, INT32_MAX, err, errlen) ||
        !in_range("parent_pid", b.parent_pid, 0, INT32_MAX, err, errlen) ||
        !in_range("wake_fd", b.wake_fd, 0, INT32_MAX, err, errlen) ||
        !in_range("notify_fd", b.notify_fd, 0, INT32_MAX, err, errlen))
        goto fail;
    if (b.flags & ~SHM_PARAMS_MOCK_FAULTS) {
        snprintf(err, errlen, "parameters block has unknown flags 0x%x", b.flags);
        goto fail;
    }
    p->model = get_str(copy, len, b.model, &bad);
    p->mock_reply = get_str(copy, len, b.mock_reply, &bad);
    p->mock_tool_reply = get_str(copy, len, b.mock_tool_reply, &bad);
    if (bad || !p->model || !p->model[0]) {
        snprintf(err, errlen, "%s", bad ? "a parameter string lies outside its area or is "
                                          "not NUL-terminated"
                                        : "no model in the parameters");
        goto fail;
    }
    p->id = b.id;
    p->parent_pid = b.parent_pid;
    p->wake_fd = b.wake_fd;
    p->notify_fd = b.notify_fd;
    p->max_sequences = b.max_sequences;
    p->max_prefill_tokens = b.max_prefill_tokens;
    p->ctx = b.ctx;
    p->kv_cache_tokens = b.kv_cache_tokens;
    p->threads = b.threads;
    p->mock_delay_ms = b.mock_delay_ms;
    p->mock_load_ms = b.mock_load_ms;
    p->heartbeat_ms = b.heartbeat_ms;
    p->mock_faults = (b.flags & SHM_PARAMS_MOCK_FAULTS) != 0;
    *store = copy;
    return 0;
fail:
    free(copy);
    memset(p, 0, sizeof(*p));
    return -EPROTO;
}
