/* /health's JSON from a plain view of the workers (api_health.c): the status words and HTTP
 * status for every mix of worker states, the short form without details, and each worker's
 * fields; no process or loop is needed, which is what rendering from a view buys. */
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>

#include "../server/api_impl.h"
#include "../server/supervisor.h"
#include "shm_region.h"

static struct supervisor_view *view(uint32_t n)
{
    struct supervisor_view *v = calloc(1, sizeof(*v) + n * sizeof(v->w[0]));
    assert_non_null(v);
    v->n = n;
    for (uint32_t i = 0; i < n; i++) {
        v->w[i] = (struct worker_view){.id = i, .life = WORKER_LIFE_READY, .serving = true,
                                       .pid = 100 + i, .restart_in_ms = -1, .last_exit = "",
                                       .last_error = "", .model = "mock"};
    }
    return v;
}

static void expect(const struct supervisor_view *v, bool details, const char *status,
                   int http)
{
    int got = 0;
    json_t *j = api_health_json(v, details, &got);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "status")), status);
    assert_int_equal(got, http);
    assert_true(details ? json_object_get(j, "workers") != NULL
                        : json_object_size(j) == 1); /* only the status without details */
    json_decref(j);
}

static void test_health_status_for_each_mix_of_workers(void **state)
{
    (void)state;
    struct supervisor_view *v = view(2);
    expect(v, true, "ok", 200);
    expect(v, false, "ok", 200);
    v->w[1] = (struct worker_view){.id = 1, .life = WORKER_LIFE_BACKOFF, .restart_in_ms = 400,
                                   .last_exit = "was killed by signal 9 (Killed)",
                                   .last_error = "", .model = "mock"};
    expect(v, true, "degraded", 200);
    expect(v, false, "ok", 200);
    v->w[0].serving = false;
    v->w[0].life = WORKER_LIFE_STARTING;
    v->w[0].loading = true;
    expect(v, true, "unavailable", 503);
    expect(v, false, "loading", 503);
    v->w[0].loading = false;
    v->w[0].life = WORKER_LIFE_FAILED;
    expect(v, false, "failed", 503);
    v->draining = true;
    expect(v, true, "draining", 503);
    expect(v, false, "draining", 503);
    free(v);
}

/* During a roll: the extra worker (or one restarted) that loads is capacity a reload adds, so
 * the service reads ok, not degraded; a worker that drains reads "draining", in /health as in
 * /metrics. A worker that loads after a crash still reads degraded. */
static void test_health_reload_starting_a_worker_is_not_degraded(void **state)
{
    (void)state;
    struct supervisor_view *v = view(3);
    v->w[2].serving = false;
    v->w[2].life = WORKER_LIFE_STARTING;
    v->w[2].loading = true;
    expect(v, true, "degraded", 200);
    v->w[2].reload_start = true;
    expect(v, true, "ok", 200);
    v->w[0].draining = true;
    expect(v, true, "ok", 200);
    assert_string_equal(worker_view_state(&v->w[0]), "draining");
    assert_string_equal(worker_view_state(&v->w[1]), "ready");
    assert_string_equal(worker_view_state(&v->w[2]), "starting");
    int http = 0;
    json_t *j = api_health_json(v, true, &http);
    json_t *w0 = json_array_get(json_object_get(j, "workers"), 0);
    assert_string_equal(json_string_value(json_object_get(w0, "state")), "draining");
    json_decref(j);
    free(v);
}

static void test_health_worker_fields(void **state)
{
    (void)state;
    struct supervisor_view *v = view(2);
    struct shm_region reg;
    int http = 0;

    assert_int_equal(shm_region_create(&reg, 4096, 4096), 0);
    atomic_store(&reg.hdr->waiting, 3);
    atomic_store(&reg.hdr->running, 2);
    v->w[0].hdr = reg.hdr;
    v->w[0].running = 5;
    v->w[1] = (struct worker_view){.id = 1, .life = WORKER_LIFE_BACKOFF, .restart_in_ms = 400,
                                   .restarts = 2, .last_exit = "exited with status 2",
                                   .last_exit_at = 1700000000123, .last_error = "bad file",
                                   .model = "mock"};
    json_t *j = api_health_json(v, true, &http);
    json_t *a = json_object_get(j, "workers"), *w0 = json_array_get(a, 0);
    json_t *w1 = json_array_get(a, 1);
    assert_int_equal(json_array_size(a), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "running")), 5);
    assert_string_equal(json_string_value(json_object_get(w0, "state")), "ready");
    assert_int_equal(json_integer_value(json_object_get(w0, "pid")), 100);
    assert_int_equal(json_integer_value(json_object_get(w0, "waiting")), 3);
    assert_int_equal(json_integer_value(json_object_get(w0, "active")), 2);
    assert_null(json_object_get(w0, "restart_in_ms"));
    assert_true(json_is_null(json_object_get(w0, "last_exit")));
    assert_string_equal(json_string_value(json_object_get(w1, "state")), "backoff");
    assert_true(json_is_null(json_object_get(w1, "pid")));
    assert_int_equal(json_integer_value(json_object_get(w1, "restart_in_ms")), 400);
    assert_int_equal(json_integer_value(json_object_get(w1, "restarts")), 2);
    assert_string_equal(json_string_value(json_object_get(w1, "last_exit_at")),
                        "2023-11-14T22:13:20.123Z");
    assert_string_equal(json_string_value(json_object_get(w1, "last_error")), "bad file");
    json_decref(j);
    shm_region_destroy(&reg);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_status_for_each_mix_of_workers),
        cmocka_unit_test(test_health_reload_starting_a_worker_is_not_degraded),
        cmocka_unit_test(test_health_worker_fields),
    };
    return cmocka_run_group_tests_name("health", tests, NULL, NULL);
}
