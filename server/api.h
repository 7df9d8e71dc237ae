/* The OpenAI-compatible API: routes, request JSON in (validated field by field), response JSON
 * out (whole replies, stream chunks, errors), /v1/models and /health; and the front's model
 * facts (name, context, tokenizer, chat template). The front's shared state is struct front. */
#ifndef API_H
#define API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "queue.h"
#include "wire.h"

struct evhttp;
struct evhttp_request;
struct event_base;
struct kiln_config;
struct tokenizer;
struct gguf;
struct workers;
struct request;

/* What the front knows of the model: enough to encode, template and check lengths. */
struct front_model {
    char name[128];
    uint32_t max_context;
    struct tokenizer *tok;
    struct chat_template tmpl;
    struct gguf *gguf; /* open while the tokenizer may borrow from it; NULL for the mock */
};

/* The front process's state, passed to every module; read-only config inside. */
struct front {
    const struct kiln_config *cfg;
    struct event_base *base;
    struct evhttp *http;
    struct front_model model;
    struct workers *workers;
    struct queue queue;
    struct request_list requests; /* every live request */
    uint32_t n_requests;
    uint64_t next_req_id;
    uint64_t id_salt;
    int64_t started_at; /* unix seconds */
};

/* Fill m from cfg: the mock (byte tokenizer, "mock", --ctx or 4096) or a GGUF file (its name,
 * context length, tokenizer and chat template); --chat-template overrides the family.
 * Returns 0 or -errno with a one-line message in err. */
int front_model_open(struct front_model *m, const struct kiln_config *cfg, char *err,
                     size_t errlen);
void front_model_close(struct front_model *m);

/* The evhttp callback for every request. */
void api_handle(struct evhttp_request *req, void *arg);

/* Answer http with an OpenAI error body {"error":{message,type,param,code}}. param and code
 * may be NULL (JSON null). A 503 carries Retry-After. */
void api_send_error(struct evhttp_request *http, int status, const char *type,
                    const char *message, const char *param, const char *code);

/* The OpenAI name of a finish reason: "stop", "length". */
const char *api_finish_name(enum finish_reason reason);

/* JSON texts (malloc'd, NUL-terminated; NULL when out of memory) for request r:
 * a stream chunk carrying text (len bytes; NULL with len 0 for none), the role (chat's first
 * chunk) or the finish reason (NULL: none); */
char *api_json_chunk(const struct request *r, const char *text, size_t len, bool role,
                     const char *finish);
/* the usage-only chunk of stream_options.include_usage; */
char *api_json_usage_chunk(const struct request *r);
/* the whole reply of a non-stream request, text of len bytes. */
char *api_json_reply(const struct request *r, const char *text, size_t len, const char *finish);
/* an error object, for an error event inside a stream. */
char *api_json_error(const char *type, const char *message, const char *param, const char *code);

#endif
