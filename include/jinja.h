/* A Jinja2 interpreter for chat templates: the subset real templates use, with the semantics of
 * @huggingface/jinja (the engine Hugging Face renders chat templates with, and kiln's oracle):
 * its whitespace handling (trim_blocks and lstrip_blocks on, one trailing newline dropped),
 * its operators, filters, tests and methods, and its output of values (true, 1.0, JSON for
 * lists and dicts). Values come in as JSON (jansson).
 *
 * Bounded: a render stops with an error after max_steps evaluation steps, at max_depth nested
 * calls or expressions, or past max_bytes of memory; parsing stops at a nesting depth. Any
 * template text and any context gives a result or an error, never a crash.
 *
 * Prompt injection: variables given as tainted (the client's messages, tools, ...) carry their
 * taint through the evaluator (a string built from pieces knows which bytes came from tainted
 * text), and the render reports the output ranges written from tainted text. */
#ifndef JINJA_H
#define JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "tokenizer.h"

struct jinja_template;

/* Parse template text (len bytes, any bytes). Returns the template, or NULL with a message in
 * err naming what could not be parsed (and where: the line). */
struct jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen);

void jinja_free(struct jinja_template *t);

/* A top-level variable. value NULL (with fn NULL) is undefined. */
struct jinja_var {
    const char *name;
    const json_t *value;
    bool tainted; /* its strings (and keys) are client text */
};

struct jinja_limits {
    unsigned long max_steps; /* 0: 10,000,000 */
    unsigned max_depth;      /* 0: 256 */
    size_t max_bytes;        /* 0: 256 MiB */
    time_t now;              /* strftime_now's time: 0 the clock, else this (tests) */
};

struct jinja_output {
    char *text; /* malloc'd, NUL-terminated */
    size_t len;
    struct tokenizer_span *spans; /* malloc'd: output ranges written from tainted text, sorted,
                                   * disjoint; NULL when none */
    size_t n_spans;
};

/* Render t with n variables (limits may be NULL: the defaults). Returns 0 with out set (free
 * out->text and out->spans), or with a message in err: -EINVAL when the template raised
 * (raise_exception's own message) or failed at run time, -ELOOP when it passed max_steps or
 * max_depth, -ENOMEM past max_bytes or out of memory. */
int jinja_render(const struct jinja_template *t, const struct jinja_var *vars, size_t n,
                 const struct jinja_limits *limits, struct jinja_output *out, char *err,
                 size_t errlen);

#endif
