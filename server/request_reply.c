/* A request's answer: the relay's events of its jobs turned into SSE frames as they come, or
 * gathered into one whole reply; tool calls and reasoning read out of a chat reply; the
 * error answer. The JSON is api_json*.c's. */
#include "request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "api.h"
#include "api_impl.h"
#include "hist.h"
#include "http.h"
#include "log.h"
#include "request_impl.h"
#include "supervisor.h"

/* A stream's frames gather in r->text and go to the connection as one HTTP chunk once the
 * loop is back (request_flush): a drain of the worker's ring brings several tokens of each
 * stream, and a chunk per frame cost evhttp's chunk framing and the connection's callbacks
 * per token. The end of the stream, or an error, hands over what waits first. */
static void stream_flush(struct request *r)
{
    if (r->http && evbuffer_get_length(r->text) > 0)
        http_reply_chunk(r->http, r->text);
}

void request_flush(struct request *r)
{
    r->flush_pending = false;
    if (!r->http)
        return;
    stream_flush(r);
    client_flow_check(r); /* output was added: hold the jobs if too much waits */
}

static void send_sse(struct request *r, const char *json)
{
    if (!r->http || !json)
        return;
    evbuffer_add(r->text, "data: ", 6);
    evbuffer_add(r->text, json, strlen(json));
    evbuffer_add(r->text, "\n\n", 2);
    if (!r->flush_pending) {
        r->flush_pending = true;
        event_active(r->ev_flush, EV_WRITE, 0);
    }
}

static void send_sse_free(struct request *r, char *json)
{
    send_sse(r, json);
    free(json);
}

static void stream_begin(struct request *r)
{
    if (r->reply_started || !r->http)
        return;
    http_set_header(r->http, "Content-Type", "text/event-stream");
    http_set_header(r->http, "Cache-Control", "no-cache");
    http_reply_start(r->http, 200, "OK"); /* a half-closed client still reads it */
    r->reply_started = true;
    (void)api_json_chunk_head(r);
    for (uint32_t i = 0; i < r->n_choices; i++) {
        char *j = NULL;
        if (r->kind == REQUEST_KIND_CHAT)
            j = api_json_chunk(r, i, "", 0, true, NULL);
        else if (r->echo && r->echo_len)
            j = api_json_chunk(r, i, r->echo_text, r->echo_len, false, NULL);
        send_sse_free(r, j);
    }
}

void reply_started(struct job *j, uint32_t prompt_tokens, uint32_t cached_tokens)
{
    struct request *r = j->req;
    if (j->index == 0) { /* usage: the prompt as the first choice's worker saw it */
        r->prompt_tokens = prompt_tokens;
        r->cached_tokens = cached_tokens;
        /* admission -> the worker starts the job */
        metrics_observe_queue_time(&r->f->metrics, hist_now_us() - r->t_admit_us);
    }
    if (r->stream)
        stream_begin(r);
}

/* A call's id: 9 letters and digits for Mistral (its template insists), else "call_" and 24. */
static void call_id(const struct job *j, char *id, size_t cap)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[24];
    bool mistral = j->req->tc.format == TOOLCALL_FORMAT_MISTRAL;
    size_t n = mistral ? 9 : 24, o = 0;
    if (getrandom(rnd, n, GRND_NONBLOCK) != (ssize_t)n) {
        uint64_t x = hist_now_us() ^ (j->req_id * 0x9e3779b97f4a7c15ull);
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
    struct job *job = arg;
    struct request *r = job->req;
    struct request_out *o = &r->outs[job->index];
    char id[40] = "";

    if (!r->http)
        return 0;
    if (p->kind == TOOLCALL_CALL)
        call_id(job, id, sizeof(id));
    if (r->stream) {
        char *j = NULL;
        stream_begin(r);
        if (p->kind == TOOLCALL_CALL) {
            /* as OpenAI streams a call: its id and name first, then the arguments */
            send_sse_free(r, api_json_tool_chunk(r, job->index, p->index, id, p->name,
                                                 p->name_len, "", 0));
            j = api_json_tool_chunk(r, job->index, p->index, NULL, NULL, 0, p->text, p->len);
        } else if (p->kind == TOOLCALL_REASONING) {
            j = api_json_delta_chunk(r, job->index, "reasoning_content", p->text, p->len);
        } else {
            j = api_json_chunk(r, job->index, p->text, p->len, false, NULL);
        }
        send_sse_free(r, j);
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

void reply_text(struct job *j, const struct relay_event *ev)
{
    struct request *r = j->req;
    struct request_out *o = &r->outs[j->index];
    struct metrics *m = &r->f->metrics;
    uint64_t now = hist_now_us();

    if (!r->http || (ev->len == 0 && !(r->logprobs && ev->n_tokens)))
        return;
    if (ev->len) {
        if (!r->t_first_us) {
            r->t_first_us = now;
            metrics_observe_ttft(m, now - r->t_admit_us);
        }
        if (j->t_last_us)
            metrics_observe_itl(m, now - j->t_last_us);
        j->t_last_us = now;
    }
    if (r->logprobs && !r->stream)
        o->logprobs = api_json_logprobs(r, ev->tokens, ev->n_tokens, o->logprobs,
                                        &o->text_offset);
    if (j->tc_parser) {
        /* the parser decides what of the text is content, reasoning or a call */
        if (r->stream && r->logprobs) {
            stream_begin(r);
            send_sse_free(r, api_json_chunk_logprobs(r, j->index, NULL, 0, ev->tokens,
                                                     ev->n_tokens, &o->text_offset));
        }
        if (toolcall_push(j->tc_parser, ev->text, ev->len, on_piece, j) < 0)
            log_warn("request %llu: out of memory reading the reply for tool calls",
                     (unsigned long long)j->req_id);
        return;
    }
    if (r->stream) {
        stream_begin(r);
        send_sse_free(r, r->logprobs ? api_json_chunk_logprobs(r, j->index, ev->text, ev->len,
                                                               ev->tokens, ev->n_tokens,
                                                               &o->text_offset)
                                     : api_json_chunk(r, j->index, ev->text, ev->len, false,
                                                      NULL));
    } else {
        evbuffer_add(o->text, ev->text, ev->len);
    }
}

static enum metrics_finish finish_metric(const char *finish)
{
    return strcmp(finish, "length") == 0 ? METRICS_FINISH_LENGTH : METRICS_FINISH_STOP;
}

/* Every choice is answered: the last chunks or the whole reply; r is over after. */
static void answer(struct request *r)
{
    struct metrics *m = &r->f->metrics;
    r->completion_tokens = 0;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        r->completion_tokens += r->outs[i].completion_tokens;
        metrics_count_finished(m, finish_metric(r->outs[i].finish));
    }
    metrics_count_tokens(m, r->prompt_tokens, r->completion_tokens);
    client_release(r);
    if (r->stream) {
        stream_begin(r);
        if (r->include_usage)
            send_sse_free(r, api_json_usage_chunk(r));
        evbuffer_add(r->text, "data: [DONE]\n\n", 14);
        stream_flush(r);
        http_reply_end(r->http);
    } else {
        char *j = api_json_reply(r);
        if (j) {
            http_set_header(r->http, "Content-Type", "application/json");
            http_reply(r->http, 200, "OK", j, strlen(j));
        } else {
            api_send_error(r->http, 500, "server_error", "out of memory", NULL, NULL);
        }
        free(j);
    }
    r->http = NULL;
    metrics_observe_e2e(m, hist_now_us() - r->t_admit_us);
    request_end(r);
}

void reply_finished(struct job *j, enum relay_finish reason, uint32_t completion)
{
    struct request *r = j->req;
    struct request_out *o = &r->outs[j->index];
    if (j->tc_parser && toolcall_finish(j->tc_parser, on_piece, j) < 0)
        log_warn("request %llu: out of memory reading the reply for tool calls",
                 (unsigned long long)j->req_id);
    o->finish = api_finish_name(reason == RELAY_FINISH_LENGTH ? FINISH_REASON_LENGTH
                                                              : FINISH_REASON_STOP);
    if (j->tc_parser && toolcall_count(j->tc_parser) > 0 && reason != RELAY_FINISH_LENGTH)
        o->finish = "tool_calls";
    o->completion_tokens = completion;
    if (r->stream) {
        stream_begin(r);
        send_sse_free(r, api_json_chunk(r, j->index, NULL, 0, false, o->finish));
    }
    for (uint32_t i = 0; i < r->n_choices; i++)
        if (!r->outs[i].finish)
            return;
    answer(r);
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

void reply_error(struct request *r, int status, const char *type, const char *message,
                 const char *param, const char *code)
{
    r->access.status = status;
    client_release(r);
    if (status >= 500 && status != 503)
        metrics_count_finished(&r->f->metrics, METRICS_FINISH_ERROR);
    if (r->reply_started) {
        send_sse_free(r, api_json_error(type, message, param, code));
        stream_flush(r);
        http_reply_end(r->http);
    } else {
        if (status == 503 && code && strcmp(code, "no_worker") == 0)
            set_retry_after(r->http, r->f->sup);
        api_send_error(r->http, status, type, message, param, code);
    }
    r->http = NULL;
    request_end(r);
}
