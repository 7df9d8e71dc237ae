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

#include "tokenizer.h"

struct gguf;

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
};

/* The family's name ("chatml", "llama2", ...) and back; -1 for an unknown name. */
const char *chat_family_name(enum chat_family f);
int chat_family_from_name(const char *name);

/* Detect the template of a GGUF file (tokenizer.chat_template, BOS/EOS texts). */
void chat_template_from_gguf(struct chat_template *t, const struct gguf *g);

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
