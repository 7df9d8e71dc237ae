/* kiln's engine against llama.cpp: every model of the oracle table (tests/lib/oracle_models.c,
 * every architecture x tensor type, generated here from fixed seeds) on every prompt, held to
 * the log-probabilities and greedy ids that llama.cpp wrote into tests/reference/fixtures/
 * (tests/reference/oracle.mjs, `make oracle`).
 *
 * Tolerance: at each of the first ORACLE_STEPS steps, for each of llama.cpp's top
 * ORACLE_TOP tokens, kiln's log-probability is within the type's tolerance (oracle_models.c
 * gives each type's and why) of llama.cpp's, at worst and on average over the model; and at
 * each of ORACLE_GREEDY steps kiln's greedy choice is llama.cpp's wherever llama.cpp's lead
 * over its runner-up exceeds that worst-case tolerance (0.02 nats for F32, 0.6 for most
 * quantized types): a lead within it can be closed by the two log-probabilities' allowed
 * differences. Such near-ties either engine may break its own way: counted and reported,
 * not held. (Measured with all three kernel sets: leads of 0.33-0.36 nats on quantized
 * models do flip now and then.) The run is fed
 * llama.cpp's ids, so one step's comparison never depends on another's. Fixtures come from
 * llama.cpp with flash attention off: its CPU flash attention accumulates in F16, a noisier
 * reference than kiln's F32 sums. */
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

#include "../worker/model_llama.h"
#include "lib/model_gen.h"
#include "lib/oracle_models.h"

#define FIXTURES "tests/reference/fixtures"

struct ref_prompt {
    uint32_t ids[ORACLE_MAX_PROMPT];
    int n;
    uint32_t top_id[ORACLE_STEPS][ORACLE_TOP];
    double top_lp[ORACLE_STEPS][ORACLE_TOP];
    uint32_t greedy[ORACLE_GREEDY];
    double margin[ORACLE_GREEDY]; /* llama.cpp's lead of that id over the runner-up */
};

/* Reads a fixture: per prompt a "prompt" line, ORACLE_STEPS "step" lines, a "greedy" line. */
static int read_fixture(const char *path, struct ref_prompt *p)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int np = -1, ok = 1;

    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        char *s = line, *end;
        if (strncmp(s, "prompt ", 7) == 0) {
            if (++np >= ORACLE_PROMPTS) {
                ok = 0;
                break;
            }
            p[np].n = 0;
            s += 7;
            for (unsigned long v; (v = strtoul(s, &end, 10)), end != s; s = end)
                if (p[np].n < ORACLE_MAX_PROMPT)
                    p[np].ids[p[np].n++] = (uint32_t)v;
        } else if (strncmp(s, "step ", 5) == 0 && np >= 0) {
            int st = (int)strtol(s + 5, &end, 10);
            ok &= st >= 0 && st < ORACLE_STEPS;
            s = end;
            for (int k = 0; ok && k < ORACLE_TOP; k++) {
                p[np].top_id[st][k] = (uint32_t)strtoul(s, &end, 10);
                ok &= *end == ':';
                p[np].top_lp[st][k] = strtod(end + 1, &s);
            }
        } else if (strncmp(s, "greedy ", 7) == 0 && np >= 0) {
            s += 7;
            for (int k = 0; ok && k < ORACLE_GREEDY; k++) {
                p[np].greedy[k] = (uint32_t)strtoul(s, &end, 10);
                ok &= end != s && *end == ':';
                p[np].margin[k] = strtod(end + 1, &s);
            }
        }
    }
    fclose(f);
    return ok && np == ORACLE_PROMPTS - 1 ? 0 : -EINVAL;
}

/* log-softmax of one id, and the argmax. */
static double logprob(const float *lg, int n, uint32_t id, uint32_t *argmax)
{
    float mx = lg[0];
    uint32_t am = 0;
    for (int i = 1; i < n; i++)
        if (lg[i] > mx) {
            mx = lg[i];
            am = (uint32_t)i;
        }
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += exp((double)lg[i] - mx);
    if (argmax)
        *argmax = am;
    return (double)lg[id] - mx - log(sum);
}

static void test_oracle_kiln_matches_llama_cpp(void **state)
{
    char dir[] = "/tmp/kiln-oracle-XXXXXX", path[256], fpath[256], name[64], err[512];
    struct ref_prompt ref[ORACLE_PROMPTS];
    double worst = 0.0, worst_mean = 0.0;
    char worst_at[128] = "", worst_mean_at[64] = "";
    long greedy_ok = 0, greedy_all = 0, ties = 0, compared = 0;
    int failures = 0, models = oracle_model_count();
    (void)state;

    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < models; i++) {
        struct model_gen_opts o;
        struct oracle_tol tol;
        assert_int_equal(oracle_model(i, name, sizeof(name), &o, &tol), 0);
        if (getenv("KILN_ORACLE_ONLY") && !strstr(name, getenv("KILN_ORACLE_ONLY")))
            continue; /* a developer's focus: make oracle runs them all */
        snprintf(fpath, sizeof(fpath), "%s/%s.txt",
                 getenv("KILN_ORACLE_FIXTURES") ? getenv("KILN_ORACLE_FIXTURES") : FIXTURES, name);
        int rc = read_fixture(fpath, ref);
        if (rc < 0) {
            print_error("%s: %s (regenerate with make oracle)\n", fpath, strerror(-rc));
            failures++;
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
        assert_int_equal(model_gen_write(&o, path, err, sizeof(err)), 0);
        struct model_llama_opts mo = {.max_sequences = 1, .ctx = ORACLE_CTX, .threads = 1,
                                      .quiet = 1};
        struct model *m = model_llama_create(path, &mo, err, sizeof(err));
        if (!m) {
            print_error("%s: does not load: %s\n", name, err);
            failures++;
            unlink(path);
            continue;
        }
        int nv = (int)m->n_vocab;
        float *lg = malloc((size_t)nv * sizeof(float));
        assert_non_null(lg);
        double model_worst = 0.0, model_sum = 0.0;
        int model_greedy = 0, model_n = 0;
        for (int p = 0; p < ORACLE_PROMPTS; p++) {
            const struct ref_prompt *r = &ref[p];
            assert_int_equal(model_prefill(m, 0, r->ids, (uint32_t)r->n, lg), 0);
            for (int s = 0; s < ORACLE_GREEDY; s++) {
                uint32_t am;
                (void)logprob(lg, nv, 0, &am);
                /* a lead within the tolerance is a near-tie either engine may break its
                 * own way: counted, not held */
                if (r->margin[s] <= tol.max) {
                    ties++;
                } else if (greedy_all++, am == r->greedy[s]) {
                    greedy_ok++;
                    model_greedy++;
                } else {
                    print_error("%s prompt %d step %d: kiln's greedy id %u, llama.cpp's %u\n",
                                name, p, s, am, r->greedy[s]);
                    failures++;
                }
                for (int k = 0; s < ORACLE_STEPS && k < ORACLE_TOP; k++) {
                    double d = fabs(logprob(lg, nv, r->top_id[s][k], NULL) - r->top_lp[s][k]);
                    compared++;
                    model_sum += d;
                    model_n++;
                    if (d > model_worst)
                        model_worst = d;
                    if (d > worst) {
                        worst = d;
                        snprintf(worst_at, sizeof(worst_at), "%s prompt %d step %d id %u",
                                 name, p, s, r->top_id[s][k]);
                    }
                    if (getenv("KILN_ORACLE_DUMP"))
                        fprintf(stderr, "%s p%d s%d id %u kiln %.5f llama.cpp %.5f\n", name, p,
                                s, r->top_id[s][k], logprob(lg, nv, r->top_id[s][k], NULL),
                                r->top_lp[s][k]);
                    if (d > tol.max) {
                        print_error("%s prompt %d step %d: id %u log-prob %.5f, llama.cpp %.5f\n",
                                    name, p, s, r->top_id[s][k],
                                    logprob(lg, nv, r->top_id[s][k], NULL), r->top_lp[s][k]);
                        failures++;
                    }
                }
                if (s + 1 < ORACLE_GREEDY)
                    {
                    struct model_result res;
                    int slot = 0;
                    uint32_t tok = r->greedy[s];
                    assert_int_equal(model_decode_batch(m, &slot, &tok, 1, lg, &res), 1);
                    assert_int_equal(res.status, 0);
                }
            }
            model_seq_free(m, 0);
        }
        double mean = model_n ? model_sum / model_n : 0.0;
        if (mean > tol.mean) {
            print_error("%s: mean log-prob difference %.5f nats, tolerance %.3f\n", name, mean,
                        tol.mean);
            failures++;
        }
        if (mean > worst_mean) {
            worst_mean = mean;
            snprintf(worst_mean_at, sizeof(worst_mean_at), "%s", name);
        }
        if (getenv("KILN_ORACLE_VERBOSE"))
            fprintf(stderr, "oracle: %-18s worst %.5f mean %.5f nats, greedy %d identical\n",
                    name, model_worst, mean, model_greedy);
        free(lg);
        model_destroy(m);
        unlink(path);
    }
    rmdir(dir);
    fprintf(stderr,
            "oracle: %d models, %ld log-probs compared: worst difference %.5f nats (%s), "
            "worst model mean %.5f (%s); greedy ids identical %ld/%ld, %ld near-ties not "
            "held\n",
            models, compared, worst, worst_at, worst_mean, worst_mean_at, greedy_ok, greedy_all,
            ties);
    assert_int_equal(failures, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_kiln_matches_llama_cpp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
