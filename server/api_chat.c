/* A chat request's conversation: messages (system, developer, user, assistant with
 * tool_calls, tool results), tools, tool_choice, parallel_tool_calls, reasoning_format and
 * chat_template_kwargs, each checked (a wrong one is a 400 naming it) and normalised into the
 * JSON a chat template reads: content as a string, a call's arguments as the object the
 * client's JSON string holds. Rendering with the family table, until a template engine
 * renders the JSON itself, is at the end. */
#include "api_chat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"
#include "chat.h"
#include "toolcall.h"

#define bad api_bad

#define MAX_TOOLS 256

static bool valid_fn_name(const char *s, size_t n)
{
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

/* content: a string, null, or an array of text parts (kept as {type: "text", text}: the
 * templates that read parts get them; the family table joins them). *out a new reference. */
static int norm_content(json_t *content, size_t i, bool keep_null, json_t **out, struct perr *e)
{
    json_t *part;
    size_t k;

    *out = NULL;
    if (!content || json_is_null(content)) {
        *out = keep_null ? json_null() : json_string("");
        return *out ? 0 : -ENOMEM;
    }
    if (json_is_string(content)) {
        *out = json_incref(content);
        return 0;
    }
    if (!json_is_array(content))
        return bad(e, "messages", "messages[%zu].content must be a string or an array of parts",
                   i);
    json_array_foreach(content, k, part) {
        json_t *t = json_object_get(part, "text"), *ty = json_object_get(part, "type");
        if (!json_is_object(part) || (ty && !json_is_string(ty)))
            return bad(e, "messages",
                       "message %zu: each content part must be an object with a string 'type'",
                       i);
        if (ty && strcmp(json_string_value(ty), "text") != 0)
            return bad(e, "messages",
                       "message %zu: content part type '%.64s' is not supported (only 'text')",
                       i, json_string_value(ty));
        if (!json_is_string(t))
            return bad(e, "messages", "message %zu: a text part needs a string '%s'", i, "text");
    }
    if (!(*out = json_array()))
        return -ENOMEM;
    json_array_foreach(content, k, part) {
        json_t *p = json_pack("{s:s, s:O}", "type", "text", "text", json_object_get(part, "text"));
        if (!p || json_array_append_new(*out, p) < 0)
            return -ENOMEM;
    }
    return 0;
}

/* One of an assistant's tool_calls: {id, type: "function", function: {name, arguments}},
 * arguments parsed from the client's JSON string. */
static int norm_call(json_t *call, size_t i, size_t j, json_t **out, struct perr *e)
{
    json_t *fn = json_object_get(call, "function"), *name, *args, *id, *ty;
    json_t *parsed = NULL;
    json_error_t jerr;

    *out = NULL;
    if (!json_is_object(call) || !json_is_object(fn))
        return bad(e, "messages", "messages[%zu].tool_calls[%zu] must be an object with a "
                   "'function' object", i, j);
    if ((ty = json_object_get(call, "type")) && !json_is_null(ty) &&
        !(json_is_string(ty) && strcmp(json_string_value(ty), "function") == 0))
        return bad(e, "messages", "messages[%zu].tool_calls[%zu].type must be 'function'", i, j);
    if ((id = json_object_get(call, "id")) && !json_is_null(id) && !json_is_string(id))
        return bad(e, "messages", "messages[%zu].tool_calls[%zu].id must be a string", i, j);
    name = json_object_get(fn, "name");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return bad(e, "messages", "messages[%zu].tool_calls[%zu].function.name must be a "
                   "non-empty string", i, j);
    args = json_object_get(fn, "arguments");
    if (!args || json_is_null(args)) {
        parsed = json_object();
    } else if (json_is_string(args)) {
        parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY,
                            &jerr);
        if (!parsed)
            return bad(e, "messages", "messages[%zu].tool_calls[%zu].function.arguments is not "
                       "valid JSON: %.80s", i, j, jerr.text);
    } else if (json_is_object(args)) {
        parsed = json_incref(args);
    } else {
        return bad(e, "messages", "messages[%zu].tool_calls[%zu].function.arguments must be a "
                   "JSON string", i, j);
    }
    if (!parsed)
        return -ENOMEM;
    *out = json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function", "name", name,
                     "arguments", parsed);
    if (!*out)
        return -ENOMEM;
    if (id && json_is_string(id))
        json_object_set(*out, "id", id);
    return 0;
}

static int norm_message(json_t *m, size_t i, json_t **out, bool *has_system, struct perr *e)
{
    json_t *role = json_object_get(m, "role"), *v, *content = NULL, *calls = NULL;
    const char *r;
    int rc;

    *out = NULL;
    if (!json_is_object(m) || !json_is_string(role))
        return bad(e, "messages", "each of '%s' needs a string 'role'", "messages");
    r = json_string_value(role);
    if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") &&
        strcmp(r, "assistant") && strcmp(r, "tool"))
        return bad(e, "messages", "messages[%zu]: unknown role '%.64s' (want system, developer, "
                   "user, assistant or tool)", i, r);
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        *has_system = true;
    json_t *tc = json_object_get(m, "tool_calls");
    bool with_calls = tc && !json_is_null(tc) && !strcmp(r, "assistant");
    if (tc && !json_is_null(tc) && strcmp(r, "assistant") != 0)
        return bad(e, "messages", "messages[%zu]: only assistant messages carry tool_calls", i);
    if ((rc = norm_content(json_object_get(m, "content"), i, with_calls, &content, e)) < 0)
        return rc;
    if (!(*out = json_pack("{s:s, s:o}", "role", r, "content", content)))
        return -ENOMEM;
    if ((v = json_object_get(m, "name")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(e, "messages", "messages[%zu].name must be a string", i);
        json_object_set(*out, "name", v);
    }
    if ((v = json_object_get(m, "tool_call_id")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(e, "messages", "messages[%zu].tool_call_id must be a string", i);
        json_object_set(*out, "tool_call_id", v);
    }
    if ((v = json_object_get(m, "reasoning_content")) && json_is_string(v))
        json_object_set(*out, "reasoning_content", v);
    if (!with_calls)
        return 0;
    if (!json_is_array(tc))
        return bad(e, "messages", "messages[%zu].tool_calls must be an array", i);
    if (!(calls = json_array()))
        return -ENOMEM;
    json_object_set_new(*out, "tool_calls", calls);
    size_t j;
    json_array_foreach(tc, j, v) {
        json_t *c;
        if ((rc = norm_call(v, i, j, &c, e)) < 0)
            return rc;
        json_array_append_new(calls, c);
    }
    return 0;
}

static int parse_messages(json_t *o, struct api_chat *c, struct perr *e)
{
    json_t *msgs = json_object_get(o, "messages"), *m;
    size_t i;
    bool has_system = false;
    int rc;

    if (!msgs || !json_is_array(msgs))
        return bad(e, "messages", "'%s' must be an array of messages", "messages");
    if (json_array_size(msgs) == 0)
        return bad(e, "messages", "'%s' must not be empty", "messages");
    if (!(c->messages = json_array()))
        return -ENOMEM;
    json_array_foreach(msgs, i, m) {
        json_t *n;
        rc = norm_message(m, i, &n, &has_system, e);
        if (n)
            json_array_append_new(c->messages, n);
        if (rc < 0)
            return rc;
    }
    c->has_system = has_system;
    return 0;
}

static int parse_tools(json_t *o, struct api_chat *c, struct perr *e)
{
    json_t *tools = json_object_get(o, "tools"), *t;
    size_t i;

    if (!tools || json_is_null(tools))
        return 0;
    if (!json_is_array(tools))
        return bad(e, "tools", "'%s' must be an array of tools", "tools");
    if (json_array_size(tools) > MAX_TOOLS)
        return bad(e, "tools", "'tools' has more than %d tools", MAX_TOOLS);
    json_array_foreach(tools, i, t) {
        json_t *ty = json_object_get(t, "type"), *fn = json_object_get(t, "function"), *v;
        if (!json_is_object(t) || !json_is_string(ty) ||
            strcmp(json_string_value(ty), "function") != 0)
            return bad(e, "tools", "tools[%zu].type must be 'function'", i);
        if (!json_is_object(fn))
            return bad(e, "tools", "tools[%zu].function must be an object", i);
        v = json_object_get(fn, "name");
        if (!json_is_string(v) || !valid_fn_name(json_string_value(v), json_string_length(v)))
            return bad(e, "tools", "tools[%zu].function.name must be 1 to 64 letters, digits, "
                       "'_', '-' or '.'", i);
        if ((v = json_object_get(fn, "description")) && !json_is_null(v) && !json_is_string(v))
            return bad(e, "tools", "tools[%zu].function.description must be a string", i);
        if ((v = json_object_get(fn, "parameters")) && !json_is_null(v) && !json_is_object(v))
            return bad(e, "tools", "tools[%zu].function.parameters must be a JSON Schema "
                       "object", i);
        if ((v = json_object_get(fn, "strict")) && !json_is_null(v) && !json_is_boolean(v))
            return bad(e, "tools", "tools[%zu].function.strict must be a boolean", i);
    }
    if (json_array_size(tools) > 0)
        c->tools = json_incref(tools);
    return 0;
}

static bool tool_named(const struct api_chat *c, const char *name)
{
    json_t *t;
    size_t i;
    json_array_foreach(c->tools, i, t) {
        json_t *n = json_object_get(json_object_get(t, "function"), "name");
        if (json_is_string(n) && strcmp(json_string_value(n), name) == 0)
            return true;
    }
    return false;
}

static int parse_choice(json_t *o, struct api_chat *c, struct perr *e)
{
    json_t *v = json_object_get(o, "tool_choice"), *p;

    c->choice = c->tools ? API_TOOL_CHOICE_AUTO : API_TOOL_CHOICE_NONE;
    c->parallel = true;
    if ((p = json_object_get(o, "parallel_tool_calls")) && !json_is_null(p)) {
        if (!json_is_boolean(p))
            return bad(e, "parallel_tool_calls", "'%s' must be a boolean",
                       "parallel_tool_calls");
        c->parallel = json_is_true(p);
    }
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "none"))
            c->choice = API_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "auto") && c->tools)
            c->choice = API_TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "auto"))
            return bad(e, "tool_choice", "'tool_choice' is 'auto' but no 'tools' are given");
        else if (!strcmp(s, "required"))
            c->choice = API_TOOL_CHOICE_REQUIRED;
        else
            return bad(e, "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else {
        json_t *fn = json_object_get(v, "function"), *name = json_object_get(fn, "name");
        json_t *ty = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(ty) ||
            strcmp(json_string_value(ty), "function") != 0 || !json_is_string(name))
            return bad(e, "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                       "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!c->tools || !tool_named(c, json_string_value(name)))
            return bad(e, "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'",
                       json_string_value(name));
        c->choice = API_TOOL_CHOICE_NAMED;
        snprintf(c->choice_name, sizeof(c->choice_name), "%s", json_string_value(name));
    }
    if (c->choice == API_TOOL_CHOICE_REQUIRED && !c->tools)
        return bad(e, "tool_choice", "'tool_choice' is 'required' but no 'tools' are given");
    return 0;
}

static int parse_reasoning(json_t *o, struct api_chat *c, struct perr *e)
{
    json_t *v = json_object_get(o, "reasoning_format");
    c->reasoning_inline = false;
    if (v && !json_is_null(v)) {
        static const char *const ok[] = {"none", "auto", "deepseek", "deepseek-legacy"};
        size_t i;
        if (!json_is_string(v))
            return bad(e, "reasoning_format", "'%s' must be a string", "reasoning_format");
        for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
            if (!strcmp(json_string_value(v), ok[i]))
                break;
        if (i == sizeof(ok) / sizeof(ok[0]))
            return bad(e, "reasoning_format", "'reasoning_format' must be 'none', 'auto', "
                       "'deepseek' or 'deepseek-legacy'");
        c->reasoning_inline = i == 0;
    }
    v = json_object_get(o, "chat_template_kwargs");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return bad(e, "chat_template_kwargs", "'%s' must be an object",
                       "chat_template_kwargs");
        c->kwargs = json_incref(v);
    }
    return 0;
}

int api_chat_parse(json_t *o, struct api_chat *c, struct perr *e)
{
    int rc;
    memset(c, 0, sizeof(*c));
    if ((rc = parse_messages(o, c, e)) < 0 || (rc = parse_tools(o, c, e)) < 0 ||
        (rc = parse_choice(o, c, e)) < 0 || (rc = parse_reasoning(o, c, e)) < 0)
        return rc;
    return 0;
}

void api_chat_free(struct api_chat *c)
{
    json_decref(c->messages);
    json_decref(c->tools);
    json_decref(c->kwargs);
    memset(c, 0, sizeof(*c));
}
