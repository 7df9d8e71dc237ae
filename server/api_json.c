/* The API's JSON out: whole replies, stream chunks (one choice each), the usage chunk,
 * logprobs in the shape of each route, and the error object. Builds text only; sending is
 * api.c's and request.c's. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "api_impl.h"
#include "tokenizer.h"

/* Longest token piece reported in logprobs (pieces are a few bytes; a longer one is cut). */
#define PIECE_MAX 256

json_t *api_json_text(const char *s, size_t len)
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

char *api_json_finish(json_t *root)
{
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return s;
}

static json_t *envelope(const struct request *r, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object", object, "created",
                     (json_int_t)r->created, "model", r->model->name);
}

static json_t *usage(const struct request *r)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)r->prompt_tokens,
                     "completion_tokens", (json_int_t)r->completion_tokens, "total_tokens",
                     (json_int_t)r->prompt_tokens + (json_int_t)r->completion_tokens,
                     "prompt_tokens_details", "cached_tokens", (json_int_t)r->cached_tokens);
}

const char *api_finish_name(enum finish_reason reason)
{
    return reason == FINISH_REASON_LENGTH ? "length" : "stop";
}

/* ---- logprobs ---- */

static int piece(const struct request *r, uint32_t id, char *buf)
{
    int n = tokenizer_piece(r->model->tok, id, true, buf, PIECE_MAX);
    return n < 0 ? 0 : n > PIECE_MAX ? PIECE_MAX : n;
}

static json_t *bytes_of(const char *s, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* chat: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]} */
static json_t *chat_item(const struct request *r, const struct relay_token *t)
{
    char buf[PIECE_MAX];
    int n = piece(r, t->id, buf);
    json_t *top = json_array();
    for (uint32_t k = 0; top && k < t->n_top && k < r->sampling.top_logprobs; k++) {
        char b2[PIECE_MAX];
        int n2 = piece(r, t->top[k].token, b2);
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", api_json_text(b2, n2),
                                             "logprob", (double)t->top[k].logprob, "bytes",
                                             bytes_of(b2, n2)));
    }
    return json_pack("{s:o, s:f, s:o, s:o}", "token", api_json_text(buf, (size_t)n), "logprob",
                     (double)t->logprob, "bytes", bytes_of(buf, n), "top_logprobs", top);
}

json_t *api_json_logprobs(const struct request *r, const struct relay_token *toks, uint32_t n,
                          json_t *append_to, uint32_t *text_offset)
{
    if (r->kind == REQUEST_KIND_CHAT) {
        json_t *content = append_to ? append_to : json_array();
        for (uint32_t i = 0; content && i < n; i++)
            json_array_append_new(content, chat_item(r, &toks[i]));
        return content;
    }
    /* completions: {tokens, token_logprobs, top_logprobs: [{piece: lp}], text_offset} */
    json_t *o = append_to ? append_to
                          : json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
                                      "top_logprobs", "text_offset");
    if (!o)
        return NULL;
    json_t *tokens = json_object_get(o, "tokens"), *lps = json_object_get(o, "token_logprobs");
    json_t *tops = json_object_get(o, "top_logprobs"), *offs = json_object_get(o, "text_offset");
    for (uint32_t i = 0; i < n; i++) {
        char buf[PIECE_MAX];
        int len = piece(r, toks[i].id, buf);
        json_t *top = json_object();
        for (uint32_t k = 0; top && k < toks[i].n_top && k < r->sampling.top_logprobs; k++) {
            char b2[PIECE_MAX];
            int n2 = piece(r, toks[i].top[k].token, b2);
            json_t *key = api_json_text(b2, (size_t)n2);
            if (key)
                json_object_set_new(top, json_string_value(key),
                                    json_real(toks[i].top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tokens, api_json_text(buf, (size_t)len));
        json_array_append_new(lps, json_real(toks[i].logprob));
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(*text_offset));
        *text_offset += (uint32_t)len;
    }
    return o;
}

/* ---- replies (a stream's chunks are api_json_sse.c's) ---- */

char *api_json_usage_chunk(const struct request *r)
{
    bool chat = r->kind == REQUEST_KIND_CHAT;
    json_t *root = envelope(r, chat ? "chat.completion.chunk" : "text_completion");
    if (!root)
        return NULL;
    json_object_set_new(root, "choices", json_array());
    json_object_set_new(root, "usage", usage(r));
    return api_json_finish(root);
}

/* A whole chat reply's message: content (null when the reply is calls only), and the
 * reasoning and tool calls the reply parser found. */
static json_t *chat_message(const struct request_out *o, const char *text, size_t len)
{
    json_t *m = json_pack("{s:s}", "role", "assistant");
    if (!m)
        return NULL;
    json_object_set_new(m, "content",
                        len == 0 && o->tool_calls ? json_null() : api_json_text(text, len));
    if (o->reasoning) {
        size_t n = evbuffer_get_length(o->reasoning);
        json_object_set_new(m, "reasoning_content",
                            api_json_text(n ? (const char *)evbuffer_pullup(o->reasoning, -1)
                                            : "", n));
    }
    if (o->tool_calls)
        json_object_set(m, "tool_calls", o->tool_calls);
    return m;
}

char *api_json_reply(const struct request *r)
{
    bool chat = r->kind == REQUEST_KIND_CHAT;
    json_t *root = envelope(r, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    if (!root || !choices)
        goto fail;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        const struct request_out *o = &r->outs[i];
        size_t len = evbuffer_get_length(o->text);
        const char *text = len ? (const char *)evbuffer_pullup(o->text, -1) : "";
        json_t *lp = json_null();
        if (r->logprobs && o->logprobs) {
            json_incref(o->logprobs);
            lp = chat ? json_pack("{s:o}", "content", o->logprobs) : o->logprobs;
        } else if (r->logprobs) {
            lp = chat ? json_pack("{s:[]}", "content")
                      : json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
                                  "top_logprobs", "text_offset");
        }
        json_t *choice = json_pack("{s:i, s:o, s:s}", "index", (int)i, "logprobs", lp,
                                   "finish_reason", o->finish ? o->finish : "stop");
        if (!choice)
            goto fail;
        if (chat)
            json_object_set_new(choice, "message", chat_message(o, text, len));
        else
            json_object_set_new(choice, "text", api_json_text(text, len));
        json_array_append_new(choices, choice);
    }
    json_object_set_new(root, "choices", choices);
    json_object_set_new(root, "usage", usage(r));
    return api_json_finish(root);
fail:
    json_decref(choices);
    json_decref(root);
    return NULL;
}

json_t *api_json_tool_call(const char *id, const char *name, size_t name_len, const char *args,
                           size_t args_len)
{
    return json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", id, "type", "function", "function",
                     "name", api_json_text(name, name_len), "arguments",
                     api_json_text(args, args_len));
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

char *api_json_error(const char *type, const char *message, const char *param, const char *code)
{
    return api_json_finish(json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message",
                                     api_json_text(message, strlen(message)), "type", type,
                                     "param", str_or_null(param), "code", str_or_null(code)));
}
