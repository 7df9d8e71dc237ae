/* The waiting queue: FIFO of jobs, bounded, dispatched to the least-loaded READY worker
 * with a free slot. A job that a worker's full ring turns away goes to another worker, or
 * stays at the head until the next capacity event (a final record or a worker coming up). */
#include "queue.h"

#include <errno.h>
#include <string.h>

#include <event2/event.h>

#include "api.h"
#include "front_model.h"
#include "log.h"
#include "proto.h"
#include "request.h"
#include "supervisor.h"
#include "workers.h"

static void on_no_worker(evutil_socket_t fd, short what, void *arg);

int queue_init(struct queue *q, struct front *f, uint32_t max_waiting)
{
    memset(q, 0, sizeof(*q));
    q->f = f;
    q->max = max_waiting;
    TAILQ_INIT(&q->waiting);
    q->ev_no_worker = evtimer_new(f->base, on_no_worker, q);
    return q->ev_no_worker ? 0 : -ENOMEM;
}

void queue_free(struct queue *q)
{
    if (q->ev_no_worker)
        event_free(q->ev_no_worker);
    q->ev_no_worker = NULL;
}

void queue_remove(struct queue *q, struct job *j)
{
    if (j->state != JOB_QUEUED)
        return;
    TAILQ_REMOVE(&q->waiting, j, link_queue);
    j->state = JOB_NEW;
    q->n--;
}

/* Drop queued requests whose client already left. Failing one ends its request, which takes
 * its other jobs out of the queue, so the scan starts over after each. */
static void queue_prune(struct queue *q)
{
    struct job *j;
again:
    TAILQ_FOREACH(j, &q->waiting, link_queue) {
        if (!request_client_alive(j->req)) {
            log_debug("request %llu: client left while queued; dropped",
                      (unsigned long long)j->req->req_id);
            queue_remove(q, j);
            request_fail(j->req, 499, "invalid_request_error", "client closed the connection",
                         NULL, NULL);
            goto again;
        }
    }
}

/* Nothing queued can be served (soon enough). */
static void queue_fail_all(struct queue *q, const char *why)
{
    struct job *j;
    while ((j = TAILQ_FIRST(&q->waiting))) {
        queue_remove(q, j);
        request_fail(j->req, 503, "server_error", why, NULL, "no_worker");
    }
}

static void on_no_worker(evutil_socket_t fd, short what, void *arg)
{
    struct queue *q = arg;
    (void)fd;
    (void)what;
    if (q->n > 0 && !workers_any_ready(q->f->workers)) {
        log_warn("no worker could take jobs for %d ms; failing %u queued request(s)",
                 QUEUE_NO_WORKER_MS, q->n);
        queue_fail_all(q, "no worker became available in time (see /health)");
    }
}

/* Start the bound on waiting while requests wait and no worker can take them (none READY:
 * jobs go only to READY workers, and one may hang while loading); stop it otherwise. */
static void queue_watch(struct queue *q)
{
    if (q->n > 0 && !workers_any_ready(q->f->workers)) {
        struct timeval tv = {QUEUE_NO_WORKER_MS / 1000, (QUEUE_NO_WORKER_MS % 1000) * 1000};
        if (!evtimer_pending(q->ev_no_worker, NULL))
            evtimer_add(q->ev_no_worker, &tv);
    } else {
        evtimer_del(q->ev_no_worker);
    }
}

int queue_admit(struct queue *q, struct job *j)
{
    if (!workers_any_alive(q->f->workers) || supervisor_draining(q->f->sup))
        return -ENODEV;
    if (q->n >= q->max) {
        queue_prune(q);
        if (request_over(j->req))
            return -ECANCELED; /* the prune ended j's own request: its client left */
    }
    if (q->n >= q->max && !(q->n == 0 && workers_pick(q->f->workers))) {
        q->n_refused++;
        return -EBUSY;
    }
    TAILQ_INSERT_TAIL(&q->waiting, j, link_queue);
    j->state = JOB_QUEUED;
    q->n++;
    queue_dispatch(q);
    return 0;
}

void queue_push_head(struct queue *q, struct job *j)
{
    TAILQ_INSERT_HEAD(&q->waiting, j, link_queue);
    j->state = JOB_QUEUED;
    q->n++;
}

/* Whether m is one of the n models in seen. */
static bool model_in(const struct front_model *const *seen, uint32_t n, const struct front_model *m)
{
    for (uint32_t i = 0; i < n; i++)
        if (seen[i] == m)
            return true;
    return false;
}

/* How many models the workers run (one, except while a reload rolls onto another). */
static uint32_t worker_models(struct workers *ws, const struct front_model **seen, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < workers_count(ws) && n < cap; i++) {
        const struct front_model *m = workers_get(ws, i)->model;
        if (!model_in(seen, n, m))
            seen[n++] = m;
    }
    return n;
}

/* While a reload rolls the workers onto another model, requests of two models wait here,
 * each for its own model's workers: a request none of them can take now does not hold up
 * those of the other model behind it (each model's requests keep their order). One whose
 * model has no worker left (a reload replaced it) can never run: it ends with 503. The scan
 * stops once every model the workers run is full, so with one model it stops at the first
 * request no worker can take, as a plain FIFO would. */
void queue_dispatch(struct queue *q)
{
    struct job *j, *next;
    struct proto_msg m;
    struct worker *w = NULL;
    uint64_t skip = 0; /* workers whose ring turned a job away in this pass (bit = id) */
    const struct front_model *full[8]; /* models none of whose workers can take a job now */
    const struct front_model *models[8];
    uint32_t n_full = 0, n_models = worker_models(q->f->workers, models, 8);

    enum prefix_route_reason why = PREFIX_ROUTE_LEAST_LOADED;

again:
    for (j = TAILQ_FIRST(&q->waiting); j && !(n_models && n_full >= n_models); j = next) {
        struct request *r = j->req;
        next = TAILQ_NEXT(j, link_queue);
        if (model_in(full, n_full, r->model))
            continue;
        if (!(w = workers_pick_for(q->f->workers, skip, r->model, r->prompt, r->n_prompt,
                                   &why))) {
            if (!supervisor_model_hope(q->f->sup, r->model)) {
                queue_remove(q, j);
                request_fail(r, 503, "server_error",
                             "the model this request was read for was replaced by a reload; "
                             "retry it", NULL, "model_reloaded");
                goto again; /* failing it took its other jobs out too */
            }
            if (n_full == sizeof(full) / sizeof(full[0]))
                break;
            full[n_full++] = r->model;
            continue;
        }
        request_job_message(j, &m);
        int rc = worker_submit(w, &m, j);
        if (rc == -EAGAIN) {
            /* its ring is full: the others may take the job; this one again at the next
             * capacity event */
            if (w->id < 64)
                skip |= (uint64_t)1 << w->id;
            next = j;
            continue;
        }
        queue_remove(q, j);
        if (rc < 0) {
            log_error("request %llu: could not send the job: %s", (unsigned long long)j->req_id,
                      strerror(-rc));
            request_fail(r, 500, "server_error", "could not hand the job to a worker", NULL,
                         NULL);
            goto again;
        }
        request_job_dispatched(j, w);
        q->f->metrics.routed[why]++;
    }
    if (q->n > 0 && !supervisor_any_hope(q->f->sup))
        queue_fail_all(q, "no worker is available (see /health)");
    queue_watch(q);
}
