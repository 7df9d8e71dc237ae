/* Cache-aware routing over two workers running stories260K: a prompt sent again goes to the
 * worker that reported its blocks (the "prefix" rule) and reuses them; killing that worker
 * drops only its index, so the next one is routed by load and computes the prompt whole;
 * /metrics counts the decisions by rule. */
#include <setjmp.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

static const char BODY[] =
    "{\"prompt\":\"Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park with her friends. One day, she saw a big red ball\",\"max_tokens\":8,"
    "\"temperature\":0}";

static long long cached_tokens(int port)
{
    json_t *j;
    assert_int_equal(front_call(port, "POST", "/v1/completions", BODY, &j, NULL), 200);
    long long n = json_integer_value(json_object_get(
        json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens"));
    json_decref(j);
    return n;
}

static unsigned long long routed(int port, const char *reason)
{
    char key[96];
    snprintf(key, sizeof(key), "kiln_route_decisions_total{reason=\"%s\"}", reason);
    double v = front_metric(port, key);
    assert_true(v >= 0);
    return (unsigned long long)v;
}

static void test_route_prefix_goes_to_its_worker_and_dies_with_it(void **state)
{
    (void)state;
    const char *shared = getenv("KILN_SHARED");
    char model[4096];
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf", shared ? shared : "../shared");
    const char *args[] = {"--model", model, "--workers", "2", "--threads", "1", NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    int port = kiln_port(p);

    /* idle workers: by load (the first); then the same prompt finds its blocks there */
    assert_int_equal(cached_tokens(port), 0);
    assert_int_equal(routed(port, "least_loaded"), 1);
    assert_true(cached_tokens(port) >= 16);
    assert_int_equal(routed(port, "prefix"), 1);

    /* the worker that held them dies: its index goes with it */
    struct front_respawn r = {port, front_worker_pid(port, 0)};
    assert_true(r.old_pid > 0);
    assert_int_equal(kill((pid_t)r.old_pid, SIGKILL), 0);
    assert_true(wait_until(front_respawned, &r, 20000));
    assert_int_equal(cached_tokens(port), 0);
    assert_int_equal(routed(port, "prefix"), 1);
    assert_int_equal(routed(port, "least_loaded"), 2);
    /* and it learns again */
    assert_true(cached_tokens(port) >= 16);
    assert_int_equal(routed(port, "prefix"), 2);
    assert_int_equal(front_stop(p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_prefix_goes_to_its_worker_and_dies_with_it),
    };
    return cmocka_run_group_tests_name("route", tests, NULL, NULL);
}
