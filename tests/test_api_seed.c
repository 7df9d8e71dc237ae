/* Sampling through the API on the real stories260K model (real logits; the mock's are
 * one-hot): a fixed seed at temperature 1 reproduces a stream exactly, alone and with other
 * requests batched beside it; other seeds (and no seed: a fresh one each time) differ. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

static char model_path[4096];

static int setup(void **state)
{
    const char *shared = getenv("KILN_SHARED");
    snprintf(model_path, sizeof(model_path), "%s/models/stories260K.gguf",
             shared ? shared : "../shared");
    if (access(model_path, R_OK) != 0) {
        *state = NULL;
        return 0;
    }
    const char *args[] = {"--model", model_path, "--workers", "1", "--max-sequences", "4", NULL};
    *state = front_start(args);
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    return *state ? front_stop(*state) : 0;
}

static void stream_text(int port, const char *body, char *out, size_t cap)
{
    struct front_stream fs;
    assert_int_equal(front_stream_collect(port, "/v1/completions", body, &fs, 30000), 0);
    assert_int_equal(fs.status, 200);
    assert_true(fs.done);
    snprintf(out, cap, "%s", fs.text);
}

#define SEEDED "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":1," \
               "\"stream\":true,\"seed\":%d}"

struct side {
    int port;
};

static void *side_load(void *arg)
{
    struct side *s = arg;
    struct front_stream fs;
    char body[256];
    for (int i = 0; i < 3; i++) {
        snprintf(body, sizeof(body), SEEDED, 1000 + i);
        (void)front_stream_collect(s->port, "/v1/completions", body, &fs, 30000);
    }
    return NULL;
}

static void test_api_seed_reproduces_a_stream_alone_and_batched(void **state)
{
    if (!*state)
        skip();
    int port = kiln_port(*state);
    char body[256], a[8192], b[8192], c[8192], d[8192];
    snprintf(body, sizeof(body), SEEDED, 42);
    stream_text(port, body, a, sizeof(a));
    stream_text(port, body, b, sizeof(b));
    assert_true(strlen(a) > 0);
    assert_string_equal(a, b);

    /* the same request while others run beside it in the worker's batch */
    struct side s = {port};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, side_load, &s), 0);
    stream_text(port, body, c, sizeof(c));
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_string_equal(a, c);

    /* another seed tells another story */
    snprintf(body, sizeof(body), SEEDED, 43);
    stream_text(port, body, d, sizeof(d));
    assert_string_not_equal(a, d);
}

static void test_api_seed_absent_draws_a_fresh_seed(void **state)
{
    if (!*state)
        skip();
    int port = kiln_port(*state);
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":1,"
                       "\"stream\":true}";
    char a[8192], b[8192];
    stream_text(port, body, a, sizeof(a));
    stream_text(port, body, b, sizeof(b));
    assert_string_not_equal(a, b); /* 40 tokens at temperature 1: equal only by a fluke */
}

static void test_api_seed_n_choices_use_successive_seeds(void **state)
{
    if (!*state)
        skip();
    int port = kiln_port(*state);
    json_t *j;
    int st = front_call(port, "POST", "/v1/completions",
                        "{\"prompt\":\"Once upon a time\",\"max_tokens\":30,\"temperature\":1,"
                        "\"seed\":7,\"n\":2}",
                        &j, NULL);
    assert_int_equal(st, 200);
    json_t *ch = json_object_get(j, "choices");
    assert_int_equal(json_array_size(ch), 2);
    const char *t1 = json_string_value(json_object_get(json_array_get(ch, 1), "text"));
    json_t *k;
    st = front_call(port, "POST", "/v1/completions",
                    "{\"prompt\":\"Once upon a time\",\"max_tokens\":30,\"temperature\":1,"
                    "\"seed\":8}",
                    &k, NULL);
    assert_int_equal(st, 200);
    /* choice 1 of seed 7 is the lone request of seed 8 */
    assert_string_equal(t1, json_string_value(json_object_get(
                                json_array_get(json_object_get(k, "choices"), 0), "text")));
    json_decref(k);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_seed_reproduces_a_stream_alone_and_batched),
        cmocka_unit_test(test_api_seed_absent_draws_a_fresh_seed),
        cmocka_unit_test(test_api_seed_n_choices_use_successive_seeds),
    };
    return cmocka_run_group_tests_name("api_seed", tests, setup, teardown);
}
