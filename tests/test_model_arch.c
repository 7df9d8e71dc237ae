/* The architectures' loading and the parts test_oracle cannot compare with llama.cpp: a
 * sliding window in llama and phi3 files (llama.cpp ignores it there; kiln applies it, as
 * the models were trained), and refusals that name the file, the architecture and what is
 * missing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../worker/model_llama.h"
#include "lib/model_gen.h"

static char dir[] = "/tmp/kiln-arch-XXXXXX";

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

static struct model_gen_opts small(const char *arch)
{
    struct model_gen_opts o = {.arch = arch, .dim = 64, .layers = 1, .heads = 4, .kv_heads = 2,
                               .ffn = 128, .ctx = 64, .type = GGML_TYPE_F32, .seed = 3,
                               .peak = 4.0f};
    return o;
}

static struct model *load(const struct model_gen_opts *o, const char *name, char *err,
                          size_t errlen)
{
    char path[128], gerr[256];
    struct model_llama_opts mo = {.max_sequences = 1, .ctx = 64, .threads = 1, .quiet = 1};
    snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
    assert_int_equal(model_gen_write(o, path, gerr, sizeof(gerr)), 0);
    return model_llama_create(path, &mo, err, errlen);
}

/* The last logits of prompt a and of prompt b (which differs at position 1 only). */
static float max_diff_after(struct model *m)
{
    static const uint32_t a[] = {1, 300, 301, 302, 303, 304, 305, 306};
    static const uint32_t b[] = {1, 400, 301, 302, 303, 304, 305, 306};
    float *la = malloc(m->n_vocab * sizeof(float)), *lb = malloc(m->n_vocab * sizeof(float));
    float d = 0.0f;
    assert_non_null(la);
    assert_non_null(lb);
    assert_int_equal(model_prefill(m, 0, a, 8, la), 0);
    assert_int_equal(model_prefill(m, 0, b, 8, lb), 0);
    for (uint32_t i = 0; i < m->n_vocab; i++)
        d = fmaxf(d, fabsf(la[i] - lb[i]));
    free(la);
    free(lb);
    return d;
}

/* One layer with a window of 4: the last position sees positions 4-7, so a token at
 * position 1 cannot change its logits; without the window it does. */
static void test_arch_sliding_window_hides_older_tokens(void **state)
{
    static const char *const archs[] = {"llama", "phi3", "gemma2"};
    char err[512];
    (void)state;
    for (int i = 0; i < 3; i++) {
        struct model_gen_opts o = small(archs[i]);
        char name[32];
        o.window = 4;
        snprintf(name, sizeof(name), "%s-w4", archs[i]);
        struct model *m = load(&o, name, err, sizeof(err));
        assert_non_null(m);
        assert_true(max_diff_after(m) == 0.0f);
        model_destroy(m);
        o.window = 64;
        snprintf(name, sizeof(name), "%s-w64", archs[i]);
        m = load(&o, name, err, sizeof(err));
        assert_non_null(m);
        assert_true(max_diff_after(m) > 1e-3f);
        model_destroy(m);
    }
}

static void test_arch_unknown_is_refused_by_name(void **state)
{
    struct model_gen_opts o = small("llama");
    char err[512];
    (void)state;
    o.arch_written = "mamba";
    assert_null(load(&o, "mamba", err, sizeof(err)));
    assert_non_null(strstr(err, "mamba.gguf"));
    assert_non_null(strstr(err, "architecture 'mamba' is not supported"));
    assert_non_null(strstr(err, "gemma3"));
}

/* Each architecture's own tensors and keys: missing, the message names file, architecture
 * and the name. */
static void test_arch_missing_tensor_or_key_is_named(void **state)
{
    static const struct {
        const char *arch, *tensor, *key, *expect;
    } cases[] = {
        {"qwen3", "blk.0.attn_q_norm.weight", NULL, "qwen3 model: missing tensor blk.0.attn_q_norm.weight"},
        {"gemma2", "blk.0.post_ffw_norm.weight", NULL, "gemma2 model: missing tensor blk.0.post_ffw_norm.weight"},
        {"gemma3", NULL, "attention.sliding_window", "gemma3 model: missing key gemma3.attention.sliding_window"},
        {"phi3", "blk.0.attn_qkv.weight", NULL, "phi3 model: missing tensor blk.0.attn_qkv.weight"},
        {"qwen2", "blk.0.attn_k.bias", NULL, "qwen2 model: missing tensor blk.0.attn_k.bias"},
        {"granite", NULL, "logit_scale", "granite model: missing key granite.logit_scale"},
        {"llama", NULL, "block_count", "llama model: missing key llama.block_count"},
    };
    char err[512];
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct model_gen_opts o = small(cases[i].arch);
        char name[32];
        o.omit_tensor = cases[i].tensor;
        o.omit_key = cases[i].key;
        snprintf(name, sizeof(name), "missing-%zu", i);
        err[0] = '\0';
        assert_null(load(&o, name, err, sizeof(err)));
        if (!strstr(err, cases[i].expect) || !strstr(err, name))
            fail_msg("%s: got '%s'", cases[i].expect, err);
    }
}

/* Every architecture kiln-mkmodel writes loads, and its logits are finite. */
static void test_arch_every_architecture_loads_and_runs(void **state)
{
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3",
                                        "phi3",  "granite", "smollm3"};
    char err[512];
    (void)state;
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        struct model_gen_opts o = small(archs[i]);
        o.layers = 4;
        struct model *m = load(&o, archs[i], err, sizeof(err));
        if (!m)
            fail_msg("%s: %s", archs[i], err);
        float *lg = malloc(m->n_vocab * sizeof(float));
        static const uint32_t p[] = {1, 300, 301};
        assert_non_null(lg);
        assert_int_equal(model_prefill(m, 0, p, 3, lg), 0);
        for (uint32_t v = 0; v < m->n_vocab; v++)
            assert_true(isfinite(lg[v]));
        free(lg);
        model_destroy(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arch_sliding_window_hides_older_tokens),
        cmocka_unit_test(test_arch_unknown_is_refused_by_name),
        cmocka_unit_test(test_arch_missing_tensor_or_key_is_named),
        cmocka_unit_test(test_arch_every_architecture_loads_and_runs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
