/* Grammar-constrained sampling in the worker: before each sample, every token whose bytes
 * cannot all be consumed by the sequence's grammar gets logit -inf, and an end-of-generation
 * token is allowed only where the grammar may end. Per vocabulary, a byte trie of the token
 * texts is built once, so a mask is one walk of the trie from the sequence's matcher state,
 * pruned where the grammar refuses a prefix; masks are cached by (grammar, state), and JSON's
 * states repeat (inside a string, between members), so most steps are a cache hit. Compiled
 * grammars are cached by the hash of their text and shared by the sequences using them. */
#ifndef GMASK_H
#define GMASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct gmask;
struct gmask_grammar;
struct gmask_seq;

/* Tables for tok's vocabulary of n_vocab tokens (eos: the n_eos end ids), a cache of up to
 * max_grammars compiled grammars. Reads tok only here. NULL on ENOMEM or n_vocab 0. */
struct gmask *gmask_create(const struct tokenizer *tok, uint32_t n_vocab, const uint32_t *eos,
                           uint32_t n_eos, uint32_t max_grammars);
void gmask_destroy(struct gmask *gm);

/* The compiled grammar for len bytes of GBNF (untrusted: from the other process), compiled
 * now or found in the cache, with a reference taken. NULL with a message in err when it does
 * not compile or the cache is full of grammars in use. Allocates (per job, not per token). */
struct gmask_grammar *gmask_grammar_get(struct gmask *gm, const char *src, size_t len, char *err,
                                        size_t errlen);
/* Drop a reference (NULL: nothing). */
void gmask_grammar_put(struct gmask *gm, struct gmask_grammar *g);

/* A sequence's matcher, allocated once per slot. */
struct gmask_seq *gmask_seq_create(void);
void gmask_seq_destroy(struct gmask_seq *s);

/* Start matching g (borrowed: the caller holds a reference while the sequence runs).
 * Returns 0 or -E2BIG. */
int gmask_seq_start(struct gmask *gm, struct gmask_seq *s, struct gmask_grammar *g);

/* Set logits (n_vocab) of every token the grammar refuses here to -inf. Returns the number
 * of tokens left allowed (0: a dead end), or -E2BIG when the grammar is too ambiguous for
 * the matcher's memory. Allocates nothing. */
long gmask_apply(struct gmask *gm, struct gmask_seq *s, float *logits);

/* Advance the sequence by token (an end id is not fed). Returns 0, or -EILSEQ when the
 * grammar refuses it (the state is unchanged). */
int gmask_accept(struct gmask *gm, struct gmask_seq *s, uint32_t token);

/* Whether the grammar is complete and nothing can follow (only an end token may come). */
bool gmask_seq_must_end(const struct gmask_seq *s);

/* Counters since create: masks computed by a trie walk, and masks found in the cache. */
void gmask_stats(const struct gmask *gm, uint64_t *walks, uint64_t *hits);

#endif
