/* End-to-end benchmark of kiln with the mock model at zero delay: 64 concurrent SSE streams
 * over 2 workers, aggregate completion tokens per second and time to first token (p50, p99).
 * Measures the front, the rings and the worker loop; the model costs nothing. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "front_util.h"

#define N_STREAMS 64
#define ROUNDS    4

/* 160 bytes: 160 tokens per reply */
#define BENCH_REPLY                                                                            \
    "The quick brown fox jumps over the lazy dog while the kiln hums along, one token at a " \
    "time, streaming each byte to every client without a pause. Done!"

struct job {
    int port;
    int failures;
    long long tokens;
    double ttft_ms[ROUNDS];
    int n_ttft;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *run(void *arg)
{
    struct job *j = arg;
    for (int r = 0; r < ROUNDS; r++) {
        struct http_stream *s = NULL;
        struct sse_event ev;
        double t0 = now_ms();
        bool first = true;
        int st = http_stream_open(j->port, "POST", "/v1/completions", NULL,
                                  "{\"prompt\":\"bench\",\"stream\":true,"
                                  "\"stream_options\":{\"include_usage\":true}}",
                                  30000, &s);
        if (st != 200) {
            j->failures++;
            http_stream_close(s);
            continue;
        }
        int rc;
        while ((rc = sse_next(s, &ev, 30000)) == 1 && !ev.done) {
            if (first && strstr(ev.data, "\"text\":\"") && !strstr(ev.data, "\"text\":\"\"")) {
                j->ttft_ms[j->n_ttft++] = now_ms() - t0;
                first = false;
            }
            const char *u = strstr(ev.data, "\"completion_tokens\":");
            if (u)
                j->tokens += atoll(u + strlen("\"completion_tokens\":"));
        }
        if (rc < 0)
            j->failures++;
        http_stream_close(s);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    static const char *args[] = {"--model", "mock", "--workers", "2", "--max-sequences", "32",
                                 "--mock-reply", BENCH_REPLY, NULL};
    static struct job jobs[N_STREAMS];
    static double ttft[N_STREAMS * ROUNDS];
    pthread_t th[N_STREAMS];
    struct kiln_proc *p = front_start(args);
    if (!p) {
        fprintf(stderr, "bench_http: kiln did not start\n");
        return 1;
    }
    int port = kiln_port(p);
    double t0 = now_ms();
    for (int i = 0; i < N_STREAMS; i++) {
        jobs[i].port = port;
        pthread_create(&th[i], NULL, run, &jobs[i]);
    }
    long long tokens = 0;
    int failures = 0, n = 0;
    for (int i = 0; i < N_STREAMS; i++) {
        pthread_join(th[i], NULL);
        tokens += jobs[i].tokens;
        failures += jobs[i].failures;
        for (int k = 0; k < jobs[i].n_ttft; k++)
            ttft[n++] = jobs[i].ttft_ms[k];
    }
    double secs = (now_ms() - t0) / 1e3;
    qsort(ttft, (size_t)n, sizeof(double), cmp_double);
    printf("e2e mock: %.0f tok/s aggregate, %d streams, 2 workers (%lld tokens in %.2f s, "
           "%d failures)\n",
           tokens / secs, N_STREAMS, tokens, secs, failures);
    if (n > 0)
        printf("ttft p50: %.2f ms, p99: %.2f ms (%d requests)\n", ttft[n / 2],
               ttft[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], n);
    kiln_destroy(p);
    return failures ? 1 : 0;
}
