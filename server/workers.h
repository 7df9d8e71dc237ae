/* The worker table: the front's side of each worker's channel (its shared region and
 * eventfds), its job slots, and the records both ways: records sent with one wake per loop
 * turn, records read from the libevent loop, validated and routed to their job's owner, and
 * the choice of a worker for a job. Knows nothing of HTTP (a job's owner is an opaque pointer
 * handed back with each of its records) nor of processes: the supervisor (supervisor.h)
 * spawns them, attaches each one's channel here and detaches it when the process is gone;
 * this table calls nothing of the supervisor's and tells it what it sees through
 * struct workers_events. */
#ifndef WORKERS_H
#define WORKERS_H

#include "prefix_index.h"
#include <stdbool.h>
#include <stdint.h>

#include "proto.h"
#include "shm_region.h"

struct event_base;
struct event;
struct kiln_config;
struct workers;
struct front_model;

/* One job slot: the owner of the job whose final record has not come back yet. */
struct worker_slot {
    uint64_t req_id; /* 0: free */
    void *owner;
    uint64_t seq;        /* submission order: lost jobs are queued again in this order */
    bool cancel_pending; /* CANCEL not yet in the ring (it was full) */
    bool pause_want, pause_sent; /* paused as the front wants it / as last sent */
};

/* One worker of the table. The fields are read-only outside workers.c. */
struct worker {
    struct workers *ws;
    uint32_t id;
    bool attached;           /* a process's channel is open (worker_attach) */
    bool ready;              /* its region said READY (and the event was raised) */
    bool poisoned;           /* sent a malformed record: no more reading, no more jobs */
    struct shm_region reg;   /* zeroed while detached */
    int wake_fd, notify_fd;  /* -1 while detached */
    struct event *ev_notify; /* notify_fd readable */
    struct worker_slot *slots; /* max_sequences of them */
    uint32_t used;           /* slots taken */
    bool wake_pending;       /* records pushed since the last wake */
    uint64_t n_records;
    struct prefix_index *prefix; /* the block keys its KV cache reported; cleared at detach */
    struct front_model *model; /* the model generation it runs (one reference): jobs of it only */
    bool retiring;           /* a reload drains it: no new jobs (worker_set_retiring) */
};

/* Callbacks into the request layer; ctx is workers_create's. */
struct workers_ops {
    /* A validated record (STARTED, TOKEN, DONE, FAILED) for owner's job. For DONE and FAILED
     * the slot was released just before the call. */
    void (*on_record)(void *ctx, struct worker *w, void *owner, const struct proto_msg *m);
    /* The worker died with owner's job on it (slot already released); cause names why. Jobs
     * of one death come newest first, so a caller that puts each not-started one back at the
     * head of its queue keeps their order. */
    void (*on_job_lost)(void *ctx, struct worker *w, void *owner, const char *cause);
    /* Slots may have come free or a worker came up: a chance to dispatch. */
    void (*on_capacity)(void *ctx);
};

/* What the table tells the layer that owns the processes (workers_subscribe). */
struct workers_events {
    /* w's region says READY for the first time since its attach. */
    void (*ready)(void *ctx, struct worker *w);
    /* w sent what cannot be trusted (why says what): its ring is no longer read and it takes
     * no jobs; its process should be killed, and detached once reaped. */
    void (*poisoned)(void *ctx, struct worker *w, const char *why);
};

/* A table of cfg->workers workers running model, all detached (room for CONFIG_MAX_WORKERS:
 * a reload may add some). Returns NULL when out of memory. */
struct workers *workers_create(struct event_base *base, const struct kiln_config *cfg,
                               struct front_model *model, const struct workers_ops *ops,
                               void *ctx);

/* A reload: one more worker (detached) at the end, to run model. Returns it, or NULL when
 * the table is full or out of memory. */
struct worker *workers_add(struct workers *ws, struct front_model *model);
/* A reload: free the last worker, which must be detached. */
void workers_drop_last(struct workers *ws);
/* A reload: w runs model from its next process on (takes a reference, drops the old). */
void worker_set_model(struct worker *w, struct front_model *model);
/* A reload drains w: it takes no new jobs while retiring. */
void worker_set_retiring(struct worker *w, bool retiring);
/* Close every channel and free. No callback is made. NULL is fine. */
void workers_destroy(struct workers *ws);

/* Subscribe to the table's events (one subscriber). */
void workers_subscribe(struct workers *ws, const struct workers_events *ev, void *ctx);

uint32_t workers_count(const struct workers *ws);
struct worker *workers_get(struct workers *ws, uint32_t i);

/* Give w a new process's channel: its region (moved: w owns its mapping and fd from now on)
 * and eventfds (owned too). w starts reading its records; it takes jobs once its region
 * says READY. Returns 0, or -errno with nothing taken. */
int worker_attach(struct worker *w, struct shm_region *reg, int wake_fd, int notify_fd);

/* w's process is gone: the records it sent before it died are routed (a DONE completes its
 * job; a poisoned worker's ring is not read), its remaining jobs are handed to on_job_lost
 * with cause, newest first, its channel is closed, and on_capacity is called. */
void worker_detach(struct worker *w, const char *cause);

/* Whether w's region says READY (raising the ready event the first time). */
bool worker_is_ready(struct worker *w);

/* Whether w is attached, not poisoned, and so may be given jobs once ready. */
bool worker_alive(struct worker *w);

/* A chance to dispatch (on_capacity), e.g. when a worker was attached. */
void workers_kick(struct workers *ws);

/* The READY worker with the fewest taken slots and at least one free, or NULL. */
struct worker *workers_pick(struct workers *ws);

/* workers_pick among those whose bit (1 << index in ws->w) is clear in skip: a worker whose
 * ring turned a job away is skipped for the rest of a dispatch pass. */
struct worker *workers_pick_skip(struct workers *ws, uint64_t skip);

/* workers_pick_skip among the workers of model, for a job of prompt (n tokens), by the
 * routing rule of prefix_index.h; *why says which rule chose (unset when NULL is returned). */
struct worker *workers_pick_for(struct workers *ws, uint64_t skip,
                                const struct front_model *model, const uint32_t *prompt,
                                uint32_t n, enum prefix_route_reason *why);

/* Whether any worker is attached and can take jobs now or once it is ready: when none can
 * (all dead, in backoff or failed), new requests are refused rather than queued. */
bool workers_any_alive(struct workers *ws);

/* Whether any worker is READY. */
bool workers_any_ready(struct workers *ws);

/* Take a slot of w for req_id (owner is handed back with its records) and send its JOB.
 * Returns 0, -EBUSY with no free slot, -EAGAIN when the ring is full (retry later), or
 * -errno; on error no slot is taken. */
int worker_submit(struct worker *w, const struct proto_msg *job, void *owner);

/* Send CANCEL for req_id's job (once; a full ring is retried at the next wake). Returns 0
 * or -ENOENT when w holds no such job. */
int worker_cancel(struct worker *w, uint64_t req_id);

/* Ask w to pause (or resume) req_id's running sequence: its client reads slower than it is
 * generated. Sent once per change (a full ring is retried at the next wake). Returns 0 or
 * -ENOENT when w holds no such job. */
int worker_pause(struct worker *w, uint64_t req_id, bool pause);

#endif
