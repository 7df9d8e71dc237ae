/* Integration tests of kiln's streams: many concurrent SSE streams over two workers all
 * complete, a client that leaves (mid-stream or while queued) gives its slot back, and a
 * keep-alive connection serves on after a stream. */
#include <errno.h>
#include <poll.h>
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

#define N_STREAMS 64

static int start_with(void **state, const char *const *args)
{
    struct kiln_proc *p = front_start(args);
    if (!p)
        return -1;
    *state = p;
    return 0;
}

static int setup_two_workers(void **state)
{
    static const char *args[] = {"--model", "mock", "--workers", "2", "--mock-reply", MOCK_REPLY,
                                 NULL};
    return start_with(state, args);
}

static int setup_one_slow_slot(void **state)
{
    static const char *args[] = {"--model",         "mock", "--workers",      "1",
                                 "--max-sequences", "1",    "--mock-delay-ms", "40",
                                 "--mock-reply",    MOCK_REPLY MOCK_REPLY MOCK_REPLY, NULL};
    return start_with(state, args);
}

static int teardown(void **state)
{
    return front_stop(*state);
}

struct stream_job {
    int port;
    int rc;
    struct front_stream s;
};

static void *stream_thread(void *arg)
{
    struct stream_job *j = arg;
    char body[128];
    snprintf(body, sizeof(body), "{\"prompt\":\"stream %p\",\"stream\":true}", arg);
    j->rc = front_stream_collect(j->port, "/v1/completions", body, &j->s, 30000);
    return NULL;
}

static void test_stream_64_concurrent_streams_complete(void **state)
{
    static struct stream_job jobs[N_STREAMS];
    pthread_t th[N_STREAMS];
    int port = kiln_port(*state);
    for (int i = 0; i < N_STREAMS; i++) {
        jobs[i].port = port;
        assert_int_equal(pthread_create(&th[i], NULL, stream_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < N_STREAMS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N_STREAMS; i++) {
        assert_int_equal(jobs[i].rc, 0);
        assert_int_equal(jobs[i].s.status, 200);
        assert_string_equal(jobs[i].s.text, MOCK_REPLY);
        assert_string_equal(jobs[i].s.finish, "stop");
        assert_true(jobs[i].s.done);
    }
    assert_int_equal(front_running(port), 0);
    assert_int_equal(front_waiting(port), 0);
}

static bool no_running(void *arg)
{
    return front_running(*(int *)arg) == 0;
}

static bool none_waiting(void *arg)
{
    return front_waiting(*(int *)arg) == 0;
}

static bool one_running(void *arg)
{
    return front_running(*(int *)arg) == 1;
}

/* Open a stream and read n events of it. */
static struct http_stream *open_and_read(int port, int n)
{
    struct http_stream *s = NULL;
    struct sse_event ev;
    int st = http_stream_open(port, "POST", "/v1/completions", NULL,
                              "{\"prompt\":\"go\",\"stream\":true}", 10000, &s);
    assert_int_equal(st, 200);
    for (int i = 0; i < n; i++)
        assert_int_equal(sse_next(s, &ev, 10000), 1);
    return s;
}

static void test_stream_disconnect_mid_stream_frees_the_slot(void **state)
{
    int port = kiln_port(*state);
    struct http_stream *s = open_and_read(port, 2);
    assert_int_equal(front_running(port), 1);
    http_stream_close(s);
    /* the reply has ~80 tokens at 40 ms: only a cancel frees the slot this soon */
    assert_true(wait_until(no_running, &port, 2000));

    /* the one slot serves the next request to the end */
    json_t *j;
    assert_int_equal(front_call(port, "POST", "/v1/completions",
                                "{\"prompt\":\"x\",\"max_tokens\":3}", &j, NULL),
                     200);
    json_decref(j);
}

static void test_stream_disconnect_while_queued_drops_it(void **state)
{
    int port = kiln_port(*state);
    struct http_stream *a = open_and_read(port, 1);
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    const char *req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      "application/json\r\nContent-Length: 14\r\n\r\n{\"prompt\":\"b\"}";
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    assert_true(wait_until(one_running, &port, 2000));
    long long waiting = front_waiting(port);
    assert_int_equal(waiting, 1);
    close(fd);
    /* a still runs (~80 tokens at 40 ms), so only dropping b empties the queue this soon */
    assert_true(wait_until(none_waiting, &port, 1500));
    assert_int_equal(front_running(port), 1);
    http_stream_close(a);
    assert_true(wait_until(no_running, &port, 3000));
}

/* CPU ticks (utime + stime) of pid, or -1. */
static long long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

static long long tree_ticks(pid_t kiln)
{
    pid_t kids[8];
    int n = proc_children(kiln, kids, 8);
    long long t = cpu_ticks(kiln);
    for (int i = 0; i < n && i < 8; i++)
        t += cpu_ticks(kids[i]);
    return t;
}

static void test_stream_idle_kiln_uses_no_cpu(void **state)
{
    pid_t pid = kiln_pid(*state);
    assert_int_equal(proc_children(pid, NULL, 0), 2);
    long long before = tree_ticks(pid);
    /* a measurement window, not a synchronisation: nothing should happen in it */
    poll(NULL, 0, 3000);
    long long used = tree_ticks(pid) - before;
    /* The bound: under 1% of a core. 3 s of three idle processes may use 30 ms,
     * 3 ticks of 10 ms (a tick of sampling noise included). */
    assert_true(used >= 0 && used <= 3);
}

/* POST a completion on c; the body asks for a stream or not, close adds Connection: close. */
static void conn_post(struct http_conn *c, bool stream, bool close_after)
{
    char body[128], req[512];
    snprintf(body, sizeof(body), "{\"prompt\":\"hi\",\"max_tokens\":5,\"stream\":%s}",
             stream ? "true" : "false");
    snprintf(req, sizeof(req),
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n%s\r\n%s",
             strlen(body), close_after ? "Connection: close\r\n" : "", body);
    assert_int_equal(http_raw_send(http_conn_fd(c), req, strlen(req)), 0);
}

/* The answer on c: 200, and a stream ends with [DONE]. */
static void conn_expect(struct http_conn *c, bool stream)
{
    struct http_response r;
    assert_int_equal(http_conn_read_response(c, "POST", &r, 10000), 200);
    if (stream)
        assert_non_null(strstr(r.body, "data: [DONE]\n\n"));
    else
        assert_non_null(strstr(r.body, "\"text_completion\""));
    http_response_free(&r);
}

/* A finished stream leaves its keep-alive connection ready for the next request (evhttp used
 * to wait forever for the drain of its last chunk, so the next request was never read), and a
 * stream asked with Connection: close ends with the connection closed. */
static void test_stream_keep_alive_after_streams(void **state)
{
    int port = kiln_port(*state);
    struct http_conn *c;
    assert_int_equal(http_conn_open(port, &c), 0);
    static const bool plan[] = {true, true, false, true, false, false, true};
    for (size_t i = 0; i < sizeof(plan) / sizeof(plan[0]); i++) {
        conn_post(c, plan[i], false);
        conn_expect(c, plan[i]);
    }
    assert_int_equal(http_conn_wait_closed(c, 100), 0); /* kept open */
    conn_post(c, true, true);
    conn_expect(c, true);
    assert_int_equal(http_conn_wait_closed(c, 5000), 1);
    http_conn_close(c);
}

/* A stream whose tokens come slower than --keepalive-timeout-ms (a long prefill before the
 * first token, a slow model between two) is an answer under way, not an idle keep-alive
 * connection: it runs to its end. The keep-alive deadline used to drop it once the headers
 * had gone out, leaving the client an empty stream. */
static void test_stream_slower_than_the_keepalive_timeout_completes(void **state)
{
    static const char *args[] = {"--model",           "mock", "--mock-delay-ms", "400",
                                 "--keepalive-timeout-ms", "150",  "--mock-reply", "abc",
                                 NULL};
    struct front_stream s;
    assert_int_equal(start_with(state, args), 0);
    assert_int_equal(front_stream_collect(kiln_port(*state), "/v1/completions",
                                          "{\"prompt\":\"x\",\"stream\":true}", &s, 20000),
                     0);
    assert_int_equal(s.status, 200);
    assert_false(s.error_event);
    assert_true(s.done);
    assert_string_equal(s.text, "abc");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stream_idle_kiln_uses_no_cpu, setup_two_workers,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stream_64_concurrent_streams_complete,
                                        setup_two_workers, teardown),
        cmocka_unit_test_setup_teardown(test_stream_disconnect_mid_stream_frees_the_slot,
                                        setup_one_slow_slot, teardown),
        cmocka_unit_test_setup_teardown(test_stream_disconnect_while_queued_drops_it,
                                        setup_one_slow_slot, teardown),
        cmocka_unit_test_setup_teardown(test_stream_keep_alive_after_streams, setup_two_workers,
                                        teardown),
        cmocka_unit_test_teardown(test_stream_slower_than_the_keepalive_timeout_completes,
                                  teardown),
    };
    return cmocka_run_group_tests_name("stream", tests, NULL, NULL);
}
