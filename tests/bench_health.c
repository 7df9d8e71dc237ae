/* Benchmark of the front's loop under streaming load (not a test: no figure is asserted).
 * kiln with the mock model at zero delay and a 4,000-character reply; 40 clients each read an
 * `n: 8` stream to its end (reading in big blocks without parsing, so the clients, on the same
 * machine, leave the CPU to kiln) while one more polls /health. Prints /health's latency (p50, p99,
 * max over every poll made while the streams ran) and kiln_event_loop_lag_max_seconds from
 * /metrics. The goal (issue 10): /health p99 under 50 ms. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "front_util.h"

#define N_CLIENTS  40
#define REPLY_LEN  4000
#define MAX_TOKENS 4000
#define MAX_POLLS  100000
#define POLL_EVERY_MS 10

struct client {
    int port;
    int failures;
    long long bytes;
};

static volatile int n_running;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Read a stream as a cheap client does: big reads, no parsing, until the server closes the
 * connection (Connection: close) after the stream's end (its last bytes: "data: [DONE]").
 * The clients share the machine with kiln, so their cost is kept low. */
static void *run(void *arg)
{
    struct client *c = arg;
    char body[256], req[512], tail[32] = "";
    static __thread char buf[65536];
    int n = snprintf(body, sizeof(body),
                     "{\"prompt\":\"hi\",\"stream\":true,\"n\":8,\"max_tokens\":%d,"
                     "\"ignore_eos\":true}",
                     MAX_TOKENS);
    int m = snprintf(req, sizeof(req),
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                     n, body);
    int fd = http_raw_connect(c->port);
    bool ok = fd >= 0 && http_raw_send(fd, req, (size_t)m) == 0;
    while (ok) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 60000) <= 0) {
            ok = false;
            break;
        }
        ssize_t got = read(fd, buf, sizeof(buf));
        if (got <= 0) {
            ok = got == 0;
            break;
        }
        c->bytes += (long long)got;
        /* the last bytes seen, for the end marker */
        size_t keep = got >= (ssize_t)sizeof(tail) - 1 ? sizeof(tail) - 1 : (size_t)got;
        size_t old = strlen(tail);
        if (old + keep > sizeof(tail) - 1) {
            size_t drop = old + keep - (sizeof(tail) - 1);
            memmove(tail, tail + drop, old - drop + 1);
            old -= drop;
        }
        memcpy(tail + old, buf + got - keep, keep);
        tail[old + keep] = '\0';
    }
    if (!ok || !strstr(tail, "[DONE]"))
        c->failures++;
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&mu);
    n_running--;
    pthread_mutex_unlock(&mu);
    return NULL;
}

static int running(void)
{
    pthread_mutex_lock(&mu);
    int n = n_running;
    pthread_mutex_unlock(&mu);
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    static char reply[REPLY_LEN + 1];
    for (int i = 0; i < REPLY_LEN; i++)
        reply[i] = (char)('a' + i % 26);
    const char *args[] = {"--model", "mock", "--workers", "2", "--max-sequences", "32",
                          "--max-waiting", "1024", "--mock-reply", reply, NULL};
    static struct client clients[N_CLIENTS];
    static double lat[MAX_POLLS];
    pthread_t th[N_CLIENTS];
    int n = 0, bad = 0;

    struct kiln_proc *p = front_start(args);
    if (!p) {
        fprintf(stderr, "bench_health: kiln did not start\n");
        return 1;
    }
    int port = kiln_port(p);
    n_running = N_CLIENTS;
    double t0 = now_ms();
    for (int i = 0; i < N_CLIENTS; i++) {
        clients[i].port = port;
        pthread_create(&th[i], NULL, run, &clients[i]);
    }
    /* poll while the streams run; the pause between polls only paces the poller */
    while (running() > 0 && n < MAX_POLLS) {
        struct http_response r;
        double a = now_ms();
        int st = http_request_ex(port, "GET", "/health", NULL, NULL, 0, 30000, &r);
        double b = now_ms();
        if (st == 200)
            lat[n++] = b - a;
        else
            bad++;
        if (st >= 0)
            http_response_free(&r);
        struct timespec pace = {0, POLL_EVERY_MS * 1000000L};
        nanosleep(&pace, NULL);
    }
    long long bytes = 0;
    int failures = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        bytes += clients[i].bytes;
        failures += clients[i].failures;
    }
    double secs = (now_ms() - t0) / 1e3;
    double lag = front_metric(port, "kiln_event_loop_lag_max_seconds");
    qsort(lat, (size_t)n, sizeof(double), cmp_double);
    printf("health under load: %d clients x n:8 streams of %d tokens, 2 workers, %lld MB read in "
           "%.2f s, %d stream failures, %d failed polls\n",
           N_CLIENTS, MAX_TOKENS, bytes / 1000000, secs, failures, bad);
    if (n > 0)
        printf("/health latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d polls)\n", lat[n / 2],
               lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], lat[n - 1], n);
    printf("kiln_event_loop_lag_max_seconds %g\n", lag);
    kiln_destroy(p);
    return failures || n == 0 ? 1 : 0;
}
