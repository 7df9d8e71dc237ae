/* A request's client connection: backpressure (its unsent output bounded by pausing the
 * request's jobs on their workers) and whether its client is still there (http.c watches the
 * socket, a half-close told from a close). */
#include "request.h"

#include <sys/time.h>
#include <time.h>

#include <event2/event.h>

#include "api.h"
#include "config.h"
#include "http.h"
#include "log.h"
#include "request_impl.h"
#include "workers.h"

/* ---- backpressure ----
 * A stream's output waits in the connection's evbuffer until the socket takes it. Over
 * --max-client-buffer-bytes the request's jobs are paused on their workers (PAUSE: the sequence
 * keeps its slot and KV cache but is not decoded), so a slow reader costs a slot and no memory;
 * once half of it has been read they resume. A client that reads nothing for
 * --client-timeout-ms while held is dropped (its jobs are cancelled with the connection). */

/* Pause (or resume) the jobs that run or are about to (the worker layer sends each change
 * once). */
static void pause_jobs(struct request *r, bool pause)
{
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct job *j = &r->jobs[i];
        if (j->state == JOB_DISPATCHED || j->state == JOB_STARTED)
            (void)worker_pause(j->worker, j->req_id, pause);
    }
}

static void flow_arm_timeout(struct request *r)
{
    uint32_t ms = r->f->cfg->client_timeout_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(r->ev_flow, &tv);
}

static void flow_release(struct request *r)
{
    if (r->drain_watched && r->http)
        http_req_on_drain(r->http, NULL, NULL);
    r->drain_watched = false;
    if (r->ev_flow)
        event_del(r->ev_flow);
    r->flow_held = false;
}

/* The client read (or the buffer changed): progress resets its timeout; below half the
 * bound the jobs resume, from the loop (not from inside evbuffer). */
static void on_conn_out(void *arg, size_t unsent)
{
    struct request *r = arg;
    if (!r->flow_held)
        return;
    if (unsent <= r->f->cfg->max_client_buffer / 2) {
        event_del(r->ev_flow);
        event_active(r->ev_flow, EV_READ, 0);
    } else {
        flow_arm_timeout(r);
    }
}

static void on_flow(evutil_socket_t fd, short what, void *arg)
{
    struct request *r = arg;
    (void)fd;
    if (!r->flow_held)
        return;
    if (what & EV_READ) { /* drained: go on */
        r->flow_held = false;
        pause_jobs(r, false);
        return;
    }
    log_info("request %llu: its client read nothing for %u ms with %zu bytes unsent; dropped",
             (unsigned long long)r->req_id, r->f->cfg->client_timeout_ms,
             r->http ? http_req_unsent(r->http) : (size_t)0);
    metrics_count_dropped(&r->f->metrics, METRICS_DROP_CLIENT_TIMEOUT);
    if (r->http)
        http_req_abort(r->http); /* on_close ends the request and cancels its jobs */
}

/* After output was added for r's client: hold its jobs when too much waits unsent. */
void client_flow_check(struct request *r)
{
    if (!r->http)
        return;
    if (!r->drain_watched) {
        if (!r->ev_flow && !(r->ev_flow = event_new(r->f->base, -1, 0, on_flow, r)))
            return;
        http_req_on_drain(r->http, on_conn_out, r);
        r->drain_watched = true;
    }
    if (http_req_unsent(r->http) <= r->f->cfg->max_client_buffer) {
        if (!r->flow_held)
            return;
    } else if (!r->flow_held) {
        r->flow_held = true;
        r->f->metrics.streams_paused++;
        flow_arm_timeout(r);
    }
    pause_jobs(r, true); /* also a choice that started since */
}

bool request_client_alive(struct request *r)
{
    return r->http && http_req_client_alive(r->http);
}

void client_release(struct request *r)
{
    flow_release(r);
    if (r->http)
        http_req_on_close(r->http, NULL, NULL);
}
