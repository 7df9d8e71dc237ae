/* The rolling restart of a reload (roll.h): a timer steps through add, drain, replace and
 * remove, one worker at a time, and rolls back to the settings it started from when a new
 * worker fails before it is ready. */
#include "roll.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "api.h"
#include "config.h"
#include "front_model.h"
#include "log.h"
#include "request.h"
#include "supervisor.h"
#include "workers.h"

/* How often the roll looks at its worker. */
#define ROLL_TICK_MS 20
/* A worker told to stop (SIGTERM) gets this long before SIGKILL. */
#define ROLL_KILL_MS 3000

enum roll_step {
    ROLL_PICK,  /* choose the next worker to add, replace or remove */
    ROLL_DRAIN, /* w takes no new jobs; waiting for its jobs to end (or --drain-ms) */
    ROLL_WAIT,  /* waiting for w's new process to be ready (or, when removing, to be gone) */
};

struct roll {
    struct front *f;
    struct event *ev_tick;
    struct supervisor_view *v;   /* the workers' processes, taken at each tick */
    bool active;
    bool rolling_back;
    bool surged;                 /* this roll added its extra worker */
    /* the target */
    struct front_model *model;   /* one reference while active */
    uint32_t threads, n;
    /* the settings the roll started from: a failure rolls back to them */
    struct front_model *base;    /* one reference while active */
    uint32_t base_threads, base_n;
    /* the step under way */
    enum roll_step step;
    struct worker *w;
    bool remove;                 /* the step removes w rather than restarting it */
    bool killed;                 /* SIGKILL sent to w's old process */
    long old_pid;                /* w's process when it was told to stop (0: none) */
    uint64_t spawns0, ready0;    /* w's counters when it was told to stop or was added */
    int64_t deadline_ms;         /* ROLL_DRAIN: end of --drain-ms; ROLL_WAIT: SIGKILL */
    /* what /health and the service status say */
    const char *state;           /* "idle", "rolling", "done", "failed" */
    char target_name[128];
    char error[384];
    int64_t at_ms;               /* unix ms of the last change of state */
    uint32_t count;              /* reloads that asked for a roll (started or refused) */
    uint64_t signals;            /* reloads (SIGHUPs) begun */
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

static void set_state(struct roll *rl, const char *state)
{
    rl->state = state;
    rl->at_ms = wall_ms();
}

/* The threads worker 0 runs with (the others' when a roll is over), else --threads. */
static uint32_t threads_now(struct roll *rl)
{
    struct supervisor_view *v = supervisor_view(rl->f->sup);
    uint32_t t = v && v->n ? v->w[0].threads : rl->f->cfg->threads;
    free(v);
    return t;
}

/* New requests bind to m from now on. */
static void switch_current(struct front *f, struct front_model *m)
{
    if (f->model == m)
        return;
    log_info("reload: new requests now go to model %s", m->name);
    m->closed = false;
    front_model_put(f->model);
    f->model = front_model_ref(m);
}

/* The processes' side of worker w, from this tick's view. */
static const struct worker_view *view_of(const struct roll *rl, const struct worker *w)
{
    return w->id < rl->v->n ? &rl->v->w[w->id] : NULL;
}

static bool matches(const struct roll *rl, const struct worker *w)
{
    const struct worker_view *v = view_of(rl, w);
    return w->model == rl->model && v && v->threads == rl->threads &&
           v->watchdog_ms == rl->f->cfg->watchdog_ms;
}

/* Whether no worker but w of w's model still takes (or will take) its jobs. */
static bool last_of_model(const struct roll *rl, const struct worker *w)
{
    struct workers *ws = rl->f->workers;
    for (uint32_t i = 0; i < workers_count(ws); i++) {
        struct worker *o = workers_get(ws, i);
        const struct worker_view *v = view_of(rl, o);
        if (o != w && o->model == w->model && v && !v->draining)
            return false;
    }
    return true;
}

static uint32_t queued_for(struct front *f, const struct front_model *m)
{
    struct job *j;
    uint32_t n = 0;
    TAILQ_FOREACH(j, &f->queue.waiting, link_queue)
        n += j->req->model == m;
    return n;
}

static void stop_tick(struct roll *rl)
{
    event_del(rl->ev_tick);
}

static void finish(struct roll *rl, const char *state)
{
    rl->active = false;
    rl->w = NULL;
    stop_tick(rl);
    if (state)
        set_state(rl, state);
    front_model_put(rl->model);
    front_model_put(rl->base);
    rl->model = rl->base = NULL;
}

/* Start draining w (no new jobs). Returns false when it must wait: w runs the last of a
 * model that queued requests still wait for, which it serves first. */
static bool begin_drain(struct roll *rl, struct worker *w, bool remove)
{
    struct front *f = rl->f;
    struct front_model *m = w->model;
    const struct worker_view *v = view_of(rl, w);
    if (m != rl->model && v && v->life == WORKER_LIFE_READY && last_of_model(rl, w)) {
        if (!m->closed) {
            log_info("reload: worker %u serves the last of model %s: no new request binds to "
                     "it; it drains once none waits for it", w->id, m->name);
            m->closed = true;
            if (f->model == m)
                switch_current(f, rl->model);
        }
        if (queued_for(f, m) > 0)
            return false;
    }
    worker_set_retiring(w, true);
    rl->w = w;
    rl->remove = remove;
    rl->step = ROLL_DRAIN;
    rl->deadline_ms = mono_ms() + f->cfg->drain_ms;
    log_info("reload: draining worker %u (%u job(s) running) to %s it", w->id, w->used,
             remove ? "remove" : "restart");
    return true;
}

static void add_worker(struct roll *rl, const char *why)
{
    int i = supervisor_add(rl->f->sup, rl->model, rl->threads);
    struct worker *w = i >= 0 ? workers_get(rl->f->workers, (uint32_t)i) : NULL;
    if (!w) {
        snprintf(rl->error, sizeof(rl->error), "could not start another worker");
        log_error("reload: %s; stopped where it was", rl->error);
        finish(rl, "failed");
        return;
    }
    log_info("reload: worker %u added (%s) with model %s", w->id, why, rl->model->name);
    rl->w = w;
    rl->remove = false;
    rl->killed = false;
    rl->old_pid = 0;
    rl->spawns0 = 0;
    rl->ready0 = 0;
    rl->step = ROLL_WAIT;
}

static void pick(struct roll *rl)
{
    struct workers *ws = rl->f->workers;
    uint32_t n = workers_count(ws);
    struct worker *mismatched = NULL;

    if (n < rl->n) {
        add_worker(rl, "--workers grew");
        return;
    }
    for (uint32_t i = 0; i < n && !mismatched; i++)
        if (!matches(rl, workers_get(ws, i)))
            mismatched = workers_get(ws, i);
    if (mismatched) {
        struct worker *last = workers_get(ws, n - 1);
        if (!rl->surged && n == rl->n && n < CONFIG_MAX_WORKERS) {
            rl->surged = true; /* one extra first, so as many serve while one restarts */
            add_worker(rl, "the extra one of the roll");
        } else if (!rl->surged && n == rl->n) {
            rl->surged = true;
            log_info("reload: %u workers, the most: no room for an extra one; each is "
                     "replaced in place (%u serve meanwhile)", n, n - 1);
            (void)begin_drain(rl, mismatched, false);
        } else if (n > rl->n && !matches(rl, last)) {
            (void)begin_drain(rl, last, true);
        } else {
            (void)begin_drain(rl, mismatched, false);
        }
        return;
    }
    if (n > rl->n) {
        (void)begin_drain(rl, workers_get(ws, n - 1), true);
        return;
    }
    log_info("reload: done: %u worker(s) run model %s%s", n, rl->model->name,
             rl->rolling_back ? " (rolled back)" : "");
    finish(rl, rl->rolling_back ? "failed" : "done");
}

static void drained(struct roll *rl)
{
    struct worker *w = rl->w;
    const struct worker_view *v = view_of(rl, w);
    if (w->used > 0 && mono_ms() < rl->deadline_ms)
        return;
    if (w->used > 0)
        log_warn("reload: worker %u still runs %u job(s) after --drain-ms; they end now", w->id,
                 w->used);
    rl->old_pid = v ? v->pid : 0;
    rl->spawns0 = v ? v->spawns : 0;
    rl->ready0 = v ? v->readies : 0;
    rl->killed = false;
    rl->deadline_ms = mono_ms() + ROLL_KILL_MS;
    rl->step = ROLL_WAIT;
    if (!rl->remove)
        worker_set_model(w, rl->model);
    supervisor_retire(rl->f->sup, w->id, !rl->remove, rl->threads, false);
}

/* w's new process died before it was ready: roll back to the settings the roll began from
 * (their workers never stopped, except those already moved). */
static void start_failed(struct roll *rl, struct worker *w, const struct worker_view *v)
{
    const char *why = v->last_error[0] ? v->last_error : v->last_exit;
    snprintf(rl->error, sizeof(rl->error), "worker %u could not start model %.120s: %.200s",
             w->id, w->model->path, why[0] ? why : "it was not ready");
    if (rl->rolling_back) {
        log_error("reload: %s; rolling back failed too: stopped where it was", rl->error);
        finish(rl, "failed");
        return;
    }
    log_error("reload: %s; rolling back to model %s", rl->error, rl->base->name);
    rl->rolling_back = true;
    rl->surged = true;
    front_model_put(rl->model);
    rl->model = front_model_ref(rl->base);
    rl->model->closed = false;
    rl->threads = rl->base_threads;
    rl->n = rl->base_n;
    rl->step = ROLL_PICK;
    set_state(rl, "rolling");
}

static void wait_worker(struct roll *rl)
{
    struct worker *w = rl->w;
    const struct worker_view *v = view_of(rl, w);
    if (!v)
        return;
    if (rl->old_pid > 0 && v->pid == rl->old_pid) { /* the old process is still stopping */
        if (!rl->killed && mono_ms() >= rl->deadline_ms) {
            log_warn("reload: worker %u (pid %ld) did not stop in %d ms; killing it", w->id,
                     v->pid, ROLL_KILL_MS);
            rl->killed = true;
            supervisor_retire(rl->f->sup, w->id, !rl->remove, rl->threads, true);
        }
        return;
    }
    if (rl->remove) {
        uint32_t id = w->id;
        if (id + 1 == workers_count(rl->f->workers))
            supervisor_drop_last(rl->f->sup);
        log_info("reload: worker %u removed", id);
        rl->w = NULL;
        rl->step = ROLL_PICK;
        return;
    }
    enum worker_life l = v->life;
    if (v->readies > rl->ready0) {
        log_info("reload: worker %u ready with model %s", w->id, w->model->name);
        if (w->model == rl->model)
            switch_current(rl->f, rl->model);
        rl->step = ROLL_PICK;
        return;
    }
    if (l == WORKER_LIFE_BACKOFF || l == WORKER_LIFE_FAILED || v->spawns > rl->spawns0 + 1)
        start_failed(rl, w, v);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct roll *rl = arg;
    (void)fd;
    (void)what;
    if (!rl->active)
        return;
    if (supervisor_draining(rl->f->sup)) { /* shutting down: the workers stop anyway */
        finish(rl, NULL);
        return;
    }
    /* a step that ends at once lets the next begin in the same tick */
    for (int i = 0; i < 4 && rl->active; i++) {
        free(rl->v);
        if (!(rl->v = supervisor_view(rl->f->sup)))
            return; /* out of memory: the next tick */
        enum roll_step before = rl->step;
        struct worker *wbefore = rl->w;
        switch (rl->step) {
        case ROLL_PICK:
            pick(rl);
            break;
        case ROLL_DRAIN:
            drained(rl);
            break;
        case ROLL_WAIT:
            wait_worker(rl);
            break;
        }
        if (rl->step == before && rl->w == wbefore)
            break;
    }
    free(rl->v);
    rl->v = NULL;
}

struct roll *roll_create(struct front *f)
{
    struct roll *rl = calloc(1, sizeof(*rl));
    if (!rl)
        return NULL;
    rl->f = f;
    rl->state = "idle";
    rl->ev_tick = event_new(f->base, -1, EV_PERSIST, on_tick, rl);
    if (!rl->ev_tick) {
        free(rl);
        return NULL;
    }
    return rl;
}

void roll_free(struct roll *rl)
{
    if (!rl)
        return;
    finish(rl, NULL);
    event_free(rl->ev_tick);
    free(rl);
}

void roll_start(struct roll *rl, struct front_model *model, uint32_t threads, uint32_t n)
{
    struct workers *ws = rl->f->workers;
    if (!rl->active) {
        rl->base = front_model_ref(rl->f->model);
        rl->base_threads = threads_now(rl);
        rl->base_n = workers_count(ws);
        rl->surged = false;
        rl->step = ROLL_PICK;
        rl->w = NULL;
    } else {
        front_model_put(rl->model);
    }
    rl->count++;
    rl->active = true;
    rl->rolling_back = false;
    rl->model = model;
    model->closed = false;
    rl->threads = threads;
    rl->n = n;
    rl->error[0] = '\0';
    snprintf(rl->target_name, sizeof(rl->target_name), "%s", model->name);
    set_state(rl, "rolling");
    log_info("reload: rolling the workers onto model %s, %u thread(s), %u worker(s)",
             model->name, threads, n);
    struct timeval tv = {0, ROLL_TICK_MS * 1000};
    event_add(rl->ev_tick, &tv);
    event_active(rl->ev_tick, EV_TIMEOUT, 0);
}

bool roll_active(const struct roll *rl)
{
    return rl && rl->active;
}

void roll_reload_begin(struct roll *rl)
{
    rl->signals++;
    if (!rl->active) { /* /health's reload tells this one from now on */
        rl->error[0] = '\0';
        rl->target_name[0] = '\0';
        set_state(rl, "idle");
    }
}

void roll_refused(struct roll *rl, const char *why)
{
    snprintf(rl->error, sizeof(rl->error), "%s", why);
    if (!rl->active)
        set_state(rl, "failed");
}

void roll_failed(struct roll *rl, const char *why)
{
    rl->count++;
    snprintf(rl->error, sizeof(rl->error), "%s", why);
    if (!rl->active)
        set_state(rl, "failed");
}

struct front_model *roll_target(struct roll *rl, uint32_t *threads, uint32_t *n)
{
    if (rl->active) {
        *threads = rl->threads;
        *n = rl->n;
        return rl->model;
    }
    *threads = threads_now(rl);
    *n = workers_count(rl->f->workers);
    return rl->f->model;
}

static json_t *iso_time(int64_t unix_ms)
{
    char buf[48];
    struct tm tm;
    time_t s = (time_t)(unix_ms / 1000);
    if (!unix_ms || !gmtime_r(&s, &tm))
        return json_null();
    size_t k = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, sizeof(buf) - k, ".%03dZ", (int)(unix_ms % 1000));
    return json_string(buf);
}

json_t *roll_health(struct roll *rl)
{
    return json_pack("{s:s, s:s, s:o, s:o, s:I, s:I}", "state", rl->state, "model",
                     rl->target_name[0] ? rl->target_name : rl->f->model->name, "error",
                     rl->error[0] ? json_string(rl->error) : json_null(), "at",
                     iso_time(rl->at_ms), "count", (json_int_t)rl->count, "signals",
                     (json_int_t)rl->signals);
}

void roll_status(struct roll *rl, char *buf, size_t len)
{
    if (rl->active)
        snprintf(buf, len, "; reload: %s to model %s", rl->rolling_back ? "rolling back" : "rolling",
                 rl->model->name);
    else if (strcmp(rl->state, "failed") == 0)
        snprintf(buf, len, "; reload failed: %s", rl->error);
    else
        buf[0] = '\0';
}

struct front_model *roll_find_model(struct front *f, const char *name)
{
    struct workers *ws = f->workers;
    if (strcmp(f->model->name, name) == 0)
        return f->model;
    for (uint32_t i = 0; ws && i < workers_count(ws); i++) {
        struct front_model *m = workers_get(ws, i)->model;
        if (m && !m->closed && strcmp(m->name, name) == 0)
            return m;
    }
    return NULL;
}

json_t *roll_models(struct front *f)
{
    struct workers *ws = f->workers;
    const struct front_model *seen[CONFIG_MAX_WORKERS + 1];
    uint32_t n_seen = 0;
    json_t *data = json_array();
    for (uint32_t i = 0; data && i <= workers_count(ws); i++) {
        /* the current model first, then each other model a worker runs */
        const struct front_model *m = i == 0 ? f->model : workers_get(ws, i - 1)->model;
        bool dup = !m || m->closed;
        for (uint32_t k = 0; k < n_seen && !dup; k++)
            dup = strcmp(seen[k]->name, m->name) == 0;
        if (dup)
            continue;
        seen[n_seen++] = m;
        json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", m->name,
                                              "object", "model", "created",
                                              (json_int_t)f->started_at, "owned_by", "kiln",
                                              "context_length", (json_int_t)m->max_context));
    }
    return data;
}
