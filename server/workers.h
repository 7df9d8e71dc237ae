/* The front's worker processes: send each records (JOB, CANCEL) with one wake per loop turn,
 * read its records from the libevent loop and route them to their job's owner. Knows nothing
 * of HTTP: a job's owner is an opaque pointer handed back with each of its records. Spawning,
 * reaping, respawning, the watchdog and shutdown are supervisor.c's (supervisor.h). */
#ifndef WORKERS_H
#define WORKERS_H

#include "prefix_index.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"
#include "shm_region.h"

struct event_base;
struct event;
struct kiln_config;
struct workers;

/* The front's view of a worker process (the region's hdr->state says whether it loaded). */
enum worker_life {
    WORKER_LIFE_STARTING = 0, /* spawned; model loading (hdr->state not READY yet) */
    WORKER_LIFE_READY,        /* hdr->state READY */
    WORKER_LIFE_BACKOFF,      /* dead; respawns when its backoff timer fires */
    WORKER_LIFE_FAILED,       /* kept failing at start-up; not respawned */
    WORKER_LIFE_STOPPED,      /* stopped at shutdown */
};

/* One job slot: the owner of the job whose final record has not come back yet. */
struct worker_slot {
    uint64_t req_id; /* 0: free */
    void *owner;
    uint64_t seq;        /* submission order: lost jobs are queued again in this order */
    bool cancel_pending; /* CANCEL not yet in the ring (it was full) */
    bool pause_want, pause_sent; /* paused as the front wants it / as last sent */
};

/* Bytes of a worker's stderr kept for the cause of its death. */
#define WORKER_ERR_TAIL 2048
/* Longest stderr line held back while its end has not come (longer ones go out in parts). */
#define WORKER_ERR_LINE 1024

struct worker {
    struct workers *ws;
    uint32_t id;
    pid_t pid;               /* 0 when no process runs (it was reaped) */
    enum worker_life life;
    struct shm_region reg;   /* zeroed when no process runs */
    int wake_fd, notify_fd;  /* -1 when no process runs */
    struct event *ev_notify; /* notify_fd readable */
    struct event *ev_respawn;
    struct worker_slot *slots; /* max_sequences of them */
    uint32_t used;           /* slots taken */
    bool wake_pending;       /* records pushed since the last wake */
    bool poisoned;           /* sent a malformed record: killed, no more reading */
    uint32_t start_failures; /* deaths in a row before READY */
    uint32_t deaths_in_row;  /* deaths since the last minute of health: the backoff's exponent */
    uint32_t n_spawns;
    uint64_t n_records;
    struct prefix_index *prefix; /* the block keys its KV cache reported; cleared at death */

    /* supervision (supervisor.c) */
    int err_fd;              /* read end of the process's stderr pipe; -1 when none */
    struct event *ev_err;
    char err_tail[WORKER_ERR_TAIL]; /* the last bytes it wrote to stderr (not NUL-terminated) */
    uint32_t err_tail_len;
    char err_line[WORKER_ERR_LINE]; /* a line being forwarded, its end not read yet */
    uint32_t err_line_len;
    int64_t ready_at_ms;     /* monotonic; when it was seen READY */
    int64_t respawn_at_ms;   /* monotonic; when a worker in backoff respawns */
    uint64_t hb_last;        /* watchdog: the heartbeat last seen ... */
    int64_t hb_at_ms;        /* ... and since when (monotonic) */
    bool watchdog_killed;    /* SIGKILLed for making no progress */
    char last_exit[160];     /* "was killed by signal 11 (Segmentation fault)"; "" if none */
    int64_t last_exit_at;    /* unix milliseconds of last_exit */
    char last_error[256];    /* the last line it wrote to stderr before it died; "" if none */
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

/* Spawn cfg->workers processes of exe_dir/kiln-worker. Returns NULL with a message logged. */
struct workers *workers_create(struct event_base *base, const struct kiln_config *cfg,
                               uint32_t max_context, const struct workers_ops *ops, void *ctx);
/* SIGTERM every worker, wait up to timeout_ms, SIGKILL the rest, reap, free. NULL is fine. */
void workers_destroy(struct workers *ws, int timeout_ms);

uint32_t workers_count(const struct workers *ws);
struct worker *workers_get(struct workers *ws, uint32_t i);

/* Refresh w->life from its region and return it. */
enum worker_life worker_life_get(struct worker *w);
const char *worker_life_name(enum worker_life l);

/* The READY worker with the fewest taken slots and at least one free, or NULL. */
struct worker *workers_pick(struct workers *ws);

/* workers_pick among those whose bit (1 << index in ws->w) is clear in skip: a worker whose
 * ring turned a job away is skipped for the rest of a dispatch pass. */
struct worker *workers_pick_skip(struct workers *ws, uint64_t skip);

/* workers_pick_skip for a job of prompt (n tokens), by the routing rule of prefix_index.h;
 * *why says which rule chose (unset when NULL is returned). */
struct worker *workers_pick_for(struct workers *ws, uint64_t skip, const uint32_t *prompt,
                                uint32_t n, enum prefix_route_reason *why);

/* Whether any worker runs or will run again (starting, ready or in backoff). */
bool workers_any_hope(struct workers *ws);

/* Whether any worker process runs and can take jobs now (starting or ready): when none can
 * (all in backoff or failed), new requests are refused rather than queued. */
bool workers_any_alive(struct workers *ws);

/* Whether kiln is shutting down (supervisor_drain): no new requests are taken. */
bool workers_draining(const struct workers *ws);

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

/* For supervisor.c: the libevent callback of w's notify eventfd (arg is w): drains its ring. */
void workers_on_notify(int fd, short what, void *arg);

/* For supervisor.c: route every record still in w's ring to its owner (the process is dead,
 * so nothing more comes; a poisoned worker's ring is not read). */
void worker_drain_dead(struct worker *w);

/* For supervisor.c: release w's remaining slots and hand their owners to on_job_lost,
 * newest job first. */
void worker_lose_jobs(struct worker *w, const char *cause);

#endif
