/* Integration tests of the front against hostile clients (`kiln --model mock`): clients that
 * never read a fast stream (the front's memory stays within its formula, the streams pause
 * on the worker, a client that reads nothing is dropped), more connections than fds, slow
 * senders (slowloris), idle keep-alives, /health latency under load, what an error tells a
 * client, a stopped idle worker, a half-closed client. Each test starts its own server. */
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
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

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* VmRSS of pid in KiB, or -1. */
static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long v = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
            break;
    fclose(f);
    return v;
}

/* A raw connection that sent a streamed request and will read nothing. */
static int send_unread_stream(int port, const char *body)
{
    char req[1024];
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    int small = 4096;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    int n = snprintf(req, sizeof(req),
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    assert_int_equal(http_raw_send(fd, req, (size_t)n), 0);
    return fd;
}

struct metric_at_least {
    int port;
    const char *name;
    double min;
};

static bool metric_at_least_cond(void *arg)
{
    struct metric_at_least *m = arg;
    return front_metric(m->port, m->name) >= m->min;
}

struct fds_at_most {
    pid_t pid;
    int max;
};

static bool fds_at_most_cond(void *arg)
{
    struct fds_at_most *f = arg;
    int n = proc_count_fds(f->pid);
    return n >= 0 && n <= f->max;
}

/* The reply mock-reply's 4000 characters, streamed as fast as the mock makes them. */
static char *long_reply(void)
{
    char *s = malloc(4001);
    assert_non_null(s);
    for (int i = 0; i < 4000; i++)
        s[i] = (char)('a' + i % 26);
    s[4000] = '\0';
    return s;
}

#define N_UNREAD 40
#define STREAM_BODY                                                                            \
    "{\"prompt\":\"hi\",\"stream\":true,\"n\":8,\"max_tokens\":4000,\"ignore_eos\":true}"

/* Finding 1: 40 clients that never read n:8 streams of a fast 4000-token reply. The front's
 * memory stays within the formula of the README (per connection: --max-client-buffer-bytes
 * and its request), the streams pause on the worker, /health answers meanwhile, and once the
 * clients leave their jobs are gone. */
static void test_abuse_unread_streams_pause_and_memory_stays_bounded(void **state)
{
    char *reply = long_reply();
    const char *args[] = {"--model", "mock", "--mock-reply", reply, "--max-sequences", "16",
                          NULL};
    struct kiln_proc *p = start(state, args);
    int port = kiln_port(p), fds[N_UNREAD];
    long rss0 = rss_kib(kiln_pid(p)), rss1;
    struct http_response r;
    long long t0;

    assert_true(rss0 > 0);
    for (int i = 0; i < N_UNREAD; i++)
        fds[i] = send_unread_stream(port, STREAM_BODY);
    /* two groups of 8 run (16 slots); each pauses once its client's buffer is full */
    struct metric_at_least paused = {port, "kiln_streams_paused_total", 2};
    bool were_paused = wait_until(metric_at_least_cond, &paused, 10000);
    rss1 = rss_kib(kiln_pid(p));
    fprintf(stderr, "front RSS %ld KiB idle, %ld KiB with %d unread n:8 streams\n", rss0, rss1,
            N_UNREAD);
    /* the README's formula: N x (max-client-buffer 256 KiB + 64 KiB of request and relay
     * + 1 MiB: a worker's 64 KiB ring of records already sent when the pause came, as SSE)
     * + 8 MiB of slack for the allocator */
#ifndef __SANITIZE_ADDRESS__ /* ASan's quarantine keeps up to 256 MB of freed memory */
    assert_true(rss1 - rss0 < N_UNREAD * (256 + 64 + 1024) + 8 * 1024);
#endif
    assert_true(were_paused);
    assert_int_equal(http_request_ex(port, "GET", "/health", NULL, NULL, 0, 10000, &r), 200);
    http_response_free(&r);
    for (int i = 0; i < N_UNREAD; i++)
        close(fds[i]);
    /* every job ends: the paused ones are cancelled, the queued ones dropped */
    long long running = -1;
    for (t0 = now_ms(); now_ms() - t0 < 10000;) {
        if ((running = front_running(port)) == 0)
            break;
        struct pollfd none;
        (void)poll(&none, 0, 20);
    }
    assert_int_equal(running, 0);
    /* and a client that reads gets its whole stream */
    struct front_stream st;
    assert_int_equal(front_stream_collect(port, "/v1/completions",
                                          "{\"prompt\":\"hi\",\"stream\":true,\"max_tokens\":50}",
                                          &st, 10000),
                     0);
    assert_int_equal(st.status, 200);
    assert_true(st.done);
    assert_int_equal(strlen(st.text), 50);
    free(reply);
}

/* Finding 1, continued: a client that reads nothing for --client-timeout-ms while its stream
 * is paused is dropped, counted, and its slot comes free. */
static void test_abuse_client_reading_nothing_is_dropped(void **state)
{
    char *reply = long_reply();
    const char *args[] = {"--model", "mock", "--mock-reply", reply, "--client-timeout-ms", "300",
                          "--max-client-buffer-bytes", "8192", NULL};
    struct kiln_proc *p = start(state, args);
    int port = kiln_port(p);
    int fds0 = proc_count_fds(kiln_pid(p));
    /* with logprobs, far more than the kernel's socket buffers can take */
    int fd = send_unread_stream(port, "{\"prompt\":\"hi\",\"stream\":true,\"n\":8,"
                                      "\"max_tokens\":4000,\"ignore_eos\":true,\"logprobs\":5}");
    struct metric_at_least dropped = {port, "kiln_connections_dropped_total{reason=\"client_timeout\"}",
                                      1};
    assert_true(wait_until(metric_at_least_cond, &dropped, 10000));
    /* the front closed its socket (the kernel may still be sending what it had queued) */
    struct fds_at_most closed = {kiln_pid(p), fds0};
    assert_true(wait_until(fds_at_most_cond, &closed, 5000));
    close(fd);
    long long running = -1;
    for (long long t0 = now_ms(); now_ms() - t0 < 5000;) {
        if ((running = front_running(port)) == 0)
            break;
        struct pollfd none;
        (void)poll(&none, 0, 20);
    }
    assert_int_equal(running, 0);
    free(reply);
}

/* A connection is closed by the server (EOF, or a reset) within timeout_ms; what came
 * before goes to *got (malloc'd). */
static bool closed_within(int fd, int timeout_ms, char **got)
{
    size_t len = 0;
    int rc = http_raw_read_all(fd, got, &len, timeout_ms);
    return rc == 0 || rc == -ECONNRESET;
}

#define N_SLOW 50

/* Finding 4 (slowloris): clients sending their headers a byte at a time get 408 once
 * --header-timeout-ms passed, and their connections close; a body that stops coming gets
 * 408 after --body-timeout-ms; an idle keep-alive connection is closed after
 * --keepalive-timeout-ms; each is counted. */
static void test_abuse_slow_headers_bodies_and_idle_keepalives_time_out(void **state)
{
    const char *args[] = {"--model", "mock", "--header-timeout-ms", "500", "--body-timeout-ms",
                          "500", "--keepalive-timeout-ms", "500", NULL};
    struct kiln_proc *p = start(state, args);
    int port = kiln_port(p), fds[N_SLOW];
    char *got = NULL;

    for (int i = 0; i < N_SLOW; i++) {
        fds[i] = http_raw_connect(port);
        assert_true(fds[i] >= 0);
        assert_int_equal(http_raw_send(fds[i], "GET /health HTTP/1.1\r\nX-a: ", 25), 0);
    }
    /* a byte each 100 ms, as a slowloris client does, until the server gives up */
    long long t0 = now_ms();
    int open = N_SLOW;
    while (open > 0 && now_ms() - t0 < 5000) {
        struct pollfd none;
        (void)poll(&none, 0, 100);
        for (int i = 0; i < N_SLOW; i++)
            if (fds[i] >= 0 && http_raw_send(fds[i], "a", 1) < 0) {
                close(fds[i]);
                fds[i] = -1;
                open--;
            }
    }
    for (int i = 0; i < N_SLOW; i++) {
        if (fds[i] < 0)
            continue;
        assert_true(closed_within(fds[i], 3000, &got));
        assert_non_null(strstr(got, "408"));
        free(got);
        close(fds[i]);
    }
    assert_true(front_metric(port, "kiln_connections_dropped_total{reason=\"header_timeout\"}") >=
                N_SLOW);

    /* a body that stops halfway */
    int fd = http_raw_connect(port);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       "application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":";
    assert_int_equal(http_raw_send(fd, head, strlen(head)), 0);
    assert_true(closed_within(fd, 5000, &got));
    assert_non_null(strstr(got, "HTTP/1.1 408"));
    free(got);
    close(fd);
    assert_true(front_metric(port, "kiln_connections_dropped_total{reason=\"body_timeout\"}") >= 1);

    /* an idle keep-alive connection */
    struct http_conn *c;
    struct http_response r;
    assert_int_equal(http_conn_open(port, &c), 0);
    const char *get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(http_raw_send(http_conn_fd(c), get, strlen(get)), 0);
    assert_int_equal(http_conn_read_response(c, "GET", &r, 5000), 200);
    http_response_free(&r);
    assert_int_equal(http_conn_wait_closed(c, 5000), 1);
    http_conn_close(c);
    assert_true(
        front_metric(port, "kiln_connections_dropped_total{reason=\"keepalive_timeout\"}") >= 1);
}

static bool health_ok_cond(void *arg)
{
    struct http_response r;
    int st = http_request_ex(*(int *)arg, "GET", "/health", NULL, NULL, 0, 1000, &r);
    if (st >= 0)
        http_response_free(&r);
    return st == 200;
}

#define N_IDLE 300

/* Finding 2: with an fd limit of 256 and 300 idle connections, the front pauses its
 * listener at --max-connections (the limit less the fds kept for workers) instead of spinning
 * on accept() and flooding its log; once some close it serves again, and a worker killed
 * meanwhile is restarted (its fds were kept for it). */
static void test_abuse_fd_limit_pauses_the_listener(void **state)
{
    const char *args[] = {"--model", "mock", NULL};
    struct rlimit old, low;
    int fds[N_IDLE];

    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = 256; /* the soft limit only, so it can be raised back */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0); /* kiln inherits it */
    struct kiln_proc *p = front_start(args);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_non_null(p);
    *state = p;
    int port = kiln_port(p);
    long long pid0 = front_worker_pid(port, 0);

    for (int i = 0; i < N_IDLE; i++) {
        fds[i] = http_raw_connect(port); /* the kernel's backlog completes them */
        assert_true(fds[i] >= 0);
    }
    struct metric_at_least paused = {port, "kiln_listener_paused_total", 1};
    /* the metrics need a connection: free room for it first */
    for (int i = 0; i < 100; i++) {
        close(fds[i]);
        fds[i] = -1;
    }
    bool was_paused = wait_until(metric_at_least_cond, &paused, 10000);
    /* no flood: a handful of lines about accepting, not millions */
    const char *out = kiln_output(p);
    int n = 0;
    for (const char *q = out; (q = strstr(q, "accept")); q++)
        n++;
    fprintf(stderr, "%d log mentions of accept\n", n);
    assert_true(n < 20);
    assert_true(was_paused);
    assert_true(kill((pid_t)pid0, SIGKILL) == 0);
    struct front_respawn wr = {port, pid0};
    assert_true(wait_until(front_respawned, &wr, 10000));
    assert_true(wait_until(health_ok_cond, &port, 5000));
    for (int i = 0; i < N_IDLE; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Finding 5: a worker crash tells the client a short, stable cause with an error id (no
 * stderr lines, no PID, no timestamps); the log has the id with the details. /health without
 * the key says only its status; with the metrics key it has the details. */
static void test_abuse_errors_are_short_and_health_needs_the_key(void **state)
{
    const char *args[] = {"--model", "mock", "--mock-faults", "--api-key", "k",
                          "--metrics-key", "mk", NULL};
    struct kiln_proc *p = start(state, args);
    int port = kiln_port(p);
    const char *auth[] = {"Authorization: Bearer k", NULL};
    const char *mauth[] = {"Authorization: Bearer mk", NULL};
    struct http_response r;

    assert_int_equal(http_request(port, "POST", "/v1/completions", auth,
                                  "{\"prompt\":\"[[kiln:segv]] hi\",\"max_tokens\":4}", &r),
                     500);
    json_t *j = json_loads(r.body, 0, NULL);
    const char *msg =
        json_string_value(json_object_get(json_object_get(j, "error"), "message"));
    assert_non_null(msg);
    fprintf(stderr, "client sees: %s\n", msg);
    assert_non_null(strstr(msg, "worker 0 crashed (signal 11) while running this request"));
    const char *id = strstr(msg, "(error id ");
    assert_non_null(id);
    char eid[9];
    memcpy(eid, id + 10, 8);
    eid[8] = '\0';
    assert_null(strstr(msg, "stderr"));
    assert_null(strstr(msg, "pid"));
    assert_null(strstr(msg, "kiln["));
    assert_true(strlen(msg) < 120);
    json_decref(j);
    http_response_free(&r);
    assert_true(kiln_wait_output(p, eid, 5000)); /* the log has the id */

    /* without the key: the status alone */
    assert_true(wait_until(health_ok_cond, &port, 5000));
    assert_int_equal(http_request(port, "GET", "/health", NULL, NULL, &r), 200);
    j = json_loads(r.body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "ok");
    assert_int_equal(json_object_size(j), 1);
    json_decref(j);
    http_response_free(&r);
    /* an API key is not the metrics key */
    assert_int_equal(http_request(port, "GET", "/health", auth, NULL, &r), 200);
    j = json_loads(r.body, 0, NULL);
    assert_int_equal(json_object_size(j), 1);
    json_decref(j);
    http_response_free(&r);
    assert_int_equal(http_request(port, "GET", "/health", mauth, NULL, &r), 200);
    j = json_loads(r.body, 0, NULL);
    json_t *w0 = json_array_get(json_object_get(j, "workers"), 0);
    assert_non_null(w0);
    assert_true(json_is_integer(json_object_get(w0, "pid")));
    assert_non_null(strstr(json_string_value(json_object_get(w0, "last_exit")), "signal 11"));
    json_decref(j);
    http_response_free(&r);
}

/* Finding 6: a worker stopped (SIGSTOP) while idle is found by the watchdog within
 * --watchdog-ms (idle workers beat too) and replaced before work is sent to it. */
static void test_abuse_stopped_idle_worker_is_replaced(void **state)
{
    const char *args[] = {"--model", "mock", "--watchdog-ms", "1000", NULL};
    struct kiln_proc *p = start(state, args);
    int port = kiln_port(p);
    long long pid0 = front_worker_pid(port, 0);
    assert_true(pid0 > 0);
    assert_int_equal(kill((pid_t)pid0, SIGSTOP), 0);
    struct front_respawn wr = {port, pid0};
    bool replaced = wait_until(front_respawned, &wr, 5000);
    (void)kill((pid_t)pid0, SIGCONT); /* harmless if it is gone */
    assert_true(replaced);
    struct http_response r;
    assert_int_equal(http_request_ex(port, "POST", "/v1/completions", NULL,
                                     "{\"prompt\":\"hi\",\"max_tokens\":4}", 30, 5000, &r),
                     200);
    http_response_free(&r);
}

/* Finding 6: a client that half-closes (shuts its sending side) after its request still gets
 * its answer, whole or streamed. */
static void test_abuse_half_closed_client_gets_its_answer(void **state)
{
    const char *args[] = {"--model", "mock", "--mock-delay-ms", "10", NULL};
    struct kiln_proc *p = start(state, args);
    int port = kiln_port(p);
    const char *bodies[] = {"{\"prompt\":\"hi\",\"max_tokens\":5}",
                            "{\"prompt\":\"hi\",\"max_tokens\":5,\"stream\":true}"};
    for (int i = 0; i < 2; i++) {
        char req[512];
        int fd = http_raw_connect(port);
        assert_true(fd >= 0);
        int n = snprintf(req, sizeof(req),
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(bodies[i]), bodies[i]);
        assert_int_equal(http_raw_send(fd, req, (size_t)n), 0);
        assert_int_equal(shutdown(fd, SHUT_WR), 0);
        char *all = NULL;
        size_t len = 0;
        assert_int_equal(http_raw_read_all(fd, &all, &len, 10000), 0);
        assert_non_null(strstr(all, "HTTP/1.1 200 OK"));
        assert_non_null(strstr(all, i ? "data: [DONE]" : "\"finish_reason\""));
        free(all);
        close(fd);
    }
}

/* Finding 3: /tokenize with_pieces on a 1 MB body made a 23 MB answer and held the loop for
 * seconds; it is refused (413) above 16384 tokens, and without pieces it answers. */
static void test_abuse_tokenize_with_pieces_is_bounded(void **state)
{
    const char *args[] = {"--model", "mock", NULL};
    struct kiln_proc *p = start(state, args);
    int port = kiln_port(p);
    size_t n = 1000000;
    char *body = malloc(n + 64);
    assert_non_null(body);
    int k = snprintf(body, 64, "{\"with_pieces\":true,\"content\":\"");
    memset(body + k, 'a', n - (size_t)k - 2);
    memcpy(body + n - 2, "\"}", 3);
    struct http_response r;
    assert_int_equal(http_request_ex(port, "POST", "/tokenize", NULL, body, n, 30000, &r), 413);
    assert_true(r.body_len < 1024);
    assert_non_null(strstr(r.body, "with_pieces"));
    http_response_free(&r);
    free(body);
}

/* Run kiln with args (a shell fragment) to its exit; its output in out. Returns its status. */
static int run_kiln(const char *args, char *out, size_t cap)
{
    const char *dir = getenv("KILN_BIN_DIR");
    char cmd[1024];
    size_t n = 0;
    snprintf(cmd, sizeof(cmd), "%s/kiln %s 2>&1", dir ? dir : "build", args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    while (n + 1 < cap && fgets(out + n, (int)(cap - n), f))
        n += strlen(out + n);
    out[n] = '\0';
    return pclose(f);
}

/* Finding 6, smaller ones: --host beyond loopback without an API key warns at start (a
 * documentation address no interface has, so nothing is exposed: the bind then fails);
 * --workers above what dispatch supports is refused. */
static void test_abuse_open_host_warns_and_too_many_workers_refused(void **state)
{
    static char out[16384];
    (void)state;
    (void)run_kiln("--model mock --port 0 --host 192.0.2.1", out, sizeof(out));
    assert_non_null(strstr(out, "without an API key"));
    (void)run_kiln("--model mock --port 0 --host 192.0.2.1 --api-key k", out, sizeof(out));
    assert_null(strstr(out, "without an API key"));
    int st = run_kiln("--model mock --port 0 --workers 65", out, sizeof(out));
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    assert_non_null(strstr(out, "--workers"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_abuse_unread_streams_pause_and_memory_stays_bounded,
                                  teardown),
        cmocka_unit_test_teardown(test_abuse_client_reading_nothing_is_dropped, teardown),
        cmocka_unit_test_teardown(test_abuse_slow_headers_bodies_and_idle_keepalives_time_out,
                                  teardown),
        cmocka_unit_test_teardown(test_abuse_fd_limit_pauses_the_listener, teardown),
        cmocka_unit_test_teardown(test_abuse_open_host_warns_and_too_many_workers_refused,
                                  NULL),
        cmocka_unit_test_teardown(test_abuse_errors_are_short_and_health_needs_the_key,
                                  teardown),
        cmocka_unit_test_teardown(test_abuse_stopped_idle_worker_is_replaced, teardown),
        cmocka_unit_test_teardown(test_abuse_half_closed_client_gets_its_answer, teardown),
        cmocka_unit_test_teardown(test_abuse_tokenize_with_pieces_is_bounded, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
