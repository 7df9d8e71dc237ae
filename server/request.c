/* A generation request's life in the front (request.h): its jobs made and queued, the
 * worker's records of each job, the request ending (answered, failed, timed out, or its
 * client gone) and being freed. Every path that ends a request goes through request_end();
 * the only place that frees one is on_reap, run from the loop once it is over and every
 * job is DONE. */
#include "request.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "api.h"
#include "api_impl.h"
#include "config.h"
#include "front_model.h"
#include "gen_memo.h"
#include "hist.h"
#include "http.h"
#include "log.h"
#include "queue.h"
#include "relay.h"
#include "request_impl.h"
#include "workers.h"

/* ---- jobs ---- */

/* j is over: release what only a running job needs. */
static void job_done(struct job *j)
{
    j->state = JOB_DONE;
    j->worker = NULL;
    relay_destroy(j->relay);
    j->relay = NULL;
    toolcall_destroy(j->tc_parser);
    j->tc_parser = NULL;
}

/* Ask j's worker to stop j (once); its final record still comes. */
static void job_cancel(struct job *j)
{
    if (j->state != JOB_DISPATCHED && j->state != JOB_STARTED)
        return;
    j->state = JOB_CANCELLING; /* its relay is fed no more */
    (void)worker_cancel(j->worker, j->req_id);
}

/* j's request is over: a job not on a worker is dropped, one on a worker cancelled. */
static void job_end(struct job *j)
{
    switch (j->state) {
    case JOB_QUEUED:
        queue_remove(&j->req->f->queue, j);
        /* fall through */
    case JOB_NEW:
        job_done(j);
        break;
    case JOB_DISPATCHED:
    case JOB_STARTED:
        job_cancel(j);
        break;
    case JOB_CANCELLING:
    case JOB_DONE:
        break;
    }
}

void request_job_message(const struct job *j, struct proto_msg *m)
{
    const struct request *r = j->req;
    memset(m, 0, sizeof(*m));
    m->type = MSG_TYPE_JOB;
    m->req_id = j->req_id;
    m->u.job.n_prompt = r->n_prompt;
    m->u.job.prompt = r->prompt;
    m->u.job.prompt_cap = r->n_prompt;
    m->u.job.max_new_tokens = r->max_new_tokens;
    m->u.job.sampling = r->sampling;
    m->u.job.sampling.seed = r->sampling.seed + j->index;
    m->u.job.grammar = r->grammar;
    m->u.job.grammar_len = r->grammar ? r->grammar_len : 0;
    /* the worker's log lines about the job name the client's request */
    snprintf(m->u.job.request_id, sizeof(m->u.job.request_id), "%s", r->access.rid);
}

void request_job_dispatched(struct job *j, struct worker *w)
{
    j->state = JOB_DISPATCHED;
    j->worker = w;
    if (j->index == 0)
        j->req->access.worker = (int)w->id;
}

/* ---- the request's life ---- */

static void request_free(struct request *r)
{
    struct front *f = r->f;
    TAILQ_REMOVE(&f->requests, r, link_all);
    f->n_requests--;
    client_release(r);
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct request_out *o = &r->outs[i];
        job_done(&r->jobs[i]);
        if (o->text)
            evbuffer_free(o->text);
        if (o->reasoning)
            evbuffer_free(o->reasoning);
        json_decref(o->tool_calls);
        json_decref(o->logprobs);
    }
    if (r->ev_timeout)
        event_free(r->ev_timeout);
    if (r->ev_flow)
        event_free(r->ev_flow);
    if (r->ev_reap)
        event_free(r->ev_reap);
    if (r->ev_flush)
        event_free(r->ev_flush);
    for (uint32_t i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    for (uint32_t i = 0; i < r->n_choices; i++)
        free(r->jobs[i].gen);
    free((char *)r->memo.text);
    free((struct tokenizer_span *)r->memo.plain);
    free(r->prompt);
    free(r->grammar);
    free(r->echo_text);
    free(r->chunk_head);
    front_model_put(r->model);
    if (r->text)
        evbuffer_free(r->text);
    free(r);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    request_free(arg);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    request_flush(arg);
}

/* Once r is over and none of its jobs is on a worker or in the queue, nothing refers to it:
 * free it from the loop, after the callbacks now running are done with it. */
static void request_settle(struct request *r)
{
    if (!request_over(r))
        return;
    for (uint32_t i = 0; i < r->n_choices; i++)
        if (r->jobs[i].state != JOB_DONE)
            return;
    event_active(r->ev_reap, EV_TIMEOUT, 0);
}

void request_end(struct request *r)
{
    struct front *f = r->f;
    api_request_over(r);
    f->n_active--;
    if (r->ev_timeout)
        event_del(r->ev_timeout);
    for (uint32_t i = 0; i < r->n_choices; i++)
        job_end(&r->jobs[i]);
    request_settle(r);
}

/* The client left before its answer was whole: r->http goes with the connection. */
static void on_close(void *arg)
{
    struct request *r = arg;
    if (request_over(r))
        return;
    client_release(r);
    r->http = NULL;
    r->client_gone = true;
    metrics_count_finished(&r->f->metrics, METRICS_FINISH_CANCELLED);
    log_debug("request %llu: client left", (unsigned long long)r->req_id);
    request_end(r);
}

struct request *request_create(struct front *f, struct http_req *http,
                               enum request_kind kind)
{
    struct request *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->text = evbuffer_new();
    r->ev_reap = event_new(f->base, -1, 0, on_reap, r);
    r->ev_flush = event_new(f->base, -1, 0, on_flush, r);
    if (!r->text || !r->ev_reap || !r->ev_flush) {
        if (r->text)
            evbuffer_free(r->text);
        if (r->ev_reap)
            event_free(r->ev_reap);
        if (r->ev_flush)
            event_free(r->ev_flush);
        free(r);
        return NULL;
    }
    r->f = f;
    r->model = front_model_ref(f->model);
    r->http = http;
    r->kind = kind;
    r->req_id = ++f->next_req_id;
    r->created = (int64_t)time(NULL);
    snprintf(r->id, sizeof(r->id), "%s-%016llx%08llx",
             kind == REQUEST_KIND_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)f->id_salt,
             (unsigned long long)r->req_id);
    proto_sampling_init(&r->sampling);
    r->n_choices = 1;
    r->t_admit_us = hist_now_us();
    TAILQ_INSERT_TAIL(&f->requests, r, link_all);
    f->n_requests++;
    f->n_active++; /* until request_end() */
    http_req_on_close(http, on_close, r);
    return r;
}

void request_fail(struct request *r, int status, const char *type, const char *message,
                  const char *param, const char *code)
{
    if (!request_over(r))
        reply_error(r, status, type, message, param, code);
}

/* ---- the worker's records ---- */

/* The relay's events for j, in order, while its request is not over. completion: the
 * choice's completion_tokens if it finishes. */
static void handle_events(struct job *j, const struct relay_out *out, uint32_t completion)
{
    struct request *r = j->req;
    for (uint32_t i = 0; i < out->n && !request_over(r); i++) {
        const struct relay_event *ev = &out->ev[i];
        switch (ev->type) {
        case RELAY_EVENT_TEXT:
            reply_text(j, ev);
            break;
        case RELAY_EVENT_FINISHED:
            reply_finished(j, ev->reason, completion);
            break;
        case RELAY_EVENT_ERROR:
            request_fail(r, 500, "server_error", ev->error, NULL, NULL);
            break;
        }
    }
}

static void job_broke_protocol(struct job *j, const struct proto_msg *m)
{
    log_warn("request %llu: worker record of type %d out of order",
             (unsigned long long)j->req_id, (int)m->type);
    job_cancel(j);
    request_fail(j->req, 500, "server_error", "the worker broke the protocol", NULL, NULL);
}

/* A TOKEN: into the relay while j runs for its client; a stop string or a token that cannot
 * be decoded ends j there. Once CANCELLING, the tokens in flight are only counted. */
static void job_token(struct job *j, const struct proto_token *t)
{
    struct relay_out out;
    j->n_tokens++;
    if (j->req->memo.text && !j->gen_full) { /* the memo's copy (gen_memo.h) */
        if (j->n_gen == j->gen_cap) {
            uint32_t cap = j->gen_cap ? 2 * j->gen_cap : 64, *g = NULL;
            if (j->gen_cap < UINT32_MAX / 2)
                g = realloc(j->gen, cap * sizeof(*g));
            if (g) {
                j->gen = g;
                j->gen_cap = cap;
            }
        }
        /* a token left out would make the later ones stand for other text than the
         * worker's cache holds: the copy ends at the first one it cannot keep */
        if (j->n_gen < j->gen_cap)
            j->gen[j->n_gen++] = t->token;
        else
            j->gen_full = true;
    }
    if (j->state != JOB_STARTED)
        return;
    relay_token(j->relay, t, &out);
    if (out.n && out.ev[out.n - 1].type != RELAY_EVENT_TEXT)
        job_cancel(j); /* FINISHED or ERROR: the rest is not wanted */
    handle_events(j, &out, j->n_tokens);
}

/* The worker layer gives only records of a job on a worker (DISPATCHED, STARTED or
 * CANCELLING), and of a type a worker sends. The job's state is the protocol's state: a
 * record out of order fails the request, except while CANCELLING, when STARTED and TOKEN
 * may still be in flight and only the final record matters. */
void request_on_record(struct job *j, const struct proto_msg *m)
{
    struct request *r = j->req;
    struct relay_out out;
    bool wanted = j->state == JOB_DISPATCHED || j->state == JOB_STARTED;

    switch (m->type) {
    case MSG_TYPE_STARTED:
        if (j->state == JOB_DISPATCHED) {
            j->state = JOB_STARTED;
            reply_started(j, m->u.prompt_tokens, m->cached_tokens);
        } else if (j->state != JOB_CANCELLING) {
            job_broke_protocol(j, m);
        }
        break;
    case MSG_TYPE_TOKEN:
        if (j->state == JOB_DISPATCHED)
            job_broke_protocol(j, m);
        else
            job_token(j, &m->u.token);
        break;
    case MSG_TYPE_DONE:
    case MSG_TYPE_FAILED:
        /* the worker layer released the slot: j is DONE before its last events, so that the
         * answer they may complete does not cancel it */
        j->state = JOB_DONE;
        j->worker = NULL;
        if (m->type == MSG_TYPE_DONE && r->memo.text && j->n_gen > 0 &&
            gen_memo_add(r->model->memo, r->model->tok, &r->memo, r->prompt, r->n_prompt,
                         j->gen, j->n_gen) < 0)
            log_warn("request %" PRIu64 ": out of memory remembering its answer", j->req_id);
        if (wanted && m->type == MSG_TYPE_DONE) {
            relay_done(j->relay, m->u.done.reason, &out);
            handle_events(j, &out, m->u.done.completion_tokens);
        } else if (wanted) {
            request_fail(r, 500, "server_error", m->u.error, NULL, NULL);
        }
        job_done(j);
        break;
    default:
        job_broke_protocol(j, m);
        break;
    }
    request_settle(r);
}

void request_on_job_lost(struct job *j, const char *cause)
{
    struct request *r = j->req;
    uint32_t wid = j->worker ? j->worker->id : 0;
    j->worker = NULL;
    if (j->state == JOB_DISPATCHED && !request_over(r)) {
        /* it never started: it runs elsewhere, first in line */
        log_info("request %" PRIu64 " [%s]: worker %u went before it started; queued again",
                 j->req_id, r->access.rid, wid);
        j->state = JOB_QUEUED;
        queue_push_head(&r->f->queue, j);
        return;
    }
    /* a cancelled job (its choice answered or not wanted) loses nothing; a started one fails
     * its request (the other choices go with it) */
    bool started = j->state == JOB_STARTED;
    job_done(j);
    if (started) { /* the crash's log line has the error id the cause names */
        log_warn("request %" PRIu64 " [%s]: lost: %s", j->req_id, r->access.rid, cause);
        request_fail(r, 500, "server_error", cause, NULL, "worker_crashed");
    }
    request_settle(r);
}

/* ---- starting ---- */

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct request *r = arg;
    (void)fd;
    (void)what;
    if (request_over(r))
        return;
    log_info("request %llu: not finished within %u ms; cancelled",
             (unsigned long long)r->req_id, r->f->cfg->request_timeout_ms);
    request_fail(r, 504, "server_error", "the request did not finish in time", NULL, "timeout");
}

/* Job i of r: its id, relay (r's stop strings) and reply parser. Returns 0, -ENOMEM, or
 * -EINVAL (and the like) for a stop string the request is refused for. */
static int make_job(struct request *r, uint32_t i)
{
    struct job *j = &r->jobs[i];
    size_t lens[REQUEST_MAX_STOPS];
    j->req = r;
    j->index = i;
    j->req_id = i == 0 ? r->req_id : ++r->f->next_req_id;
    j->state = JOB_NEW;
    for (uint32_t k = 0; k < r->n_stops; k++)
        lens[k] = strlen(r->stops[k]);
    int rc = relay_create(r->model->tok, (const char *const *)r->stops, lens, r->n_stops,
                          &j->relay);
    if (rc < 0)
        return rc;
    if (r->tc.format != TOOLCALL_FORMAT_NONE || r->tc.reasoning) {
        struct toolcall_config tc = r->tc;
        tc.req_id = j->req_id;
        if (!(j->tc_parser = toolcall_create(&tc)))
            return -ENOMEM;
        relay_render_special(j->relay);
    }
    return 0;
}

int request_start(struct request *r)
{
    struct front *f = r->f;
    int rc = 0;

    for (uint32_t i = 0; i < r->n_choices && rc == 0; i++) {
        struct request_out *o = &r->outs[i];
        if (!(o->text = evbuffer_new()))
            rc = -ENOMEM;
        else if (r->echo && r->echo_len)
            evbuffer_add(o->text, r->echo_text, r->echo_len);
        o->text_offset = (uint32_t)r->echo_len;
        if (rc == 0)
            rc = make_job(r, i);
    }
    if (rc == -ENOMEM) {
        request_fail(r, 500, "server_error", "out of memory", NULL, NULL);
        return rc;
    }
    if (rc < 0) {
        metrics_count_rejected(&f->metrics, METRICS_REJECT_INVALID);
        request_fail(r, 400, "invalid_request_error", "invalid stop string", "stop", NULL);
        return rc;
    }
    if (f->cfg->request_timeout_ms) {
        struct timeval tv = {(time_t)(f->cfg->request_timeout_ms / 1000),
                             (suseconds_t)(f->cfg->request_timeout_ms % 1000) * 1000};
        r->ev_timeout = evtimer_new(f->base, on_timeout, r);
        if (!r->ev_timeout || evtimer_add(r->ev_timeout, &tv) < 0) {
            request_fail(r, 500, "server_error", "out of memory", NULL, NULL);
            return -ENOMEM;
        }
    }
    /* admitting a job may prune the queue, and a prune that finds this very client gone
     * ends r: stop then (r is freed only from the loop) */
    for (uint32_t i = 0; i < r->n_choices && !request_over(r); i++) {
        rc = queue_admit(&f->queue, &r->jobs[i]);
        if (rc == -ENODEV) {
            metrics_count_rejected(&f->metrics, METRICS_REJECT_UNAVAILABLE);
            request_fail(r, 503, "server_error", "no worker is available (see /health)", NULL,
                         "no_worker");
        } else if (rc == -EBUSY) {
            metrics_count_rejected(&f->metrics, METRICS_REJECT_QUEUE_FULL);
            request_fail(r, 503, "server_error", "the server is busy; retry later", NULL,
                         "server_busy");
        }
    }
    return rc < 0 ? rc : 0;
}

void request_abort(struct request *r)
{
    /* the workers are going away: no final record will come */
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct job *j = &r->jobs[i];
        if (j->state == JOB_QUEUED)
            queue_remove(&r->f->queue, j);
        if (j->state != JOB_NEW)
            job_done(j);
    }
    request_fail(r, 503, "server_error", "the server is shutting down", NULL, NULL);
    request_free(r);
}
