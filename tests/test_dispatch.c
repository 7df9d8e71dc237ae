/* Integration tests of kiln's waiting queue and dispatch: a full queue answers 503 with
 * Retry-After; with two workers, one held in a prefill does not stop the other from serving
 * (the reference scheduler's third test); a worker that dies fails its running request with
 * an error and is restarted. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

static int start_with(void **state, const char *const *args)
{
    struct kiln_proc *p = front_start(args);
    if (!p)
        return -1;
    *state = p;
    return 0;
}

static int setup_tiny_queue(void **state)
{
    static const char *args[] = {"--model",         "mock", "--workers",       "1",
                                 "--max-sequences", "1",    "--max-waiting",   "1",
                                 "--mock-delay-ms", "50",   "--mock-reply",    MOCK_REPLY,
                                 NULL};
    return start_with(state, args);
}

static int setup_two_faulty(void **state)
{
    static const char *args[] = {"--model",    "mock",     "--workers", "2", "--mock-faults",
                                 "--mock-reply", MOCK_REPLY, NULL};
    return start_with(state, args);
}

static int teardown(void **state)
{
    return front_stop(*state);
}

static bool one_waiting(void *arg)
{
    return front_waiting(*(int *)arg) == 1;
}

/* Send a whole request on a raw connection without reading. Returns the fd. */
static int send_raw(int port, const char *body)
{
    char req[1024];
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    snprintf(req, sizeof(req),
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen(body), body);
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    return fd;
}

static void test_dispatch_full_queue_answers_503_with_retry_after(void **state)
{
    int port = kiln_port(*state);
    struct http_stream *a = NULL;
    struct sse_event ev;
    assert_int_equal(http_stream_open(port, "POST", "/v1/completions", NULL,
                                      "{\"prompt\":\"a\",\"stream\":true}", 10000, &a),
                     200);
    assert_int_equal(sse_next(a, &ev, 10000), 1); /* a holds the only slot */
    int b = send_raw(port, "{\"prompt\":\"b\"}");
    assert_true(wait_until(one_waiting, &port, 3000)); /* b fills the queue */

    json_t *j;
    struct http_response r;
    int st = front_call(port, "POST", "/v1/completions", "{\"prompt\":\"c\"}", &j, &r);
    assert_int_equal(st, 503);
    assert_non_null(http_header_get(&r, "Retry-After"));
    assert_true(json_is_object(json_object_get(j, "error")));
    http_response_free(&r);
    json_decref(j);

    /* a and b are served in turn */
    struct http_response rb;
    assert_int_equal(http_raw_read_response(b, &rb, 20000), 200);
    assert_non_null(strstr(rb.body, "\"text_completion\""));
    http_response_free(&rb);
    close(b);
    http_stream_close(a);
}

/* The pid of the worker whose slot is taken, per /health, or 0. */
static pid_t busy_worker_pid(int port)
{
    json_t *h = front_health(port), *w;
    size_t i;
    pid_t pid = 0;
    json_array_foreach(json_object_get(h, "workers"), i, w) {
        if (json_integer_value(json_object_get(w, "running")) == 1)
            pid = (pid_t)json_integer_value(json_object_get(w, "pid"));
    }
    json_decref(h);
    return pid;
}

static bool one_running(void *arg)
{
    return front_running(*(int *)arg) == 1;
}

static void test_dispatch_held_worker_does_not_block_the_other(void **state)
{
    int port = kiln_port(*state);
    /* the first request holds its worker in the prefill until SIGUSR1 */
    int held = send_raw(port, "{\"prompt\":\"[[kiln:hold]] first\"}");
    assert_true(wait_until(one_running, &port, 3000));
    pid_t held_pid = busy_worker_pid(port);
    assert_true(held_pid > 0);

    /* the second request is served to the end by the other worker meanwhile */
    json_t *j;
    assert_int_equal(front_call(port, "POST", "/v1/completions", "{\"prompt\":\"second\"}", &j,
                                NULL),
                     200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), MOCK_REPLY);
    json_decref(j);

    /* the first is still held: not a byte of its answer yet */
    struct pollfd pfd = {.fd = held, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 0), 0);
    assert_int_equal(busy_worker_pid(port), held_pid);

    assert_int_equal(kill(held_pid, SIGUSR1), 0);
    struct http_response r;
    assert_int_equal(http_raw_read_response(held, &r, 10000), 200);
    j = json_loads(r.body, 0, NULL);
    c = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "text")), MOCK_REPLY);
    json_decref(j);
    http_response_free(&r);
    close(held);
}

static bool all_ready(void *arg)
{
    return front_ready_cond(arg);
}

static void test_dispatch_dead_worker_fails_its_request_and_restarts(void **state)
{
    int port = kiln_port(*state);
    json_t *j;
    /* abort() in the first decode step: after STARTED, so the request ends with an error */
    int st = front_call(port, "POST", "/v1/completions", "{\"prompt\":\"[[kiln:abort]]\"}", &j,
                        NULL);
    assert_int_equal(st, 500);
    json_t *e = json_object_get(j, "error");
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "signal"));
    json_decref(j);
    /* the worker comes back and serves again */
    assert_true(wait_until(all_ready, &port, 10000));
    assert_int_equal(front_call(port, "POST", "/v1/completions", "{\"prompt\":\"again\"}", &j,
                                NULL),
                     200);
    json_decref(j);
    assert_true(kiln_wait_output(*state, "killed by signal", 10000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dispatch_full_queue_answers_503_with_retry_after,
                                        setup_tiny_queue, teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_held_worker_does_not_block_the_other,
                                        setup_two_faulty, teardown),
        cmocka_unit_test_setup_teardown(test_dispatch_dead_worker_fails_its_request_and_restarts,
                                        setup_two_faulty, teardown),
    };
    return cmocka_run_group_tests_name("dispatch", tests, NULL, NULL);
}
