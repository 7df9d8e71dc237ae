/* Per-request token sampling on host logits: penalties, bias, logprobs, then greedy or a
 * seeded random draw through the filters. One sampler per sequence slot, allocated at start;
 * sampling allocates nothing.
 *
 * Order of application, on the raw logits l[v] of one step (in place):
 *   1. repetition_penalty r (if != 1) over every token seen in the prompt or the output
 *      (llama.cpp/CTRL convention): l > 0 ? l / r : l * r.
 *   2. presence_penalty (once if generated at least once) and frequency_penalty (times the
 *      number of times generated), over the generated tokens only (OpenAI convention).
 *   3. logit_bias: added; a bias of -100 or below bans the token (-inf).
 *   4. logprobs (when asked): the log-softmax of these logits, i.e. after penalties and bias
 *      but BEFORE temperature and the truncation filters, so a logprob describes the model's
 *      own (penalised) distribution and does not depend on top_k/top_p/min_p/temperature.
 *   5. temperature 0: greedy argmax, ties to the lowest id; the filters are skipped.
 *   6. otherwise: divide by temperature, keep the top_k highest (if top_k > 0), softmax,
 *      keep the smallest set of highest-probability tokens whose mass reaches top_p (if
 *      top_p < 1), drop tokens below min_p times the highest probability (if min_p > 0),
 *      and draw from what is left, renormalised.
 * The generator is xoshiro256** (Blackman and Vigna), seeded through splitmix64 from the
 * request's seed, so a seed reproduces its output whatever else runs in the batch. */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stdint.h>

#include "proto.h"

/* Temperatures below this are decoded as greedy: dividing by them overflows the logits. */
#define SAMPLER_MIN_TEMPERATURE 1e-5f

struct sampler;

/* A sampler for a vocabulary of n_vocab tokens, with all its scratch. Returns NULL on
 * allocation failure or n_vocab 0. */
struct sampler *sampler_create(uint32_t n_vocab);
void sampler_destroy(struct sampler *s);

/* Start a new request: copy its parameters, seed the generator, forget the previous
 * request's tokens and note the prompt's (ids >= n_vocab are ignored). Allocates nothing. */
void sampler_reset(struct sampler *s, const struct proto_sampling *p, const uint32_t *prompt,
                   uint32_t n_prompt);

/* Pick the next token from logits (n_vocab floats, modified in place), record it as
 * generated, and return it. When out is not NULL it receives the token and, when the request
 * asked for them, its logprob and the top_logprobs alternatives (else logprob 0, n_top 0). */
uint32_t sampler_sample(struct sampler *s, float *logits, struct proto_token *out);

/* The next raw 64-bit value of the generator (for tests). */
uint64_t sampler_next_u64(struct sampler *s);

#endif
