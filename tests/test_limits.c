/* Integration tests of the front's gates and limits against `kiln --model mock`: API keys
 * (401 with WWW-Authenticate, /health open, unknown paths 404), the per-client rate limit
 * and the concurrency cap (429 with Retry-After), the request timeout (504, or an error
 * event once streaming), and GET /metrics (values after requests; promtool's check when
 * installed). Each test starts its own server with the flags it needs. */
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

static int teardown(void **state)
{
    int rc = *state ? front_stop(*state) : 0;
    *state = NULL;
    return rc;
}

static struct kiln_proc *start(void **state, const char *const *args)
{
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    *state = p;
    return p;
}

static int post(int port, const char *path, const char *auth, const char *body,
                struct http_response *resp)
{
    char hdr[256];
    const char *headers[] = {hdr, NULL};
    snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", auth ? auth : "");
    return http_request(port, body ? "POST" : "GET", path, auth ? headers : NULL, body, resp);
}

static void test_limits_api_key_required_on_v1_only(void **state)
{
    static const char *args[] = {"--model", "mock", "--api-key", "k1", "--api-key", "k2",
                                 "--metrics-key", "mk", NULL};
    int port = kiln_port(start(state, args));
    struct http_response r;
    const char *body = "{\"prompt\":\"hi\",\"max_tokens\":2}";

    assert_int_equal(post(port, "/v1/completions", NULL, body, &r), 401);
    assert_string_equal(http_header_get(&r, "WWW-Authenticate"), "Bearer");
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "invalid_api_key");
    json_decref(j);
    http_response_free(&r);
    assert_int_equal(post(port, "/v1/completions", "wrong", body, &r), 401);
    http_response_free(&r);
    assert_int_equal(post(port, "/v1/completions", "k2", body, &r), 200); /* repeated flag */
    http_response_free(&r);
    assert_int_equal(post(port, "/v1/models", "k1", NULL, &r), 200);
    http_response_free(&r);
    assert_int_equal(post(port, "/v1/models", NULL, NULL, &r), 401);
    http_response_free(&r);
    assert_int_equal(post(port, "/health", NULL, NULL, &r), 200);
    http_response_free(&r);
    assert_int_equal(post(port, "/nope", NULL, NULL, &r), 404);
    http_response_free(&r);
    assert_int_equal(post(port, "/metrics", "k1", NULL, &r), 401); /* its own key */
    http_response_free(&r);
    assert_int_equal(post(port, "/metrics", "mk", NULL, &r), 200);
    http_response_free(&r);
}

static void test_limits_rate_limit_is_429_with_retry_after(void **state)
{
    static const char *args[] = {"--model", "mock", "--rate-limit", "1", "--rate-burst", "2",
                                 NULL};
    int port = kiln_port(start(state, args));
    struct http_response r;
    int ok = 0, limited = 0;
    for (int i = 0; i < 5; i++) {
        int st = post(port, "/v1/models", NULL, NULL, &r);
        if (st == 200)
            ok++;
        if (st == 429) {
            limited++;
            const char *ra = http_header_get(&r, "Retry-After");
            assert_non_null(ra);
            assert_true(atoi(ra) >= 1);
        }
        http_response_free(&r);
    }
    /* a burst of 2 and 1/s: 2 or 3 pass in the time the loop takes, the rest are refused */
    assert_true(ok >= 2 && ok <= 3);
    assert_int_equal(ok + limited, 5);
    assert_int_equal(post(port, "/health", NULL, NULL, &r), 200); /* never limited */
    http_response_free(&r);
}

static void test_limits_concurrency_cap_is_429(void **state)
{
    static const char *args[] = {"--model", "mock", "--max-concurrent-requests", "1",
                                 "--mock-delay-ms", "100", NULL};
    int port = kiln_port(start(state, args));
    struct http_stream *s = NULL;
    struct sse_event ev;
    struct http_response r;
    int st = http_stream_open(port, "POST", "/v1/completions", NULL,
                              "{\"prompt\":\"hi\",\"max_tokens\":50,\"stream\":true}", 10000, &s);
    assert_int_equal(st, 200);
    assert_int_equal(sse_next(s, &ev, 10000), 1); /* it runs */
    st = post(port, "/v1/completions", NULL, "{\"prompt\":\"hi\",\"max_tokens\":1}", &r);
    assert_int_equal(st, 429);
    assert_non_null(http_header_get(&r, "Retry-After"));
    http_response_free(&r);
    http_stream_close(s); /* the client leaves: its slot in the cap comes free */
    bool ok = false;
    for (int i = 0; i < 200 && !ok; i++) {
        st = post(port, "/v1/completions", NULL, "{\"prompt\":\"hi\",\"max_tokens\":1}", &r);
        ok = st == 200;
        http_response_free(&r);
        if (!ok)
            usleep(10000); /* bounded: 2 s in all */
    }
    assert_true(ok);
}

static void test_limits_timeout_is_504_or_an_error_event(void **state)
{
    static const char *args[] = {"--model", "mock", "--request-timeout-ms", "300",
                                 "--mock-delay-ms", "50", NULL};
    int port = kiln_port(start(state, args));
    struct http_response r;
    json_t *j;
    int st = post(port, "/v1/completions", NULL, "{\"prompt\":\"hi\",\"max_tokens\":100}", &r);
    assert_int_equal(st, 504);
    j = json_loads(r.body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "timeout");
    json_decref(j);
    http_response_free(&r);
    struct front_stream fs;
    assert_int_equal(front_stream_collect(port, "/v1/completions",
                                          "{\"prompt\":\"hi\",\"max_tokens\":100,\"stream\":true}",
                                          &fs, 10000),
                     0);
    assert_int_equal(fs.status, 200);
    assert_true(fs.error_event);
    assert_false(fs.done);
    /* the job was cancelled: the worker's slot comes back */
    long long running = -1;
    for (int i = 0; i < 200 && running != 0; i++) {
        running = front_running(port);
        if (running != 0)
            usleep(10000);
    }
    assert_int_equal(running, 0);
}

/* The value of the first sample line starting with prefix, or -1. */
static double sample(const char *text, const char *prefix)
{
    const char *p = text;
    size_t n = strlen(prefix);
    while (p && *p) {
        if (strncmp(p, prefix, n) == 0 && (p[n] == ' ' || p[n] == '{'))
            return atof(strchr(p + n, ' ') + 1);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return -1;
}

static void test_limits_metrics_count_requests_and_pass_promtool(void **state)
{
    static const char *args[] = {"--model", "mock", "--mock-reply", MOCK_REPLY, NULL};
    int port = kiln_port(start(state, args));
    struct http_response r;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(post(port, "/v1/completions", NULL,
                              "{\"prompt\":\"hi\",\"max_tokens\":4}", &r),
                         200);
        http_response_free(&r);
    }
    assert_int_equal(post(port, "/v1/completions", NULL, "{\"prompt\":", &r), 400);
    http_response_free(&r);
    assert_int_equal(post(port, "/metrics", NULL, NULL, &r), 200);
    assert_non_null(strstr(http_header_get(&r, "Content-Type"), "text/plain"));
    assert_int_equal((int)sample(r.body, "kiln_generation_tokens_total"), 12);
    assert_int_equal((int)sample(r.body, "kiln_requests_total{reason=\"length\"}"), 3);
    assert_int_equal((int)sample(r.body, "kiln_requests_rejected_total{reason=\"invalid\"}"), 1);
    assert_int_equal((int)sample(r.body, "kiln_time_to_first_token_seconds_count"), 3);
    assert_int_equal((int)sample(r.body, "kiln_request_duration_seconds_count"), 3);
    assert_int_equal((int)sample(r.body, "kiln_requests_running"), 0);
    assert_non_null(strstr(r.body, "kiln_worker_prefill_seconds"));

    if (access("/usr/bin/promtool", X_OK) != 0 && system("command -v promtool >/dev/null") != 0) {
        http_response_free(&r);
        skip();
    }
    char path[] = "/tmp/kiln-metrics-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, r.body, r.body_len), (ssize_t)r.body_len);
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
    int st = system(cmd);
    unlink(path);
    http_response_free(&r);
    assert_int_equal(st, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_limits_api_key_required_on_v1_only, teardown),
        cmocka_unit_test_teardown(test_limits_rate_limit_is_429_with_retry_after, teardown),
        cmocka_unit_test_teardown(test_limits_concurrency_cap_is_429, teardown),
        cmocka_unit_test_teardown(test_limits_timeout_is_504_or_an_error_event, teardown),
        cmocka_unit_test_teardown(test_limits_metrics_count_requests_and_pass_promtool,
                                  teardown),
    };
    return cmocka_run_group_tests_name("limits", tests, NULL, NULL);
}
