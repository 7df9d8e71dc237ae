/* A chat request's conversation and tool options, checked and normalised into the JSON a
 * chat template reads (api_chat.c), and its rendering with the family table
 * (api_chat_render.c). */
#ifndef API_CHAT_H
#define API_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "chat.h"
#include "toolcall.h"

struct perr;

enum api_tool_choice {
    API_TOOL_CHOICE_NONE,     /* no tools, or "none": replies are not parsed for calls */
    API_TOOL_CHOICE_AUTO,
    API_TOOL_CHOICE_REQUIRED, /* the model must call a tool (constrained by "grammar") */
    API_TOOL_CHOICE_NAMED,    /* the model must call choice_name */
};

struct api_chat {
    /* [{role, content (a string, an array of {type: "text", text} parts, or null for an
     *   assistant's message of calls only), name?,
     *   tool_call_id?, reasoning_content?, tool_calls?: [{id?, type: "function",
     *   function: {name, arguments: the parsed object}}]}]; role is one of system,
     * developer, user, assistant, tool */
    json_t *messages;
    json_t *tools;  /* the request's tools as given (validated), NULL when none */
    json_t *kwargs; /* chat_template_kwargs, NULL when none */
    enum api_tool_choice choice;
    char choice_name[72];
    bool parallel;         /* parallel_tool_calls (default true) */
    bool reasoning_inline; /* reasoning_format "none": <think> stays in content */
    bool has_system;       /* a system or developer message is present */
};

/* Check and normalise the chat fields of request o into c. Returns 0, -EINVAL (e set: a 400
 * naming the field) or -ENOMEM. Call api_chat_free() in every case. */
int api_chat_parse(json_t *o, struct api_chat *c, struct perr *e);
void api_chat_free(struct api_chat *c);

/* Render c with the family table t: developer messages as system, tool results as user
 * turns (inside <tool_response> for the formats that use it), an assistant's calls written
 * in fmt's markup, and the tools described in the system message. Returns the prompt
 * (malloc'd) with the content spans as chat_render_spans(), or NULL with e set. */
char *api_chat_render_family(const struct chat_template *t, enum toolcall_format fmt,
                             const struct api_chat *c, bool add_generation_prompt,
                             struct tokenizer_span **spans, size_t *n_spans, struct perr *e);

/* Render c for model m (api_template.c): through the model's Jinja template when it has one
 * (chat_render_json: the template's own 400 when it raises), else api_chat_render_family()
 * with the model's tool-call markup. Returns the prompt (malloc'd) with the spans of client
 * text, or NULL with e set. */
struct front_model;
char *api_chat_render(const struct front_model *m, const struct api_chat *c,
                      bool add_generation_prompt, struct tokenizer_span **spans,
                      size_t *n_spans, struct perr *e);

/* tool_choice "required" or a named function: set r->grammar to one call in fmt's markup
 * (hermes, llama3, mistral, granite; other formats are left unconstrained) to one of c's
 * tools (the named one), its arguments valid against the tool's parameters. "auto" with a
 * "strict": true tool (and no grammar already set): text without the format's call marker,
 * then optionally one such call (a non-strict tool's arguments any object). Else nothing.
 * Returns 0, -EINVAL with e set (a 400: a schema the converter refuses, or a grammar already
 * asked for by response_format/grammar/json_schema) or -ENOMEM. */
struct request;
int api_tool_grammar(struct request *r, const struct api_chat *c, enum toolcall_format fmt,
                     struct perr *e);

#endif
