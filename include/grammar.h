/* GBNF grammars (the notation llama.cpp's server takes): a parser that names the line and
 * column of an error, a compiled form, and an incremental matcher over UTF-8 bytes. The
 * matcher is a set of pushdown stacks (one per live parse) advanced one byte at a time; its
 * states can be saved and rolled back cheaply, so a caller can walk a trie of token texts
 * from one state (worker/gmask.c). No model or tokenizer knowledge here.
 *
 * Notation: `name ::= alternatives`, one rule per definition (a definition may run over
 * several lines); `|` alternatives; "literal" with \n \r \t \\ \" \[ \] \xHH \uHHHH
 * \UHHHHHHHH escapes; [a-z] classes, [^...] negated; `.` any character; (groups); postfix
 * `*` `+` `?` `{m}` `{m,}` `{m,n}`; `#` comments. A grammar starts at `root`. Rules that can
 * reach themselves without consuming a character (left recursion) are refused. */
#ifndef GRAMMAR_H
#define GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest grammar source kiln accepts, in bytes (also the wire limit of a JOB's). */
#define GRAMMAR_MAX_SOURCE (128u * 1024u)

struct grammar;

/* Compile len bytes of GBNF. Returns the grammar, or NULL with a one-line message in err that
 * starts "line L, column C: " for a syntax error (or names the rule at fault), or says out of
 * memory. Allocates; call it off the token loop. */
struct grammar *grammar_compile(const char *src, size_t len, char *err, size_t errlen);

void grammar_destroy(struct grammar *g);

/* A hash of the compiled form's source, for caches. */
uint64_t grammar_hash(const struct grammar *g);

/* --- matching ------------------------------------------------------------------------- */

/* One matcher state: stack tops [off, off + n) in the matcher's list, a partial UTF-8
 * character, and whether the input so far is a complete sentence of the grammar. */
struct grammar_state {
    uint32_t off, n;
    uint32_t u8val; /* bits of the character being read */
    uint8_t u8rem;  /* continuation bytes still to come (0: between characters) */
    bool accept;
};

/* Per-sequence matching memory: an arena of stack nodes and a list of stack tops, both of
 * fixed capacity (allocated once), with save/rollback marks. One thread at a time. */
struct grammar_matcher;

/* A matcher with room for max_nodes stack nodes (0: a default of 65536). NULL on ENOMEM. */
struct grammar_matcher *grammar_matcher_create(uint32_t max_nodes);
void grammar_matcher_destroy(struct grammar_matcher *m);

/* Start matching g (borrowed: it must outlive the use) from its root; forgets everything
 * else. Returns 0, or -E2BIG when the start alone does not fit the matcher. Every start and
 * step has a bounded budget of expansion work, so a grammar whose empty alternatives multiply
 * the paths (x ::= "" | "" used 40 times in a row) gets -E2BIG rather than hanging. */
int grammar_matcher_start(struct grammar_matcher *m, const struct grammar *g);

/* The current (committed) state. */
const struct grammar_state *grammar_matcher_state(const struct grammar_matcher *m);

/* Advance in by one byte into *out (new nodes go to the arena's end). Returns 1 when the
 * byte can continue the input, 0 when it cannot (out then undefined), or -E2BIG when the
 * matcher's memory is exhausted (a grammar too ambiguous to follow). */
int grammar_step(struct grammar_matcher *m, const struct grammar_state *in, uint8_t byte,
                 struct grammar_state *out);

/* Arena marks for a walk: grammar_mark() before stepping, grammar_rollback() to forget what
 * the steps since added. */
struct grammar_mark {
    uint32_t nodes, tops;
};
struct grammar_mark grammar_mark(const struct grammar_matcher *m);
void grammar_rollback(struct grammar_matcher *m, struct grammar_mark k);

/* Consume n bytes from the committed state and make the result the committed state (the
 * arena is compacted, so a long generation needs no more memory than its deepest state).
 * Returns 0, -EILSEQ when the bytes cannot continue (the committed state is unchanged), or
 * -E2BIG. */
int grammar_matcher_feed(struct grammar_matcher *m, const void *bytes, size_t n);

/* Whether the state may end here: a complete sentence, no partial character. */
static inline bool grammar_state_can_end(const struct grammar_state *s)
{
    return s->accept && s->u8rem == 0;
}

/* Whether the state can only end: nothing more can follow. */
static inline bool grammar_state_must_end(const struct grammar_state *s)
{
    return s->n == 0;
}

/* A 64-bit key of the state's content (its stacks, partial character and accept flag), the
 * same for equal states whatever their history: a mask cache's key. */
uint64_t grammar_state_key(const struct grammar_matcher *m, const struct grammar_state *s);

/* Whether the whole of text is a sentence of g (tests and tools; allocates a matcher). */
bool grammar_accepts(const struct grammar *g, const char *text, size_t len);

/* A random sentence of g, for tests: at most cap - 1 bytes and NUL-terminated, choosing
 * alternatives by the 64-bit generator state *rng, shortest-first after depth_limit nested
 * rules. Returns its length, or -ENOSPC when no sentence was found within cap. */
long grammar_generate(const struct grammar *g, uint64_t *rng, uint32_t depth_limit, char *out,
                      size_t cap);

#endif
