/* A single-producer single-consumer ring of byte records in shared memory. It moves bytes
 * only: what the records mean is proto.h's business, waking the other side notify.h's. */
#ifndef SHM_RING_H
#define SHM_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_RING_MAGIC   0x6b726e67u /* "krng" */
#define SHM_RING_VERSION 2u

/* One producer process, one consumer process.
 *  head: written only by the producer (release), read by the consumer (acquire).
 *  tail: written only by the consumer (release), read by the producer (acquire).
 *  consumer_waiting: set by the consumer before it sleeps, read by the producer (seq_cst);
 *    the producer clears it when it writes the eventfd, so that wake-ups merge.
 *  producer_waiting: the mirror image, for a producer that found the ring full: set by the
 *    producer before it sleeps, read and cleared by the consumer after it pops.
 *  magic, version, size: set before fork, never change; each process copies size into its
 *    own shm_ring_view once and never reads it again (the peer could rewrite it).
 * Bytes in [tail, head) belong to the consumer; the rest belong to the producer.
 * A record is [u32 len][u32 rsvd][payload], padded to 8 bytes; a record that would wrap
 * leaves a PAD marker (len 0xffffffff) and starts again at offset 0, so every payload is
 * contiguous. */
struct shm_ring {
    uint32_t magic, version;
    uint64_t size; /* data bytes, a power of two */
    alignas(64) _Atomic uint64_t head;
    alignas(64) _Atomic uint64_t tail;
    alignas(64) _Atomic uint32_t consumer_waiting;
    alignas(64) _Atomic uint32_t producer_waiting;
    alignas(64) unsigned char data[];
};

/* One process's handle on a ring, in its private memory: the geometry is fixed by init or
 * check, so the peer cannot steer an operation out of bounds by rewriting the shared header.
 * The reserve and peek state also stays here: commit and pop never re-read what they
 * validated. Only head, tail, the waiting flags and record bytes come from shared memory. */
struct shm_ring_view {
    struct shm_ring *shared;
    uint64_t size, mask;
    unsigned char *data;
    /* producer: the slot reserve() handed out */
    uint64_t reserved_head; /* head when reserved */
    uint64_t reserved_off;  /* the slot's header, offset in data */
    uint64_t reserved_adv;  /* PAD bytes skipped before it */
    uint32_t reserved_len;
    bool reserved;
    /* consumer: the record peek() returned */
    uint64_t peeked_next; /* tail after it */
    bool peeked;
};

/* Bytes a ring with size data bytes takes, header included. */
size_t shm_ring_footprint(uint64_t size);

/* Set up a ring over memory of shm_ring_footprint(size) bytes and fill v. size must be a
 * power of two and at least 64. Returns 0 or -EINVAL. Before either side uses it. */
int shm_ring_init(struct shm_ring_view *v, struct shm_ring *shared, uint64_t size);

/* Check that memory shared by another process holds a ring of expected_size data bytes, and
 * fill v from expected_size (not from the shared header). Returns 0 or -EPROTO. */
int shm_ring_check(struct shm_ring_view *v, struct shm_ring *shared, uint64_t expected_size);

/* The largest payload a push can ever take. */
uint32_t shm_ring_max_record(const struct shm_ring_view *v);

/* Append one record. Returns 0, -EAGAIN if full (retry after a wake), -EMSGSIZE if len can
 * never fit, or -EPROTO if the consumer's tail is not a tail. Producer process only. */
int shm_ring_push(struct shm_ring_view *v, const void *msg, uint32_t len);

/* Reserve room for a record of up to len bytes and return where to write it, or NULL with
 * *err set to -EAGAIN, -EMSGSIZE or -EPROTO. The record is invisible until
 * shm_ring_commit(v, used) with used <= len; one reservation at a time. Producer only. */
void *shm_ring_reserve(struct shm_ring_view *v, uint32_t len, int *err);
void shm_ring_commit(struct shm_ring_view *v, uint32_t used);

/* The oldest record: *msg points into the ring and stays valid until shm_ring_pop(), but the
 * producer can still write those bytes: copy before trusting them. Returns 0, -EAGAIN if
 * empty, or -EPROTO if the producer wrote a corrupt length or head (the ring is then
 * unusable). Consumer process only. */
int shm_ring_peek(struct shm_ring_view *v, const void **msg, uint32_t *len);

/* Release the record shm_ring_peek() returned (without a peek, the one it would return;
 * nothing when empty or corrupt). Consumer only. */
void shm_ring_pop(struct shm_ring_view *v);

/* Whether a peek would find a record. Either side. */
int shm_ring_empty(const struct shm_ring_view *v);

#endif
