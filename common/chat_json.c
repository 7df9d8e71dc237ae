/* The JSON entry point of chat rendering: a conversation as the API carries it (messages,
 * tools, chat_template_kwargs) goes to the model's own Jinja template when there is one, else
 * to the family table, which reads each message's role and text. */
#include "chat.h"

#include <errno.h>
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
    return render_family(t, c, out, spans, n_spans, err, errlen);
}

void chat_template_free(struct chat_template *t)
{
    t->jinja = NULL;
}
