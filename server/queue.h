/* The waiting queue and dispatch: requests wait here, in order, until a worker has a free
 * slot; the head goes to the least-loaded worker. Bounded by --max-waiting: when it looks
 * full, requests whose client left are dropped first, then new ones are refused (503). */
#ifndef QUEUE_H
#define QUEUE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

struct front;
struct request;

TAILQ_HEAD(request_list, request);

struct queue {
    struct front *f;
    struct request_list waiting;
    uint32_t n;
    uint32_t max;
    uint64_t n_refused;
};

void queue_init(struct queue *q, struct front *f, uint32_t max_waiting);

/* Append r and dispatch. Returns 0, -EBUSY when the queue is full, or -ENODEV when no worker
 * runs or will run again (r is not queued then). Queued requests are failed with 503 once
 * every worker has failed for good. */
int queue_admit(struct queue *q, struct request *r);

/* Put r back at the head (its worker died before starting it) and dispatch. */
void queue_push_head(struct queue *q, struct request *r);

/* Take r out of the queue (its client left). */
void queue_remove(struct queue *q, struct request *r);

/* Hand queued requests to workers with free slots, in order, while there are both. */
void queue_dispatch(struct queue *q);

#endif
