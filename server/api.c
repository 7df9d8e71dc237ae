/* The OpenAI-compatible API of the front: route, parse and check the request JSON (a wrong
 * field is a 400 naming it), encode the prompt, and shape every answer (whole replies, stream
 * chunks, errors, /v1/models, /health). The request's life after admission is request.c's. */
#include "api.h"
#include "access_log.h"
#include "request_id.h"
#include "api_tokenize.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "config.h"
#include "api_impl.h"
#include "api_chat.h"
#include "gen_memo.h"
#include "gguf.h"
#include "model_info.h"
#include "hist.h"
#include "http.h"
#include "log.h"
#include "ratelimit.h"
#include "request.h"
#include "relay.h"
#include "roll.h"
#include "shm_region.h"
#include "stop.h"
#include "tokenizer.h"
#include "supervisor.h"
#include "webui.h"
#include "workers.h"

#define MOCK_CONTEXT 4096

#define bad api_bad

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
    struct model_info mi;
    if (!cfg->ctx && model_info_read(m->gguf, &mi, err, errlen) == 0) /* as the engine would */
        m->max_context = model_info_default_ctx(mi.train_ctx, mi.kv_bytes_per_token,
                                                cfg->max_sequences,
                                                model_info_kv_budget() / cfg->workers);
    if (m->max_context == 0) {
        snprintf(err, errlen, "%s: no context length in the file; give --ctx", cfg->model);
        return -EINVAL;
    }
    m->kv_cache_tokens = cfg->kv_cache_tokens;
    if (cfg->kv_cache_mib) { /* MiB to positions, by the engine's F16 K and V per position */
        uint64_t t;
        if (model_info_read(m->gguf, &mi, err, errlen) < 0)
            return -EINVAL;
        t = ((uint64_t)cfg->kv_cache_mib << 20) / mi.kv_bytes_per_token;
        if (t == 0 || t > INT32_MAX) {
            snprintf(err, errlen, "--kv-cache-mib %u: %llu positions of %llu bytes (1 to %d)",
                     cfg->kv_cache_mib, (unsigned long long)t,
                     (unsigned long long)mi.kv_bytes_per_token, INT32_MAX);
            return -EINVAL;
        }
        m->kv_cache_tokens = (uint32_t)t;
    }
    if (!(m->tok = tokenizer_create_gguf(m->gguf, err, errlen)))
        return -EINVAL;
    chat_template_from_gguf(&m->tmpl, m->gguf);
    if (gguf_get_str(m->gguf, "tokenizer.chat_template", &s) == 0) {
        m->tool_format = toolcall_format_detect(s.ptr, (size_t)s.len);
        m->thinks = toolcall_template_thinks(s.ptr, (size_t)s.len);
    }
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
        m->tool_format = TOOLCALL_FORMAT_ANY; /* the mock says what it is told to */
        m->thinks = true;
        if (!(m->tok = tokenizer_create_bytes())) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
    } else if ((rc = open_gguf(m, cfg, err, errlen)) < 0) {
        front_model_close(m);
        return rc;
    }
    if ((rc = api_template_setup(m, cfg, err, errlen)) < 0) {
        front_model_close(m);
        return rc;
    }
    if (cfg->tool_call_format) {
        int fmt = toolcall_format_from_name(cfg->tool_call_format);
        if (fmt < 0) {
            snprintf(err, errlen, "--tool-call-format: unknown format '%s'",
                     cfg->tool_call_format);
            front_model_close(m);
            return -EINVAL;
        }
        m->tool_format = (enum toolcall_format)fmt;
    }
    if (m->max_context > WIRE_MAX_PROMPT + 1)
        m->max_context = WIRE_MAX_PROMPT + 1; /* a JOB cannot carry more */
    if (cfg->chat_memo_entries &&
        !(m->memo = gen_memo_create(cfg->chat_memo_entries, GEN_MEMO_MAX_BYTES))) {
        snprintf(err, errlen, "out of memory");
        front_model_close(m);
        return -ENOMEM;
    }
    return 0;
}

void front_model_close(struct front_model *m)
{
    gen_memo_destroy(m->memo);
    m->memo = NULL;
    chat_template_free(&m->tmpl);
    if (m->tok)
        tokenizer_destroy(m->tok);
    if (m->gguf)
        gguf_close(m->gguf);
    m->tok = NULL;
    m->gguf = NULL;
}

/* ---- answers ---- */

static void send_json(struct http_req *http, int status, char *json)
{
    size_t len = json ? strlen(json) : 0;
    if (!json) {
        http_reply_error(http, 500);
        return;
    }
    http_set_header(http, "Content-Type", "application/json");
    json[len] = '\n'; /* over the NUL: the body is the JSON and a line end */
    http_reply(http, status, NULL, json, len + 1);
    free(json);
}

void api_send_error(struct http_req *http, int status, const char *type,
                    const char *message, const char *param, const char *code)
{
    /* a refusal for load says when to come back (a caller may have set its own delay) */
    if ((status == 503 || status == 429) && !http_get_header(http, "Retry-After"))
        http_set_header(http, "Retry-After", "1");
    send_json(http, status, api_json_error(type, message, param, code));
}

/* ---- requests ---- */

/* Check and render a chat request's conversation into *text (malloc'd, with the ranges of
 * message content in *spans, malloc'd), and set how r's reply is read (tool calls,
 * reasoning). Returns 0, -EINVAL with e set, or -ENOMEM. */
static int chat_text(struct request *r, json_t *o, char **text, struct tokenizer_span **spans,
                     size_t *n_spans, struct perr *e)
{
    const struct front_model *m = r->model;
    struct api_chat c;
    /* a model whose template shows no call markup is told to use Hermes' tags, unless
     * --tool-call-format none said not to read calls at all */
    enum toolcall_format fmt =
        m->tool_format == TOOLCALL_FORMAT_NONE && !r->f->cfg->tool_call_format
            ? TOOLCALL_FORMAT_ANY
            : m->tool_format;
    int rc = api_chat_parse(o, &c, e);

    *text = NULL;
    if (rc == 0) {
        *text = api_chat_render(m, &c, true, spans, n_spans, e);
        rc = *text ? 0 : e->status == 500 ? -ENOMEM : -EINVAL;
    }
    if (rc == 0) {
        r->tc.format = c.choice == API_TOOL_CHOICE_NONE ? TOOLCALL_FORMAT_NONE : fmt;
        r->tc.reasoning = m->thinks && !c.reasoning_inline;
        r->tc.in_think = toolcall_prompt_in_think(*text, strlen(*text));
        r->tc.parallel = c.parallel;
        r->tc.req_id = r->req_id;
        rc = api_tool_grammar(r, &c, fmt, e);
    }
    if (rc < 0 && *text) {
        free(*text);
        free(*spans);
        *text = NULL;
        *spans = NULL;
        *n_spans = 0;
    }
    api_chat_free(&c);
    return rc;
}

/* The request's prompt: the n ids (malloc'd, under the model's context), cut to fit, and
 * the room they leave for max_tokens (0: all of it). */
static void prompt_set(struct request *r, uint32_t *ids, uint32_t n, uint32_t max_tokens)
{
    uint32_t room = r->model->max_context - n;
    uint32_t *shrunk = realloc(ids, (size_t)n * sizeof(uint32_t));
    r->prompt = shrunk ? shrunk : ids;
    r->n_prompt = n;
    r->max_new_tokens = max_tokens && max_tokens < room ? max_tokens : room;
}

/* Tokens for text; sets r->prompt and the length checks of DESIGN "generate". */
static int encode_prompt(struct request *r, const char *text, size_t len, unsigned flags,
                         const struct tokenizer_span *plain, size_t n_plain,
                         uint32_t max_tokens, struct perr *e)
{
    const struct front_model *m = r->model;
    size_t cap = m->max_context;
    if (len == 0)
        return bad(e, "prompt", "the %s is empty", "prompt");
    if (!(r->prompt = malloc(cap * sizeof(uint32_t))))
        return -ENOMEM;
    long n = tokenizer_encode_masked(m->tok, text, len, flags, plain, n_plain, r->prompt, cap);
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
    prompt_set(r, r->prompt, (uint32_t)n, max_tokens);
    return 0;
}

/* A chat prompt's ids: those of a remembered generation (gen_memo.h) for the text the
 * prompt starts with, where the rest can be tokenized on its own
 * (tokenizer_encode_masked_from()), then the rest's; else encode_prompt()'s. The ids so
 * stand for the same text, with the model's own for its previous answer, which the
 * worker's cache holds. Two points are tried, the longest and the entry's prompt alone: a
 * failing one costs an encoding of its run (up to the whole text) on the front's loop. Not
 * with cache_prompt: false (the prompt is then as its text alone says, whatever was
 * remembered). */
static int encode_chat(struct request *r, const char *text, size_t len, unsigned flags,
                       const struct tokenizer_span *plain, size_t n_plain, uint32_t max_tokens,
                       struct perr *e)
{
    const struct front_model *m = r->model;
    struct metrics *mt = &r->f->metrics;
    struct gen_memo_cut cuts[2];
    size_t cap = m->max_context;

    if (!m->memo || r->sampling.no_cache || len == 0)
        return encode_prompt(r, text, len, flags, plain, n_plain, max_tokens, e);
    struct gen_memo_text t = {text, len, flags, plain, n_plain};
    size_t n_cuts = gen_memo_find(m->memo, &t, cuts, 2);
    for (size_t i = 0; i < n_cuts; i++) {
        if (cuts[i].n_ids >= cap)
            continue;
        uint32_t *ids = malloc(cap * sizeof(uint32_t));
        if (!ids)
            return -ENOMEM;
        memcpy(ids, cuts[i].ids, cuts[i].n_ids * sizeof(uint32_t));
        long n = tokenizer_encode_masked_from(m->tok, text, len, flags, plain, n_plain,
                                              cuts[i].bytes, ids + cuts[i].n_ids,
                                              cap - cuts[i].n_ids);
        if (n < 0 || (uint64_t)n + cuts[i].n_ids >= cap || n + cuts[i].n_ids == 0) {
            free(ids); /* not a point to cut at (or too long: encode_prompt() says so) */
            if (n == -ENOMEM)
                return -ENOMEM;
            continue;
        }
        mt->memo[METRICS_MEMO_REUSED]++;
        mt->memo_tokens += cuts[i].n_ids;
        prompt_set(r, ids, (uint32_t)(cuts[i].n_ids + (size_t)n), max_tokens);
        return 0;
    }
    mt->memo[n_cuts ? METRICS_MEMO_SPLIT : METRICS_MEMO_NONE]++;
    return encode_prompt(r, text, len, flags, plain, n_plain, max_tokens, e);
}

/* A refusal before a request exists, counted in the metrics. */
static void refuse(struct front *f, struct http_req *http, int status,
                   enum metrics_reject why, const struct perr *e)
{
    metrics_count_rejected(&f->metrics, why);
    api_send_error(http, status, status >= 500 ? "server_error" : "invalid_request_error",
                   e->msg, e->param, e->code);
}

static enum metrics_reject reject_reason(int status)
{
    return status == 413 ? METRICS_REJECT_TOO_LARGE : METRICS_REJECT_INVALID;
}

/* The text of ids, for echo (malloc'd into r->echo_text). */
static int echo_ids(struct request *r, const uint32_t *ids, uint32_t n)
{
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    for (uint32_t i = 0; s && i < n; i++) {
        char buf[256];
        int k = tokenizer_piece(r->model->tok, ids[i], false, buf, sizeof(buf));
        if (k <= 0)
            continue;
        k = k > (int)sizeof(buf) ? (int)sizeof(buf) : k;
        if (len + (size_t)k + 1 > cap) {
            char *t = realloc(s, (cap = 2 * (len + (size_t)k + 1)));
            if (!t)
                break;
            s = t;
        }
        memcpy(s + len, buf, (size_t)k);
        len += (size_t)k;
    }
    if (!s)
        return -ENOMEM;
    r->echo_text = s;
    r->echo_len = len;
    return 0;
}

/* A completion's prompt into r: text (bounded by --max-prompt-bytes, then encoded) or ids. */
static int completion_prompt(struct request *r, json_t *o, uint32_t max_tokens, struct perr *e)
{
    const char *text;
    size_t tlen = 0;
    uint32_t *ids, n_ids;
    int rc = api_parse_prompt(r, o, &text, &tlen, &ids, &n_ids, e);
    if (rc < 0)
        return rc;
    if (text) {
        if (tlen > r->f->cfg->max_prompt_bytes)
            return bad(e, "prompt", "the prompt is longer than %llu bytes",
                       (unsigned long long)r->f->cfg->max_prompt_bytes);
        if ((rc = encode_prompt(r, text, tlen, TOKENIZER_ADD_SPECIAL, NULL, 0, max_tokens, e)) < 0)
            return rc;
        if (r->echo && !(r->echo_text = strndup(text, tlen)))
            return -ENOMEM;
        r->echo_len = r->echo ? tlen : 0;
        return 0;
    }
    r->prompt = ids;
    r->n_prompt = n_ids;
    uint32_t room = r->model->max_context - n_ids;
    r->max_new_tokens = max_tokens && max_tokens < room ? max_tokens : room;
    return r->echo ? echo_ids(r, ids, n_ids) : 0;
}

/* A generation request. Returns whether a request took the exchange over (it then writes
 * the access line when it ends); false when http was answered here. */
static bool handle_generate(struct front *f, struct http_req *http, enum request_kind kind,
                            const struct access_entry *a)
{
    size_t len;
    const char *body = http_req_body(http, &len);
    struct perr e = {.status = 400};
    struct api_params p = {0};
    json_error_t jerr;
    json_t *o = NULL;
    struct request *r = NULL;
    char *chat = NULL;
    int rc;

    if (len > f->cfg->max_body_bytes) {
        e.status = 413;
        snprintf(e.msg, sizeof(e.msg), "the request body is larger than %llu bytes",
                 (unsigned long long)f->cfg->max_body_bytes);
        goto fail;
    }
    if (f->cfg->max_concurrent && f->n_active >= f->cfg->max_concurrent) {
        /* a client's own pace problem as much as ours: 429, retry in a second */
        http_set_header(http, "Retry-After", "1");
        metrics_count_rejected(&f->metrics, METRICS_REJECT_QUEUE_FULL);
        api_send_error(http, 429, "requests", "too many requests are in progress; retry later",
                       NULL, "too_many_concurrent_requests");
        return false;
    }
    o = json_loadb(body, len, 0, &jerr);
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
    r->access = *a;
    if ((rc = api_parse_common(r, o, &p, &e)) < 0)
        goto fail_rc;
    if (kind == REQUEST_KIND_CHAT) {
        struct tokenizer_span *spans = NULL;
        size_t n_spans = 0;
        if ((rc = chat_text(r, o, &chat, &spans, &n_spans, &e)) < 0)
            goto fail_rc;
        if (strlen(chat) > f->cfg->max_prompt_bytes) {
            free(spans);
            rc = bad(&e, "messages", "the messages are longer than %llu bytes",
                     (unsigned long long)f->cfg->max_prompt_bytes);
            goto fail_rc;
        }
        /* one BOS (the template's or the tokenizer's); content never parses as special */
        unsigned flags = chat_encode_flags_text(&r->model->tmpl, r->model->tok, chat);
        rc = encode_chat(r, chat, strlen(chat), flags, spans, n_spans, p.max_tokens, &e);
        if (rc == 0 && r->model->memo && !r->sampling.no_cache) {
            /* each choice's answer is remembered after it; the request frees both */
            r->memo = (struct gen_memo_text){chat, strlen(chat), flags, spans, n_spans};
            chat = NULL;
            spans = NULL;
        }
        free(spans);
        if (rc < 0 && e.param && strcmp(e.param, "prompt") == 0)
            e.param = "messages";
    } else {
        rc = completion_prompt(r, o, p.max_tokens, &e);
    }
    if (rc < 0)
        goto fail_rc;
    free(chat);
    json_decref(o);
    (void)request_start(r);
    return true;
fail_rc:
    if (rc == -ENOMEM)
        goto oom;
fail:
    free(chat);
    json_decref(o);
    if (r) {
        metrics_count_rejected(&f->metrics, reject_reason(e.status));
        request_fail(r, e.status, "invalid_request_error", e.msg, e.param, e.code);
    } else {
        refuse(f, http, e.status, reject_reason(e.status), &e);
    }
    return r != NULL;
oom:
    free(chat);
    json_decref(o);
    if (r)
        request_fail(r, 500, "server_error", "out of memory", NULL, NULL);
    else
        api_send_error(http, 500, "server_error", "out of memory", NULL, NULL);
    return r != NULL;
}

/* ---- the other routes ---- */

static void handle_models(struct front *f, struct http_req *http)
{
    /* during a reload's roll, the new model and the old one while workers still serve it */
    send_json(http, 200, api_json_finish(json_pack("{s:s, s:o}", "object", "list", "data",
                                               roll_models(f))));
}

static void handle_health(struct front *f, struct http_req *http)
{
    /* the workers as the supervisor sees them; the model and the queue are the front's */
    int status = 500;
    const char *authz = http_req_header(http, "Authorization");
    bool details = auth_may_see_details(&f->auth, authz);
    struct supervisor_view *v = supervisor_view(f->sup);
    json_t *j = v ? api_health_json(v, details, &status) : NULL;
    free(v);
    if (j && details) {
        json_object_set_new(j, "model", json_string(f->model->name));
        json_object_set_new(j, "waiting", json_integer(f->queue.n));
        json_object_set_new(j, "reload", roll_health(f->roll));
    }
    send_json(http, status, api_json_finish(j));
}

/* ---- keys, rate limits, metrics ---- */

/* The keys of c (--api-key, --api-key-file, KILN_API_KEYS, --metrics-key) into a (set up
 * with auth_init()). Returns 0 or -errno with a one-line message in err. */
static int load_keys(struct auth *a, const struct kiln_config *c, char *err, size_t errlen)
{
    int rc;

    for (uint32_t i = 0; i < c->api_keys.n; i++) {
        if (auth_add_key(a, c->api_keys.v[i], strlen(c->api_keys.v[i])) < 0) {
            snprintf(err, errlen, "--api-key: a key must be 1 to %d bytes without blanks",
                     AUTH_KEY_MAX);
            return -EINVAL;
        }
    }
    if (c->api_key_file && (rc = auth_load_file(a, c->api_key_file, err, errlen)) < 0) {
        if (rc != -EINVAL)
            snprintf(err, errlen, "--api-key-file %s: %s", c->api_key_file, strerror(-rc));
        return rc;
    }
    if (auth_load_list(a, getenv("KILN_API_KEYS")) < 0) {
        snprintf(err, errlen, "KILN_API_KEYS: a key must be 1 to %d bytes without blanks",
                 AUTH_KEY_MAX);
        return -EINVAL;
    }
    if (c->metrics_key && auth_set_metrics_key(a, c->metrics_key) < 0) {
        snprintf(err, errlen, "--metrics-key: a key must be 1 to %d bytes without blanks",
                 AUTH_KEY_MAX);
        return -EINVAL;
    }
    return 0;
}

/* c's per-client rate limiter into *out (NULL: --rate-limit 0). Returns 0 or -errno. */
static int make_limiter(const struct kiln_config *c, struct ratelimit **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    if (!c->rate_limit)
        return 0;
    uint32_t burst = c->rate_burst ? c->rate_burst : c->rate_limit;
    /* a fixed table: past this many clients the least recently seen is forgotten */
    if (!(*out = ratelimit_create((double)c->rate_limit, burst, 4096))) {
        int e = errno ? errno : ENOMEM;
        snprintf(err, errlen, "rate limiter: %s", strerror(e));
        return -e;
    }
    return 0;
}

int api_init(struct front *f, char *err, size_t errlen)
{
    const struct kiln_config *c = f->cfg;
    int rc;

    auth_init(&f->auth);
    metrics_init(&f->metrics);
    if ((rc = load_keys(&f->auth, c, err, errlen)) < 0)
        return rc;
    if ((rc = webui_init(c, err, errlen)) < 0)
        return rc;
    if ((rc = access_log_open(c->access_log, err, errlen)) < 0)
        return rc;
    return make_limiter(c, &f->ratelimit, err, errlen);
}

int api_reload_guard(struct front *f, const struct kiln_config *n, char *err, size_t errlen)
{
    struct auth a;
    struct ratelimit *rl;
    int rc;

    auth_init(&a);
    if ((rc = load_keys(&a, n, err, errlen)) < 0 || (rc = make_limiter(n, &rl, err, errlen)) < 0) {
        auth_free(&a);
        return rc;
    }
    /* one loop: no request is between its check and its answer while the sets change */
    auth_free(&f->auth);
    f->auth = a;
    ratelimit_destroy(f->ratelimit);
    f->ratelimit = rl;
    return 0;
}

void api_free(struct front *f)
{
    auth_free(&f->auth);
    ratelimit_destroy(f->ratelimit);
    f->ratelimit = NULL;
    access_log_close();
}

static void handle_metrics(struct front *f, struct http_req *http)
{
    struct supervisor_view *sv = supervisor_view(f->sup);
    uint32_t n = sv ? sv->n : 0, running = 0;
    struct metrics_worker_view *views = calloc(n ? n : 1, sizeof(*views));
    size_t len = 0;
    char *text = NULL;

    for (uint32_t i = 0; views && i < n; i++) {
        views[i].id = sv->w[i].id;
        views[i].state = worker_view_state(&sv->w[i]);
        views[i].restarts = sv->w[i].restarts;
        views[i].hdr = sv->w[i].hdr;
        running += sv->w[i].running;
    }
    metrics_set_requests(&f->metrics, running, f->queue.n);
    if (!sv || !views || !(text = metrics_render(&f->metrics, views, n, &len))) {
        api_send_error(http, 500, "server_error", "out of memory", NULL, NULL);
        goto out;
    }
    http_set_header(http, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    http_reply(http, 200, "OK", text, len);
out:
    free(text);
    free(views);
    free(sv);
}

/* The API key and the rate limit, before routing. Returns false when http was answered. */
static bool guard(struct front *f, struct http_req *http, const char *path)
{
    int key = auth_check_request(&f->auth, path, http_req_header(http, "Authorization"));
    if (key < 0) {
        metrics_count_rejected(&f->metrics, METRICS_REJECT_UNAUTHORIZED);
        http_set_header(http, "WWW-Authenticate", "Bearer");
        api_send_error(http, 401, "invalid_request_error",
                       "Incorrect or missing API key: send 'Authorization: Bearer KEY'", NULL,
                       "invalid_api_key");
        return false;
    }
    if (!f->ratelimit || strcmp(path, "/health") == 0 || strcmp(path, "/metrics") == 0)
        return true;
    char id[RATELIMIT_ID_MAX], retry[16];
    const char *addr;
    uint16_t port;
    uint32_t after = 1;
    http_req_peer(http, &addr, &port);
    if (ratelimit_identity(id, sizeof(id), key, addr) < 0)
        return true;
    if (ratelimit_take(f->ratelimit, id, hist_now_us(), &after) == 0)
        return true;
    metrics_count_rejected(&f->metrics, METRICS_REJECT_RATE_LIMITED);
    snprintf(retry, sizeof(retry), "%u", after);
    http_set_header(http, "Retry-After", retry);
    api_send_error(http, 429, "requests", "Rate limit reached; retry after the Retry-After delay",
                   NULL, "rate_limit_exceeded");
    return false;
}

struct route {
    const char *path;
    enum http_method method;
    const char *allow;
    int id;
};

enum { ROUTE_COMPLETIONS, ROUTE_CHAT, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_METRICS, ROUTE_TOKENIZE, ROUTE_DETOKENIZE, ROUTE_APPLY_TEMPLATE };

static const struct route routes[] = {
    {"/v1/completions", HTTP_POST, "POST", ROUTE_COMPLETIONS},
    {"/v1/chat/completions", HTTP_POST, "POST", ROUTE_CHAT},
    {"/v1/models", HTTP_GET, "GET", ROUTE_MODELS},
    {"/health", HTTP_GET, "GET", ROUTE_HEALTH},
    {"/metrics", HTTP_GET, "GET", ROUTE_METRICS},
    {"/tokenize", HTTP_POST, "POST", ROUTE_TOKENIZE},
    {"/detokenize", HTTP_POST, "POST", ROUTE_DETOKENIZE},
    {"/apply-template", HTTP_POST, "POST", ROUTE_APPLY_TEMPLATE},
};

/* Route http, checked for its key and rate. Returns whether a request took the exchange
 * over (a generation); false when it was answered here. */
static bool route(struct front *f, struct http_req *http, const struct access_entry *a)
{
    const char *path = http_req_path(http);
    enum http_method method = http_req_method(http);

    if (!path) { /* "*" or an authority: no route has such a name */
        metrics_count_rejected(&f->metrics, METRICS_REJECT_INVALID);
        api_send_error(http, 400, "invalid_request_error",
                       "the request target is not a path", NULL, NULL);
        return false;
    }
    /* the chat page's files need no key and are not rate limited (a page load is several
     * requests); the API calls the page makes are */
    if (webui_handle(f->cfg, http, path, auth_enabled(&f->auth)))
        return false;
    if (!guard(f, http, path))
        return false;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const struct route *rt = &routes[i];
        if (strcmp(path, rt->path) != 0)
            continue;
        if (method != rt->method && !(method == HTTP_HEAD && rt->method == HTTP_GET)) {
            http_set_header(http, "Allow", rt->allow);
            api_send_error(http, 405, "invalid_request_error", "method not allowed", NULL,
                           NULL);
            return false;
        }
        switch (rt->id) {
        case ROUTE_COMPLETIONS:
            return handle_generate(f, http, REQUEST_KIND_COMPLETION, a);
        case ROUTE_CHAT:
            return handle_generate(f, http, REQUEST_KIND_CHAT, a);
        case ROUTE_MODELS:
            handle_models(f, http);
            return false;
        case ROUTE_HEALTH:
            handle_health(f, http);
            return false;
        case ROUTE_METRICS:
            handle_metrics(f, http);
            return false;
        case ROUTE_TOKENIZE:
            api_tokenize(f, http);
            return false;
        case ROUTE_DETOKENIZE:
            api_detokenize(f, http);
            return false;
        case ROUTE_APPLY_TEMPLATE:
            api_apply_template(f, http);
            return false;
        }
    }
    api_send_error(http, 404, "invalid_request_error", "no such route", NULL, NULL);
    return false;
}

static const char *method_name(enum http_method m)
{
    switch (m) {
    case HTTP_GET: return "GET";
    case HTTP_POST: return "POST";
    case HTTP_HEAD: return "HEAD";
    case HTTP_PUT: return "PUT";
    case HTTP_DELETE: return "DELETE";
    case HTTP_OPTIONS: return "OPTIONS";
    case HTTP_TRACE: return "TRACE";
    case HTTP_CONNECT: return "CONNECT";
    case HTTP_PATCH: return "PATCH";
    case HTTP_OTHER: break;
    }
    return "-";
}

/* The part of http's access line known when it comes. */
static void access_begin(struct front *f, struct http_req *http, struct access_entry *a)
{
    const char *path = http_req_path(http);
    const char *addr;
    uint16_t port;

    memset(a, 0, sizeof(*a));
    a->t_start_us = hist_now_us();
    a->worker = -1;
    snprintf(a->method, sizeof(a->method), "%s", method_name(http_req_method(http)));
    snprintf(a->route, sizeof(a->route), "%s", path ? path : "-");
    http_req_peer(http, &addr, &port);
    snprintf(a->client, sizeof(a->client), "%s", strcmp(addr, "?") ? addr : "-");
    /* every answer (errors and streams too) names the request: the client's id or ours */
    request_id_assign(http, f->id_salt, ++f->n_http_requests, a->rid, sizeof(a->rid));
}

void api_request_over(struct request *lead)
{
    struct access_entry *a = &lead->access;
    if (a->written)
        return;
    a->tokens_in = lead->n_prompt;
    a->tokens_out = 0;
    for (uint32_t i = 0; i < lead->n_choices; i++) {
        const struct job *j = &lead->jobs[i];
        if (lead->outs[i].finish)
            a->tokens_out += lead->outs[i].completion_tokens;
        else
            a->tokens_out += j->n_tokens; /* what it had when it ended */
    }
    a->t_first_us = lead->t_first_us;
    /* a->status is request_fail()'s when it failed; a begun stream was sent as 200 */
    int failed = a->status;
    if (lead->reply_started)
        a->status = 200;
    else if (!failed)
        a->status = lead->client_gone ? 499 : 200; /* 499: nginx's "client closed" */
    a->end = lead->client_gone                                       ? ACCESS_END_CLIENT_GONE
             : failed && (lead->reply_started || failed >= 500) ? ACCESS_END_ERROR
                                                                     : ACCESS_END_DONE;
    access_log_write(a, hist_now_us());
}

void api_handle(struct http_req *http, void *arg)
{
    struct front *f = arg;
    struct access_entry a;

    access_begin(f, http, &a);
    if (route(f, http, &a))
        return; /* its request writes the line when it ends (api_request_over) */
    /* answered here: http is released only after this returns */
    a.status = http_req_status(http);
    access_log_write(&a, hist_now_us());
}
