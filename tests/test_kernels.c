/* kernels: the scalar matmul against a float reference, every SIMD set against the scalar
 * set on random inputs (odd row and sequence counts, tiny sizes), batch-size independence
 * bit for bit, the float kernels, rope, get_rows and the run-time choice of set.
 * Tolerance for SIMD vs scalar: |y - y_ref| <= 1e-4 * sum |w_i * x_i| + 1e-6 (only the
 * float summation order differs; the integer parts are exact). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../worker/gemm.h"
#include "../worker/kernels.h"
#include "../worker/quant.h"

static const enum ggml_type wtypes[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,   GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_1,   GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
    GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_XS};
#define N_WTYPES (sizeof wtypes / sizeof wtypes[0])

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A random problem: W (rows, cols) of type t, n_seq activations, their float versions. */
struct problem {
    enum ggml_type t;
    int rows, cols, n_seq;
    struct kern_mat W;
    struct kern_act X;
    void *w, *x;
    float *wf, *xf; /* dequantized W, dequantized activations */
};

static void problem_init(struct problem *p, enum ggml_type t, int rows, int cols, int n_seq,
                         unsigned seed)
{
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    size_t rb = quant_row_bytes(t, cols), xb = kern_act_bytes(t, cols);
    assert_non_null(tmp);
    assert_true(rb > 0 && xb > 0);
    p->t = t;
    p->rows = rows;
    p->cols = cols;
    p->n_seq = n_seq;
    p->w = malloc(rb * (size_t)rows);
    p->x = malloc(xb * (size_t)n_seq);
    p->wf = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    p->xf = malloc(sizeof(float) * (size_t)n_seq * (size_t)cols);
    assert_true(p->w && p->x && p->wf && p->xf);
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            tmp[c] = frand(&seed) * 0.05f;
        assert_int_equal(quant_quantize_row(t, tmp, (char *)p->w + rb * (size_t)r, cols), 0);
        kern_get_row(t, p->w, rb, r, cols, p->wf + (size_t)r * (size_t)cols);
    }
    for (int s = 0; s < n_seq; s++) {
        char *xs = (char *)p->x + xb * (size_t)s;
        for (int c = 0; c < cols; c++)
            tmp[c] = frand(&seed) * 3.0f;
        assert_int_equal(kern_quantize_act(t, tmp, cols, xs), 0);
        assert_int_equal(quant_dequantize_row(kern_act_type(t), xs,
                                              p->xf + (size_t)s * (size_t)cols, cols),
                         0);
    }
    p->W = (struct kern_mat){t, p->w, rows, cols, rb};
    p->X = (struct kern_act){kern_act_type(t), p->x, cols, xb};
    free(tmp);
}

static void problem_free(struct problem *p)
{
    free(p->w);
    free(p->x);
    free(p->wf);
    free(p->xf);
}

static double abs_dot(const struct problem *p, int r, int s)
{
    double a = 0.0;
    for (int c = 0; c < p->cols; c++)
        a += fabs((double)p->wf[(size_t)r * p->cols + c] * p->xf[(size_t)s * p->cols + c]);
    return a;
}

static double ref_dot(const struct problem *p, int r, int s)
{
    double a = 0.0;
    for (int c = 0; c < p->cols; c++)
        a += (double)p->wf[(size_t)r * p->cols + c] * p->xf[(size_t)s * p->cols + c];
    return a;
}

static float *run(const struct kern_ops *k, const struct problem *p, int n_seq, int x_off,
                  int rb, int re)
{
    float *y = calloc((size_t)n_seq * (size_t)p->rows, sizeof(float));
    struct kern_act X = p->X;
    assert_non_null(y);
    X.data = (const char *)p->x + (size_t)x_off * X.stride;
    k->matmul(&p->W, &X, n_seq, y, p->rows, rb, re);
    return y;
}

static float *run_gemm(const struct kern_ops *k, const struct problem *p, int n_seq, int x_off,
                       int rb, int re)
{
    float *y = calloc((size_t)n_seq * (size_t)p->rows, sizeof(float));
    struct kern_act X = p->X;
    assert_non_null(y);
    X.data = (const char *)p->x + (size_t)x_off * X.stride;
    k->gemm(&p->W, &X, n_seq, y, p->rows, rb, re);
    return y;
}

static void cols_for(enum ggml_type t, int *cols, int *n)
{
    int be = quant_block_elems(t);
    if (be == 1) {
        static const int c[] = {1, 7, 16, 33, 100};
        memcpy(cols, c, sizeof c);
        *n = 5;
    } else if (be == 32) {
        static const int c[] = {32, 96, 544};
        memcpy(cols, c, sizeof c);
        *n = 3;
    } else {
        static const int c[] = {256, 768};
        memcpy(cols, c, sizeof c);
        *n = 2;
    }
}

static void test_kernels_scalar_matmul_matches_float_reference(void **state)
{
    (void)state;
    const struct kern_ops *k = kern_ops_get(KERN_SET_SCALAR);
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        int cols[5], nc;
        cols_for(wtypes[ti], cols, &nc);
        for (int ci = 0; ci < nc; ci++) {
            struct problem p;
            problem_init(&p, wtypes[ti], 5, cols[ci], 3, 7u + (unsigned)ti);
            float *y = run(k, &p, 3, 0, 0, 5);
            for (int s = 0; s < 3; s++)
                for (int r = 0; r < 5; r++) {
                    double want = ref_dot(&p, r, s), tol = 1e-4 * abs_dot(&p, r, s) + 1e-6;
                    if (!(fabs(y[s * 5 + r] - want) <= tol))
                        fail_msg("%s cols %d r %d s %d: %g want %g", quant_type_name(p.t),
                                 p.cols, r, s, y[s * 5 + r], want);
                }
            free(y);
            problem_free(&p);
        }
    }
}

static void check_set_vs_scalar(enum kern_set set)
{
    const struct kern_ops *k = kern_ops_get(set), *ref = kern_ops_get(KERN_SET_SCALAR);
    static const int seqs[] = {1, 3, 7, 8, 13};
    static const int rowss[] = {1, 5, 13};
    if (!k)
        skip();
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        int cols[5], nc;
        cols_for(wtypes[ti], cols, &nc);
        for (int ci = 0; ci < nc; ci++)
            for (size_t ri = 0; ri < 3; ri++) {
                int rows = rowss[ri];
                struct problem p;
                problem_init(&p, wtypes[ti], rows, cols[ci], 13, 99u + (unsigned)(ti * 31 + ri));
                for (size_t si = 0; si < 5; si++) {
                    int ns = seqs[si];
                    float *y = run_gemm(k, &p, ns, 0, 0, rows), *yr = run(ref, &p, ns, 0, 0, rows);
                    for (int s = 0; s < ns; s++)
                        for (int r = 0; r < rows; r++) {
                            float a = y[s * rows + r], b = yr[s * rows + r];
                            double tol = 1e-4 * abs_dot(&p, r, s) + 1e-6;
                            if (!(fabs(a - b) <= tol))
                                fail_msg("%s gemm %s cols %d rows %d n_seq %d r %d s %d: %g vs %g",
                                         k->name, quant_type_name(p.t), p.cols, rows, ns, r, s,
                                         a, b);
                        }
                    free(y);
                    free(yr);
                }
                problem_free(&p);
            }
    }
}

static void test_kernels_avx2_matmul_matches_scalar(void **state)
{
    (void)state;
    check_set_vs_scalar(KERN_SET_AVX2);
}

static void test_kernels_avx512_matmul_matches_scalar(void **state)
{
    (void)state;
    check_set_vs_scalar(KERN_SET_AVX512);
}

static void test_kernels_avxvnni_matmul_matches_scalar(void **state)
{
    (void)state;
    check_set_vs_scalar(KERN_SET_AVXVNNI);
}

/* vpdpbusd/vpdpwssd give the integer sums maddubs + madd give, in the same lanes, and the
 * float steps are the avx2 set's: the same bits for every type, row and sequence. */
static void test_kernels_avxvnni_matmul_equals_avx2_bit_for_bit(void **state)
{
    (void)state;
    const struct kern_ops *k = kern_ops_get(KERN_SET_AVXVNNI), *ref = kern_ops_get(KERN_SET_AVX2);
    if (!k)
        skip();
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        int cols[5], nc;
        cols_for(wtypes[ti], cols, &nc);
        for (int ci = 0; ci < nc; ci++) {
            struct problem p;
            problem_init(&p, wtypes[ti], 13, cols[ci], 13, 41u + (unsigned)ti);
            float *y = run(k, &p, 13, 0, 0, 13), *yr = run(ref, &p, 13, 0, 0, 13);
            if (memcmp(y, yr, sizeof(float) * 13 * 13) != 0)
                fail_msg("%s cols %d: avxvnni differs from avx2", quant_type_name(p.t),
                         p.cols);
            free(y);
            free(yr);
            problem_free(&p);
        }
    }
}

/* Q4_K and Q6_K decode rows on AVX-512 run the avx2 set's chain (exact integer sums per
 * superblock, then one float step each), whether a row meets 1 to 7 sequences (row tiles) or
 * 8 to 16 (lane = sequence): the same bits as the avx2 set for every row and sequence. */
static void test_kernels_avx512_k_quant_rows_equal_avx2_bit_for_bit(void **state)
{
    (void)state;
    static const enum ggml_type kt[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    static const int seqs[] = {1, 5, 8, 13, 16};
    static const int colss[] = {256, 768, 2048 + 256};
    const struct kern_ops *k = kern_ops_get(KERN_SET_AVX512), *ref = kern_ops_get(KERN_SET_AVX2);
    if (!k)
        skip();
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ci = 0; ci < 3; ci++) {
            int rows = 19;
            struct problem p;
            problem_init(&p, kt[ti], rows, colss[ci], 16, 17u + (unsigned)(ti * 3 + ci));
            for (size_t si = 0; si < 5; si++) {
                int ns = seqs[si];
                float *y = run(k, &p, ns, 0, 0, rows), *yr = run(ref, &p, ns, 0, 0, rows);
                for (int i = 0; i < ns * rows; i++)
                    if (memcmp(&y[i], &yr[i], sizeof(float)))
                        fail_msg("%s cols %d n_seq %d r %d s %d: avx512 %a avx2 %a",
                                 quant_type_name(p.t), p.cols, ns, i % rows, i / rows,
                                 (double)y[i], (double)yr[i]);
                free(y);
                free(yr);
            }
            problem_free(&p);
        }
}

/* At one sequence AVX-512 runs Q4_K and Q6_K rows in groups of four from the call's first
 * row (their sums reduced together) and single rows after: a row's bits do not depend on
 * where a call starts or which group it falls in. */
static void test_kernels_avx512_one_sequence_k_rows_same_bits_from_any_first_row(void **state)
{
    (void)state;
    static const enum ggml_type kt[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    const struct kern_ops *k = kern_ops_get(KERN_SET_AVX512), *ref = kern_ops_get(KERN_SET_AVX2);
    if (!k)
        skip();
    for (size_t ti = 0; ti < 2; ti++) {
        int rows = 13;
        struct problem p;
        problem_init(&p, kt[ti], rows, 3 * 256, 1, 41u + (unsigned)ti);
        float *whole = run(k, &p, 1, 0, 0, rows), *yr = run(ref, &p, 1, 0, 0, rows);
        assert_memory_equal(whole, yr, sizeof(float) * (size_t)rows);
        for (int r0 = 1; r0 < 4; r0++) {
            float *y = run(k, &p, 1, 0, r0, rows);
            struct kern_act X = p.X;
            k->matmul(&p.W, &X, 1, y, rows, 0, r0);
            assert_memory_equal(y, whole, sizeof(float) * (size_t)rows);
            free(y);
        }
        free(whole);
        free(yr);
        problem_free(&p);
    }
}

/* At one sequence the AVX2 sets run Q4_K, Q5_K and Q6_K rows four at a time from the call's
 * first row, then two, then one: a row's bits do not depend on where a call starts or which
 * group it falls in, and are those of the avx2 set's tile of four sequences. */
static void check_one_sequence_k_rows_any_grouping(enum kern_set set)
{
    static const enum ggml_type kt[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    const struct kern_ops *k = kern_ops_get(set), *ref = kern_ops_get(KERN_SET_AVX2);
    const int rows = 15;
    if (!k)
        skip();
    for (size_t ti = 0; ti < 3; ti++) {
        struct problem p;
        problem_init(&p, kt[ti], rows, 3 * 256, 4, 61u + (unsigned)ti);
        struct kern_act X = p.X;
        float *whole = run(k, &p, 1, 0, 0, rows), *tile = run(ref, &p, 4, 0, 0, rows);
        assert_memory_equal(whole, tile, sizeof(float) * (size_t)rows);
        for (int r0 = 1; r0 < 8; r0++) {
            float *y = run(k, &p, 1, 0, r0, rows);
            k->matmul(&p.W, &X, 1, y, rows, 0, r0);
            assert_memory_equal(y, whole, sizeof(float) * (size_t)rows);
            free(y);
        }
        for (int r = 0; r < rows; r++) {
            float *y = run(k, &p, 1, 0, r, r + 1);
            assert_memory_equal(&y[r], &whole[r], sizeof(float));
            free(y);
        }
        free(whole);
        free(tile);
        problem_free(&p);
    }
}

static void test_kernels_avx2_one_sequence_k_rows_same_bits_in_any_row_group(void **state)
{
    (void)state;
    check_one_sequence_k_rows_any_grouping(KERN_SET_AVX2);
}

static void test_kernels_avxvnni_one_sequence_k_rows_same_bits_in_any_row_group(void **state)
{
    (void)state;
    check_one_sequence_k_rows_any_grouping(KERN_SET_AVXVNNI);
}

/* One sequence alone, in a batch of 8 or 13, or with the rows split across two calls: the
 * same float bits. */
static void check_batch_independent(enum kern_set set)
{
    const struct kern_ops *k = kern_ops_get(set);
    if (!k)
        skip();
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        int cols[5], nc;
        cols_for(wtypes[ti], cols, &nc);
        int c = cols[nc - 1], rows = 11;
        struct problem p;
        problem_init(&p, wtypes[ti], rows, c, 13, 5u + (unsigned)ti);
        float *y8 = run(k, &p, 8, 0, 0, rows), *y13 = run(k, &p, 13, 0, 0, rows);
        float *split = run(k, &p, 13, 0, 0, 4);
        struct kern_act X = p.X;
        k->matmul(&p.W, &X, 13, split, rows, 4, rows);
        assert_memory_equal(split, y13, sizeof(float) * 13 * (size_t)rows);
        for (int s = 0; s < 13; s++) {
            float *y1 = run(k, &p, 1, s, 0, rows);
            if (s < 8)
                assert_memory_equal(y1, y8 + s * rows, sizeof(float) * (size_t)rows);
            assert_memory_equal(y1, y13 + s * rows, sizeof(float) * (size_t)rows);
            free(y1);
        }
        free(y8);
        free(y13);
        free(split);
        problem_free(&p);
    }
}

/* The avx512 set's one-sequence-tile rows of Q4_0, Q5_0 and IQ4_NL take a VBMI/BITALG path
 * where the CPU has them: the same bits with it and on the F/BW/VL/VNNI path
 * (kern_gemm_avx512_vbmi(0)) for whole and partial 16-row groups, row ranges starting inside
 * a group and ending at the matrix's end, odd block counts and 1 to 8 sequences (Q8_0, which
 * keeps one path, too); and the F/BW/VL/VNNI path still matches the scalar set and does not
 * depend on the batch. (On a CPU without VBMI both runs take the same path.) */
static void test_kernels_avx512_vbmi_rows_give_the_bits_of_the_base_rows(void **state)
{
    (void)state;
    static const enum ggml_type vt[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_IQ4_NL,
                                        GGML_TYPE_Q8_0};
    static const int cols[] = {32, 96, 576, 1088};
    static const int seqs[] = {1, 2, 3, 4, 5, 8};
    const struct kern_ops *k = kern_ops_get(KERN_SET_AVX512);
    if (!k)
        skip();
    for (size_t ti = 0; ti < sizeof vt / sizeof vt[0]; ti++)
        for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
            int rows = 37;
            struct problem p;
            problem_init(&p, vt[ti], rows, cols[ci], 8, 61u + (unsigned)(ti * 7 + ci));
            for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
                for (int r0 = 0; r0 < 6; r0 += 5) {
                    int ns = seqs[si];
                    kern_gemm_avx512_vbmi(1);
                    float *y = run(k, &p, ns, 0, r0, rows);
                    kern_gemm_avx512_vbmi(0);
                    float *yb = run(k, &p, ns, 0, r0, rows);
                    kern_gemm_avx512_vbmi(1);
                    if (memcmp(y, yb, sizeof(float) * (size_t)ns * (size_t)rows) != 0)
                        fail_msg("%s cols %d n_seq %d rows from %d: vbmi and base rows differ",
                                 quant_type_name(p.t), p.cols, ns, r0);
                    free(y);
                    free(yb);
                }
            problem_free(&p);
        }
    kern_gemm_avx512_vbmi(0);
    check_set_vs_scalar(KERN_SET_AVX512);
    check_batch_independent(KERN_SET_AVX512);
    kern_gemm_avx512_vbmi(1);
}

/* Every count of 8 to 16 decode sequences (the lane-per-sequence kernels: one or two vectors
 * of 8 on AVX2, gemm_avx2_cols.c) gives each sequence the bits it gets alone and stays within
 * the tolerance of the scalar set, with a row count that leaves partial row groups, and rows
 * longer than those kernels take (beyond 16384 elements, the other path). The lane kernel,
 * called itself, takes every listed type at the shorter rows (Q6_K from 9 sequences) and
 * gives those bits too. */
static void check_decode_counts(enum kern_set set)
{
    static const enum ggml_type ts[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0,
                                        GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    const struct kern_ops *k = kern_ops_get(set), *ref = kern_ops_get(KERN_SET_SCALAR);
    int (*lane)(const struct kern_mat *, const struct kern_act *, int, float *, int, int, int) =
        set == KERN_SET_AVX2 ? kern_gemm_avx2_cols : kern_gemm_avxvnni_cols;
    const int rows = 13;
    if (!k)
        skip();
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
        int be = quant_block_elems(ts[ti]);
        int cols[2] = {be == 32 ? 544 : 768, 16384 + be};
        for (int ci = 0; ci < 2; ci++) {
            struct problem p;
            problem_init(&p, ts[ti], rows, cols[ci], 16, 17u + (unsigned)ti);
            float *yr = run(ref, &p, 16, 0, 0, rows);
            float *alone = calloc((size_t)16 * rows, sizeof(float));
            assert_non_null(alone);
            for (int s = 0; s < 16; s++) {
                float *y1 = run(k, &p, 1, s, 0, rows);
                memcpy(alone + (size_t)s * rows, y1, sizeof(float) * (size_t)rows);
                free(y1);
            }
            for (int n = 8; n <= 16; n++) {
                float *y = run(k, &p, n, 0, 0, rows);
                for (int i = 0; i < n * rows; i++) {
                    double tol = 1e-4 * abs_dot(&p, i % rows, i / rows) + 1e-6;
                    if (memcmp(&y[i], &alone[i], sizeof(float)) != 0 ||
                        !(fabs(y[i] - yr[i]) <= tol))
                        fail_msg("%s %s cols %d n_seq %d r %d s %d: %a, alone %a, scalar %a",
                                 k->name, quant_type_name(p.t), p.cols, n, i % rows, i / rows,
                                 (double)y[i], (double)alone[i], (double)yr[i]);
                }
                if (ci == 0 && (p.t != GGML_TYPE_Q6_K || n > 8)) {
                    struct kern_act X = p.X;
                    memset(y, 0, sizeof(float) * (size_t)n * rows);
                    if (lane(&p.W, &X, n, y, rows, 0, rows) != 0)
                        fail_msg("%s %s n_seq %d: the lane kernel did not take it", k->name,
                                 quant_type_name(p.t), n);
                    assert_memory_equal(y, alone, sizeof(float) * (size_t)n * rows);
                }
                free(y);
            }
            free(alone);
            free(yr);
            problem_free(&p);
        }
    }
}

static void test_kernels_avx2_decode_of_8_to_16_sequences_matches_one_at_a_time(void **state)
{
    (void)state;
    check_decode_counts(KERN_SET_AVX2);
}

static void test_kernels_avxvnni_decode_of_8_to_16_sequences_matches_one_at_a_time(void **state)
{
    (void)state;
    check_decode_counts(KERN_SET_AVXVNNI);
}

/* One-sequence Q4_0/Q5_0/Q8_0 rows (eight rows a call, Q5_0 two blocks a step with an odd
 * last block alone) give each sequence the bits of a 4-sequence tile: for 1 to 4 blocks, 17
 * and 18, and past one 512-block pass (the second pass starting at block 512 with a pair
 * and an odd block), over 17 rows (two groups of 8 and one row) and from row 3 on. */
static void check_one_seq_b32_rows(enum kern_set set)
{
    static const enum ggml_type ts[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0};
    static const int nbs[] = {1, 2, 3, 4, 17, 18, 515};
    const struct kern_ops *k = kern_ops_get(set);
    const int rows = 17;
    if (!k)
        skip();
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++)
        for (size_t bi = 0; bi < sizeof nbs / sizeof nbs[0]; bi++) {
            struct problem p;
            problem_init(&p, ts[ti], rows, 32 * nbs[bi], 4, 61u + (unsigned)(ti * 7 + bi));
            float *y4 = run(k, &p, 4, 0, 0, rows);
            for (int s = 0; s < 4; s++)
                for (int r0 = 0; r0 <= 3; r0 += 3) {
                    float *y1 = run(k, &p, 1, s, r0, rows);
                    for (int r = r0; r < rows; r++)
                        if (memcmp(&y1[r], &y4[s * rows + r], sizeof(float)) != 0)
                            fail_msg("%s %s blocks %d s %d r %d (from row %d): %a vs %a",
                                     k->name, quant_type_name(p.t), nbs[bi], s, r, r0,
                                     (double)y1[r], (double)y4[s * rows + r]);
                    free(y1);
                }
            free(y4);
            problem_free(&p);
        }
}

static void test_kernels_avx2_one_sequence_b32_rows_give_the_tile_bits(void **state)
{
    (void)state;
    check_one_seq_b32_rows(KERN_SET_AVX2);
}

static void test_kernels_avxvnni_one_sequence_b32_rows_give_the_tile_bits(void **state)
{
    (void)state;
    check_one_seq_b32_rows(KERN_SET_AVXVNNI);
}

/* Q8_0 weights whose codes are random bytes (-128 included, which quantizing never gives),
 * with some blocks all -128, all 127 or alternating the two (the extremes of a block's code
 * sum, from which plain AVX2 takes its zero point per row and block), and some scales zero,
 * subnormal, at the ends of the normal range or infinite (which plain AVX2 converts in general
 * registers at 16 sequences), in a group of eight rows and a tail of five: 8 to 16 decode
 * sequences still give each sequence the bits it gets alone (the lane kernels' int16 partial
 * sums stay exact over every code). */
static void check_decode_q8_0_every_code(enum kern_set set)
{
    const struct kern_ops *k = kern_ops_get(set);
    const int rows = 13, cols = 544;
    struct problem p;
    unsigned seed = 7u;
    if (!k)
        skip();
    problem_init(&p, GGML_TYPE_Q8_0, rows, cols, 16, 41u);
    struct quant_block_q8_0 *b = p.w;
    for (size_t i = 0; i < quant_row_bytes(p.t, cols) * rows / sizeof *b; i++)
        for (int l = 0; l < QUANT_QK; l++) {
            seed = seed * 1103515245u + 12345u;
            b[i].qs[l] = (int8_t)(seed >> 16);
        }
    const int nb = cols / QUANT_QK;
    for (int l = 0; l < QUANT_QK; l++) {
        b[2 * nb + 0].qs[l] = -128;
        b[5 * nb + 16].qs[l] = 127;
        b[9 * nb + 1].qs[l] = (int8_t)(l & 1 ? 127 : -128);
        b[12 * nb + 3].qs[l] = -128;
    }
    static const struct {
        int row, block;
        uint16_t d;
    } scales[] = {
        {1, 0, 0x0000},  {3, 4, 0x8000},  {4, 7, 0x0001},  {6, 16, 0x83FF}, {7, 2, 0x0400},
        {0, 5, 0xFBFF},  {10, 5, 0x7BFF}, {8, 3, 0x0200},  {11, 9, 0x8400}, {12, 10, 0x7C00},
        {2, 11, 0xFC00}, {9, 0, 0x0000},
    };
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++)
        b[scales[i].row * nb + scales[i].block].d = scales[i].d;
    float *alone = calloc((size_t)16 * rows, sizeof(float));
    assert_non_null(alone);
    for (int s = 0; s < 16; s++) {
        float *y1 = run(k, &p, 1, s, 0, rows);
        memcpy(alone + (size_t)s * rows, y1, sizeof(float) * (size_t)rows);
        free(y1);
    }
    for (int n = 8; n <= 16; n++) {
        float *y = run(k, &p, n, 0, 0, rows);
        for (int i = 0; i < n * rows; i++)
            if (memcmp(&y[i], &alone[i], sizeof(float)) != 0)
                fail_msg("%s Q8_0 (random codes) n_seq %d r %d s %d: %a, alone %a", k->name, n,
                         i % rows, i / rows, (double)y[i], (double)alone[i]);
        free(y);
    }
    free(alone);
    problem_free(&p);
}

static void test_kernels_avx2_decode_of_q8_0_takes_every_code(void **state)
{
    (void)state;
    check_decode_q8_0_every_code(KERN_SET_AVX2);
}

static void test_kernels_avxvnni_decode_of_q8_0_takes_every_code(void **state)
{
    (void)state;
    check_decode_q8_0_every_code(KERN_SET_AVXVNNI);
}

static void test_kernels_scalar_batching_changes_nothing(void **state)
{
    (void)state;
    check_batch_independent(KERN_SET_SCALAR);
}

static void test_kernels_avx2_batching_changes_nothing(void **state)
{
    (void)state;
    check_batch_independent(KERN_SET_AVX2);
}

static void test_kernels_avx512_batching_changes_nothing(void **state)
{
    (void)state;
    check_batch_independent(KERN_SET_AVX512);
}

/* gemm (the prompt rows' product, tiled): against the scalar set within the tolerance, for
 * row counts that leave partial 16- and 32-row groups, K beyond one cache chunk (1024) and
 * sequence counts from one to beyond one chunk with a partial tile; and a sequence's result
 * is the same bits alone, in a call of 32 or of 70 sequences, or with the rows split across
 * two calls. */
static void check_gemm(enum kern_set set)
{
    const struct kern_ops *k = kern_ops_get(set), *ref = kern_ops_get(KERN_SET_SCALAR);
    static const int seqs[] = {3, 70};
    static const int rowss[] = {5, 37};
    if (!k)
        skip();
    for (size_t ti = 3; ti < N_WTYPES; ti++) {
        int be = quant_block_elems(wtypes[ti]);
        int cols[2] = {be == 32 ? 96 : 256, be == 32 ? 1024 + 64 : 1024 + 256};
        for (int ci = 0; ci < 2; ci++)
            for (size_t ri = 0; ri < 2; ri++) {
                int rows = rowss[ri];
                struct problem p;
                problem_init(&p, wtypes[ti], rows, cols[ci], 70, 7u + (unsigned)(ti * 5 + ri));
                float *y70 = NULL;
                for (size_t si = 0; si < 2; si++) {
                    int ns = seqs[si];
                    float *y = run_gemm(k, &p, ns, 0, 0, rows), *yr = run(ref, &p, ns, 0, 0, rows);
                    for (int s = 0; s < ns; s++)
                        for (int r = 0; r < rows; r++) {
                            float a = y[s * rows + r], b = yr[s * rows + r];
                            double tol = 1e-4 * abs_dot(&p, r, s) + 1e-6;
                            if (!(fabs(a - b) <= tol))
                                fail_msg("%s gemm %s cols %d rows %d n_seq %d r %d s %d: %g vs %g",
                                         k->name, quant_type_name(p.t), p.cols, rows, ns, r, s,
                                         a, b);
                        }
                    if (ns == 70)
                        y70 = y;
                    else
                        free(y);
                    free(yr);
                }
                int cut = rows > 16 ? 16 : 2;
                float *y32 = run_gemm(k, &p, 32, 38, 0, rows), *split = run_gemm(k, &p, 70, 0, 0, cut);
                struct kern_act X = p.X;
                k->gemm(&p.W, &X, 70, split, rows, cut, rows);
                assert_memory_equal(y32, y70 + 38 * rows, sizeof(float) * 32 * (size_t)rows);
                for (int s = 0; s < 70; s += 23) {
                    float *y1 = run_gemm(k, &p, 1, s, 0, rows);
                    assert_memory_equal(y1, y70 + s * rows, sizeof(float) * (size_t)rows);
                    free(y1);
                }
                assert_memory_equal(split, y70, sizeof(float) * 70 * (size_t)rows);
                free(y32);
                free(split);
                free(y70);
                problem_free(&p);
            }
    }
}

static void test_kernels_scalar_gemm_matches_scalar_and_batching_changes_nothing(void **state)
{
    (void)state;
    check_gemm(KERN_SET_SCALAR);
}

static void test_kernels_avx2_gemm_matches_scalar_and_batching_changes_nothing(void **state)
{
    (void)state;
    check_gemm(KERN_SET_AVX2);
}

static void test_kernels_avx512_gemm_matches_scalar_and_batching_changes_nothing(void **state)
{
    (void)state;
    check_gemm(KERN_SET_AVX512);
}

static void test_kernels_avxvnni_gemm_matches_scalar_and_batching_changes_nothing(void **state)
{
    (void)state;
    check_gemm(KERN_SET_AVXVNNI);
}

/* A row's result is the same bits through gemm (prompt rows) and matmul (decode rows) on a
 * set, for every type, row counts leaving partial tiles, K beyond one cache chunk and 1 to 13
 * sequences, and 37 (the AVX2 GEMM's tiles take 32 and more): the KV cache shares positions
 * whichever of the two computed them. */
static void check_gemm_equals_matmul(enum kern_set set)
{
    const struct kern_ops *k = kern_ops_get(set);
    static const int seqs[] = {1, 3, 8, 13, 37};
    static const int rowss[] = {5, 19};
    if (!k)
        skip();
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        int be = quant_block_elems(wtypes[ti]);
        int cols[2] = {be == 1 ? 100 : be == 32 ? 96 : 256,
                       be == 1 ? 1100 : be == 32 ? 1024 + 64 : 2048 + 256};
        for (int ci = 0; ci < 2; ci++)
            for (size_t ri = 0; ri < 2; ri++) {
                int rows = rowss[ri];
                struct problem p;
                problem_init(&p, wtypes[ti], rows, cols[ci], 37, 3u + (unsigned)(ti * 7 + ri));
                for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++) {
                    int ns = seqs[si];
                    float *y = run_gemm(k, &p, ns, 0, 0, rows), *ym = run(k, &p, ns, 0, 0, rows);
                    for (int i = 0; i < ns * rows; i++)
                        if (memcmp(&y[i], &ym[i], sizeof(float)))
                            fail_msg("%s %s cols %d rows %d n_seq %d r %d s %d: gemm %a matmul %a",
                                     k->name, quant_type_name(p.t), p.cols, rows, ns, i % rows,
                                     i / rows, y[i], ym[i]);
                    free(y);
                    free(ym);
                }
                problem_free(&p);
            }
    }
}

/* The AVX2 and AVX-VNNI prompt GEMMs tile every quantized type listed from 32 sequences on
 * (they return 0, not -1 for a fallback to matmul) and leave fewer to matmul; the checks above
 * hold their results to the scalar set and to their own matmul. */
static void check_gemm_tiles(enum kern_set set)
{
    static const enum ggml_type tiled[] = {
        GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q5_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_K,
        GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q3_K, GGML_TYPE_Q2_K};
    if (!kern_ops_get(set))
        skip();
    for (size_t ti = 0; ti < sizeof tiled / sizeof tiled[0]; ti++) {
        struct problem p;
        problem_init(&p, tiled[ti], 9, 256, 32, 5u + (unsigned)ti);
        float *y = calloc(32 * 9, sizeof(float));
        assert_non_null(y);
        int rc = set == KERN_SET_AVX2 ? kern_gemm_avx2(&p.W, &p.X, 32, y, 9, 0, 9)
                                      : kern_gemm_avxvnni(&p.W, &p.X, 32, y, 9, 0, 9);
        if (rc != 0)
            fail_msg("%s gemm does not tile %s", kern_ops_get(set)->name, quant_type_name(p.t));
        rc = set == KERN_SET_AVX2 ? kern_gemm_avx2(&p.W, &p.X, 31, y, 9, 0, 9)
                                  : kern_gemm_avxvnni(&p.W, &p.X, 31, y, 9, 0, 9);
        if (rc != -1)
            fail_msg("%s gemm tiles %s for 31 sequences (matmul is cheaper there)",
                     kern_ops_get(set)->name, quant_type_name(p.t));
        free(y);
        problem_free(&p);
    }
    /* Q8_0 wider than the decode kernel takes (gemm_avx2_cols.c, at most 16384 columns; a
     * Qwen2.5-7B ffn_down has 18944): still tiled, and the bits of matmul */
    const struct kern_ops *k = kern_ops_get(set);
    struct problem p;
    problem_init(&p, GGML_TYPE_Q8_0, 3, 16384 + 32, 32, 11u);
    float *y = calloc(32 * 3, sizeof(float));
    assert_non_null(y);
    int rc = set == KERN_SET_AVX2 ? kern_gemm_avx2(&p.W, &p.X, 32, y, 3, 0, 3)
                                  : kern_gemm_avxvnni(&p.W, &p.X, 32, y, 3, 0, 3);
    if (rc != 0)
        fail_msg("%s gemm does not tile Q8_0 of %d columns", k->name, p.cols);
    float *ym = run(k, &p, 32, 0, 0, 3);
    for (int i = 0; i < 32 * 3; i++)
        if (memcmp(&y[i], &ym[i], sizeof(float)))
            fail_msg("%s Q8_0 cols %d r %d s %d: gemm %a matmul %a", k->name, p.cols, i % 3,
                     i / 3, y[i], ym[i]);
    free(ym);
    free(y);
    problem_free(&p);
}

static void test_kernels_avx2_gemm_tiles_every_listed_type(void **state)
{
    (void)state;
    check_gemm_tiles(KERN_SET_AVX2);
}

static void test_kernels_avxvnni_gemm_tiles_every_listed_type(void **state)
{
    (void)state;
    check_gemm_tiles(KERN_SET_AVXVNNI);
}

static void test_kernels_avx2_gemm_and_matmul_give_the_same_bits(void **state)
{
    (void)state;
    check_gemm_equals_matmul(KERN_SET_AVX2);
}

static void test_kernels_avxvnni_gemm_and_matmul_give_the_same_bits(void **state)
{
    (void)state;
    check_gemm_equals_matmul(KERN_SET_AVXVNNI);
}

/* A prompt row (gemm) and a decode row (matmul) of the same input are the same bits, for
 * every type the set says agree (rows_agree; the scalar, AVX2 and AVX-VNNI sets: all;
 * AVX-512 and AMX: all but Q5_K and IQ4_XS): gemm over a batch of 1, 5, 16 or 70 sequences starting at
 * several offsets, over all rows or from a row inside a tile group, against matmul of each
 * sequence alone and of the whole batch (the KV cache shares positions computed either
 * way). */
static void check_rows_agree(enum kern_set set)
{
    const struct kern_ops *k = kern_ops_get(set);
    static const int seqs[] = {1, 5, 16, 70};
    static const int offs[] = {0, 3, 9};
    if (!k)
        skip();
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        int be = quant_block_elems(wtypes[ti]);
        int cols = be == 1 ? 100 : be == 32 ? 1024 + 96 : 1024 + 256, rows = 37;
        if ((set != KERN_SET_AVX512 && set != KERN_SET_AMX) || be < 256 ||
            wtypes[ti] == GGML_TYPE_Q4_K || wtypes[ti] == GGML_TYPE_Q6_K)
            assert_true(k->rows_agree(wtypes[ti]));
        if (!k->rows_agree(wtypes[ti]))
            continue;
        struct problem p;
        problem_init(&p, wtypes[ti], rows, cols, 79, 11u + (unsigned)ti);
        float *alone = run(k, &p, 79, 0, 0, rows);
        for (int s = 0; s < 79; s++) {
            float *y1 = run(k, &p, 1, s, 0, rows);
            memcpy(alone + (size_t)s * rows, y1, sizeof(float) * (size_t)rows);
            free(y1);
        }
        for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
            for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++)
                for (int rb = 0; rb <= 7; rb += 7) {
                    int ns = seqs[si], o = offs[oi];
                    float *yg = run_gemm(k, &p, ns, o, rb, rows), *ym = run(k, &p, ns, o, rb, rows);
                    for (int s = 0; s < ns; s++)
                        for (int r = rb; r < rows; r++) {
                            float g = yg[s * rows + r], m = alone[(size_t)(o + s) * rows + r];
                            if (memcmp(&g, &m, sizeof g) != 0 ||
                                memcmp(&ym[s * rows + r], &m, sizeof m) != 0)
                                fail_msg("%s %s: gemm %a, matmul %a, matmul alone %a (n_seq %d "
                                         "from %d, rows from %d, r %d s %d)",
                                         k->name, quant_type_name(p.t), (double)g,
                                         (double)ym[s * rows + r], (double)m, ns, o, rb, r, s);
                        }
                    free(yg);
                    free(ym);
                }
        free(alone);
        problem_free(&p);
    }
}

static void test_kernels_scalar_gemm_rows_equal_matmul_rows(void **state)
{
    (void)state;
    check_rows_agree(KERN_SET_SCALAR);
}

static void test_kernels_avx2_gemm_rows_equal_matmul_rows(void **state)
{
    (void)state;
    check_rows_agree(KERN_SET_AVX2);
}

static void test_kernels_avxvnni_gemm_rows_equal_matmul_rows(void **state)
{
    (void)state;
    check_rows_agree(KERN_SET_AVXVNNI);
}

static void test_kernels_avx512_gemm_rows_equal_matmul_rows(void **state)
{
    (void)state;
    check_rows_agree(KERN_SET_AVX512);
}

static void test_kernels_avxvnni_batching_changes_nothing(void **state)
{
    (void)state;
    check_batch_independent(KERN_SET_AVXVNNI);
}

static void test_kernels_amx_matmul_matches_scalar(void **state)
{
    (void)state;
    check_set_vs_scalar(KERN_SET_AMX);
}

static void test_kernels_amx_batching_changes_nothing(void **state)
{
    (void)state;
    check_batch_independent(KERN_SET_AMX);
}

static void test_kernels_amx_gemm_matches_scalar_and_batching_changes_nothing(void **state)
{
    (void)state;
    check_gemm(KERN_SET_AMX);
}

static void test_kernels_amx_gemm_rows_equal_matmul_rows(void **state)
{
    (void)state;
    check_rows_agree(KERN_SET_AMX);
}

/* The amx set's tiles give the avx512 set's bits: matmul and gemm of Q8_0 (and every other
 * type, which the avx512 kernels run), for whole and partial 16-row groups, a row range
 * starting inside a group, even and odd block counts, K beyond 1024, and 1 to 300 sequences
 * (past one sequence chunk of the tiles' panels); and within the tolerance of the scalar set. */
static void test_kernels_amx_gives_the_avx512_bits(void **state)
{
    const struct kern_ops *k = kern_ops_get(KERN_SET_AMX), *ref = kern_ops_get(KERN_SET_AVX512),
                          *sc = kern_ops_get(KERN_SET_SCALAR);
    static const int colss[] = {64, 96, 1024 + 96};
    static const int seqs[] = {1, 4, 8, 13, 16, 17, 40, 300};
    (void)state;
    if (!k)
        skip();
    for (size_t ti = 3; ti < N_WTYPES; ti++)
        for (size_t ci = 0; ci < 3; ci++) {
            int be = quant_block_elems(wtypes[ti]), rows = 53;
            int cols = be == 32 ? colss[ci] : 256 * (int)(ci + 1);
            if (wtypes[ti] != GGML_TYPE_Q8_0 && ci > 0)
                continue;
            struct problem p;
            problem_init(&p, wtypes[ti], rows, cols, 300, 17u + (unsigned)(ti * 3 + ci));
            for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
                for (int rb = 0; rb <= 7; rb += 7) {
                    int ns = seqs[si];
                    float *y[4] = {run(k, &p, ns, 0, rb, rows), run_gemm(k, &p, ns, 0, rb, rows),
                                   run(ref, &p, ns, 0, rb, rows),
                                   run_gemm(ref, &p, ns, 0, rb, rows)};
                    float *ys = ns <= 17 ? run(sc, &p, ns, 0, rb, rows) : NULL;
                    for (int s = 0; s < ns; s++)
                        for (int r = rb; r < rows; r++) {
                            size_t i = (size_t)s * rows + r;
                            if (memcmp(&y[0][i], &y[2][i], sizeof(float)) ||
                                memcmp(&y[1][i], &y[3][i], sizeof(float)))
                                fail_msg("%s cols %d n_seq %d rows from %d, r %d s %d: amx %a/%a, "
                                         "avx512 %a/%a (matmul/gemm)",
                                         quant_type_name(p.t), cols, ns, rb, r, s, (double)y[0][i],
                                         (double)y[1][i], (double)y[2][i], (double)y[3][i]);
                            if (ys && !(fabs(y[0][i] - ys[i]) <= 1e-4 * abs_dot(&p, r, s) + 1e-6))
                                fail_msg("%s cols %d n_seq %d r %d s %d: amx %g, scalar %g",
                                         quant_type_name(p.t), cols, ns, r, s, y[0][i], ys[i]);
                        }
                    for (int i = 0; i < 4; i++)
                        free(y[i]);
                    free(ys);
                }
            problem_free(&p);
        }
}

/* Q4_K and Q6_K weights of random bytes (every code, scale and min, Q6_K scales -128 to 127)
 * but finite f16 scales, so the tiles meet the whole range of the integers they form. */
static void k_random_bytes(struct problem *p, unsigned seed)
{
    size_t rb = quant_row_bytes(p->t, p->cols), bb = p->t == GGML_TYPE_Q4_K
                                                         ? sizeof(struct quant_block_q4_k)
                                                         : sizeof(struct quant_block_q6_k);
    uint8_t *w = p->w;
    for (size_t i = 0; i < rb * (size_t)p->rows; i++) {
        seed = seed * 1103515245u + 12345u;
        w[i] = (uint8_t)(seed >> 16);
    }
    for (size_t o = 0; o < rb * (size_t)p->rows; o += bb) {
        uint16_t d = quant_f32_to_f16(0.001f + 0.0001f * (float)(o / bb % 7));
        uint16_t dm = quant_f32_to_f16(0.0005f);
        if (p->t == GGML_TYPE_Q4_K) {
            memcpy(w + o + offsetof(struct quant_block_q4_k, d), &d, sizeof d);
            memcpy(w + o + offsetof(struct quant_block_q4_k, dmin), &dm, sizeof dm);
        } else {
            memcpy(w + o + offsetof(struct quant_block_q6_k, d), &d, sizeof d);
        }
    }
}

/* Q4_K and Q6_K on the amx set's tiles (kern_gemm_amx_k computes every whole group of 16
 * rows; the set's gemm takes it from 64 sequences) give the avx512 set's bits, and so do the
 * set's matmul and gemm: quantized rows and rows of random bytes (every scale and min), 1 to
 * 64 superblocks (64: several sequence chunks of the panels), whole and partial row groups,
 * a row range starting inside a group, 8 to 300 sequences. */
static void test_kernels_amx_k_quant_tiles_give_the_avx512_bits(void **state)
{
    const struct kern_ops *k = kern_ops_get(KERN_SET_AMX), *ref = kern_ops_get(KERN_SET_AVX512);
    static const enum ggml_type kt[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    static const int nbs[] = {1, 3, 64};
    static const int seqs[] = {8, 9, 17, 64, 65, 300};
    (void)state;
    if (!k)
        skip();
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t bi = 0; bi < 3; bi++)
            for (int raw = 0; raw <= 1; raw++) {
                int rows = 53, cols = 256 * nbs[bi];
                struct problem p;
                problem_init(&p, kt[ti], rows, cols, 300,
                             29u + (unsigned)(ti * 6 + bi * 2) + (unsigned)raw);
                if (raw)
                    k_random_bytes(&p, 5u + (unsigned)bi);
                for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
                    for (int rb = 0; rb <= 7; rb += 7) {
                        int ns = seqs[si];
                        if (nbs[bi] == 64 && ns != 9 && ns != 300)
                            continue;
                        float *y[5] = {run(k, &p, ns, 0, rb, rows),
                                       run_gemm(k, &p, ns, 0, rb, rows),
                                       run(ref, &p, ns, 0, rb, rows),
                                       run_gemm(ref, &p, ns, 0, rb, rows),
                                       calloc((size_t)ns * (size_t)rows, sizeof(float))};
                        assert_non_null(y[4]);
                        int done = kern_gemm_amx_k(&p.W, &p.X, ns, y[4], rows, rb, rows);
                        assert_int_equal(done, (rows - rb) / 16 * 16);
                        for (int s = 0; s < ns; s++)
                            for (int r = rb; r < rows; r++) {
                                size_t i = (size_t)s * rows + r;
                                if (memcmp(&y[0][i], &y[2][i], sizeof(float)) ||
                                    memcmp(&y[1][i], &y[3][i], sizeof(float)) ||
                                    (r < rb + done && memcmp(&y[4][i], &y[2][i], sizeof(float))))
                                    fail_msg("%s%s cols %d n_seq %d rows from %d, r %d s %d: amx "
                                             "%a/%a, tiles %a, avx512 %a/%a (matmul/gemm)",
                                             quant_type_name(p.t), raw ? " (random bytes)" : "",
                                             cols, ns, rb, r, s, (double)y[0][i], (double)y[1][i],
                                             (double)y[4][i], (double)y[2][i], (double)y[3][i]);
                            }
                        for (int i = 0; i < 5; i++)
                            free(y[i]);
                    }
                problem_free(&p);
            }
}

static void near(float a, float b, double tol, const char *what, int n)
{
    if (!(fabs((double)a - b) <= tol))
        fail_msg("%s n=%d: %.9g vs %.9g", what, n, a, b);
}

static void check_float_kernels(enum kern_set set)
{
    const struct kern_ops *k = kern_ops_get(set), *ref = kern_ops_get(KERN_SET_SCALAR);
    static const int sizes[] = {1, 3, 8, 17, 64, 100, 259};
    enum { MAXN = 259 };
    if (!k)
        skip();
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        unsigned seed = 1234u + (unsigned)n;
        float a[MAXN], b[MAXN], w[MAXN], y1[MAXN], y2[MAXN], sabs = 0.0f;
        uint16_t h[MAXN];
        for (int i = 0; i < n; i++) {
            a[i] = frand(&seed) * 4.0f;
            b[i] = frand(&seed) * 4.0f;
            w[i] = frand(&seed) + 1.0f;
            sabs += fabsf(a[i] * b[i]);
        }
        kern_f32_to_f16(h, a, n);
        near(k->dot_f32(a, b, n), ref->dot_f32(a, b, n), 1e-5 * sabs + 1e-6, "dot_f32", n);
        near(k->dot_f16(h, b, n), ref->dot_f16(h, b, n), 1e-5 * sabs + 1e-6, "dot_f16", n);
        memcpy(y1, b, sizeof(float) * (size_t)n);
        memcpy(y2, b, sizeof(float) * (size_t)n);
        k->axpy_f32(y1, 0.7f, a, n);
        ref->axpy_f32(y2, 0.7f, a, n);
        for (int i = 0; i < n; i++)
            near(y1[i], y2[i], 1e-5 * (fabsf(b[i]) + fabsf(a[i])), "axpy_f32", n);
        k->axpy_f16(y1, -0.3f, h, n);
        ref->axpy_f16(y2, -0.3f, h, n);
        for (int i = 0; i < n; i++)
            near(y1[i], y2[i], 1e-5 * (fabsf(b[i]) + fabsf(a[i])), "axpy_f16", n);
        k->rmsnorm(y1, a, w, n, 1e-5f);
        ref->rmsnorm(y2, a, w, n, 1e-5f);
        for (int i = 0; i < n; i++)
            near(y1[i], y2[i], 1e-5 * fabsf(y2[i]) + 1e-6, "rmsnorm", n);
        memcpy(y1, a, sizeof(float) * (size_t)n);
        memcpy(y2, a, sizeof(float) * (size_t)n);
        k->softmax(y1, n);
        ref->softmax(y2, n);
        float sum = 0.0f;
        for (int i = 0; i < n; i++) {
            near(y1[i], y2[i], 1e-5 * y2[i] + 1e-7, "softmax", n);
            sum += y1[i];
        }
        near(sum, 1.0f, 1e-5, "softmax sum", n);
        k->swiglu(y1, a, b, n);
        ref->swiglu(y2, a, b, n);
        for (int i = 0; i < n; i++)
            near(y1[i], y2[i], 1e-5 * fabsf(y2[i]) + 1e-6, "swiglu", n);
        memcpy(y1, a, sizeof(float) * (size_t)n);
        memcpy(y2, a, sizeof(float) * (size_t)n);
        k->add(y1, b, n);
        ref->add(y2, b, n);
        assert_memory_equal(y1, y2, sizeof(float) * (size_t)n); /* one rounding either way */
    }
}

static void test_kernels_avx2_float_kernels_match_scalar(void **state)
{
    (void)state;
    check_float_kernels(KERN_SET_AVX2);
}

static void test_kernels_avx512_float_kernels_match_scalar(void **state)
{
    (void)state;
    check_float_kernels(KERN_SET_AVX512);
}

static void test_kernels_avxvnni_float_kernels_match_scalar(void **state)
{
    (void)state;
    check_float_kernels(KERN_SET_AVXVNNI);
}

static void test_kernels_amx_float_kernels_match_scalar(void **state)
{
    (void)state;
    check_float_kernels(KERN_SET_AMX);
}

static void test_kernels_scalar_float_kernels_known_values(void **state)
{
    (void)state;
    const struct kern_ops *k = kern_ops_get(KERN_SET_SCALAR);
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 2}, y[4];
    k->rmsnorm(y, x, w, 4, 0.0f); /* rms = sqrt(30/4) */
    near(y[2], 3.0f * 2.0f / sqrtf(7.5f), 1e-6, "rmsnorm", 4);
    float s[3] = {0.0f, logf(2.0f), logf(5.0f)};
    k->softmax(s, 3);
    near(s[0], 0.125f, 1e-6, "softmax", 3);
    near(s[2], 0.625f, 1e-6, "softmax", 3);
    float g[1] = {2.0f}, u[1] = {3.0f};
    k->swiglu(y, g, u, 1);
    near(y[0], 2.0f / (1.0f + expf(-2.0f)) * 3.0f, 1e-6, "swiglu", 1);
}

static void test_kernels_rope_rotates_pairs_by_position(void **state)
{
    (void)state;
    float cs[8], x[8], v[8];
    for (int i = 0; i < 8; i++)
        x[i] = (float)(i + 1);
    /* position 0 is the identity */
    kern_rope_table(cs, 8, 0, 10000.0f, 1.0f);
    memcpy(v, x, sizeof x);
    kern_rope_apply(v, 1, 8, 8, cs, 0);
    assert_memory_equal(v, x, sizeof x);
    /* position 3, pair 0 (frequency 1): normal layout rotates (x0, x1), NeoX (x0, x4) */
    kern_rope_table(cs, 8, 3, 10000.0f, 1.0f);
    memcpy(v, x, sizeof x);
    kern_rope_apply(v, 1, 8, 8, cs, 0);
    near(v[0], 1.0f * cosf(3) - 2.0f * sinf(3), 1e-5, "rope norm", 0);
    near(v[1], 1.0f * sinf(3) + 2.0f * cosf(3), 1e-5, "rope norm", 1);
    memcpy(v, x, sizeof x);
    kern_rope_apply(v, 1, 8, 8, cs, 1);
    near(v[0], 1.0f * cosf(3) - 5.0f * sinf(3), 1e-5, "rope neox", 0);
    near(v[4], 1.0f * sinf(3) + 5.0f * cosf(3), 1e-5, "rope neox", 4);
    /* pair 1 turns at base^(-2/8) per position */
    float t = 3.0f * powf(10000.0f, -0.25f);
    near(cs[2], cosf(t), 1e-5, "rope table", 2);
    /* dims past n_rot are left alone */
    memcpy(v, x, sizeof x);
    kern_rope_apply(v, 2, 4, 2, cs, 0);
    assert_true(v[2] == x[2] && v[3] == x[3] && v[6] == x[6]);
}

/* Llama 3's rope_freqs: pair i turns factors[i] times slower; NULL factors change nothing. */
static void test_kernels_rope_factors_slow_each_pair(void **state)
{
    const float f[4] = {1.0f, 2.0f, 8.0f, 40.0f};
    float cs[8], ref[8];
    (void)state;
    kern_rope_table(ref, 8, 1000, 500000.0f, 1.0f);
    kern_rope_table_ff(cs, 8, 1000, 500000.0f, 1.0f, NULL);
    assert_memory_equal(cs, ref, sizeof cs);
    kern_rope_table_ff(cs, 8, 1000, 500000.0f, 1.0f, f);
    for (int i = 0; i < 4; i++) {
        double t = 1000.0 * pow(500000.0, -2.0 * i / 8) / f[i];
        near(cs[2 * i], (float)cos(t), 1e-6, "rope factors cos", i);
        near(cs[2 * i + 1], (float)sin(t), 1e-6, "rope factors sin", i);
    }
    assert_true(cs[2] != ref[2]);
}

/* The cache's F16 conversion (F16C where the CPU has it) writes quant_f32_to_f16's bits:
 * normal, subnormal, overflowing, infinite values, exact ties, any length. */
static void test_kernels_f32_to_f16_matches_scalar_bits(void **state)
{
    enum { N = 1000 };
    float x[N];
    uint16_t h[N];
    unsigned seed = 99;
    (void)state;
    for (int i = 0; i < N; i++)
        x[i] = frand(&seed) * (i % 5 == 0 ? 1e-6f : i % 5 == 1 ? 7e4f : 30.0f);
    x[3] = INFINITY;
    x[4] = -INFINITY;
    x[6] = 1.0f + 1.0f / 2048.0f; /* halfway between two F16 values */
    x[7] = 65520.0f;              /* rounds to infinity */
    for (int n = 0; n <= N; n += n < 20 ? 1 : 97) {
        memset(h, 0, sizeof h);
        kern_f32_to_f16(h, x, n);
        for (int i = 0; i < n; i++)
            assert_int_equal(h[i], quant_f32_to_f16(x[i]));
    }
}

/* Every set's quantize_act writes the scalar quantizer's bytes: random rows, a zero block,
 * exact halves after scaling, a NaN and huge values. */
static void test_kernels_quantize_act_matches_scalar_bytes(void **state)
{
    static const enum ggml_type wt[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K};
    enum { N = 1024 };
    float x[N];
    unsigned char a[2048], b[2048];
    unsigned seed = 7;
    (void)state;
    for (int i = 0; i < N; i++) {
        seed = seed * 1103515245u + 12345u;
        x[i] = ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f) * (i < 512 ? 1.0f : 300.0f);
    }
    for (int i = 256; i < 288; i++)
        x[i] = 0.0f;
    for (int i = 288; i < 319; i++)
        x[i] = (float)(i - 304) + 0.5f; /* with amax 127 (d = 1), exact halves */
    x[319] = 127.0f;
    x[400] = NAN;
    x[700] = 1e30f;
    for (int set = KERN_SET_SCALAR; set <= KERN_SET_AMX; set++) {
        const struct kern_ops *k = kern_ops_get((enum kern_set)set);
        if (!k)
            continue;
        for (size_t t = 0; t < sizeof(wt) / sizeof(wt[0]); t++) {
            size_t bytes = kern_act_bytes(wt[t], N);
            assert_true(bytes <= sizeof(a));
            memset(a, 0xaa, sizeof a);
            memset(b, 0x55, sizeof b);
            assert_int_equal(kern_quantize_act(wt[t], x, N, a), 0);
            assert_int_equal(k->quantize_act(wt[t], x, N, b), 0);
            assert_memory_equal(a, b, bytes);
        }
    }
}

static void test_kernels_get_row_decodes_every_type(void **state)
{
    (void)state;
    for (size_t ti = 0; ti < N_WTYPES; ti++) {
        enum ggml_type t = wtypes[ti];
        int cols = 256;
        float x[256], y[256], want[256];
        unsigned seed = 3;
        size_t rb = quant_row_bytes(t, cols);
        unsigned char *tab = malloc(rb * 3);
        assert_non_null(tab);
        for (int r = 0; r < 3; r++) {
            for (int c = 0; c < cols; c++)
                x[c] = frand(&seed);
            assert_int_equal(quant_quantize_row(t, x, tab + rb * (size_t)r, cols), 0);
        }
        assert_int_equal(quant_dequantize_row(t, tab + rb * 2, want, cols), 0);
        kern_get_row(t, tab, rb, 2, cols, y);
        assert_memory_equal(y, want, sizeof y);
        free(tab);
    }
}

static void test_kernels_select_honours_env(void **state)
{
    (void)state;
    const struct kern_ops *k;
    setenv("KILN_KERNELS", "scalar", 1);
    k = kern_ops_select();
    assert_non_null(k);
    assert_string_equal(k->name, "scalar");
    setenv("KILN_KERNELS", "bogus", 1);
    assert_null(kern_ops_select());
    setenv("KILN_KERNELS", "avx2", 1);
    k = kern_ops_select();
    assert_ptr_equal(k, kern_ops_get(KERN_SET_AVX2)); /* NULL where the CPU lacks it */
    setenv("KILN_KERNELS", "avxvnni", 1);
    k = kern_ops_select();
    assert_ptr_equal(k, kern_ops_get(KERN_SET_AVXVNNI));
    if (k)
        assert_string_equal(k->name, "avxvnni");
    setenv("KILN_KERNELS", "avx512", 1);
    k = kern_ops_select();
    assert_ptr_equal(k, kern_ops_get(KERN_SET_AVX512));
    if (k)
        assert_string_equal(k->name, "avx512");
    setenv("KILN_KERNELS", "amx", 1);
    k = kern_ops_select();
    assert_ptr_equal(k, kern_ops_get(KERN_SET_AMX));
    if (k)
        assert_string_equal(k->name, "amx");
    unsetenv("KILN_KERNELS");
    k = kern_ops_select();
    assert_non_null(k);
    if (kern_ops_get(KERN_SET_AMX))
        assert_string_equal(k->name, "amx");
    else if (kern_ops_get(KERN_SET_AVX512))
        assert_string_equal(k->name, "avx512");
    else if (kern_ops_get(KERN_SET_AVXVNNI))
        assert_string_equal(k->name, "avxvnni");
}

static void test_kernels_act_sizes_follow_weight_type(void **state)
{
    (void)state;
    assert_int_equal(kern_act_type(GGML_TYPE_Q4_0), GGML_TYPE_Q8_0);
    assert_int_equal(kern_act_type(GGML_TYPE_Q6_K), GGML_TYPE_Q8_K);
    assert_int_equal(kern_act_type(GGML_TYPE_BF16), GGML_TYPE_F32);
    assert_int_equal(kern_act_bytes(GGML_TYPE_Q8_0, 64), 68);
    assert_int_equal(kern_act_bytes(GGML_TYPE_Q4_K, 512), 584);
    assert_int_equal(kern_act_bytes(GGML_TYPE_F16, 5), 20);
    float x[32] = {0};
    unsigned char out[64];
    assert_int_equal(kern_quantize_act(GGML_TYPE_Q4_K, x, 32, out), -EINVAL);
    assert_int_equal(kern_act_type(GGML_TYPE_Q4_1), GGML_TYPE_Q8_0);
    assert_int_equal(kern_act_type(GGML_TYPE_Q5_1), GGML_TYPE_Q8_0);
    assert_int_equal(kern_act_type(GGML_TYPE_IQ4_NL), GGML_TYPE_Q8_0);
    assert_int_equal(kern_act_type(GGML_TYPE_Q2_K), GGML_TYPE_Q8_K);
    assert_int_equal(kern_act_type(GGML_TYPE_IQ4_XS), GGML_TYPE_Q8_K);
    assert_int_equal(kern_act_type((enum ggml_type)16), GGML_TYPE_COUNT); /* IQ2_XXS */
    assert_int_equal(kern_quantize_act(GGML_TYPE_Q5_K, x, 32, out), -EINVAL);
    assert_int_equal(kern_quantize_act((enum ggml_type)35, x, 32, out), -EINVAL); /* TQ2_0 */
    assert_int_equal(kern_seq_chunk(1 << 30) % 4, 0);
    assert_true(kern_seq_chunk(6000) >= 16); /* a decode batch shares one pass */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_scalar_matmul_matches_float_reference),
        cmocka_unit_test(test_kernels_avx2_matmul_matches_scalar),
        cmocka_unit_test(test_kernels_avx512_matmul_matches_scalar),
        cmocka_unit_test(test_kernels_avxvnni_matmul_matches_scalar),
        cmocka_unit_test(test_kernels_avxvnni_matmul_equals_avx2_bit_for_bit),
        cmocka_unit_test(test_kernels_avx512_k_quant_rows_equal_avx2_bit_for_bit),
        cmocka_unit_test(test_kernels_avx512_one_sequence_k_rows_same_bits_from_any_first_row),
        cmocka_unit_test(test_kernels_avx2_one_sequence_k_rows_same_bits_in_any_row_group),
        cmocka_unit_test(test_kernels_avxvnni_one_sequence_k_rows_same_bits_in_any_row_group),
        cmocka_unit_test(test_kernels_scalar_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avx2_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avx512_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avx512_vbmi_rows_give_the_bits_of_the_base_rows),
        cmocka_unit_test(test_kernels_avx2_decode_of_8_to_16_sequences_matches_one_at_a_time),
        cmocka_unit_test(test_kernels_avxvnni_decode_of_8_to_16_sequences_matches_one_at_a_time),
        cmocka_unit_test(test_kernels_avx2_one_sequence_b32_rows_give_the_tile_bits),
        cmocka_unit_test(test_kernels_avxvnni_one_sequence_b32_rows_give_the_tile_bits),
        cmocka_unit_test(test_kernels_avx2_decode_of_q8_0_takes_every_code),
        cmocka_unit_test(test_kernels_avxvnni_decode_of_q8_0_takes_every_code),
        cmocka_unit_test(test_kernels_scalar_gemm_rows_equal_matmul_rows),
        cmocka_unit_test(test_kernels_avx2_gemm_rows_equal_matmul_rows),
        cmocka_unit_test(test_kernels_avxvnni_gemm_rows_equal_matmul_rows),
        cmocka_unit_test(test_kernels_avx512_gemm_rows_equal_matmul_rows),
        cmocka_unit_test(test_kernels_scalar_gemm_matches_scalar_and_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avx2_gemm_matches_scalar_and_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avx512_gemm_matches_scalar_and_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avxvnni_gemm_matches_scalar_and_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avxvnni_batching_changes_nothing),
        cmocka_unit_test(test_kernels_avx2_gemm_tiles_every_listed_type),
        cmocka_unit_test(test_kernels_avxvnni_gemm_tiles_every_listed_type),
        cmocka_unit_test(test_kernels_avx2_gemm_and_matmul_give_the_same_bits),
        cmocka_unit_test(test_kernels_avxvnni_gemm_and_matmul_give_the_same_bits),
        cmocka_unit_test(test_kernels_avx2_float_kernels_match_scalar),
        cmocka_unit_test(test_kernels_avx512_float_kernels_match_scalar),
        cmocka_unit_test(test_kernels_avxvnni_float_kernels_match_scalar),
        cmocka_unit_test(test_kernels_amx_float_kernels_match_scalar),
        cmocka_unit_test(test_kernels_amx_matmul_matches_scalar),
        cmocka_unit_test(test_kernels_amx_batching_changes_nothing),
        cmocka_unit_test(test_kernels_amx_gemm_matches_scalar_and_batching_changes_nothing),
        cmocka_unit_test(test_kernels_amx_gemm_rows_equal_matmul_rows),
        cmocka_unit_test(test_kernels_amx_gives_the_avx512_bits),
        cmocka_unit_test(test_kernels_amx_k_quant_tiles_give_the_avx512_bits),
        cmocka_unit_test(test_kernels_scalar_float_kernels_known_values),
        cmocka_unit_test(test_kernels_rope_rotates_pairs_by_position),
        cmocka_unit_test(test_kernels_rope_factors_slow_each_pair),
        cmocka_unit_test(test_kernels_quantize_act_matches_scalar_bytes),
        cmocka_unit_test(test_kernels_f32_to_f16_matches_scalar_bits),
        cmocka_unit_test(test_kernels_get_row_decodes_every_type),
        cmocka_unit_test(test_kernels_select_honours_env),
        cmocka_unit_test(test_kernels_act_sizes_follow_weight_type),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
