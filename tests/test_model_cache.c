/* Prompt reuse in the engine (model_llama over kv_cache): a prompt whose first blocks are
 * cached gives the same logits, bit for bit, at its prefill and at every decode step after
 * it as the same prompt computed whole, on stories260K and on a generated model of every
 * architecture (gemma's with a sliding window shorter than the prompt); two running
 * sequences sharing blocks decode as they would alone; a sequence larger than the cache is
 * refused by name, and one that does not fit now is told to wait. Equal logits make greedy
 * and seeded sampling equal too (the sampler sees nothing else). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/kernels.h"
#include "../worker/model_llama.h"
#include "../worker/quant.h"
#include "lib/model_gen.h"

#define STEPS 12
#define N1    50 /* the earlier prompt */
#define N2    70 /* the new one: N1 - 10 shared tokens, then its own */

static char dir[] = "/tmp/kiln-cache-XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];
    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Prefill prompt in slot with or without reuse, then STEPS greedy decode steps; every
 * logits row into out ((STEPS + 1) x n_vocab). Returns the positions reused. */
static int run(struct model *m, int slot, const uint32_t *p, uint32_t n, int reuse, float *out)
{
    int got = model_seq_begin(m, slot, p, n, n + STEPS + 1, reuse);
    assert_true(got >= 0);
    assert_int_equal(model_prefill(m, slot, p, n, out), 0);
    for (int s = 0; s < STEPS; s++) {
        float *cur = out + (size_t)s * m->n_vocab;
        assert_int_equal(m->ops->decode(m, slot, argmax(cur, m->n_vocab), cur + m->n_vocab), 0);
    }
    return got;
}

static void prompts(uint32_t *p1, uint32_t *p2, uint32_t n_vocab)
{
    for (uint32_t i = 0; i < N1; i++)
        p1[i] = 3 + (i * 37) % (n_vocab - 3);
    memcpy(p2, p1, (N1 - 10) * sizeof(uint32_t));
    for (uint32_t i = N1 - 10; i < N2; i++)
        p2[i] = 3 + (i * 53 + 11) % (n_vocab - 3);
}

static void check_model(struct model *m, const char *name)
{
    size_t rows = (size_t)(STEPS + 1) * m->n_vocab;
    float *want = malloc(rows * sizeof(float)), *got = malloc(rows * sizeof(float));
    float *got2 = malloc(rows * sizeof(float)), *scratch = malloc(rows * sizeof(float));
    uint32_t p1[N1], p2[N2];
    int slots[2] = {0, 1};
    uint32_t toks[2];
    struct model_result res[2];
    float *two = malloc(2 * (size_t)m->n_vocab * sizeof(float));

    assert_non_null(want);
    assert_non_null(got);
    assert_non_null(got2);
    assert_non_null(scratch);
    assert_non_null(two);
    prompts(p1, p2, m->n_vocab);
    /* p1 cached, then p2 links its first blocks (40 shared tokens: 2 full blocks) and
     * copies 8 positions of p1's third */
    run(m, 0, p1, N1, 0, scratch);
    model_seq_free(m, 0);
    if (run(m, 0, p2, N2, 1, got) != 40)
        fail_msg("%s: expected 40 positions reused", name);
    model_seq_free(m, 0);
    /* p2 computed whole */
    assert_int_equal(run(m, 0, p2, N2, 0, want), 0);
    if (memcmp(want, got, rows * sizeof(float)) != 0)
        fail_msg("%s: logits with the cache differ from logits without it", name);
    model_seq_free(m, 0);
    /* two running sequences on the same cached blocks, decoded in one batch */
    assert_true(model_seq_begin(m, 0, p2, N2, N2 + STEPS + 1, 1) > 0);
    assert_int_equal(model_prefill(m, 0, p2, N2, got), 0);
    assert_true(model_seq_begin(m, 1, p2, N2, N2 + STEPS + 1, 1) > 0);
    assert_int_equal(model_prefill(m, 1, p2, N2, got2), 0);
    for (int s = 0; s < STEPS; s++) {
        float *a = got + (size_t)s * m->n_vocab, *b = got2 + (size_t)s * m->n_vocab;
        toks[0] = argmax(a, m->n_vocab);
        toks[1] = argmax(b, m->n_vocab);
        assert_int_equal(model_decode_batch(m, slots, toks, 2, two, res), 2);
        assert_int_equal(res[0].status, 0);
        assert_int_equal(res[1].status, 0);
        memcpy(a + m->n_vocab, two, m->n_vocab * sizeof(float));
        memcpy(b + m->n_vocab, two + m->n_vocab, m->n_vocab * sizeof(float));
    }
    if (memcmp(want, got, rows * sizeof(float)) || memcmp(want, got2, rows * sizeof(float)))
        fail_msg("%s: sequences sharing blocks decode differently", name);
    model_seq_free(m, 0);
    model_seq_free(m, 1);
    free(want);
    free(got);
    free(got2);
    free(scratch);
    free(two);
}

/* Three prompts (one with a cached prefix) prefilled in one batch, packed across the
 * 128-row passes, give each the logits it gets alone; then they decode together. */
static void check_batched_prefill(struct model *m, const char *name)
{
    static uint32_t p[3][200];
    static const uint32_t ns[3] = {150, 70, 30};
    const uint32_t *prompts[3] = {p[0], p[1], p[2]};
    int slots[3] = {0, 1, 2};
    struct model_result res[3];
    size_t nv = m->n_vocab;
    float *alone = malloc(3 * nv * sizeof(float)), *batch = malloc(3 * nv * sizeof(float));

    assert_non_null(alone);
    assert_non_null(batch);
    for (uint32_t i = 0; i < 200; i++) {
        p[0][i] = 3 + (i * 31 + 7) % (m->n_vocab - 3);
        p[1][i] = 3 + (i * 17 + 1) % (m->n_vocab - 3);
        p[2][i] = 3 + (i * 13 + 5) % (m->n_vocab - 3);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(model_seq_begin(m, 0, p[i], ns[i], ns[i], 0), 0);
        assert_int_equal(model_prefill(m, 0, p[i], ns[i], alone + i * nv), 0);
        model_seq_free(m, 0);
    }
    /* p[0] was cached by the loop above: its first blocks are linked */
    assert_true(model_seq_begin(m, 0, p[0], ns[0], ns[0], 1) > 0);
    assert_int_equal(model_seq_begin(m, 1, p[1], ns[1], ns[1], 0), 0);
    assert_int_equal(model_seq_begin(m, 2, p[2], ns[2], ns[2], 0), 0);
    assert_int_equal(model_prefill_batch(m, slots, prompts, ns, 3, batch, res), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(res[i].status, 0);
    if (memcmp(alone, batch, 3 * nv * sizeof(float)) != 0)
        fail_msg("%s: a batched prefill differs from prefills alone", name);
    for (int i = 0; i < 3; i++)
        model_seq_free(m, i);
    free(alone);
    free(batch);
}

/* A chat's next turn: the prompt re-sends the previous prompt and the tokens generated for
 * it, then more. With reuse its logits equal those of the whole prompt computed afresh. The
 * answer's positions (computed by decode steps) are reused too where the kernel set's
 * prompt and decode rows agree (rows_agree: every set for Q8_0, Q4_K, Q6_K and F32 weights),
 * else computed again. */
static void check_resent_answer(struct model *m, const char *name, int answer_reused)
{
    size_t rows = (size_t)(STEPS + 1) * m->n_vocab;
    float *first = malloc(rows * sizeof(float)), *want = malloc(rows * sizeof(float));
    float *got = malloc(rows * sizeof(float));
    uint32_t p1[N1], p3[N1 + STEPS + 20], p2[N2];
    uint32_t n3 = 0;

    assert_non_null(first);
    assert_non_null(want);
    assert_non_null(got);
    prompts(p1, p2, m->n_vocab);
    p1[0] = 7; /* a chain of its own, apart from check_model's */
    run(m, 0, p1, N1, 0, first); /* its answer's keys and values come from decode steps */
    model_seq_free(m, 0);
    memcpy(p3, p1, sizeof(p1));
    n3 = N1;
    for (int s = 0; s < STEPS; s++) /* the answer: each step's greedy token */
        p3[n3++] = argmax(first + (size_t)s * m->n_vocab, m->n_vocab);
    for (int i = 0; i < 20; i++)
        p3[n3++] = 3 + (uint32_t)(i * 11) % (m->n_vocab - 3);
    int want_reused = answer_reused ? N1 + STEPS : N1, reused = run(m, 0, p3, n3, 1, got);
    if (reused != want_reused)
        fail_msg("%s: %d positions reused, expected %d", name, reused, want_reused);
    model_seq_free(m, 0);
    run(m, 0, p3, n3, 0, want); /* computed whole, after: it cannot serve the run above */
    model_seq_free(m, 0);
    if (memcmp(want, got, rows * sizeof(float)) != 0)
        fail_msg("%s: logits over a re-sent answer differ with the cache", name);
    free(first);
    free(want);
    free(got);
}

/* Where a set's prompt and decode rows agree for the model's weights, answers are reused;
 * every set agrees for Q8_0, Q4_K, Q6_K and F32. */
static int answer_reused(const struct kern_ops *k, enum ggml_type t)
{
    assert_true(k->rows_agree(t));
    return 1;
}

/* The checks above for the model at path on every kernel set this CPU has; t is the type of its
 * weights, which decides whether a re-sent answer's decode-computed positions are reused. */
static void check_every_set(const char *path, const char *label, enum ggml_type t)
{
    for (int set = KERN_SET_SCALAR; set <= KERN_SET_AMX; set++) {
        const struct kern_ops *k = kern_ops_get((enum kern_set)set);
        struct model_llama_opts mo = {.max_sequences = 3, .ctx = 256, .threads = 2, .quiet = 1,
                                      .kernels = k};
        char name[96], err[256];
        struct model *m;
        if (!k)
            continue;
        snprintf(name, sizeof(name), "%s (%s)", label, k->name);
        if (!(m = model_llama_create(path, &mo, err, sizeof(err))))
            fail_msg("%s: %s", name, err);
        check_model(m, name);
        check_batched_prefill(m, name);
        check_resent_answer(m, name, answer_reused(k, t));
        model_destroy(m);
    }
}

static void test_model_cache_stories_outputs_equal_with_and_without_reuse(void **state)
{
    const char *shared = getenv("KILN_SHARED");
    char path[512];
    (void)state;
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared ? shared : "../shared");
    check_every_set(path, "stories260K", GGML_TYPE_F32); /* F32 weights */
}

static void test_model_cache_every_architecture_outputs_equal_with_and_without_reuse(void **state)
{
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3",
                                        "phi3",  "granite", "smollm3"};
    (void)state;
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        struct model_gen_opts o = {.arch = archs[i], .dim = 64, .layers = 4, .heads = 4,
                                   .kv_heads = 2, .ffn = 128, .ctx = 256,
                                   .type = GGML_TYPE_Q8_0, .seed = 5, .peak = 4.0f};
        char path[128], err[256];
        if (!strncmp(archs[i], "gemma", 5))
            o.window = 20; /* local layers see 20 positions: reads cross blocks */
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, archs[i]);
        assert_int_equal(model_gen_write(&o, path, err, sizeof(err)), 0);
        check_every_set(path, archs[i], GGML_TYPE_Q8_0);
    }
}

/* Q4_K and Q6_K weights: every set computes their prompt and decode rows alike, so a re-sent
 * answer's positions, which decode steps computed, are reused too, and the logits are the
 * same bits with and without reuse. */
static void test_model_cache_k_quant_answers_are_reused_and_outputs_equal(void **state)
{
    static const enum ggml_type types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    (void)state;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        struct model_gen_opts o = {.arch = "llama", .dim = 256, .layers = 2, .heads = 4,
                                   .kv_heads = 2, .ffn = 512, .ctx = 256,
                                   .type = types[i], .seed = 7, .peak = 4.0f};
        char path[128], label[64], err[256];
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, quant_type_name(types[i]));
        assert_int_equal(model_gen_write(&o, path, err, sizeof(err)), 0);
        snprintf(label, sizeof(label), "llama %s", quant_type_name(types[i]));
        check_every_set(path, label, types[i]);
    }
}

static void test_model_cache_sequence_larger_than_the_cache_is_refused(void **state)
{
    const char *shared = getenv("KILN_SHARED");
    char path[512], err[256];
    struct model_llama_opts mo = {.max_sequences = 2, .ctx = 256, .kv_tokens = 64,
                                  .threads = 1, .quiet = 1};
    uint32_t p[40];
    struct model *m;
    (void)state;
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared ? shared : "../shared");
    assert_non_null(m = model_llama_create(path, &mo, err, sizeof(err)));
    for (int i = 0; i < 40; i++)
        p[i] = 10 + (uint32_t)i;
    assert_int_equal(model_seq_begin(m, 0, p, 40, 100, 1), -ENOSPC);
    assert_non_null(strstr(m->error, "--kv-cache-tokens"));
    assert_int_equal(model_seq_begin(m, 0, p, 40, 48, 1), 0);
    assert_int_equal(model_seq_begin(m, 1, p, 40, 48, 1), -EAGAIN);
    model_seq_free(m, 0);
    assert_int_equal(model_seq_begin(m, 1, p, 40, 48, 1), 0);
    model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_cache_stories_outputs_equal_with_and_without_reuse),
        cmocka_unit_test(test_model_cache_every_architecture_outputs_equal_with_and_without_reuse),
        cmocka_unit_test(test_model_cache_k_quant_answers_are_reused_and_outputs_equal),
        cmocka_unit_test(test_model_cache_sequence_larger_than_the_cache_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
