/* /tokenize and /detokenize (api_tokenize.h): parse the body, run the front's tokenizer or
 * streaming detokenizer (the same code generation uses, so what these answer is what
 * completions see), answer JSON. Errors are OpenAI-shaped through api_send_error(). */
#include "api_tokenize.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include <jansson.h>

#include "api.h"
#include "detok.h"
#include "front_model.h"
#include "roll.h"
#include "tokenizer.h"

/* A client error being built. */
struct tk_err {
    char msg[256];
    const char *param;
};

static int tk_bad(struct tk_err *e, const char *param, const char *msg)
{
    snprintf(e->msg, sizeof(e->msg), "%s", msg);
    e->param = param;
    return -EINVAL;
}

static void tk_reply(struct http_req *http, json_t *root)
{
    char *json = root ? json_dumps(root, JSON_COMPACT) : NULL;
    size_t len;
    json_decref(root);
    if (!json) {
        api_send_error(http, 500, "server_error", "out of memory", NULL, NULL);
        return;
    }
    http_set_header(http, "Content-Type", "application/json");
    len = strlen(json);
    json[len] = '\n'; /* over the NUL: the body is the JSON and a line end */
    http_reply(http, 200, NULL, json, len + 1);
    free(json);
}

/* The body as a JSON object, or NULL with e set. */
static json_t *tk_body(struct http_req *http, struct tk_err *e)
{
    size_t len;
    const char *in = http_req_body(http, &len);
    json_error_t jerr;
    json_t *o = json_loadb(in, len, 0, &jerr);
    if (!o) {
        snprintf(e->msg, sizeof(e->msg), "the body is not valid JSON: %s (line %d, column %d)",
                 jerr.text, jerr.line, jerr.column);
        e->param = NULL;
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        tk_bad(e, NULL, "the body must be a JSON object");
        return NULL;
    }
    return o;
}

static int tk_bool(json_t *o, const char *k, bool *out, struct tk_err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        snprintf(e->msg, sizeof(e->msg), "'%s' must be a boolean", k);
        e->param = k;
        return -EINVAL;
    }
    *out = json_is_true(v);
    return 0;
}

/* A piece for with_pieces: the text when it is valid UTF-8 (jansson checks), else its bytes
 * as numbers, as llama.cpp answers. */
static json_t *tk_piece(const struct tokenizer *tok, uint32_t id)
{
    char buf[1024];
    int n = tokenizer_piece(tok, id, true, buf, sizeof(buf));
    if (n < 0)
        return NULL;
    size_t len = (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf);
    json_t *s = json_stringn(buf, len);
    if (s)
        return s;
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < len; i++)
        json_array_append_new(arr, json_integer((unsigned char)buf[i]));
    return arr;
}

/* Encode content; *ids malloc'd. Returns the count or -errno. */
static long tk_encode(const struct tokenizer *tok, const char *text, size_t len,
                      unsigned flags, uint32_t **ids)
{
    size_t cap = len + 8; /* a guess: at most a token per byte, a space, BOS and EOS */
    for (int pass = 0; pass < 2; pass++) {
        uint32_t *buf = malloc(cap * sizeof(*buf));
        if (!buf)
            return -ENOMEM;
        long n = tokenizer_encode(tok, text, len, flags, buf, cap);
        if (n >= 0 && (size_t)n <= cap) {
            *ids = buf;
            return n;
        }
        free(buf);
        if (n < 0)
            return n;
        cap = (size_t)n; /* the count it needs */
    }
    return -EOVERFLOW;
}

struct front_model *api_body_model(struct front *f, struct http_req *http, json_t *body)
{
    json_t *v = json_object_get(body, "model");
    char msg[300];
    if (!v || json_is_null(v))
        return f->model;
    if (!json_is_string(v)) {
        api_send_error(http, 400, "invalid_request_error", "'model' must be a string", "model",
                       NULL);
        return NULL;
    }
    struct front_model *m = roll_find_model(f, json_string_value(v));
    if (!m) {
        snprintf(msg, sizeof(msg), "The model '%.128s' does not exist; this server serves '%.100s'",
                 json_string_value(v), f->model->name);
        api_send_error(http, 404, "invalid_request_error", msg, "model", "model_not_found");
    }
    return m;
}

/* The most tokens /tokenize answers with their pieces. */
#define TK_MAX_PIECES 16384

void api_tokenize(struct front *f, struct http_req *http)
{
    const struct tokenizer *tok;
    const struct front_model *m;
    struct tk_err e = {{0}, NULL};
    bool add_special = true, parse_special = false, with_pieces = false;
    uint32_t *ids = NULL;
    json_t *o, *root = NULL, *arr;
    long n;

    if (!(o = tk_body(http, &e)))
        goto bad;
    if (!(m = api_body_model(f, http, o))) {
        json_decref(o);
        return;
    }
    tok = m->tok;
    json_t *content = json_object_get(o, "content");
    if (!json_is_string(content)) {
        tk_bad(&e, "content", "'content' must be a string");
        goto bad;
    }
    if (tk_bool(o, "add_special", &add_special, &e) < 0 ||
        tk_bool(o, "parse_special", &parse_special, &e) < 0 ||
        tk_bool(o, "with_pieces", &with_pieces, &e) < 0)
        goto bad;
    n = tk_encode(tok, json_string_value(content), json_string_length(content),
                  (add_special ? TOKENIZER_ADD_SPECIAL : 0) |
                      (parse_special ? TOKENIZER_PARSE_SPECIAL : 0),
                  &ids);
    if (n < 0) {
        if (n == -ENOMEM)
            goto oom;
        tk_bad(&e, "content", "the content cannot be encoded");
        goto bad;
    }
    if (with_pieces && n > TK_MAX_PIECES) {
        /* each piece is an object of its own: 1 MB of text made a 23 MB answer and held
         * the event loop for seconds */
        free(ids);
        json_decref(o);
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "with_pieces answers at most %d tokens (this content has %ld); tokenize it "
                 "without pieces or in parts",
                 TK_MAX_PIECES, n);
        api_send_error(http, 413, "invalid_request_error", msg, "with_pieces",
                       "request_too_large");
        return;
    }
    if (!(arr = json_array()) || !(root = json_pack("{s:o}", "tokens", arr)))
        goto oom;
    for (long i = 0; i < n; i++) {
        json_t *item = json_integer(ids[i]);
        if (item && with_pieces)
            item = json_pack("{s:o, s:o*}", "id", item, "piece", tk_piece(tok, ids[i]));
        if (!item || json_array_append_new(arr, item) < 0)
            goto oom;
    }
    free(ids);
    json_decref(o);
    tk_reply(http, root);
    return;
bad:
    free(ids);
    json_decref(o);
    api_send_error(http, 400, "invalid_request_error", e.msg, e.param, NULL);
    return;
oom:
    free(ids);
    json_decref(o);
    json_decref(root);
    api_send_error(http, 500, "server_error", "out of memory", NULL, NULL);
}

/* Append len bytes to the growing text (*buf, *used, *cap). Returns 0 or -ENOMEM. */
static int tk_append(char **buf, size_t *used, size_t *cap, const char *s, size_t len)
{
    if (len == 0)
        return 0; /* *buf may still be NULL: no memcpy with it */
    if (len > *cap - *used) {
        size_t ncap = *cap ? *cap : 256;
        while (len > ncap - *used)
            ncap *= 2;
        char *nb = realloc(*buf, ncap);
        if (!nb)
            return -ENOMEM;
        *buf = nb;
        *cap = ncap;
    }
    memcpy(*buf + *used, s, len);
    *used += len;
    return 0;
}

void api_detokenize(struct front *f, struct http_req *http)
{
    const struct tokenizer *tok = f->model->tok;
    const struct front_model *m;
    uint32_t n_vocab;
    struct tk_err e = {{0}, NULL};
    char *text = NULL, *delta = NULL;
    size_t used = 0, cap = 0, i, delta_cap;
    struct detok d;
    json_t *o, *v;
    int r;

    if (!(o = tk_body(http, &e)))
        goto bad;
    if (!(m = api_body_model(f, http, o))) {
        json_decref(o);
        return;
    }
    tok = m->tok;
    n_vocab = tokenizer_n_vocab(tok);
    delta_cap = detok_out_max(tok);
    json_t *tokens = json_object_get(o, "tokens");
    if (!json_is_array(tokens)) {
        tk_bad(&e, "tokens", "'tokens' must be an array of token ids");
        goto bad;
    }
    detok_init(&d, tok);
    if (!(delta = malloc(delta_cap)))
        goto oom;
    json_array_foreach(tokens, i, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < 0 || id >= (json_int_t)n_vocab) {
            snprintf(e.msg, sizeof(e.msg),
                     "'tokens'[%zu] is not a token id of this model (0 to %u)", i,
                     n_vocab - 1);
            e.param = "tokens";
            goto bad;
        }
        if ((r = detok_push(&d, (uint32_t)id, delta, delta_cap)) < 0 ||
            tk_append(&text, &used, &cap, delta, (size_t)r) < 0)
            goto oom;
    }
    if ((r = detok_flush(&d, delta, delta_cap)) < 0 ||
        tk_append(&text, &used, &cap, delta, (size_t)r) < 0)
        goto oom;
    free(delta);
    json_decref(o);
    /* detok's output is well-formed UTF-8, so jansson takes it as it is */
    json_t *s = json_stringn(text ? text : "", used);
    free(text);
    if (!s) {
        api_send_error(http, 500, "server_error", "out of memory", NULL, NULL);
        return;
    }
    tk_reply(http, json_pack("{s:o}", "content", s));
    return;
bad:
    free(delta);
    free(text);
    json_decref(o);
    api_send_error(http, 400, "invalid_request_error", e.msg, e.param, NULL);
    return;
oom:
    free(delta);
    free(text);
    json_decref(o);
    api_send_error(http, 500, "server_error", "out of memory", NULL, NULL);
}
