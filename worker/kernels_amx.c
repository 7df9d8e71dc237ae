/* The amx set: the avx512 set with Q8_0 products on AMX-INT8 tiles (gemm_amx.c) for prompt
 * rows and for decode steps of AMX_MATMUL_MIN or more sequences, and Q4_K and Q6_K prompt rows
 * of AMX_K_GEMM_MIN or more sequences on them (gemm_amx_k.c); the same bits as the avx512
 * set, so rows_agree is its. Usable where CPUID reports AMX-TILE and AMX-INT8 and the kernel
 * grants this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux
 * 5.16 and later; children inherit the grant). Where the CPU has AMX but the grant is refused,
 * kern_ops_select logs it once and picks avx512. */
#include "kernels.h"

#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gemm.h"
#include "log.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Decode steps of at least this many sequences take the tiles; fewer take the avx512 set's
 * row kernels (one sequence reads the weights at memory speed already). */
#define AMX_MATMUL_MIN 8
/* Prompt rows of Q4_K and Q6_K take the tiles (gemm_amx_k.c) from this many sequences, and
 * decode steps keep the avx512 set's kernels: each superblock of 16 rows is unpacked into
 * the tiles' pieces once per call, which only many sequences repay (bench_kernels gemm
 * Q4_K 2048x5632 CPU ms, amx set before / after: 16 sequences 2.99 / 3.96, 64 sequences
 * 11.15 / 10.42, 512 sequences 96.62 / 61.76). */
#define AMX_K_GEMM_MIN 64

static const struct kern_ops *avx;
static struct kern_ops amx_ops;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_ok;

static int cpu_has_amx_int8(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (d >> 24 & 1) && (d >> 25 & 1); /* AMX-TILE, AMX-INT8 */
}

/* Q4_K and Q6_K on the tiles (gemm_amx_k.c), a last partial group of 16 rows by the avx512
 * set's fn (the same bits): 0, or -1 (nothing done) for another type. */
static int amx_k(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                 int y_stride, int row_begin, int row_end,
                 void (*fn)(const struct kern_mat *, const struct kern_act *, int, float *, int,
                            int, int))
{
    int done = kern_gemm_amx_k(W, X, n_seq, Y, y_stride, row_begin, row_end);
    if (done < 0)
        return -1;
    if (row_begin + done < row_end)
        fn(W, X, n_seq, Y, y_stride, row_begin + done, row_end);
    return 0;
}

static void amx_matmul(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                       int y_stride, int row_begin, int row_end)
{
    if (n_seq >= AMX_MATMUL_MIN &&
        kern_gemm_amx(W, X, n_seq, Y, y_stride, row_begin, row_end) == 0)
        return;
    avx->matmul(W, X, n_seq, Y, y_stride, row_begin, row_end);
}

static void amx_gemm(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                     int y_stride, int row_begin, int row_end)
{
    if (kern_gemm_amx(W, X, n_seq, Y, y_stride, row_begin, row_end) == 0 ||
        (n_seq >= AMX_K_GEMM_MIN &&
         amx_k(W, X, n_seq, Y, y_stride, row_begin, row_end, avx->gemm) == 0))
        return;
    avx->gemm(W, X, n_seq, Y, y_stride, row_begin, row_end);
}

static void amx_init(void)
{
    if (!cpu_has_amx_int8() || !(avx = kern_ops_avx512_table()))
        return;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        log_warn("the CPU has AMX-INT8 but the kernel refused its tile state (%s): "
                 "using the avx512 kernels", strerror(errno));
        return;
    }
    amx_ops = *avx;
    amx_ops.name = "amx";
    amx_ops.matmul = amx_matmul;
    amx_ops.gemm = amx_gemm;
    amx_ok = 1;
}

const struct kern_ops *kern_ops_amx_table(void)
{
    pthread_once(&amx_once, amx_init);
    return amx_ok ? &amx_ops : NULL;
}
