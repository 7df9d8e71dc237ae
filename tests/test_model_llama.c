/* The GGUF Llama engine: the real stories260K model tells its story, the SIMD kernels agree
 * with the scalar reference on generated models of every tensor type, batching and prefill
 * chunking change nothing, and bad files and bad calls get clear errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "tokenizer.h"
#include "../worker/kernels.h"
#include "../worker/model_llama.h"
#include "lib/model_gen.h"

/* Fast vs scalar. Float weights: only the order of float sums differs, so logits agree to
 * FAST_TOL_FLOAT. Quantized weights: an ulp of difference in a norm's output can move one
 * activation across a Q8 rounding boundary, which shifts a product by a step of the
 * quantization grid and the logits by about 1% (measured up to 1.5% for Q4_0); so the bound
 * there is FAST_TOL_QUANT of the largest logit, and the cosine of the two logit vectors must
 * stay above FAST_MIN_COS (a broken kernel gives noise: cosine near 0). */
#define FAST_TOL_FLOAT 1e-3f
#define FAST_TOL_QUANT 0.05f
#define FAST_MIN_COS   0.999

struct fix {
    char dir[64];
    char path[128];
    char stories[512];
};

static int setup(void **state)
{
    struct fix *f = calloc(1, sizeof(*f));
    const char *shared = getenv("KILN_SHARED");
    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/kiln-model-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->stories, sizeof(f->stories), "%s/models/stories260K.gguf",
             shared ? shared : "../shared");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fix *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

/* A generated model of type in the fixture's dir; returns its path. */
static const char *gen(struct fix *f, enum ggml_type type, const char *arch, int tied)
{
    struct model_gen_opts o = {.type = type, .seed = 7, .arch = arch, .tied = tied};
    char err[256];
    assert_int_equal(model_gen_preset(&o, "tiny"), 0);
    snprintf(f->path, sizeof(f->path), "%s/%s-%s%s.gguf", f->dir, arch ? arch : "llama",
             ggml_type_name(type), tied ? "-tied" : "");
    if (model_gen_write(&o, f->path, err, sizeof(err)) < 0)
        fail_msg("model_gen_write: %s", err);
    return f->path;
}

static struct model *load_threads(const char *path, uint32_t max_seq, const struct kern_ops *k,
                                  int threads)
{
    struct model_llama_opts o = {.max_sequences = max_seq, .threads = threads, .kernels = k,
                                 .quiet = 1};
    char err[256];
    struct model *m = model_llama_create(path, &o, err, sizeof(err));
    if (!m)
        fail_msg("model_llama_create(%s): %s", path, err);
    return m;
}

static struct model *load(const char *path, uint32_t max_seq, const struct kern_ops *k)
{
    return load_threads(path, max_seq, k, 2);
}

static uint32_t argmax(const float *l, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

static float max_diff(const float *a, const float *b, uint32_t n)
{
    float d = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

static int decode1(struct model *m, int slot, uint32_t tok, float *logits)
{
    struct model_result r;
    assert_int_equal(model_decode_batch(m, &slot, &tok, 1, logits, &r), 1);
    return r.status;
}

/* ---- (a) the real model ------------------------------------------------------------- */

/* Greedy, 64 tokens after BOS + "Once upon a time" (SPM ids 1 403 407 261 378). */
static const uint32_t lily_ids[64] = {
    432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
    410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394,
    261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
    398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336};
static const char lily_text[] =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, "
    "she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said";

static void stories_greedy(struct fix *f, const struct kern_ops *k)
{
    char err[256], text[1024] = "";
    struct gguf *g = gguf_open(f->stories, err, sizeof(err));
    if (!g)
        fail_msg("%s", err);
    struct tokenizer *t = tokenizer_create_gguf(g, err, sizeof(err));
    assert_non_null(t);
    uint32_t prompt[16];
    long n = tokenizer_encode(t, "Once upon a time", 16, TOKENIZER_ADD_SPECIAL, prompt, 16);
    assert_int_equal(n, 5);
    assert_int_equal(prompt[0], 1);

    struct model *m = load(f->stories, 1, k);
    assert_int_equal(m->n_vocab, 512);
    assert_true(m->n_eos >= 1);
    assert_int_equal(m->eos[0], 2);
    float *lg = malloc(m->n_vocab * sizeof(float));
    assert_int_equal(model_prefill(m, 0, prompt, (uint32_t)n, lg), 0);
    for (int i = 0; i < 64; i++) {
        uint32_t id = argmax(lg, m->n_vocab);
        char piece[64];
        int len = tokenizer_piece(t, id, false, piece, sizeof(piece) - 1);
        assert_true(len >= 0);
        piece[len] = '\0';
        strcat(text, piece);
        assert_int_equal(id, lily_ids[i]);
        assert_int_equal(decode1(m, 0, id, lg), 0);
    }
    assert_string_equal(text, lily_text);
    free(lg);
    model_destroy(m);
    tokenizer_destroy(t);
    gguf_close(g);
}

static void test_model_llama_stories_tells_the_lily_story(void **state)
{
    stories_greedy(*state, kern_ops_get(KERN_SET_SCALAR));
    stories_greedy(*state, kern_ops_select());
}

/* ---- (b) fast kernels vs the scalar reference, every type ----------------------------- */

static double cosine(const float *a, const float *b, uint32_t n)
{
    double ab = 0, aa = 0, bb = 0;
    for (uint32_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb + 1e-30);
}

static void compare_fast(const char *path, int quantized)
{
    const struct kern_ops *fast = kern_ops_select();
    struct model *ms = load(path, 1, kern_ops_get(KERN_SET_SCALAR));
    struct model *mf = load(path, 1, fast);
    uint32_t nv = ms->n_vocab, prompt[40];
    float *ls = malloc(nv * sizeof(float)), *lf = malloc(nv * sizeof(float));
    float worst = 0.0f;

    for (int i = 0; i < 40; i++)
        prompt[i] = 3u + (uint32_t)(i * 37) % (nv - 3);
    assert_int_equal(model_prefill(ms, 0, prompt, 40, ls), 0);
    assert_int_equal(model_prefill(mf, 0, prompt, 40, lf), 0);
    for (int step = 0; step < 12; step++) {
        float d = max_diff(ls, lf, nv), scale = 0.0f;
        for (uint32_t i = 0; i < nv; i++)
            scale = fmaxf(scale, fabsf(ls[i]));
        float tol = quantized ? FAST_TOL_QUANT * scale : FAST_TOL_FLOAT;
        double cs = cosine(ls, lf, nv);
        worst = fmaxf(worst, d / scale);
        if (d > tol || cs < FAST_MIN_COS)
            fail_msg("%s: step %d: %s logits differ from scalar by %g (tolerance %g), "
                     "cosine %.6f",
                     path, step, fast->name, (double)d, (double)tol, cs);
        uint32_t next = argmax(ls, nv); /* both follow the reference's choice */
        assert_int_equal(decode1(ms, 0, next, ls), 0);
        assert_int_equal(decode1(mf, 0, next, lf), 0);
    }
    print_message("%s: %s vs scalar, max |diff| / max |logit| = %.2e\n", path, fast->name,
                  (double)worst);
    free(ls);
    free(lf);
    model_destroy(ms);
    model_destroy(mf);
}

static void test_model_llama_fast_matches_scalar_every_type(void **state)
{
    static const enum ggml_type types[] = {
        GGML_TYPE_F32,    GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
        GGML_TYPE_Q4_K,   GGML_TYPE_Q6_K, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
        GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        compare_fast(gen(*state, types[i], NULL, 0), i >= 3);
    compare_fast(gen(*state, GGML_TYPE_Q8_0, "qwen2", 0), 1);
    compare_fast(gen(*state, GGML_TYPE_Q4_K, NULL, 1), 1);
    compare_fast(gen(*state, GGML_TYPE_IQ4_NL, NULL, 1), 1); /* tied: get_rows and output */
}

/* ---- (c) batching and chunking change nothing ---------------------------------------- */

#define STEPS 10

/* Sequence 0's greedy run, alone (batch 1) or beside batch-1 others with other prompts;
 * its logits of every step go to out (STEPS + 1 rows). */
static void run_batch(struct model *m, int batch, int place, float *out, uint32_t *ids)
{
    uint32_t nv = m->n_vocab, tok[8], prompt[24];
    int slots[8];
    float *lg = malloc((size_t)8 * nv * sizeof(float));
    struct model_result res[8];

    for (int s = 0; s < batch; s++) {
        int who = s == place ? 0 : s + 1; /* sequence 0 sits at index place */
        uint32_t len = 6 + (uint32_t)who * 2;
        for (uint32_t i = 0; i < len; i++)
            prompt[i] = 1u + (uint32_t)(who * 101 + (int)i * 13) % (nv - 1);
        slots[s] = (s + 3) % 8; /* slot numbers unrelated to batch order */
        assert_int_equal(model_prefill(m, slots[s], prompt, len, lg + (size_t)s * nv), 0);
        tok[s] = argmax(lg + (size_t)s * nv, nv);
    }
    memcpy(out, lg + (size_t)place * nv, nv * sizeof(float));
    for (int step = 0; step < STEPS; step++) {
        ids[step] = tok[place];
        assert_int_equal(model_decode_batch(m, slots, tok, batch, lg, res), batch);
        for (int s = 0; s < batch; s++) {
            assert_int_equal(res[s].status, 0);
            tok[s] = argmax(lg + (size_t)s * nv, nv);
        }
        memcpy(out + (size_t)(step + 1) * nv, lg + (size_t)place * nv, nv * sizeof(float));
    }
    for (int s = 0; s < batch; s++)
        model_seq_free(m, slots[s]);
    free(lg);
}

static void check_batching(const char *path)
{
    struct model *m = load(path, 8, NULL);
    uint32_t nv = m->n_vocab, ids1[STEPS], ids[STEPS];
    float *alone = malloc((size_t)(STEPS + 1) * nv * sizeof(float));
    float *in = malloc((size_t)(STEPS + 1) * nv * sizeof(float));
    static const int cases[][2] = {{3, 1}, {8, 5}, {8, 0}};

    run_batch(m, 1, 0, alone, ids1);
    for (size_t c = 0; c < 3; c++) {
        run_batch(m, cases[c][0], cases[c][1], in, ids);
        float d = max_diff(alone, in, (STEPS + 1) * nv);
        if (d > 1e-6f)
            fail_msg("%s: batch of %d: logits differ from batch of 1 by %g", path, cases[c][0],
                     (double)d);
        assert_memory_equal(ids, ids1, sizeof(ids));
    }
    free(alone);
    free(in);
    model_destroy(m);
}

static void test_model_llama_batching_changes_nothing(void **state)
{
    struct fix *f = *state;
    check_batching(f->stories);
    check_batching(gen(f, GGML_TYPE_Q4_K, NULL, 0));
    check_batching(gen(f, GGML_TYPE_Q8_0, "qwen2", 0));
}

/* One thread (each matrix one task) gives the bits of two (each matrix split in tasks), on
 * the default set and on avx2 where the CPU has it: prefills and decode steps alone and
 * beside others. */
static void check_threads(const char *path, const struct kern_ops *k)
{
    struct model *m1 = load_threads(path, 8, k, 1), *m2 = load_threads(path, 8, k, 2);
    uint32_t nv = m1->n_vocab, ids1[STEPS], ids2[STEPS];
    float *a = malloc((size_t)(STEPS + 1) * nv * sizeof(float));
    float *b = malloc((size_t)(STEPS + 1) * nv * sizeof(float));

    for (int batch = 1; batch <= 3; batch += 2) {
        run_batch(m1, batch, batch - 1, a, ids1);
        run_batch(m2, batch, batch - 1, b, ids2);
        if (memcmp(a, b, (size_t)(STEPS + 1) * nv * sizeof(float)) != 0)
            fail_msg("%s: %s, batch of %d: one thread's logits differ from two threads'", path,
                     k ? k->name : "default", batch);
        assert_memory_equal(ids1, ids2, sizeof(ids1));
    }
    free(a);
    free(b);
    model_destroy(m1);
    model_destroy(m2);
}

static void test_model_llama_one_thread_gives_the_bits_of_two(void **state)
{
    struct fix *f = *state;
    static const enum ggml_type types[] = {GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_Q4_K};
    const struct kern_ops *avx2 = kern_ops_get(KERN_SET_AVX2);
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        const char *path = gen(f, types[i], NULL, 0);
        check_threads(path, NULL);
        if (avx2)
            check_threads(path, avx2);
    }
}

/* A 300-token prompt (three prefill chunks) gives the logits of feeding it token by token. */
static void test_model_llama_prefill_chunks_match_stepwise(void **state)
{
    struct fix *f = *state;
    struct model *m = load(f->stories, 2, NULL);
    uint32_t nv = m->n_vocab, prompt[300];
    float *a = malloc(nv * sizeof(float)), *b = malloc(nv * sizeof(float));

    for (int i = 0; i < 300; i++)
        prompt[i] = 3u + (uint32_t)(i * 7919) % (nv - 3);
    assert_int_equal(model_prefill(m, 0, prompt, 300, a), 0);
    assert_int_equal(model_prefill(m, 1, prompt, 1, b), 0);
    for (int i = 1; i < 300; i++)
        assert_int_equal(decode1(m, 1, prompt[i], b), 0);
    assert_true(max_diff(a, b, nv) <= 1e-6f);
    free(a);
    free(b);
    model_destroy(m);
}

/* Decode reads the cache through attention's few-query tiles, a prefill through its wide
 * ones: a 150-token prompt (blocks of 16 crossed, the last one partial) fed at once or token
 * by token gives the same logits bit for bit, in every kernel set this CPU runs, with and
 * without a sliding window, and with gemma2's attention softcap; on one thread (a decode
 * task takes both KV heads) and on two (a task per query head). */
static void test_model_llama_decode_gives_the_prefills_bits(void **state)
{
    struct fix *f = *state;
    static const enum kern_set sets[] = {KERN_SET_SCALAR, KERN_SET_AVX2, KERN_SET_AVX512};
    static const struct {
        const char *arch;
        int window;
    } shapes[] = {{NULL, 0}, {NULL, 37}, {"gemma2", 0}};
    enum { N = 150 };
    uint32_t prompt[N];

    for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++) {
        struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 7, .arch = shapes[sh].arch};
        char err[256];
        assert_int_equal(model_gen_preset(&o, "tiny"), 0);
        o.window = shapes[sh].window;
        snprintf(f->path, sizeof(f->path), "%s/bits-%zu.gguf", f->dir, sh);
        if (model_gen_write(&o, f->path, err, sizeof(err)) < 0)
            fail_msg("model_gen_write: %s", err);
        for (size_t k = 0; k < 2 * sizeof(sets) / sizeof(sets[0]); k++) {
            const struct kern_ops *ops = kern_ops_get(sets[k / 2]);
            if (!ops)
                continue;
            struct model *m = load_threads(f->path, 2, ops, 1 + (int)(k % 2));
            uint32_t nv = m->n_vocab;
            float *a = malloc(nv * sizeof(float)), *b = malloc(nv * sizeof(float));
            for (int i = 0; i < N; i++)
                prompt[i] = 3u + (uint32_t)(i * 7919) % (nv - 3);
            assert_int_equal(model_prefill(m, 0, prompt, N, a), 0);
            assert_int_equal(model_prefill(m, 1, prompt, 1, b), 0);
            for (int i = 1; i < N; i++)
                assert_int_equal(decode1(m, 1, prompt[i], b), 0);
            if (memcmp(a, b, nv * sizeof(float)) != 0)
                fail_msg("%s, window %d, %s kernels, %d threads: decode differs from prefill "
                         "by %g", shapes[sh].arch ? shapes[sh].arch : "llama", shapes[sh].window,
                         ops->name, 1 + (int)(k % 2), (double)max_diff(a, b, nv));
            free(a);
            free(b);
            model_destroy(m);
        }
    }
}

/* ---- (d) errors --------------------------------------------------------------------- */

static void expect_load_error(const char *path, const char *w1, const char *w2)
{
    struct model_llama_opts o = {.quiet = 1};
    char err[256] = "";
    struct model *m = model_llama_create(path, &o, err, sizeof(err));
    assert_null(m);
    if (!strstr(err, w1) || (w2 && !strstr(err, w2)))
        fail_msg("error '%s' lacks '%s' / '%s'", err, w1, w2 ? w2 : "");
}

static void test_model_llama_rejects_bad_files(void **state)
{
    struct fix *f = *state;
    const char *shared = getenv("KILN_SHARED");
    char path[512];
    struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 1};
    char err[256];

    snprintf(path, sizeof(path), "%s/text.gguf", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("this is not a model\n", fp);
    fclose(fp);
    expect_load_error(path, "text.gguf", NULL);

    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-spm.gguf",
             shared ? shared : "../shared");
    expect_load_error(path, "not a model", NULL);

    assert_int_equal(model_gen_preset(&o, "tiny"), 0);
    o.defect_tensor = "blk.1.ffn_up.weight";
    o.defect_type = (enum ggml_type)21; /* IQ3_S: the IQ and TQ types beyond IQ4 are refused */
    o.defect_type_set = 1;
    snprintf(path, sizeof(path), "%s/iq3s.gguf", f->dir);
    assert_int_equal(model_gen_write(&o, path, err, sizeof(err)), 0);
    expect_load_error(path, "blk.1.ffn_up.weight", "IQ3_S");
    o.defect_type = (enum ggml_type)35;
    snprintf(path, sizeof(path), "%s/tq20.gguf", f->dir);
    assert_int_equal(model_gen_write(&o, path, err, sizeof(err)), 0);
    expect_load_error(path, "blk.1.ffn_up.weight", "TQ2_0");

    o.defect_tensor = "blk.0.attn_k.weight";
    o.defect_type_set = 0;
    o.defect_rows = 64;
    snprintf(path, sizeof(path), "%s/shape.gguf", f->dir);
    assert_int_equal(model_gen_write(&o, path, err, sizeof(err)), 0);
    expect_load_error(path, "blk.0.attn_k.weight", "shape");

    snprintf(path, sizeof(path), "%s/missing.gguf", f->dir);
    expect_load_error(path, "missing.gguf", NULL);
}

static void test_model_llama_rejects_bad_calls(void **state)
{
    struct fix *f = *state;
    struct model_llama_opts o = {.max_sequences = 2, .ctx = 8, .quiet = 1};
    char err[256];
    struct model *m = model_llama_create(f->stories, &o, err, sizeof(err));
    uint32_t p[9] = {1, 5, 6, 7, 8, 9, 10, 11, 12};
    float *lg = malloc(2 * 512 * sizeof(float));
    struct model_result res[2];
    int slots[2] = {0, 0};
    uint32_t toks[2] = {5, 6};

    assert_non_null(m);
    assert_int_equal(m->max_context, 8);
    assert_int_equal(model_prefill(m, 0, p, 9, lg), -ENOSPC);
    assert_non_null(strstr(m->error, "context"));
    assert_int_equal(model_prefill(m, 2, p, 3, lg), -EINVAL);
    assert_int_equal(model_prefill(m, 0, p, 0, lg), -EINVAL);
    assert_int_equal(model_prefill(m, 0, (uint32_t[]){1, 512}, 2, lg), -EINVAL);

    assert_int_equal(model_prefill(m, 0, p, 8, lg), 0);
    assert_int_equal(decode1(m, 0, 5, lg), -ENOSPC);
    /* the same slot twice in one step: the first runs, the second is refused */
    assert_int_equal(model_prefill(m, 1, p, 3, lg), 0);
    slots[0] = slots[1] = 1;
    assert_int_equal(model_decode_batch(m, slots, toks, 2, lg, res), 2);
    assert_int_equal(res[0].status, 0);
    assert_int_equal(res[1].status, -EINVAL);
    assert_non_null(strstr(res[1].error, "twice"));
    model_seq_free(m, 0);
    assert_int_equal(model_prefill(m, 0, p, 8, lg), 0); /* a freed slot is reusable */
    free(lg);
    model_destroy(m);
}

/* ctx 0: the model's context, capped so the KV cache of every sequence fits the budget. */
static void test_model_llama_ctx_zero_fits_the_budget(void **state)
{
    struct fix *f = *state;
    /* stories260K: 5 layers x 32 KV dims x K and V x 2 bytes = 640 bytes per token */
    struct model_llama_opts o = {.max_sequences = 4, .kv_budget = 640ull * 4 * 300, .quiet = 1};
    char err[256];
    struct model *m = model_llama_create(f->stories, &o, err, sizeof(err));
    assert_non_null(m);
    assert_int_equal(m->max_context, 300);
    model_destroy(m);
    o.kv_budget = 1ull << 40;
    m = model_llama_create(f->stories, &o, err, sizeof(err));
    assert_non_null(m);
    assert_int_equal(m->max_context, 2048);
    model_destroy(m);
    o.kv_budget = 1000;
    m = model_llama_create(f->stories, &o, err, sizeof(err));
    assert_non_null(m);
    assert_int_equal(m->max_context, 256);
    model_destroy(m);
}

/* ---- llama.cpp's quantization presets ------------------------------------------------ */

static const char *gen_quant(struct fix *f, const char *preset, const char *shape, int layers,
                             const char *arch)
{
    struct model_gen_opts o = {.type = GGML_TYPE_Q8_0, .seed = 11, .arch = arch, .quant = preset};
    char err[256];
    assert_int_equal(model_gen_preset(&o, shape), 0);
    if (layers)
        o.layers = layers;
    snprintf(f->path, sizeof(f->path), "%s/%s-%s.gguf", f->dir, shape, preset);
    if (model_gen_write(&o, f->path, err, sizeof(err)) < 0)
        fail_msg("model_gen_write: %s", err);
    return f->path;
}

static enum ggml_type tensor_type(const char *path, const char *name)
{
    char err[256];
    struct gguf *g = gguf_open(path, err, sizeof(err));
    assert_non_null(g);
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    assert_non_null(t);
    enum ggml_type ty = t->type;
    gguf_close(g);
    return ty;
}

/* Every preset from Q2_K to Q8_0 plus IQ4_XS loads, mixes types as llama.cpp's does, and the
 * SIMD kernels agree with the scalar ones on it. */
static void test_model_llama_quant_presets_load_and_match_scalar(void **state)
{
    static const char *const presets[] = {"Q2_K",   "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",
                                          "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",   "IQ4_XS",
                                          "Q4_0",   "Q4_1",   "Q5_0",   "Q5_1",   "Q8_0"};
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
        compare_fast(gen_quant(*state, presets[i], "tiny", 0, NULL), 1);
    const char *p = gen_quant(*state, "Q4_K_M", "tiny", 0, NULL);
    assert_int_equal(tensor_type(p, "output.weight"), GGML_TYPE_Q6_K);
    /* of two layers, the last gets more bits (the first eighth is layer 0 only from 8 on) */
    assert_int_equal(tensor_type(p, "blk.0.ffn_down.weight"), GGML_TYPE_Q4_K);
    assert_int_equal(tensor_type(p, "blk.1.ffn_down.weight"), GGML_TYPE_Q6_K);
    assert_int_equal(tensor_type(p, "blk.1.attn_v.weight"), GGML_TYPE_Q6_K);
    assert_int_equal(tensor_type(p, "blk.0.attn_q.weight"), GGML_TYPE_Q4_K);
    p = gen_quant(*state, "Q2_K", "tiny", 0, NULL);
    assert_int_equal(tensor_type(p, "blk.1.ffn_down.weight"), GGML_TYPE_Q3_K);
    assert_int_equal(tensor_type(p, "blk.1.ffn_up.weight"), GGML_TYPE_Q2_K);
}

/* Qwen2.5-0.5B's shape (896-wide rows, 4864-wide FFN, 14/2 heads; two of its 24 layers) as
 * Q4_K_M: the 896-column matrices fall back to Q5_0 / Q8_0 as in the real file, and it loads,
 * generates and agrees with the scalar kernels. */
static void test_model_llama_qwen05_q4_k_m_loads_and_generates(void **state)
{
    const char *p = gen_quant(*state, "Q4_K_M", "qwen2.5-0.5b", 2, "qwen2");
    assert_int_equal(tensor_type(p, "token_embd.weight"), GGML_TYPE_Q5_0);
    assert_int_equal(tensor_type(p, "output.weight"), GGML_TYPE_Q8_0);
    assert_int_equal(tensor_type(p, "blk.1.attn_q.weight"), GGML_TYPE_Q5_0);
    assert_int_equal(tensor_type(p, "blk.0.attn_v.weight"), GGML_TYPE_Q5_0);
    assert_int_equal(tensor_type(p, "blk.1.attn_v.weight"), GGML_TYPE_Q8_0);
    assert_int_equal(tensor_type(p, "blk.1.ffn_down.weight"), GGML_TYPE_Q6_K);
    struct model *m = load(p, 1, kern_ops_select());
    uint32_t nv = m->n_vocab, prompt[8] = {1, 300, 301, 302, 303, 304, 305, 306}, tok;
    float *lg = malloc(nv * sizeof(float));
    assert_non_null(lg);
    assert_int_equal(model_prefill(m, 0, prompt, 8, lg), 0);
    for (int i = 0; i < 16; i++) {
        tok = argmax(lg, nv);
        assert_true(tok < nv && isfinite(lg[tok]));
        assert_int_equal(decode1(m, 0, tok, lg), 0);
    }
    free(lg);
    model_destroy(m);
    compare_fast(p, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_model_llama_stories_tells_the_lily_story, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_fast_matches_scalar_every_type, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_batching_changes_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_one_thread_gives_the_bits_of_two, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_prefill_chunks_match_stepwise, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_decode_gives_the_prefills_bits, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_rejects_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_rejects_bad_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_ctx_zero_fits_the_budget, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_quant_presets_load_and_match_scalar,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_llama_qwen05_q4_k_m_loads_and_generates,
                                        setup, teardown),
    };
    return cmocka_run_group_tests_name("model_llama", tests, NULL, NULL);
}
