/* The lives of the worker processes (supervisor.h): spawn (region, eventfds, stderr pipe,
 * fork+exec) and attach to the table, their stderr forwarded and its tail kept
 * (worker_stderr.c), reaping on SIGCHLD with the cause named and detach, respawn with an
 * exponential backoff, the heartbeat watchdog, the shutdown stop, the view /health and
 * /metrics render. Records and job slots are the table's (workers.c). */
#include "supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "config.h"
#include "front_model.h"
#include "log.h"
#include "notify.h"
#include "shm_params.h"
#include "shm_region.h"
#include "worker_stderr.h"
#include "workers.h"

/* Ring sizes: the worker-bound ring holds a few maximal JOBs (WIRE_MAX_MSG each); the
 * front-bound one about 4,600 TOKEN records, which the front drains every turn. It is kept
 * small because it is what a worker may have sent for a stream before the front's PAUSE
 * reaches it: each record becomes an SSE frame of ~170 bytes in the client's buffer. */
#define TO_WORKER_RING (UINT64_C(4) << 20)
#define TO_FRONT_RING  (UINT64_C(64) << 10)

/* The fds a worker finds its region and eventfds at; its stderr is the pipe. */
#define CHILD_SHM_FD    3
#define CHILD_WAKE_FD   4
#define CHILD_NOTIFY_FD 5

/* Lines of a dead worker's stderr quoted in the log line of its death. */
#define CAUSE_LINES 3

/* One worker's process (the worker of the table with the same index). */
struct proc {
    struct supervisor *s;
    struct worker *w;
    pid_t pid; /* 0 when no process runs (it was reaped) */
    enum worker_life life;
    struct event *ev_respawn;
    struct worker_stderr err; /* its stderr: forwarded, the tail kept */
    uint32_t start_failures; /* deaths in a row before READY */
    uint32_t deaths_in_row;  /* deaths since the last minute of health: the backoff's exponent */
    uint32_t n_spawns;
    int64_t ready_at_ms;     /* monotonic; when it was seen READY */
    int64_t respawn_at_ms;   /* monotonic; when a worker in backoff respawns */
    uint64_t hb_last;        /* watchdog: the heartbeat last seen ... */
    int64_t hb_at_ms;        /* ... and since when (monotonic) */
    bool watchdog_killed;    /* SIGKILLed for making no progress */
    char last_exit[160];     /* "was killed by signal 11 (Segmentation fault)"; "" if none */
    int64_t last_exit_at;    /* unix milliseconds of last_exit */
    char last_error[256];    /* the last line it wrote to stderr before it died; "" if none */
    /* a reload (supervisor_retire) */
    uint32_t threads;        /* its --threads (0: the worker's default) */
    uint64_t n_ready;        /* processes of it that became READY */
    bool replacing;          /* stopped by a reload: respawned at once when reaped */
    bool removing;           /* stopped by a reload: not respawned (supervisor_drop_last) */
    bool by_reload;          /* its process was started by a reload and is not READY yet */
    uint32_t watchdog_ms;    /* the --watchdog-ms its process was started under (0: none) */
};

struct supervisor {
    struct event_base *base;
    const struct kiln_config *cfg;
    struct workers *ws;
    char exe[PATH_MAX];
    struct event *ev_sigchld;
    struct event *ev_watchdog; /* pending while some worker process lives */
    struct event *ev_stop;     /* the grace period of a stop: SIGKILL when it ends */
    bool draining;             /* shutting down: no respawns, no new requests */
    bool stopping;             /* the workers were told to exit */
    void (*on_stopped)(void *arg);
    void *on_stopped_arg;
    uint32_t n;                /* as many as the table's workers */
    struct proc p[];           /* room for CONFIG_MAX_WORKERS */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *worker_view_state(const struct worker_view *v)
{
    return v->draining && v->life == WORKER_LIFE_READY ? "draining" : worker_life_name(v->life);
}

const char *worker_life_name(enum worker_life l)
{
    switch (l) {
    case WORKER_LIFE_STARTING:
        return "starting";
    case WORKER_LIFE_READY:
        return "ready";
    case WORKER_LIFE_BACKOFF:
        return "backoff";
    case WORKER_LIFE_FAILED:
        return "failed";
    case WORKER_LIFE_STOPPED:
        return "stopped";
    }
    return "unknown";
}

/* p's life now: the table is asked whether a starting worker became READY (its event sets
 * p->life). */
static enum worker_life life_get(struct proc *p)
{
    if (p->life == WORKER_LIFE_STARTING)
        (void)worker_is_ready(p->w);
    return p->life;
}

/* ---- the watchdog ---- */

static uint32_t heartbeat_of(uint32_t watchdog_ms)
{
    uint32_t ms = watchdog_ms / 4;
    return ms < 10 ? 10 : ms > 1000 ? 1000 : ms;
}

uint32_t supervisor_heartbeat_ms(const struct kiln_config *c)
{
    return heartbeat_of(c->watchdog_ms);
}

/* Each process is watched with the --watchdog-ms it was started under (it beats at that
 * one's pace), so a reload that changes it applies it by restarting the workers (roll.c). */
static void watchdog_arm(struct supervisor *s)
{
    uint32_t wd = s->cfg->watchdog_ms;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->p[i].pid > 0 && s->p[i].watchdog_ms && (!wd || s->p[i].watchdog_ms < wd))
            wd = s->p[i].watchdog_ms;
    uint32_t ms = heartbeat_of(wd);
    if (!wd || evtimer_pending(s->ev_watchdog, NULL))
        return;
    struct timeval tv = {ms / 1000, (long)(ms % 1000) * 1000};
    evtimer_add(s->ev_watchdog, &tv);
}

/* Watch p's heartbeat from now on. */
static void watch_from_now(struct proc *p)
{
    const struct shm_region_hdr *hdr = p->w->reg.hdr;
    p->hb_at_ms = mono_ms();
    p->hb_last = hdr ? atomic_load_explicit(&hdr->heartbeat, memory_order_relaxed) : 0;
    watchdog_arm(p->s);
}

/* Runs while any worker process lives, busy or idle (an idle worker beats every
 * supervisor_heartbeat_ms): a worker stopped or wedged while idle is killed and replaced
 * before work is sent to it. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct supervisor *s = arg;
    int64_t now = mono_ms();
    bool busy = false;
    (void)fd;
    (void)what;
    for (uint32_t i = 0; i < s->n; i++) {
        struct proc *p = &s->p[i];
        struct worker *w = p->w;
        if (p->pid <= 0 || w->poisoned || p->watchdog_killed || !p->watchdog_ms)
            continue;
        busy = true;
        if (life_get(p) != WORKER_LIFE_READY || !w->reg.hdr) {
            p->hb_at_ms = now; /* loading a model is not a hang: count from READY */
            continue;
        }
        uint64_t hb = atomic_load_explicit(&w->reg.hdr->heartbeat, memory_order_relaxed);
        if (hb != p->hb_last) {
            p->hb_last = hb;
            p->hb_at_ms = now;
        } else if (now - p->hb_at_ms >= (int64_t)p->watchdog_ms) {
            log_error("worker %u (pid %ld) made no progress for %lld ms with %u job(s) "
                      "(busy or idle, it beats at least every %u ms); killing it",
                      w->id, (long)p->pid, (long long)(now - p->hb_at_ms), w->used,
                      heartbeat_of(p->watchdog_ms));
            p->watchdog_killed = true;
            (void)kill(p->pid, SIGKILL);
        }
    }
    if (busy)
        watchdog_arm(s);
}

/* ---- spawning ---- */

/* In the child: move fd to a number above the fixed ones, so the dup2s below never clash. */
static int child_lift_fd(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 16);
}

static void child_exec(const char *exe, int shm_fd, int wake_fd, int notify_fd, int err_w,
                       char *const argv[])
{
    int shm = child_lift_fd(shm_fd), wake = child_lift_fd(wake_fd);
    int note = child_lift_fd(notify_fd), err = child_lift_fd(err_w);
    sigset_t none;

    if (shm < 0 || wake < 0 || note < 0 || err < 0)
        _exit(127);
    /* dup2 clears close-on-exec on the new numbers only */
    if (dup2(shm, CHILD_SHM_FD) < 0 || dup2(wake, CHILD_WAKE_FD) < 0 ||
        dup2(note, CHILD_NOTIFY_FD) < 0 || dup2(err, STDERR_FILENO) < 0)
        _exit(127);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    execv(exe, argv);
    dprintf(STDERR_FILENO, "kiln: exec %s failed: %s\n", exe, strerror(errno));
    _exit(127);
}

/* Start p's process and attach its channel to the table. Returns 0 or -errno (logged);
 * nothing is left open on error. */
static int spawn(struct proc *p)
{
    struct supervisor *s = p->s;
    struct worker *w = p->w;
    const struct kiln_config *c = s->cfg;
    struct shm_region reg = {.fd = -1};
    /* the worker's parameters go once, in its region; its command line only finds that */
    struct shm_params prm = {
        .id = w->id,
        .parent_pid = (uint32_t)getpid(), /* it exits if we are gone before its PDEATHSIG */
        .wake_fd = CHILD_WAKE_FD,
        .notify_fd = CHILD_NOTIFY_FD,
        .max_sequences = c->max_sequences,
        .max_prefill_tokens = c->max_prefill_tokens,
        .ctx = w->model->max_context,
        .kv_cache_tokens = w->model->kv_cache_tokens,
        .threads = p->threads,
        .mock_delay_ms = c->mock_delay_ms,
        .mock_load_ms = c->mock_load_ms,
        /* an idle worker beats this often, so the watchdog can tell a stopped one too */
        .heartbeat_ms = c->watchdog_ms ? heartbeat_of(c->watchdog_ms) : 0,
        .mock_faults = c->mock_faults,
        .model = w->model->path,
        .mock_reply = c->mock_reply,
        .mock_tool_reply = c->mock_tool_reply,
    };
    size_t prm_size = shm_params_size(&prm), area_size;
    char a_shm[8];
    char *argv[4];
    int err, err_w = -1, wake_fd = -1, notify_fd = -1, shm_fd;
    pid_t pid;

    p->watchdog_killed = false;
    if (!prm_size) {
        err = -EINVAL;
        log_error("worker %u: a parameter string is longer than %u bytes", w->id,
                  SHM_PARAMS_MAX_STR);
        goto fail;
    }
    if ((err = shm_region_create_params(&reg, TO_WORKER_RING, TO_FRONT_RING, prm_size)) < 0 ||
        (err = shm_params_encode(&prm, shm_region_params(&reg, &area_size), prm_size)) < 0) {
        log_error("worker %u: shared region: %s", w->id, strerror(-err));
        goto fail;
    }
    if ((wake_fd = notify_eventfd()) < 0 || (notify_fd = notify_eventfd()) < 0) {
        err = wake_fd < 0 ? wake_fd : notify_fd;
        log_error("worker %u: eventfd: %s", w->id, strerror(-err));
        goto fail;
    }
    if ((err = worker_stderr_open(&p->err, s->base, &err_w)) < 0) {
        log_error("worker %u: stderr pipe: %s", w->id, strerror(-err));
        goto fail;
    }

    argv[0] = s->exe;
    argv[1] = "--shm-fd";
    argv[2] = a_shm;
    argv[3] = NULL;
    snprintf(a_shm, sizeof(a_shm), "%d", CHILD_SHM_FD);

    /* the table owns the region and eventfds from here; the child inherits their numbers */
    shm_fd = reg.fd;
    if ((err = worker_attach(w, &reg, wake_fd, notify_fd)) < 0)
        goto fail;
    wake_fd = notify_fd = -1;
    pid = fork();
    if (pid < 0) {
        err = -errno;
        log_error("worker %u: fork: %s", w->id, strerror(-err));
        worker_detach(w, "could not be started");
        goto fail;
    }
    if (pid == 0)
        child_exec(s->exe, shm_fd, w->wake_fd, w->notify_fd, err_w, argv);
    (void)close(err_w); /* the child's now: its end tells us when it is gone */
    p->pid = pid;
    p->watchdog_ms = c->watchdog_ms;
    p->life = WORKER_LIFE_STARTING;
    p->n_spawns++;
    watchdog_arm(s);
    log_info("worker %u spawned (pid %ld)", w->id, (long)pid);
    return 0;
fail:
    if (err_w >= 0)
        (void)close(err_w);
    if (wake_fd >= 0)
        (void)close(wake_fd);
    if (notify_fd >= 0)
        (void)close(notify_fd);
    shm_region_destroy(&reg);
    worker_stderr_close(&p->err);
    return err;
}

/* ---- what the table tells ---- */

static void on_ready(void *ctx, struct worker *w)
{
    struct supervisor *s = ctx;
    struct proc *p = &s->p[w->id];
    if (p->life == WORKER_LIFE_STARTING)
        p->life = WORKER_LIFE_READY;
    p->start_failures = 0;
    p->by_reload = false;
    p->n_ready++;
    p->ready_at_ms = mono_ms();
    watch_from_now(p); /* the watchdog counts from READY, busy or not */
    log_info("worker %u (pid %ld) ready", w->id, (long)p->pid);
}

static void on_poisoned(void *ctx, struct worker *w, const char *why)
{
    struct supervisor *s = ctx;
    struct proc *p = &s->p[w->id];
    log_error("worker %u (pid %ld): %s; killing it", w->id, (long)p->pid, why);
    if (p->pid > 0)
        (void)kill(p->pid, SIGKILL);
}

static const struct workers_events table_events = {on_ready, on_poisoned};

/* ---- death and respawn ---- */

static void check_stopped(struct supervisor *s)
{
    void (*done)(void *);
    if (!s->stopping || !s->on_stopped)
        return;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->p[i].pid > 0)
            return;
    evtimer_del(s->ev_stop);
    done = s->on_stopped;
    s->on_stopped = NULL;
    done(s->on_stopped_arg);
}

/* A death in a row more: respawn after the backoff. One that keeps failing before it is
 * ready is marked failed (so requests stop waiting for it) but is still tried again at the
 * backoff cap: a transient cause (memory short at load) must not need a kiln restart. */
static void plan_respawn(struct proc *p, bool was_ready)
{
    struct supervisor *s = p->s;
    int64_t now = mono_ms();
    uint64_t ms;

    if (s->draining) {
        p->life = WORKER_LIFE_STOPPED;
        return;
    }
    if (was_ready && now - p->ready_at_ms >= SUPERVISOR_HEALTHY_MS)
        p->deaths_in_row = 0; /* a minute of health: start the backoff over */
    p->deaths_in_row++;
    ms = (uint64_t)s->cfg->restart_backoff_ms
         << (p->deaths_in_row - 1 < 20 ? p->deaths_in_row - 1 : 20);
    if (ms > SUPERVISOR_BACKOFF_MAX_MS)
        ms = SUPERVISOR_BACKOFF_MAX_MS;
    p->life = WORKER_LIFE_BACKOFF;
    if (!was_ready && ++p->start_failures >= SUPERVISOR_MAX_START_FAILURES) {
        p->life = WORKER_LIFE_FAILED;
        ms = SUPERVISOR_BACKOFF_MAX_MS;
        if (p->start_failures == SUPERVISOR_MAX_START_FAILURES)
            log_error("worker %u failed %u times in a row before it was ready; marked failed, "
                      "retrying every %u ms (last error: %s)",
                      p->w->id, p->start_failures, SUPERVISOR_BACKOFF_MAX_MS,
                      p->last_error[0] ? p->last_error : p->last_exit);
    }
    p->respawn_at_ms = now + (int64_t)ms;
    struct timeval tv = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000};
    evtimer_add(p->ev_respawn, &tv);
    log_info("worker %u restarts in %" PRIu64 " ms", p->w->id, ms);
}

static void on_respawn(evutil_socket_t fd, short what, void *arg)
{
    struct proc *p = arg;
    (void)fd;
    (void)what;
    if ((p->life != WORKER_LIFE_BACKOFF && p->life != WORKER_LIFE_FAILED) || p->s->draining)
        return;
    if (spawn(p) < 0) {
        snprintf(p->last_exit, sizeof(p->last_exit), "could not be started");
        p->last_exit_at = wall_ms();
        plan_respawn(p, false);
        return;
    }
    workers_kick(p->s->ws);
}

/* A reload changed p's model or threads: its next process starts now, with no backoff
 * history (it is another worker). */
static void respawn_now(struct proc *p)
{
    p->replacing = false;
    p->deaths_in_row = p->start_failures = 0;
    p->by_reload = true;
    if (p->s->draining) {
        p->life = WORKER_LIFE_STOPPED;
        return;
    }
    if (spawn(p) < 0) {
        snprintf(p->last_exit, sizeof(p->last_exit), "could not be started");
        p->last_exit_at = wall_ms();
        plan_respawn(p, false);
    }
}

void supervisor_retire(struct supervisor *s, uint32_t i, bool respawn, uint32_t threads,
                       bool kill_now)
{
    struct proc *p = &s->p[i];
    if (i >= s->n)
        return;
    p->replacing = respawn;
    p->removing = !respawn;
    if (respawn)
        p->threads = threads;
    if (p->pid > 0) {
        (void)kill(p->pid, kill_now ? SIGKILL : SIGTERM);
        return;
    }
    evtimer_del(p->ev_respawn);
    if (respawn)
        respawn_now(p);
    else
        p->life = WORKER_LIFE_STOPPED;
    workers_kick(s->ws);
}

static int proc_init(struct supervisor *s, uint32_t i, uint32_t threads)
{
    struct proc *p = &s->p[i];
    memset(p, 0, sizeof(*p));
    p->s = s;
    p->w = workers_get(s->ws, i);
    p->life = WORKER_LIFE_STOPPED;
    worker_stderr_init(&p->err);
    p->threads = threads;
    p->ev_respawn = evtimer_new(s->base, on_respawn, p);
    return p->ev_respawn ? 0 : -ENOMEM;
}

int supervisor_add(struct supervisor *s, struct front_model *model, uint32_t threads)
{
    uint32_t i = s->n;
    if (s->draining || !workers_add(s->ws, model))
        return -ENOSPC;
    if (proc_init(s, i, threads) < 0) {
        workers_drop_last(s->ws);
        return -ENOMEM;
    }
    s->n++;
    s->p[i].by_reload = true;
    if (spawn(&s->p[i]) < 0) {
        snprintf(s->p[i].last_exit, sizeof(s->p[i].last_exit), "could not be started");
        s->p[i].last_exit_at = wall_ms();
        plan_respawn(&s->p[i], false);
    }
    workers_kick(s->ws);
    return (int)i;
}

void supervisor_drop_last(struct supervisor *s)
{
    struct proc *p;
    if (s->n == 0 || (p = &s->p[s->n - 1])->pid > 0)
        return;
    worker_stderr_close(&p->err);
    if (p->ev_respawn)
        event_free(p->ev_respawn);
    p->ev_respawn = NULL;
    s->n--;
    workers_drop_last(s->ws);
}

bool supervisor_model_hope(struct supervisor *s, const struct front_model *model)
{
    for (uint32_t i = 0; i < s->n; i++) {
        struct proc *p = &s->p[i];
        enum worker_life l = life_get(p);
        if (p->w->model == model && !p->removing &&
            (l == WORKER_LIFE_STARTING || l == WORKER_LIFE_READY || l == WORKER_LIFE_BACKOFF))
            return true;
    }
    return false;
}

/* The state /health and the metrics show for p: its life's name, except that a failed
 * worker's new attempt reads "failed" until it is ready. */
static enum worker_life shown_life(struct proc *p)
{
    enum worker_life l = life_get(p);
    if (l == WORKER_LIFE_STARTING && p->start_failures >= SUPERVISOR_MAX_START_FAILURES)
        l = WORKER_LIFE_FAILED;
    return l;
}

bool supervisor_any_hope(struct supervisor *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        enum worker_life l = life_get(&s->p[i]);
        if (l == WORKER_LIFE_STARTING || l == WORKER_LIFE_READY || l == WORKER_LIFE_BACKOFF)
            return true;
    }
    return false;
}

int64_t supervisor_retry_after_ms(struct supervisor *s)
{
    int64_t now = mono_ms(), best = -1;
    for (uint32_t i = 0; i < s->n && !s->draining; i++) {
        struct proc *p = &s->p[i];
        enum worker_life l = life_get(p);
        int64_t in = 0;
        if (l == WORKER_LIFE_BACKOFF || l == WORKER_LIFE_FAILED)
            in = p->respawn_at_ms > now ? p->respawn_at_ms - now : 0;
        else if (l != WORKER_LIFE_STARTING && l != WORKER_LIFE_READY)
            continue;
        if (best < 0 || in < best)
            best = in;
    }
    return best;
}

/* The process is gone (status from waitpid): name the cause, detach its channel (its last
 * records count, its jobs are lost), plan a respawn. */
static void worker_died(struct proc *p, int status)
{
    struct supervisor *s = p->s;
    struct worker *w = p->w;
    char cause[256], tail[512], what[128], eid[20];
    bool was_ready = life_get(p) == WORKER_LIFE_READY;
    long pid = (long)p->pid;
    p->by_reload = false;
    uint32_t rnd;

    p->pid = 0; /* reaped: the number may be reused, never signal it again */
    worker_stderr_finish(&p->err);
    if (WIFSIGNALED(status) && p->watchdog_killed)
        snprintf(p->last_exit, sizeof(p->last_exit),
                 "was killed by the watchdog (signal %d): no progress for %u ms",
                 WTERMSIG(status), p->watchdog_ms);
    else if (WIFSIGNALED(status))
        snprintf(p->last_exit, sizeof(p->last_exit), "was killed by signal %d (%s)",
                 WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(p->last_exit, sizeof(p->last_exit), "exited with status %d",
                 WEXITSTATUS(status));
    p->last_exit_at = wall_ms();
    worker_stderr_lines(&p->err, 1, p->last_error, sizeof(p->last_error));
    worker_stderr_lines(&p->err, CAUSE_LINES, tail, sizeof(tail));
    /* Clients get a short, stable cause and an error id; the id, PID and stderr tail go to
     * the log (and /health's details, behind the key), where an operator matches them. */
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
        rnd = (uint32_t)wall_ms() ^ (uint32_t)pid;
    snprintf(eid, sizeof(eid), "%08x", rnd);
    if (WIFSIGNALED(status) && p->watchdog_killed)
        snprintf(what, sizeof(what), "was stopped by the watchdog (no progress for %u ms)",
                 p->watchdog_ms);
    else if (WIFSIGNALED(status))
        snprintf(what, sizeof(what), "crashed (signal %d)", WTERMSIG(status));
    else
        snprintf(what, sizeof(what), "exited (status %d)", WEXITSTATUS(status));
    if (p->replacing || p->removing)
        snprintf(cause, sizeof(cause),
                 "worker %u was replaced by a reload before this request finished "
                 "(--drain-ms %u)", w->id, s->cfg->drain_ms);
    else
        snprintf(cause, sizeof(cause), "worker %u %s while running this request (error id %s)",
                 w->id, what, eid);
    if (s->stopping)
        log_info("worker %u (pid %ld) %s", w->id, pid, p->last_exit);
    else if ((p->replacing || p->removing) && was_ready)
        log_info("worker %u (pid %ld) %s (stopped by a reload)", w->id, pid, p->last_exit);
    else
        log_error("worker %u (pid %ld) %s [error id %s]%s%s", w->id, pid, p->last_exit, eid,
                  tail[0] ? "; its last stderr lines: " : "", tail);

    worker_detach(w, cause);
    worker_stderr_close(&p->err);
    if (p->removing)
        p->life = WORKER_LIFE_STOPPED;
    else if (p->replacing)
        respawn_now(p);
    else
        plan_respawn(p, was_ready);
    check_stopped(s);
    workers_kick(s->ws);
}

static void on_sigchld(evutil_socket_t sig, short what, void *arg)
{
    struct supervisor *s = arg;
    int status;
    pid_t pid;
    (void)sig;
    (void)what;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (uint32_t i = 0; i < s->n; i++)
            if (s->p[i].pid == pid)
                worker_died(&s->p[i], status);
    }
}

/* ---- shutdown ---- */

void supervisor_drain(struct supervisor *s)
{
    s->draining = true;
    for (uint32_t i = 0; i < s->n; i++) {
        struct proc *p = &s->p[i];
        if (p->ev_respawn)
            evtimer_del(p->ev_respawn);
        if (p->life == WORKER_LIFE_BACKOFF)
            p->life = WORKER_LIFE_STOPPED;
    }
}

bool supervisor_draining(const struct supervisor *s)
{
    return s->draining;
}

static void on_stop_grace(evutil_socket_t fd, short what, void *arg)
{
    struct supervisor *s = arg;
    (void)fd;
    (void)what;
    for (uint32_t i = 0; i < s->n; i++) {
        struct proc *p = &s->p[i];
        if (p->pid > 0) {
            log_warn("worker %u (pid %ld) ignored SIGTERM; killing it", p->w->id, (long)p->pid);
            (void)kill(p->pid, SIGKILL);
        }
    }
}

void supervisor_stop(struct supervisor *s, int grace_ms, void (*done)(void *arg), void *arg)
{
    supervisor_drain(s);
    s->stopping = true;
    s->on_stopped = done;
    s->on_stopped_arg = arg;
    evtimer_del(s->ev_watchdog);
    for (uint32_t i = 0; i < s->n; i++)
        if (s->p[i].pid > 0)
            (void)kill(s->p[i].pid, SIGTERM);
    struct timeval tv = {grace_ms / 1000, (long)(grace_ms % 1000) * 1000};
    evtimer_add(s->ev_stop, &tv);
    check_stopped(s);
}

void supervisor_kill_all(struct supervisor *s)
{
    supervisor_drain(s);
    s->stopping = true;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->p[i].pid > 0)
            (void)kill(s->p[i].pid, SIGKILL);
}

/* ---- the view ---- */

struct supervisor_view *supervisor_view(struct supervisor *s)
{
    struct supervisor_view *v = calloc(1, sizeof(*v) + s->n * sizeof(v->w[0]));
    int64_t now = mono_ms();
    if (!v)
        return NULL;
    v->draining = s->draining;
    v->n = s->n;
    for (uint32_t i = 0; i < s->n; i++) {
        struct proc *p = &s->p[i];
        struct worker *w = p->w;
        struct worker_view *o = &v->w[i];
        o->id = w->id;
        o->life = shown_life(p);
        o->loading = life_get(p) == WORKER_LIFE_STARTING;
        o->serving = life_get(p) == WORKER_LIFE_READY && worker_alive(w);
        o->pid = p->pid > 0 ? (long)p->pid : 0;
        o->running = w->used;
        o->hdr = p->pid > 0 ? w->reg.hdr : NULL;
        o->restarts = p->n_spawns ? p->n_spawns - 1 : 0;
        o->restart_in_ms = -1;
        if (p->life == WORKER_LIFE_BACKOFF || p->life == WORKER_LIFE_FAILED)
            o->restart_in_ms = p->respawn_at_ms > now ? p->respawn_at_ms - now : 0;
        o->last_exit = p->last_exit;
        o->last_exit_at = p->last_exit_at;
        o->last_error = p->last_error;
        o->model = w->model ? w->model->name : "";
        o->threads = p->threads;
        o->spawns = p->n_spawns;
        o->readies = p->n_ready;
        o->draining = w->retiring || p->replacing || p->removing;
        o->reload_start = o->loading && p->by_reload;
        o->watchdog_ms = p->watchdog_ms;
    }
    return v;
}

/* ---- set-up ---- */

static int find_exe(char *out, size_t cap)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return -errno;
    self[n] = '\0';
    if (snprintf(out, cap, "%s/kiln-worker", dirname(self)) >= (int)cap)
        return -ENAMETOOLONG;
    if (access(out, X_OK) < 0)
        return -errno;
    return 0;
}

struct supervisor *supervisor_create(struct event_base *base, const struct kiln_config *cfg,
                                     struct workers *ws)
{
    uint32_t n = workers_count(ws);
    /* room for every worker a reload may add */
    struct supervisor *s = calloc(1, sizeof(*s) + CONFIG_MAX_WORKERS * sizeof(struct proc));
    int err;
    if (!s) {
        log_error("supervisor: out of memory");
        return NULL;
    }
    s->base = base;
    s->cfg = cfg;
    s->ws = ws;
    s->n = n;
    for (uint32_t i = 0; i < n; i++) {
        struct proc *p = &s->p[i];
        p->s = s;
        p->w = workers_get(ws, i);
        p->life = WORKER_LIFE_STOPPED;
        worker_stderr_init(&p->err);
        p->threads = cfg->threads;
    }
    if ((err = find_exe(s->exe, sizeof(s->exe))) < 0) {
        log_error("cannot find kiln-worker beside kiln (%s): %s", s->exe, strerror(-err));
        goto fail;
    }
    s->ev_sigchld = evsignal_new(base, SIGCHLD, on_sigchld, s);
    s->ev_watchdog = evtimer_new(base, on_watchdog, s);
    s->ev_stop = evtimer_new(base, on_stop_grace, s);
    if (!s->ev_sigchld || !s->ev_watchdog || !s->ev_stop || event_add(s->ev_sigchld, NULL) < 0)
        goto fail;
    for (uint32_t i = 0; i < n; i++)
        if (!(s->p[i].ev_respawn = evtimer_new(base, on_respawn, &s->p[i])))
            goto fail;
    workers_subscribe(ws, &table_events, s);
    for (uint32_t i = 0; i < n; i++)
        if (spawn(&s->p[i]) < 0)
            goto fail;
    return s;
fail:
    supervisor_destroy(s, 1000);
    return NULL;
}

static bool all_reaped(struct supervisor *s)
{
    int status;
    for (uint32_t i = 0; i < s->n; i++) {
        struct proc *p = &s->p[i];
        if (p->pid > 0 && waitpid(p->pid, &status, WNOHANG) == p->pid)
            p->pid = 0;
        if (p->pid > 0)
            return false;
    }
    return true;
}

void supervisor_destroy(struct supervisor *s, int timeout_ms)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n; i++)
        if (s->p[i].pid > 0)
            (void)kill(s->p[i].pid, timeout_ms > 0 ? SIGTERM : SIGKILL);
    /* shutdown only (the loop is gone): a bounded wait in small steps */
    for (int waited = 0; !all_reaped(s) && waited < timeout_ms; waited += 10)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    for (uint32_t i = 0; i < s->n; i++) {
        struct proc *p = &s->p[i];
        if (p->pid > 0) {
            if (timeout_ms > 0)
                log_warn("worker %u (pid %ld) ignored SIGTERM; killing it", p->w->id,
                         (long)p->pid);
            (void)kill(p->pid, SIGKILL);
            while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            p->pid = 0;
        }
        worker_stderr_close(&p->err);
        if (p->ev_respawn)
            event_free(p->ev_respawn);
        p->ev_respawn = NULL;
        p->life = WORKER_LIFE_STOPPED;
    }
    workers_subscribe(s->ws, NULL, NULL);
    if (s->ev_sigchld)
        event_free(s->ev_sigchld);
    if (s->ev_watchdog)
        event_free(s->ev_watchdog);
    if (s->ev_stop)
        event_free(s->ev_stop);
    free(s);
}
