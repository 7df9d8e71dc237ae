/* Prompt reuse end to end (the KV cache and cache-aware routing), with the cache on and with
 * every request sending "cache_prompt": false (kiln before the cache: every prompt computed
 * whole). build/kiln serves the SmolLM-135M-shaped Q8_0 model bench_e2e makes (generated
 * into $KILN_BIN_DIR/bench-models when missing). Prompts are token ids.
 *   chat: one client, 10 turns over one worker: a 300-token system prompt, each turn 100 user
 *         tokens and a 64-token answer; the next turn re-sends the history (the answers as
 *         fixed ids, so reuse reaches the end of the previous prompt). Prints TTFT per turn.
 *         With KILN_BEFORE_DIR naming another build's bin directory, its kiln runs the same
 *         chat first, for a before/after in one run.
 *   chat route: the same chat through /v1/chat/completions (ChatML template), the
 *         assistant's text re-sent and re-rendered, as a client does: TTFT, prompt and
 *         cached tokens per turn (how much of the history is reused: the front's memo gives
 *         the answer's generated ids back where the rest tokenizes apart). The answers are
 *         held to letters and spaces by a grammar, so they are valid UTF-8 as a trained
 *         model's are. KILN_BEFORE_DIR runs it first with that build's kiln too.
 *   shared: 16 clients at once over 2 workers, one 500-token system prompt and a different
 *         20-token question each, 16 tokens out. Prints prompt tokens computed (from
 *         /metrics) against the naive sum, and TTFT p50.
 *   four: four 420-token prompts at once over one worker: each one's TTFT against the time
 *         one batched pass over the 1,680 tokens takes in process (model_prefill_batch).
 *   llama.cpp: the same chat (the same ids) through tests/reference/chat_llama.mjs, one
 *         context sequence kept across turns as llama.cpp's server keeps a slot (the longest
 *         common prefix reused), its TTFT per turn beside kiln's; skipped without node or
 *         the pinned node-llama-cpp (tests/reference/node_modules or KILN_LLAMA_MODULES).
 *   memory: with one RAM budget, how many 2,048-token sequences a worker holds at once:
 *         slots of ctx reserved up front (before the paged cache) against the paged cache
 *         (sequences admitted by model_seq_begin until it says -EAGAIN).
 * KILN_BENCH_SECTIONS=chat,llama,route,shared,four,memory runs only those listed.
 * Every wait is bounded. */
#include <errno.h>
#include <stdbool.h>
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
#include "../worker/model_llama.h"
#include "gguf.h"
#include "model_info.h"

#define TIMEOUT_MS 300000
#define CLIENTS    16
#define BODY_CAP   65536

struct req {
    int port;
    char *body;
    const char *path; /* NULL: /v1/completions */
    double t0, ttft;
    int status;
    char *text;            /* when set (BODY_CAP), the chat reply's content */
    long long prompt_tokens, cached_tokens; /* from the usage chunk, -1 without */
};

/* The chat delta's content and the usage of one SSE chunk into r. */
static void chat_chunk(struct req *r, const char *data)
{
    json_error_t e;
    json_t *j = json_loads(data, 0, &e), *u;
    const char *c;

    if (!j)
        return;
    c = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta"), "content"));
    if (c && r->text && strlen(r->text) + strlen(c) < BODY_CAP)
        strcat(r->text, c);
    if ((u = json_object_get(j, "usage")) && json_is_object(u)) {
        r->prompt_tokens = json_integer_value(json_object_get(u, "prompt_tokens"));
        r->cached_tokens = json_integer_value(
            json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    }
    json_decref(j);
}

static void *req_main(void *arg)
{
    struct req *r = arg;
    struct http_stream *s = NULL;
    struct sse_event ev;

    r->ttft = -1.0;
    r->prompt_tokens = r->cached_tokens = -1;
    r->status = http_stream_open(r->port, "POST", r->path ? r->path : "/v1/completions", NULL,
                                 r->body, TIMEOUT_MS, &s);
    if (r->status == 200) {
        int rc;
        while ((rc = sse_next(s, &ev, TIMEOUT_MS)) == 1 && !ev.done) {
            if (r->path) /* a chat's first chunk says the role: the first text is the token */
                chat_chunk(r, ev.data);
            if (r->ttft < 0 && (!r->path || (r->text && r->text[0])))
                r->ttft = bench_now() - r->t0;
        }
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

/* llama.cpp over the chat: its line as printed; 0, or -1 when it cannot run (said). */
static int llama_chat(const char *model)
{
    const char *mods = getenv("KILN_LLAMA_MODULES");
    char probe[600], cmd[1200], line[512];
    struct stat st;
    int found = 0;

    if (system("command -v node >/dev/null 2>&1") != 0) {
        printf("llama.cpp chat: skipped (node is not installed)\n");
        return -1;
    }
    snprintf(probe, sizeof(probe), "%s/node-llama-cpp/package.json",
             mods ? mods : "tests/reference/node_modules");
    if (stat(probe, &st) < 0) {
        printf("llama.cpp chat: skipped, not installed (cd tests/reference && npm ci, or "
               "KILN_LLAMA_MODULES=DIR/node_modules)\n");
        return -1;
    }
    /* one thread: on this 2-core machine llama.cpp's spinning threads collapse at two */
    snprintf(cmd, sizeof(cmd), "node tests/reference/chat_llama.mjs '%s' 1 2>&1", model);
    FILE *fp = popen(cmd, "r");
    if (!fp) {
        printf("llama.cpp chat: cannot run node\n");
        return -1;
    }
    while (fgets(line, sizeof(line), fp))
        if (!strncmp(line, "llama.cpp chat:", 15)) {
            found = 1;
            printf("%s", line);
        }
    pclose(fp);
    if (!found)
        printf("llama.cpp chat: no result from node-llama-cpp\n");
    return found ? 0 : -1;
}

static int chat(const char *model, int cache, uint32_t nv, const char *label)
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
    printf("chat%s, cache %s: TTFT per turn (ms):", label, cache ? "on " : "off");
    for (int i = 0; i < 300; i++)
        ids[n++] = tok(1, (uint32_t)i, nv);
    double first = 0;
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
        if (turn == 0)
            first = r.ttft;
        else if (turn == 9)
            printf("; turn 10 / turn 1 = %.2f", r.ttft / first);
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

/* Whether section name runs: all, or those env KILN_BENCH_SECTIONS lists (e.g. "four,memory"). */
static bool want(const char *name)
{
    const char *l = getenv("KILN_BENCH_SECTIONS");
    return !l || strstr(l, name) != NULL;
}

/* JSON string of words w<seed>_<i>, about n tokens. */
static void words(char *out, size_t cap, uint32_t seed, int n)
{
    size_t k = 0;
    for (int i = 0; i < n / 5 && k + 24 < cap; i++) /* a word is about 5 gpt-2 tokens */
        k += (size_t)snprintf(out + k, cap - k, " w%u_%d", seed, i);
}

static int chat_route(const char *model, const char *label)
{
    /* ChatML, as a chat model's own template would: a previous answer is rendered right
     * after its generation prompt (the fallback's "assistant: " adds a space the model
     * never saw, so no answer could be reused through it) */
    const char *args[] = {"--model", model, "--workers", "1", "--ctx", "2048",
                          "--chat-template", "chatml", "--keepalive-timeout-ms", "600000",
                          "--log-level", "warn", NULL};
    json_t *msgs = json_array(), *req;
    char *text = malloc(BODY_CAP), *w = malloc(8192);
    struct kiln_proc *k = kiln_start(args);
    double first = 0;
    int rc = 0;

    if (!k || !text || !w) {
        fprintf(stderr, "kiln did not start\n");
        free(text);
        free(w);
        kiln_destroy(k);
        return -1;
    }
    words(w, 8192, 1, 300);
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", w));
    printf("chat route%s (text re-sent), cache on: turn: TTFT ms, prompt tokens, cached tokens "
           "(the previous prompt and answer: what could be cached)\n", label);
    long long prev = 0;
    for (int turn = 0; turn < 10 && rc == 0; turn++) {
        struct req r = {.port = kiln_port(k), .path = "/v1/chat/completions", .text = text};
        words(w, 8192, 100 + (uint32_t)turn, 100);
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", w));
        /* the grammar keeps the random model's answer to letters and spaces, valid UTF-8 as
         * a trained model's answer is: a token that splits a character would reach the
         * client as U+FFFD, which the model's ids do not spell, so the next turn could not
         * reuse the answer past it */
        req = json_pack("{s:O, s:i, s:f, s:b, s:b, s:{s:b}, s:s}", "messages", msgs,
                        "max_tokens", 64, "temperature", 0.0, "ignore_eos", 1, "stream", 1,
                        "stream_options", "include_usage", 1, "grammar", "root ::= [a-z ]+");
        r.body = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        text[0] = '\0';
        r.t0 = bench_now();
        req_main(&r);
        free(r.body);
        if (r.status != 200) {
            fprintf(stderr, "turn %d: status %d\n%s", turn + 1, r.status, kiln_output(k));
            rc = -1;
            break;
        }
        if (turn == 0)
            first = r.ttft;
        printf("  turn %d: %.0f ms, %lld prompt, %lld cached (of %lld)%s", turn + 1, r.ttft * 1e3,
               r.prompt_tokens, r.cached_tokens, prev, turn == 9 ? "" : "\n");
        if (turn == 9)
            printf("; turn 10 / turn 1 = %.2f\n", r.ttft / first);
        prev = r.prompt_tokens + 63; /* the answer's last token never went through the model */
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", text));
    }
    json_decref(msgs);
    free(text);
    free(w);
    kiln_destroy(k);
    return rc;
}

static int four(const char *model, uint32_t nv, const char *budget)
{
    const char *args[] = {"--model", model, "--workers", "1", "--max-sequences", "4",
                          "--ctx", "1024", "--keepalive-timeout-ms", "600000",
                          "--max-prefill-tokens", budget, "--log-level", "warn", NULL};
    static uint32_t ids[4][420];
    struct req r[4];
    pthread_t th[4];
    double worst = 0, pass;
    char err[256];
    int rc = 0;

    for (int c = 0; c < 4; c++)
        for (int i = 0; i < 420; i++)
            ids[c][i] = tok(3000 + (uint32_t)c, (uint32_t)i, nv);
    /* one batched pass over the 1,680 tokens, in process, 2 threads as the worker here */
    {
        struct model_llama_opts mo = {.max_sequences = 4, .ctx = 1024, .threads = 2, .quiet = 1};
        struct model *m = model_llama_create(model, &mo, err, sizeof(err));
        const uint32_t *p[4] = {ids[0], ids[1], ids[2], ids[3]};
        uint32_t ns[4] = {420, 420, 420, 420};
        int slots[4] = {0, 1, 2, 3};
        struct model_result res[4];
        float *lg = m ? malloc(4 * (size_t)m->n_vocab * sizeof(float)) : NULL;
        if (!m || !lg) {
            fprintf(stderr, "%s: %s\n", model, m ? "out of memory" : err);
            free(lg);
            model_destroy(m);
            return -1;
        }
        for (int s = 0; s < 4; s++)
            model_seq_begin(m, s, p[s], 420, 421, 0);
        pass = bench_now();
        model_prefill_batch(m, slots, p, ns, 4, lg, res);
        pass = bench_now() - pass;
        free(lg);
        model_destroy(m);
    }
    struct kiln_proc *k = kiln_start(args);
    if (!k) {
        fprintf(stderr, "kiln did not start\n");
        return -1;
    }
    double t0 = bench_now();
    for (int c = 0; c < 4; c++) {
        r[c] = (struct req){.port = kiln_port(k), .body = malloc(BODY_CAP), .t0 = t0};
        make_body(r[c].body, ids[c], 420, 8, 0);
        pthread_create(&th[c], NULL, req_main, &r[c]);
    }
    printf("four 420-token prompts at once, 1 worker, --max-prefill-tokens %s: TTFT ms", budget);
    for (int c = 0; c < 4; c++) {
        pthread_join(th[c], NULL);
        free(r[c].body);
        if (r[c].status != 200)
            rc = -1;
        printf(" %.0f", r[c].ttft * 1e3);
        if (r[c].ttft > worst)
            worst = r[c].ttft;
    }
    printf("; one batched pass over 1,680 tokens in process %.0f ms; last TTFT / pass = %.2f\n",
           pass * 1e3, worst / pass);
    kiln_destroy(k);
    return rc;
}

/* Sequences of 2,048 positions a worker holds at once in budget_mib of KV cache, a model of
 * context ctx: slots of ctx reserved each (before), and the paged cache (admitted now). */
static int memory(const char *model, uint32_t budget_mib)
{
    static uint32_t p[2048];
    char err[256];
    struct model_llama_opts mo = {.max_sequences = 256, .ctx = 8192, .threads = 1, .quiet = 1};
    struct model *m;
    uint64_t per = 0, tokens;
    int held = 0;

    /* bytes per position: the file's, as the front computes --kv-cache-mib */
    {
        struct gguf *g = gguf_open(model, err, sizeof(err));
        struct model_info mi;
        if (!g || model_info_read(g, &mi, err, sizeof(err)) < 0) {
            fprintf(stderr, "%s: %s\n", model, err);
            gguf_close(g);
            return -1;
        }
        per = mi.kv_bytes_per_token;
        gguf_close(g);
    }
    tokens = ((uint64_t)budget_mib << 20) / per;
    mo.kv_tokens = (uint32_t)tokens;
    if (!(m = model_llama_create(model, &mo, err, sizeof(err)))) {
        fprintf(stderr, "%s: %s\n", model, err);
        return -1;
    }
    for (int i = 0; i < 2048; i++)
        p[i] = 300 + (uint32_t)i;
    for (int s = 0; s < 256; s++, held++) {
        p[0] = 300 + (uint32_t)s; /* no two share a block */
        if (model_seq_begin(m, s, p, 1024, 2048, 1) < 0)
            break;
    }
    printf("memory: %u MiB of KV cache (%llu positions of %llu bytes), context %u: 2,048-token "
           "sequences held at once: %llu with slots of ctx reserved up front (before), %d paged "
           "(after)\n",
           budget_mib, (unsigned long long)tokens, (unsigned long long)per, m->max_context,
           (unsigned long long)(tokens / m->max_context), held);
    model_destroy(m);
    return 0;
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
    const char *before = getenv("KILN_BEFORE_DIR");
    printf("%s\n", path);
    if (before && want("chat")) { /* another build's kiln first: before and after in one run */
        char *after = strdup(bin ? bin : "build");
        setenv("KILN_BIN_DIR", before, 1);
        rc = chat(path, 1, nv, " (before: KILN_BEFORE_DIR)") < 0;
        setenv("KILN_BIN_DIR", after, 1);
        free(after);
    }
    rc = rc || (want("chat") && chat(path, 1, nv, "") < 0);
    if (want("llama"))
        (void)llama_chat(path); /* beside kiln's chat; a skip is not a failure */
    if (before && want("route")) { /* the same before and after in one run */
        char *after = strdup(bin ? bin : "build");
        setenv("KILN_BIN_DIR", before, 1);
        rc = rc || chat_route(path, " (before: KILN_BEFORE_DIR)") < 0;
        setenv("KILN_BIN_DIR", after, 1);
        free(after);
    }
    rc = rc || (want("route") && chat_route(path, "") < 0) || (want("shared") && shared(path, 1, nv) < 0);
    rc = rc || (want("four") && (four(path, nv, "512") < 0 || four(path, nv, "1680") < 0));
    if (rc == 0 && want("memory")) { /* a SmolLM-135M-shaped file with an 8,192-token context */
        snprintf(path, sizeof(path), "%s/smollm-ctx8k-q8_0.gguf", dir);
        if (stat(path, &sb) < 0) {
            struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 1};
            char err[256];
            snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-gpt-2.gguf", sh ? sh : "../shared");
            o.vocab_path = vocab;
            (void)model_gen_preset(&o, "smollm");
            o.ctx = 8192;
            if (model_gen_write(&o, path, err, sizeof(err)) < 0) {
                fprintf(stderr, "%s: %s\n", path, err);
                return 1;
            }
        }
        rc = memory(path, 1024) < 0;
    }
    snprintf(path, sizeof(path), "%s/smollm-q8_0.gguf", dir);
    /* every prompt computed whole (kiln before the cache) */
    rc = rc || (want("chat") && chat(path, 0, nv, "") < 0) ||
         (want("shared") && shared(path, 0, nv) < 0);
    return rc;
}
