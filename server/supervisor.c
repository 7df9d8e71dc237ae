/* The lives of the worker processes: spawn (region, eventfds, stderr pipe, fork+exec), their
 * stderr forwarded line by line and its tail kept, reaping on SIGCHLD with the cause named,
 * respawn with an exponential backoff, the heartbeat watchdog, the shutdown stop, /health.
 * Records and job slots are workers.c's. */
#include "supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
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
#include "log.h"
#include "notify.h"
#include "shm_region.h"

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

/* Lines of a dead worker's stderr quoted in the error its requests get. */
#define CAUSE_LINES 3

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

/* ---- stderr: forwarded as whole lines, the tail kept ---- */

static void forward(const char *b, size_t n)
{
    while (n > 0) {
        ssize_t k = write(STDERR_FILENO, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return; /* our own stderr is gone: nothing better to do */
        b += k;
        n -= (size_t)k;
    }
}

static void tail_append(struct worker *w, const char *b, size_t n)
{
    if (n >= WORKER_ERR_TAIL) {
        memcpy(w->err_tail, b + n - WORKER_ERR_TAIL, WORKER_ERR_TAIL);
        w->err_tail_len = WORKER_ERR_TAIL;
        return;
    }
    if (w->err_tail_len + n > WORKER_ERR_TAIL) {
        size_t drop = w->err_tail_len + n - WORKER_ERR_TAIL;
        memmove(w->err_tail, w->err_tail + drop, w->err_tail_len - drop);
        w->err_tail_len -= (uint32_t)drop;
    }
    memcpy(w->err_tail + w->err_tail_len, b, n);
    w->err_tail_len += (uint32_t)n;
}

/* Forward what is held of an unfinished line (at death, or when it grew too long). */
static void line_flush(struct worker *w, bool add_newline)
{
    if (!w->err_line_len)
        return;
    forward(w->err_line, w->err_line_len);
    if (add_newline)
        forward("\n", 1);
    w->err_line_len = 0;
}

/* Whole lines go out at once, so they do not interleave with the front's own log lines. */
static void err_consume(struct worker *w, const char *b, size_t n)
{
    const char *nl = memrchr(b, '\n', n);
    tail_append(w, b, n);
    if (nl) {
        line_flush(w, false);
        forward(b, (size_t)(nl + 1 - b));
        n -= (size_t)(nl + 1 - b);
        b = nl + 1;
    }
    if (w->err_line_len + n > WORKER_ERR_LINE) {
        line_flush(w, false);
        forward(b, n);
        return;
    }
    memcpy(w->err_line + w->err_line_len, b, n);
    w->err_line_len += (uint32_t)n;
}

/* Read what the pipe holds. Returns 0 (would block), 1 at its end, or -errno. */
static int err_read(struct worker *w)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(w->err_fd, buf, sizeof(buf));
        if (n > 0) {
            err_consume(w, buf, (size_t)n);
            continue;
        }
        if (n == 0)
            return 1;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN ? 0 : -errno;
    }
}

static void on_err(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if (err_read(w) != 0) {
        /* at its end a pipe stays readable: stop watching, the fd closes with the worker */
        line_flush(w, true);
        event_del(w->ev_err);
    }
}

/* The last n lines of the tail, joined with " | ", printable ASCII only (it goes into JSON). */
static void tail_lines(const struct worker *w, unsigned n, char *out, size_t cap)
{
    const char *t = w->err_tail;
    size_t end = w->err_tail_len, start;
    unsigned lines = 0;
    size_t o = 0;

    while (end > 0 && (t[end - 1] == '\n' || t[end - 1] == '\r'))
        end--;
    start = end;
    while (start > 0 && lines < n) {
        if (t[start - 1] == '\n' && ++lines == n)
            break;
        start--;
    }
    /* keep the newest bytes when it does not fit */
    if (end - start > cap - 1)
        start = end - (cap - 1);
    for (size_t i = start; i < end && o + 4 < cap; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == '\n') {
            memcpy(out + o, " | ", 3);
            o += 3;
        } else {
            out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
        }
    }
    out[o] = '\0';
}

/* ---- spawning ---- */

/* In the child: move fd to a number above the fixed ones, so the dup2s below never clash. */
static int child_lift_fd(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 16);
}

static void child_exec(struct worker *w, int err_w, char *const argv[])
{
    int shm = child_lift_fd(w->reg.fd), wake = child_lift_fd(w->wake_fd);
    int note = child_lift_fd(w->notify_fd), err = child_lift_fd(err_w);
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
    execv(w->ws->exe, argv);
    dprintf(STDERR_FILENO, "kiln: exec %s failed: %s\n", w->ws->exe, strerror(errno));
    _exit(127);
}

void supervisor_close_worker(struct worker *w)
{
    if (w->ev_notify) {
        event_free(w->ev_notify);
        w->ev_notify = NULL;
    }
    if (w->ev_err) {
        event_free(w->ev_err);
        w->ev_err = NULL;
    }
    if (w->err_fd >= 0)
        (void)close(w->err_fd);
    if (w->wake_fd >= 0)
        (void)close(w->wake_fd);
    if (w->notify_fd >= 0)
        (void)close(w->notify_fd);
    w->wake_fd = w->notify_fd = w->err_fd = -1;
    shm_region_destroy(&w->reg);
    memset(&w->reg, 0, sizeof(w->reg));
    w->reg.fd = -1;
}

static void on_notify_spawned(struct worker *w)
{
    event_add(w->ev_notify, NULL);
    /* say we sleep; if the worker was quicker, read at once */
    if (!notify_prepare_sleep(&w->reg.to_front))
        event_active(w->ev_notify, EV_READ, 0);
}

int supervisor_spawn(struct worker *w)
{
    struct workers *ws = w->ws;
    const struct kiln_config *c = ws->cfg;
    char a_id[16], a_ppid[24], a_shm[8], a_wake[8], a_note[8], a_seq[16], a_pre[16], a_ctx[16];
    char a_thr[16], a_delay[16], a_load[16], a_kv[16], a_hb[16];
    char *argv[40];
    int n = 0, err, pipefd[2] = {-1, -1};
    pid_t pid;

    memset(&w->reg, 0, sizeof(w->reg));
    w->reg.fd = -1;
    w->wake_fd = w->notify_fd = w->err_fd = -1;
    w->poisoned = false;
    w->watchdog_killed = false;
    w->err_tail_len = w->err_line_len = 0;
    if ((err = shm_region_create(&w->reg, TO_WORKER_RING, TO_FRONT_RING)) < 0) {
        log_error("worker %u: shared region: %s", w->id, strerror(-err));
        goto fail;
    }
    if ((w->wake_fd = notify_eventfd()) < 0 || (w->notify_fd = notify_eventfd()) < 0) {
        err = w->wake_fd < 0 ? w->wake_fd : w->notify_fd;
        log_error("worker %u: eventfd: %s", w->id, strerror(-err));
        goto fail;
    }
    /* the read end does not block the loop; the worker's end blocks as a stderr should */
    if (pipe2(pipefd, O_CLOEXEC) < 0 || fcntl(pipefd[0], F_SETFL, O_NONBLOCK) < 0) {
        err = -errno;
        log_error("worker %u: stderr pipe: %s", w->id, strerror(-err));
        goto fail;
    }
    w->err_fd = pipefd[0];
    pipefd[0] = -1;
    w->ev_notify = event_new(ws->base, w->notify_fd, EV_READ | EV_PERSIST, workers_on_notify, w);
    w->ev_err = event_new(ws->base, w->err_fd, EV_READ | EV_PERSIST, on_err, w);
    if (!w->ev_notify || !w->ev_err) {
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
    snprintf(a_kv, sizeof(a_kv), "%u", c->kv_cache_tokens);
    snprintf(a_delay, sizeof(a_delay), "%u", c->mock_delay_ms);
    snprintf(a_load, sizeof(a_load), "%u", c->mock_load_ms);
    argv[n++] = ws->exe;
    argv[n++] = "--id";
    argv[n++] = a_id;
    argv[n++] = "--parent-pid"; /* it exits if we are gone before its PDEATHSIG is set */
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
    if (c->kv_cache_tokens) {
        argv[n++] = "--kv-cache-tokens";
        argv[n++] = a_kv;
    }
    if (c->threads) {
        argv[n++] = "--threads";
        argv[n++] = a_thr;
    }
    if (c->mock_reply) {
        argv[n++] = "--mock-reply";
        argv[n++] = (char *)c->mock_reply;
    }
    if (c->mock_tool_reply) {
        argv[n++] = "--mock-tool-reply";
        argv[n++] = (char *)c->mock_tool_reply;
    }
    if (c->mock_delay_ms) {
        argv[n++] = "--mock-delay-ms";
        argv[n++] = a_delay;
    }
    if (c->mock_load_ms) {
        argv[n++] = "--mock-load-ms";
        argv[n++] = a_load;
    }
    if (c->mock_faults)
        argv[n++] = "--mock-faults";
    if (c->watchdog_ms) {
        /* an idle worker beats this often, so the watchdog can tell a stopped one too */
        snprintf(a_hb, sizeof(a_hb), "%u", supervisor_heartbeat_ms(c));
        argv[n++] = "--heartbeat-ms";
        argv[n++] = a_hb;
    }
    argv[n] = NULL;

    pid = fork();
    if (pid < 0) {
        err = -errno;
        log_error("worker %u: fork: %s", w->id, strerror(-err));
        goto fail;
    }
    if (pid == 0)
        child_exec(w, pipefd[1], argv);
    (void)close(pipefd[1]); /* the child's now: its end tells us when it is gone */
    w->pid = pid;
    w->life = WORKER_LIFE_STARTING;
    w->n_spawns++;
    event_add(w->ev_err, NULL);
    on_notify_spawned(w);
    log_info("worker %u spawned (pid %ld)", w->id, (long)pid);
    return 0;
fail:
    if (pipefd[0] >= 0)
        (void)close(pipefd[0]);
    if (pipefd[1] >= 0)
        (void)close(pipefd[1]);
    supervisor_close_worker(w);
    return err;
}

void supervisor_ready(struct worker *w)
{
    w->start_failures = 0;
    w->ready_at_ms = mono_ms();
    supervisor_work_began(w); /* the watchdog counts from READY, busy or not */
    log_info("worker %u (pid %ld) ready", w->id, (long)w->pid);
}

void supervisor_poison(struct worker *w, const char *why)
{
    log_error("worker %u (pid %ld): %s; killing it", w->id, (long)w->pid, why);
    w->poisoned = true;
    if (w->ev_notify)
        event_del(w->ev_notify);
    if (w->pid > 0)
        (void)kill(w->pid, SIGKILL);
}

/* ---- death and respawn ---- */

static void check_stopped(struct workers *ws)
{
    void (*done)(void *);
    if (!ws->stopping || !ws->on_stopped)
        return;
    for (uint32_t i = 0; i < ws->n; i++)
        if (ws->w[i].pid > 0)
            return;
    evtimer_del(ws->ev_stop);
    done = ws->on_stopped;
    ws->on_stopped = NULL;
    done(ws->on_stopped_arg);
}

/* A death in a row more: respawn after the backoff. One that keeps failing before it is
 * ready is marked failed (so requests stop waiting for it) but is still tried again at the
 * backoff cap: a transient cause (memory short at load) must not need a kiln restart. */
static void plan_respawn(struct worker *w, bool was_ready)
{
    struct workers *ws = w->ws;
    int64_t now = mono_ms();
    uint64_t ms;

    if (ws->draining) {
        w->life = WORKER_LIFE_STOPPED;
        return;
    }
    if (was_ready && now - w->ready_at_ms >= SUPERVISOR_HEALTHY_MS)
        w->deaths_in_row = 0; /* a minute of health: start the backoff over */
    w->deaths_in_row++;
    ms = (uint64_t)ws->cfg->restart_backoff_ms
         << (w->deaths_in_row - 1 < 20 ? w->deaths_in_row - 1 : 20);
    if (ms > SUPERVISOR_BACKOFF_MAX_MS)
        ms = SUPERVISOR_BACKOFF_MAX_MS;
    w->life = WORKER_LIFE_BACKOFF;
    if (!was_ready && ++w->start_failures >= SUPERVISOR_MAX_START_FAILURES) {
        w->life = WORKER_LIFE_FAILED;
        ms = SUPERVISOR_BACKOFF_MAX_MS;
        if (w->start_failures == SUPERVISOR_MAX_START_FAILURES)
            log_error("worker %u failed %u times in a row before it was ready; marked failed, "
                      "retrying every %u ms (last error: %s)",
                      w->id, w->start_failures, SUPERVISOR_BACKOFF_MAX_MS,
                      w->last_error[0] ? w->last_error : w->last_exit);
    }
    w->respawn_at_ms = now + (int64_t)ms;
    struct timeval tv = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000};
    evtimer_add(w->ev_respawn, &tv);
    log_info("worker %u restarts in %" PRIu64 " ms", w->id, ms);
}

static void on_respawn(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;
    (void)fd;
    (void)what;
    if ((w->life != WORKER_LIFE_BACKOFF && w->life != WORKER_LIFE_FAILED) || w->ws->draining)
        return;
    if (supervisor_spawn(w) < 0) {
        snprintf(w->last_exit, sizeof(w->last_exit), "could not be started");
        w->last_exit_at = wall_ms();
        plan_respawn(w, false);
        return;
    }
    w->ws->ops->on_capacity(w->ws->ctx);
}

const char *supervisor_state_name(struct worker *w)
{
    enum worker_life l = worker_life_get(w);
    /* a failed worker's retry shows as failed until it is ready */
    if (l == WORKER_LIFE_STARTING && w->start_failures >= SUPERVISOR_MAX_START_FAILURES)
        l = WORKER_LIFE_FAILED;
    return worker_life_name(l);
}

int64_t supervisor_retry_after_ms(struct workers *ws)
{
    int64_t now = mono_ms(), best = -1;
    for (uint32_t i = 0; i < ws->n && !ws->draining; i++) {
        struct worker *w = &ws->w[i];
        enum worker_life l = worker_life_get(w);
        int64_t in = 0;
        if (l == WORKER_LIFE_BACKOFF || l == WORKER_LIFE_FAILED)
            in = w->respawn_at_ms > now ? w->respawn_at_ms - now : 0;
        else if (l != WORKER_LIFE_STARTING && l != WORKER_LIFE_READY)
            continue;
        if (best < 0 || in < best)
            best = in;
    }
    return best;
}

/* The process is gone (status from waitpid): name the cause, hand its last records and its
 * jobs back, free its region, plan a respawn. */
static void worker_died(struct worker *w, int status)
{
    struct workers *ws = w->ws;
    char cause[256], tail[512], what[128], eid[20];
    bool was_ready = worker_life_get(w) == WORKER_LIFE_READY;
    long pid = (long)w->pid;
    uint32_t rnd;

    w->pid = 0; /* reaped: the number may be reused, never signal it again */
    if (w->err_fd >= 0)
        (void)err_read(w); /* its last words are all in the pipe now */
    line_flush(w, true);
    if (WIFSIGNALED(status) && w->watchdog_killed)
        snprintf(w->last_exit, sizeof(w->last_exit),
                 "was killed by the watchdog (signal %d): no progress for %u ms",
                 WTERMSIG(status), ws->cfg->watchdog_ms);
    else if (WIFSIGNALED(status))
        snprintf(w->last_exit, sizeof(w->last_exit), "was killed by signal %d (%s)",
                 WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(w->last_exit, sizeof(w->last_exit), "exited with status %d",
                 WEXITSTATUS(status));
    w->last_exit_at = wall_ms();
    tail_lines(w, 1, w->last_error, sizeof(w->last_error));
    tail_lines(w, CAUSE_LINES, tail, sizeof(tail));
    /* Clients get a short, stable cause and an error id; the id, PID and stderr tail go to
     * the log (and /health's details, behind the key), where an operator matches them. */
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
        rnd = (uint32_t)wall_ms() ^ (uint32_t)pid;
    snprintf(eid, sizeof(eid), "%08x", rnd);
    if (WIFSIGNALED(status) && w->watchdog_killed)
        snprintf(what, sizeof(what), "was stopped by the watchdog (no progress for %u ms)",
                 ws->cfg->watchdog_ms);
    else if (WIFSIGNALED(status))
        snprintf(what, sizeof(what), "crashed (signal %d)", WTERMSIG(status));
    else
        snprintf(what, sizeof(what), "exited (status %d)", WEXITSTATUS(status));
    snprintf(cause, sizeof(cause), "worker %u %s while running this request (error id %s)",
             w->id, what, eid);
    if (ws->stopping)
        log_info("worker %u (pid %ld) %s", w->id, pid, w->last_exit);
    else
        log_error("worker %u (pid %ld) %s [error id %s]%s%s", w->id, pid, w->last_exit, eid,
                  tail[0] ? "; its last stderr lines: " : "", tail);

    /* what it sent before it died counts (a DONE completes its job); then the rest is lost */
    worker_drain_dead(w);
    worker_lose_jobs(w, cause);
    supervisor_close_worker(w);
    plan_respawn(w, was_ready);
    check_stopped(ws);
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

/* ---- the watchdog ---- */

uint32_t supervisor_heartbeat_ms(const struct kiln_config *c)
{
    uint32_t ms = c->watchdog_ms / 4;
    return ms < 10 ? 10 : ms > 1000 ? 1000 : ms;
}

static void watchdog_arm(struct workers *ws)
{
    uint32_t ms = ws->cfg->watchdog_ms / 4;
    if (!ws->cfg->watchdog_ms || evtimer_pending(ws->ev_watchdog, NULL))
        return;
    ms = ms < 10 ? 10 : ms > 1000 ? 1000 : ms;
    struct timeval tv = {ms / 1000, (long)(ms % 1000) * 1000};
    evtimer_add(ws->ev_watchdog, &tv);
}

/* Runs while any worker process lives, busy or idle (an idle worker beats every
 * supervisor_heartbeat_ms): a worker stopped or wedged while idle is killed and replaced
 * before work is sent to it. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    struct workers *ws = arg;
    int64_t now = mono_ms();
    bool busy = false;
    (void)fd;
    (void)what;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (w->pid <= 0 || w->poisoned || w->watchdog_killed)
            continue;
        busy = true;
        if (worker_life_get(w) != WORKER_LIFE_READY || !w->reg.hdr) {
            w->hb_at_ms = now; /* loading a model is not a hang: count from READY */
            continue;
        }
        uint64_t hb = atomic_load_explicit(&w->reg.hdr->heartbeat, memory_order_relaxed);
        if (hb != w->hb_last) {
            w->hb_last = hb;
            w->hb_at_ms = now;
        } else if (now - w->hb_at_ms >= (int64_t)ws->cfg->watchdog_ms) {
            log_error("worker %u (pid %ld) made no progress for %lld ms with %u job(s) "
                      "(busy or idle, it beats at least every %u ms); killing it",
                      w->id, (long)w->pid, (long long)(now - w->hb_at_ms), w->used,
                      supervisor_heartbeat_ms(ws->cfg));
            w->watchdog_killed = true;
            (void)kill(w->pid, SIGKILL);
        }
    }
    if (busy)
        watchdog_arm(ws);
}

void supervisor_work_began(struct worker *w)
{
    w->hb_at_ms = mono_ms();
    w->hb_last =
        w->reg.hdr ? atomic_load_explicit(&w->reg.hdr->heartbeat, memory_order_relaxed) : 0;
    watchdog_arm(w->ws);
}

/* ---- shutdown ---- */

void supervisor_drain(struct workers *ws)
{
    ws->draining = true;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (w->ev_respawn)
            evtimer_del(w->ev_respawn);
        if (w->life == WORKER_LIFE_BACKOFF)
            w->life = WORKER_LIFE_STOPPED;
    }
}

static void on_stop_grace(evutil_socket_t fd, short what, void *arg)
{
    struct workers *ws = arg;
    (void)fd;
    (void)what;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (w->pid > 0) {
            log_warn("worker %u (pid %ld) ignored SIGTERM; killing it", w->id, (long)w->pid);
            (void)kill(w->pid, SIGKILL);
        }
    }
}

void supervisor_stop(struct workers *ws, int grace_ms, void (*done)(void *arg), void *arg)
{
    supervisor_drain(ws);
    ws->stopping = true;
    ws->on_stopped = done;
    ws->on_stopped_arg = arg;
    evtimer_del(ws->ev_watchdog);
    for (uint32_t i = 0; i < ws->n; i++)
        if (ws->w[i].pid > 0)
            (void)kill(ws->w[i].pid, SIGTERM);
    struct timeval tv = {grace_ms / 1000, (long)(grace_ms % 1000) * 1000};
    evtimer_add(ws->ev_stop, &tv);
    check_stopped(ws);
}

void supervisor_kill_all(struct workers *ws)
{
    supervisor_drain(ws);
    ws->stopping = true;
    for (uint32_t i = 0; i < ws->n; i++)
        if (ws->w[i].pid > 0)
            (void)kill(ws->w[i].pid, SIGKILL);
}

/* ---- /health ---- */

static json_t *iso_time(int64_t unix_ms)
{
    char buf[48];
    struct tm tm;
    time_t s = (time_t)(unix_ms / 1000);
    if (!unix_ms || !gmtime_r(&s, &tm))
        return json_null();
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(unix_ms % 1000));
    return json_string(buf);
}

static json_t *str_or_null(const char *s)
{
    return s[0] ? json_string(s) : json_null();
}

json_t *supervisor_health(struct workers *ws, bool details, int *http_status)
{
    json_t *j = json_object(), *arr = json_array();
    uint32_t running = 0, ready = 0, starting = 0;
    int64_t now = mono_ms();

    if (!j || !arr)
        goto fail;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        enum worker_life l = worker_life_get(w);
        uint32_t waiting = 0, active = 0, kv_blocks = 0, kv_used = 0, kv_cached = 0;
        json_t *o = json_object();
        if (!o)
            goto fail;
        if (w->reg.hdr) {
            waiting = atomic_load_explicit(&w->reg.hdr->waiting, memory_order_relaxed);
            active = atomic_load_explicit(&w->reg.hdr->running, memory_order_relaxed);
            kv_blocks = atomic_load_explicit(&w->reg.hdr->kv_blocks, memory_order_relaxed);
            kv_used = atomic_load_explicit(&w->reg.hdr->kv_used, memory_order_relaxed);
            kv_cached = atomic_load_explicit(&w->reg.hdr->kv_cached, memory_order_relaxed);
        }
        running += w->used;
        ready += l == WORKER_LIFE_READY && !w->poisoned;
        starting += l == WORKER_LIFE_STARTING;
        json_object_set_new(o, "id", json_integer(w->id));
        json_object_set_new(o, "state", json_string(supervisor_state_name(w)));
        json_object_set_new(o, "pid", w->pid > 0 ? json_integer(w->pid) : json_null());
        json_object_set_new(o, "running", json_integer(w->used));
        json_object_set_new(o, "waiting", json_integer(waiting));
        json_object_set_new(o, "active", json_integer(active));
        json_object_set_new(o, "restarts", json_integer(w->n_spawns ? w->n_spawns - 1 : 0));
        /* the KV cache: blocks held by running sequences and kept for reuse, of all */
        json_object_set_new(o, "cache", json_pack("{s:I, s:I, s:I, s:f}", "blocks",
                                                  (json_int_t)kv_blocks, "used",
                                                  (json_int_t)kv_used, "cached",
                                                  (json_int_t)kv_cached, "fill",
                                                  kv_blocks ? (double)(kv_used + kv_cached) /
                                                                  kv_blocks
                                                            : 0.0));
        if (l == WORKER_LIFE_BACKOFF || l == WORKER_LIFE_FAILED)
            json_object_set_new(o, "restart_in_ms",
                                json_integer(w->respawn_at_ms > now ? w->respawn_at_ms - now
                                                                    : 0));
        json_object_set_new(o, "last_exit", str_or_null(w->last_exit));
        json_object_set_new(o, "last_exit_at", iso_time(w->last_exit_at));
        json_object_set_new(o, "last_error", str_or_null(w->last_error));
        json_array_append_new(arr, o);
    }
    const char *status = ws->draining ? "draining"
                         : ready == ws->n ? "ok"
                         : ready         ? "degraded"
                                         : "unavailable";
    *http_status = !ws->draining && ready ? 200 : 503;
    if (!details) {
        json_decref(arr);
        status = ws->draining ? "draining" : ready ? "ok" : starting ? "loading" : "failed";
        json_object_set_new(j, "status", json_string(status));
        return j;
    }
    json_object_set_new(j, "status", json_string(status));
    json_object_set_new(j, "running", json_integer(running));
    json_object_set_new(j, "workers", arr);
    return j;
fail:
    json_decref(j);
    json_decref(arr);
    *http_status = 500;
    return NULL;
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

int supervisor_init(struct workers *ws)
{
    int err = find_exe(ws->exe, sizeof(ws->exe));
    if (err < 0) {
        log_error("cannot find kiln-worker beside kiln (%s): %s", ws->exe, strerror(-err));
        return err;
    }
    ws->ev_sigchld = evsignal_new(ws->base, SIGCHLD, on_sigchld, ws);
    ws->ev_watchdog = evtimer_new(ws->base, on_watchdog, ws);
    ws->ev_stop = evtimer_new(ws->base, on_stop_grace, ws);
    if (!ws->ev_sigchld || !ws->ev_watchdog || !ws->ev_stop ||
        event_add(ws->ev_sigchld, NULL) < 0)
        return -ENOMEM;
    return 0;
}

int supervisor_init_worker(struct worker *w)
{
    w->ev_respawn = evtimer_new(w->ws->base, on_respawn, w);
    return w->ev_respawn ? 0 : -ENOMEM;
}

void supervisor_free(struct workers *ws)
{
    for (uint32_t i = 0; i < ws->n; i++)
        if (ws->w[i].ev_respawn) {
            event_free(ws->w[i].ev_respawn);
            ws->w[i].ev_respawn = NULL;
        }
    if (ws->ev_sigchld)
        event_free(ws->ev_sigchld);
    if (ws->ev_watchdog)
        event_free(ws->ev_watchdog);
    if (ws->ev_stop)
        event_free(ws->ev_stop);
    ws->ev_sigchld = ws->ev_watchdog = ws->ev_stop = NULL;
}
