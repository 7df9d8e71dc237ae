/* Prompt reuse end to end (the KV cache and cache-aware routing), with the cache on and with
 * every request sending "cache_prompt": false (kiln before the cache: every prompt computed
 * whole). build/kiln serves the SmolLM-135M-shaped Q8_0 model bench_e2e makes (generated
 * into $KILN_BIN_DIR/bench-models when missing). Prompts are token ids.
 *   chat: one client, 10 turns over one worker: a 300-token system prompt, each turn 100 user
 *         tokens and a 64-token answer; the next turn re-sends the history (the answers as
 *         fixed ids, so reuse reaches the end of the previous prompt). Prints TTFT per turn.
 *   shared: 16 clients at once over 2 workers, one 500-token system prompt and a different
 *         20-token question each, 16 tokens out. Prints prompt tokens computed (from
 *         /metrics) against the naive sum, and TTFT p50.
 * Every wait is bounded. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "lib/bench_util.h"
#include "lib/harness.h"
#include "lib/http_client.h"
#include "lib/model_gen.h"

#define TIMEOUT_MS 300000
#define CLIENTS    16
#define BODY_CAP   65536

struct req {
    int port;
    char *body;
    double t0, ttft;
    int status;
};

static void *req_main(void *arg)
{
    struct req *r = arg;
    struct http_stream *s = NULL;
    struct sse_event ev;

    r->ttft = -1.0;
    r->status = http_stream_open(r->port, "POST", "/v1/completions", NULL, r->body, TIMEOUT_MS,
                                 &s);
    if (r->status == 200) {
        int rc;
        while ((rc = sse_next(s, &ev, TIMEOUT_MS)) == 1 && !ev.done)
            if (r->ttft < 0)
                r->ttft = bench_now() - r->t0;
        if (rc < 0)
            r->status = rc;
    }
    http_stream_close(s);
    return NULL;
}

/* {"prompt":[ids],"max_tokens":out,...} into body. */
static void make_body(char *body, const uint32_t *ids, int n, int out, int cache)
{
    int k = snprintf(body, BODY_CAP, "{\"prompt\":[");
    for (int i = 0; i < n; i++)
        k += snprintf(body + k, BODY_CAP - (size_t)k, "%s%u", i ? "," : "", ids[i]);
    snprintf(body + k, BODY_CAP - (size_t)k,
             "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
             "\"cache_prompt\":%s}",
             out, cache ? "true" : "false");
}

static uint32_t tok(uint32_t seed, uint32_t i, uint32_t n_vocab)
{
    return 300u + (seed * 104729u + i * 7919u) % (n_vocab - 300u);
}

/* Sum of kiln_worker_prompt_tokens_total{...,kind="computed"} over the workers. */
static long long computed_tokens(int port)
{
    struct http_response resp;
    long long sum = 0;
    if (http_request(port, "GET", "/metrics", NULL, NULL, &resp) != 200)
        return -1;
    for (const char *p = resp.body; (p = strstr(p, "kind=\"computed\"} ")); p++)
        sum += atoll(p + strlen("kind=\"computed\"} "));
    http_response_free(&resp);
    return sum;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int chat(const char *model, int cache, uint32_t nv)
{
    /* a long keep-alive: the front closes a stream idle for keepalive-timeout-ms (5 s by
     * default) even while its first token is being computed */
    const char *args[] = {"--model", model, "--workers", "1", "--ctx", "2048",
                          "--keepalive-timeout-ms", "600000", "--log-level", "warn", NULL};
    static uint32_t ids[2048];
    char *body = malloc(BODY_CAP);
    int n = 0, rc = 0;
    struct kiln_proc *k = kiln_start(args);

    if (!k || !body) {
        fprintf(stderr, "kiln did not start\n");
        free(body);
        kiln_destroy(k);
        return -1;
    }
    printf("chat, cache %s: TTFT per turn (ms):", cache ? "on " : "off");
    for (int i = 0; i < 300; i++)
        ids[n++] = tok(1, (uint32_t)i, nv);
    for (int turn = 0; turn < 10; turn++) {
        struct req r = {.port = kiln_port(k), .body = body};
        for (int i = 0; i < 100; i++)
            ids[n++] = tok(100 + (uint32_t)turn, (uint32_t)i, nv);
        make_body(body, ids, n, 64, cache);
        r.t0 = bench_now();
        req_main(&r);
        if (r.status != 200) {
            fprintf(stderr, "\nturn %d: status %d\n%s", turn + 1, r.status, kiln_output(k));
            rc = -1;
            break;
        }
        printf(" %.0f", r.ttft * 1e3);
        fflush(stdout);
        for (int i = 0; i < 64; i++) /* the answer, as the next turn re-sends it */
            ids[n++] = tok(200 + (uint32_t)turn, (uint32_t)i, nv);
    }
    printf("\n");
    free(body);
    kiln_destroy(k);
    return rc;
}

static int shared(const char *model, int cache, uint32_t nv)
{
    const char *args[] = {"--model", model, "--workers", "2", "--max-sequences", "8",
                          "--ctx", "1024", "--keepalive-timeout-ms", "600000",
                          "--log-level", "warn", NULL};
    struct req r[CLIENTS];
    pthread_t th[CLIENTS];
    double ttft[CLIENTS];
    uint32_t ids[520];
    int ok = 0, rc = 0;
    struct kiln_proc *k = kiln_start(args);

    if (!k) {
        fprintf(stderr, "kiln did not start\n");
        return -1;
    }
    long long before = computed_tokens(kiln_port(k));
    double t0 = bench_now();
    for (int c = 0; c < CLIENTS; c++) {
        for (int i = 0; i < 500; i++)
            ids[i] = tok(7, (uint32_t)i, nv);
        for (int i = 0; i < 20; i++)
            ids[500 + i] = tok(1000 + (uint32_t)c, (uint32_t)i, nv);
        r[c] = (struct req){.port = kiln_port(k), .body = malloc(BODY_CAP), .t0 = t0};
        make_body(r[c].body, ids, 520, 16, cache);
    }
    for (int c = 0; c < CLIENTS; c++)
        pthread_create(&th[c], NULL, req_main, &r[c]);
    for (int c = 0; c < CLIENTS; c++) {
        pthread_join(th[c], NULL);
        if (r[c].status == 200)
            ttft[ok++] = r[c].ttft;
        free(r[c].body);
    }
    long long after = computed_tokens(kiln_port(k));
    if (ok != CLIENTS) {
        fprintf(stderr, "%d of %d requests failed\n%s", CLIENTS - ok, CLIENTS, kiln_output(k));
        rc = -1;
    } else {
        qsort(ttft, (size_t)ok, sizeof(double), cmp_double);
        printf("shared 500-token system prompt, 16 clients, 2 workers, cache %s: prompt tokens "
               "computed %lld of %d (%.1f%%), TTFT p50 %.0f ms, max %.0f ms\n",
               cache ? "on " : "off", after - before, CLIENTS * 520,
               100.0 * (double)(after - before) / (CLIENTS * 520), ttft[ok / 2] * 1e3,
               ttft[ok - 1] * 1e3);
    }
    kiln_destroy(k);
    return rc;
}

int main(void)
{
    const char *bin = getenv("KILN_BIN_DIR"), *sh = getenv("KILN_SHARED");
    char dir[512], path[600], vocab[600];
    struct stat sb;
    int rc = 0;

    snprintf(dir, sizeof(dir), "%s/bench-models", bin ? bin : "build");
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/smollm-q8_0.gguf", dir);
    if (stat(path, &sb) < 0) { /* the file bench_e2e and bench_model make */
        struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 1, .verbose = 1};
        char err[256];
        snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-gpt-2.gguf", sh ? sh : "../shared");
        o.vocab_path = vocab;
        (void)model_gen_preset(&o, "smollm");
        if (model_gen_write(&o, path, err, sizeof(err)) < 0) {
            fprintf(stderr, "%s: %s\n", path, err);
            return 1;
        }
    }
    uint32_t nv = 50257; /* gpt-2's vocabulary */
    printf("%s\n", path);
    for (int cache = 1; cache >= 0 && rc == 0; cache--)
        rc = chat(path, cache, nv) < 0 || shared(path, cache, nv) < 0;
    return rc;
}
