/* The normalised conversation (api_chat.h) through the family table of common/chat.c, which
 * knows system, user and assistant turns only: developer becomes system, a tool result a
 * user turn, an assistant's calls text in the markup the reply parser reads, and the tools
 * a block in the system message (as Qwen 2.5's template writes it). A model's own template,
 * run by a template engine, renders the same JSON without this. */
#include "api_chat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"

#define bad api_bad

struct str {
    char *s;
    size_t len, cap;
    bool oom;
};

static void put(struct str *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 128;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void puts_(struct str *b, const char *s)
{
    put(b, s, strlen(s));
}

static void put_json(struct str *b, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) {
        b->oom = true;
        return;
    }
    puts_(b, s);
    free(s);
}

/* A message's content as text: a string, or its text parts joined. */
static void put_content(struct str *b, const json_t *content)
{
    size_t i;
    json_t *p;
    if (json_is_string(content))
        put(b, json_string_value(content), json_string_length(content));
    json_array_foreach(content, i, p) {
        json_t *t = json_object_get(p, "text");
        put(b, json_string_value(t), json_string_length(t));
    }
}

static bool tags(enum toolcall_format fmt)
{
    return fmt != TOOLCALL_FORMAT_LLAMA3 && fmt != TOOLCALL_FORMAT_MISTRAL;
}

static void tools_block(struct str *b, enum toolcall_format fmt, const json_t *tools)
{
    size_t i;
    json_t *t;
    puts_(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n"
             "<tools>");
    json_array_foreach(tools, i, t) {
        puts_(b, "\n");
        put_json(b, t);
    }
    puts_(b, "\n</tools>\n\n");
    if (fmt == TOOLCALL_FORMAT_LLAMA3)
        puts_(b, "To call a function, respond only with JSON in the format {\"name\": function "
                 "name, \"parameters\": dictionary of argument name and its value}.");
    else if (fmt == TOOLCALL_FORMAT_MISTRAL)
        puts_(b, "To call functions, respond with [TOOL_CALLS] followed by a JSON list of "
                 "{\"name\": function name, \"arguments\": arguments object}.");
    else
        puts_(b, "For each function call, return a json object with function name and "
                 "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                 "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
}

static void calls_text(struct str *b, enum toolcall_format fmt, const json_t *calls)
{
    size_t i;
    json_t *c;
    if (fmt == TOOLCALL_FORMAT_MISTRAL)
        puts_(b, "[TOOL_CALLS][");
    json_array_foreach(calls, i, c) {
        json_t *fn = json_object_get(c, "function");
        if (b->len && fmt != TOOLCALL_FORMAT_MISTRAL)
            puts_(b, "\n");
        if (fmt == TOOLCALL_FORMAT_MISTRAL && i)
            puts_(b, ", ");
        if (tags(fmt))
            puts_(b, "<tool_call>\n");
        puts_(b, "{\"name\": ");
        put_json(b, json_object_get(fn, "name"));
        puts_(b, fmt == TOOLCALL_FORMAT_LLAMA3 ? ", \"parameters\": " : ", \"arguments\": ");
        put_json(b, json_object_get(fn, "arguments"));
        puts_(b, "}");
        if (tags(fmt))
            puts_(b, "\n</tool_call>");
    }
    if (fmt == TOOLCALL_FORMAT_MISTRAL)
        puts_(b, "]");
}

/* The text of message m as the family table gets it (malloc'd into *out). */
static int message_text(enum toolcall_format fmt, const json_t *m, const char **role,
                        char **out)
{
    struct str b = {0};
    const char *r = json_string_value(json_object_get(m, "role"));
    json_t *content = json_object_get(m, "content"), *calls = json_object_get(m, "tool_calls");

    *role = r;
    if (!strcmp(r, "developer")) {
        *role = "system";
    } else if (!strcmp(r, "tool")) {
        *role = "user";
        if (tags(fmt))
            puts_(&b, "<tool_response>\n");
    }
    put_content(&b, content);
    if (!strcmp(r, "tool") && tags(fmt))
        puts_(&b, "\n</tool_response>");
    if (calls)
        calls_text(&b, fmt, calls);
    if (!b.s && !b.oom)
        puts_(&b, "");
    if (b.oom) {
        free(b.s);
        return -ENOMEM;
    }
    *out = b.s;
    return 0;
}

char *api_chat_render_family(const struct chat_template *t, enum toolcall_format fmt,
                             const struct api_chat *c, bool add_generation_prompt,
                             struct tokenizer_span **spans, size_t *n_spans, struct perr *e)
{
    size_t n = json_array_size(c->messages), k = 0, i;
    bool with_tools = c->tools && c->choice != API_TOOL_CHOICE_NONE;
    struct chat_msg *cm = calloc(n + 1, sizeof(*cm));
    char **owned = calloc(n + 1, sizeof(*owned)), err[256] = "", *out = NULL;
    json_t *m;

    if (!cm || !owned)
        goto out;
    if (with_tools) {
        /* the tools go into the first system message, or a new one before the rest */
        struct str b = {0};
        json_t *first = json_array_get(c->messages, 0);
        const char *r0 = json_string_value(json_object_get(first, "role"));
        bool sys = !strcmp(r0, "system") || !strcmp(r0, "developer");
        json_t *c0 = json_object_get(first, "content");
        if (sys) {
            put_content(&b, c0);
            if (b.len)
                puts_(&b, "\n\n");
        }
        tools_block(&b, fmt, c->tools);
        if (b.oom) {
            free(b.s);
            goto out;
        }
        cm[k].role = "system";
        cm[k].content = owned[k] = b.s;
        k++;
        i = sys ? 1 : 0;
    } else {
        i = 0;
    }
    for (; i < n; i++) {
        m = json_array_get(c->messages, i);
        if (message_text(fmt, m, &cm[k].role, &owned[k]) < 0)
            goto out;
        cm[k].content = owned[k];
        k++;
    }
    out = chat_render_spans(t, cm, k, add_generation_prompt, spans, n_spans, err, sizeof(err));
    if (!out)
        bad(e, "messages", "%s", err[0] ? err : "the messages cannot be rendered");
out:
    for (i = 0; owned && i < n + 1; i++)
        free(owned[i]);
    free(owned);
    free(cm);
    if (!out && !e->msg[0])
        e->status = 500; /* out of memory: the caller answers 500 */
    return out;
}
