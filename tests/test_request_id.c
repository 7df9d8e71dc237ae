/* Integration tests of X-Request-Id: a sane id from the client (or a balancer) comes back in
 * the response, on answers, errors and streams alike; a missing or unsafe one is replaced by
 * one kiln makes, different for each request. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "front_util.h"

static int setup(void **state)
{
    const char *args[] = {"--model", "mock", NULL};
    *state = front_start(args);
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    return front_stop(*state);
}

/* The X-Request-Id kiln answered method path (with hdr, may be NULL) with, into out. */
static int id_of(struct kiln_proc *p, const char *method, const char *path, const char *body,
                 const char *hdr, char *out, size_t cap)
{
    struct http_response r;
    const char *h[] = {hdr, "Content-Type: application/json", NULL};
    const char *const *hs = hdr ? h : h + 1;
    int st = http_request(kiln_port(p), method, path, hs, body, &r);
    assert_true(st > 0);
    const char *v = http_header_get(&r, "X-Request-Id");
    snprintf(out, cap, "%s", v ? v : "");
    http_response_free(&r);
    return st;
}

static bool is_made(const char *s)
{
    if (strlen(s) != 32)
        return false;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    return true;
}

static void test_request_id_from_the_client_comes_back(void **state)
{
    char id[256];
    const char *body = "{\"prompt\": \"hi\", \"max_tokens\": 2}";
    assert_int_equal(id_of(*state, "POST", "/v1/completions", body,
                           "X-Request-Id: nginx-3f2a.77:b_c", id, sizeof(id)),
                     200);
    assert_string_equal(id, "nginx-3f2a.77:b_c");
    /* on an error too */
    assert_int_equal(id_of(*state, "GET", "/no/such/route", NULL, "X-Request-Id: abc123", id,
                           sizeof(id)),
                     404);
    assert_string_equal(id, "abc123");
    assert_int_equal(id_of(*state, "GET", "/health", NULL, "X-Request-Id: h1", id, sizeof(id)),
                     200);
    assert_string_equal(id, "h1");
}

static void test_request_id_made_when_missing_or_unsafe(void **state)
{
    char a[256], b[256], c[256], d[256];
    char longid[300] = "X-Request-Id: ";
    memset(longid + strlen(longid), 'x', 200);
    assert_int_equal(id_of(*state, "GET", "/v1/models", NULL, NULL, a, sizeof(a)), 200);
    assert_int_equal(id_of(*state, "GET", "/v1/models", NULL, NULL, b, sizeof(b)), 200);
    assert_true(is_made(a));
    assert_true(is_made(b));
    assert_string_not_equal(a, b);
    assert_int_equal(id_of(*state, "GET", "/v1/models", NULL, "X-Request-Id: a b<script>", c,
                           sizeof(c)),
                     200);
    assert_true(is_made(c));
    assert_int_equal(id_of(*state, "GET", "/v1/models", NULL, longid, d, sizeof(d)), 200);
    assert_true(is_made(d));
}

static void test_request_id_on_a_stream(void **state)
{
    struct http_stream *s = NULL;
    const char *h[] = {"X-Request-Id: stream-1", "Content-Type: application/json", NULL};
    int st = http_stream_open(kiln_port(*state), "POST", "/v1/completions", h,
                              "{\"prompt\": \"hi\", \"max_tokens\": 3, \"stream\": true}", 10000,
                              &s);
    assert_int_equal(st, 200);
    const char *v = http_header_get(http_stream_response(s), "X-Request-Id");
    assert_non_null(v);
    assert_string_equal(v, "stream-1");
    char *rest = NULL;
    size_t len = 0;
    assert_true(http_stream_read_rest(s, &rest, &len, 10000) >= 0);
    free(rest);
    http_stream_close(s);
}

static void expect_output(struct kiln_proc *p, const char *text)
{
    if (!kiln_wait_output(p, text, 10000))
        fail_msg("no '%s' in:\n%s", text, kiln_output(p));
}

static void test_request_id_in_the_worker_log_lines_of_its_job(void **state)
{
    (void)state;
    char id[256];
    const char *args[] = {"--model", "mock", "--log-level", "debug", "--mock-faults", NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    /* the worker says when the job starts and ends, naming the client's id */
    assert_int_equal(id_of(p, "POST", "/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 2}",
                           "X-Request-Id: t-worker-ok.1", id, sizeof(id)),
                     200);
    expect_output(p, "worker 0: DEBUG request ");
    expect_output(p, " [t-worker-ok.1]: started, ");
    expect_output(p, " [t-worker-ok.1]: done (length), 2 tokens");
    /* and why it failed, at the default level too */
    assert_int_equal(id_of(p, "POST", "/v1/completions",
                           "{\"prompt\": \"[[kiln:error]]\", \"max_tokens\": 4}",
                           "X-Request-Id: t-worker-err:2", id, sizeof(id)),
                     500);
    expect_output(p, " [t-worker-err:2]: failed: injected fault");
    /* an id kiln made is carried the same way */
    assert_int_equal(id_of(p, "POST", "/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 1}",
                           NULL, id, sizeof(id)),
                     200);
    char want[300];
    snprintf(want, sizeof(want), " [%s]: done (length), 1 tokens", id);
    expect_output(p, want);
    assert_int_equal(front_stop(p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_id_from_the_client_comes_back),
        cmocka_unit_test(test_request_id_made_when_missing_or_unsafe),
        cmocka_unit_test(test_request_id_on_a_stream),
        cmocka_unit_test(test_request_id_in_the_worker_log_lines_of_its_job),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
