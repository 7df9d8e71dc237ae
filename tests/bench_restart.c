/* bench_restart: how long a worker killed with SIGKILL takes to be replaced and ready again
 * (the mock, and stories260K when $KILN_SHARED has it), and what the surviving worker serves
 * meanwhile: tokens/s of 8 streaming clients before, during and after a restart. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "front_util.h"

#define KILLS   6
#define CLIENTS 8

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Worker id's pid and whether it is ready, per /health. */
static pid_t worker_state(int port, int id, bool *ready)
{
    json_t *h = front_health(port);
    json_t *w = json_array_get(json_object_get(h, "workers"), (size_t)id);
    const char *s = json_string_value(json_object_get(w, "state"));
    pid_t pid = (pid_t)json_integer_value(json_object_get(w, "pid"));
    *ready = s && strcmp(s, "ready") == 0;
    json_decref(h);
    return pid;
}

/* Kill worker 0 and poll /health until a new process of it is ready. Returns the
 * microseconds from the kill to ready, or -1. */
static long long kill_and_time(int port)
{
    bool ready;
    pid_t old = worker_state(port, 0, &ready), pid;
    if (old <= 0 || !ready || kill(old, SIGKILL) < 0)
        return -1;
    long long t0 = now_us();
    while (now_us() - t0 < 30000000LL) {
        pid = worker_state(port, 0, &ready);
        if (pid > 0 && pid != old && ready)
            return now_us() - t0;
    }
    return -1;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static void bench_restart_latency(const char *label, const char *const *args)
{
    struct kiln_proc *p = front_start(args);
    long long us[KILLS];
    int n = 0;
    if (!p) {
        printf("%-12s could not start kiln\n", label);
        return;
    }
    for (int i = 0; i < KILLS; i++) {
        long long t = kill_and_time(kiln_port(p));
        if (t >= 0)
            us[n++] = t;
    }
    qsort(us, (size_t)n, sizeof(us[0]), cmp_ll);
    if (n)
        printf("%-12s kill -9 -> replacement ready: min %.1f ms, median %.1f ms, max %.1f ms "
               "(%d kills in a row; backoff 1, 2, 4 .. ms included)\n",
               label, us[0] / 1e3, us[n / 2] / 1e3, us[n - 1] / 1e3, n);
    (void)front_stop(p);
}

/* ---- the survivor's throughput ---- */

struct load {
    int port;
    atomic_llong tokens;
    atomic_int stop;
    atomic_llong failed;
};

static void *client(void *arg)
{
    struct load *l = arg;
    while (!atomic_load(&l->stop)) {
        struct http_stream *s = NULL;
        struct sse_event ev;
        int st = http_stream_open(l->port, "POST", "/v1/completions", NULL,
                                  "{\"prompt\":\"x\",\"stream\":true,\"max_tokens\":64}", 10000,
                                  &s);
        if (st != 200) {
            atomic_fetch_add(&l->failed, 1);
            http_stream_close(s);
            continue;
        }
        while (sse_next(s, &ev, 10000) == 1) {
            if (strstr(ev.data, "\"error\""))
                atomic_fetch_add(&l->failed, 1);
            else if (!ev.done)
                atomic_fetch_add(&l->tokens, 1);
        }
        http_stream_close(s);
    }
    return NULL;
}

/* Tokens/s over [t0, t0 + us): sample the counter at both ends. */
static double rate_over(struct load *l, long long us)
{
    long long a = atomic_load(&l->tokens), t0 = now_us();
    while (now_us() - t0 < us)
        usleep(1000);
    return (double)(atomic_load(&l->tokens) - a) * 1e6 / (double)(now_us() - t0);
}

static void bench_survivor(void)
{
    /* 1 ms per token per sequence, 64-byte replies: each worker serves at most 4 x 1000 t/s */
    static const char *args[] = {"--model", "mock", "--workers", "2", "--max-sequences", "4",
                                 "--mock-delay-ms", "1", "--mock-reply",
                                 "0123456789012345678901234567890123456789012345678901234567890123",
                                 NULL};
    struct kiln_proc *p = front_start(args);
    struct load l = {.tokens = 0, .stop = 0, .failed = 0};
    pthread_t th[CLIENTS];
    if (!p) {
        printf("survivor: could not start kiln\n");
        return;
    }
    l.port = kiln_port(p);
    for (int i = 0; i < CLIENTS; i++)
        pthread_create(&th[i], NULL, client, &l);
    (void)rate_over(&l, 300000); /* warm up */
    double before = rate_over(&l, 1000000);

    bool ready;
    pid_t old = worker_state(l.port, 0, &ready), pid;
    long long a = atomic_load(&l.tokens), t0 = now_us(), t1;
    kill(old, SIGKILL);
    do {
        pid = worker_state(l.port, 0, &ready);
        t1 = now_us();
    } while (!(pid > 0 && pid != old && ready) && t1 - t0 < 10000000LL);
    double during = (double)(atomic_load(&l.tokens) - a) * 1e6 / (double)(t1 - t0);
    double after = rate_over(&l, 1000000);
    atomic_store(&l.stop, 1);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    printf("survivor     %d streaming clients, 2 workers of 4 slots, mock at 1 ms/token:\n"
           "             before %.0f tok/s | during the %.0f ms restart (100 ms backoff) "
           "%.0f tok/s | after %.0f tok/s | %lld streams ended with an error\n",
           CLIENTS, before, (t1 - t0) / 1e3, during, after, (long long)atomic_load(&l.failed));
    (void)front_stop(p);
}

int main(void)
{
    static const char *mock[] = {"--model", "mock", "--workers", "2",
                                 "--restart-backoff-ms", "1", NULL};
    const char *shared = getenv("KILN_SHARED");
    char model[512];

    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_restart_latency("mock", mock);
    snprintf(model, sizeof(model), "%s/models/stories260K.gguf", shared ? shared : "../shared");
    if (access(model, R_OK) == 0) {
        const char *real[] = {"--model", model, "--workers", "2", "--threads", "1",
                              "--restart-backoff-ms", "1", NULL};
        bench_restart_latency("stories260K", real);
    } else {
        printf("stories260K  skipped: %s not found\n", model);
    }
    bench_survivor();
    return 0;
}
