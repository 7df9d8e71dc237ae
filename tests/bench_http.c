/* End-to-end benchmark of kiln with the mock model at zero delay: 64 concurrent SSE streams
 * over 2 workers, aggregate completion tokens per second and time to first token (p50, p99).
 * Measures the front, the rings and the worker loop; the model costs nothing. The CPU time
 * the front and the workers spent over the run (per token) is printed too: on a shared
 * machine it is the steadier figure, since the wall clock also counts whoever else ran. */
#include <dirent.h>
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

/* Nanoseconds pid's threads have run (/proc/pid/task/<tid>/schedstat's first field), or 0. */
static unsigned long long cpu_ns(pid_t pid)
{
    char path[64];
    unsigned long long sum = 0;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[400];
        unsigned long long ns;
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s/schedstat", path, e->d_name);
        FILE *f = fopen(p, "r");
        if (f && fscanf(f, "%llu", &ns) == 1)
            sum += ns;
        if (f)
            fclose(f);
    }
    closedir(d);
    return sum;
}

/* The CPU time of the front (out[0]) and of its workers together (out[1]), in ns. */
static void cpu_sample(pid_t front, unsigned long long out[2])
{
    pid_t kids[16];
    int n = proc_children(front, kids, 16);
    out[0] = cpu_ns(front);
    out[1] = 0;
    for (int i = 0; i < n && i < 16; i++)
        out[1] += cpu_ns(kids[i]);
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
    unsigned long long cpu0[2], cpu1[2];
    cpu_sample(kiln_pid(p), cpu0);
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
    cpu_sample(kiln_pid(p), cpu1);
    qsort(ttft, (size_t)n, sizeof(double), cmp_double);
    printf("e2e mock: %.0f tok/s aggregate, %d streams, 2 workers (%lld tokens in %.2f s, "
           "%d failures)\n",
           tokens / secs, N_STREAMS, tokens, secs, failures);
    if (tokens > 0)
        printf("cpu: front %.1f ms (%.2f us/token), workers %.1f ms (%.2f us/token)\n",
               (cpu1[0] - cpu0[0]) / 1e6, (cpu1[0] - cpu0[0]) / 1e3 / (double)tokens,
               (cpu1[1] - cpu0[1]) / 1e6, (cpu1[1] - cpu0[1]) / 1e3 / (double)tokens);
    if (n > 0)
        printf("ttft p50: %.2f ms, p99: %.2f ms (%d requests)\n", ttft[n / 2],
               ttft[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], n);
    kiln_destroy(p);
    return failures ? 1 : 0;
}
