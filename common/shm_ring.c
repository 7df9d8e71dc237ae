/* SPSC ring of byte records in shared memory (kfifo/ck_ring style): a power-of-two data area,
 * free-running u64 indices masked on use, records [u32 len][u32 rsvd][payload] padded to 8
 * bytes, a PAD marker where a record would wrap. Moves bytes only; no waking, no decoding.
 * The consumer never trusts what the producer wrote: lengths and indices read from shared
 * memory are checked before they are used (a corrupt ring gives -EPROTO, not a wild read). */
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

size_t shm_ring_footprint(uint64_t size)
{
    return sizeof(struct shm_ring) + (size_t)size;
}

int shm_ring_init(struct shm_ring *r, uint64_t size)
{
    if (size < SHM_RING_MIN || size > SHM_RING_MAXSZ || (size & (size - 1)) != 0)
        return -EINVAL;
    r->magic = SHM_RING_MAGIC;
    r->version = SHM_RING_VERSION;
    r->size = size;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    atomic_init(&r->consumer_waiting, 0);
    return 0;
}

int shm_ring_check(const struct shm_ring *r, uint64_t expected_size)
{
    if (r->magic != SHM_RING_MAGIC || r->version != SHM_RING_VERSION)
        return -EPROTO;
    if (r->size != expected_size || r->size < SHM_RING_MIN || r->size > SHM_RING_MAXSZ ||
        (r->size & (r->size - 1)) != 0)
        return -EPROTO;
    return 0;
}

/* Half the data area less a header: a record of this size fits in one push whenever the ring
 * is empty, wherever the indices stand (it either fits before the end, or the end is less than
 * half the ring away and the PAD plus the record still fit). So -EAGAIN always means "wait
 * for the consumer", never "can only fit after some lucky alignment". */
uint32_t shm_ring_max_record(const struct shm_ring *r)
{
    uint64_t m = r->size / 2 - SHM_RING_HDR;

    return m >= SHM_RING_PAD ? SHM_RING_PAD - 8 : (uint32_t)m;
}

void *shm_ring_reserve(struct shm_ring *r, uint32_t len, int *err)
{
    uint64_t size = r->size, head, tail, off, contig, need, rec;
    unsigned char *slot;

    if (len > shm_ring_max_record(r)) {
        *err = -EMSGSIZE;
        return NULL;
    }
    rec = ring_rec_bytes(len);
    /* head is ours: relaxed. */
    head = atomic_load_explicit(&r->head, memory_order_relaxed);
    /* Acquire pairs with the consumer's release of tail in shm_ring_pop()/peek(): its reads of
     * the bytes it freed happen before we overwrite them. */
    tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    off = head & (size - 1);
    contig = size - off;
    need = contig >= rec ? rec : contig + rec;
    if (size - (head - tail) < need) {
        *err = -EAGAIN;
        return NULL;
    }
    if (contig >= rec) {
        slot = r->data + off;
    } else {
        /* The PAD marker is written now but published by commit's release of head, together
         * with the record. contig >= 8 as every offset is a multiple of 8. */
        ring_write_hdr(r->data + off, SHM_RING_PAD);
        slot = r->data;
    }
    /* Provisional header: commit finds the slot again by reading the word at head (PAD or
     * not), and rewrites len with the size actually used. */
    ring_write_hdr(slot, len);
    *err = 0;
    return slot + SHM_RING_HDR;
}

void shm_ring_commit(struct shm_ring *r, uint32_t used)
{
    uint64_t size = r->size, head, off, adv = 0;
    unsigned char *slot;

    head = atomic_load_explicit(&r->head, memory_order_relaxed); /* ours */
    off = head & (size - 1);
    slot = r->data + off;
    if (ring_read_u32(slot) == SHM_RING_PAD) {
        adv = size - off;
        slot = r->data;
    }
    assert(used <= ring_read_u32(slot)); /* commit what was reserved, no more */
    ring_write_hdr(slot, used);
    /* Release pairs with the consumer's acquire of head in peek(): the PAD, header and payload
     * written above are visible before the new head is. */
    atomic_store_explicit(&r->head, head + adv + ring_rec_bytes(used), memory_order_release);
}

int shm_ring_push(struct shm_ring *r, const void *msg, uint32_t len)
{
    int err;
    void *slot = shm_ring_reserve(r, len, &err);

    if (slot == NULL)
        return err;
    if (len > 0)
        memcpy(slot, msg, len);
    shm_ring_commit(r, len);
    return 0;
}

int shm_ring_peek(struct shm_ring *r, const void **msg, uint32_t *len)
{
    uint64_t size = r->size, head, tail, off, avail;
    uint32_t n;

    tail = atomic_load_explicit(&r->tail, memory_order_relaxed); /* ours */
    /* Acquire pairs with the producer's release in commit(): the record's bytes are visible
     * once we see the head that covers them. */
    head = atomic_load_explicit(&r->head, memory_order_acquire);
    for (;;) {
        avail = head - tail;
        if (avail == 0)
            return -EAGAIN;
        if (avail > size || (avail & 7) != 0)
            return -EPROTO; /* the producer's head is not a head */
        off = tail & (size - 1);
        n = ring_read_u32(r->data + off);
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
    if (n > shm_ring_max_record(r) || ring_rec_bytes(n) > avail ||
        ring_rec_bytes(n) > size - off)
        return -EPROTO;
    *msg = r->data + off + SHM_RING_HDR;
    *len = n;
    return 0;
}

void shm_ring_pop(struct shm_ring *r)
{
    uint64_t size = r->size, head, tail, off;
    uint32_t n;

    tail = atomic_load_explicit(&r->tail, memory_order_relaxed); /* ours */
    head = atomic_load_explicit(&r->head, memory_order_acquire); /* as in peek() */
    off = tail & (size - 1);
    n = ring_read_u32(r->data + off);
    /* Peek validated this record, but the bytes are shared: validate again rather than move
     * tail by whatever they say now. On a mismatch tail stays put and the next peek reports
     * -EPROTO. */
    if (head - tail > size || n == SHM_RING_PAD || n > shm_ring_max_record(r) ||
        ring_rec_bytes(n) > head - tail || ring_rec_bytes(n) > size - off)
        return;
    /* Release pairs with the producer's acquire of tail in reserve(): our reads of the
     * payload are done before it may overwrite it. */
    atomic_store_explicit(&r->tail, tail + ring_rec_bytes(n), memory_order_release);
}

int shm_ring_empty(struct shm_ring *r)
{
    /* Acquire both: either side may ask, and a "not empty" answer is followed by a peek. */
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);

    return head == tail;
}
