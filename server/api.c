/* The OpenAI-compatible API of the front: route, parse and check the request JSON (a wrong
 * field is a 400 naming it), encode the prompt, and shape every answer (whole replies, stream
 * chunks, errors, /v1/models, /health). The request's life after admission is request.c's. */
#include "api.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "config.h"
#include "gguf.h"
#include "log.h"
#include "request.h"
#include "shm_region.h"
#include "stop.h"
#include "tokenizer.h"
#include "workers.h"

#define MOCK_CONTEXT 4096

/* ---- the model's facts ---- */

static void copy_gguf_str(char *dst, size_t cap, struct gguf_str s)
{
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(dst, s.ptr, n);
    dst[n] = '\0';
}

static int open_gguf(struct front_model *m, const struct kiln_config *cfg, char *err,
                     size_t errlen)
{
    struct gguf_str s;
    char key[160];
    uint32_t ctx = 0;

    if (!(m->gguf = gguf_open(cfg->model, err, errlen)))
        return -EINVAL;
    if (gguf_get_str(m->gguf, "general.name", &s) == 0 && s.len > 0) {
        copy_gguf_str(m->name, sizeof(m->name), s);
    } else {
        const char *base = strrchr(cfg->model, '/');
        snprintf(m->name, sizeof(m->name), "%s", base ? base + 1 : cfg->model);
    }
    if (gguf_get_str(m->gguf, "general.architecture", &s) == 0 && s.len < 64) {
        char arch[64];
        copy_gguf_str(arch, sizeof(arch), s);
        snprintf(key, sizeof(key), "%s.context_length", arch);
        (void)gguf_get_u32(m->gguf, key, &ctx);
    }
    m->max_context = cfg->ctx ? cfg->ctx : ctx;
    if (m->max_context == 0) {
        snprintf(err, errlen, "%s: no context length in the file; give --ctx", cfg->model);
        return -EINVAL;
    }
    if (!(m->tok = tokenizer_create_gguf(m->gguf, err, errlen)))
        return -EINVAL;
    chat_template_from_gguf(&m->tmpl, m->gguf);
    return 0;
}

int front_model_open(struct front_model *m, const struct kiln_config *cfg, char *err,
                     size_t errlen)
{
    int rc;
    memset(m, 0, sizeof(*m));
    if (strcmp(cfg->model, "mock") == 0) {
        snprintf(m->name, sizeof(m->name), "mock");
        m->max_context = cfg->ctx ? cfg->ctx : MOCK_CONTEXT;
        m->tmpl.family = CHAT_FAMILY_FALLBACK;
        if (!(m->tok = tokenizer_create_bytes())) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
    } else if ((rc = open_gguf(m, cfg, err, errlen)) < 0) {
        front_model_close(m);
        return rc;
    }
    if (cfg->chat_template) {
        int fam = chat_family_from_name(cfg->chat_template);
        if (fam < 0) {
            snprintf(err, errlen, "--chat-template: unknown template '%s'", cfg->chat_template);
            front_model_close(m);
            return -EINVAL;
        }
        m->tmpl.family = (enum chat_family)fam;
    }
    if (m->max_context > WIRE_MAX_PROMPT + 1)
        m->max_context = WIRE_MAX_PROMPT + 1; /* a JOB cannot carry more */
    return 0;
}

void front_model_close(struct front_model *m)
{
    if (m->tok)
        tokenizer_destroy(m->tok);
    if (m->gguf)
        gguf_close(m->gguf);
    m->tok = NULL;
    m->gguf = NULL;
}

/* ---- JSON out ---- */

/* A JSON string of len bytes; invalid UTF-8 bytes become U+FFFD so jansson accepts it. */
static json_t *json_text(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    char *fixed = malloc(len * 3 + 1);
    size_t o = 0;
    if (!fixed)
        return NULL;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = n > 0 && i + n <= len;
        for (size_t k = 1; ok && k < n; k++)
            ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
        if (ok) {
            /* overlong or surrogate: let jansson judge the character */
            json_t *one = json_stringn(s + i, n);
            ok = one != NULL;
            json_decref(one);
        }
        if (ok) {
            memcpy(fixed + o, s + i, n);
            o += n;
            i += n;
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    j = json_stringn(fixed, o);
    free(fixed);
    return j;
}

static char *json_finish(json_t *root)
{
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

static json_t *json_envelope(const struct request *r, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object", object, "created",
                     (json_int_t)r->created, "model", r->f->model.name);
}

static json_t *json_usage(const struct request *r)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)r->prompt_tokens,
                     "completion_tokens", (json_int_t)r->completion_tokens, "total_tokens",
                     (json_int_t)r->prompt_tokens + (json_int_t)r->completion_tokens);
}

const char *api_finish_name(enum finish_reason reason)
{
    return reason == FINISH_REASON_LENGTH ? "length" : "stop";
}

char *api_json_chunk(const struct request *r, const char *text, size_t len, bool role,
                     const char *finish)
{
    bool chat = r->kind == REQUEST_KIND_CHAT;
    json_t *root = json_envelope(r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_pack("{s:i, s:n, s:o}", "index", 0, "logprobs", "finish_reason",
                               finish ? json_string(finish) : json_null());
    if (!root || !choice)
        goto fail;
    if (chat) {
        json_t *delta = json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (text)
            json_object_set_new(delta, "content", json_text(text, len));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", text ? json_text(text, len) : json_string(""));
    }
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    return json_finish(root);
fail:
    json_decref(choice);
    json_decref(root);
    return NULL;
}

char *api_json_usage_chunk(const struct request *r)
{
    bool chat = r->kind == REQUEST_KIND_CHAT;
    json_t *root = json_envelope(r, chat ? "chat.completion.chunk" : "text_completion");
    if (!root)
        return NULL;
    json_object_set_new(root, "choices", json_array());
    json_object_set_new(root, "usage", json_usage(r));
    return json_finish(root);
}

char *api_json_reply(const struct request *r, const char *text, size_t len, const char *finish)
{
    bool chat = r->kind == REQUEST_KIND_CHAT;
    json_t *root = json_envelope(r, chat ? "chat.completion" : "text_completion");
    json_t *choice = json_pack("{s:i, s:n, s:s}", "index", 0, "logprobs", "finish_reason",
                               finish);
    if (!root || !choice)
        goto fail;
    if (chat)
        json_object_set_new(choice, "message",
                            json_pack("{s:s, s:o}", "role", "assistant", "content",
                                      json_text(text, len)));
    else
        json_object_set_new(choice, "text", json_text(text, len));
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    json_object_set_new(root, "usage", json_usage(r));
    return json_finish(root);
fail:
    json_decref(choice);
    json_decref(root);
    return NULL;
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

char *api_json_error(const char *type, const char *message, const char *param, const char *code)
{
    return json_finish(json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message",
                                 json_text(message, strlen(message)), "type", type, "param",
                                 str_or_null(param), "code", str_or_null(code)));
}

static void send_json(struct evhttp_request *http, int status, char *json)
{
    struct evbuffer *body = evbuffer_new();
    if (!body || !json) {
        evhttp_send_error(http, 500, NULL);
        goto out;
    }
    evhttp_add_header(evhttp_request_get_output_headers(http), "Content-Type",
                      "application/json");
    evbuffer_add(body, json, strlen(json));
    evbuffer_add(body, "\n", 1);
    evhttp_send_reply(http, status, NULL, body);
out:
    if (body)
        evbuffer_free(body);
    free(json);
}

void api_send_error(struct evhttp_request *http, int status, const char *type,
                    const char *message, const char *param, const char *code)
{
    if (status == 503)
        evhttp_add_header(evhttp_request_get_output_headers(http), "Retry-After", "1");
    send_json(http, status, api_json_error(type, message, param, code));
}

/* ---- JSON in ---- */

struct perr {
    char msg[256];
    const char *param;
    const char *code;
    int status;
};

static int bad(struct perr *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(struct perr *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->param = param;
    e->status = 400;
    return -EINVAL;
}

/* A number field (integer or real) within [lo, hi]; absent or null leaves *out. */
static int get_num(json_t *o, const char *k, double lo, double hi, float *out, struct perr *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return bad(e, k, "'%s' must be a number", k);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) {
        snprintf(e->msg, sizeof(e->msg), "'%s' must be between %g and %g", k, lo, hi);
        e->param = k;
        e->status = 400;
        return -EINVAL;
    }
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
    if (i < lo || i > hi) {
        snprintf(e->msg, sizeof(e->msg), "'%s' must be between %lld and %lld", k,
                 (long long)lo, (long long)hi);
        e->param = k;
        e->status = 400;
        return -EINVAL;
    }
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
        return bad(e, "stop", "a stop string is longer than %s bytes", "256");
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
            return bad(e, "stop", "'stop' has more than %s strings", "4");
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
        return bad(e, "logit_bias", "'logit_bias' has more than %s entries", "300");
    json_object_foreach(v, key, b) {
        char *end;
        errno = 0;
        unsigned long id = strtoul(key, &end, 10);
        if (errno || *key < '0' || *key > '9' || *end ||
            id >= tokenizer_n_vocab(r->f->model.tok))
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

/* The fields both routes share: stream, limits, stop strings, sampling. Sampling starts from
 * proto_sampling_init (greedy) and takes each field the request gives: a request without
 * "temperature" is decoded greedily, not at OpenAI's default of 1, so replies are
 * reproducible unless asked otherwise. */
static int parse_common(struct request *r, json_t *o, uint32_t *max_tokens, struct perr *e)
{
    struct proto_sampling *s = &r->sampling;
    json_t *v;
    json_int_t i = 0;
    bool have;
    int rc;

    if ((v = json_object_get(o, "model")) && !json_is_string(v) && !json_is_null(v))
        return bad(e, "model", "'%s' must be a string", "model");
    if ((rc = get_bool(o, "stream", &r->stream, e)) < 0)
        return rc;
    if ((v = json_object_get(o, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "stream_options", "'%s' must be an object", "stream_options");
        if ((rc = get_bool(v, "include_usage", &r->include_usage, e)) < 0)
            return rc;
    }
    *max_tokens = 0;
    const char *keys[] = {"max_tokens", "max_completion_tokens"};
    for (int k = 0; k < 2; k++) {
        if ((rc = get_int(o, keys[k], INT64_MIN, INT64_MAX, &i, &have, e)) < 0)
            return rc;
        if (!have)
            continue;
        if (i < 1)
            return bad(e, keys[k], "'%s' must be at least 1", keys[k]);
        *max_tokens = i > UINT32_MAX ? UINT32_MAX : (uint32_t)i;
    }
    if ((rc = get_int(o, "n", 1, 1, &i, NULL, e)) < 0)
        return bad(e, "n", "only '%s' = 1 is supported", "n");
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
    if (have)
        s->seed = (uint64_t)i;
    if ((rc = get_bool(o, "ignore_eos", &s->ignore_eos, e)) < 0)
        return rc;
    if ((rc = parse_stop(r, o, e)) < 0)
        return rc;
    return parse_logit_bias(r, o, e);
}

/* The prompt text of a completion request (borrowed from o), or NULL with e set. */
static const char *completion_text(json_t *o, size_t *len, struct perr *e)
{
    json_t *v = json_object_get(o, "prompt");
    if (v && json_is_array(v) && json_array_size(v) == 1)
        v = json_array_get(v, 0);
    if (!v || json_is_null(v)) {
        bad(e, "prompt", "'%s' is required", "prompt");
        return NULL;
    }
    if (!json_is_string(v)) {
        bad(e, "prompt", "'%s' must be a string", "prompt");
        return NULL;
    }
    *len = json_string_length(v);
    return json_string_value(v);
}

/* Render a chat request's messages (malloc'd text), or NULL with e set. */
static char *chat_text(struct front *f, json_t *o, struct perr *e)
{
    json_t *msgs = json_object_get(o, "messages"), *m;
    struct chat_msg *cm = NULL;
    char **owned = NULL, err[256] = "", *out = NULL;
    size_t i, n;

    if (!msgs || !json_is_array(msgs)) {
        bad(e, "messages", "'%s' must be an array of messages", "messages");
        return NULL;
    }
    if ((n = json_array_size(msgs)) == 0) {
        bad(e, "messages", "'%s' must not be empty", "messages");
        return NULL;
    }
    cm = calloc(n, sizeof(*cm));
    owned = calloc(n, sizeof(*owned));
    if (!cm || !owned)
        goto out;
    json_array_foreach(msgs, i, m) {
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role)) {
            bad(e, "messages", "each of '%s' needs a string 'role'", "messages");
            goto out;
        }
        cm[i].role = json_string_value(role);
        if (!content || json_is_null(content)) {
            cm[i].content = "";
        } else if (json_is_string(content)) {
            cm[i].content = json_string_value(content);
        } else if (json_is_array(content)) {
            /* content parts: the text ones, joined */
            json_t *part;
            size_t k, total = 1;
            json_array_foreach(content, k, part) {
                json_t *t = json_object_get(part, "text");
                if (!json_is_string(t)) {
                    bad(e, "messages", "only text parts are supported in '%s'", "content");
                    goto out;
                }
                total += json_string_length(t);
            }
            if (!(owned[i] = malloc(total)))
                goto out;
            owned[i][0] = '\0';
            json_array_foreach(content, k, part) {
                strcat(owned[i], json_string_value(json_object_get(part, "text")));
            }
            cm[i].content = owned[i];
        } else {
            bad(e, "messages", "a message's '%s' must be a string", "content");
            goto out;
        }
    }
    out = chat_render(&f->model.tmpl, cm, n, true, err, sizeof(err));
    if (!out)
        bad(e, "messages", "%s", err[0] ? err : "the messages cannot be rendered");
out:
    for (i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(cm);
    return out;
}

/* Tokens for text; sets r->prompt and the length checks of DESIGN "generate". */
static int encode_prompt(struct request *r, const char *text, size_t len, unsigned flags,
                         uint32_t max_tokens, struct perr *e)
{
    const struct front_model *m = &r->f->model;
    size_t cap = m->max_context;
    if (len == 0)
        return bad(e, "prompt", "the %s is empty", "prompt");
    if (!(r->prompt = malloc(cap * sizeof(uint32_t))))
        return -ENOMEM;
    long n = tokenizer_encode(m->tok, text, len, flags, r->prompt, cap);
    if (n < 0)
        return bad(e, "prompt", "the %s cannot be encoded", "prompt");
    if (n == 0)
        return bad(e, "prompt", "the %s is empty", "prompt");
    if ((uint64_t)n >= m->max_context) {
        snprintf(e->msg, sizeof(e->msg),
                 "This model's maximum context length is %u tokens; the prompt has %ld%s.",
                 m->max_context, n, (size_t)n > cap ? " or more" : "");
        e->param = "prompt";
        e->code = "context_length_exceeded";
        e->status = 400;
        return -EINVAL;
    }
    r->n_prompt = (uint32_t)n;
    uint32_t room = m->max_context - r->n_prompt;
    r->max_new_tokens = max_tokens && max_tokens < room ? max_tokens : room;
    uint32_t *shrunk = realloc(r->prompt, (size_t)n * sizeof(uint32_t));
    if (shrunk)
        r->prompt = shrunk;
    return 0;
}

static void handle_generate(struct front *f, struct evhttp_request *http, enum request_kind kind)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(http);
    size_t len = evbuffer_get_length(in);
    struct perr e = {.status = 400};
    json_error_t jerr;
    json_t *o = NULL;
    struct request *r = NULL;
    char *chat = NULL;
    uint32_t max_tokens = 0;
    int rc;

    o = json_loadb((const char *)evbuffer_pullup(in, -1), len, 0, &jerr);
    if (!o) {
        snprintf(e.msg, sizeof(e.msg), "the body is not valid JSON: %s (line %d, column %d)",
                 jerr.text, jerr.line, jerr.column);
        goto fail;
    }
    if (!json_is_object(o)) {
        bad(&e, NULL, "the body must be a JSON %s", "object");
        goto fail;
    }
    if (!(r = request_create(f, http, kind))) {
        rc = -ENOMEM;
        goto oom;
    }
    if ((rc = parse_common(r, o, &max_tokens, &e)) < 0)
        goto fail_rc;
    if (kind == REQUEST_KIND_CHAT) {
        if (!(chat = chat_text(f, o, &e))) {
            rc = -EINVAL;
            goto fail_rc;
        }
        unsigned flags = TOKENIZER_PARSE_SPECIAL | (f->model.tmpl.bos[0] ? 0 : TOKENIZER_ADD_SPECIAL);
        rc = encode_prompt(r, chat, strlen(chat), flags, max_tokens, &e);
        if (rc < 0 && e.param && strcmp(e.param, "prompt") == 0)
            e.param = "messages";
    } else {
        size_t tlen = 0;
        const char *text = completion_text(o, &tlen, &e);
        rc = text ? encode_prompt(r, text, tlen, TOKENIZER_ADD_SPECIAL, max_tokens, &e)
                  : -EINVAL;
    }
    if (rc < 0)
        goto fail_rc;
    free(chat);
    json_decref(o);
    (void)request_start(r);
    return;
fail_rc:
    if (rc == -ENOMEM)
        goto oom;
fail:
    free(chat);
    json_decref(o);
    if (r)
        request_fail(r, e.status, "invalid_request_error", e.msg, e.param, e.code);
    else
        api_send_error(http, e.status, "invalid_request_error", e.msg, e.param, e.code);
    return;
oom:
    free(chat);
    json_decref(o);
    if (r)
        request_fail(r, 500, "server_error", "out of memory", NULL, NULL);
    else
        api_send_error(http, 500, "server_error", "out of memory", NULL, NULL);
}

/* ---- the other routes ---- */

static void handle_models(struct front *f, struct evhttp_request *http)
{
    json_t *model = json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", f->model.name, "object",
                              "model", "created", (json_int_t)f->started_at, "owned_by", "kiln",
                              "context_length", (json_int_t)f->model.max_context);
    send_json(http, 200, json_finish(json_pack("{s:s, s:[o]}", "object", "list", "data",
                                               model)));
}

static void handle_health(struct front *f, struct evhttp_request *http)
{
    json_t *arr = json_array();
    uint32_t running = 0;
    bool ready = workers_any_ready(f->workers);
    for (uint32_t i = 0; i < workers_count(f->workers); i++) {
        struct worker *w = workers_get(f->workers, i);
        enum worker_life l = worker_life_get(w);
        uint32_t waiting = 0;
        if (w->reg.hdr)
            waiting = atomic_load_explicit(&w->reg.hdr->waiting, memory_order_relaxed);
        running += w->used;
        json_array_append_new(arr, json_pack("{s:i, s:I, s:s, s:i, s:i, s:i}", "id", (int)w->id,
                                             "pid", (json_int_t)w->pid, "state",
                                             worker_life_name(l), "running", (int)w->used,
                                             "waiting", (int)waiting, "restarts",
                                             (int)(w->n_spawns ? w->n_spawns - 1 : 0)));
    }
    send_json(http, ready ? 200 : 503,
              json_finish(json_pack("{s:s, s:s, s:i, s:i, s:o}", "status",
                                    ready ? "ok" : "unavailable", "model", f->model.name,
                                    "running", (int)running, "waiting", (int)f->queue.n,
                                    "workers", arr)));
}

struct route {
    const char *path;
    enum evhttp_cmd_type method;
    const char *allow;
    int id;
};

enum { ROUTE_COMPLETIONS, ROUTE_CHAT, ROUTE_MODELS, ROUTE_HEALTH };

static const struct route routes[] = {
    {"/v1/completions", EVHTTP_REQ_POST, "POST", ROUTE_COMPLETIONS},
    {"/v1/chat/completions", EVHTTP_REQ_POST, "POST", ROUTE_CHAT},
    {"/v1/models", EVHTTP_REQ_GET, "GET", ROUTE_MODELS},
    {"/health", EVHTTP_REQ_GET, "GET", ROUTE_HEALTH},
};

void api_handle(struct evhttp_request *http, void *arg)
{
    struct front *f = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(http);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    enum evhttp_cmd_type method = evhttp_request_get_command(http);

    if (!evhttp_request_get_uri(http) || !path) {
        /* libevent calls back without a URI when reading the request failed; it set the
         * status (413 for a body over the limit) */
        int code = evhttp_request_get_response_code(http);
        if (code == 413)
            api_send_error(http, 413, "invalid_request_error",
                           "the request body is larger than the server accepts", NULL, NULL);
        else
            api_send_error(http, code >= 400 ? code : 400, "invalid_request_error",
                           "malformed HTTP request", NULL, NULL);
        return;
    }
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *rt = &routes[i];
        if (strcmp(path, rt->path) != 0)
            continue;
        if (method != rt->method && !(method == EVHTTP_REQ_HEAD && rt->method == EVHTTP_REQ_GET)) {
            evhttp_add_header(evhttp_request_get_output_headers(http), "Allow", rt->allow);
            api_send_error(http, 405, "invalid_request_error", "method not allowed", NULL,
                           NULL);
            return;
        }
        switch (rt->id) {
        case ROUTE_COMPLETIONS:
            return handle_generate(f, http, REQUEST_KIND_COMPLETION);
        case ROUTE_CHAT:
            return handle_generate(f, http, REQUEST_KIND_CHAT);
        case ROUTE_MODELS:
            return handle_models(f, http);
        case ROUTE_HEALTH:
            return handle_health(f, http);
        }
    }
    api_send_error(http, 404, "invalid_request_error", "no such route", NULL, NULL);
}
