/* `make soak` (not in CI): SOAK_SECONDS (default 1200) of mixed traffic against
 * `kiln --model mock --workers 2 --mock-faults`: streams read to the end, whole replies,
 * clients that disconnect mid-stream, slow readers, bad bodies, prompts that crash their
 * worker (segv, abort), and a worker killed with SIGKILL every 20 s. Every request must end
 * answered or failed cleanly (an HTTP error, or a stream's error event and its end): one
 * that times out, or whose connection closes without an answer, is lost. At the end the
 * front's RSS and fd count are compared with those after the warm-up (within 10%), and no
 * worker process beyond the two is left. Prints its figures; exits 1 on any failure. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "front_util.h"

#define N_CLIENTS 12
#define KILL_EVERY_MS 20000

static atomic_bool stop_now;
static atomic_long n_ok, n_failed_clean, n_lost, n_disconnects, n_bad_bodies;
static int port;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

static void lost(const char *what, int rc)
{
    atomic_fetch_add(&n_lost, 1);
    fprintf(stderr, "soak: LOST %s (%d)\n", what, rc);
}

/* A stream read to its end (or for `keep` events, then dropped); slow: a pause per event. */
static void one_stream(const char *prompt, int keep, int slow_ms)
{
    char body[256];
    struct http_stream *s = NULL;
    struct sse_event ev;
    bool error_event = false, done = false;
    int rc, n = 0;
    snprintf(body, sizeof(body),
             "{\"prompt\":\"%s\",\"stream\":true,\"max_tokens\":40,\"n\":%d}", prompt,
             1 + rand() % 3);
    rc = http_stream_open(port, "POST", "/v1/completions", NULL, body, 30000, &s);
    if (rc < 0)
        return lost("stream open", rc);
    if (rc != 200) {
        char *rest = NULL;
        size_t len;
        http_stream_read_rest(s, &rest, &len, 30000);
        free(rest);
        http_stream_close(s);
        atomic_fetch_add(&n_failed_clean, 1);
        return;
    }
    while ((rc = sse_next(s, &ev, 30000)) == 1) {
        if (ev.done)
            done = true;
        else if (strstr(ev.data, "\"error\""))
            error_event = true;
        if (keep && ++n >= keep) {
            http_stream_close(s);
            atomic_fetch_add(&n_disconnects, 1);
            return;
        }
        if (slow_ms) {
            struct timespec ts = {0, slow_ms * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    http_stream_close(s);
    if (rc < 0)
        return lost("stream read", rc);
    if (done)
        atomic_fetch_add(&n_ok, 1);
    else if (error_event)
        atomic_fetch_add(&n_failed_clean, 1);
    else
        lost("stream ended without [DONE] or an error", 0);
}

static void one_whole(const char *prompt)
{
    char body[256];
    struct http_response r;
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":30}", prompt);
    int st = http_request_ex(port, "POST", "/v1/completions", NULL, body, strlen(body), 30000,
                             &r);
    if (st < 0)
        return lost("whole", st);
    json_t *j = json_loads(r.body, 0, NULL);
    bool ok = st == 200 && json_object_get(j, "choices");
    bool err = st >= 400 && json_object_get(j, "error");
    json_decref(j);
    http_response_free(&r);
    if (ok)
        atomic_fetch_add(&n_ok, 1);
    else if (err)
        atomic_fetch_add(&n_failed_clean, 1);
    else
        lost("whole reply neither an answer nor an error", st);
}

static void one_bad_body(void)
{
    static const char *bad[] = {"{\"prompt\":", "[1,2", "{\"prompt\":\"x\",\"n\":99}",
                                "{\"prompt\":\"x\",\"max_tokens\":-1}", "\xff\xfe"};
    const char *b = bad[rand() % 5];
    struct http_response r;
    int st = http_request_ex(port, "POST", "/v1/completions", NULL, b, strlen(b), 30000, &r);
    if (st < 0)
        return lost("bad body", st);
    http_response_free(&r);
    if (st == 400)
        atomic_fetch_add(&n_bad_bodies, 1);
    else
        lost("bad body not 400", st);
}

static void *client(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    srand(seed);
    while (!atomic_load(&stop_now)) {
        int k = rand() % 1000;
        const char *p = k < 3 ? "[[kiln:segv]] x" : k < 6 ? "[[kiln:abort]] x" : "hello";
        long before = atomic_load(&n_failed_clean);
        int what = rand() % 10;
        if (what < 4)
            one_stream(p, 0, 0);
        else if (what < 6)
            one_whole(p);
        else if (what < 7)
            one_stream("hello", 1 + rand() % 5, 0); /* disconnects */
        else if (what < 8)
            one_stream("hello", 0, 20); /* slow reader */
        else
            one_bad_body();
        if (atomic_load(&n_failed_clean) != before) { /* a 503 while a worker restarts */
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

int main(void)
{
    const char *sec = getenv("SOAK_SECONDS");
    long seconds = sec ? atol(sec) : 1200;
    const char *args[] = {"--model", "mock", "--workers", "2", "--mock-faults",
                          "--mock-delay-ms", "2", "--max-sequences", "8", NULL};
    struct kiln_proc *p = front_start(args);
    pthread_t th[N_CLIENTS];
    int failures = 0;

    if (!p) {
        fprintf(stderr, "soak: kiln did not start\n");
        return 1;
    }
    port = kiln_port(p);
    pid_t kiln = kiln_pid(p);
    /* warm-up: a few of everything, then the baseline */
    for (int i = 0; i < 20; i++) {
        one_stream("hello", 0, 0);
        one_whole("hello");
    }
    long rss0 = rss_kib(kiln);
    int fds0 = proc_count_fds(kiln);
    printf("soak: start: front RSS %ld KiB, %d fds, %ld s of traffic\n", rss0, fds0, seconds);
    fflush(stdout);
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_create(&th[i], NULL, client, (void *)(uintptr_t)(i + 1));
    long long t_end = now_ms() + seconds * 1000, next_kill = now_ms() + KILL_EVERY_MS;
    int kills = 0;
    while (now_ms() < t_end) {
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);
        if (now_ms() >= next_kill) {
            pid_t kids[8];
            int n = proc_children(kiln, kids, 8);
            if (n > 0 && kill(kids[rand() % (n < 8 ? n : 8)], SIGKILL) == 0)
                kills++;
            next_kill += KILL_EVERY_MS;
        }
    }
    atomic_store(&stop_now, true);
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_join(th[i], NULL);
    /* idle again: both workers ready, nothing running */
    if (!wait_until(front_ready_cond, &port, 20000)) {
        fprintf(stderr, "soak: workers not ready at the end\n");
        failures++;
    }
    for (int i = 0; i < 100 && front_running(port) != 0; i++) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    long rss1 = rss_kib(kiln);
    int fds1 = proc_count_fds(kiln);
    int kids = proc_children(kiln, NULL, 0);
    printf("soak: end: front RSS %ld KiB, %d fds, %d worker processes\n", rss1, fds1, kids);
    printf("soak: requests answered %ld, failed cleanly %ld, bad bodies refused %ld, "
           "disconnects %ld, lost %ld; workers killed %d\n",
           atomic_load(&n_ok), atomic_load(&n_failed_clean), atomic_load(&n_bad_bodies),
           atomic_load(&n_disconnects), atomic_load(&n_lost), kills);
    if (atomic_load(&n_lost) != 0)
        failures++;
    if (rss1 > rss0 + rss0 / 10 || fds1 > fds0 + fds0 / 10 + 1) {
        fprintf(stderr, "soak: RSS or fds not back within 10%%\n");
        failures++;
    }
    if (kids != 2) {
        fprintf(stderr, "soak: %d worker processes at the end, not 2\n", kids);
        failures++;
    }
    if (front_stop(p) < 0)
        failures++;
    printf("soak: %s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
