/* Integration test of the serving defaults a model implies (model_info.h): with no --ctx, the
 * front and the worker choose the same context, capped below a long-context model's own
 * (131072 tokens here) so the KV cache fits the memory budget; with no --threads, each of two
 * workers gets the cores divided between them. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model_info.h"
#include "lib/harness.h"
#include "lib/model_gen.h"

struct fixture {
    char dir[64], path[128];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    /* 16 layers x K/V width 512, as Llama 3.2 1B; everything else small */
    struct model_gen_opts o = {.dim = 512, .layers = 16, .heads = 4, .kv_heads = 4, .ffn = 256,
                               .ctx = 131072, .type = GGML_TYPE_Q8_0, .seed = 5, .n_vocab = 512};
    char err[256];

    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/kiln-defaults-XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    snprintf(f->path, sizeof(f->path), "%s/long.gguf", f->dir);
    if (model_gen_write(&o, f->path, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: %s\n", f->path, err);
        rmdir(f->dir);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* The number after the first occurrence of key in s, or 0. */
static unsigned long number_after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    return p ? strtoul(p + strlen(key), NULL, 10) : 0;
}

static bool worker_ready(void *arg)
{
    return kiln_output_contains(arg, "worker 1: INFO serving");
}

static void test_model_defaults_front_and_workers_agree_on_ctx_and_split_threads(void **state)
{
    struct fixture *f = *state;
    const char *args[] = {"--model", f->path, "--workers", "2", "--max-sequences", "8", NULL};
    struct kiln_proc *k = kiln_start(args);
    assert_non_null(k);
    assert_true(wait_until(worker_ready, k, 30000));
    const char *out = kiln_output(k);

    unsigned long front = number_after(out, "Q8_0, context ");
    unsigned long worker = number_after(out, "sequences, context ");
    unsigned long threads = number_after(out, "F16), ");
    uint32_t want = model_info_default_ctx(131072, model_info_kv_bytes(16, 512), 8,
                                           model_info_kv_budget() / 2);
    fprintf(stderr, "front context %lu, worker context %lu (want %u), %lu threads per worker\n",
            front, worker, want, threads);
    assert_int_equal(front, want);
    assert_int_equal(worker, want);
    assert_true(want < 131072);
    assert_int_equal(threads, model_info_default_threads(2));
    assert_int_equal(kiln_stop(k), 0);
    kiln_destroy(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_model_defaults_front_and_workers_agree_on_ctx_and_split_threads, setup,
            teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
