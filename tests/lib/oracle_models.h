/* The models kiln is compared with llama.cpp on (tests/reference/, tests/test_oracle.c): every
 * architecture variant times every tensor type, small random-weight files with peaked logits
 * made by model_gen from fixed seeds, and the prompts (token ids) each is run on. The same
 * table drives the fixture script (through kiln-mkmodel --oracle) and the test, so a new
 * type or architecture is one line here. */
#ifndef ORACLE_MODELS_H
#define ORACLE_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "model_gen.h"

#define ORACLE_PROMPTS 3
#define ORACLE_MAX_PROMPT 24
#define ORACLE_TOP 5        /* log-probabilities compared per step */
#define ORACLE_STEPS 8      /* steps whose log-probabilities are compared */
#define ORACLE_GREEDY 32    /* greedy ids that must be identical */
#define ORACLE_CTX 256      /* the context both run with (LongRoPE picks its factors by it) */

/* Number of models: variants x types. */
int oracle_model_count(void);

/* How far kiln's log-probabilities may be from llama.cpp's for a tensor type, in nats: the
 * largest difference and the mean one over a model's comparisons (oracle_models.c says
 * why each). */
struct oracle_tol {
    double max, mean;
};

/* Model i's name ("qwen3-q8_0"), its generator options (vocabulary synthetic, seed fixed)
 * and tolerance. Returns 0, or -ENOENT past the end. */
int oracle_model(int i, char *name, size_t namelen, struct model_gen_opts *o,
                 struct oracle_tol *tol);

/* Prompt p (< ORACLE_PROMPTS) of every model: n ids into ids. */
int oracle_prompt(int p, uint32_t *ids);

#endif
