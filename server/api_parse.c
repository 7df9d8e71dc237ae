/* The API's request fields: each checked for type and range (a wrong one is a 400 naming
 * it), the sampling fields copied into proto_sampling, and a 400 for every field kiln does
 * not implement, so a client never gets a silently different answer. Unknown fields are
 * ignored, as OpenAI-compatible servers do. */
#include "api.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hist.h"

#include "api_impl.h"
#include "roll.h"
#include "stop.h"
#include "tokenizer.h"

int api_bad(struct perr *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->param = param;
    e->status = 400;
    return -EINVAL;
}

#define bad api_bad

/* A number field (integer or real) within [lo, hi]; absent or null leaves *out. */
static int get_num(json_t *o, const char *k, double lo, double hi, float *out, struct perr *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return bad(e, k, "'%s' must be a number", k);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return bad(e, k, "'%s' must be between %g and %g", k, lo, hi);
    *out = (float)d;
    return 0;
}

static int get_int(json_t *o, const char *k, json_int_t lo, json_int_t hi, json_int_t *out,
                   bool *present, struct perr *e)
{
    json_t *v = json_object_get(o, k);
    if (present)
        *present = false;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return bad(e, k, "'%s' must be an integer", k);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return bad(e, k, "'%s' must be between %lld and %lld", k, (long long)lo, (long long)hi);
    *out = i;
    if (present)
        *present = true;
    return 0;
}

static int get_bool(json_t *o, const char *k, bool *out, struct perr *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(e, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

static int add_stop(struct request *r, json_t *v, struct perr *e)
{
    if (!json_is_string(v))
        return bad(e, "stop", "'%s' must be a string or an array of strings", "stop");
    size_t len = json_string_length(v);
    if (len == 0)
        return 0; /* an empty stop string can never be told apart: ignored */
    if (len > STOP_MAX_LEN)
        return bad(e, "stop", "a stop string is longer than %d bytes", STOP_MAX_LEN);
    if (!(r->stops[r->n_stops] = strndup(json_string_value(v), len)))
        return -ENOMEM;
    r->n_stops++;
    return 0;
}

static int parse_stop(struct request *r, json_t *o, struct perr *e)
{
    json_t *v = json_object_get(o, "stop"), *s;
    size_t i;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_array(v)) {
        if (json_array_size(v) > REQUEST_MAX_STOPS)
            return bad(e, "stop", "'stop' has more than %d strings", REQUEST_MAX_STOPS);
        json_array_foreach(v, i, s) {
            int rc = add_stop(r, s, e);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    return add_stop(r, v, e);
}

static int parse_logit_bias(struct request *r, json_t *o, struct perr *e)
{
    json_t *v = json_object_get(o, "logit_bias"), *b;
    const char *key;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return bad(e, "logit_bias", "'%s' must be an object", "logit_bias");
    if (json_object_size(v) > WIRE_MAX_LOGIT_BIAS)
        return bad(e, "logit_bias", "'logit_bias' has more than %u entries", WIRE_MAX_LOGIT_BIAS);
    json_object_foreach(v, key, b) {
        char *end;
        errno = 0;
        unsigned long id = strtoul(key, &end, 10);
        if (errno || *key < '0' || *key > '9' || *end ||
            id >= tokenizer_n_vocab(r->model->tok))
            return bad(e, "logit_bias", "'%s' is not a token id of this model", key);
        if (!json_is_number(b) || json_number_value(b) < -100 || json_number_value(b) > 100)
            return bad(e, "logit_bias", "the bias of token %s must be between -100 and 100",
                       key);
        struct proto_logit_bias *lb = &r->sampling.logit_bias[r->sampling.n_logit_bias++];
        lb->token = (uint32_t)id;
        lb->bias = (float)json_number_value(b);
    }
    return 0;
}

/* Whether field k is present with a value that asks for something (not null, false, "none"
 * or an empty array/object). */
static bool asks_for(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v) || json_is_false(v))
        return false;
    if (json_is_string(v))
        return strcmp(json_string_value(v), "none") != 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    return true;
}

/* Fields a client may send that kiln does not implement: a 400 naming the first. */
static int parse_unsupported(const struct request *r, json_t *o, struct perr *e)
{
    static const char *const fields[] = {"functions", "function_call", "audio",
                                         "modalities", "prediction", "suffix"};
    json_t *v;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (asks_for(o, fields[i]))
            return bad(e, fields[i], "'%s' is not supported by this server", fields[i]);
    if ((v = json_object_get(o, "best_of")) && !json_is_null(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 1))
        return bad(e, "best_of", "only '%s' = 1 is supported", "best_of");
    (void)r;
    return 0;
}

/* logprobs: chat's `logprobs: true` with `top_logprobs` 0..20; completions' `logprobs`
 * integer 0..5 (the alternatives per token). */
static int parse_logprobs(struct request *r, json_t *o, struct perr *e)
{
    struct proto_sampling *s = &r->sampling;
    json_int_t i = 0;
    bool have;
    int rc;

    if (r->kind == REQUEST_KIND_COMPLETION) {
        if ((rc = get_int(o, "logprobs", 0, 5, &i, &have, e)) < 0)
            return rc;
        r->logprobs = have;
        s->top_logprobs = have ? (uint32_t)i : 0;
    } else {
        if ((rc = get_bool(o, "logprobs", &r->logprobs, e)) < 0)
            return rc;
        if ((rc = get_int(o, "top_logprobs", 0, WIRE_MAX_TOP_LOGPROBS, &i, &have, e)) < 0)
            return rc;
        if (have && i > 0 && !r->logprobs)
            return bad(e, "top_logprobs", "'%s' needs 'logprobs': true", "top_logprobs");
        s->top_logprobs = have ? (uint32_t)i : 0;
    }
    s->logprobs = r->logprobs;
    return 0;
}

/* Sampling starts from proto_sampling_init (greedy) and takes each field the request gives:
 * a request without "temperature" is decoded greedily (temperature 0), not at OpenAI's
 * default of 1, so replies are reproducible unless asked otherwise. Without "seed" each
 * request draws a fresh one (getrandom), so two requests at temperature > 0 differ; the
 * choices of "n" use seed, seed+1, ... */
static int parse_sampling(struct request *r, json_t *o, struct api_params *p, struct perr *e)
{
    struct proto_sampling *s = &r->sampling;
    json_int_t i = 0;
    bool have;
    int rc;

    if ((rc = get_num(o, "temperature", 0, 2, &s->temperature, e)) < 0 ||
        (rc = get_num(o, "top_p", 0, 1, &s->top_p, e)) < 0 ||
        (rc = get_num(o, "min_p", 0, 1, &s->min_p, e)) < 0 ||
        (rc = get_num(o, "presence_penalty", -2, 2, &s->presence_penalty, e)) < 0 ||
        (rc = get_num(o, "frequency_penalty", -2, 2, &s->frequency_penalty, e)) < 0 ||
        (rc = get_num(o, "repetition_penalty", 0.01, 10, &s->repetition_penalty, e)) < 0)
        return rc;
    if ((rc = get_int(o, "top_k", -1, INT32_MAX, &i, &have, e)) < 0)
        return rc;
    if (have)
        s->top_k = i < 0 ? 0 : (int32_t)i;
    if ((rc = get_int(o, "seed", INT64_MIN, INT64_MAX, &i, &have, e)) < 0)
        return rc;
    p->seed_given = have;
    if (have) {
        s->seed = (uint64_t)i;
    } else if (getrandom(&s->seed, sizeof(s->seed), GRND_NONBLOCK) != sizeof(s->seed)) {
        s->seed = hist_now_us() ^ (r->req_id * 0x9e3779b97f4a7c15ull); /* no entropy yet */
    }
    if ((rc = get_bool(o, "ignore_eos", &s->ignore_eos, e)) < 0)
        return rc;
    {
        bool cache_prompt = true; /* llama.cpp's field: false computes the whole prompt */
        if ((rc = get_bool(o, "cache_prompt", &cache_prompt, e)) < 0)
            return rc;
        s->no_cache = !cache_prompt;
    }
    return parse_logit_bias(r, o, e);
}

int api_parse_common(struct request *r, json_t *o, struct api_params *p, struct perr *e)
{
    json_t *v;
    json_int_t i = 0;
    bool have;
    int rc;

    memset(p, 0, sizeof(*p));
    if ((rc = parse_unsupported(r, o, e)) < 0)
        return rc;
    /* "model" may be left out (as llama.cpp allows); when given it must name this model */
    if ((v = json_object_get(o, "model")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(e, "model", "'%s' must be a string", "model");
        if (strcmp(json_string_value(v), r->model->name) != 0) {
            /* during a reload's roll: the other model, while it is still served */
            struct front_model *m = roll_find_model(r->f, json_string_value(v));
            if (!m) {
                bad(e, "model", "The model '%.128s' does not exist; this server serves '%.100s'",
                    json_string_value(v), r->model->name);
                e->status = 404;
                e->code = "model_not_found";
                return -EINVAL;
            }
            front_model_put(r->model);
            r->model = front_model_ref(m);
        }
    }
    if ((v = json_object_get(o, "user")) && !json_is_null(v) && !json_is_string(v))
        return bad(e, "user", "'%s' must be a string", "user");
    if ((rc = get_bool(o, "stream", &r->stream, e)) < 0)
        return rc;
    if ((v = json_object_get(o, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "stream_options", "'%s' must be an object", "stream_options");
        if ((rc = get_bool(v, "include_usage", &r->include_usage, e)) < 0)
            return rc;
    }
    const char *keys[] = {"max_tokens", "max_completion_tokens"};
    for (int k = 0; k < 2; k++) {
        if ((rc = get_int(o, keys[k], INT64_MIN, INT64_MAX, &i, &have, e)) < 0)
            return rc;
        if (!have)
            continue;
        if (i < 1)
            return bad(e, keys[k], "'%s' must be at least 1", keys[k]);
        p->max_tokens = i > UINT32_MAX ? UINT32_MAX : (uint32_t)i;
    }
    r->n_choices = 1;
    if ((rc = get_int(o, "n", INT64_MIN, INT64_MAX, &i, &have, e)) < 0)
        return rc;
    if (have && (i < 1 || i > REQUEST_MAX_N))
        return bad(e, "n", "'n' must be between 1 and %d", REQUEST_MAX_N);
    if (have)
        r->n_choices = (uint32_t)i;
    if (r->kind == REQUEST_KIND_COMPLETION && (rc = get_bool(o, "echo", &r->echo, e)) < 0)
        return rc;
    if ((rc = parse_logprobs(r, o, e)) < 0)
        return rc;
    if (r->echo && r->logprobs)
        return bad(e, "echo", "'echo' together with 'logprobs' is not supported");
    if ((rc = parse_sampling(r, o, p, e)) < 0)
        return rc;
    if ((rc = api_parse_grammar(r, o, e)) < 0)
        return rc;
    return parse_stop(r, o, e);
}

int api_parse_prompt(const struct request *r, json_t *o, const char **text, size_t *len,
                     uint32_t **ids, uint32_t *n_ids, struct perr *e)
{
    json_t *v = json_object_get(o, "prompt"), *t;
    size_t i, n;

    *text = NULL;
    *ids = NULL;
    *n_ids = 0;
    if (v && json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (!v || json_is_null(v))
        return bad(e, "prompt", "'%s' is required", "prompt");
    if (json_is_string(v)) {
        *len = json_string_length(v);
        *text = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v) || (n = json_array_size(v)) == 0)
        return bad(e, "prompt", "'%s' must be a string, or an array of token ids", "prompt");
    if (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)))
        return bad(e, "prompt", "several prompts in one request are not supported");
    if (n >= r->model->max_context) {
        bad(e, "prompt", "This model's maximum context length is %u tokens; the prompt has %zu.",
            r->model->max_context, n);
        e->code = "context_length_exceeded";
        return -EINVAL;
    }
    if (!(*ids = malloc(n * sizeof(uint32_t))))
        return -ENOMEM;
    uint32_t vocab = tokenizer_n_vocab(r->model->tok);
    json_array_foreach(v, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= vocab) {
            free(*ids);
            *ids = NULL;
            return bad(e, "prompt", "prompt[%zu] is not a token id of this model", i);
        }
        (*ids)[i] = (uint32_t)json_integer_value(t);
    }
    *n_ids = (uint32_t)n;
    return 0;
}
