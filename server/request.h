/* One HTTP generation request from admission to its last byte: its prompt and parameters,
 * its place in the queue or on a worker, the worker's records turned into OpenAI output
 * (through the relay), a client that leaves, and one request_free() that releases it all.
 * JSON parsing and shapes are api.c's; queueing is queue.c's. */
#ifndef REQUEST_H
#define REQUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "access_log.h"
#include "proto.h"
#include "toolcall.h"

struct http_req;
struct evbuffer;
struct event;
struct front;
struct front_model;
struct worker;
struct relay;

#define REQUEST_MAX_STOPS 4
/* Choices one request may ask for ("n"). */
#define REQUEST_MAX_N 8

struct json_t;

/* One choice's answer so far, kept by the lead (below) for each of its choices. */
struct request_out {
    struct evbuffer *text;     /* whole replies: the text so far */
    struct json_t *logprobs;   /* whole replies with logprobs: the route's shape so far */
    uint32_t text_offset;      /* completions' logprobs.text_offset: bytes so far */
    struct evbuffer *reasoning; /* whole chat replies: the reasoning so far (NULL: none) */
    struct json_t *tool_calls; /* whole chat replies: the calls so far (NULL: none) */
    const char *finish;        /* "stop"/"length"/"tool_calls" once finished, else NULL */
    uint32_t completion_tokens;
};

enum request_kind { REQUEST_KIND_COMPLETION, REQUEST_KIND_CHAT };

struct request {
    struct front *f;
    /* The model generation the prompt is tokenized for; its workers alone run the job, and
     * its name is the reply's "model" (front_model.h). One reference. */
    struct front_model *model;
    /* The client's request; NULL once the answer is complete or the client left. */
    struct http_req *http;
    TAILQ_ENTRY(request) link_all;   /* f->requests */
    TAILQ_ENTRY(request) link_queue; /* the waiting queue, while queued */
    enum request_kind kind;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    uint64_t req_id;    /* unique in this front, never 0 */
    char id[48];        /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;    /* unix seconds */

    uint32_t *prompt;   /* n_prompt tokens */
    uint32_t n_prompt;
    uint32_t max_new_tokens;
    struct proto_sampling sampling;
    char *stops[REQUEST_MAX_STOPS];
    uint32_t n_stops;
    char *grammar;        /* GBNF the output must follow (NULL: none), grammar_len bytes */
    uint32_t grammar_len;

    bool queued;        /* in the waiting queue */
    struct worker *worker; /* holding a slot there until the job's final record */
    bool started;       /* STARTED came */
    bool cancel_sent;
    bool finished;      /* the generation ended (the HTTP answer was given or the client left) */
    bool reply_started; /* the SSE stream's headers were sent */
    bool client_gone;
    uint32_t hold;      /* >0 while a callback works on it: not freed until it returns */

    struct relay *relay;
    /* chat replies read for tool calls and reasoning (tc.format NONE and !tc.reasoning: the
     * text goes out as it is); each choice has its own parser */
    struct toolcall_config tc;
    struct toolcall *tc_parser;
    struct evbuffer *text; /* whole (non-stream) replies: the text so far */
    uint32_t prompt_tokens, completion_tokens;
    uint32_t cached_tokens; /* of prompt_tokens, reused from the worker's KV cache */

    /* n choices are n requests, each its own job (seeds seed, seed+1, ...); the lead (choice
     * 0) holds the connection, the answer being built (outs) and the group's timers, and is
     * freed only once the group is over. A lone request is its own lead with n_choices 1. */
    struct request *lead;   /* itself for the lead; NULL once the lead is gone */
    uint32_t index;         /* choices[index] */
    bool choice_done;       /* this choice finished (its answer is in lead->outs) */
    uint32_t n_choices;     /* lead: how many */
    uint32_t n_done;        /* lead: choices finished */
    struct request *choices[REQUEST_MAX_N]; /* lead: every choice (NULL once freed) */
    struct request_out outs[REQUEST_MAX_N]; /* lead */
    bool echo;              /* completions: the prompt comes first in the text */
    char *echo_text;        /* lead, echo: the prompt text */
    size_t echo_len;
    bool logprobs;          /* report logprobs (sampling.top_logprobs alternatives each) */
    bool counted;           /* lead: counts towards --max-concurrent-requests */
    uint64_t t_admit_us, t_first_us, t_last_us; /* hist_now_us(): admission, first, last text */
    struct event *ev_timeout; /* lead: --request-timeout-ms */
    /* backpressure (lead): the connection's unsent output went over --max-client-buffer-bytes,
     * so the group's jobs are paused on their workers until the client has read half of it */
    bool paused;               /* this job: PAUSE asked of its worker */
    bool flow_held;            /* lead: the group is held for its slow client */
    bool drain_watched;        /* lead: the connection's writes are followed */
    struct event *ev_flow;     /* lead: resume (activated) or --client-timeout-ms (timer) */
    /* lead: its access log line (api.c's; status: request_fail()'s, else 0), and the
     * X-Request-Id its jobs carry to the workers */
    struct access_entry access;
};

/* A request for http (owned by f, on f->requests), watching for the client leaving. Returns
 * NULL when out of memory. */
struct request *request_create(struct front *f, struct http_req *http,
                               enum request_kind kind);

/* Prepare the relay (stop strings, tokenizer) once the fields are set, make the other
 * n_choices - 1 choices (copies with seed + index), start the timeout and queue them all. On
 * a refusal the client got its error answer and the request is freed. Returns 0 or -errno. */
int request_start(struct request *r);

/* Answer with an OpenAI error (before the stream began: a status and JSON body; after: an
 * error event and the end of the stream), end the generation (cancelling a running job) and
 * free the request when nothing refers to it. */
void request_fail(struct request *r, int status, const char *type, const char *message,
                  const char *param, const char *code);

/* A worker record for r's job (the worker layer validated its type and req_id). */
void request_on_record(struct request *r, const struct proto_msg *m);

/* r's worker died with r's job on it: a started job fails; one not started is queued again. */
void request_on_job_lost(struct request *r, const char *cause);

/* Whether the client may still want the answer (a queued request whose client left is
 * dropped when the queue is full). A client at EOF may only have half-closed: it is probed
 * (an interim "100 Continue", once) and counts as gone only once its socket saw a reset. */
bool request_client_alive(struct request *r);

/* End r at shutdown: answer 503 if nothing was sent, close the stream otherwise; free it. */
void request_abort(struct request *r);

#endif
