/* Worker processes seen from the front: spawn (region, eventfds, fork+exec), the records they
 * send (drained from the loop, validated, routed to their job's owner), the records sent to
 * them (one wake per loop turn), reaping and respawning. HTTP lives elsewhere. */
#include "workers.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "config.h"
#include "log.h"
#include "notify.h"
#include "proto.h"
#include "shm_ring.h"

/* Ring sizes: the worker-bound ring holds a few maximal JOBs (WIRE_MAX_MSG each); the
 * front-bound one holds thousands of TOKEN records, and the front drains it every turn. */
#define TO_WORKER_RING (UINT64_C(4) << 20)
#define TO_FRONT_RING  (UINT64_C(1) << 20)

/* The fds a worker finds its region and eventfds at. */
#define CHILD_SHM_FD    3
#define CHILD_WAKE_FD   4
#define CHILD_NOTIFY_FD 5

/* Records handled per wake before yielding to other events (the rest next turn). */
#define DRAIN_BUDGET 4096

#define BACKOFF_MIN_MS     250
#define BACKOFF_MAX_MS     30000
#define MAX_START_FAILURES 5

struct workers {
    struct event_base *base;
    const struct kiln_config *cfg;
    uint32_t max_context;
    const struct workers_ops *ops;
    void *ctx;
    char exe[PATH_MAX];
    struct event *ev_sigchld;
    struct event *ev_flush; /* wakes workers once per loop turn */
    bool flush_pending;
    unsigned char *scratch; /* WIRE_MAX_MSG bytes to encode into */
    uint32_t n;
    struct worker w[];
};

static int worker_spawn(struct worker *w);

uint32_t workers_count(const struct workers *ws)
{
    return ws->n;
}

struct worker *workers_get(struct workers *ws, uint32_t i)
{
    return i < ws->n ? &ws->w[i] : NULL;
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

enum worker_life worker_life_get(struct worker *w)
{
    if (w->life == WORKER_LIFE_STARTING && w->reg.hdr &&
        atomic_load_explicit(&w->reg.hdr->state, memory_order_acquire) == WORKER_STATE_READY) {
        w->life = WORKER_LIFE_READY;
        w->start_failures = 0;
        log_info("worker %u (pid %ld) ready", w->id, (long)w->pid);
    }
    return w->life;
}

static bool worker_alive(struct worker *w)
{
    enum worker_life l = worker_life_get(w);
    return w->pid > 0 && (l == WORKER_LIFE_STARTING || l == WORKER_LIFE_READY) && !w->poisoned;
}

struct worker *workers_pick(struct workers *ws)
{
    struct worker *best = NULL;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (!worker_alive(w) || w->used >= ws->cfg->max_sequences)
            continue;
        /* a ready worker beats one still loading at equal load */
        if (!best || w->used < best->used ||
            (w->used == best->used && w->life == WORKER_LIFE_READY &&
             best->life != WORKER_LIFE_READY))
            best = w;
    }
    return best;
}

bool workers_any_hope(struct workers *ws)
{
    for (uint32_t i = 0; i < ws->n; i++) {
        enum worker_life l = worker_life_get(&ws->w[i]);
        if (l == WORKER_LIFE_STARTING || l == WORKER_LIFE_READY || l == WORKER_LIFE_BACKOFF)
            return true;
    }
    return false;
}

bool workers_any_ready(struct workers *ws)
{
    for (uint32_t i = 0; i < ws->n; i++)
        if (worker_life_get(&ws->w[i]) == WORKER_LIFE_READY && !ws->w[i].poisoned)
            return true;
    return false;
}

/* ---- sending ---- */

static void schedule_flush(struct worker *w)
{
    struct workers *ws = w->ws;
    w->wake_pending = true;
    if (!ws->flush_pending) {
        ws->flush_pending = true;
        event_active(ws->ev_flush, 0, 0);
    }
}

static int worker_push(struct worker *w, const struct proto_msg *m)
{
    int len = proto_encode(m, w->ws->scratch, WIRE_MAX_MSG);
    if (len < 0)
        return len == -ENOSPC ? -EMSGSIZE : len;
    int rc = shm_ring_push(w->reg.to_worker, w->ws->scratch, (uint32_t)len);
    if (rc == 0)
        schedule_flush(w);
    return rc;
}

static int worker_push_cancel(struct worker *w, uint64_t req_id)
{
    struct proto_msg m;
    memset(&m, 0, sizeof(m));
    m.type = MSG_TYPE_CANCEL;
    m.req_id = req_id;
    return worker_push(w, &m);
}

/* Once per loop turn: retry cancels that found the ring full, then write each eventfd once. */
static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct workers *ws = arg;
    (void)fd;
    (void)what;
    ws->flush_pending = false;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (!w->pid || w->poisoned)
            continue;
        for (uint32_t s = 0; s < ws->cfg->max_sequences; s++) {
            struct worker_slot *sl = &w->slots[s];
            if (sl->req_id && sl->cancel_pending && worker_push_cancel(w, sl->req_id) == 0)
                sl->cancel_pending = false;
        }
        if (w->wake_pending) {
            w->wake_pending = false;
            int rc = notify_wake(w->reg.to_worker, w->wake_fd);
            if (rc < 0)
                log_warn("worker %u: wake failed: %s", w->id, strerror(-rc));
        }
    }
}

int worker_submit(struct worker *w, const struct proto_msg *job, void *owner)
{
    struct worker_slot *free_slot = NULL;
    if (!worker_alive(w))
        return -ESRCH;
    for (uint32_t s = 0; s < w->ws->cfg->max_sequences && !free_slot; s++)
        if (!w->slots[s].req_id)
            free_slot = &w->slots[s];
    if (!free_slot)
        return -EBUSY;
    int rc = worker_push(w, job);
    if (rc < 0)
        return rc;
    free_slot->req_id = job->req_id;
    free_slot->owner = owner;
    free_slot->cancel_pending = false;
    w->used++;
    return 0;
}

static struct worker_slot *find_slot(struct worker *w, uint64_t req_id)
{
    if (!req_id || !w->slots)
        return NULL;
    for (uint32_t s = 0; s < w->ws->cfg->max_sequences; s++)
        if (w->slots[s].req_id == req_id)
            return &w->slots[s];
    return NULL;
}

int worker_cancel(struct worker *w, uint64_t req_id)
{
    struct worker_slot *sl = find_slot(w, req_id);
    if (!sl)
        return -ENOENT;
    if (!w->pid || w->poisoned)
        return 0; /* its death ends the job */
    if (worker_push_cancel(w, req_id) < 0) {
        sl->cancel_pending = true;
        schedule_flush(w);
    }
    return 0;
}

/* ---- receiving ---- */

static void release_slot(struct worker *w, struct worker_slot *sl)
{
    sl->req_id = 0;
    sl->owner = NULL;
    sl->cancel_pending = false;
    w->used--;
}

/* Kill a worker whose ring can no longer be trusted; SIGCHLD does the rest. */
static void worker_poison(struct worker *w, const char *why)
{
    log_error("worker %u (pid %ld): %s; killing it", w->id, (long)w->pid, why);
    w->poisoned = true;
    if (w->ev_notify)
        event_del(w->ev_notify);
    if (w->pid > 0)
        (void)kill(w->pid, SIGKILL);
}

/* One record: validate, route. Returns 0, or -EPROTO when the worker must be stopped. */
static int handle_record(struct worker *w, const void *buf, uint32_t len, bool *capacity)
{
    struct proto_msg m;
    int rc = proto_decode(buf, len, &m);
    if (rc < 0) {
        log_error("worker %u: malformed record of %u bytes rejected", w->id, len);
        return -EPROTO;
    }
    if (m.type != MSG_TYPE_STARTED && m.type != MSG_TYPE_TOKEN && m.type != MSG_TYPE_DONE &&
        m.type != MSG_TYPE_FAILED) {
        log_error("worker %u: record of type %d is not one a worker sends", w->id, (int)m.type);
        return -EPROTO;
    }
    struct worker_slot *sl = find_slot(w, m.req_id);
    if (!sl) {
        log_warn("worker %u: record of type %d for unknown request %" PRIu64 " ignored", w->id,
                 (int)m.type, m.req_id);
        return 0;
    }
    void *owner = sl->owner;
    if (m.type == MSG_TYPE_DONE || m.type == MSG_TYPE_FAILED) {
        release_slot(w, sl);
        *capacity = true;
    }
    w->ws->ops->on_record(w->ws->ctx, w, owner, &m);
    return 0;
}

/* Drain the worker's ring: the front is its consumer. Before going back to libevent it says
 * it sleeps (consumer_waiting) and re-checks, so a record pushed meanwhile is never missed. */
static void on_notify(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    struct workers *ws = w->ws;
    bool capacity = false;
    uint32_t budget = DRAIN_BUDGET;
    (void)fd;
    (void)what;

    (void)notify_consume(w->notify_fd);
    notify_end_sleep(w->reg.to_front);
    (void)worker_life_get(w);
    for (;;) {
        const void *rec;
        uint32_t len;
        int rc;
        while (budget > 0 && (rc = shm_ring_peek(w->reg.to_front, &rec, &len)) == 0) {
            budget--;
            w->n_records++;
            rc = handle_record(w, rec, len, &capacity);
            if (rc < 0) {
                worker_poison(w, "protocol violation");
                goto out;
            }
            shm_ring_pop(w->reg.to_front);
            if (!w->pid || w->poisoned)
                goto out;
        }
        if (budget > 0 && rc == -EPROTO) {
            worker_poison(w, "corrupt ring");
            goto out;
        }
        if (budget == 0) {
            /* more next turn, after the sockets had theirs; no eventfd write is needed */
            event_active(w->ev_notify, EV_READ, 0);
            goto out;
        }
        if (notify_prepare_sleep(w->reg.to_front))
            break;
    }
out:
    if (capacity)
        ws->ops->on_capacity(ws->ctx);
}

/* ---- spawning ---- */

/* In the child: move fd to a number above the fixed ones, so the dup2s below never clash. */
static int child_lift_fd(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 16);
}

static void child_exec(struct worker *w, char *const argv[])
{
    int shm = child_lift_fd(w->reg.fd), wake = child_lift_fd(w->wake_fd);
    int note = child_lift_fd(w->notify_fd);
    sigset_t none;

    if (shm < 0 || wake < 0 || note < 0)
        _exit(127);
    /* dup2 clears close-on-exec on the new numbers only */
    if (dup2(shm, CHILD_SHM_FD) < 0 || dup2(wake, CHILD_WAKE_FD) < 0 ||
        dup2(note, CHILD_NOTIFY_FD) < 0)
        _exit(127);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    execv(w->ws->exe, argv);
    dprintf(STDERR_FILENO, "kiln: exec %s failed: %s\n", w->ws->exe, strerror(errno));
    _exit(127);
}

static void worker_close(struct worker *w)
{
    if (w->ev_notify) {
        event_free(w->ev_notify);
        w->ev_notify = NULL;
    }
    if (w->wake_fd >= 0)
        (void)close(w->wake_fd);
    if (w->notify_fd >= 0)
        (void)close(w->notify_fd);
    w->wake_fd = w->notify_fd = -1;
    shm_region_destroy(&w->reg);
    memset(&w->reg, 0, sizeof(w->reg));
    w->reg.fd = -1;
}

static int worker_spawn(struct worker *w)
{
    struct workers *ws = w->ws;
    const struct kiln_config *c = ws->cfg;
    char a_id[16], a_ppid[24], a_shm[8], a_wake[8], a_note[8], a_seq[16], a_pre[16], a_ctx[16];
    char a_thr[16], a_delay[16];
    char *argv[40];
    int n = 0, err;
    pid_t pid;

    memset(&w->reg, 0, sizeof(w->reg));
    w->reg.fd = -1;
    w->wake_fd = w->notify_fd = -1;
    w->poisoned = false;
    if ((err = shm_region_create(&w->reg, TO_WORKER_RING, TO_FRONT_RING)) < 0) {
        log_error("worker %u: shared region: %s", w->id, strerror(-err));
        goto fail;
    }
    if ((w->wake_fd = notify_eventfd()) < 0 || (w->notify_fd = notify_eventfd()) < 0) {
        err = w->wake_fd < 0 ? w->wake_fd : w->notify_fd;
        log_error("worker %u: eventfd: %s", w->id, strerror(-err));
        goto fail;
    }
    w->ev_notify = event_new(ws->base, w->notify_fd, EV_READ | EV_PERSIST, on_notify, w);
    if (!w->ev_notify) {
        err = -ENOMEM;
        goto fail;
    }

    snprintf(a_id, sizeof(a_id), "%u", w->id);
    snprintf(a_ppid, sizeof(a_ppid), "%ld", (long)getpid());
    snprintf(a_shm, sizeof(a_shm), "%d", CHILD_SHM_FD);
    snprintf(a_wake, sizeof(a_wake), "%d", CHILD_WAKE_FD);
    snprintf(a_note, sizeof(a_note), "%d", CHILD_NOTIFY_FD);
    snprintf(a_seq, sizeof(a_seq), "%u", c->max_sequences);
    snprintf(a_pre, sizeof(a_pre), "%u", c->max_prefill_tokens);
    snprintf(a_ctx, sizeof(a_ctx), "%u", ws->max_context);
    snprintf(a_thr, sizeof(a_thr), "%u", c->threads);
    snprintf(a_delay, sizeof(a_delay), "%u", c->mock_delay_ms);
    argv[n++] = ws->exe;
    argv[n++] = "--id";
    argv[n++] = a_id;
    argv[n++] = "--parent-pid";
    argv[n++] = a_ppid;
    argv[n++] = "--shm-fd";
    argv[n++] = a_shm;
    argv[n++] = "--wake-fd";
    argv[n++] = a_wake;
    argv[n++] = "--notify-fd";
    argv[n++] = a_note;
    argv[n++] = "--model";
    argv[n++] = (char *)c->model;
    argv[n++] = "--max-sequences";
    argv[n++] = a_seq;
    argv[n++] = "--max-prefill-tokens";
    argv[n++] = a_pre;
    argv[n++] = "--ctx";
    argv[n++] = a_ctx;
    if (c->threads) {
        argv[n++] = "--threads";
        argv[n++] = a_thr;
    }
    if (c->mock_reply) {
        argv[n++] = "--mock-reply";
        argv[n++] = (char *)c->mock_reply;
    }
    if (c->mock_delay_ms) {
        argv[n++] = "--mock-delay-ms";
        argv[n++] = a_delay;
    }
    if (c->mock_faults)
        argv[n++] = "--mock-faults";
    argv[n] = NULL;

    pid = fork();
    if (pid < 0) {
        err = -errno;
        log_error("worker %u: fork: %s", w->id, strerror(-err));
        goto fail;
    }
    if (pid == 0)
        child_exec(w, argv);
    w->pid = pid;
    w->life = WORKER_LIFE_STARTING;
    w->n_spawns++;
    event_add(w->ev_notify, NULL);
    /* say we sleep; if the worker was quicker, read at once */
    if (!notify_prepare_sleep(w->reg.to_front))
        event_active(w->ev_notify, EV_READ, 0);
    log_info("worker %u spawned (pid %ld)", w->id, (long)pid);
    return 0;
fail:
    worker_close(w);
    return err;
}

static void on_respawn(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (w->life != WORKER_LIFE_BACKOFF)
        return;
    if (worker_spawn(w) < 0) {
        w->life = WORKER_LIFE_FAILED;
        return;
    }
    w->ws->ops->on_capacity(w->ws->ctx);
}

/* The process is gone (status from waitpid): end its jobs, free its region, plan a respawn. */
static void worker_died(struct worker *w, int status)
{
    struct workers *ws = w->ws;
    char cause[128];
    bool was_ready = worker_life_get(w) == WORKER_LIFE_READY;

    if (WIFSIGNALED(status))
        snprintf(cause, sizeof(cause), "worker %u (pid %ld) was killed by signal %d (%s)", w->id,
                 (long)w->pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(cause, sizeof(cause), "worker %u (pid %ld) exited with status %d", w->id,
                 (long)w->pid, WEXITSTATUS(status));
    log_error("%s", cause);
    w->pid = 0;
    worker_close(w);
    for (uint32_t s = 0; s < ws->cfg->max_sequences; s++) {
        struct worker_slot *sl = &w->slots[s];
        if (sl->req_id) {
            void *owner = sl->owner;
            release_slot(w, sl);
            ws->ops->on_job_lost(ws->ctx, w, owner, cause);
        }
    }
    if (!was_ready)
        w->start_failures++;
    if (w->start_failures >= MAX_START_FAILURES) {
        w->life = WORKER_LIFE_FAILED;
        log_error("worker %u failed %u times at start-up; not restarting it", w->id,
                  w->start_failures);
    } else {
        uint32_t ms = BACKOFF_MIN_MS << (w->start_failures < 7 ? w->start_failures : 7);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        if (ms > BACKOFF_MAX_MS)
            tv = (struct timeval){BACKOFF_MAX_MS / 1000, 0};
        w->life = WORKER_LIFE_BACKOFF;
        evtimer_add(w->ev_respawn, &tv);
    }
    ws->ops->on_capacity(ws->ctx);
}

static void on_sigchld(evutil_socket_t sig, short what, void *arg)
{
    struct workers *ws = arg;
    int status;
    pid_t pid;
    (void)sig;
    (void)what;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (uint32_t i = 0; i < ws->n; i++)
            if (ws->w[i].pid == pid)
                worker_died(&ws->w[i], status);
    }
}

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

struct workers *workers_create(struct event_base *base, const struct kiln_config *cfg,
                               uint32_t max_context, const struct workers_ops *ops, void *ctx)
{
    struct workers *ws = calloc(1, sizeof(*ws) + cfg->workers * sizeof(struct worker));
    int err;
    if (!ws)
        return NULL;
    ws->base = base;
    ws->cfg = cfg;
    ws->max_context = max_context;
    ws->ops = ops;
    ws->ctx = ctx;
    ws->n = cfg->workers;
    for (uint32_t i = 0; i < ws->n; i++) {
        ws->w[i].wake_fd = ws->w[i].notify_fd = -1;
        ws->w[i].reg.fd = -1;
    }
    if ((err = find_exe(ws->exe, sizeof(ws->exe))) < 0) {
        log_error("cannot find kiln-worker beside kiln (%s): %s", ws->exe, strerror(-err));
        goto fail;
    }
    ws->scratch = malloc(WIRE_MAX_MSG);
    ws->ev_flush = event_new(base, -1, 0, on_flush, ws);
    ws->ev_sigchld = evsignal_new(base, SIGCHLD, on_sigchld, ws);
    if (!ws->scratch || !ws->ev_flush || !ws->ev_sigchld || event_add(ws->ev_sigchld, NULL) < 0)
        goto fail;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        w->ws = ws;
        w->id = i;
        w->life = WORKER_LIFE_STOPPED;
        w->slots = calloc(cfg->max_sequences, sizeof(*w->slots));
        w->ev_respawn = evtimer_new(base, on_respawn, w);
        if (!w->slots || !w->ev_respawn)
            goto fail;
    }
    for (uint32_t i = 0; i < ws->n; i++)
        if (worker_spawn(&ws->w[i]) < 0)
            goto fail;
    return ws;
fail:
    workers_destroy(ws, 1000);
    return NULL;
}

static bool all_reaped(struct workers *ws)
{
    int status;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (w->pid > 0 && waitpid(w->pid, &status, WNOHANG) == w->pid)
            w->pid = 0;
        if (w->pid > 0)
            return false;
    }
    return true;
}

void workers_destroy(struct workers *ws, int timeout_ms)
{
    if (!ws)
        return;
    for (uint32_t i = 0; i < ws->n; i++)
        if (ws->w[i].pid > 0)
            (void)kill(ws->w[i].pid, SIGTERM);
    /* shutdown only: a bounded wait in small steps */
    for (int waited = 0; !all_reaped(ws) && waited < timeout_ms; waited += 10)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (w->pid > 0) {
            log_warn("worker %u (pid %ld) ignored SIGTERM; killing it", w->id, (long)w->pid);
            (void)kill(w->pid, SIGKILL);
            (void)waitpid(w->pid, NULL, 0);
            w->pid = 0;
        }
        worker_close(w);
        if (w->ev_respawn)
            event_free(w->ev_respawn);
        free(w->slots);
        w->life = WORKER_LIFE_STOPPED;
    }
    if (ws->ev_sigchld)
        event_free(ws->ev_sigchld);
    if (ws->ev_flush)
        event_free(ws->ev_flush);
    free(ws->scratch);
    free(ws);
}
