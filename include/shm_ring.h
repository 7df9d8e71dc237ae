/* A single-producer single-consumer ring of byte records in shared memory. It moves bytes
 * only: what the records mean is proto.h's business, waking the other side notify.h's. */
#ifndef SHM_RING_H
#define SHM_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_RING_MAGIC   0x6b726e67u /* "krng" */
#define SHM_RING_VERSION 1u

/* One producer process, one consumer process.
 *  head: written only by the producer (release), read by the consumer (acquire).
 *  tail: written only by the consumer (release), read by the producer (acquire).
 *  consumer_waiting: set by the consumer before it sleeps, read by the producer (seq_cst);
 *    the producer clears it when it writes the eventfd, so that wake-ups merge.
 *  magic, version, size: set before fork, never change.
 * Bytes in [tail, head) belong to the consumer; the rest belong to the producer.
 * A record is [u32 len][u32 rsvd][payload], padded to 8 bytes; a record that would wrap
 * leaves a PAD marker (len 0xffffffff) and starts again at offset 0, so every payload is
 * contiguous and can be decoded in place. */
struct shm_ring {
    uint32_t magic, version;
    uint64_t size; /* data bytes, a power of two */
    alignas(64) _Atomic uint64_t head;
    alignas(64) _Atomic uint64_t tail;
    alignas(64) _Atomic uint32_t consumer_waiting;
    alignas(64) unsigned char data[];
};

/* Bytes a ring with size data bytes takes, header included. */
size_t shm_ring_footprint(uint64_t size);

/* Set up a ring over memory of shm_ring_footprint(size) bytes. size must be a power of two
 * and at least 64. Returns 0 or -EINVAL. Before either side uses it. */
int shm_ring_init(struct shm_ring *r, uint64_t size);

/* Check that memory shared by another process holds a ring of expected_size data bytes.
 * Returns 0 or -EPROTO. */
int shm_ring_check(const struct shm_ring *r, uint64_t expected_size);

/* The largest payload a push can ever take. */
uint32_t shm_ring_max_record(const struct shm_ring *r);

/* Append one record. Returns 0, -EAGAIN if full (retry after a wake), or -EMSGSIZE if len
 * can never fit. Producer process only. */
int shm_ring_push(struct shm_ring *r, const void *msg, uint32_t len);

/* Reserve room for a record of up to len bytes and return where to write it, or NULL with
 * *err set to -EAGAIN or -EMSGSIZE. The record is invisible until shm_ring_commit(r, used)
 * with used <= len. Producer process only. */
void *shm_ring_reserve(struct shm_ring *r, uint32_t len, int *err);
void shm_ring_commit(struct shm_ring *r, uint32_t used);

/* The oldest record: *msg points into the ring and stays valid until shm_ring_pop().
 * Returns 0, -EAGAIN if empty, or -EPROTO if the producer wrote a corrupt length (the ring
 * is then unusable). Consumer process only. */
int shm_ring_peek(struct shm_ring *r, const void **msg, uint32_t *len);

/* Release the record shm_ring_peek() returned. Consumer process only. */
void shm_ring_pop(struct shm_ring *r);

/* Whether a peek would find a record. Either side. */
int shm_ring_empty(struct shm_ring *r);

#endif
