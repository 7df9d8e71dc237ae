/* The worker's scheduler loop (DESIGN "The scheduler, in each worker"): reads JOB and CANCEL
 * records from the front, admits jobs within the prefill budget, runs one decode_batch per
 * iteration over every running sequence, samples, and sends STARTED, TOKEN, DONE and FAILED
 * back. Single-threaded; everything it needs is allocated by loop_create. */
#ifndef LOOP_H
#define LOOP_H

#include <signal.h>
#include <stdint.h>

#include "shm_region.h"
#include "model.h"

struct loop_opts {
    uint32_t max_prefill_tokens; /* prompt tokens between two decode steps; 0: 512 */
    uint32_t max_waiting;        /* jobs held beyond the running ones; 0: 2 * slots + 8 */
    int idle_timeout_ms;         /* longest idle sleep between checks of stop; 0: 1000 */
    /* The model's vocabulary, for grammar-constrained jobs (read at loop_create only);
     * NULL: a job with a grammar fails. */
    const struct tokenizer *tok;
};

struct loop;
struct tokenizer;

/* A loop over model m (borrowed, outlives the loop) and region reg (borrowed): it consumes
 * reg->to_worker, sleeping on wake_fd, and produces reg->to_front, writing notify_fd when
 * the front sleeps. Sets m->heartbeat. Creates its io_uring waiter here (after fork), or
 * falls back to poll() where io_uring is unavailable. Returns NULL with *err = -errno. */
struct loop *loop_create(struct model *m, struct shm_region *reg, int wake_fd, int notify_fd,
                         const struct loop_opts *o, int *err);

/* Serve until *stop becomes non-zero (checked every iteration, after every idle sleep of at
 * most idle_timeout_ms, and while waiting for room in the ring; write wake_fd to cut a
 * sleep short). Jobs still held then get FAILED "the worker is stopping", as far as the ring
 * has room. Returns 0 when stopped, or -EPROTO when the front's ring is corrupt. */
int loop_run(struct loop *l, volatile sig_atomic_t *stop);

void loop_destroy(struct loop *l);

#endif
