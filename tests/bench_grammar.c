/* What grammar masking adds to a decode step: a TinyLlama-shaped model at batch 8 and a
 * SmolLM-135M-shaped one at batch 1 (random weights, the real vocabularies from
 * ../shared/vocab), generating JSON under a schema at temperature 1. Per step it times the
 * decode_batch and, apart, the grammar's work for every sequence (the mask, cache hit or trie
 * walk, and feeding the chosen token); the sampler's own work is not counted, since it runs
 * with or without a grammar. A sequence whose JSON completes starts a new one in place.
 * Models are generated once into $KILN_BIN_DIR/bench-models (shared with bench_model).
 * KILN_BENCH_STEPS overrides the step counts; KILN_BENCH_MODELS=smollm picks runs by name. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "gguf.h"
#include "grammar.h"
#include "json_schema.h"
#include "proto.h"
#include "tokenizer.h"
#include "lib/bench_util.h"
#include "lib/model_gen.h"
#include "../worker/gmask.h"
#include "../worker/model.h"
#include "../worker/model_llama.h"
#include "../worker/sampler.h"

static const char *bench_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":24},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":4},"
    "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"score\":{\"type\":\"number\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"role\"],\"additionalProperties\":false}";

static int bench_one(const char *path, int batch, int steps, int threads)
{
    struct model_llama_opts mo = {.max_sequences = (uint32_t)batch, .ctx = 1024,
                                  .threads = threads, .quiet = 1};
    char err[256];
    struct model *m = model_llama_create(path, &mo, err, sizeof(err));
    struct gguf *g = gguf_open(path, err, sizeof(err));
    struct tokenizer *tok = g ? tokenizer_create_gguf(g, err, sizeof(err)) : NULL;
    json_error_t je;
    json_t *schema = json_loads(bench_schema, 0, &je);
    size_t glen;
    char *gbnf = json_schema_to_grammar(schema, &glen, err, sizeof(err));
    struct gmask *gm;
    struct gmask_grammar *gg;
    struct gmask_seq *seqs[16];
    struct sampler *smp[16];
    int slots[16];
    uint32_t toks[16], prompt[16];
    struct model_result res[16];
    float *logits;
    double t_decode = 0, t_mask = 0, worst = 0;
    uint64_t walks, hits, completed = 0;

    if (!m || !tok || !gbnf) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    gm = gmask_create(tok, m->n_vocab, m->eos, m->n_eos, 4);
    gg = gm ? gmask_grammar_get(gm, gbnf, glen, err, sizeof(err)) : NULL;
    logits = malloc((size_t)batch * m->n_vocab * sizeof(float));
    if (!gg || !logits) {
        fprintf(stderr, "grammar: %s\n", err);
        return -1;
    }
    for (int i = 0; i < batch; i++) {
        struct proto_sampling ps;

        proto_sampling_init(&ps);
        ps.temperature = 1.0f;
        ps.seed = (uint64_t)i + 1;
        smp[i] = sampler_create(m->n_vocab);
        seqs[i] = gmask_seq_create();
        for (int k = 0; k < 16; k++)
            prompt[k] = 300u + (uint32_t)(k * 7919 + i * 104729) % (m->n_vocab - 300u);
        sampler_reset(smp[i], &ps, prompt, 16);
        slots[i] = i;
        if (model_prefill(m, i, prompt, 16, logits + (size_t)i * m->n_vocab) < 0) {
            fprintf(stderr, "prefill: %s\n", m->error);
            return -1;
        }
        gmask_seq_start(gm, seqs[i], gg);
    }
    for (int s = 0; s <= steps; s++) {
        double t0 = bench_now(), dt = 0;

        for (int i = 0; i < batch; i++) {
            float *l = logits + (size_t)i * m->n_vocab;
            double a = bench_now();
            long n = gmask_apply(gm, seqs[i], l);
            double b;
            uint32_t t;
            int rc;

            dt += bench_now() - a;
            t = sampler_sample(smp[i], l, NULL);
            b = bench_now();
            rc = n > 0 ? gmask_accept(gm, seqs[i], t) : -1;
            dt += bench_now() - b;
            bool is_end = false;

            for (uint32_t k = 0; k < m->n_eos; k++)
                is_end |= t == m->eos[k];
            if (rc < 0 || is_end || gmask_seq_must_end(seqs[i])) {
                completed += rc == 0;
                gmask_seq_start(gm, seqs[i], gg); /* the next JSON, in place */
            }
            toks[i] = is_end ? 300u : t;
        }
        if (s == steps)
            break;
        if (s > 0) { /* step 0's masks are counted apart: the caches are cold */
            t_mask += dt;
        }
        if (dt > worst)
            worst = dt;
        t0 = bench_now();
        if (model_decode_batch(m, slots, toks, batch, logits, res) != batch) {
            fprintf(stderr, "decode failed\n");
            return -1;
        }
        t_decode += bench_now() - t0;
    }
    gmask_stats(gm, &walks, &hits);
    printf("%-22s batch %d, vocab %u: decode %.2f ms/step, grammar masking %.3f ms/step "
           "(all %d sequences) = %.1f%% added; slowest step's masking %.2f ms; masks: %llu "
           "trie walks, %llu cache hits; %llu JSON texts completed\n",
           strrchr(path, '/') + 1, batch, m->n_vocab, 1e3 * t_decode / steps,
           1e3 * t_mask / (steps - 1), batch, 100.0 * (t_mask / (steps - 1)) / (t_decode / steps),
           1e3 * worst, (unsigned long long)walks, (unsigned long long)hits,
           (unsigned long long)completed);
    for (int i = 0; i < batch; i++) {
        sampler_destroy(smp[i]);
        gmask_seq_destroy(seqs[i]);
    }
    gmask_grammar_put(gm, gg);
    gmask_destroy(gm);
    free(logits);
    free(gbnf);
    json_decref(schema);
    tokenizer_destroy(tok);
    gguf_close(g);
    model_destroy(m);
    return 0;
}

int main(void)
{
    const char *bin = getenv("KILN_BIN_DIR"), *shared = getenv("KILN_SHARED");
    const char *steps_env = getenv("KILN_BENCH_STEPS"), *pick = getenv("KILN_BENCH_MODELS");
    char dir[512], path[600], vocab[512];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = getenv("KILN_THREADS") ? atoi(getenv("KILN_THREADS")) : (int)ncpu;
    static const struct {
        const char *name, *preset, *vocab;
        int batch, steps;
    } runs[] = {
        {"tinyllama-q8_0", "tinyllama", "ggml-vocab-llama-spm.gguf", 8, 40},
        {"smollm-q8_0", "smollm", "ggml-vocab-gpt-2.gguf", 1, 150},
    };

    snprintf(dir, sizeof(dir), "%s/bench-models", bin ? bin : "build");
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    printf("grammar masking per decode step (aims: < 10%% at batch 8 on TinyLlama, < 15%% at "
           "batch 1 on SmolLM-135M), %d threads\n", threads);
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        struct stat st;

        if (pick && !strstr(runs[i].name, pick))
            continue;
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, runs[i].name);
        if (stat(path, &st) < 0) {
            struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 1, .verbose = 1};

            snprintf(vocab, sizeof(vocab), "%s/vocab/%s", shared ? shared : "../shared",
                     runs[i].vocab);
            o.vocab_path = vocab;
            (void)model_gen_preset(&o, runs[i].preset);
            fprintf(stderr, "generating %s\n", path);
            if (model_gen_write(&o, path, dir, sizeof(dir)) < 0) {
                fprintf(stderr, "%s: %s\n", path, dir);
                return 1;
            }
            snprintf(dir, sizeof(dir), "%s/bench-models", bin ? bin : "build");
        }
        if (bench_one(path, runs[i].batch, steps_env ? atoi(steps_env) : runs[i].steps,
                      threads > 0 ? threads : 1) < 0)
            return 1;
        fflush(stdout);
    }
    return 0;
}
