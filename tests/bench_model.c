/* The engine's speed on real model shapes with random weights: prompt processing (tok/s for
 * 128- and 512-token prompts), decode tok/s at batch 1, 4, 8 and 16, and the machine's
 * memory read bandwidth with the batch-1 limit it implies (bandwidth / weight bytes per
 * token) and the fraction of it batch 1 achieves, with the GB/s of weights batch 1 reads, by
 * wall clock and per CPU second against the read loop's own per-CPU-second figure (steadier
 * on a shared machine). One model per tensor type (the types
 * beyond Q8_0/Q4_K on TinyLlama's shape cut to 8 layers, 2048 wide: still far more weights
 * than cache), SmolLM- and TinyLlama-shaped Q4_K_M files, an 8-layer TinyLlama-shaped
 * Q3_K_M one (Q3_K with Q4_K/Q5_K/Q6_K matrices) and a Qwen2.5-0.5B-shaped one
 * (llama.cpp's preset: Q4_K with Q6_K for some matrices, and Qwen's Q5_0/Q8_0 fallbacks).
 * Models are generated once into $KILN_BIN_DIR/bench-models and reused.
 * KILN_BENCH_MODELS=smollm-q8_0,... picks a subset; KILN_THREADS sets the threads;
 * KILN_BENCH_PROMPTS=128,512 and KILN_BENCH_BATCHES=1,4,8,16 pick the runs (empty: none),
 * KILN_BENCH_STEPS the decode steps timed per batch size (default 8 at batch 1, else 4), best
 * of three passes; KILN_BENCH_CTX the tokens each decoding sequence holds before its timed
 * steps (default 16, at most 4096; llama.cpp's decode then starts from the same context), to
 * time decode at long contexts, where attention over the cache costs more.
 * Beside wall-clock tok/s each line shows the process CPU ms per step: on a machine shared
 * with other work, CPU time (with KILN_THREADS=1) measures the kernels' cost more steadily.
 * Where the pinned node-llama-cpp is installed (tests/reference/node_modules, or the
 * node_modules directory env KILN_LLAMA_MODULES names), each model also runs through
 * llama.cpp (tests/reference/bench_llama.mjs, found from this binary's own path, two levels
 * below the source tree as build/tests/bench_model, whatever the current directory; the
 * same decode steps as kiln's at each batch size; the last prompt length, decode at batch 1 and
 * aggregate decode at the batch sizes above 1 among 8 and 16, as B sequences of one context
 * that node-llama-cpp gathers into one llama_decode per step; same threads) and the
 * kiln/llama.cpp ratios are printed in the same run, by wall clock and by process CPU time
 * (llama.cpp's CPU / kiln's, for the prompt and for decode at batch 1, 8 and 16: above 1 is
 * kiln cheaper; with KILN_THREADS=1 the steadier measure on a shared machine). kiln and llama.cpp alternate, KILN_BENCH_ROUNDS times (default
 * 2) per model, and the ratios take each side's best. Without node (or the package) the
 * llama.cpp part is skipped with a message; where the package is there but llama.cpp's run
 * gives no figures, the bench says so and exits 1 after the other models. With KILN_KERNELS=avx2 (avxvnni) llama.cpp runs
 * the package's haswell (alderlake) ggml CPU backend, the same instruction sets, otherwise
 * the one ggml picks for the CPU (env KILN_LLAMA_CPU=VARIANT forces one); the ratio line
 * names both sides' code paths.
 * The prefill line also states the fraction of the machine's peak int8 multiply-add rate it
 * reaches, both by CPU time so that other work on the machine does not move it: matrix
 * multiply-adds per token (the layers' weights; attention and the output matrix left out)
 * times the tokens over the prefill's process CPU seconds, against the rate independent
 * chains of the kernel path's dot instruction reach per CPU second (bench_peak_int8); for
 * the amx set, which runs the types it has no tiles for on the avx512 set's instructions,
 * against that peak too. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../worker/kernels.h"
#include "../worker/model_llama.h"
#include "lib/bench_util.h"
#include "lib/model_gen.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Numbers of a comma-separated env list into v (at most cap), or def when unset. */
static int env_list(const char *name, const int *def, int n_def, int *v, int cap)
{
    const char *s = getenv(name);
    int n = 0;

    if (!s) {
        memcpy(v, def, (size_t)n_def * sizeof(int));
        return n_def;
    }
    while (*s && n < cap) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s)
            break;
        if (x > 0)
            v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static void fill_prompt(uint32_t *p, uint32_t n, uint32_t n_vocab, uint32_t salt)
{
    for (uint32_t i = 0; i < n; i++)
        p[i] = 300u + (i * 7919u + salt * 104729u) % (n_vocab - 300u);
}

/* One side's figures for one model: prompt tok/s and CPU ms, decode tok/s (batch 1, 8, 16)
 * and CPU ms per step of each; 0 where not measured. */
struct figs {
    double prompt, pcpu, d1, dcpu, d8, c8, d16, c16;
};

static void figs_best(struct figs *best, const struct figs *f)
{
    if (f->prompt > best->prompt) {
        best->prompt = f->prompt;
        best->pcpu = f->pcpu;
    }
    if (f->d1 > best->d1) {
        best->d1 = f->d1;
        best->dcpu = f->dcpu;
    }
    if (f->d8 > best->d8) {
        best->d8 = f->d8;
        best->c8 = f->c8;
    }
    if (f->d16 > best->d16) {
        best->d16 = f->d16;
        best->c16 = f->c16;
    }
}

/* The source tree this binary was built in (cap bytes): two directories above its own
 * (build/tests/bench_model), or "." when /proc does not say. */
static void source_root(char *root, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", root, cap - 1);
    root[n > 0 ? n : 0] = '\0';
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(root, '/');
        if (!slash || slash == root) {
            snprintf(root, cap, ".");
            return;
        }
        *slash = '\0';
    }
}

/* llama.cpp on the same file through tests/reference/bench_llama.mjs; prints its line and
 * fills *f and cpu (cap bytes: the ggml CPU backend it ran, e.g. libggml-cpu-haswell.so when
 * KILN_KERNELS=avx2). steps: batch 1's decode steps, steps_b the batched ones'. 0; -1 when
 * the reference is not installed (said), -2 when it is but its run gave no figures (said). */
static int bench_llama(const char *path, int plen, int steps, int steps_b, int threads,
                       const char *bl, int dctx, struct figs *f, char *cpu, size_t cap)
{
    const char *mods = getenv("KILN_LLAMA_MODULES");
    char root[512], probe[1100], script[1100], cmd[2600], line[256];
    struct stat st;
    double p = 0.0, d = 0.0, pc = 0.0, dc = 0.0, bd, bc;
    int b;

    memset(f, 0, sizeof(*f));
    if (system("command -v node >/dev/null 2>&1") != 0) {
        printf("  llama.cpp: skipped (node is not installed)\n");
        return -1;
    }
    source_root(root, sizeof(root));
    snprintf(script, sizeof(script), "%s/tests/reference/bench_llama.mjs", root);
    if (mods)
        snprintf(probe, sizeof(probe), "%s/node-llama-cpp/package.json", mods);
    else
        snprintf(probe, sizeof(probe), "%s/tests/reference/node_modules/node-llama-cpp/"
                 "package.json", root);
    if (stat(probe, &st) < 0) {
        printf("  llama.cpp: skipped, not installed (cd tests/reference && npm ci, "
               "or KILN_LLAMA_MODULES=DIR/node_modules)\n");
        return -1;
    }
    if (stat(script, &st) < 0) {
        printf("  llama.cpp: %s not found\n", script);
        return -2;
    }
    snprintf(cmd, sizeof(cmd), "node '%s' '%s' %d %d %d '%s' %d %d 2>&1", script, path, plen,
             steps, threads, bl, steps_b, dctx);
    FILE *fp = popen(cmd, "r");
    if (!fp) {
        printf("  llama.cpp: cannot run node\n");
        return -2;
    }
    int found = 0;
    char name[64];
    while (fgets(line, sizeof(line), fp)) {
        if (sscanf(line, "llama.cpp cpu backend %63s", name) == 1) {
            snprintf(cpu, cap, "%s", name);
            printf("  llama.cpp runs ggml's CPU backend %s\n", name);
        } else if (sscanf(line, "llama.cpp prompt %lf tok/s decode %lf tok/s cpu %lf ms %lf", &p, &d,
                   &pc, &dc) == 4) {
            found = 1;
            printf("  llama.cpp (node-llama-cpp 3.21.1): prompt %d tokens %.1f tok/s (%.0f CPU "
                   "ms), decode batch 1 %.1f tok/s (%.1f CPU ms/step)\n", plen, p, pc, d, dc);
        } else if (sscanf(line, "llama.cpp batch %d decode %lf tok/s cpu %lf", &b, &bd,
                          &bc) == 3) {
            printf("  llama.cpp decode batch %2d: %8.1f tok/s (%d sequences of one context, "
                   "%.1f CPU ms/step)\n", b, bd, b, bc);
            if (b == 8) {
                f->d8 = bd;
                f->c8 = bc;
            } else if (b == 16) {
                f->d16 = bd;
                f->c16 = bc;
            }
        } else {
            printf("  llama.cpp: %s", line);
        }
    }
    int rc = pclose(fp);
    if (!found || p <= 0.0 || d <= 0.0) {
        printf("  llama.cpp: its run gave no figures (exit status %d)\n",
               rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
        return -2;
    }
    f->prompt = p;
    f->pcpu = pc;
    f->d1 = d;
    f->dcpu = dc;
    return 0;
}

/* KILN_BENCH_STEPS, or def when unset. */
static int bench_steps(int def)
{
    const char *s = getenv("KILN_BENCH_STEPS");
    return !s ? def : atoi(s) > 0 ? atoi(s) : 1;
}

/* KILN_BENCH_CTX: the tokens a decoding sequence holds before its timed steps, 16 to 4096. */
static int bench_ctx(void)
{
    const char *s = getenv("KILN_BENCH_CTX");
    int n = s ? atoi(s) : 16;
    return n < 16 ? 16 : n > 4096 ? 4096 : n;
}

/* kiln on the model; prints its lines and fills *f (and *plen_out, *steps_out: the last
 * prompt length and the batch-1 steps, for llama.cpp to run the same). */
static void bench_one(const char *path, int threads, double bw, double bwc,
                      const double *peak, double macs, struct figs *f, int *plen_out,
                      int *steps_out)
{
    int dctx = bench_ctx(), most = getenv("KILN_BENCH_STEPS") ? bench_steps(8) : 8;
    struct model_llama_opts o = {.max_sequences = 16, .ctx = 1024, .threads = threads,
                                 .quiet = 1};
    if (dctx + 2 + 3 * most > 1024)
        o.ctx = (uint32_t)(dctx + 2 + 3 * most);
    char err[256];
    memset(f, 0, sizeof(*f));
    struct model *m = model_llama_create(path, &o, err, sizeof(err));
    if (!m) {
        printf("  %s: %s\n", path, err);
        return;
    }
    static uint32_t prompt[4096];
    uint32_t nv = m->n_vocab, toks[16];
    float *lg = malloc((size_t)16 * nv * sizeof(float));
    struct model_result res[16];
    int slots[16];
    double wb = (double)model_llama_weight_bytes(m), b1 = 0.0, b1cpu = 0.0;

    printf("%s: %.0f MiB of weights per token, %d threads, %s kernels\n", m->name,
           wb / (1 << 20), threads, kern_ops_select()->name);
    static const int def_plen[] = {128, 512}, def_batches[] = {1, 4, 8, 16};
    int plen[8], batches[8];
    int n_plen = env_list("KILN_BENCH_PROMPTS", def_plen, 2, plen, 8);
    int n_batches = env_list("KILN_BENCH_BATCHES", def_batches, 4, batches, 8);
    for (int i = 0; i < n_plen; i++) {
        if (plen[i] > 512)
            plen[i] = 512;
        fill_prompt(prompt, (uint32_t)plen[i], nv, (uint32_t)i);
        double t0 = bench_now(), c0 = cpu_now();
        if (model_prefill(m, 0, prompt, (uint32_t)plen[i], lg) < 0) {
            printf("  prefill: %s\n", m->error);
            break;
        }
        double dt = bench_now() - t0, dcpu = cpu_now() - c0;
        printf("  prompt %3d tokens: %8.1f tok/s (%.2f s, %.0f CPU ms)", plen[i], plen[i] / dt,
               dt, dcpu * 1e3);
        if (peak[0] > 0.0 && macs > 0.0 && dcpu > 0.0) {
            double g = plen[i] * macs / dcpu / 1e9;
            printf("; by CPU time %.1f GMAC/s per CPU second, %.0f%% of the %s peak", g,
                   100.0 * g / peak[0], kern_ops_select()->name);
            if (peak[1] > 0.0)
                printf(", %.0f%% of the avx512 peak", 100.0 * g / peak[1]);
        }
        printf("\n");
        *plen_out = plen[i];
        f->prompt = plen[i] / dt;
        f->pcpu = dcpu * 1e3;
        model_seq_free(m, 0);
    }
    for (int bi = 0; bi < n_batches; bi++) {
        int b = batches[bi] > 16 ? 16 : batches[bi], steps = bench_steps(b == 1 ? 8 : 4);
        int failed = 0;
        for (int s = 0; s < b && !failed; s++) {
            slots[s] = s;
            fill_prompt(prompt, (uint32_t)dctx, nv, 10u + (uint32_t)s);
            if (model_prefill(m, s, prompt, (uint32_t)dctx, lg) < 0) {
                printf("  decode batch %2d: prefill of %d tokens: %s\n", b, dctx, m->error);
                failed = 1;
            }
            toks[s] = prompt[dctx - 1];
        }
        if (failed)
            break;
        (void)model_decode_batch(m, slots, toks, b, lg, res); /* warm */
        double dt = 1e30, dc = 0.0;
        for (int rep = 0; rep < 3; rep++) { /* best of 3: the machine may be shared */
            double t0 = bench_now(), c0 = cpu_now();
            for (int st = 0; st < steps; st++)
                (void)model_decode_batch(m, slots, toks, b, lg, res);
            if (bench_now() - t0 < dt) {
                dt = bench_now() - t0;
                dc = cpu_now() - c0;
            }
        }
        if (res[0].status != 0) { /* the last step, at the longest context */
            printf("  decode batch %2d: a step failed (past the model's context?)\n", b);
            break;
        }
        printf("  decode batch %2d: %8.1f tok/s (%.1f ms/step, %.1f CPU ms/step)\n", b,
               b * steps / dt, dt / steps * 1e3, dc / steps * 1e3);
        if (b == 1) {
            b1 = steps / dt;
            *steps_out = steps;
            b1cpu = dc / steps;
            f->d1 = b1;
            f->dcpu = dc / steps * 1e3;
        } else if (b == 8) {
            f->d8 = b * steps / dt;
            f->c8 = dc / steps * 1e3;
        } else if (b == 16) {
            f->d16 = b * steps / dt;
            f->c16 = dc / steps * 1e3;
        }
        for (int s = 0; s < b; s++)
            model_seq_free(m, s);
    }
    printf("  batch-1 limit from bandwidth: %.1f tok/s (%.1f GB/s / %.0f MiB)", bw * 1e9 / wb,
           bw, wb / (1 << 20));
    if (b1 > 0.0)
        printf("; batch 1 reaches %.0f%% of it", 100.0 * b1 * wb / (bw * 1e9));
    printf("\n");
    /* the same per CPU second: with one thread, what the kernels read while they run */
    if (b1 > 0.0 && b1cpu > 0.0)
        printf("  batch 1 reads the weights at %.2f GB/s, %.0f%% of the measured %.1f GB/s; "
               "by CPU time %.2f GB/s per CPU second, %.0f%% of the read loop's %.1f\n",
               b1 * wb / 1e9, 100.0 * b1 * wb / (bw * 1e9), bw, wb / b1cpu / 1e9,
               100.0 * wb / b1cpu / (bwc * 1e9), bwc);
    free(lg);
    model_destroy(m);
}

static double ratio(double k, double l)
{
    return k > 0.0 && l > 0.0 ? k / l : 0.0;
}

/* kiln and llama.cpp alternately, rounds times, then the ratios of each side's best. -1 when
 * llama.cpp is installed but did not run, else 0. */
static int bench_pair(const char *path, int threads, double bw, double bwc,
                       const double *peak, double macs)
{
    const char *r = getenv("KILN_BENCH_ROUNDS");
    int rounds = r && atoi(r) > 0 ? atoi(r) : 2, plen = 128, steps = 8, have = 0;
    struct figs kb = {0}, lb = {0}, f;
    char bl[32] = "", cpu[64] = "?";

    static const int def_batches[] = {1, 4, 8, 16};
    int batches[8], nb = env_list("KILN_BENCH_BATCHES", def_batches, 4, batches, 8);
    for (int i = 0; i < nb; i++)
        if (batches[i] == 8 || batches[i] == 16)
            snprintf(bl + strlen(bl), sizeof(bl) - strlen(bl), "%s%d", *bl ? "," : "",
                     batches[i]);
    for (int i = 0; i < rounds; i++) {
        if (rounds > 1)
            printf(" round %d of %d\n", i + 1, rounds);
        bench_one(path, threads, bw, bwc, peak, macs, &f, &plen, &steps);
        figs_best(&kb, &f);
        fflush(stdout);
        int lr = bench_llama(path, plen, steps, bench_steps(4), threads, bl, bench_ctx(), &f,
                             cpu, sizeof(cpu));
        if (lr == -2)
            return -1;
        if (lr < 0)
            break;
        have = 1;
        figs_best(&lb, &f);
        fflush(stdout);
    }
    if (!have)
        return 0;
    char c[8][16];
    const double rs[8] = {ratio(kb.prompt, lb.prompt), ratio(kb.d1, lb.d1), ratio(kb.d8, lb.d8),
                          ratio(kb.d16, lb.d16), ratio(lb.pcpu, kb.pcpu), ratio(lb.dcpu, kb.dcpu),
                          ratio(lb.c8, kb.c8), ratio(lb.c16, kb.c16)};
    for (int i = 0; i < 8; i++)     /* a cell not measured on both sides prints "-" */
        if (rs[i] > 0.0)
            snprintf(c[i], sizeof(c[i]), "%.2fx", rs[i]);
        else
            snprintf(c[i], sizeof(c[i]), "-");
    printf("  kiln %s / llama.cpp %s (best of %d alternating rounds): prompt %d tokens %s, "
           "decode batch 1 %s, batch 8 %s, batch 16 %s; by CPU time: prompt %s, "
           "decode batch 1 %s, batch 8 %s, batch 16 %s\n", kern_ops_select()->name,
           cpu, rounds, plen, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
    return 0;
}

int main(void)
{
    const char *bin = getenv("KILN_BIN_DIR"), *shared = getenv("KILN_SHARED");
    const char *pick = getenv("KILN_BENCH_MODELS");
    char dir[512], path[600], vocab[512];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = getenv("KILN_THREADS") ? atoi(getenv("KILN_THREADS")) : (int)ncpu, failed = 0;
    static const char spm[] = "ggml-vocab-llama-spm.gguf", gpt2[] = "ggml-vocab-gpt-2.gguf";
    static const struct {
        const char *name, *preset, *vocab;
        enum ggml_type type;
        int layers;         /* 0: the preset's */
        const char *quant;  /* a llama.cpp preset instead of one type */
        const char *arch;
    } models[] = {
        {"smollm-q8_0", "smollm", gpt2, GGML_TYPE_Q8_0, 0, NULL, NULL},
        {"tinyllama-q8_0", "tinyllama", spm, GGML_TYPE_Q8_0, 0, NULL, NULL},
        {"tinyllama-q4_k", "tinyllama", spm, GGML_TYPE_Q4_K, 0, NULL, NULL},
        {"smollm-q4_k_m", "smollm", gpt2, GGML_TYPE_Q8_0, 0, "Q4_K_M", NULL},
        {"tinyllama-q4_k_m", "tinyllama", spm, GGML_TYPE_Q8_0, 0, "Q4_K_M", NULL},
        {"tl8-q4_1", "tinyllama", spm, GGML_TYPE_Q4_1, 8, NULL, NULL},
        {"tl8-q5_0", "tinyllama", spm, GGML_TYPE_Q5_0, 8, NULL, NULL},
        {"tl8-q5_1", "tinyllama", spm, GGML_TYPE_Q5_1, 8, NULL, NULL},
        {"tl8-iq4_nl", "tinyllama", spm, GGML_TYPE_IQ4_NL, 8, NULL, NULL},
        {"tl8-q2_k", "tinyllama", spm, GGML_TYPE_Q2_K, 8, NULL, NULL},
        {"tl8-q3_k", "tinyllama", spm, GGML_TYPE_Q3_K, 8, NULL, NULL},
        {"tl8-q5_k", "tinyllama", spm, GGML_TYPE_Q5_K, 8, NULL, NULL},
        {"tl8-iq4_xs", "tinyllama", spm, GGML_TYPE_IQ4_XS, 8, NULL, NULL},
        {"tl8-q3_k_m", "tinyllama", spm, GGML_TYPE_Q8_0, 8, "Q3_K_M", NULL},
        {"qwen05-q4_k_m", "qwen2.5-0.5b", gpt2, GGML_TYPE_Q8_0, 0, "Q4_K_M", "qwen2"},
    };

    snprintf(dir, sizeof(dir), "%s/bench-models", bin ? bin : "build");
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        perror(dir);
        return 1;
    }
    double bwc, bw = bench_read_bandwidth(&bwc);
    printf("memory read bandwidth: %.1f GB/s (one thread, plain loop); %.1f GB/s per CPU "
           "second of the loop\n", bw, bwc);
    /* The set's own dot instruction; the amx set also runs the types it has no tiles for
     * on the avx512 set's, so both peaks are printed for it. */
    const char *set = kern_ops_select()->name;
    double peak[2] = {bench_peak_int8(set),
                      strcmp(set, "amx") == 0 ? bench_peak_int8("avx512") : 0.0};
    if (peak[0] > 0.0)
        printf("peak int8 multiply-adds: %.1f GMAC/s per CPU second (%s path's dot "
               "instructions, independent chains)\n", peak[0], set);
    if (peak[1] > 0.0)
        printf("peak int8 multiply-adds: %.1f GMAC/s per CPU second (avx512 path's dot "
               "instructions, which the amx set uses for the types it has no tiles for)\n",
               peak[1]);
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        struct stat st;
        if (pick && !strstr(pick, models[i].name))
            continue;
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, models[i].name);
        if (stat(path, &st) < 0) {
            struct model_gen_opts o = {.type = models[i].type, .seed = 1, .verbose = 1,
                                       .quant = models[i].quant, .arch = models[i].arch};
            char err[256];
            snprintf(vocab, sizeof(vocab), "%s/vocab/%s", shared ? shared : "../shared",
                     models[i].vocab);
            o.vocab_path = vocab;
            (void)model_gen_preset(&o, models[i].preset);
            if (models[i].layers)
                o.layers = models[i].layers;
            fprintf(stderr, "generating %s\n", path);
            if (model_gen_write(&o, path, err, sizeof(err)) < 0) {
                fprintf(stderr, "%s: %s\n", path, err);
                return 1;
            }
        }
        struct model_gen_opts g = {0};
        (void)model_gen_preset(&g, models[i].preset);
        if (models[i].layers)
            g.layers = models[i].layers;
        int hd = g.head_dim ? g.head_dim : g.dim / g.heads;
        double macs = (double)g.layers * ((double)g.dim * hd * (2 * g.heads + 2 * g.kv_heads) +
                                          3.0 * g.dim * g.ffn);
        if (bench_pair(path, threads > 0 ? threads : 1, bw, bwc, peak, macs) < 0)
            failed = 1;
        fflush(stdout);
    }
    if (failed)
        fprintf(stderr, "bench_model: llama.cpp is installed but did not run; see above\n");
    return failed;
}
