/* The sampler: greedy, reproducible seeds, each filter's effect, penalties, logprobs, and
 * sampled frequencies against the softmax. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto.h"
#include "../worker/sampler.h"

#define NV 8

struct fixture {
    struct sampler *s;
    struct proto_sampling p;
    float l[NV];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f || !(f->s = sampler_create(NV))) {
        free(f);
        return -1;
    }
    proto_sampling_init(&f->p);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    sampler_destroy(f->s);
    free(f);
    return 0;
}

static void set_logits(float *l, const float *src)
{
    memcpy(l, src, NV * sizeof(*l));
}

static const float base[NV] = {0.5f, 2.0f, 1.0f, 3.0f, 3.0f, -1.0f, 0.0f, 2.5f};

static uint32_t draw(struct fixture *f)
{
    set_logits(f->l, base);
    return sampler_sample(f->s, f->l, NULL);
}

static void test_sampler_greedy_is_argmax_ties_to_lowest(void **state)
{
    struct fixture *f = *state;

    f->p.temperature = 0.0f;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(draw(f), 3); /* 3 and 4 tie at 3.0 */
}

static void test_sampler_fixed_seed_reproduces(void **state)
{
    struct fixture *f = *state;
    uint32_t a[64], same = 1, differ = 0;

    f->p.temperature = 1.0f;
    f->p.seed = 42;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 64; i++)
        a[i] = draw(f);
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 64; i++)
        same &= draw(f) == a[i];
    assert_true(same);
    f->p.seed = 43;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 64; i++)
        differ += draw(f) != a[i];
    assert_true(differ > 0);
}

static void test_sampler_top_k_1_equals_greedy(void **state)
{
    struct fixture *f = *state;

    f->p.temperature = 1.5f;
    f->p.top_k = 1;
    f->p.seed = 7;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 200; i++) {
        uint32_t t = draw(f);

        assert_true(t == 3 || t == 4); /* the tie may go either way, nothing else */
    }
}

static void test_sampler_top_k_keeps_the_k_best(void **state)
{
    struct fixture *f = *state;
    int hits[NV] = {0};

    f->p.temperature = 5.0f;
    f->p.top_k = 3; /* 3, 4 (3.0) and 7 (2.5) */
    f->p.seed = 9;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 600; i++)
        hits[draw(f)]++;
    for (int v = 0; v < NV; v++)
        if (v == 3 || v == 4 || v == 7)
            assert_true(hits[v] > 0);
        else
            assert_int_equal(hits[v], 0);
}

static void test_sampler_logit_bias_minus_100_bans(void **state)
{
    struct fixture *f = *state;
    int hits[NV] = {0};

    f->p.temperature = 0.0f;
    f->p.n_logit_bias = 2;
    f->p.logit_bias[0] = (struct proto_logit_bias){.token = 3, .bias = -100.0f};
    f->p.logit_bias[1] = (struct proto_logit_bias){.token = 4, .bias = -150.0f};
    sampler_reset(f->s, &f->p, NULL, 0);
    assert_int_equal(draw(f), 7);
    /* and under random sampling too */
    f->p.temperature = 10.0f;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 1000; i++)
        hits[draw(f)]++;
    assert_int_equal(hits[3], 0);
    assert_int_equal(hits[4], 0);
    /* a positive bias wins greedy */
    f->p.temperature = 0.0f;
    f->p.n_logit_bias = 1;
    f->p.logit_bias[0] = (struct proto_logit_bias){.token = 5, .bias = 5.0f};
    sampler_reset(f->s, &f->p, NULL, 0);
    assert_int_equal(draw(f), 5);
}

static void test_sampler_min_p_cuts_the_tail(void **state)
{
    struct fixture *f = *state;
    int hits[NV] = {0};

    /* p(v) ~ exp(l): min_p 0.5 keeps logits within log(2) of the top: 3, 4 and 7 */
    f->p.temperature = 1.0f;
    f->p.min_p = 0.5f;
    f->p.seed = 11;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 2000; i++)
        hits[draw(f)]++;
    for (int v = 0; v < NV; v++)
        if (v == 3 || v == 4 || v == 7)
            assert_true(hits[v] > 0);
        else
            assert_int_equal(hits[v], 0);
}

static void test_sampler_top_p_cuts_the_tail(void **state)
{
    struct fixture *f = *state;
    int hits[NV] = {0};

    /* softmax(base): 3 and 4 ~0.28 each, 7 ~0.17, 1 ~0.10, 2 ~0.04 ... The nucleus of 0.7
     * is {3, 4, 7} (0.28 + 0.28 < 0.7 <= 0.73) */
    f->p.temperature = 1.0f;
    f->p.top_p = 0.7f;
    f->p.seed = 13;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 2000; i++)
        hits[draw(f)]++;
    for (int v = 0; v < NV; v++)
        if (v == 3 || v == 4 || v == 7)
            assert_true(hits[v] > 0);
        else
            assert_int_equal(hits[v], 0);
}

static void test_sampler_frequencies_follow_the_softmax(void **state)
{
    struct fixture *f = *state;
    enum { N = 20000 };
    int hits[NV] = {0};
    double z = 0.0;

    f->p.temperature = 1.0f;
    f->p.seed = 12345;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < N; i++)
        hits[draw(f)]++;
    for (int v = 0; v < NV; v++)
        z += exp(base[v]);
    for (int v = 0; v < NV; v++) {
        double want = exp(base[v]) / z, got = (double)hits[v] / N;

        /* 5 standard deviations of a binomial at N draws, plus a little */
        assert_true(fabs(got - want) <= 5.0 * sqrt(want * (1 - want) / N) + 1e-3);
    }
}

static void test_sampler_temperature_sharpens(void **state)
{
    struct fixture *f = *state;
    int hot = 0, cold = 0;

    f->p.seed = 3;
    f->p.temperature = 0.05f;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 1000; i++) {
        uint32_t t = draw(f);
        cold += t == 3 || t == 4;
    }
    f->p.temperature = 1.0f;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 1000; i++) {
        uint32_t t = draw(f);
        hot += t == 3 || t == 4;
    }
    assert_int_equal(cold, 1000);
    assert_true(hot < 800);
}

static void test_sampler_repetition_penalty_covers_prompt_and_output(void **state)
{
    struct fixture *f = *state;
    const uint32_t prompt[] = {3};

    f->p.temperature = 0.0f;
    f->p.repetition_penalty = 2.0f;
    sampler_reset(f->s, &f->p, prompt, 1);
    /* 3 is in the prompt: 3.0 / 2 = 1.5; 4 wins and is then penalised too: 7 */
    assert_int_equal(draw(f), 4);
    assert_int_equal(draw(f), 7);
    /* a negative logit seen is multiplied: -1 -> -2 */
    {
        float l[NV] = {-1.0f, -1.5f, -3.0f, -3.0f, -3.0f, -3.0f, -3.0f, -3.0f};
        const uint32_t p0[] = {0};

        sampler_reset(f->s, &f->p, p0, 1);
        assert_int_equal(sampler_sample(f->s, l, NULL), 1);
    }
}

static void test_sampler_presence_and_frequency_penalties_cover_output(void **state)
{
    struct fixture *f = *state;
    const uint32_t prompt[] = {3, 4};

    f->p.temperature = 0.0f;
    f->p.presence_penalty = 0.2f;
    sampler_reset(f->s, &f->p, prompt, 2);
    /* the prompt does not count: 3 first; then 3 has 2.8 < 3.0: 4 */
    assert_int_equal(draw(f), 3);
    assert_int_equal(draw(f), 4);
    proto_sampling_init(&f->p);
    f->p.frequency_penalty = 0.3f;
    sampler_reset(f->s, &f->p, NULL, 0);
    /* 3, 4, then both at 2.7 vs 7 at 2.5: 3 again (2.4), 4 (2.4), then 7 */
    assert_int_equal(draw(f), 3);
    assert_int_equal(draw(f), 4);
    assert_int_equal(draw(f), 3);
    assert_int_equal(draw(f), 4);
    assert_int_equal(draw(f), 7);
}

static void test_sampler_logprobs_are_log_softmax_before_temperature(void **state)
{
    struct fixture *f = *state;
    struct proto_token out;
    double z = 0.0;

    f->p.temperature = 0.0f;
    f->p.logprobs = true;
    f->p.top_logprobs = 3;
    sampler_reset(f->s, &f->p, NULL, 0);
    set_logits(f->l, base);
    assert_int_equal(sampler_sample(f->s, f->l, &out), 3);
    for (int v = 0; v < NV; v++)
        z += exp(base[v]);
    assert_int_equal(out.token, 3);
    assert_float_equal(out.logprob, 3.0 - log(z), 1e-5);
    assert_int_equal(out.n_top, 3);
    assert_int_equal(out.top[0].token, 3);
    assert_int_equal(out.top[1].token, 4);
    assert_int_equal(out.top[2].token, 7);
    assert_float_equal(out.top[2].logprob, 2.5 - log(z), 1e-5);
    /* not asked: nothing */
    f->p.logprobs = false;
    f->p.top_logprobs = 0;
    sampler_reset(f->s, &f->p, NULL, 0);
    set_logits(f->l, base);
    sampler_sample(f->s, f->l, &out);
    assert_int_equal(out.n_top, 0);
    assert_float_equal(out.logprob, 0.0, 0.0);
}

static void test_sampler_large_vocab_top_p_matches_small_path(void **state)
{
    enum { V = 50000 };
    struct sampler *s = sampler_create(V);
    float *l = malloc(V * sizeof(*l));
    struct proto_sampling p;
    int hits[4] = {0};

    (void)state;
    assert_non_null(s);
    assert_non_null(l);
    proto_sampling_init(&p);
    p.temperature = 1.0f;
    p.top_p = 0.9f;
    p.seed = 5;
    sampler_reset(s, &p, NULL, 0);
    for (int i = 0; i < 300; i++) {
        uint32_t t;

        for (int v = 0; v < V; v++)
            l[v] = -10.0f;
        l[100] = 5.0f;
        l[200] = 5.0f;
        l[300] = 4.0f;
        t = sampler_sample(s, l, NULL);
        /* 100 and 200: 0.42 each; 300 0.15: the nucleus of 0.9 is those three */
        assert_true(t == 100 || t == 200 || t == 300);
        hits[t / 100]++;
    }
    assert_true(hits[1] > 0 && hits[2] > 0 && hits[3] > 0);
    free(l);
    sampler_destroy(s);
}

/* A temperature so small that 1/t overflows (1e-39 is a float subnormal) is greedy, and with
 * min_p it must not leave an empty candidate set: it once crashed the worker. */
static void test_sampler_tiny_temperature_is_greedy(void **state)
{
    struct fixture *f = *state;

    f->p.temperature = 1e-39f;
    f->p.min_p = 0.1f;
    f->p.seed = 3;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(draw(f), 3);
}

/* Logits that are all NaN or all equal to +inf give no distribution: the draw falls back to
 * argmax instead of reading past its candidates. */
static void test_sampler_non_finite_logits_do_not_escape_the_vocabulary(void **state)
{
    struct fixture *f = *state;

    f->p.temperature = 1.0f;
    f->p.min_p = 0.5f;
    f->p.top_p = 0.5f;
    sampler_reset(f->s, &f->p, NULL, 0);
    for (int v = 0; v < NV; v++)
        f->l[v] = NAN;
    assert_true(sampler_sample(f->s, f->l, NULL) < NV);
    for (int v = 0; v < NV; v++)
        f->l[v] = INFINITY;
    assert_true(sampler_sample(f->s, f->l, NULL) < NV);
}

/* Random logits with ties: every draw under top_k lies within the k best (the k-th value
 * included, ties at the cut may go either way) */
static void test_sampler_top_k_never_leaves_the_k_best(void **state)
{
    enum { V = 300 };
    struct sampler *s = sampler_create(V);
    float l[V], sorted[V];
    struct proto_sampling p;
    uint64_t x = 99;

    (void)state;
    assert_non_null(s);
    proto_sampling_init(&p);
    p.temperature = 50.0f; /* flat: every kept token is likely to show up */
    for (int round = 0; round < 200; round++) {
        int k = 1 + round % 40;
        uint32_t t;

        p.top_k = k;
        p.seed = (uint64_t)round;
        sampler_reset(s, &p, NULL, 0);
        for (int v = 0; v < V; v++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            l[v] = (float)((x >> 33) % 50); /* many ties */
            sorted[v] = l[v];
        }
        for (int i = 1; i < V; i++) /* insertion sort, descending */
            for (int j = i; j > 0 && sorted[j - 1] < sorted[j]; j--) {
                float tmp = sorted[j];

                sorted[j] = sorted[j - 1];
                sorted[j - 1] = tmp;
            }
        t = sampler_sample(s, l, NULL);
        assert_true(l[t] >= sorted[k - 1]);
    }
    sampler_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sampler_greedy_is_argmax_ties_to_lowest, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sampler_fixed_seed_reproduces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_tiny_temperature_is_greedy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_non_finite_logits_do_not_escape_the_vocabulary,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_top_k_1_equals_greedy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_top_k_keeps_the_k_best, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_logit_bias_minus_100_bans, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sampler_min_p_cuts_the_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_top_p_cuts_the_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_frequencies_follow_the_softmax, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_sampler_temperature_sharpens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_repetition_penalty_covers_prompt_and_output,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_sampler_presence_and_frequency_penalties_cover_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sampler_logprobs_are_log_softmax_before_temperature,
                                        setup, teardown),
        cmocka_unit_test(test_sampler_large_vocab_top_p_matches_small_path),
        cmocka_unit_test(test_sampler_top_k_never_leaves_the_k_best),
    };

    return cmocka_run_group_tests_name("sampler", tests, NULL, NULL);
}
