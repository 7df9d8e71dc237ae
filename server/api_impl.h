/* Private to the API's files (api.c, api_parse.c, api_json.c, request.c): a request error
 * being built, the parsed fields that do not live in struct request, and JSON helpers. */
#ifndef API_IMPL_H
#define API_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "relay.h"
#include "request.h"

/* A refusal in the making: the OpenAI error's message, param and code, and the status. */
struct perr {
    char msg[256];
    const char *param;
    const char *code;
    int status;
};

/* Fill e as a 400 naming param (may be NULL). Returns -EINVAL. */
int api_bad(struct perr *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

struct supervisor_view;
/* /health's body (api_health.c) from the workers' view: {"status", "running", "workers":
 * [{"id", "state", "pid" (null when none), "running" (jobs it holds), "waiting" (received,
 * not admitted), "active" (sequences generating), "restarts", "cache", "restart_in_ms" (in
 * backoff), "last_exit", "last_exit_at" (ISO 8601 UTC), "last_error"}]}; the caller adds the
 * model and the front's queue. status: "draining" while shutting down, "ok" when every
 * worker is ready, "degraded" when some are, else "unavailable"; *http_status is 200 for
 * ok/degraded, else 503. Without details (a caller without the key, when keys are set) only
 * {"status"}: "ok" when a worker can serve, "loading" while one starts and none can,
 * "draining", else "failed". Returns NULL (*http_status 500) when out of memory. */
json_t *api_health_json(const struct supervisor_view *v, bool details, int *http_status);

/* What api_parse_common() gives back besides the fields it sets in r. */
struct api_params {
    uint32_t max_tokens; /* 0: not given */
    bool seed_given;
};

/* The fields both routes share: model, stream and stream_options, max_tokens and
 * max_completion_tokens, n, stop, sampling, logprobs (the route's form), user; and a 400
 * naming any field kiln does not implement. Returns 0, -EINVAL (e set: 400, or 404 for
 * another model) or -ENOMEM. */
/* The chat template (api_template.c). Choose m's template after the model is open: a family
 * by --chat-template, a Jinja file by --chat-template-file, else the model's own
 * tokenizer.chat_template; a template the engine cannot parse leaves the family table, with a
 * warning naming the construct. Returns 0 or -errno with err set. */
struct front_model;
struct kiln_config;
int api_template_setup(struct front_model *m, const struct kiln_config *cfg, char *err,
                       size_t errlen);
/* POST /apply-template: a chat request's body in, {"prompt": "..."} out, nothing generated
 * (add_generation_prompt: true unless the body says false). */
void api_apply_template(struct front *f, struct http_req *http);

int api_parse_common(struct request *r, json_t *o, struct api_params *p, struct perr *e);

/* response_format (json_object, json_schema), grammar and json_schema: r->grammar set to the
 * GBNF the job carries (NULL: unconstrained). Returns 0, -EINVAL with e set (400 naming the
 * unsupported keyword or the grammar's line and column) or -ENOMEM. */
int api_parse_grammar(struct request *r, json_t *o, struct perr *e);

/* A completion's prompt: a string or an array of one string (*text borrowed from o, *len),
 * or an array of token ids (*ids malloc'd, *n_ids; *text NULL). Returns 0 or -EINVAL /
 * -ENOMEM with e set. */
int api_parse_prompt(const struct request *r, json_t *o, const char **text, size_t *len,
                     uint32_t **ids, uint32_t *n_ids, struct perr *e);

/* A JSON string of len bytes; invalid UTF-8 becomes U+FFFD. NULL when out of memory. */
json_t *api_json_text(const char *s, size_t len);

/* Serialise root compactly and release it (NULL in, NULL out). */
char *api_json_finish(json_t *root);

/* The logprobs of n tokens in the route's shape, for a stream chunk or to append to a
 * whole reply's (append_to NULL: a new object/array). text_offset: the reply's bytes before
 * these tokens (completions), advanced by their pieces. */
json_t *api_json_logprobs(const struct request *r, const struct relay_token *toks, uint32_t n,
                          json_t *append_to, uint32_t *text_offset);

/* Write once what starts every stream chunk of r ({"id":...,"choices":[{"index":), so its
 * frames copy it rather than format and escape it each time (r->chunk_head). Returns 0, or
 * -1 when out of memory (each frame then writes it). */
int api_json_chunk_head(struct request *r);

/* A stream chunk of choice index carrying text (NULL: none) and the logprobs of n tokens in
 * the route's shape (as api_json_logprobs() builds them); text_offset as there. */
struct relay_token;
char *api_json_chunk_logprobs(const struct request *r, uint32_t index, const char *text,
                              size_t len, const struct relay_token *toks, uint32_t n,
                              uint32_t *text_offset);

/* Chat stream chunks of a parsed reply (malloc'd JSON text, NULL when out of memory): a
 * delta of one text field (e.g. "reasoning_content"), and a tool call's delta (id and name
 * given: the call's first chunk, with "type"; arguments always, maybe ""). */
char *api_json_delta_chunk(const struct request *r, uint32_t index, const char *field,
                           const char *text, size_t len);
char *api_json_tool_chunk(const struct request *r, uint32_t index, uint32_t call_index,
                          const char *id, const char *name, size_t name_len, const char *args,
                          size_t args_len);
/* A whole reply's tool call {id, type: "function", function: {name, arguments}}. */
json_t *api_json_tool_call(const char *id, const char *name, size_t name_len, const char *args,
                           size_t args_len);

#endif
