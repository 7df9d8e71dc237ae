/* The JSON entry point of chat rendering: a conversation as the API carries it (messages,
 * tools, chat_template_kwargs) goes to the model's own Jinja template when there is one, else
 * to the family table, which reads each message's role and text. */
#include "chat.h"

#include <errno.h>
#include <string.h>

#include "jinja.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message's text for the family table: a string, null (""), or the text parts of an array
 * joined. *owned is set when the text was built (the caller frees it). */
static int message_text(const json_t *m, size_t i, const char **text, char **owned, char *err,
                        size_t errlen)
{
    const json_t *content = json_object_get(m, "content"), *part;
    size_t k, total = 1;

    *owned = NULL;
    if (!content || json_is_null(content)) {
        *text = "";
        return 0;
    }
    if (json_is_string(content)) {
        *text = json_string_value(content);
        return 0;
    }
    if (!json_is_array(content)) {
        snprintf(err, errlen, "a message's '%s' must be a string", "content");
        return -EINVAL;
    }
    /* content parts: text ones only (these models read no images or audio), joined */
    json_array_foreach(content, k, part) {
        const json_t *t = json_object_get(part, "text"), *ty = json_object_get(part, "type");
        if (!json_is_object(part) || (ty && !json_is_string(ty))) {
            snprintf(err, errlen, "message %zu: each content part must be an object with a "
                                  "string 'type'", i);
            return -EINVAL;
        }
        if (ty && strcmp(json_string_value(ty), "text") != 0) {
            snprintf(err, errlen, "message %zu: content part type '%.64s' is not supported "
                                  "(only 'text')", i, json_string_value(ty));
            return -EINVAL;
        }
        if (!json_is_string(t)) {
            snprintf(err, errlen, "message %zu: a text part needs a string '%s'", i, "text");
            return -EINVAL;
        }
        total += json_string_length(t);
    }
    if (!(*owned = malloc(total)))
        return -ENOMEM;
    (*owned)[0] = '\0';
    json_array_foreach(content, k, part) {
        strcat(*owned, json_string_value(json_object_get(part, "text")));
    }
    *text = *owned;
    return 0;
}

static int render_family(const struct chat_template *t, const struct chat_context *c,
                         char **out, struct tokenizer_span **spans, size_t *n_spans, char *err,
                         size_t errlen)
{
    size_t i, n = json_array_size(c->messages);
    struct chat_msg *cm = NULL;
    char **owned = NULL;
    const json_t *m;
    int rc = -ENOMEM;

    if (n && (!(cm = calloc(n, sizeof(*cm))) || !(owned = calloc(n, sizeof(*owned)))))
        goto out;
    json_array_foreach(c->messages, i, m) {
        const json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            snprintf(err, errlen, "each of '%s' needs a string 'role'", "messages");
            rc = -EINVAL;
            goto out;
        }
        cm[i].role = json_string_value(role);
        if ((rc = message_text(m, i, &cm[i].content, &owned[i], err, errlen)) < 0)
            goto out;
    }
    *out = chat_render_spans(t, cm, n, c->add_generation_prompt, spans, n_spans, err, errlen);
    rc = *out ? 0 : (strstr(err, "out of memory") ? -ENOMEM : -EINVAL);
out:
    for (i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(cm);
    if (rc == -ENOMEM && !err[0])
        snprintf(err, errlen, "out of memory");
    return rc;
}

/* Each message is an object with a string role and text content (string, null or text
 * parts), as the family table reads them too: the same 400s on both paths. */
static int check_messages(const json_t *msgs, char *err, size_t errlen)
{
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *text;
        char *owned;
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) {
            snprintf(err, errlen, "each of '%s' needs a string 'role'", "messages");
            return -EINVAL;
        }
        int rc = message_text(m, i, &text, &owned, err, errlen);
        free(owned);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The model's Jinja template: messages, tools and chat_template_kwargs are the client's
 * text (tainted: what they put in the prompt is never read as control tokens), bos_token,
 * eos_token and add_generation_prompt the server's. */
static int render_jinja(const struct chat_template *t, const struct chat_context *c,
                        char **out, struct tokenizer_span **spans, size_t *n_spans, char *err,
                        size_t errlen)
{
    struct jinja_var vars[64];
    size_t n = 0;
    json_t *bos = json_string(t->bos), *eos = json_string(t->eos);
    json_t *gen = json_boolean(c->add_generation_prompt), *copy = NULL;
    struct jinja_output o;
    int rc = -ENOMEM;

    if (!bos || !eos || !gen) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if ((rc = check_messages(c->messages, err, errlen)) < 0)
        goto out;
    /* developer messages are system messages to a template without a developer role */
    const json_t *msgs = c->messages;
    size_t i;
    json_t *m;
    json_array_foreach(c->messages, i, m) {
        if (t->jinja_developer || strcmp(json_string_value(json_object_get(m, "role")), "developer"))
            continue;
        if (msgs == c->messages && !(msgs = copy = json_deep_copy(c->messages))) {
            rc = -ENOMEM;
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        json_object_set_new(json_array_get(copy, i), "role", json_string("system"));
    }
    /* chat_template_kwargs first: the server's own variables win over a kwarg of that name */
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)c->kwargs, k, v) {
        if (n < sizeof(vars) / sizeof(vars[0]) - 5)
            vars[n++] = (struct jinja_var){k, v, true};
    }
    vars[n++] = (struct jinja_var){"messages", msgs, true};
    if (c->tools)
        vars[n++] = (struct jinja_var){"tools", c->tools, true};
    vars[n++] = (struct jinja_var){"bos_token", bos, false};
    vars[n++] = (struct jinja_var){"eos_token", eos, false};
    vars[n++] = (struct jinja_var){"add_generation_prompt", gen, false};
    struct jinja_limits lim = {.now = t->now};
    size_t mi = n - (c->tools ? 5 : 4);
    rc = jinja_render(t->jinja, vars, n, &lim, &o, err, errlen);
    if (rc == -EINVAL) {
        /* many templates read content as a string (Qwen3's '</think>' in content) and raise
         * on an assistant's calls-only message with null content: as llama.cpp does, such
         * a template gets "" for null content */
        json_t *strs = json_deep_copy(msgs);
        bool any = false;
        json_array_foreach(strs, i, m) {
            json_t *ct = json_object_get(m, "content");
            if (!ct || json_is_null(ct)) {
                json_object_set_new(m, "content", json_string(""));
                any = true;
            }
        }
        if (any) {
            char err2[256];
            vars[mi].value = strs;
            if (jinja_render(t->jinja, vars, n, &lim, &o, err2, sizeof(err2)) == 0)
                rc = 0;
        }
        json_decref(strs);
    }
    if (rc < 0)
        goto out;
    *out = o.text;
    if (spans) {
        *spans = o.spans;
        *n_spans = o.n_spans;
    } else {
        free(o.spans);
    }
out:
    json_decref(copy);
    json_decref(bos);
    json_decref(eos);
    json_decref(gen);
    return rc;
}

int chat_render_json(const struct chat_template *t, const struct chat_context *c, char **out,
                     struct tokenizer_span **spans, size_t *n_spans, char *err, size_t errlen)
{
    *out = NULL;
    if (spans) {
        *spans = NULL;
        *n_spans = 0;
    }
    err[0] = '\0';
    if (!c->messages || !json_is_array(c->messages)) {
        snprintf(err, errlen, "'%s' must be an array of messages", "messages");
        return -EINVAL;
    }
    if (t->jinja)
        return render_jinja(t, c, out, spans, n_spans, err, errlen);
    return render_family(t, c, out, spans, n_spans, err, errlen);
}

int chat_template_set_jinja(struct chat_template *t, const char *src, size_t len, char *err,
                            size_t errlen)
{
    struct jinja_template *j = jinja_parse(src, len, err, errlen);
    if (!j)
        return strstr(err, "out of memory") ? -ENOMEM : -EINVAL;
    jinja_free(t->jinja);
    t->jinja = j;
    t->jinja_developer = memmem(src, len, "developer", 9) != NULL;
    t->family = chat_family_detect(src, len);
    return 0;
}

void chat_template_free(struct chat_template *t)
{
    jinja_free(t->jinja);
    t->jinja = NULL;
}
