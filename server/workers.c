/* The worker table (workers.h): each worker's channel, job slots and records. The records
 * they send are drained from the loop, validated and routed to their job's owner; the records
 * sent to them go with one wake per loop turn. Processes are the supervisor's: it attaches
 * and detaches channels, and hears of a ready or poisoned worker through workers_events. */
#include "workers.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "config.h"
#include "front_model.h"
#include "kv_hash.h"
#include "log.h"
#include "notify.h"
#include "proto.h"
#include "shm_ring.h"

/* Records handled per wake before yielding to other events (the rest next turn). */
#define DRAIN_BUDGET 256

struct workers {
    struct event_base *base;
    const struct kiln_config *cfg;
    const struct workers_ops *ops;
    void *ctx;
    const struct workers_events *events; /* the supervisor's; NULL: none */
    void *events_ctx;
    struct event *ev_flush; /* wakes workers once per loop turn */
    bool flush_pending;
    unsigned char *scratch; /* WIRE_MAX_MSG bytes to encode into */
    uint64_t *keys;         /* (WIRE_MAX_PROMPT / KV_HASH_BLOCK) a prompt's block keys */
    struct proto_decoder *decoder; /* the workers' records: copied out of the ring, decoded */
    uint64_t next_seq;             /* submission counter for the slots */
    uint32_t n;
    struct worker w[];
};

uint32_t workers_count(const struct workers *ws)
{
    return ws->n;
}

struct worker *workers_get(struct workers *ws, uint32_t i)
{
    return i < ws->n ? &ws->w[i] : NULL;
}

void workers_subscribe(struct workers *ws, const struct workers_events *ev, void *ctx)
{
    ws->events = ev;
    ws->events_ctx = ctx;
}

void workers_kick(struct workers *ws)
{
    ws->ops->on_capacity(ws->ctx);
}

bool worker_is_ready(struct worker *w)
{
    struct workers *ws = w->ws;
    if (!w->ready && w->attached && w->reg.hdr &&
        atomic_load_explicit(&w->reg.hdr->state, memory_order_acquire) == WORKER_STATE_READY) {
        w->ready = true;
        if (ws->events && ws->events->ready)
            ws->events->ready(ws->events_ctx, w);
    }
    return w->ready;
}

bool worker_alive(struct worker *w)
{
    return w->attached && !w->poisoned;
}

/* Whether w may be given a job now (a worker a reload drains takes none). */
static bool worker_serving(struct worker *w)
{
    return worker_alive(w) && !w->retiring && worker_is_ready(w) &&
           w->used < w->ws->cfg->max_sequences;
}

/* Only READY workers get jobs: one still loading may hang there, and the watchdog watches
 * READY workers only, so a job handed to it would wait forever; in the front's queue it can
 * still be pruned, time out or be failed by the queue's no-worker bound. */
struct worker *workers_pick_skip(struct workers *ws, uint64_t skip)
{
    struct worker *best = NULL;
    for (uint32_t i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (i < 64 && (skip & ((uint64_t)1 << i)))
            continue;
        if (!worker_serving(w))
            continue;
        if (!best || w->used < best->used)
            best = w;
    }
    return best;
}

struct worker *workers_pick_for(struct workers *ws, uint64_t skip,
                                const struct front_model *model, const uint32_t *prompt,
                                uint32_t n, enum prefix_route_reason *why)
{
    struct prefix_route_cand cand[CONFIG_MAX_WORKERS];
    struct worker *who[CONFIG_MAX_WORKERS];
    uint32_t n_keys = prefix_index_keys(prompt, n, ws->keys, WIRE_MAX_PROMPT / KV_HASH_BLOCK);
    int k = 0;

    for (uint32_t i = 0; i < ws->n && k < CONFIG_MAX_WORKERS; i++) {
        struct worker *w = &ws->w[i];
        if (i < 64 && (skip & ((uint64_t)1 << i)))
            continue;
        if (w->model != model || !worker_serving(w))
            continue;
        cand[k].used = w->used;
        cand[k].match = w->prefix ? prefix_index_match(w->prefix, ws->keys, n_keys) : 0;
        who[k++] = w;
    }
    if (k == 0)
        return NULL;
    return who[prefix_route(cand, k, prefix_route_slack(ws->cfg->max_sequences), why)];
}

struct worker *workers_pick(struct workers *ws)
{
    return workers_pick_skip(ws, 0);
}

bool workers_any_alive(struct workers *ws)
{
    for (uint32_t i = 0; i < ws->n; i++)
        if (worker_alive(&ws->w[i]))
            return true;
    return false;
}

bool workers_any_ready(struct workers *ws)
{
    for (uint32_t i = 0; i < ws->n; i++)
        if (worker_alive(&ws->w[i]) && worker_is_ready(&ws->w[i]))
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
    int rc = shm_ring_push(&w->reg.to_worker, w->ws->scratch, (uint32_t)len);
    if (rc == 0)
        schedule_flush(w);
    return rc;
}

static int worker_push_bare(struct worker *w, enum msg_type type, uint64_t req_id)
{
    struct proto_msg m;
    memset(&m, 0, sizeof(m));
    m.type = type;
    m.req_id = req_id;
    return worker_push(w, &m);
}

static int worker_push_cancel(struct worker *w, uint64_t req_id)
{
    return worker_push_bare(w, MSG_TYPE_CANCEL, req_id);
}

/* Send the slot's wanted pause state if the worker does not have it yet. Returns 0, or
 * -errno when the ring is full (retried at the next flush, as cancels are). */
static int push_pause(struct worker *w, struct worker_slot *sl)
{
    int rc;
    if (sl->pause_want == sl->pause_sent)
        return 0;
    rc = worker_push_bare(w, sl->pause_want ? MSG_TYPE_PAUSE : MSG_TYPE_RESUME, sl->req_id);
    if (rc == 0)
        sl->pause_sent = sl->pause_want;
    return rc;
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
        if (!worker_alive(w))
            continue;
        for (uint32_t s = 0; s < ws->cfg->max_sequences; s++) {
            struct worker_slot *sl = &w->slots[s];
            if (sl->req_id && sl->cancel_pending && worker_push_cancel(w, sl->req_id) == 0)
                sl->cancel_pending = false;
            if (sl->req_id && !sl->cancel_pending)
                (void)push_pause(w, sl);
        }
        if (w->wake_pending) {
            w->wake_pending = false;
            int rc = notify_wake(&w->reg.to_worker, w->wake_fd);
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
    free_slot->seq = ++w->ws->next_seq;
    free_slot->cancel_pending = false;
    free_slot->pause_want = free_slot->pause_sent = false;
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
    if (!worker_alive(w))
        return 0; /* its death ends the job */
    if (worker_push_cancel(w, req_id) < 0) {
        sl->cancel_pending = true;
        schedule_flush(w);
    }
    return 0;
}

int worker_pause(struct worker *w, uint64_t req_id, bool pause)
{
    struct worker_slot *sl = find_slot(w, req_id);
    if (!sl)
        return -ENOENT;
    if (!worker_alive(w))
        return 0;
    sl->pause_want = pause;
    if (push_pause(w, sl) < 0)
        schedule_flush(w);
    return 0;
}

/* ---- receiving ---- */

static void release_slot(struct worker *w, struct worker_slot *sl)
{
    sl->req_id = 0;
    sl->owner = NULL;
    sl->cancel_pending = false;
    sl->pause_want = sl->pause_sent = false;
    w->used--;
}

/* A CACHE record: the worker's KV cache indexed or evicted these blocks. */
static void apply_cache(struct worker *w, const struct proto_msg *m)
{
    if (!w->prefix)
        return;
    if (m->u.cache.reset)
        prefix_index_clear(w->prefix);
    for (uint32_t i = 0; i < m->u.cache.n; i++) {
        uint64_t e = m->u.cache.ev[i];
        if (!(e & 1)) {
            prefix_index_remove(w->prefix, e + 1);
        } else if (prefix_index_add(w->prefix, e) < 0) {
            log_warn("worker %u: out of memory for its prefix index; routing forgets it", w->id);
            prefix_index_clear(w->prefix);
            return;
        }
    }
}

/* One record: validate, route. Returns 0, or -EPROTO when the worker must be stopped. */
static int handle_record(struct worker *w, const void *buf, uint32_t len, bool *capacity)
{
    struct proto_msg m;
    /* A private copy is decoded (the worker can rewrite the ring meanwhile), and no prompt
     * buffer is given: a JOB from a worker is rejected, never written anywhere. */
    int rc = proto_decoder_decode(w->ws->decoder, buf, len, &m, NULL, 0);
    if (rc < 0) {
        log_error("worker %u: malformed record of %u bytes rejected", w->id, len);
        return -EPROTO;
    }
    if (m.type == MSG_TYPE_CACHE) {
        apply_cache(w, &m);
        return 0;
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

/* w sent what cannot be trusted: read no more of it, give it no more jobs, and tell the
 * supervisor, which kills the process (its detach does the rest). */
static void poison(struct worker *w, const char *why)
{
    struct workers *ws = w->ws;
    w->poisoned = true;
    if (w->ev_notify)
        event_del(w->ev_notify);
    if (ws->events && ws->events->poisoned)
        ws->events->poisoned(ws->events_ctx, w, why);
}

static bool cancel_pending(const struct worker *w)
{
    if (!w->slots)
        return false;
    for (uint32_t s = 0; s < w->ws->cfg->max_sequences; s++)
        if (w->slots[s].req_id && w->slots[s].cancel_pending)
            return true;
    return false;
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
    notify_end_sleep(&w->reg.to_front);
    /* The worker writes its eventfd once it is READY: jobs that waited for it go now. */
    if (!w->ready && worker_is_ready(w))
        capacity = true;
    for (;;) {
        const void *rec;
        uint32_t len;
        int rc, rc2;
        while (budget > 0 && (rc = shm_ring_peek(&w->reg.to_front, &rec, &len)) == 0) {
            budget--;
            w->n_records++;
            rc = handle_record(w, rec, len, &capacity);
            if (rc < 0) {
                poison(w, "protocol violation");
                goto out;
            }
            shm_ring_pop(&w->reg.to_front);
            if (!worker_alive(w))
                goto out;
        }
        /* Room was made: a worker that found the ring full sleeps until told (one write per
         * drain, and only when it said it waits). */
        if ((rc2 = notify_wake_producer(&w->reg.to_front, w->wake_fd)) < 0)
            log_warn("worker %u: waking it for room failed: %s", w->id, strerror(-rc2));
        if (budget > 0 && rc == -EPROTO) {
            poison(w, "corrupt ring");
            goto out;
        }
        if (budget == 0) {
            /* more next turn, after the sockets had theirs; no eventfd write is needed */
            event_active(w->ev_notify, EV_READ, 0);
            goto out;
        }
        if (notify_prepare_sleep(&w->reg.to_front))
            break;
    }
out:
    /* the worker ran, so it took records off its ring: cancels that found it full go again */
    if (worker_alive(w) && cancel_pending(w))
        schedule_flush(w);
    if (capacity)
        ws->ops->on_capacity(ws->ctx);
}

/* Close w's channel (kept: slots, counters, the prefix index's memory). */
static void close_channel(struct worker *w)
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
    w->attached = w->ready = w->poisoned = false;
    w->wake_pending = false;
}

int worker_attach(struct worker *w, struct shm_region *reg, int wake_fd, int notify_fd)
{
    struct event *ev = event_new(w->ws->base, notify_fd, EV_READ | EV_PERSIST, on_notify, w);
    if (!ev)
        return -ENOMEM;
    close_channel(w);
    w->reg = *reg;
    memset(reg, 0, sizeof(*reg));
    reg->fd = -1;
    w->wake_fd = wake_fd;
    w->notify_fd = notify_fd;
    w->ev_notify = ev;
    w->attached = true;
    w->retiring = false; /* a new process: a reload that drained the old one is past it */
    event_add(w->ev_notify, NULL);
    /* say we sleep; if the worker was quicker, read at once */
    if (!notify_prepare_sleep(&w->reg.to_front))
        event_active(w->ev_notify, EV_READ, 0);
    return 0;
}

/* Route every record still in w's ring to its owner (the process is dead, so nothing more
 * comes; a poisoned worker's ring is not read). */
static void drain_dead(struct worker *w)
{
    const void *rec;
    uint32_t len;
    bool capacity = false;
    int rc;

    if (w->poisoned || !w->reg.to_front.shared)
        return;
    /* the process is gone, so the ring holds only whole records and no more come */
    while ((rc = shm_ring_peek(&w->reg.to_front, &rec, &len)) == 0) {
        w->n_records++;
        if (handle_record(w, rec, len, &capacity) < 0) {
            w->poisoned = true;
            return;
        }
        shm_ring_pop(&w->reg.to_front);
    }
    if (rc == -EPROTO)
        log_error("worker %u: corrupt ring; its last records are discarded", w->id);
}

/* Release w's remaining slots and hand their owners to on_job_lost, newest job first. */
static void lose_jobs(struct worker *w, const char *cause)
{
    struct workers *ws = w->ws;
    if (w->prefix) /* its cache died with it */
        prefix_index_clear(w->prefix);
    for (;;) {
        /* newest first: the request layer puts each back at the head of the queue */
        struct worker_slot *newest = NULL;
        for (uint32_t s = 0; s < ws->cfg->max_sequences; s++)
            if (w->slots[s].req_id && (!newest || w->slots[s].seq > newest->seq))
                newest = &w->slots[s];
        if (!newest)
            break;
        void *owner = newest->owner;
        release_slot(w, newest);
        ws->ops->on_job_lost(ws->ctx, w, owner, cause);
    }
}

void worker_detach(struct worker *w, const char *cause)
{
    if (!w->attached)
        return;
    /* no more jobs for it, whatever the callbacks below do */
    w->attached = false;
    if (w->ev_notify)
        event_del(w->ev_notify);
    /* what it sent before it died counts (a DONE completes its job); then the rest is lost */
    drain_dead(w);
    lose_jobs(w, cause);
    close_channel(w);
}

/* Set up the table's next entry (detached) for model. Returns it, or NULL when out of
 * memory (nothing kept). */
static struct worker *slot_add(struct workers *ws, struct front_model *model)
{
    struct worker *w = &ws->w[ws->n];
    memset(w, 0, sizeof(*w));
    w->ws = ws;
    w->id = ws->n;
    w->wake_fd = w->notify_fd = -1;
    w->reg.fd = -1;
    w->slots = calloc(ws->cfg->max_sequences, sizeof(*w->slots));
    w->prefix = prefix_index_create();
    if (!w->slots || !w->prefix) {
        free(w->slots);
        prefix_index_destroy(w->prefix);
        return NULL;
    }
    w->model = front_model_ref(model);
    ws->n++;
    return w;
}

/* Free w's memory (detached). */
static void slot_free(struct worker *w)
{
    close_channel(w);
    free(w->slots);
    w->slots = NULL;
    prefix_index_destroy(w->prefix);
    w->prefix = NULL;
    front_model_put(w->model);
    w->model = NULL;
}

struct workers *workers_create(struct event_base *base, const struct kiln_config *cfg,
                               struct front_model *model, const struct workers_ops *ops,
                               void *ctx)
{
    /* room for every worker a reload may add */
    struct workers *ws = calloc(1, sizeof(*ws) + CONFIG_MAX_WORKERS * sizeof(struct worker));
    if (!ws)
        return NULL;
    ws->base = base;
    ws->cfg = cfg;
    ws->ops = ops;
    ws->ctx = ctx;
    ws->scratch = malloc(WIRE_MAX_MSG);
    ws->keys = malloc((WIRE_MAX_PROMPT / KV_HASH_BLOCK) * sizeof(uint64_t));
    ws->decoder = proto_decoder_create();
    ws->ev_flush = event_new(base, -1, 0, on_flush, ws);
    if (!ws->scratch || !ws->keys || !ws->decoder || !ws->ev_flush)
        goto fail;
    for (uint32_t i = 0; i < cfg->workers; i++)
        if (!slot_add(ws, model))
            goto fail;
    return ws;
fail:
    workers_destroy(ws);
    return NULL;
}

struct worker *workers_add(struct workers *ws, struct front_model *model)
{
    return ws->n < CONFIG_MAX_WORKERS ? slot_add(ws, model) : NULL;
}

void workers_drop_last(struct workers *ws)
{
    if (ws->n > 0 && !ws->w[ws->n - 1].attached)
        slot_free(&ws->w[--ws->n]);
}

void worker_set_model(struct worker *w, struct front_model *model)
{
    struct front_model *old = w->model;
    w->model = front_model_ref(model);
    front_model_put(old);
}

void worker_set_retiring(struct worker *w, bool retiring)
{
    w->retiring = retiring;
}

void workers_destroy(struct workers *ws)
{
    if (!ws)
        return;
    for (uint32_t i = 0; i < ws->n; i++)
        slot_free(&ws->w[i]);
    if (ws->ev_flush)
        event_free(ws->ev_flush);
    free(ws->scratch);
    free(ws->keys);
    proto_decoder_destroy(ws->decoder);
    free(ws);
}
