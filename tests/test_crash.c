/* Integration tests of crash isolation, real binaries: each injected fault (abort, segv, hang,
 * error) and a kill -9 of a worker under 32 concurrent streams over 2 workers ends every
 * request (whole, or a clean worker_crashed error for those that ran on the dead worker) and
 * /health is back to two ready workers soon after; the workers die with their front; a
 * worker that cannot load its model is shown on /health and is not restarted in a hot loop. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

#define N_STREAMS   32
#define FAULTY      5     /* the index of the request that carries the marker */
#define MAX_SEQ     8     /* --max-sequences: at most this many die with one worker */
#define WATCHDOG_MS 1000
#define READ_MS     15000 /* the bound on each whole response */
#define START_FAILURES 5  /* supervisor.h: deaths before READY until a worker is failed */
#define RETRY_CAP_MS  10000 /* supervisor.h: a failed worker is tried again this often */

static const char *const load_args[] = {
    "--model",         "mock", "--workers",     "2",         "--max-sequences", "8",
    "--mock-faults",   "--mock-delay-ms",       "20",        "--mock-reply",    MOCK_REPLY,
    "--watchdog-ms",   "1000", NULL};

static int setup_load(void **state)
{
    struct kiln_proc *p = front_start(load_args);
    *state = p;
    return p ? 0 : -1;
}

static int teardown(void **state)
{
    return front_stop(*state);
}

static int send_stream(int port, const char *prompt)
{
    char body[256], req[1024];
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"stream\":true,\"max_tokens\":64}", prompt);
    snprintf(req, sizeof(req),
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen(body), body);
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    return fd;
}

enum outcome { OUT_COMPLETE, OUT_ERROR, OUT_BAD };

struct result {
    enum outcome out;
    int status;
    char code[64];
    char message[1024];
};

static void take_error(json_t *e, struct result *res)
{
    const char *c = json_string_value(json_object_get(e, "code"));
    const char *m = json_string_value(json_object_get(e, "message"));
    snprintf(res->code, sizeof(res->code), "%s", c ? c : "");
    snprintf(res->message, sizeof(res->message), "%s", m ? m : "");
}

/* Read one streamed response to its end and classify it: the whole reply then [DONE], or an
 * error (a JSON error before any byte, or one error event that ends the stream). */
static void read_outcome(int fd, struct result *res)
{
    struct http_response r;
    char text[1024] = "";
    bool done = false, error = false, after_error = false;

    memset(res, 0, sizeof(*res));
    res->out = OUT_BAD;
    res->status = http_raw_read_response(fd, &r, READ_MS);
    if (res->status < 0)
        return;
    if (res->status != 200) {
        json_t *j = json_loads(r.body, 0, NULL);
        json_t *e = json_object_get(j, "error");
        if (e) {
            take_error(e, res);
            res->out = OUT_ERROR;
        }
        json_decref(j);
        http_response_free(&r);
        return;
    }
    for (char *ev = r.body, *end; ev && *ev; ev = end) {
        end = strstr(ev, "\n\n");
        if (end) {
            *end = '\0';
            end += 2;
        }
        if (strncmp(ev, "data: ", 6) != 0)
            continue;
        ev += 6;
        if (error)
            after_error = true;
        if (strcmp(ev, "[DONE]") == 0) {
            done = true;
            continue;
        }
        json_t *j = json_loads(ev, 0, NULL);
        json_t *e = json_object_get(j, "error");
        if (e) {
            error = true;
            take_error(e, res);
        }
        const char *t = json_string_value(
            json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
        if (t)
            strncat(text, t, sizeof(text) - strlen(text) - 1);
        json_decref(j);
    }
    if (error && !after_error && !done)
        res->out = OUT_ERROR;
    else if (!error && done && strcmp(text, MOCK_REPLY) == 0)
        res->out = OUT_COMPLETE;
    http_response_free(&r);
}

/* The pid of a worker with at least min_running jobs and its id, per /health, or 0. */
static pid_t busy_worker(int port, int *id, long long min_running)
{
    json_t *h = front_health(port), *w;
    size_t i;
    pid_t pid = 0;
    json_array_foreach(json_object_get(h, "workers"), i, w) {
        /* with min_running > 1, that many must be generating */
        if (!pid && json_integer_value(json_object_get(w, "running")) >= min_running &&
            (min_running == 1 || json_integer_value(json_object_get(w, "active")) >= min_running)) {
            pid = (pid_t)json_integer_value(json_object_get(w, "pid"));
            *id = (int)i;
        }
    }
    json_decref(h);
    return pid;
}

static bool some_busy(void *arg)
{
    int id;
    return busy_worker(*(int *)arg, &id, 1) > 0;
}

static bool one_half_full(void *arg)
{
    int id;
    return busy_worker(*(int *)arg, &id, MAX_SEQ / 2) > 0;
}

/* 32 streams, the FAULTY one carrying marker (NULL: none; then a worker running jobs is
 * killed with SIGKILL). Checks every ending; returns how many ended with an error. */
static int run_load(void **state, const char *marker, const char *cause_part, bool only_faulty,
                    int ready_ms)
{
    int port = kiln_port(*state), fds[N_STREAMS], errors = 0;
    const char *example = "";
    struct result res[N_STREAMS];
    char prompt[64];

    for (int i = 0; i < N_STREAMS; i++) {
        snprintf(prompt, sizeof(prompt), "%s request %d", i == FAULTY && marker ? marker : "",
                 i);
        fds[i] = send_stream(port, prompt);
    }
    if (!marker) {
        int id;
        /* kill one with half a batch under way */
        assert_true(wait_until(one_half_full, &port, 5000));
        pid_t pid = busy_worker(port, &id, MAX_SEQ / 2);
        assert_true(pid > 0);
        assert_int_equal(kill(pid, SIGKILL), 0);
    }
    for (int i = 0; i < N_STREAMS; i++) {
        read_outcome(fds[i], &res[i]);
        close(fds[i]);
    }
    for (int i = 0; i < N_STREAMS; i++) {
        if (res[i].out == OUT_BAD)
            fail_msg("request %d ended badly (status %d)\n%s", i, res[i].status,
                     kiln_output(*state));
        if (res[i].out != OUT_ERROR)
            continue;
        errors++;
        example = res[i].message;
        if (only_faulty) {
            assert_int_equal(i, FAULTY);
            continue;
        }
        assert_string_equal(res[i].code, "worker_crashed");
        if (!strstr(res[i].message, cause_part))
            fail_msg("request %d: '%s' does not name '%s'", i, res[i].message, cause_part);
    }
    if (marker)
        assert_int_equal(res[FAULTY].out, OUT_ERROR);
    printf("  %s: %d of %d streams ended with an error%s%s\n", marker ? marker : "kill -9",
           errors, N_STREAMS, errors ? ", e.g. " : "", errors ? example : "");
    assert_true(errors >= 1 && errors <= MAX_SEQ);
    /* nothing left behind, both workers serving again */
    if (!wait_until(front_ready_cond, &port, ready_ms))
        fail_msg("not back to two ready workers within %d ms:\n%s", ready_ms,
                 kiln_output(*state));
    assert_int_equal(front_running(port), 0);
    assert_int_equal(front_waiting(port), 0);
    return errors;
}

static void test_crash_abort_under_load_fails_only_its_worker(void **state)
{
    run_load(state, "[[kiln:abort]]", "crashed (signal 6) while running this request (error id ", false, 2000);
}

static void test_crash_segv_under_load_fails_only_its_worker(void **state)
{
    run_load(state, "[[kiln:segv]]", "crashed (signal 11) while running this request (error id ", false,
             2000);
}

static void test_crash_hang_under_load_is_killed_by_the_watchdog(void **state)
{
    run_load(state, "[[kiln:hang]]", "watchdog", false, WATCHDOG_MS + 2000);
    assert_true(kiln_wait_output(*state, "made no progress", 10000));
}

static void test_crash_error_under_load_fails_only_its_sequence(void **state)
{
    assert_int_equal(run_load(state, "[[kiln:error]]", "", true, 2000), 1);
    /* no worker died */
    json_t *h = front_health(kiln_port(*state)), *w;
    size_t i;
    json_array_foreach(json_object_get(h, "workers"), i, w)
        assert_int_equal(json_integer_value(json_object_get(w, "restarts")), 0);
    json_decref(h);
}

static void test_crash_kill9_of_a_worker_mid_stream(void **state)
{
    run_load(state, NULL, "crashed (signal 9) while running this request (error id ", false, 2000);
    json_t *h = front_health(kiln_port(*state)), *w;
    size_t i;
    long long restarts = 0;
    json_array_foreach(json_object_get(h, "workers"), i, w) {
        restarts += json_integer_value(json_object_get(w, "restarts"));
        if (json_integer_value(json_object_get(w, "restarts")) == 1) {
            const char *le = json_string_value(json_object_get(w, "last_exit"));
            assert_non_null(le);
            assert_non_null(strstr(le, "signal 9"));
            assert_true(json_is_string(json_object_get(w, "last_exit_at")));
        }
    }
    assert_int_equal(restarts, 1);
    json_decref(h);
}

/* ---- the front's death ---- */

struct pids {
    pid_t v[8];
    int n;
};

static bool all_gone(void *arg)
{
    struct pids *p = arg;
    for (int i = 0; i < p->n; i++)
        if (!proc_gone(p->v[i]))
            return false;
    return true;
}

static void test_crash_kill9_of_the_front_takes_its_workers(void **state)
{
    static const char *args[] = {"--model", "mock", "--workers", "2", "--mock-faults", NULL};
    struct kiln_proc *p = front_start(args);
    struct pids pids = {.n = 0};
    json_t *h, *w;
    size_t i;
    (void)state;
    assert_non_null(p);
    /* one of them blocked in a model call: PDEATHSIG reaches it there too */
    int fd = send_stream(kiln_port(p), "[[kiln:hold]]");
    int port = kiln_port(p);
    assert_true(wait_until(some_busy, &port, 5000));
    h = front_health(kiln_port(p));
    json_array_foreach(json_object_get(h, "workers"), i, w)
        pids.v[pids.n++] = (pid_t)json_integer_value(json_object_get(w, "pid"));
    json_decref(h);
    assert_int_equal(pids.n, 2);
    assert_int_equal(kiln_kill(p, SIGKILL), 0);
    assert_true(kiln_wait_exit(p, 2000) >= 0);
    assert_true(wait_until(all_gone, &pids, 1000));
    close(fd);
    kiln_destroy(p);
}

/* ---- a model that does not load ---- */

struct health_view {
    int port;
    int status;
    char state[32];
    long long restarts;
    char last_error[256];
};

static void health_view_get(struct health_view *v)
{
    json_t *h = NULL;
    v->status = front_call(v->port, "GET", "/health", NULL, &h, NULL);
    json_t *w = json_array_get(json_object_get(h, "workers"), 0);
    const char *s = json_string_value(json_object_get(w, "state"));
    const char *e = json_string_value(json_object_get(w, "last_error"));
    snprintf(v->state, sizeof(v->state), "%s", s ? s : "");
    snprintf(v->last_error, sizeof(v->last_error), "%s", e ? e : "");
    v->restarts = json_integer_value(json_object_get(w, "restarts"));
    json_decref(h);
}

static bool worker_failed(void *arg)
{
    struct health_view *v = arg;
    health_view_get(v);
    return strcmp(v->state, "failed") == 0;
}

static bool worker_in_backoff(void *arg)
{
    struct health_view *v = arg;
    health_view_get(v);
    return strcmp(v->state, "backoff") == 0;
}

static bool restarted_again(void *arg)
{
    struct health_view *v = arg;
    long long before = v->restarts;
    health_view_get(v);
    return v->restarts > before;
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_crash_model_that_fails_to_load_is_reported_not_looped(void **state)
{
    const char *shared = getenv("KILN_SHARED");
    char model[512];
    (void)state;
    /* a vocabulary-only GGUF: the front's tokenizer loads, the worker finds no tensors */
    snprintf(model, sizeof(model), "%s/vocab/ggml-vocab-llama-spm.gguf",
             shared ? shared : "../shared");
    const char *args[] = {"--model", model, "--workers", "1", NULL};
    long long t0 = mono_ms();
    struct kiln_proc *p = kiln_start(args);
    assert_non_null(p);
    struct health_view v = {.port = kiln_port(p)};

    /* it backs off between attempts, and says why */
    assert_true(wait_until(worker_in_backoff, &v, 3000));
    assert_int_equal(v.status, 503);
    assert_non_null(strstr(v.last_error, "no tensors"));
    /* while no worker can serve, a new request is refused at once with Retry-After */
    struct http_response r;
    json_t *j;
    int st = front_call(v.port, "POST", "/v1/completions", "{\"prompt\":\"a\"}", &j, &r);
    if (strcmp(v.state, "backoff") == 0 || st == 503) {
        assert_int_equal(st, 503);
        assert_non_null(http_header_get(&r, "Retry-After"));
    }
    json_decref(j);
    http_response_free(&r);

    /* five attempts with 100, 200, 400, 800 ms between them, then failed */
    assert_true(wait_until(worker_failed, &v, 6000));
    long long took = mono_ms() - t0;
    assert_int_equal(v.restarts, START_FAILURES - 1);
    assert_true(took >= 1400); /* not a hot loop: the backoff was waited out */
    assert_int_equal(v.status, 503);
    assert_non_null(strstr(v.last_error, "no tensors"));
    json_t *h = front_health(v.port);
    assert_string_equal(json_string_value(json_object_get(h, "status")), "unavailable");
    json_decref(h);
    /* refused at once, told to come back at the next attempt (at most the 10 s cap) */
    st = front_call(v.port, "POST", "/v1/completions", "{\"prompt\":\"a\"}", &j, &r);
    assert_int_equal(st, 503);
    const char *ra = http_header_get(&r, "Retry-After");
    assert_non_null(ra);
    assert_true(atoi(ra) >= 1 && atoi(ra) <= RETRY_CAP_MS / 1000);
    json_decref(j);
    http_response_free(&r);
    /* failed is not for good: it is tried again, but only at the backoff cap. Count the
     * spawns in a window: one more attempt, not before the cap, and none right after it. */
    long long failed_at = mono_ms();
    assert_false(wait_until(restarted_again, &v, 1000));
    assert_true(wait_until(restarted_again, &v, RETRY_CAP_MS + 3000));
    assert_true(mono_ms() - failed_at >= RETRY_CAP_MS - 1500 - 200);
    assert_int_equal(v.restarts, START_FAILURES);
    assert_false(wait_until(restarted_again, &v, 1000));
    assert_int_equal(v.restarts, START_FAILURES);
    /* and it still reads failed, with its error */
    assert_true(wait_until(worker_failed, &v, 2000));
    assert_non_null(strstr(v.last_error, "no tensors"));
    assert_int_equal(front_stop(p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_crash_abort_under_load_fails_only_its_worker,
                                        setup_load, teardown),
        cmocka_unit_test_setup_teardown(test_crash_segv_under_load_fails_only_its_worker,
                                        setup_load, teardown),
        cmocka_unit_test_setup_teardown(test_crash_hang_under_load_is_killed_by_the_watchdog,
                                        setup_load, teardown),
        cmocka_unit_test_setup_teardown(test_crash_error_under_load_fails_only_its_sequence,
                                        setup_load, teardown),
        cmocka_unit_test_setup_teardown(test_crash_kill9_of_a_worker_mid_stream, setup_load,
                                        teardown),
        cmocka_unit_test(test_crash_kill9_of_the_front_takes_its_workers),
        cmocka_unit_test(test_crash_model_that_fails_to_load_is_reported_not_looped),
    };
    return cmocka_run_group_tests_name("crash", tests, NULL, NULL);
}
