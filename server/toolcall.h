/* The model's output as an OpenAI message: the text a chat model writes, fed as it comes,
 * split into content, reasoning (<think>...</think>) and tool calls in the markup of the
 * model's family. Incremental: text that may be the start of a marker is held back (as the
 * stop strings are), and a call is held whole until it ends, so raw markup never reaches
 * content and a half call is never released. A call that is not valid JSON is released as
 * content (with a warning in the log). Pure: no I/O; allocates only its buffer. */
#ifndef TOOLCALL_H
#define TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum toolcall_format {
    TOOLCALL_FORMAT_NONE = 0,    /* no tool calls: everything is content */
    TOOLCALL_FORMAT_HERMES,      /* <tool_call>{"name", "arguments"}</tool_call> (Qwen, Hermes) */
    TOOLCALL_FORMAT_LLAMA3,      /* {"name", "parameters"} as the reply, or <|python_tag|> */
    TOOLCALL_FORMAT_MISTRAL,     /* [TOOL_CALLS][{"name", "arguments"}, ...] */
    TOOLCALL_FORMAT_GRANITE,     /* <|tool_call|>[{...}, ...] (Granite 3, Phi-4-mini) */
    TOOLCALL_FORMAT_DEEPSEEK_R1, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function... */
    TOOLCALL_FORMAT_FUNCTIONARY, /* >>>name\n{args} (functionary v3.2; the prompt ends in >>>) */
    TOOLCALL_FORMAT_ANY,         /* every marker above but functionary's (no template) */
    TOOLCALL_FORMAT_COUNT
};

/* The format's name ("hermes", "llama3", ..., "auto" is not one) and back (-1: unknown). */
const char *toolcall_format_name(enum toolcall_format f);
int toolcall_format_from_name(const char *name);

/* The format a chat template writes calls in, from its text (len bytes); NONE when it shows
 * none of them. */
enum toolcall_format toolcall_format_detect(const char *tmpl, size_t len);

/* Whether a template has <think> blocks, and whether a rendered prompt ends inside one (the
 * template opened it: the reply starts with reasoning). */
bool toolcall_template_thinks(const char *tmpl, size_t len);
bool toolcall_prompt_in_think(const char *prompt, size_t len);

struct toolcall_config {
    enum toolcall_format format; /* NONE: calls are not looked for */
    bool reasoning;              /* split <think>...</think> off as reasoning */
    bool in_think;               /* the prompt opened the think block */
    bool parallel;               /* false: calls after the first are dropped */
    uint64_t req_id;             /* for the log */
};

enum toolcall_kind {
    TOOLCALL_CONTENT,   /* text, len */
    TOOLCALL_REASONING, /* text, len */
    TOOLCALL_CALL,      /* index, name (name_len), arguments (text, len: a JSON text) */
};

/* One piece of the message. Pointers are valid during the callback only. */
struct toolcall_piece {
    enum toolcall_kind kind;
    const char *text;
    size_t len;
    uint32_t index;
    const char *name;
    size_t name_len;
};

/* Receives each piece in order; returns 0 or -errno (-ENOMEM), which the push returns. */
typedef int (*toolcall_cb)(void *arg, const struct toolcall_piece *p);

/* The most a call may hold before it is given up as content. */
#define TOOLCALL_MAX_CALL (1u << 20)

struct toolcall;

/* A parser for one reply. Returns NULL when out of memory. */
struct toolcall *toolcall_create(const struct toolcall_config *c);
void toolcall_destroy(struct toolcall *t);

/* Feed len bytes of the reply (whole UTF-8 characters, as the relay releases them). Calls cb
 * for every piece now decided. Returns 0, or cb's error, or -ENOMEM. */
int toolcall_push(struct toolcall *t, const char *text, size_t len, toolcall_cb cb, void *arg);

/* The reply ended: decide what is held (an unterminated call is parsed as it stands). */
int toolcall_finish(struct toolcall *t, toolcall_cb cb, void *arg);

/* Calls released so far. */
uint32_t toolcall_count(const struct toolcall *t);

/* ---- the JSON scanner the parsers use (toolcall_json.c) ---- */

/* The length of the JSON value at the start of s (after blanks, which count), 0 when s[0, n)
 * holds only its beginning, or -EINVAL when it cannot be JSON. Nesting past 64 is -EINVAL. */
long toolcall_json_span(const char *s, size_t n);

/* In the JSON object s[0, n) (a whole, valid one), the raw value of member key: *v, *vlen.
 * Returns 0 or -ENOENT. */
int toolcall_json_member(const char *s, size_t n, const char *key, const char **v,
                         size_t *vlen);

#endif
