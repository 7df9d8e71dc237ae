/* Integration tests of kiln's shutdown and of what crashes leave behind, real binaries:
 * SIGTERM lets a running stream finish while new connections are refused and kiln exits 0; a
 * stream longer than --drain-ms ends with an error event; a second signal stops at once and
 * takes the workers; 20 crash-and-restart cycles leak no fd, shared-memory mapping or
 * process. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

static int teardown(void **state)
{
    kiln_destroy(*state);
    return 0;
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool connect_refused(void *arg)
{
    int fd = http_raw_connect(*(int *)arg);
    if (fd >= 0) {
        close(fd);
        return false;
    }
    return fd == -ECONNREFUSED;
}

/* The rest of a stream after its first event: its text, whether [DONE] or an error came. */
struct rest {
    char text[1024];
    bool done, error;
    int end; /* sse_next's last result: 0 at the clean end of the body */
};

static void read_rest(struct http_stream *s, struct rest *r, int timeout_ms)
{
    struct sse_event ev;
    memset(r, 0, sizeof(*r));
    while ((r->end = sse_next(s, &ev, timeout_ms)) == 1) {
        if (ev.done) {
            r->done = true;
            continue;
        }
        json_t *j = json_loads(ev.data, 0, NULL);
        if (json_object_get(j, "error"))
            r->error = true;
        const char *t = json_string_value(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
        if (t)
            strncat(r->text, t, sizeof(r->text) - strlen(r->text) - 1);
        json_decref(j);
    }
}

/* Open a stream and read its first event (the generation is under way). Returns its text. */
static struct http_stream *open_running(int port, const char *prompt, char *first, size_t cap)
{
    struct http_stream *s = NULL;
    struct sse_event ev;
    char body[256];
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"stream\":true}", prompt);
    assert_int_equal(http_stream_open(port, "POST", "/v1/completions", NULL, body, 10000, &s),
                     200);
    assert_int_equal(sse_next(s, &ev, 10000), 1);
    json_t *j = json_loads(ev.data, 0, NULL);
    const char *t = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    snprintf(first, cap, "%s", t ? t : "");
    json_decref(j);
    return s;
}

/* A request that arrives while the only worker is still loading waits in the queue and is
 * served as soon as the worker is ready: the worker says so through its eventfd, and the
 * front dispatches then, with no later record or request to prompt it. */
static void test_lifecycle_request_waits_for_a_loading_worker(void **state)
{
    static const char *args[] = {"--model", "mock", "--workers", "1", "--mock-load-ms", "700",
                                 "--mock-reply", MOCK_REPLY, NULL};
    struct kiln_proc *p = kiln_start(args); /* not front_start: it waits for ready */
    json_t *j = NULL;
    assert_non_null(p);
    *state = p;
    /* front_call's own timeout bounds the wait; the front's no-worker bound is 15 s */
    assert_int_equal(front_call(kiln_port(p), "POST", "/v1/completions",
                                "{\"prompt\":\"hi\"}", &j, NULL),
                     200);
    const char *t = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_non_null(t);
    assert_string_equal(t, MOCK_REPLY);
    json_decref(j);
}

static void test_lifecycle_sigterm_drains_a_running_stream_and_exits_0(void **state)
{
    static const char *args[] = {"--model",         "mock", "--workers",    "1",
                                 "--mock-delay-ms", "30",   "--mock-reply", MOCK_REPLY,
                                 NULL};
    struct kiln_proc *p = front_start(args);
    char text[1024];
    struct rest rest;
    assert_non_null(p);
    *state = p;
    int port = kiln_port(p);
    struct http_stream *s = open_running(port, "drain me", text, sizeof(text));

    assert_int_equal(kiln_kill(p, SIGTERM), 0);
    /* the listener is closed at once ... */
    assert_true(wait_until(connect_refused, &port, 2000));
    /* ... while the running stream goes on to its end */
    read_rest(s, &rest, 5000);
    strncat(text, rest.text, sizeof(text) - strlen(text) - 1);
    assert_int_equal(rest.end, 0);
    assert_true(rest.done);
    assert_false(rest.error);
    assert_string_equal(text, MOCK_REPLY);
    http_stream_close(s);
    int st = kiln_wait_exit(p, 5000);
    assert_true(st >= 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_true(kiln_wait_output(p, "draining", 10000));
}

static void test_lifecycle_drain_timeout_cancels_with_an_error_event(void **state)
{
    /* 27 tokens of 100 ms: far longer than the 300 ms drain */
    static const char *args[] = {"--model",      "mock", "--workers",       "1",
                                 "--drain-ms",   "300",  "--mock-delay-ms", "100",
                                 "--mock-reply", MOCK_REPLY, NULL};
    struct kiln_proc *p = front_start(args);
    char text[1024];
    struct rest rest;
    assert_non_null(p);
    *state = p;
    struct http_stream *s = open_running(kiln_port(p), "too long", text, sizeof(text));

    long long t0 = mono_ms();
    assert_int_equal(kiln_kill(p, SIGTERM), 0);
    read_rest(s, &rest, 5000);
    long long took = mono_ms() - t0;
    assert_int_equal(rest.end, 0); /* the stream ended ... */
    assert_true(rest.error);       /* ... with an error event */
    assert_false(rest.done);
    assert_true(took >= 250 && took < 2500);
    http_stream_close(s);
    int st = kiln_wait_exit(p, 5000);
    assert_true(st >= 0 && WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static bool one_running(void *arg)
{
    return front_running(*(int *)arg) == 1;
}

static void test_lifecycle_second_signal_stops_at_once(void **state)
{
    static const char *args[] = {"--model", "mock", "--workers", "1", "--mock-faults", NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    *state = p;
    int port = kiln_port(p);
    json_t *h = front_health(port);
    pid_t worker = (pid_t)json_integer_value(
        json_object_get(json_array_get(json_object_get(h, "workers"), 0), "pid"));
    json_decref(h);
    assert_true(worker > 0);

    /* a request held in its prefill: the drain would wait 30 s for it */
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    const char *body = "{\"prompt\":\"[[kiln:hold]]\"}";
    char req[256];
    snprintf(req, sizeof(req),
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n%s",
             strlen(body), body);
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    assert_true(wait_until(one_running, &port, 3000));
    assert_int_equal(kiln_kill(p, SIGTERM), 0);
    assert_true(wait_until(connect_refused, &port, 2000));
    assert_int_equal(kiln_wait_exit(p, 300), -ETIMEDOUT); /* still draining */
    assert_int_equal(kiln_kill(p, SIGTERM), 0);
    int st = kiln_wait_exit(p, 2000);
    assert_true(st >= 0 && WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    assert_true(proc_gone(worker));
    close(fd);
}

/* ---- leaks over crash cycles ---- */

/* Entries of /proc/pid/maps naming a memfd (the workers' shared regions), or -errno. */
static int count_memfd_maps(pid_t pid)
{
    char path[64], line[512];
    int n = 0;
    snprintf(path, sizeof(path), "/proc/%ld/maps", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "memfd:"))
            n++;
    fclose(f);
    return n;
}

/* Open fds of pid that are not sockets (pipes, eventfds, memfds, files: what a worker's
 * spawn opens; client connections come and go on their own), or -errno. */
static int count_fds_not_sockets(pid_t pid)
{
    char path[64], link[PATH_MAX], target[256];
    struct dirent *de;
    int n = 0;
    snprintf(path, sizeof(path), "/proc/%ld/fd", (long)pid);
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
        ssize_t k = readlink(link, target, sizeof(target) - 1);
        if (k < 0)
            continue;
        target[k] = '\0';
        if (strncmp(target, "socket:", 7) != 0)
            n++;
    }
    closedir(d);
    return n;
}

struct census {
    pid_t pid;
    int fds, maps, children;
};

static void census_take(struct census *c)
{
    c->fds = count_fds_not_sockets(c->pid);
    c->maps = count_memfd_maps(c->pid);
    c->children = proc_children(c->pid, NULL, 0);
}

struct census_pair {
    struct census before, now;
};

static bool census_back(void *arg)
{
    struct census_pair *cp = arg;
    census_take(&cp->now);
    return cp->now.fds == cp->before.fds && cp->now.maps == cp->before.maps &&
           cp->now.children == cp->before.children;
}

static bool all_ready(void *arg)
{
    return front_ready_cond(arg);
}

/* The pid of worker id per /health, or 0. */
static pid_t worker_pid(int port, int id)
{
    json_t *h = front_health(port);
    pid_t pid = (pid_t)json_integer_value(
        json_object_get(json_array_get(json_object_get(h, "workers"), (size_t)id), "pid"));
    json_decref(h);
    return pid;
}

struct replaced {
    int port, id;
    pid_t old;
};

static bool worker_replaced(void *arg)
{
    struct replaced *rp = arg;
    pid_t pid = worker_pid(rp->port, rp->id);
    return pid > 0 && pid != rp->old;
}

static void test_lifecycle_crash_cycles_leak_nothing(void **state)
{
    /* a 1 ms first backoff: 10 deaths in a row of each worker wait 1..512 ms */
    static const char *args[] = {"--model",       "mock", "--workers", "2", "--mock-faults",
                                 "--restart-backoff-ms", "1", NULL};
    struct kiln_proc *p = front_start(args);
    struct census_pair cp;
    assert_non_null(p);
    *state = p;
    int port = kiln_port(p);
    cp.before.pid = cp.now.pid = kiln_pid(p);
    census_take(&cp.before);
    assert_true(cp.before.fds > 0);
    assert_int_equal(cp.before.maps, 2);
    assert_int_equal(cp.before.children, 2);

    for (int cycle = 0; cycle < 20; cycle++) {
        if (cycle % 2 == 0) {
            /* worker 0 takes it (both idle: the first wins) and aborts in its decode */
            json_t *j;
            int st = front_call(port, "POST", "/v1/completions",
                                "{\"prompt\":\"[[kiln:abort]]\"}", &j, NULL);
            assert_int_equal(st, 500);
            json_t *code = json_object_get(json_object_get(j, "error"), "code");
            assert_string_equal(json_string_value(code), "worker_crashed");
            json_decref(j);
        } else {
            pid_t pid = worker_pid(port, 1);
            assert_true(pid > 0);
            assert_int_equal(kill(pid, SIGKILL), 0);
            struct replaced rp = {port, 1, pid};
            if (!wait_until(worker_replaced, &rp, 5000))
                fail_msg("cycle %d: worker 1 (pid %ld) not replaced", cycle, (long)pid);
        }
        if (!wait_until(all_ready, &port, 5000))
            fail_msg("cycle %d: not ready again:\n%s", cycle, kiln_output(p));
    }
    json_t *h = front_health(port), *w;
    size_t i;
    long long restarts = 0;
    json_array_foreach(json_object_get(h, "workers"), i, w)
        restarts += json_integer_value(json_object_get(w, "restarts"));
    json_decref(h);
    assert_int_equal(restarts, 20);
    if (!wait_until(census_back, &cp, 2000))
        fail_msg("after 20 crashes: %d non-socket fds (was %d), %d memfd maps (was %d), %d children "
                 "(was %d)",
                 cp.now.fds, cp.before.fds, cp.now.maps, cp.before.maps, cp.now.children,
                 cp.before.children);
    assert_int_equal(front_stop(p), 0);
    *state = NULL;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_lifecycle_request_waits_for_a_loading_worker, teardown),
        cmocka_unit_test_teardown(test_lifecycle_sigterm_drains_a_running_stream_and_exits_0,
                                  teardown),
        cmocka_unit_test_teardown(test_lifecycle_drain_timeout_cancels_with_an_error_event,
                                  teardown),
        cmocka_unit_test_teardown(test_lifecycle_second_signal_stops_at_once, teardown),
        cmocka_unit_test_teardown(test_lifecycle_crash_cycles_leak_nothing, teardown),
    };
    return cmocka_run_group_tests_name("lifecycle", tests, NULL, NULL);
}
