/* SPSC ring of byte records in shared memory (kfifo/ck_ring style): a power-of-two data area,
 * free-running u64 indices masked on use, records [u32 len][u32 rsvd][payload] padded to 8
 * bytes, a PAD marker where a record would wrap. Moves bytes only; no waking, no decoding.
 * Neither side trusts the other: the geometry lives in each process's private view, and the
 * indices and lengths read from shared memory are checked before they are used (a corrupt
 * ring gives -EPROTO, not a wild read or write). */
#include "shm_ring.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

#define SHM_RING_PAD    0xffffffffu /* len of a PAD marker: skip to the next lap */
#define SHM_RING_HDR    8u          /* [u32 len][u32 rsvd] */
#define SHM_RING_MIN    64u
#define SHM_RING_MAXSZ  (UINT64_C(1) << 32)

static inline uint64_t ring_align8(uint64_t n)
{
    return (n + 7) & ~UINT64_C(7);
}

/* Bytes a record with a payload of len bytes occupies, header and padding included. */
static inline uint64_t ring_rec_bytes(uint32_t len)
{
    return SHM_RING_HDR + ring_align8(len);
}

/* Read a u32 the other process wrote exactly once: a volatile load, so that the compiler
 * cannot re-read shared memory after we validated the value (no double fetch). */
static inline uint32_t ring_read_u32(const unsigned char *p)
{
    return *(const volatile uint32_t *)(const void *)p;
}

static inline void ring_write_hdr(unsigned char *p, uint32_t len)
{
    uint32_t *w = (uint32_t *)(void *)p; /* 8-aligned: data is 64-aligned, offsets are 8k */

    w[0] = len;
    w[1] = 0;
}

static bool ring_size_ok(uint64_t size)
{
    return size >= SHM_RING_MIN && size <= SHM_RING_MAXSZ && (size & (size - 1)) == 0;
}

static void ring_view_fill(struct shm_ring_view *v, struct shm_ring *shared, uint64_t size)
{
    memset(v, 0, sizeof(*v));
    v->shared = shared;
    v->size = size;
    v->mask = size - 1;
    v->data = shared->data;
}

size_t shm_ring_footprint(uint64_t size)
{
    return sizeof(struct shm_ring) + (size_t)size;
}

int shm_ring_init(struct shm_ring_view *v, struct shm_ring *shared, uint64_t size)
{
    if (!ring_size_ok(size))
        return -EINVAL;
    shared->magic = SHM_RING_MAGIC;
    shared->version = SHM_RING_VERSION;
    shared->size = size;
    atomic_init(&shared->head, 0);
    atomic_init(&shared->tail, 0);
    atomic_init(&shared->consumer_waiting, 0);
    atomic_init(&shared->producer_waiting, 0);
    ring_view_fill(v, shared, size);
    return 0;
}

int shm_ring_check(struct shm_ring_view *v, struct shm_ring *shared, uint64_t expected_size)
{
    if (shared->magic != SHM_RING_MAGIC || shared->version != SHM_RING_VERSION)
        return -EPROTO;
    /* The header's size is compared, then never read again: the view keeps ours. */
    if (!ring_size_ok(expected_size) || shared->size != expected_size)
        return -EPROTO;
    ring_view_fill(v, shared, expected_size);
    return 0;
}

/* Half the data area less a header: a record of this size fits in one push whenever the ring
 * is empty, wherever the indices stand (it either fits before the end, or the end is less than
 * half the ring away and the PAD plus the record still fit). So -EAGAIN always means "wait
 * for the consumer", never "can only fit after some lucky alignment". */
uint32_t shm_ring_max_record(const struct shm_ring_view *v)
{
    uint64_t m = v->size / 2 - SHM_RING_HDR;

    return m >= SHM_RING_PAD ? SHM_RING_PAD - 8 : (uint32_t)m;
}

void *shm_ring_reserve(struct shm_ring_view *v, uint32_t len, int *err)
{
    struct shm_ring *r = v->shared;
    uint64_t size = v->size, head, tail, off, contig, need, rec;
    unsigned char *slot;

    assert(!v->reserved); /* our own discipline: one reservation at a time */
    if (len > shm_ring_max_record(v)) {
        *err = -EMSGSIZE;
        return NULL;
    }
    rec = ring_rec_bytes(len);
    /* head is ours to write; we read it back from shared memory, but only through the mask,
     * and the distance to tail is checked below. */
    head = atomic_load_explicit(&r->head, memory_order_relaxed);
    /* Acquire pairs with the consumer's release of tail in shm_ring_pop()/peek(): its reads of
     * the bytes it freed happen before we overwrite them. */
    tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (head - tail > size || (head & 7) != 0) {
        *err = -EPROTO; /* the consumer's tail is not a tail (or our head was rewritten) */
        return NULL;
    }
    off = head & v->mask;
    contig = size - off;
    need = contig >= rec ? rec : contig + rec;
    if (size - (head - tail) < need) {
        *err = -EAGAIN;
        return NULL;
    }
    v->reserved_head = head;
    if (contig >= rec) {
        v->reserved_adv = 0;
        v->reserved_off = off;
    } else {
        /* The PAD marker is written now but published by commit's release of head, together
         * with the record. contig >= 8 as every offset is a multiple of 8. */
        ring_write_hdr(v->data + off, SHM_RING_PAD);
        v->reserved_adv = contig;
        v->reserved_off = 0;
    }
    v->reserved_len = len;
    v->reserved = true;
    slot = v->data + v->reserved_off;
    *err = 0;
    return slot + SHM_RING_HDR;
}

void shm_ring_commit(struct shm_ring_view *v, uint32_t used)
{
    /* Our own bookkeeping, not the peer's bytes: these asserts check the caller's code. */
    assert(v->reserved);
    assert(used <= v->reserved_len);
    v->reserved = false;
    ring_write_hdr(v->data + v->reserved_off, used);
    /* Release pairs with the consumer's acquire of head in peek(): the PAD, header and payload
     * written above are visible before the new head is. */
    atomic_store_explicit(&v->shared->head,
                          v->reserved_head + v->reserved_adv + ring_rec_bytes(used),
                          memory_order_release);
}

int shm_ring_push(struct shm_ring_view *v, const void *msg, uint32_t len)
{
    int err;
    void *slot = shm_ring_reserve(v, len, &err);

    if (slot == NULL)
        return err;
    if (len > 0)
        memcpy(slot, msg, len);
    shm_ring_commit(v, len);
    return 0;
}

int shm_ring_peek(struct shm_ring_view *v, const void **msg, uint32_t *len)
{
    struct shm_ring *r = v->shared;
    uint64_t size = v->size, head, tail, off, avail;
    uint32_t n;

    v->peeked = false;
    tail = atomic_load_explicit(&r->tail, memory_order_relaxed); /* ours; checked below */
    /* Acquire pairs with the producer's release in commit(): the record's bytes are visible
     * once we see the head that covers them. */
    head = atomic_load_explicit(&r->head, memory_order_acquire);
    if ((tail & 7) != 0)
        return -EPROTO;
    for (;;) {
        avail = head - tail;
        if (avail == 0)
            return -EAGAIN;
        if (avail > size || (avail & 7) != 0)
            return -EPROTO; /* the producer's head is not a head */
        off = tail & v->mask;
        n = ring_read_u32(v->data + off);
        if (n != SHM_RING_PAD)
            break;
        /* A PAD runs to the end of the data area and is published with the record after it;
         * one at offset 0 or reaching past head is corrupt. */
        if (off == 0 || avail < size - off)
            return -EPROTO;
        tail += size - off;
        /* Release pairs with the producer's acquire of tail in reserve(): hand the padding
         * back at once. We read nothing in it but the marker, which we are done with. */
        atomic_store_explicit(&r->tail, tail, memory_order_release);
    }
    if (n > shm_ring_max_record(v) || ring_rec_bytes(n) > avail ||
        ring_rec_bytes(n) > size - off)
        return -EPROTO;
    /* pop() moves tail by what we validated here, never by what the bytes say later. */
    v->peeked_next = tail + ring_rec_bytes(n);
    v->peeked = true;
    *msg = v->data + off + SHM_RING_HDR;
    *len = n;
    return 0;
}

void shm_ring_pop(struct shm_ring_view *v)
{
    const void *msg;
    uint32_t len;

    /* Without a peek first, pop the record a peek would return (validated the same way). */
    if (!v->peeked && shm_ring_peek(v, &msg, &len) != 0)
        return;
    v->peeked = false;
    /* Release pairs with the producer's acquire of tail in reserve(): our reads of the
     * payload are done before it may overwrite it. */
    atomic_store_explicit(&v->shared->tail, v->peeked_next, memory_order_release);
}

int shm_ring_empty(const struct shm_ring_view *v)
{
    /* Acquire both: either side may ask, and a "not empty" answer is followed by a peek. */
    uint64_t tail = atomic_load_explicit(&v->shared->tail, memory_order_acquire);
    uint64_t head = atomic_load_explicit(&v->shared->head, memory_order_acquire);

    return head == tail;
}
