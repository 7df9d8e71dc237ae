/* The OpenAI-compatible API: routes, request JSON in (validated field by field), response JSON
 * out (whole replies, stream chunks, errors), /v1/models and /health; and the front's model
 * facts (name, context, tokenizer, chat template). The front's shared state is struct front. */
#ifndef API_H
#define API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "front_model.h"
#include "chat.h"
#include "metrics.h"
#include "queue.h"
#include "toolcall.h"
#include "wire.h"

struct http_server;
struct http_req;
struct event_base;
struct kiln_config;
struct tokenizer;
struct gguf;
struct workers;
struct supervisor;
struct request;
struct roll;


/* The front process's state, passed to every module; read-only config inside. */
struct front {
    const struct kiln_config *cfg;
    struct event_base *base;
    struct http_server *http;
    struct front_model *model;  /* the generation new requests bind to (front_model.h) */
    uint32_t next_gen;          /* the last generation loaded */
    struct roll *roll;          /* a reload's rolling restart of the workers (roll.h) */
    struct workers *workers;    /* the worker table: records and dispatch */
    struct supervisor *sup;     /* the worker processes */
    struct queue queue;
    struct request_list requests; /* every live request */
    uint32_t n_requests;
    uint64_t next_req_id;
    uint64_t id_salt;
    int64_t started_at; /* unix seconds */
    /* set up by api_init(): API keys, per-client rate limits, the Prometheus registry */
    struct auth auth;
    struct ratelimit *ratelimit; /* NULL: --rate-limit 0 (off) */
    struct metrics metrics;
    uint32_t n_active;           /* HTTP generation requests made and not yet over */
    uint64_t n_http_requests;    /* every HTTP request: the seed of made X-Request-Ids */
};

/* Set up f's API keys (cfg's --api-key flags, --api-key-file, KILN_API_KEYS, --metrics-key),
 * rate limiter and metrics. Returns 0 or -errno with a one-line message in err. */
int api_init(struct front *f, char *err, size_t errlen);
/* Replace f's API keys, metrics key and rate limiter with those of n (a config read again
 * on SIGHUP): requests checked from now on see the new ones; open connections stay. The
 * limiter starts afresh (its clients' buckets full). Returns 0, or -errno with a one-line
 * message in err and nothing changed. */
int api_reload_guard(struct front *f, const struct kiln_config *n, char *err, size_t errlen);
/* Release what api_init() set up. Safe after a failed api_init(). */
void api_free(struct front *f);


/* The HTTP server's callback for every request. */
void api_handle(struct http_req *req, void *arg);

/* lead's generation is over for its client (answered, failed or gone): its access line,
 * once. request.c calls it where a request ends. */
void api_request_over(struct request *lead);

/* Answer http with an OpenAI error body {"error":{message,type,param,code}}. param and code
 * may be NULL (JSON null). A 503 carries Retry-After. */
void api_send_error(struct http_req *http, int status, const char *type,
                    const char *message, const char *param, const char *code);

/* The OpenAI name of a finish reason: "stop", "length". */
const char *api_finish_name(enum finish_reason reason);

/* JSON texts (malloc'd, NUL-terminated; NULL when out of memory) for request r (a lead):
 * a stream chunk of choice index carrying text (len bytes; NULL with len 0 for none), the
 * role (chat's first chunk) or the finish reason (NULL: none) (written without a JSON tree:
 * api_json_sse.c); */
char *api_json_chunk(const struct request *r, uint32_t index, const char *text, size_t len,
                     bool role, const char *finish);
/* the usage-only chunk of stream_options.include_usage (r->prompt_tokens and
 * r->completion_tokens, the sum over the choices); */
char *api_json_usage_chunk(const struct request *r);
/* the whole reply of a non-stream request: every choice of r->outs. */
char *api_json_reply(const struct request *r);
/* an error object, for an error event inside a stream. */
char *api_json_error(const char *type, const char *message, const char *param, const char *code);

#endif
