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

/* A series' value from /metrics (the first line "name value"), or -1. */
static double metric(int port, const char *name)
{
    struct http_response r;
    double v = -1;
    size_t n = strlen(name);
    if (http_request_ex(port, "GET", "/metrics", NULL, NULL, 0, 5000, &r) != 200)
        return -1;
    for (const char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    }
    http_response_free(&r);
    return v;
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
    return metric(m->port, m->name) >= m->min;
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
    /* the README's formula: N x (max-client-buffer 256 KiB + 64 KiB of request and relay)
     * + per worker 16 MiB (the records already in its ring when the pause came, as SSE),
     * + 8 MiB of slack for the allocator */
#ifndef __SANITIZE_ADDRESS__ /* ASan's quarantine keeps up to 256 MB of freed memory */
    assert_true(rss1 - rss0 < N_UNREAD * (256 + 64) + 16 * 1024 + 8 * 1024);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_abuse_unread_streams_pause_and_memory_stays_bounded,
                                  teardown),
        cmocka_unit_test_teardown(test_abuse_client_reading_nothing_is_dropped, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
