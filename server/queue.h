/* The waiting queue and dispatch: jobs (the choices of requests) wait here, in order, until a
 * worker has a free slot; the head goes to the least-loaded worker. Bounded by --max-waiting:
 * when it looks full, requests whose client left are dropped first, then new ones are
 * refused (503).
 * Bounded in time too while no worker can take jobs (all in backoff or failed): queued
 * requests then get 503 after QUEUE_NO_WORKER_MS, at once when no worker will ever run. */
#ifndef QUEUE_H
#define QUEUE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct front;
struct request;
struct job;
struct event;

/* How long queued requests wait while no worker process can take them (every one in its
 * restart backoff, at most 10 s, or failed) before they end with 503. */
#define QUEUE_NO_WORKER_MS 15000

TAILQ_HEAD(request_list, request);
TAILQ_HEAD(job_list, job);

struct queue {
    struct front *f;
    struct job_list waiting;
    uint32_t n;
    uint32_t max;
    uint64_t n_refused;
    struct event *ev_no_worker; /* pending while requests wait and no worker can take them */
};

/* f->base must be set. Returns 0 or -ENOMEM. */
int queue_init(struct queue *q, struct front *f, uint32_t max_waiting);
/* Free the queue's timer; the requests are the caller's. */
void queue_free(struct queue *q);

/* Append j (JOB_NEW -> JOB_QUEUED) and dispatch. Returns 0, -EBUSY when the queue is full,
 * or -ENODEV when no worker process can take jobs now (all in backoff or failed, or kiln is
 * draining; j is not queued then), or -ECANCELED when making room ended j's own request
 * (its client left). Making room may end other requests (they are freed only from the
 * loop). Queued jobs' requests are failed with 503 once every worker has failed for good. */
int queue_admit(struct queue *q, struct job *j);

/* Put j back at the head (its worker died before starting it): JOB_QUEUED. Does not
 * dispatch: the worker layer's capacity event after the death does, once every lost job is
 * back. */
void queue_push_head(struct queue *q, struct job *j);

/* Take j out of the queue (JOB_QUEUED -> JOB_NEW); nothing when it is not queued. */
void queue_remove(struct queue *q, struct job *j);

/* Hand queued jobs to workers with free slots, in order, while there are both. */
void queue_dispatch(struct queue *q);

#endif
