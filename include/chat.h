/* Chat templates: render OpenAI-style messages into the prompt text a model was trained on.
 * The family is detected from tokenizer.chat_template (or named with --chat-template); a
 * file without a template gets the documented fallback. Renders text only; the tokenizer
 * turns the special-token texts it writes into their ids (TOKENIZER_PARSE_SPECIAL).
 *
 * Prompt injection: a message's content is the client's text and must never become a control
 * token ("<|im_end|>" typed by a user stays those characters). chat_render_spans() says where
 * content lies in the rendered text, and tokenizer_encode_masked() parses special texts only
 * outside those ranges. Encode a chat prompt as
 *     tokenizer_encode_masked(tok, text, len, TOKENIZER_PARSE_SPECIAL |
 *                             (chat_writes_bos(t) ? 0 : TOKENIZER_ADD_SPECIAL), spans, ...)
 * so the model sees exactly one BOS: the template's own, or the tokenizer's when the family
 * writes none. */
#ifndef CHAT_H
#define CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "tokenizer.h"

struct gguf;
struct jinja_template;

enum chat_family {
    CHAT_FAMILY_FALLBACK = 0, /* "role: content" lines, then "assistant:" */
    CHAT_FAMILY_CHATML,       /* <|im_start|>role\n...<|im_end|> (Qwen, SmolLM, ...) */
    CHAT_FAMILY_LLAMA2,       /* [INST] <<SYS>> ... [/INST] */
    CHAT_FAMILY_LLAMA3,       /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_FAMILY_MISTRAL,      /* [INST] ... [/INST] without <<SYS>> */
    CHAT_FAMILY_ZEPHYR,       /* <|user|>\n...</s> */
    CHAT_FAMILY_PHI3,         /* <|user|>\n...<|end|> */
    CHAT_FAMILY_GEMMA,        /* <start_of_turn>user\n...<end_of_turn> */
    CHAT_FAMILY_COUNT
};

struct chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content; /* NUL-terminated UTF-8 */
};

struct chat_template {
    enum chat_family family;
    char bos[64]; /* BOS text written at the start where the family does so, "" if none */
    char eos[64]; /* EOS text where the family writes it after assistant turns */
    struct jinja_template *jinja; /* the model's own Jinja template (owned), or NULL: the
                                   * family table renders */
    time_t now;                   /* strftime_now's clock: 0 the real time, else fixed (tests) */
    bool jinja_developer;         /* the Jinja template names a "developer" role */
};

/* What a chat request gives its template (all borrowed): messages as the API carries them
 * (role, content as a string, null or an array of parts, and whatever else a message holds:
 * tool_calls with arguments as objects, tool_call_id, name, reasoning_content), the
 * OpenAI tool definitions, and chat_template_kwargs, each key of which becomes a template
 * variable (enable_thinking, ...). */
struct chat_context {
    const json_t *messages;     /* array of objects */
    const json_t *tools;        /* array, or NULL: none */
    const json_t *kwargs;       /* object, or NULL */
    bool add_generation_prompt;
};

/* The family's name ("chatml", "llama2", ...) and back; -1 for an unknown name. */
const char *chat_family_name(enum chat_family f);
int chat_family_from_name(const char *name);

/* Detect the template family of a GGUF file (tokenizer.chat_template, BOS/EOS texts). The
 * Jinja template itself is attached with chat_template_set_jinja(). */
void chat_template_from_gguf(struct chat_template *t, const struct gguf *g);

/* The family whose markup text (a Jinja template's source) shows. */
enum chat_family chat_family_detect(const char *text, size_t len);

/* Render n messages, with the assistant's generation prompt when add_generation_prompt.
 * Returns a malloc'd NUL-terminated string, or NULL with a message in err (an unknown role
 * is named). */
char *chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                  bool add_generation_prompt, char *err, size_t errlen);

/* chat_render(), and where every message's content was written: *spans (malloc'd, sorted,
 * disjoint; the caller frees it; NULL with *n_spans 0 when there is none). spans and n_spans
 * may be NULL. */
char *chat_render_spans(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                        bool add_generation_prompt, struct tokenizer_span **spans,
                        size_t *n_spans, char *err, size_t errlen);

/* Render a conversation given as JSON: through the model's Jinja template when t has one,
 * else through the family table (which reads role and text content only, takes "developer"
 * as "system", and renders "tool" results as that role where the family frames roles by name,
 * as a user turn elsewhere). *out is malloc'd text, *spans (may be NULL) where client text
 * was written, as chat_render_spans(). Returns 0; -EINVAL with a message in err when the
 * messages cannot be rendered or the template raised (err is then the template's own
 * message), -ELOOP when the template ran past its step or depth limit, -ENOMEM. */
int chat_render_json(const struct chat_template *t, const struct chat_context *c, char **out,
                     struct tokenizer_span **spans, size_t *n_spans, char *err, size_t errlen);

/* Give t a Jinja template (src, len bytes) to render with, replacing any it had; the family
 * is detected from the same text, for a fallback. Returns 0, or -EINVAL with err naming what
 * cannot be parsed (t then keeps what it had), -ENOMEM. */
int chat_template_set_jinja(struct chat_template *t, const char *src, size_t len, char *err,
                            size_t errlen);

/* Release the Jinja template; t is left a family-table template. */
void chat_template_free(struct chat_template *t);

/* chat_encode_flags() for a rendered prompt: with a Jinja template, the template wrote the BOS
 * when text starts with the BOS text (a special token of tok); the family table as
 * chat_encode_flags(). */
unsigned chat_encode_flags_text(const struct chat_template *t, const struct tokenizer *tok,
                                const char *text);

/* Whether the family writes the BOS text itself (Llama 2, Llama 3, Mistral, Gemma, when t has
 * a BOS text): the prompt is then encoded without TOKENIZER_ADD_SPECIAL. */
bool chat_writes_bos(const struct chat_template *t);

/* The tokenizer flags of a chat prompt: TOKENIZER_PARSE_SPECIAL, and TOKENIZER_ADD_SPECIAL
 * unless the family writes a BOS text that is a special token of tok. */
unsigned chat_encode_flags(const struct chat_template *t, const struct tokenizer *tok);

/* Render and encode in one: the prompt tokens of a conversation, content masked as above.
 * Returns the token count (only cap written, as tokenizer_encode()) or -errno with err set. */
long chat_encode(const struct chat_template *t, const struct tokenizer *tok,
                 const struct chat_msg *msgs, size_t n, bool add_generation_prompt,
                 uint32_t *out, size_t cap, char *err, size_t errlen);

#endif
