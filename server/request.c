/* A generation request's life in the front: created by the API, queued, run on a worker,
 * answered (whole or as SSE), and freed once both the answer is done and the worker gave
 * the job's final record back. Every path that ends a request goes through request_end(). */
#include "request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "api.h"
#include "api_impl.h"
#include "config.h"
#include "hist.h"
#include "http.h"
#include "log.h"
#include "queue.h"
#include "relay.h"
#include "supervisor.h"
#include "workers.h"

static void on_close(void *arg);

/* ---- backpressure ----
 * A stream's output waits in the connection's evbuffer until the socket takes it. Over
 * --max-client-buffer-bytes the group's jobs are paused on their workers (PAUSE: the sequence
 * keeps its slot and KV cache but is not decoded), so a slow reader costs a slot and no memory;
 * once half of it has been read they resume. A client that reads nothing for
 * --client-timeout-ms while held is dropped (its jobs are cancelled with the connection). */

static void pause_jobs(struct request *lead, bool pause)
{
    for (uint32_t i = 0; i < lead->n_choices; i++) {
        struct request *c = lead->choices[i];
        if (c && c->worker && !c->finished && c->paused != pause) {
            c->paused = pause;
            (void)worker_pause(c->worker, c->req_id, pause);
        }
    }
}

static void flow_arm_timeout(struct request *lead)
{
    uint32_t ms = lead->f->cfg->client_timeout_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(lead->ev_flow, &tv);
}

static void flow_release(struct request *lead)
{
    if (lead->drain_watched && lead->http)
        http_req_on_drain(lead->http, NULL, NULL);
    lead->drain_watched = false;
    if (lead->ev_flow)
        event_del(lead->ev_flow);
    lead->flow_held = false;
}

/* The client read (or the buffer changed): progress resets its timeout; below half the
 * bound the jobs resume, from the loop (not from inside evbuffer). */
static void on_conn_out(void *arg, size_t unsent)
{
    struct request *lead = arg;
    if (!lead->flow_held)
        return;
    if (unsent <= lead->f->cfg->max_client_buffer / 2) {
        event_del(lead->ev_flow);
        event_active(lead->ev_flow, EV_READ, 0);
    } else {
        flow_arm_timeout(lead);
    }
}

static void on_flow(evutil_socket_t fd, short what, void *arg)
{
    struct request *lead = arg;
    (void)fd;
    if (!lead->flow_held)
        return;
    if (what & EV_READ) { /* drained: go on */
        lead->flow_held = false;
        pause_jobs(lead, false);
        return;
    }
    log_info("request %llu: its client read nothing for %u ms with %zu bytes unsent; dropped",
             (unsigned long long)lead->req_id, lead->f->cfg->client_timeout_ms,
             lead->http ? http_req_unsent(lead->http) : (size_t)0);
    metrics_count_dropped(&lead->f->metrics, METRICS_DROP_CLIENT_TIMEOUT);
    if (lead->http)
        http_req_abort(lead->http); /* on_close ends the group and cancels its jobs */
}

/* After output was added for lead's client: hold the group when too much waits unsent. */
static void flow_check(struct request *lead)
{
    if (!lead->http)
        return;
    if (!lead->drain_watched) {
        if (!lead->ev_flow && !(lead->ev_flow = event_new(lead->f->base, -1, 0, on_flow, lead)))
            return;
        http_req_on_drain(lead->http, on_conn_out, lead);
        lead->drain_watched = true;
    }
    if (http_req_unsent(lead->http) <= lead->f->cfg->max_client_buffer) {
        if (!lead->flow_held)
            return;
    } else if (!lead->flow_held) {
        lead->flow_held = true;
        lead->f->metrics.streams_paused++;
        flow_arm_timeout(lead);
    }
    pause_jobs(lead, true); /* also a choice that started since */
}

static void request_maybe_free(struct request *r)
{
    struct front *f = r->f;
    if (!r->finished || r->worker || r->queued || r->hold)
        return;
    TAILQ_REMOVE(&f->requests, r, link_all);
    f->n_requests--;
    if (r->lead == r) {
        /* choices still waiting for their job's final record live on without their lead */
        for (uint32_t i = 1; i < r->n_choices; i++)
            if (r->choices[i])
                r->choices[i]->lead = NULL;
        for (uint32_t i = 0; i < r->n_choices; i++) {
            if (r->outs[i].text)
                evbuffer_free(r->outs[i].text);
            if (r->outs[i].reasoning)
                evbuffer_free(r->outs[i].reasoning);
            json_decref(r->outs[i].tool_calls);
            json_decref(r->outs[i].logprobs);
        }
        if (r->ev_timeout)
            event_free(r->ev_timeout);
        flow_release(r);
        if (r->ev_flow)
            event_free(r->ev_flow);
        free(r->echo_text);
    } else if (r->lead) {
        r->lead->choices[r->index] = NULL;
    }
    for (uint32_t i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->prompt);
    free(r->grammar);
    front_model_put(r->model);
    relay_destroy(r->relay);
    toolcall_destroy(r->tc_parser);
    if (r->text)
        evbuffer_free(r->text);
    free(r);
}

struct request *request_create(struct front *f, struct http_req *http,
                               enum request_kind kind)
{
    struct request *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->text = evbuffer_new();
    if (!r->text) {
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
    r->lead = r;
    r->n_choices = 1;
    r->choices[0] = r;
    r->t_admit_us = hist_now_us();
    TAILQ_INSERT_TAIL(&f->requests, r, link_all);
    f->n_requests++;
    http_req_on_close(http, on_close, r);
    return r;
}

/* Stop watching the connection: the answer is complete or the client left. */
static void release_http(struct request *r)
{
    flow_release(r);
    if (r->http)
        http_req_on_close(r->http, NULL, NULL);
}

/* One job is over for the client: leave the queue, cancel it if it runs, free it if nothing
 * refers to it. */
static void end_one(struct request *r)
{
    r->finished = true;
    if (r->queued)
        queue_remove(&r->f->queue, r);
    if (r->worker && !r->cancel_sent && (!r->relay || relay_cancel(r->relay))) {
        r->cancel_sent = true;
        (void)worker_cancel(r->worker, r->req_id);
    }
    request_maybe_free(r);
}

/* The generation is over for the client (answered, failed or gone): end every choice; the
 * lead last, since the others read it. */
static void request_end(struct request *r)
{
    struct request *lead = r->lead;
    if (!lead) {
        end_one(r);
        return;
    }
    api_request_over(lead);
    if (lead->counted) {
        lead->counted = false;
        lead->f->n_active--;
    }
    if (lead->ev_timeout)
        event_del(lead->ev_timeout);
    lead->hold++;
    for (uint32_t i = 1; i < lead->n_choices; i++)
        if (lead->choices[i] && !lead->choices[i]->finished)
            end_one(lead->choices[i]);
    lead->hold--;
    end_one(lead);
}

static void send_sse(struct request *lead, const char *json)
{
    if (!lead->http || !json)
        return;
    evbuffer_add(lead->text, "data: ", 6);
    evbuffer_add(lead->text, json, strlen(json));
    evbuffer_add(lead->text, "\n\n", 2);
    http_reply_chunk(lead->http, lead->text);
}

static void stream_begin(struct request *lead)
{
    if (lead->reply_started || !lead->http)
        return;
    http_set_header(lead->http, "Content-Type", "text/event-stream");
    http_set_header(lead->http, "Cache-Control", "no-cache");
    http_reply_start(lead->http, 200, "OK"); /* a half-closed client still reads it */
    lead->reply_started = true;
    for (uint32_t i = 0; i < lead->n_choices; i++) {
        char *j = NULL;
        if (lead->kind == REQUEST_KIND_CHAT)
            j = api_json_chunk(lead, i, "", 0, true, NULL);
        else if (lead->echo && lead->echo_len)
            j = api_json_chunk(lead, i, lead->echo_text, lead->echo_len, false, NULL);
        send_sse(lead, j);
        free(j);
    }
}

static void emit_started(struct request *r, uint32_t prompt_tokens, uint32_t cached_tokens)
{
    struct request *lead = r->lead;
    r->prompt_tokens = prompt_tokens;
    r->cached_tokens = cached_tokens;
    if (r == lead) /* admission -> the worker starts the job */
        metrics_observe_queue_time(&r->f->metrics, hist_now_us() - lead->t_admit_us);
    if (lead->stream)
        stream_begin(lead);
}

/* A call's id: 9 letters and digits for Mistral (its template insists), else "call_" and 24. */
static void call_id(const struct request *r, char *id, size_t cap)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[24];
    bool mistral = r->tc.format == TOOLCALL_FORMAT_MISTRAL;
    size_t n = mistral ? 9 : 24, o = 0;
    if (getrandom(rnd, n, GRND_NONBLOCK) != (ssize_t)n) {
        uint64_t x = hist_now_us() ^ (r->req_id * 0x9e3779b97f4a7c15ull);
        for (size_t i = 0; i < n; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
            rnd[i] = (unsigned char)(x >> 33);
    }
    if (!mistral)
        o = (size_t)snprintf(id, cap, "call_");
    for (size_t i = 0; i < n && o + 1 < cap; i++)
        id[o++] = al[rnd[i] % (sizeof(al) - 1)];
    id[o] = '\0';
}

/* One piece of a parsed reply (toolcall.h): a stream chunk, or into the whole reply. */
static int on_piece(void *arg, const struct toolcall_piece *p)
{
    struct request *r = arg, *lead = r->lead;
    struct request_out *o = &lead->outs[r->index];
    char id[40] = "";

    if (!lead->http)
        return 0;
    if (p->kind == TOOLCALL_CALL)
        call_id(r, id, sizeof(id));
    if (lead->stream) {
        char *j = NULL;
        stream_begin(lead);
        if (p->kind == TOOLCALL_CALL) {
            /* as OpenAI streams a call: its id and name first, then the arguments */
            j = api_json_tool_chunk(lead, r->index, p->index, id, p->name, p->name_len, "", 0);
            send_sse(lead, j);
            free(j);
            j = api_json_tool_chunk(lead, r->index, p->index, NULL, NULL, 0, p->text, p->len);
        } else if (p->kind == TOOLCALL_REASONING) {
            j = api_json_delta_chunk(lead, r->index, "reasoning_content", p->text, p->len);
        } else {
            j = api_json_chunk(lead, r->index, p->text, p->len, false, NULL);
        }
        send_sse(lead, j);
        free(j);
        return 0;
    }
    if (p->kind == TOOLCALL_CONTENT) {
        evbuffer_add(o->text, p->text, p->len);
    } else if (p->kind == TOOLCALL_REASONING) {
        if (!o->reasoning && !(o->reasoning = evbuffer_new()))
            return -ENOMEM;
        evbuffer_add(o->reasoning, p->text, p->len);
    } else {
        json_t *call = api_json_tool_call(id, p->name, p->name_len, p->text, p->len);
        if (!call || (!o->tool_calls && !(o->tool_calls = json_array()))) {
            json_decref(call);
            return -ENOMEM;
        }
        json_array_append_new(o->tool_calls, call);
    }
    return 0;
}

static void emit_text(struct request *r, const struct relay_event *ev)
{
    struct request *lead = r->lead;
    struct request_out *o = &lead->outs[r->index];
    struct metrics *m = &r->f->metrics;
    uint64_t now = hist_now_us();

    if (!lead->http || (ev->len == 0 && !(lead->logprobs && ev->n_tokens)))
        return;
    if (ev->len) {
        if (!lead->t_first_us) {
            lead->t_first_us = now;
            metrics_observe_ttft(m, now - lead->t_admit_us);
        }
        if (r->t_last_us)
            metrics_observe_itl(m, now - r->t_last_us);
        r->t_last_us = now;
    }
    if (lead->logprobs && !lead->stream)
        o->logprobs = api_json_logprobs(lead, ev->tokens, ev->n_tokens, o->logprobs,
                                        &o->text_offset);
    if (r->tc_parser) {
        /* the parser decides what of the text is content, reasoning or a call */
        if (lead->stream && lead->logprobs) {
            stream_begin(lead);
            char *j = api_json_chunk_logprobs(lead, r->index, NULL, 0, ev->tokens, ev->n_tokens,
                                              &o->text_offset);
            send_sse(lead, j);
            free(j);
        }
        if (toolcall_push(r->tc_parser, ev->text, ev->len, on_piece, r) < 0)
            log_warn("request %llu: out of memory reading the reply for tool calls",
                     (unsigned long long)r->req_id);
        if (lead->stream)
            flow_check(lead);
        return;
    }
    if (lead->stream) {
        stream_begin(lead);
        char *j = lead->logprobs
                      ? api_json_chunk_logprobs(lead, r->index, ev->text, ev->len, ev->tokens,
                                                ev->n_tokens, &o->text_offset)
                      : api_json_chunk(lead, r->index, ev->text, ev->len, false, NULL);
        send_sse(lead, j);
        free(j);
        flow_check(lead);
    } else {
        evbuffer_add(o->text, ev->text, ev->len);
    }
}

static enum metrics_finish finish_metric(const char *finish)
{
    return strcmp(finish, "length") == 0 ? METRICS_FINISH_LENGTH : METRICS_FINISH_STOP;
}

/* Every choice finished: the last chunks or the whole reply. */
static void answer(struct request *lead)
{
    struct metrics *m = &lead->f->metrics;
    lead->completion_tokens = 0;
    for (uint32_t i = 0; i < lead->n_choices; i++) {
        lead->completion_tokens += lead->outs[i].completion_tokens;
        metrics_count_finished(m, finish_metric(lead->outs[i].finish));
    }
    metrics_count_tokens(m, lead->prompt_tokens, lead->completion_tokens);
    release_http(lead);
    if (lead->stream) {
        stream_begin(lead);
        if (lead->include_usage) {
            char *j = api_json_usage_chunk(lead);
            send_sse(lead, j);
            free(j);
        }
        evbuffer_add(lead->text, "data: [DONE]\n\n", 14);
        http_reply_chunk(lead->http, lead->text);
        http_reply_end(lead->http);
    } else {
        char *j = api_json_reply(lead);
        if (j) {
            http_set_header(lead->http, "Content-Type", "application/json");
            http_reply(lead->http, 200, "OK", j, strlen(j));
        } else {
            api_send_error(lead->http, 500, "server_error", "out of memory", NULL, NULL);
        }
        free(j);
    }
    lead->http = NULL;
    metrics_observe_e2e(m, hist_now_us() - lead->t_admit_us);
}

static void emit_finished(struct request *r, enum finish_reason reason, uint32_t completion)
{
    struct request *lead = r->lead;
    struct request_out *o = &lead->outs[r->index];
    if (r->tc_parser && lead->http && toolcall_finish(r->tc_parser, on_piece, r) < 0)
        log_warn("request %llu: out of memory reading the reply for tool calls",
                 (unsigned long long)r->req_id);
    o->finish = api_finish_name(reason);
    if (r->tc_parser && toolcall_count(r->tc_parser) > 0 && reason != FINISH_REASON_LENGTH)
        o->finish = "tool_calls";
    o->completion_tokens = completion;
    r->completion_tokens = completion;
    r->choice_done = true;
    if (lead->http && lead->stream) {
        stream_begin(lead);
        char *j = api_json_chunk(lead, r->index, NULL, 0, false, o->finish);
        send_sse(lead, j);
        free(j);
    }
    if (++lead->n_done < lead->n_choices) {
        if (r != lead)
            end_one(r);
        return;
    }
    if (lead->http)
        answer(lead);
    request_end(lead);
}

/* While no worker can serve, a client should come back when the next one may: the time to
 * the next restart attempt, in whole seconds rounded up (at least 1). */
static void set_retry_after(struct http_req *http, struct supervisor *sup)
{
    int64_t ms = supervisor_retry_after_ms(sup);
    char v[24];
    if (ms < 0)
        return; /* none planned: api_send_error's default */
    snprintf(v, sizeof(v), "%lld", (long long)(ms > 0 ? (ms + 999) / 1000 : 1));
    http_set_header(http, "Retry-After", v);
}

void request_fail(struct request *r, int status, const char *type, const char *message,
                  const char *param, const char *code)
{
    struct request *lead = r->lead ? r->lead : r;
    if (lead->http) {
        lead->access.status = status;
        release_http(lead);
        if (status >= 500 && status != 503)
            metrics_count_finished(&r->f->metrics, METRICS_FINISH_ERROR);
        if (lead->reply_started) {
            char *j = api_json_error(type, message, param, code);
            send_sse(lead, j);
            free(j);
            http_reply_end(lead->http);
        } else {
            if (status == 503 && code && strcmp(code, "no_worker") == 0)
                set_retry_after(lead->http, r->f->sup);
            api_send_error(lead->http, status, type, message, param, code);
        }
        lead->http = NULL;
    }
    request_end(r);
}

/* The client left before its answer was whole: r->http goes with the connection. */
static void on_close(void *arg)
{
    struct request *r = arg;
    flow_release(r);
    r->http = NULL;
    if (!r->finished) {
        r->client_gone = true;
        metrics_count_finished(&r->f->metrics, METRICS_FINISH_CANCELLED);
        log_debug("request %llu: client left", (unsigned long long)r->req_id);
        request_end(r);
    }
}

bool request_client_alive(struct request *r)
{
    if (r->lead && r->lead != r)
        r = r->lead; /* the choices of n share the lead's connection */
    return r && r->http && http_req_client_alive(r->http);
}

static void send_cancel(struct request *r)
{
    if (r->worker && !r->cancel_sent) {
        r->cancel_sent = true;
        (void)worker_cancel(r->worker, r->req_id);
    }
}

static void handle_event(struct request *r, const struct relay_event *ev)
{
    if (r->finished || r->choice_done || !r->lead || r->lead->finished)
        return;
    switch (ev->type) {
    case RELAY_EVENT_STARTED:
        r->started = true;
        emit_started(r, ev->prompt_tokens, ev->cached_tokens);
        break;
    case RELAY_EVENT_TEXT:
        emit_text(r, ev);
        break;
    case RELAY_EVENT_FINISHED:
        emit_finished(r,
                      ev->reason == RELAY_FINISH_LENGTH ? FINISH_REASON_LENGTH
                                                        : FINISH_REASON_STOP,
                      ev->completion_tokens);
        break;
    case RELAY_EVENT_ERROR:
        request_fail(r, 500, "server_error", ev->error ? ev->error : "generation failed", NULL,
                     NULL);
        break;
    }
}

void request_on_record(struct request *r, const struct proto_msg *m)
{
    struct relay_out out;
    struct request *lead = r->lead;

    r->hold++;
    if (lead && lead != r)
        lead->hold++; /* an event of r may end the group */
    if (m->type == MSG_TYPE_STARTED)
        r->started = true;
    if (m->type == MSG_TYPE_DONE || m->type == MSG_TYPE_FAILED)
        r->worker = NULL; /* the worker layer released the slot */
    if (!r->relay || relay_feed(r->relay, m, &out) < 0) {
        log_warn("request %llu: worker record of type %d out of order",
                 (unsigned long long)r->req_id, (int)m->type);
        send_cancel(r);
        if (!r->finished)
            request_fail(r, 500, "server_error", "the worker broke the protocol", NULL, NULL);
    } else {
        if (out.send_cancel)
            send_cancel(r);
        for (uint32_t i = 0; i < out.n; i++)
            handle_event(r, &out.ev[i]);
    }
    if (lead && lead != r && r->lead) {
        lead->hold--;
        request_maybe_free(lead);
    }
    r->hold--;
    request_maybe_free(r);
}

void request_on_job_lost(struct request *r, const char *cause)
{
    r->worker = NULL;
    r->paused = false;
    /* a choice already answered (its job ran on only until its cancel came back) loses
     * nothing: the other choices of its group go on */
    if (r->finished || r->choice_done) {
        request_maybe_free(r);
        return;
    }
    if (!r->started) {
        queue_push_head(&r->f->queue, r);
        return;
    }
    request_fail(r, 500, "server_error", cause, NULL, "worker_crashed");
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct request *lead = arg;
    (void)fd;
    (void)what;
    if (lead->finished)
        return;
    log_info("request %llu: not finished within %u ms; cancelled",
             (unsigned long long)lead->req_id, lead->f->cfg->request_timeout_ms);
    request_fail(lead, 504, "server_error", "the request did not finish in time", NULL,
                 "timeout");
}

/* Choice i of lead: a copy of its job with seed + i. NULL when out of memory. */
static struct request *make_choice(struct request *lead, uint32_t i)
{
    struct front *f = lead->f;
    struct request *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->f = f;
    c->kind = lead->kind;
    c->req_id = ++f->next_req_id;
    memcpy(c->id, lead->id, sizeof(c->id));
    c->created = lead->created;
    c->sampling = lead->sampling;
    c->sampling.seed = lead->sampling.seed + i;
    c->max_new_tokens = lead->max_new_tokens;
    c->tc = lead->tc;
    c->tc.req_id = c->req_id;
    c->lead = lead;
    c->index = i;
    c->t_admit_us = lead->t_admit_us;
    if (!(c->prompt = malloc((size_t)lead->n_prompt * sizeof(uint32_t)))) {
        free(c);
        return NULL;
    }
    memcpy(c->prompt, lead->prompt, (size_t)lead->n_prompt * sizeof(uint32_t));
    c->n_prompt = lead->n_prompt;
    if (lead->grammar) {
        if (!(c->grammar = malloc(lead->grammar_len + 1))) {
            free(c->prompt);
            free(c);
            return NULL;
        }
        memcpy(c->grammar, lead->grammar, lead->grammar_len + 1);
        c->grammar_len = lead->grammar_len;
    }
    c->model = front_model_ref(lead->model);
    TAILQ_INSERT_TAIL(&f->requests, c, link_all);
    f->n_requests++;
    lead->choices[i] = c;
    return c;
}

static int make_relay(struct request *lead, struct request *c)
{
    size_t lens[REQUEST_MAX_STOPS];
    for (uint32_t i = 0; i < lead->n_stops; i++)
        lens[i] = strlen(lead->stops[i]);
    return relay_create(c->model->tok, (const char *const *)lead->stops, lens,
                        lead->n_stops, &c->relay);
}

int request_start(struct request *r)
{
    struct front *f = r->f;
    int rc = 0;

    r->counted = true;
    f->n_active++;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct request_out *o = &r->outs[i];
        if (!(o->text = evbuffer_new()))
            rc = -ENOMEM;
        else if (r->echo && r->echo_len)
            evbuffer_add(o->text, r->echo_text, r->echo_len);
        o->text_offset = (uint32_t)r->echo_len;
        if (rc == 0 && i > 0 && !make_choice(r, i))
            rc = -ENOMEM;
        if (rc == 0)
            rc = make_relay(r, r->choices[i]);
        if (rc == 0 && (r->tc.format != TOOLCALL_FORMAT_NONE || r->tc.reasoning) &&
            !(r->choices[i]->tc_parser = toolcall_create(&r->choices[i]->tc)))
            rc = -ENOMEM;
        if (rc == 0 && r->choices[i]->tc_parser)
            relay_render_special(r->choices[i]->relay);
        if (rc < 0)
            break;
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
    /* Admitting a choice may prune the queue, and a prune that finds this very client gone
     * ends the group and would free the choices not yet admitted: hold each across its
     * admission, and stop once the group is over. */
    r->hold++;
    for (uint32_t i = 0; i < r->n_choices && !r->finished; i++) {
        struct request *c = r->choices[i];
        c->hold++;
        rc = queue_admit(&f->queue, c);
        c->hold--;
        if (c != r)
            request_maybe_free(c);
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
    r->hold--;
    request_maybe_free(r);
    return rc < 0 ? rc : 0;
}

void request_abort(struct request *r)
{
    if (r->queued)
        queue_remove(&r->f->queue, r);
    r->worker = NULL; /* the workers are going away */
    r->hold = 0;
    struct request *lead = r->lead;
    if (lead && lead != r) {
        /* a choice goes with its group; the lead answers the client */
        lead->choices[r->index] = NULL;
        r->lead = NULL;
        end_one(r);
        return;
    }
    if (r->http)
        request_fail(r, 503, "server_error", "the server is shutting down", NULL, NULL);
    else
        request_end(r);
}
