/* Integration test of kiln with a real GGUF model (../shared/models/stories260K.gguf): the
 * front reads the file's name, context, tokenizer and template, the worker runs the engine,
 * and greedy decoding of "Once upon a time" tells the Lily story, whole and streamed alike. */
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

#include "front_util.h"

static char model_path[4096];

static int setup(void **state)
{
    const char *shared = getenv("KILN_SHARED");
    snprintf(model_path, sizeof(model_path), "%s/models/stories260K.gguf",
             shared ? shared : "../shared");
    if (access(model_path, R_OK) != 0) {
        fprintf(stderr, "no %s\n", model_path);
        return -1;
    }
    const char *args[] = {"--model", model_path, "--workers", "1", "--threads", "1", NULL};
    struct kiln_proc *p = front_start(args);
    if (!p)
        return -1;
    *state = p;
    return 0;
}

static int teardown(void **state)
{
    return front_stop(*state);
}

/* stories260K's greedy continuation of "Once upon a time", 64 tokens: the same ids the
 * engine's own test pins (tests/test_model_llama.c), here through HTTP, front and worker. */
static const char LILY_64[] =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, "
    "she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said";

static void test_api_gguf_tells_the_story_whole_and_streamed(void **state)
{
    int port = kiln_port(*state);
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0}";
    json_t *j;
    assert_int_equal(front_call(port, "POST", "/v1/completions", body, &j, NULL), 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(c, "text"));
    assert_non_null(text);
    assert_string_equal(text, LILY_64);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                        "completion_tokens")),
                     64);
    long long prompt = json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                          "prompt_tokens"));
    assert_true(prompt > 1);

    struct front_stream s;
    assert_int_equal(front_stream_collect(port, "/v1/completions",
                                          "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,"
                                          "\"temperature\":0,\"stream\":true,"
                                          "\"stream_options\":{\"include_usage\":true}}",
                                          &s, 20000),
                     0);
    assert_string_equal(s.text, text);
    assert_int_equal(s.prompt_tokens, prompt);
    assert_int_equal(s.completion_tokens, 64);
    assert_string_equal(s.finish, "length");
    json_decref(j);

    assert_int_equal(front_call(port, "GET", "/v1/models", NULL, &j, NULL), 200);
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    assert_true(json_integer_value(json_object_get(m, "context_length")) > 0);
    json_decref(j);
}

/* One completion: its text and usage.prompt_tokens_details.cached_tokens. */
static void complete(int port, const char *body, char *text, size_t cap, long long *cached)
{
    json_t *j;
    assert_int_equal(front_call(port, "POST", "/v1/completions", body, &j, NULL), 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *d = json_object_get(json_object_get(j, "usage"), "prompt_tokens_details");
    assert_non_null(d);
    snprintf(text, cap, "%s", json_string_value(json_object_get(c, "text")));
    *cached = json_integer_value(json_object_get(d, "cached_tokens"));
    json_decref(j);
}

/* A prompt sent again reuses its cached blocks (cached_tokens > 0) and answers the same,
 * greedy and seeded; cache_prompt: false computes it whole, and answers the same again. */
static void test_api_gguf_repeated_prompt_reuses_the_cache_and_answers_the_same(void **state)
{
    int port = kiln_port(*state);
    static const char *const modes[] = {"\"temperature\":0", "\"temperature\":0.9,\"seed\":7"};
    char body[1024], first[2048], again[2048], whole[2048];
    long long cached;
    for (int i = 0; i < 2; i++) {
#define FMT "{\"prompt\":\"Once upon a time, there was a little girl named Lily. She loved " \
            "to play outside in the park with her friends. One day, %s\",\"max_tokens\":24,%s%s}"
        snprintf(body, sizeof(body), FMT, i ? "she saw" : "it rained", modes[i], "");
        complete(port, body, first, sizeof(first), &cached);
        complete(port, body, again, sizeof(again), &cached);
        assert_true(cached >= 16);
        assert_string_equal(first, again);
        snprintf(body, sizeof(body), FMT, i ? "she saw" : "it rained", modes[i],
                 ",\"cache_prompt\":false");
        complete(port, body, whole, sizeof(whole), &cached);
        assert_int_equal(cached, 0);
        assert_string_equal(first, whole);
#undef FMT
    }
    /* /metrics counts the reused tokens; /health shows the worker's cache */
    struct http_response resp;
    json_t *j;
    unsigned long long reused = 0;
    assert_int_equal(front_call(port, "GET", "/metrics", NULL, &j, &resp), 200);
    const char *at = strstr(resp.body, "kiln_worker_prompt_tokens_total{worker=\"0\",kind=\"reused\"} ");
    assert_non_null(at);
    assert_int_equal(sscanf(strchr(at, '}') + 2, "%llu", &reused), 1);
    assert_true(reused >= 32);
    assert_non_null(strstr(resp.body, "kiln_worker_kv_blocks{worker=\"0\",state=\"cached\"}"));
    assert_non_null(strstr(resp.body, "kiln_worker_kv_evictions_total{worker=\"0\"} 0"));
    http_response_free(&resp);
    json_decref(j);
    assert_int_equal(front_call(port, "GET", "/health", NULL, &j, NULL), 200);
    json_t *cache = json_object_get(json_array_get(json_object_get(j, "workers"), 0), "cache");
    assert_true(json_integer_value(json_object_get(cache, "blocks")) > 0);
    assert_true(json_integer_value(json_object_get(cache, "cached")) > 0);
    assert_true(json_real_value(json_object_get(cache, "fill")) > 0.0);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_api_gguf_tells_the_story_whole_and_streamed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_api_gguf_repeated_prompt_reuses_the_cache_and_answers_the_same, setup, teardown),
    };
    return cmocka_run_group_tests_name("api_gguf", tests, NULL, NULL);
}
