/* One HTTP generation request from admission to its last byte. A request owns its n jobs
 * (the choices of "n"; one for most requests), its connection, its answer being built and
 * its timers; nothing else owns any of them.
 *
 * Life: request_create() (the API parses into it) -> request_start() makes the jobs and
 * queues them -> each job goes QUEUED -> DISPATCHED -> STARTED -> DONE on its worker's
 * records -> the answer is given (or failed, or the client leaves): the request is over,
 * its queued jobs are dropped and its running ones cancelled (CANCELLING until their final
 * record) -> once it is over and every job is DONE, the loop frees it (request.c's on_reap,
 * the one place that frees a request). Since nothing is freed inside a callback chain, no
 * caller has to hold a request alive. JSON shapes are api.c's; queueing is queue.c's. */
#ifndef REQUEST_H
#define REQUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "access_log.h"
#include "gen_memo.h"
#include "proto.h"
#include "toolcall.h"

struct http_req;
struct evbuffer;
struct event;
struct front;
struct front_model;
struct worker;
struct relay;
struct request;

#define REQUEST_MAX_STOPS 4
/* Choices one request may ask for ("n"). */
#define REQUEST_MAX_N 8

struct json_t;

enum job_state {
    JOB_NEW,        /* made, not admitted to the queue yet */
    JOB_QUEUED,     /* in the front's waiting queue */
    JOB_DISPATCHED, /* its JOB record went to worker; STARTED has not come */
    JOB_STARTED,    /* running on worker */
    JOB_CANCELLING, /* CANCEL went to worker (its answer is complete, or not wanted any more);
                     * its final record is due */
    JOB_DONE,       /* its final record came, its worker died, or it never reached one */
};

/* One choice of a request: a job on a worker. On a worker (and holding a slot there) exactly
 * while DISPATCHED, STARTED or CANCELLING. Its relay and reply parser are released once it
 * is DONE. */
struct job {
    struct request *req; /* its owner */
    uint32_t index;      /* choices[index]; its seed is the request's seed + index */
    uint64_t req_id;     /* the id of its records (job 0: the request's own) */
    enum job_state state;
    TAILQ_ENTRY(job) link_queue; /* the waiting queue, while QUEUED */
    struct worker *worker;       /* while on a worker */
    struct relay *relay;         /* the worker's records in, text and events out */
    /* chat replies read for tool calls and reasoning (the request's tc.format NONE and
     * !tc.reasoning: NULL, the text goes out as it is) */
    struct toolcall *tc_parser;
    uint32_t n_tokens;  /* TOKEN records received (in flight after a cancel too) */
    /* the ids of those records, kept for the chat memo when the request has memo.text */
    uint32_t *gen, n_gen, gen_cap;
    bool gen_full; /* growing gen failed: it stops there (still the worker's first ids) */
    uint64_t t_last_us; /* hist_now_us() of its last text */
};

/* One choice's answer so far. */
struct request_out {
    struct evbuffer *text;     /* whole replies: the text so far */
    struct json_t *logprobs;   /* whole replies with logprobs: the route's shape so far */
    uint32_t text_offset;      /* completions' logprobs.text_offset: bytes so far */
    struct evbuffer *reasoning; /* whole chat replies: the reasoning so far (NULL: none) */
    struct json_t *tool_calls; /* whole chat replies: the calls so far (NULL: none) */
    const char *finish;        /* "stop"/"length"/"tool_calls" once answered, else NULL */
    uint32_t completion_tokens;
};

enum request_kind { REQUEST_KIND_COMPLETION, REQUEST_KIND_CHAT };

struct request {
    struct front *f;
    /* The model generation the prompt is tokenized for; its workers alone run the jobs, and
     * its name is the reply's "model" (front_model.h). One reference. */
    struct front_model *model;
    /* The client's request; NULL once the request is over: answered, failed or the client
     * left (request_over()). */
    struct http_req *http;
    TAILQ_ENTRY(request) link_all; /* f->requests */
    enum request_kind kind;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    uint64_t req_id;    /* unique in this front, never 0 */
    char id[48];        /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;    /* unix seconds */

    /* what every job runs (job i with seed sampling.seed + i) */
    uint32_t *prompt;   /* n_prompt tokens */
    uint32_t n_prompt;
    uint32_t max_new_tokens;
    struct proto_sampling sampling;
    char *stops[REQUEST_MAX_STOPS];
    uint32_t n_stops;
    char *grammar;        /* GBNF the output must follow (NULL: none), grammar_len bytes */
    uint32_t grammar_len;
    /* how a chat reply is read for tool calls and reasoning (format NONE and !reasoning:
     * not at all) */
    struct toolcall_config tc;
    bool echo;              /* completions: the prompt comes first in the text */
    char *echo_text;        /* echo: the prompt text */
    size_t echo_len;
    bool logprobs;          /* report logprobs (sampling.top_logprobs alternatives each) */
    /* a chat prompt as it was tokenized (text and plain spans malloc'd, freed with the
     * request), kept to remember each choice's generation after it (gen_memo.h) when the
     * model has a memo and the request allows reuse; else text is NULL */
    struct gen_memo_text memo;

    uint32_t n_choices;     /* "n": how many jobs */
    struct job jobs[REQUEST_MAX_N];
    struct request_out outs[REQUEST_MAX_N];
    uint32_t prompt_tokens, completion_tokens;
    uint32_t cached_tokens; /* of prompt_tokens, reused from the worker's KV cache */

    bool client_gone;   /* it ended because its client left */
    bool reply_started; /* the SSE stream's headers were sent */
    struct evbuffer *text; /* a stream's frames not yet handed to the connection */
    char *chunk_head;      /* what starts each of its frames (api_json_chunk_head()), or NULL */
    size_t chunk_head_len;
    uint64_t t_admit_us, t_first_us; /* hist_now_us(): admission, first text */
    struct event *ev_timeout; /* --request-timeout-ms */
    struct event *ev_reap;    /* activated once over with every job DONE: frees it */
    struct event *ev_flush;   /* activated when a stream frame waits in text */
    bool flush_pending;       /* ev_flush is active */
    /* backpressure: the connection's unsent output went over --max-client-buffer-bytes, so
     * the jobs are paused on their workers until the client has read half of it */
    bool flow_held;
    bool drain_watched;        /* the connection's writes are followed */
    struct event *ev_flow;     /* resume (activated) or --client-timeout-ms (timer) */
    /* its access log line (api.c's; status: request_fail()'s, else 0), and the X-Request-Id
     * its jobs carry to the workers */
    struct access_entry access;
};

/* A request for http (owned by f, on f->requests), watching for the client leaving. Returns
 * NULL when out of memory. */
struct request *request_create(struct front *f, struct http_req *http,
                               enum request_kind kind);

/* Prepare the n_choices jobs (relay with the stop strings, reply parser) once the fields
 * are set, start the timeout and queue the jobs. On a refusal the client got its error
 * answer and the request is over. Returns 0 or -errno. */
int request_start(struct request *r);

/* Whether r is over: answered, failed or its client left. */
static inline bool request_over(const struct request *r)
{
    return r->http == NULL;
}

/* Answer with an OpenAI error (before the stream began: a status and JSON body; after: an
 * error event and the end of the stream) and end r (its running jobs are cancelled). Does
 * nothing when r is over already. */
void request_fail(struct request *r, int status, const char *type, const char *message,
                  const char *param, const char *code);

/* A worker record for job j (the worker layer validated its type and req_id). */
void request_on_record(struct job *j, const struct proto_msg *m);

/* j's worker died with j on it: a started job fails its request; one not started is queued
 * again. */
void request_on_job_lost(struct job *j, const char *cause);

/* Whether the client may still want the answer (a queued request whose client left is
 * dropped when the queue is full): http_req_client_alive(). */
bool request_client_alive(struct request *r);

/* The JOB record of j (its pointers borrow from j's request). */
void request_job_message(const struct job *j, struct proto_msg *m);

/* j's JOB record went to w. */
void request_job_dispatched(struct job *j, struct worker *w);

/* End r at shutdown (the workers are going away): answer 503 if nothing was sent, close
 * the stream otherwise; free it now. */
void request_abort(struct request *r);

#endif
