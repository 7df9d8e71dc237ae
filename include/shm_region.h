/* One worker's shared memory: a memfd the front creates (and maps) before it spawns the
 * worker, holding a header (state, heartbeat, counters, timing histograms), the worker's
 * parameters (shm_params.h, written before fork, read once by the worker) and two rings,
 * front->worker (JOB, CANCEL) and worker->front (STARTED, TOKEN, DONE, FAILED). A new
 * region is made for every worker process, so a restarted worker never sees its
 * predecessor's records.
 *
 *   +----------------+ 0
 *   | shm_region_hdr |
 *   +----------------+ hdr.params_off      (64-aligned)
 *   | parameters     |  hdr.params_size bytes (0: none)
 *   +----------------+ hdr.to_worker_off   (64-aligned)
 *   | shm_ring       |  front -> worker
 *   +----------------+ hdr.to_front_off    (64-aligned)
 *   | shm_ring       |  worker -> front
 *   +----------------+ hdr.size
 */
#ifndef SHM_REGION_H
#define SHM_REGION_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "hist.h"
#include "shm_ring.h"

#define SHM_REGION_MAGIC   0x6b6c6e72u /* "klnr" */
#define SHM_REGION_VERSION 3u

enum worker_state {
    WORKER_STATE_STARTING = 0, /* loading the model */
    WORKER_STATE_READY = 1,    /* serving */
    WORKER_STATE_STOPPING = 2, /* told to exit, finishing */
};

/* magic, version, size, *_off, *_size: written by the front before the worker exists, never
 *   again.
 * state, heartbeat, running, waiting, hists, n_*: written only by the worker (relaxed or
 *   release; the front reads them for /health, /metrics and the watchdog, and tolerates a
 *   value one update old).
 * heartbeat moves at least once per scheduler iteration and during long prefills. */
struct shm_region_hdr {
    uint32_t magic, version;
    uint64_t size;
    uint64_t to_worker_off, to_worker_size;
    uint64_t to_front_off, to_front_size;
    uint64_t params_off, params_size;
    _Atomic uint32_t state;     /* enum worker_state */
    _Atomic uint64_t heartbeat; /* progress counter */
    _Atomic uint32_t running;   /* sequences running */
    _Atomic uint32_t waiting;   /* jobs received, not yet admitted */
    _Atomic uint64_t n_prefills, n_prefill_tokens, n_decode_steps, n_decoded_tokens;
    struct hist prefill;     /* one batched prefill (the prompts admitted together) */
    struct hist decode_step; /* one decode_batch call */
    /* The KV cache (worker/kv_cache.h; all 0 for a model without one): blocks in the pool,
     * held by running sequences, held by none but kept for reuse; prompt tokens linked
     * instead of computed; cached blocks reused for other tokens. */
    _Atomic uint32_t kv_blocks, kv_used, kv_cached;
    _Atomic uint64_t n_prompt_reused, n_kv_evictions;
};

/* A region mapped in this process. The rings are this process's views (shm_ring.h): their
 * sizes come from create's arguments or attach's checks, never again from the header. */
struct shm_region {
    int fd;
    size_t size;
    struct shm_region_hdr *hdr;
    struct shm_ring_view to_worker; /* .shared NULL when not mapped */
    struct shm_ring_view to_front;
    uint64_t params_off, params_size; /* the parameters area, as created or checked */
};

/* Create a memfd (close-on-exec) of a header and two rings of the given data sizes (powers
 * of two), map it and initialise it. Returns 0 or -errno; on error nothing is left open. */
int shm_region_create(struct shm_region *reg, uint64_t to_worker_size, uint64_t to_front_size);

/* shm_region_create with a parameters area of params_size bytes (at most 16 MiB), zeroed,
 * for the front to fill (shm_region_params) before fork. */
int shm_region_create_params(struct shm_region *reg, uint64_t to_worker_size,
                             uint64_t to_front_size, uint64_t params_size);

/* The parameters area of a mapped region and its size in *size (0 and NULL: none). */
void *shm_region_params(const struct shm_region *reg, size_t *size);

/* Map a region from an inherited fd and check its header, parameters area and rings (magic,
 * version, sizes within the file, no overlap). Returns 0 or -errno (-EPROTO for a bad
 * layout). Takes ownership of fd. */
int shm_region_attach(struct shm_region *reg, int fd);

/* Unmap and close. Safe on a zeroed or already-destroyed region. */
void shm_region_destroy(struct shm_region *reg);

#endif
