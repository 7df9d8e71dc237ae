/* Single-threaded matmul throughput per kernel set, and the machine's memory read bandwidth
 * for comparison. Weights rotate through enough copies (>= 256 MiB) that they stream from
 * DRAM, as in decode, rather than sit in the last-level cache.
 * KILN_KERNELS=scalar|avx2|avx512 limits the run to one set; KILN_BENCH_SEC sets the time
 * per measurement (default 0.25 s); each line gives wall-clock and process CPU ms per call
 * (the steadier one on a shared machine); KILN_BENCH_TYPES=q5_0,iq4_xs,... the weight types
 * (default Q8_0 and Q4_K); KILN_BENCH_SEQS=1,16,512 the batch sizes (default 1,4,8,16);
 * KILN_BENCH_GEMM=1 times each set's gemm (the prefill op) after its matmul at every batch
 * size; KILN_BENCH_SHAPES=1536x576,... the ROWSxCOLS shapes (default 2048x5632,5632x2048);
 * KILN_BENCH_HOT=1 keeps one copy, which stays in cache: the kernel's rate when memory is not
 * the limit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../worker/kernels.h"
#include "../worker/quant.h"
#include "lib/model_gen.h"

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A plain read loop over 1 GiB, best of 3 passes. */
static void bench_memory(void)
{
    size_t bytes = (size_t)1 << 30, n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(bytes);
    double best = 0.0;
    uint64_t sink = 0;
    if (!buf) {
        printf("memory read: cannot allocate 1 GiB, skipped\n");
        return;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = i;
    for (int pass = 0; pass < 3; pass++) {
        uint64_t a = 0, b = 0, c = 0, d = 0;
        double t0 = now_sec();
        for (size_t i = 0; i < n; i += 4) {
            a += buf[i];
            b += buf[i + 1];
            c += buf[i + 2];
            d += buf[i + 3];
        }
        double dt = now_sec() - t0;
        sink += a + b + c + d;
        if ((double)bytes / dt > best)
            best = (double)bytes / dt;
    }
    printf("memory read (1 GiB, 1 thread, best of 3): %.2f GB/s  [sink %llu]\n", best / 1e9,
           (unsigned long long)(sink & 1));
    free(buf);
}

struct mats {
    enum ggml_type t;
    int rows, cols, copies;
    size_t bytes; /* one copy */
    unsigned char *w;
    unsigned char *x;
    size_t xstride;
    float *y;
};

static int mats_init(struct mats *m, enum ggml_type t, int rows, int cols, int max_seq)
{
    size_t rb = quant_row_bytes(t, cols);
    float *tmp = malloc(sizeof(float) * (size_t)cols);
    unsigned seed = 1;
    m->t = t;
    m->rows = rows;
    m->cols = cols;
    m->bytes = rb * (size_t)rows;
    const char *hot = getenv("KILN_BENCH_HOT");
    m->copies = hot && *hot == '1' ? 1 : (int)(((size_t)256 << 20) / m->bytes) + 1;
    m->w = malloc(m->bytes * (size_t)m->copies);
    m->xstride = kern_act_bytes(t, cols);
    m->x = malloc(m->xstride * (size_t)max_seq);
    m->y = malloc(sizeof(float) * (size_t)rows * (size_t)max_seq);
    if (!tmp || !m->w || !m->x || !m->y) {
        free(tmp);
        return -1;
    }
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            tmp[c] = frand(&seed) * 0.05f;
        quant_quantize_row(t, tmp, m->w + rb * (size_t)r, cols);
    }
    for (int c = 1; c < m->copies; c++)
        memcpy(m->w + m->bytes * (size_t)c, m->w, m->bytes);
    for (int s = 0; s < max_seq; s++) {
        for (int c = 0; c < cols; c++)
            tmp[c] = frand(&seed);
        kern_quantize_act(t, tmp, cols, m->x + m->xstride * (size_t)s);
    }
    free(tmp);
    return 0;
}

static void mats_free(struct mats *m)
{
    free(m->w);
    free(m->x);
    free(m->y);
}

static void bench_one(const struct kern_ops *k, const struct mats *m, int n_seq, double budget,
                      int gemm)
{
    struct kern_act X = {kern_act_type(m->t), m->x, m->cols, m->xstride};
    struct kern_mat W = {m->t, m->w, m->rows, m->cols, m->bytes / (size_t)m->rows};
    long calls = 0;
    double t0 = now_sec(), c0 = cpu_sec(), dt;
    do {
        W.data = m->w + m->bytes * (size_t)(calls % m->copies);
        (gemm ? k->gemm : k->matmul)(&W, &X, n_seq, m->y, m->rows, 0, m->rows);
        calls++;
        dt = now_sec() - t0;
    } while (dt < budget);
    double dc = cpu_sec() - c0;
    double gbs = (double)m->bytes * (double)calls / dt / 1e9;
    double gflops = 2.0 * m->rows * (double)m->cols * n_seq * (double)calls / dt / 1e9;
    printf("%-7s %-6s %-6s %5dx%-5d n_seq %2d: %7.2f GB/s weights  %7.2f GFLOP/s  %8.3f ms/call"
           "  %8.3f CPU ms/call\n", k->name, gemm ? "gemm" : "matmul", quant_type_name(m->t),
           m->rows, m->cols, n_seq,
           gbs, gflops, dt / (double)calls * 1e3, dc / (double)calls * 1e3);
    fflush(stdout);
}

int main(void)
{
    enum ggml_type types[16] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K};
    size_t n_types = 2;
    const char *tl = getenv("KILN_BENCH_TYPES");
    if (tl && *tl) {
        char buf[256], *save = NULL;
        snprintf(buf, sizeof buf, "%s", tl);
        n_types = 0;
        for (char *tok = strtok_r(buf, ",", &save); tok && n_types < 16;
             tok = strtok_r(NULL, ",", &save)) {
            enum ggml_type t = model_gen_type(tok);
            if (t == GGML_TYPE_COUNT || quant_block_elems(t) == 1) {
                fprintf(stderr, "KILN_BENCH_TYPES: %s is not a quantized type\n", tok);
                return 1;
            }
            types[n_types++] = t;
        }
    }
    int shapes[8][2] = {{2048, 5632}, {5632, 2048}}, n_shapes = 2;
    const char *hl = getenv("KILN_BENCH_SHAPES");
    if (hl && *hl) {
        char buf[256], *save = NULL;
        snprintf(buf, sizeof buf, "%s", hl);
        n_shapes = 0;
        for (char *tok = strtok_r(buf, ",", &save); tok && n_shapes < 8;
             tok = strtok_r(NULL, ",", &save)) {
            int r = 0, c = 0;
            if (sscanf(tok, "%dx%d", &r, &c) != 2 || r < 1 || c < 1 || r > 1 << 20 ||
                c > 1 << 16) {
                fprintf(stderr, "KILN_BENCH_SHAPES: %s is not ROWSxCOLS\n", tok);
                return 1;
            }
            shapes[n_shapes][0] = r;
            shapes[n_shapes++][1] = c;
        }
    }
    int seqs[8] = {1, 4, 8, 16}, n_seqs = 4, max_seq = 16;
    const char *sl = getenv("KILN_BENCH_SEQS");
    if (sl && *sl) {
        char buf[128], *save = NULL;
        snprintf(buf, sizeof buf, "%s", sl);
        n_seqs = 0, max_seq = 1;
        for (char *tok = strtok_r(buf, ",", &save); tok && n_seqs < 8;
             tok = strtok_r(NULL, ",", &save)) {
            int v = atoi(tok);
            if (v < 1 || v > 4096) {
                fprintf(stderr, "KILN_BENCH_SEQS: %s is not a count from 1 to 4096\n", tok);
                return 1;
            }
            seqs[n_seqs++] = v;
            max_seq = v > max_seq ? v : max_seq;
        }
    }
    const char *env = getenv("KILN_KERNELS"), *bs = getenv("KILN_BENCH_SEC");
    double budget = bs ? atof(bs) : 0.25;
    const char *ge = getenv("KILN_BENCH_GEMM");
    int with_gemm = ge && *ge == '1';
    const struct kern_ops *sets[KERN_SET_AMX + 1];
    int n_sets = 0;

    if (env && *env) {
        if (!(sets[0] = kern_ops_select())) {
            fprintf(stderr, "KILN_KERNELS=%s: unknown or unsupported on this CPU\n", env);
            return 1;
        }
        n_sets = 1;
    } else {
        for (int s = KERN_SET_SCALAR; s <= KERN_SET_AMX; s++)
            if ((sets[n_sets] = kern_ops_get((enum kern_set)s)))
                n_sets++;
            else
                printf("kernel set %d: not supported on this CPU, skipped\n", s);
    }
    bench_memory();
    for (size_t ti = 0; ti < n_types; ti++)
        for (int si = 0; si < n_shapes; si++) {
            struct mats m;
            if (shapes[si][1] % quant_block_elems(types[ti])) {
                printf("-- %s %dx%d: columns not a multiple of the block, skipped\n",
                       quant_type_name(types[ti]), shapes[si][0], shapes[si][1]);
                continue;
            }
            if (mats_init(&m, types[ti], shapes[si][0], shapes[si][1], max_seq) < 0) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            printf("-- %s %dx%d: %.2f MiB per copy, %d copies rotated\n",
                   quant_type_name(m.t), m.rows, m.cols, (double)m.bytes / (1 << 20),
                   m.copies);
            for (int k = 0; k < n_sets; k++)
                for (int q = 0; q < n_seqs; q++)
                    for (int g = 0; g <= with_gemm; g++)
                        bench_one(sets[k], &m, seqs[q], budget, g);
            mats_free(&m);
        }
    return 0;
}
