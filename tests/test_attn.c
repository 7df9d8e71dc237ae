/* attn_kern.h: the AVX2 and AVX-512 sets give the scalar twin's bits for scores, softmax and
 * value sums (so a kernel set's attention is what the scalar code says, lane by lane); a
 * lane's result does not depend on the other lanes, on masked rows around its range or on
 * how its keys are split into calls; the few-query forms (F16 rows read where they lie,
 * query-major scores) give the lane-major forms' bits in every set, for 1 to ATTN_FEW
 * queries and any part of a block; the exp polynomial stays within 2e-7 of expf. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/attn_kern.h"
#include "../worker/kv_cache.h"
#include "../worker/quant.h"

#define HD_MAX 128
#define N_ROWS 100

static uint32_t rng = 12345;

static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static float f16(float x)
{
    return quant_f16_to_f32(quant_f32_to_f16(x));
}

/* The vector sets this CPU runs. */
static int vector_sets(const struct attn_kern **k)
{
    int n = 0;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        k[n++] = &attn_kern_avx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        k[n++] = &attn_kern_avx512;
#else
    (void)k;
#endif
    return n;
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = f16(frand() * scale);
}

static void test_attn_every_set_gives_the_scalar_twins_bits(void **state)
{
    const struct attn_kern *sets[2];
    int n_sets = vector_sets(sets);
    static const int hds[] = {64, 76, 128};
    static const int ranges[][2] = {{0, 16}, {3, 16}, {0, 1}, {5, 11}, {15, 16}};
    (void)state;
    if (!n_sets)
        skip();
    for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
        int hd = hds[h];
        float Qt[HD_MAX * ATTN_LANES], kf[KV_BLOCK * HD_MAX];
        float want[HD_MAX * ATTN_LANES], got[HD_MAX * ATTN_LANES];
        float S0[N_ROWS * ATTN_LANES], S1[N_ROWS * ATTN_LANES];
        uint16_t raw[KV_BLOCK * HD_MAX + 8];

        fill(Qt, (size_t)hd * ATTN_LANES, 2.0f);
        fill(kf, (size_t)KV_BLOCK * hd, 2.0f);
        for (int s = 0; s < n_sets; s++) {
            for (int nv = 1; nv <= 2; nv++) {
                int lanes = 8 * nv;
                for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
                    int u0 = ranges[r][0], u1 = ranges[r][1];
                    attn_kern_scalar.scores(S0, Qt, kf, u0, u1, hd, nv, 0.125f);
                    sets[s]->scores(S1, Qt, kf, u0, u1, hd, nv, 0.125f);
                    for (int u = 0; u < u1 - u0; u++)
                        for (int j = 0; j < lanes; j++)
                            assert_memory_equal(&S0[u * ATTN_LANES + j], &S1[u * ATTN_LANES + j],
                                                sizeof(float));
                }
                /* softmax over N_ROWS rows, some lanes masked at either end, one entirely */
                fill(S0, (size_t)N_ROWS * ATTN_LANES, 8.0f);
                for (int t = 0; t < N_ROWS; t++)
                    for (int j = 0; j < ATTN_LANES; j++)
                        if ((j == 1 && t < 40) || (j == 2 && t >= 7) || j == 5)
                            S0[t * ATTN_LANES + j] = -INFINITY;
                memcpy(S1, S0, sizeof(S0));
                attn_kern_scalar.softmax(S0, N_ROWS, nv);
                sets[s]->softmax(S1, N_ROWS, nv);
                for (int t = 0; t < N_ROWS; t++)
                    for (int j = 0; j < lanes; j++)
                        assert_memory_equal(&S0[t * ATTN_LANES + j], &S1[t * ATTN_LANES + j],
                                            sizeof(float));
                /* value sums, accumulated over two calls */
                for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
                    int u0 = ranges[r][0], u1 = ranges[r][1];
                    fill(want, (size_t)hd * ATTN_LANES, 1.0f);
                    memcpy(got, want, sizeof(want));
                    for (int k = 0; k < 2; k++) {
                        attn_kern_scalar.values(want, S0 + 16 * k * ATTN_LANES, kf, u0, u1, hd, nv);
                        sets[s]->values(got, S0 + 16 * k * ATTN_LANES, kf, u0, u1, hd, nv);
                    }
                    for (int d = 0; d < hd; d++)
                        for (int j = 0; j < lanes; j++)
                            assert_memory_equal(&want[d * ATTN_LANES + j], &got[d * ATTN_LANES + j],
                                                sizeof(float));
                }
            }
            /* F16 rows to floats, and rounding to F16 */
            for (int i = 0; i < KV_BLOCK * hd + 8; i++)
                raw[i] = quant_f32_to_f16(frand() * 100.0f);
            attn_kern_scalar.rows_f32(want, raw, hd + 8, 5, hd);
            sets[s]->rows_f32(got, raw, hd + 8, 5, hd);
            assert_memory_equal(want, got, (size_t)5 * hd * sizeof(float));
            for (int i = 0; i < hd * 5; i++)
                want[i] = got[i] = frand() * 1000.0f * (i % 7 == 0 ? 1e-7f : 1.0f);
            attn_kern_scalar.round16(want, hd * 5 - 3);
            sets[s]->round16(got, hd * 5 - 3);
            assert_memory_equal(want, got, (size_t)5 * hd * sizeof(float));
        }
    }
}

/* One lane's softmax and value sums: alone over its own rows, or inside a wider range with
 * its other rows masked and other lanes busy: the same bits, in every set. */
static void test_attn_masked_rows_and_other_lanes_change_nothing(void **state)
{
    const struct attn_kern *sets[3] = {&attn_kern_scalar};
    int n_sets = 1 + vector_sets(sets + 1);
    enum { HD = 64, LO = 9, HI = 41, N = 48 };
    float kf[KV_BLOCK * HD * 3], alone[N * ATTN_LANES], wide[N * ATTN_LANES];
    float oa[HD * ATTN_LANES], ow[HD * ATTN_LANES];
    (void)state;
    fill(kf, sizeof(kf) / sizeof(kf[0]), 2.0f);
    for (int s = 0; s < n_sets; s++) {
        for (int nv = 1; nv <= 2; nv++) {
            int lane = 8 * nv - 1;
            fill(wide, (size_t)N * ATTN_LANES, 6.0f);
            memset(alone, 0, sizeof(alone));
            for (int t = 0; t < N; t++) {
                if (t < LO || t >= HI)
                    wide[t * ATTN_LANES + lane] = -INFINITY;
                else
                    alone[(t - LO) * ATTN_LANES] = wide[t * ATTN_LANES + lane];
            }
            sets[s]->softmax(alone, HI - LO, 1);
            sets[s]->softmax(wide, N, nv);
            memset(oa, 0, sizeof(oa));
            memset(ow, 0, sizeof(ow));
            /* the alone lane's rows [LO, HI) in calls of up to a block; the wide one's [0, N) */
            for (int t = LO; t < HI;) {
                int bs = t / KV_BLOCK * KV_BLOCK, e = bs + KV_BLOCK < HI ? bs + KV_BLOCK : HI;
                sets[s]->values(oa, alone + (t - LO) * ATTN_LANES, kf + (size_t)bs * HD, t - bs,
                                e - bs, HD, 1);
                t = e;
            }
            for (int bs = 0; bs < N; bs += KV_BLOCK)
                sets[s]->values(ow, wide + bs * ATTN_LANES, kf + (size_t)bs * HD, 0, KV_BLOCK,
                                HD, nv);
            for (int t = LO; t < HI; t++)
                assert_memory_equal(&alone[(t - LO) * ATTN_LANES], &wide[t * ATTN_LANES + lane],
                                    sizeof(float));
            for (int d = 0; d < HD; d++)
                assert_memory_equal(&oa[d * ATTN_LANES], &ow[d * ATTN_LANES + lane],
                                    sizeof(float));
        }
    }
}

/* The few-query forms on F16 rows with a stride and query-major scores, against scores,
 * softmax and values on the same rows converted to floats, lane-major: the same bits, every
 * set, 1..ATTN_FEW queries, head sizes the vector forms take and ones they hand to the
 * scalar twin, whole and partial blocks; softmax_q over row lengths with and without a
 * vector tail, rows masked at either end and entirely. */
static void test_attn_few_query_forms_give_the_lane_major_bits(void **state)
{
    const struct attn_kern *sets[3] = {&attn_kern_scalar};
    int n_sets = 1 + vector_sets(sets + 1);
    static const int hds[] = {64, 72, 80, 128, 8};
    /* whole and partial blocks; for the AVX2 set's two groups of 8 keys side by side, ranges
     * over both groups (either or both partial) and over one only */
    static const int ranges[][2] = {{0, 16}, {3, 16}, {0, 1},  {5, 11}, {15, 16},
                                    {0, 9},  {7, 9},  {8, 16}, {1, 15}, {0, 8}};
    enum { NS = 40 }; /* a query-major row's stride */
    (void)state;
    for (size_t h = 0; h < sizeof(hds) / sizeof(hds[0]); h++) {
        int hd = hds[h], stride = hd + 24;
        static float Qt[HD_MAX * ATTN_LANES], kf[KV_BLOCK * HD_MAX], S[(KV_BLOCK + 3) * ATTN_LANES];
        static float want[HD_MAX * ATTN_LANES], o[ATTN_FEW * HD_MAX], sq[ATTN_FEW * NS];
        static float s0[KV_BLOCK * ATTN_LANES];
        static uint16_t raw[KV_BLOCK * (HD_MAX + 24)];

        fill(Qt, (size_t)hd * ATTN_LANES, 2.0f);
        for (int i = 0; i < KV_BLOCK * stride; i++)
            raw[i] = quant_f32_to_f16(frand() * 2.0f);
        for (int u = 0; u < KV_BLOCK; u++)
            for (int d = 0; d < hd; d++)
                kf[u * hd + d] = quant_f16_to_f32(raw[u * stride + d]);
        for (int i = 0; i < (KV_BLOCK + 3) * ATTN_LANES; i++)
            S[i] = f16(fabsf(frand()));
        for (int s = 0; s < n_sets; s++)
            for (int nq = 1; nq <= ATTN_FEW; nq++)
                for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
                    int u0 = ranges[r][0], u1 = ranges[r][1];
                    attn_kern_scalar.scores(s0, Qt, kf, u0, u1, hd, 1, 0.125f);
                    for (int i = 0; i < ATTN_FEW * NS; i++)
                        sq[i] = 7.0f;
                    sets[s]->scores_f16(sq + 2, NS, Qt, raw, stride, u0, u1, hd, nq, 0.125f);
                    for (int j = 0; j < ATTN_FEW; j++)
                        for (int t = 0; t < NS; t++) {
                            int u = t - 2 + u0;
                            if (j < nq && u >= u0 && u < u1)
                                assert_memory_equal(&s0[(u - u0) * ATTN_LANES + j],
                                                    &sq[j * NS + t], sizeof(float));
                            else
                                assert_true(sq[j * NS + t] == 7.0f);
                        }
                    /* values, accumulated over two calls onto outputs already nonzero */
                    fill(want, (size_t)hd * ATTN_LANES, 1.0f);
                    for (int j = 0; j < nq; j++) {
                        for (int d = 0; d < hd; d++)
                            o[j * hd + d] = want[d * ATTN_LANES + j];
                        for (int t = 0; t < KV_BLOCK + 3; t++)
                            sq[j * NS + t] = S[t * ATTN_LANES + j];
                    }
                    for (int k = 0; k < 2; k++) {
                        attn_kern_scalar.values(want, S + 3 * k * ATTN_LANES, kf, u0, u1, hd, 1);
                        sets[s]->values_f16(o, sq + 3 * k, NS, raw, stride, u0, u1, hd, nq);
                    }
                    for (int j = 0; j < nq; j++)
                        for (int d = 0; d < hd; d++)
                            assert_memory_equal(&want[d * ATTN_LANES + j], &o[j * hd + d],
                                                sizeof(float));
                }
    }
    /* softmax_q against softmax, rows of 1 to NS positions */
    for (int s = 0; s < n_sets; s++)
        for (int nq = 1; nq <= ATTN_FEW; nq++)
            for (int n = 1; n <= NS; n += n < 18 ? 1 : 7) {
                static float lm[NS * ATTN_LANES], qm[ATTN_FEW * NS];
                fill(lm, (size_t)NS * ATTN_LANES, 8.0f);
                for (int t = 0; t < n; t++)
                    for (int j = 0; j < 8; j++) {
                        if ((j == 1 && t < n / 2) || (j == 2 && t >= 3) || j == 5)
                            lm[t * ATTN_LANES + j] = -INFINITY;
                        if (j < nq)
                            qm[j * NS + t] = lm[t * ATTN_LANES + j];
                    }
                attn_kern_scalar.softmax(lm, n, 1);
                sets[s]->softmax_q(qm, NS, n, nq);
                for (int j = 0; j < nq; j++)
                    for (int t = 0; t < n; t++)
                        assert_memory_equal(&lm[t * ATTN_LANES + j], &qm[j * NS + t],
                                            sizeof(float));
            }
}

static void test_attn_exp_is_within_2e7_of_expf(void **state)
{
    double worst = 0.0;
    (void)state;
    for (int i = 0; i <= 870000; i++) {
        float x = -(float)i * 1e-4f;
        double want = exp((double)x), got = attn_exp(x);
        double rel = fabs(got - want) / want;
        if (rel > worst)
            worst = rel;
    }
    assert_true(worst < 2e-7);
    assert_true(attn_exp(-87.5f) == 0.0f);
    assert_true(attn_exp(-INFINITY) == 0.0f);
    assert_true(attn_exp(0.0f) == 1.0f);
}

/* Each kernel set's name picks the widest attention its CPU features allow: the amx set
 * (which requires the avx512 set's features) the avx512 attention, not the 8-lane one. */
static void test_attn_each_kernel_set_picks_its_widest_attention(void **state)
{
    (void)state;
    assert_ptr_equal(attn_kern_for("scalar"), &attn_kern_scalar);
#if defined(__x86_64__)
    assert_ptr_equal(attn_kern_for("avx2"), &attn_kern_avx2);
    assert_ptr_equal(attn_kern_for("avxvnni"), &attn_kern_avx2);
    assert_ptr_equal(attn_kern_for("avx512"), &attn_kern_avx512);
    assert_ptr_equal(attn_kern_for("amx"), &attn_kern_avx512);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attn_every_set_gives_the_scalar_twins_bits),
        cmocka_unit_test(test_attn_masked_rows_and_other_lanes_change_nothing),
        cmocka_unit_test(test_attn_few_query_forms_give_the_lane_major_bits),
        cmocka_unit_test(test_attn_exp_is_within_2e7_of_expf),
        cmocka_unit_test(test_attn_each_kernel_set_picks_its_widest_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
