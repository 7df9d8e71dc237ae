/* The waiting queue: FIFO of requests, bounded, dispatched to the least-loaded worker with a
 * free slot. A job that a worker's full ring turns away stays at the head until the next
 * capacity event (a final record or a worker coming up). */
#include "queue.h"

#include <errno.h>
#include <string.h>

#include "api.h"
#include "log.h"
#include "proto.h"
#include "request.h"
#include "workers.h"

void queue_init(struct queue *q, struct front *f, uint32_t max_waiting)
{
    memset(q, 0, sizeof(*q));
    q->f = f;
    q->max = max_waiting;
    TAILQ_INIT(&q->waiting);
}

void queue_remove(struct queue *q, struct request *r)
{
    if (!r->queued)
        return;
    TAILQ_REMOVE(&q->waiting, r, link_queue);
    r->queued = false;
    q->n--;
}

/* Drop queued requests whose client already left. */
static void queue_prune(struct queue *q)
{
    struct request *r, *next;
    for (r = TAILQ_FIRST(&q->waiting); r; r = next) {
        next = TAILQ_NEXT(r, link_queue);
        if (!request_client_alive(r)) {
            log_debug("request %llu: client left while queued; dropped",
                      (unsigned long long)r->req_id);
            queue_remove(q, r);
            request_fail(r, 499, "invalid_request_error", "client closed the connection",
                         NULL, NULL);
        }
    }
}

/* No worker runs or will run again: nothing queued can be served. */
static void queue_fail_all(struct queue *q)
{
    struct request *r;
    while ((r = TAILQ_FIRST(&q->waiting))) {
        queue_remove(q, r);
        request_fail(r, 503, "server_error", "no worker is available (see /health)", NULL,
                     "no_worker");
    }
}

int queue_admit(struct queue *q, struct request *r)
{
    if (!workers_any_hope(q->f->workers))
        return -ENODEV;
    if (q->n >= q->max)
        queue_prune(q);
    if (q->n >= q->max && !(q->n == 0 && workers_pick(q->f->workers))) {
        q->n_refused++;
        return -EBUSY;
    }
    TAILQ_INSERT_TAIL(&q->waiting, r, link_queue);
    r->queued = true;
    q->n++;
    queue_dispatch(q);
    return 0;
}

void queue_push_head(struct queue *q, struct request *r)
{
    TAILQ_INSERT_HEAD(&q->waiting, r, link_queue);
    r->queued = true;
    q->n++;
    queue_dispatch(q);
}

void queue_dispatch(struct queue *q)
{
    struct request *r;
    struct proto_msg m;
    struct worker *w;

    while ((r = TAILQ_FIRST(&q->waiting)) && (w = workers_pick(q->f->workers))) {
        memset(&m, 0, sizeof(m));
        m.type = MSG_TYPE_JOB;
        m.req_id = r->req_id;
        m.u.job.n_prompt = r->n_prompt;
        m.u.job.prompt = r->prompt;
        m.u.job.prompt_cap = r->n_prompt;
        m.u.job.max_new_tokens = r->max_new_tokens;
        m.u.job.sampling = r->sampling;
        int rc = worker_submit(w, &m, r);
        if (rc == -EAGAIN)
            return; /* its ring is full: try again at the next capacity event */
        queue_remove(q, r);
        if (rc < 0) {
            log_error("request %llu: could not send the job: %s", (unsigned long long)r->req_id,
                      strerror(-rc));
            request_fail(r, 500, "server_error", "could not hand the job to a worker", NULL,
                         NULL);
            continue;
        }
        r->worker = w;
        r->started = false;
    }
    if (q->n > 0 && !workers_any_hope(q->f->workers))
        queue_fail_all(q);
}
