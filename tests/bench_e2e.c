/* End to end through HTTP: build/kiln serves random-weight GGUF models of real shapes
 * (TinyLlama Q8_0 and SmolLM Q8_0, generated once into $KILN_BIN_DIR/bench-models and shared
 * with bench_model) and C concurrent clients each stream one completion: a 16-token prompt
 * (token ids), 64 tokens out, EOS ignored, temperature 0. Prints the aggregate generated tok/s
 * and the median time to first token at C = 1, 4, 8 and 16, beside the machine's memory read
 * bandwidth and the batch-1 limit it implies (bandwidth / weight bytes read per token).
 * KILN_BENCH_MODELS=smollm-q8_0,... picks a subset. Every wait is bounded; the whole run takes
 * a few minutes on two cores. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "../worker/model_llama.h"
#include "lib/harness.h"
#include "lib/http_client.h"
#include "lib/bench_util.h"
#include "lib/model_gen.h"

#define PROMPT_TOKENS 16
#define GEN_TOKENS    64
#define MAX_STREAMS   16
#define EVENT_TIMEOUT_MS 120000

struct stream {
    int port;
    char body[1024];
    double t0, ttft, end;
    int tokens; /* usage.completion_tokens of the last chunk */
    int status; /* HTTP status, or -errno */
};

/* One streamed completion: TTFT at the first event, the token count from the usage chunk. */
static void *stream_main(void *arg)
{
    struct stream *st = arg;
    struct http_stream *s = NULL;
    struct sse_event ev;
    int rc;

    st->ttft = -1.0;
    st->tokens = 0;
    st->status = http_stream_open(st->port, "POST", "/v1/completions", NULL, st->body,
                                  EVENT_TIMEOUT_MS, &s);
    if (st->status != 200)
        goto out;
    while ((rc = sse_next(s, &ev, EVENT_TIMEOUT_MS)) == 1 && !ev.done) {
        if (st->ttft < 0)
            st->ttft = bench_now() - st->t0;
        json_t *j = json_loads(ev.data, 0, NULL);
        json_t *u = j ? json_object_get(j, "usage") : NULL;
        if (u && json_is_object(u))
            st->tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
        json_decref(j);
    }
    if (rc < 0)
        st->status = rc;
out:
    st->end = bench_now();
    http_stream_close(s);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* c concurrent streams; prints one line. Returns 0 or -1 when a stream failed. */
static int run_level(int port, int c, uint32_t n_vocab, int salt, const char *label)
{
    struct stream st[MAX_STREAMS];
    pthread_t th[MAX_STREAMS];
    double ttft[MAX_STREAMS], t0 = bench_now(), last = t0;
    int total = 0, ok = 0;

    for (int i = 0; i < c; i++) {
        int n = snprintf(st[i].body, sizeof(st[i].body), "{\"prompt\":[");
        for (int t = 0; t < PROMPT_TOKENS; t++) /* distinct prompts: no two streams alike */
            n += snprintf(st[i].body + n, sizeof(st[i].body) - (size_t)n, "%s%u", t ? "," : "",
                          300u + ((uint32_t)(t * 7919 + (i + 16 * salt) * 104729)) %
                                     (n_vocab - 300u));
        snprintf(st[i].body + n, sizeof(st[i].body) - (size_t)n,
                 "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true}}",
                 GEN_TOKENS);
        st[i].port = port;
        st[i].t0 = t0;
    }
    for (int i = 0; i < c; i++)
        if (pthread_create(&th[i], NULL, stream_main, &st[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            c = i;
            break;
        }
    for (int i = 0; i < c; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < c; i++) {
        if (st[i].status != 200 || st[i].tokens != GEN_TOKENS) {
            fprintf(stderr, "  stream %d: status %d, %d tokens (want %d)\n", i, st[i].status,
                    st[i].tokens, GEN_TOKENS);
            continue;
        }
        ttft[ok++] = st[i].ttft;
        total += st[i].tokens;
        if (st[i].end > last)
            last = st[i].end;
    }
    if (ok == 0)
        return -1;
    qsort(ttft, (size_t)ok, sizeof(double), cmp_double);
    printf("  %2d streams%s: %8.1f tok/s generated, TTFT p50 %7.1f ms (%d x %d tokens in "
           "%.2f s)\n",
           c, label, total / (last - t0), ttft[ok / 2] * 1e3, ok, GEN_TOKENS, last - t0);
    fflush(stdout);
    return ok == c ? 0 : -1;
}

/* Weight bytes per token and the vocabulary, from the engine itself (quiet, small context). */
static int model_facts(const char *path, uint64_t *wb, uint32_t *n_vocab)
{
    struct model_llama_opts o = {.max_sequences = 1, .ctx = 256, .threads = 1, .quiet = 1};
    char err[256];
    struct model *m = model_llama_create(path, &o, err, sizeof(err));

    if (!m) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    *wb = model_llama_weight_bytes(m);
    *n_vocab = m->n_vocab;
    model_destroy(m);
    return 0;
}

static int bench_one(const char *path, double bw)
{
    static const int levels[] = {1, 4, 8, 16};
    const char *args[] = {"--model", path, "--workers", "1", "--max-sequences", "16",
                          "--ctx", "256", "--log-level", "warn", NULL};
    uint64_t wb;
    uint32_t nv;
    int rc = 0;

    if (model_facts(path, &wb, &nv) < 0)
        return -1;
    struct kiln_proc *k = kiln_start(args);
    if (!k) {
        fprintf(stderr, "%s: kiln did not start\n", path);
        return -1;
    }
    printf("%s: %.0f MiB of weights per token; batch-1 limit %.1f tok/s (%.1f GB/s / %.0f "
           "MiB)\n",
           path, (double)wb / (1 << 20), bw * 1e9 / (double)wb, bw, (double)wb / (1 << 20));
    if (run_level(kiln_port(k), 1, nv, 99, " (warm-up)") < 0) /* weights paged in */
        rc = -1;
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]) && rc == 0; i++)
        rc = run_level(kiln_port(k), levels[i], nv, (int)i, "");
    if (rc < 0)
        fprintf(stderr, "%s", kiln_output(k));
    kiln_destroy(k);
    return rc;
}

int main(void)
{
    const char *bin = getenv("KILN_BIN_DIR"), *shared = getenv("KILN_SHARED");
    const char *pick = getenv("KILN_BENCH_MODELS");
    char dir[512], path[600], vocab[512];
    int rc = 0;
    static const struct {
        const char *name, *preset, *vocab;
    } models[] = {
        {"smollm-q8_0", "smollm", "ggml-vocab-gpt-2.gguf"},
        {"tinyllama-q8_0", "tinyllama", "ggml-vocab-llama-spm.gguf"},
    };

    snprintf(dir, sizeof(dir), "%s/bench-models", bin ? bin : "build");
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    double bw = bench_read_bandwidth(NULL);
    printf("memory read bandwidth: %.1f GB/s (one thread, plain loop); %d-token prompts, %d "
           "tokens out, EOS ignored, temperature 0\n",
           bw, PROMPT_TOKENS, GEN_TOKENS);
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        struct stat sb;
        if (pick && !strstr(pick, models[i].name))
            continue;
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, models[i].name);
        if (stat(path, &sb) < 0) { /* the same file bench_model makes */
            struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 1, .verbose = 1};
            char err[256];
            snprintf(vocab, sizeof(vocab), "%s/vocab/%s", shared ? shared : "../shared",
                     models[i].vocab);
            o.vocab_path = vocab;
            (void)model_gen_preset(&o, models[i].preset);
            fprintf(stderr, "generating %s\n", path);
            if (model_gen_write(&o, path, err, sizeof(err)) < 0) {
                fprintf(stderr, "%s: %s\n", path, err);
                return 1;
            }
        }
        if (bench_one(path, bw) < 0)
            rc = 1;
    }
    return rc;
}
