/* Supervision of the worker processes: spawn (fresh region, eventfds, stderr pipe) and attach
 * each one's channel to the worker table (workers.h), reap on SIGCHLD with the cause of a
 * death named (signal or status, the tail of its stderr) and detach the channel, respawn with
 * an exponential backoff, kill a worker whose heartbeat stands still (the watchdog), stop the
 * workers at shutdown, and say how each one is (supervisor_view). It uses the table's narrow
 * interface and hears from it through workers_events; the table never calls it. */
#ifndef SUPERVISOR_H
#define SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct front_model;
struct kiln_config;
struct shm_region_hdr;
struct supervisor;
struct workers;

/* Respawn delays: --restart-backoff-ms (100 by default) doubled per death in a row, at most
 * this; a worker that was READY for SUPERVISOR_HEALTHY_MS before it died starts over. */
#define SUPERVISOR_BACKOFF_MAX_MS 10000
#define SUPERVISOR_HEALTHY_MS     60000
/* Deaths in a row before READY after which a worker is marked failed: requests no longer
 * wait for it, and it is retried only every SUPERVISOR_BACKOFF_MAX_MS. */
#define SUPERVISOR_MAX_START_FAILURES 5

/* A worker process's life as the front sees it. */
enum worker_life {
    WORKER_LIFE_STARTING = 0, /* spawned; model loading (its region not READY yet) */
    WORKER_LIFE_READY,        /* its region said READY */
    WORKER_LIFE_BACKOFF,      /* dead; respawns when its backoff timer fires */
    WORKER_LIFE_FAILED,       /* kept failing at start-up; retried at the backoff cap */
    WORKER_LIFE_STOPPED,      /* stopped at shutdown */
};

/* "starting", "ready", "backoff", "failed", "stopped". */
const char *worker_life_name(enum worker_life l);


/* Start a process of kiln-worker (found beside kiln) for each worker of ws (which must
 * outlive the supervisor), attached to it: the worker's model (its path and context) with
 * cfg->threads. Returns NULL with a message logged. */
struct supervisor *supervisor_create(struct event_base *base, const struct kiln_config *cfg,
                                     struct workers *ws);

/* ---- for a reload's rolling restart (roll.h) ---- */

/* One more worker at the end of the table running model with threads, spawned. Returns its
 * index, or -errno (the table is full, out of memory, shutting down). */
int supervisor_add(struct supervisor *s, struct front_model *model, uint32_t threads);

/* Stop worker i (SIGTERM; SIGKILL when kill_now). With respawn its next process starts as
 * soon as it is reaped, with threads and the table's model for it (worker_set_model), and no
 * backoff; else it stays stopped for supervisor_drop_last. Its remaining jobs are lost as in
 * any death, with a cause that names the reload. One without a process is respawned (or
 * stopped) at once. */
void supervisor_retire(struct supervisor *s, uint32_t i, bool respawn, uint32_t threads,
                       bool kill_now);

/* Free the last worker, stopped by supervisor_retire without respawn and reaped (and its
 * entry in the table). */
void supervisor_drop_last(struct supervisor *s);

/* Whether a worker of model runs or will run again (starting, ready or in backoff): when none
 * does, a request tokenized for it can never run (a reload replaced it). */
bool supervisor_model_hope(struct supervisor *s, const struct front_model *model);

/* SIGTERM every worker, wait up to timeout_ms (0: SIGKILL at once), SIGKILL the rest, reap,
 * free. The loop is not run: for the end of main. NULL is fine. */
void supervisor_destroy(struct supervisor *s, int timeout_ms);

/* Shutdown, first step: respawn nothing more; supervisor_draining() says so, and the queue
 * takes no new requests. Running and queued jobs go on. */
void supervisor_drain(struct supervisor *s);
bool supervisor_draining(const struct supervisor *s);

/* Second step: SIGTERM every worker, SIGKILL those still there after grace_ms, and call
 * done(arg) from the loop once every one is reaped (at once if none runs). Their remaining
 * jobs are lost as in any death. */
void supervisor_stop(struct supervisor *s, int grace_ms, void (*done)(void *arg), void *arg);

/* SIGKILL every worker now (a second signal); supervisor_destroy reaps them. */
void supervisor_kill_all(struct supervisor *s);

/* Whether any worker runs or will run again (starting, ready or in backoff). */
bool supervisor_any_hope(struct supervisor *s);

/* Milliseconds until a worker may serve: 0 when one is ready or starting, else the time to
 * the next respawn attempt; -1 when none is planned (shutting down, or no worker). */
int64_t supervisor_retry_after_ms(struct supervisor *s);

/* How often an idle worker beats: a quarter of --watchdog-ms, in [10, 1000] ms. */
uint32_t supervisor_heartbeat_ms(const struct kiln_config *c);

/* One worker as /health and /metrics show it: plain values, valid until the loop runs on. */
struct worker_view {
    uint32_t id;
    enum worker_life life; /* a failed worker's new attempt reads FAILED until it is ready */
    bool loading;          /* a process runs and loads its model (even a failed one's retry) */
    bool serving;          /* ready and trusted: takes jobs */
    long pid;              /* 0 when no process runs */
    uint32_t running;      /* jobs it holds */
    const struct shm_region_hdr *hdr; /* its live region (counters); NULL with no process */
    uint64_t restarts;     /* processes spawned after the first */
    int64_t restart_in_ms; /* in backoff or failed: until the next attempt; else -1 */
    const char *last_exit; /* "was killed by signal 11 (Segmentation fault)"; "" if none */
    int64_t last_exit_at;  /* unix milliseconds of last_exit; 0 if none */
    const char *last_error; /* the last line it wrote to stderr before it died; "" if none */
    const char *model;     /* the name of the model it runs */
    uint32_t threads;      /* its --threads (0: the worker's default) */
    uint64_t spawns;       /* processes spawned */
    uint64_t readies;      /* processes that became READY */
    bool draining;         /* a reload drains or stops it */
    bool reload_start;     /* loading a process a reload started (the roll's extra worker, or
                            * one it restarts): capacity a reload adds, not capacity lost */
    uint32_t watchdog_ms;  /* the --watchdog-ms its process was started under */
};

/* The workers now, for /health, /metrics and the service status. */
struct supervisor_view {
    bool draining;
    uint32_t n;
    struct worker_view w[]; /* n of them */
};

/* The state /health and /metrics show for v: its life's name, or "draining" for a ready
 * worker a reload drains (no new jobs; its running ones finish). */
const char *worker_view_state(const struct worker_view *v);

/* A snapshot of every worker, malloc'd (free() it), or NULL when out of memory. */
struct supervisor_view *supervisor_view(struct supervisor *s);

#endif
