/* The chat template of the front: which template renders (the model's own Jinja template by
 * default, --chat-template-file, or a family of the table with --chat-template), a chat
 * request's prompt through it, and POST /apply-template, which answers that prompt without
 * generating. */
#include "api_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

#include "api.h"
#include "api_chat.h"
#include "api_tokenize.h"
#include "config.h"
#include "gguf.h"
#include "log.h"

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *p = NULL;
    long n;
    if (!f) {
        snprintf(err, errlen, "--chat-template-file %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0 ||
        n > (16L << 20)) {
        snprintf(err, errlen, "--chat-template-file %s: not a readable file of at most 16 MiB",
                 path);
        goto out;
    }
    if (!(p = malloc((size_t)n + 1)) || fread(p, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, errlen, "--chat-template-file %s: cannot read it", path);
        free(p);
        p = NULL;
        goto out;
    }
    p[n] = '\0';
    *len = (size_t)n;
out:
    fclose(f);
    return p;
}

/* A Jinja template for m, or the family table with a warning naming what cannot be run. */
static int use_jinja(struct front_model *m, const char *what, const char *src, size_t len)
{
    char perr[256];
    int rc = chat_template_set_jinja(&m->tmpl, src, len, perr, sizeof(perr));
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0) {
        m->tmpl.family = chat_family_detect(src, len);
        log_warn("%s cannot be run by kiln's template engine (%s); rendering chats with the "
                 "'%s' family instead", what, perr, chat_family_name(m->tmpl.family));
        return 0;
    }
    log_info("chat template: %s (Jinja)", what);
    return 0;
}

int api_template_setup(struct front_model *m, const struct kiln_config *cfg, char *err,
                       size_t errlen)
{
    struct gguf_str s;
    if (cfg->chat_template && cfg->chat_template_file) {
        snprintf(err, errlen, "give --chat-template or --chat-template-file, not both");
        return -EINVAL;
    }
    if (cfg->chat_template) {
        int fam = chat_family_from_name(cfg->chat_template);
        if (fam < 0) {
            snprintf(err, errlen, "--chat-template: unknown template '%s'", cfg->chat_template);
            return -EINVAL;
        }
        chat_template_free(&m->tmpl);
        m->tmpl.family = (enum chat_family)fam;
        return 0;
    }
    if (cfg->chat_template_file) {
        size_t len;
        char *src = read_file(cfg->chat_template_file, &len, err, errlen);
        if (!src)
            return -EINVAL;
        int rc = use_jinja(m, cfg->chat_template_file, src, len);
        m->tool_format = toolcall_format_detect(src, len);
        m->thinks = toolcall_template_thinks(src, len);
        free(src);
        if (rc < 0)
            snprintf(err, errlen, "out of memory");
        return rc;
    }
    if (m->gguf && gguf_get_str(m->gguf, "tokenizer.chat_template", &s) == 0 && s.len) {
        if (use_jinja(m, "the model's tokenizer.chat_template", s.ptr, (size_t)s.len) < 0) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        return 0;
    }
    if (m->gguf)
        log_info("the model has no chat template; rendering chats with the '%s' family",
                 chat_family_name(m->tmpl.family));
    return 0;
}

char *api_chat_render(const struct front_model *m, const struct api_chat *c,
                      bool add_generation_prompt, struct tokenizer_span **spans,
                      size_t *n_spans, struct perr *e)
{
    char err[512] = "", *out = NULL;
    if (!m->tmpl.jinja) {
        /* a model whose template shows no call markup is told to use Hermes' tags */
        enum toolcall_format fmt =
            m->tool_format == TOOLCALL_FORMAT_NONE ? TOOLCALL_FORMAT_ANY : m->tool_format;
        return api_chat_render_family(&m->tmpl, fmt, c, add_generation_prompt, spans, n_spans,
                                      e);
    }
    struct chat_context ctx = {
        .messages = c->messages,
        .tools = c->choice == API_TOOL_CHOICE_NONE ? NULL : c->tools,
        .kwargs = c->kwargs,
        .add_generation_prompt = add_generation_prompt,
    };
    int rc = chat_render_json(&m->tmpl, &ctx, &out, spans, n_spans, err, sizeof(err));
    if (rc == -ENOMEM) {
        e->status = 500;
        e->param = NULL;
        snprintf(e->msg, sizeof(e->msg), "out of memory rendering the prompt");
    } else if (rc < 0) {
        /* the template's own message when it raised (Gemma 2 and a system message, ...) */
        api_bad(e, "messages", "%s", err[0] ? err : "the messages cannot be rendered");
    }
    return out;
}

void api_apply_template(struct front *f, struct http_req *http)
{
    size_t len;
    const char *in = http_req_body(http, &len);
    struct perr e = {.status = 400};
    json_error_t jerr;
    char *prompt = NULL, *json = NULL;
    json_t *o = json_loadb(in, len, 0, &jerr), *gen;

    if (!o) {
        snprintf(e.msg, sizeof(e.msg), "the body is not valid JSON: %s (line %d, column %d)",
                 jerr.text, jerr.line, jerr.column);
        goto fail;
    }
    if (!json_is_object(o)) {
        api_bad(&e, NULL, "the body must be a JSON %s", "object");
        goto fail;
    }
    const struct front_model *m = api_body_model(f, http, o);
    if (!m) {
        json_decref(o);
        return;
    }
    gen = json_object_get(o, "add_generation_prompt");
    if (gen && !json_is_boolean(gen)) {
        api_bad(&e, "add_generation_prompt", "'%s' must be a boolean", "add_generation_prompt");
        goto fail;
    }
    struct api_chat c;
    int rc = api_chat_parse(o, &c, &e);
    if (rc == 0)
        prompt = api_chat_render(m, &c, gen ? json_is_true(gen) : true, NULL, NULL, &e);
    api_chat_free(&c);
    if (!prompt) {
        if (rc == -ENOMEM) {
            e.status = 500;
            snprintf(e.msg, sizeof(e.msg), "out of memory");
        }
        goto fail;
    }
    json_t *reply = json_pack("{s:s}", "prompt", prompt);
    json = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
    json_decref(reply);
    if (!json) {
        e.status = 500;
        snprintf(e.msg, sizeof(e.msg), "out of memory");
        goto fail;
    }
    http_set_header(http, "Content-Type", "application/json");
    len = strlen(json);
    json[len] = '\n'; /* over the NUL: the body is the JSON and a line end */
    http_reply(http, 200, NULL, json, len + 1);
    goto out;
fail:
    api_send_error(http, e.status, e.status >= 500 ? "server_error" : "invalid_request_error",
                   e.msg, e.param, e.code);
out:
    free(json);
    free(prompt);
    json_decref(o);
}
