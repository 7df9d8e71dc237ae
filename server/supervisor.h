/* Supervision of the worker processes: spawn (fresh region, eventfds, stderr pipe), reap on
 * SIGCHLD, name the cause of a death (signal or status, the tail of its stderr), respawn with
 * an exponential backoff, kill a busy worker whose heartbeat stands still (the watchdog),
 * report it all on /health, and stop the workers at shutdown. The record traffic is
 * workers.c's. */
#ifndef SUPERVISOR_H
#define SUPERVISOR_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "workers.h"

/* Respawn delays: --restart-backoff-ms (100 by default) doubled per death in a row, at most
 * this; a worker that was READY for SUPERVISOR_HEALTHY_MS before it died starts over. */
#define SUPERVISOR_BACKOFF_MAX_MS 10000
#define SUPERVISOR_HEALTHY_MS     60000
/* Deaths in a row before READY after which a worker is marked failed: requests no longer
 * wait for it, and it is retried only every SUPERVISOR_BACKOFF_MAX_MS. */
#define SUPERVISOR_MAX_START_FAILURES 5

struct workers_ops;

/* Shared by workers.c and supervisor.c only; everyone else sees an opaque struct workers. */
struct workers {
    struct event_base *base;
    const struct kiln_config *cfg;
    uint32_t max_context;
    const struct workers_ops *ops;
    void *ctx;
    char exe[PATH_MAX];
    struct event *ev_sigchld;
    struct event *ev_flush;    /* wakes workers once per loop turn */
    struct event *ev_watchdog; /* pending only while some worker has work */
    struct event *ev_stop;     /* the grace period of a stop: SIGKILL when it ends */
    bool flush_pending;
    bool draining;             /* shutting down: no respawns, no new requests */
    bool stopping;             /* the workers were told to exit */
    void (*on_stopped)(void *arg);
    void *on_stopped_arg;
    unsigned char *scratch;    /* WIRE_MAX_MSG bytes to encode into */
    uint64_t *keys;            /* (WIRE_MAX_PROMPT / KV_HASH_BLOCK) a prompt's block keys */
    struct proto_decoder *decoder; /* the workers' records: copied out of the ring, decoded */
    uint64_t next_seq;         /* submission counter for the slots */
    uint32_t n;
    struct worker w[];
};

/* ---- for workers.c ---- */

/* Set up ws's supervision (SIGCHLD event, timers, the kiln-worker path) before the first
 * spawn. Returns 0 or -errno with a message logged. */
int supervisor_init(struct workers *ws);
/* Set up one worker's timers. Returns 0 or -ENOMEM. */
int supervisor_init_worker(struct worker *w);
/* Start w's process. Returns 0 or -errno (logged); nothing is left open on error. */
int supervisor_spawn(struct worker *w);
/* w just took its first job after being idle: watch its heartbeat from now on. */
void supervisor_work_began(struct worker *w);
/* w's region says READY for the first time since its spawn. */
void supervisor_ready(struct worker *w);
/* Kill a worker whose ring can no longer be trusted; its reaping does the rest. */
void supervisor_poison(struct worker *w, const char *why);
/* Free everything of ws's supervision; every process must be gone. */
void supervisor_free(struct workers *ws);
/* Close w's fds, region and events of its last process (kept: counters, last exit). */
void supervisor_close_worker(struct worker *w);

/* ---- for the front ---- */

/* Shutdown, first step: respawn nothing more; workers_draining() says so, and the queue
 * takes no new requests. Running and queued jobs go on. */
void supervisor_drain(struct workers *ws);

/* Second step: SIGTERM every worker, SIGKILL those still there after grace_ms, and call
 * done(arg) from the loop once every one is reaped (at once if none runs). Their remaining
 * jobs are lost as in any death. */
void supervisor_stop(struct workers *ws, int grace_ms, void (*done)(void *arg), void *arg);

/* SIGKILL every worker now (a second signal); workers_destroy reaps them. */
void supervisor_kill_all(struct workers *ws);

/* /health's body, minus the model and the front's queue: {"status", "running", "workers":
 * [{"id", "state", "pid" (null when none), "running" (jobs it holds), "waiting" (received,
 * not admitted), "active" (sequences generating), "restarts",
 * "restart_in_ms" (in backoff), "last_exit", "last_exit_at" (ISO 8601 UTC), "last_error"}]}.
 * status: "draining" while shutting down, "ok" when every worker is ready, "degraded" when
 * some are, else "unavailable"; *http_status is 200 for ok/degraded, else 503. Without
 * details (a caller without the key, when keys are set) only {"status"}: "ok" when a worker
 * can serve, "loading" while one starts and none can, "draining", else "failed". Returns
 * NULL when out of memory. */
/* How often an idle worker beats (--heartbeat-ms): a quarter of --watchdog-ms, in
 * [10, 1000] ms. */
uint32_t supervisor_heartbeat_ms(const struct kiln_config *c);

json_t *supervisor_health(struct workers *ws, bool details, int *http_status);

/* The state /health and the metrics show for w: its life's name, except that a failed
 * worker's new attempt reads "failed" until it is ready. */
const char *supervisor_state_name(struct worker *w);

/* Milliseconds until a worker may serve: 0 when one is ready or starting, else the time to
 * the next respawn attempt; -1 when none is planned (shutting down, or no worker). */
int64_t supervisor_retry_after_ms(struct workers *ws);

#endif
