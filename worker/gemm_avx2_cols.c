/* Decode rows of 8 to 16 sequences on AVX2, lane = sequence: gemm_avx512_cols.c's scheme in
 * 256 bits. The activations are transposed once per call into a panel whose vector (t, v)
 * holds dword t (elements 4t..4t+3) of sequences 8v..8v+7, one sequence per int32 lane, and
 * each weight row is read once, straight from W: per 4 elements one broadcast of the row's 4
 * codes serves the 8 or 16 sequences (one or two vectors). No horizontal sums, no per-tile
 * activation scale shuffles, and the cost per weight byte does not grow with the number of
 * sequences up to 8, then up to 16. The prefill GEMM (gemm_avx2.c) runs Q8_0 here too, 16
 * sequences per call.
 *
 * The integer dot: with AVX-VNNI (gemm_avxvnni_cols.c builds this file with -mavxvnni) one
 * vpdpbusd per vector, the codes made unsigned (Q8_0 and IQ4_NL xor 0x80, Q4_0's nibbles and
 * Q5_0's 5-bit codes as they are) and their zero point taken off as -zero * sum(activation
 * bytes) per block, from which each sum starts. Without it maddubs + madd: Q8_0's activations
 * (+ 128) are split in the panel into two unsigned nibbles, which the codes multiply directly,
 * the zero point coming off per row and block (q8x_rows, 8 sequences), or at 9 to 16
 * sequences held as int16 pairs against the row's codes widened once per block, one madd per
 * pair of codes (q8w_rows); IQ4_NL gives maddubs |w| and moves w's sign onto the activations
 * (each pair at most 2 * 128 * 127, which fits int16); Q4_0's nibbles (<= 15) multiply the
 * activations directly and a whole block of pairs is summed in int16 (16 products of at most
 * 15 * 128: 30720) before one madd, Q5_0's codes (<= 31, decoded once per row and block)
 * half a block (8 products of at most 31 * 128: 31744).
 *
 * Either way the block's integer sum is exact, and the float step per (row, sequence) is
 * kernels_avx2.c's matmul_b32 and gemm_avx2.c's tile: acc = fma(float(sum), dw * dx, acc)
 * block by block from 0. So a result is the same bits whichever path computed it and however
 * many sequences shared the call (the prompt cache relies on it, rows_agree).
 *
 * Q4_K and Q6_K (Q8_K activations; Q6_K from 9 sequences): each row's superblock is decoded
 * once into its 256 codes, whose dwords are then broadcast the same way; per sub-block the
 * products are summed in int16 where they fit and scaled by madd (Q4_K with AVX-VNNI: two
 * vpdpbusd chains and vpdpwssd), giving kernels_avx2.c's per-superblock integers and its
 * float steps (k_rows). */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "gemm_decode.h"
#include "kernels_simd.h"

#ifdef __AVXVNNI__
#define COLS_FN kern_gemm_avxvnni_cols
#else
#define COLS_FN kern_gemm_avx2_cols
#endif

/* The longest row taken (elements), for the thread's panel. */
#define COLS_MAXK 16384
/* Blocks ahead each row is prefetched (as gemm_avx512_cols.c); past a row's end, the same row
 * of the next block of rows (as k_rows), so a block of short rows (SmolLM's 576 elements: 18
 * blocks) does not start on misses. */
#ifndef COLS_PF
#define COLS_PF 12
#endif
/* Rows computed together for one vector of sequences (up to 8) and for two (up to 16), in
 * cols_rows (plain AVX2's Q8_0 takes q8x_rows' Q8X_R and q8w_rows' Q8W_R). */
#ifndef COLS_R1
#define COLS_R1 8
#endif
#ifndef COLS_R2
#define COLS_R2 4
#endif

/* Rows computed together for the K types (their x stay in L1 across the rows). */
#ifndef COLS_RK
#define COLS_RK 4
#endif
/* Superblocks ahead each K-type row is prefetched. */
#define COLS_PFK 4
#define COLS_OUT (COLS_R1 > COLS_R2 ? (COLS_R1 > COLS_RK ? COLS_R1 : COLS_RK) \
                                    : (COLS_R2 > COLS_RK ? COLS_R2 : COLS_RK))
_Static_assert(COLS_OUT >= 8 && 8 % COLS_R1 == 0 && 8 % COLS_R2 == 0 && 8 % COLS_RK == 0,
               "COLS_FN runs eight rows at a time into out[] as whole row groups");

struct cols_panel {
#ifndef __AVXVNNI__
    union {
        struct {
#endif
            __m256i x[COLS_MAXK / 4][2]; /* [t][v], lane l: dword t of sequence 8v + l */
#ifndef __AVXVNNI__
            /* Q8_0 at 8 sequences (q8x_rows): (x >> 4) + 8 of each byte; x holds x & 15 */
            __m256i xh[COLS_MAXK / 4][2];
        };
        /* Q8_0 at 9 to 16 sequences (q8w_rows): [t][v], lane l: elements 2t and 2t + 1 of
         * sequence 8v + l as two int16 */
        __m256i xw[COLS_MAXK / 2][2];
    };
    /* q8x_rows, eight rows at a time, per block: -128 * the sum of row i's codes, its scale */
    int32_t zc[COLS_MAXK / QUANT_QK][8];
    float zs[COLS_MAXK / QUANT_QK][8];
#endif
    __m256 dx[COLS_MAXK / QUANT_QK][2]; /* lane l: the block's scale (Q8_K: superblock's) */
    __m256i ic[COLS_MAXK / QUANT_QK][2]; /* lane l: -zero * sum of the block's bytes (not
                                          * q8x_rows) */
    /* Q8_K: per superblock, int16 pairs of sums of 16 (Q6_K's sub-blocks) or 32 (Q4_K's)
     * activation bytes, sub-blocks 2i and 2i+1 in pair i */
    __m256i bs[COLS_MAXK / QUANT_QK_K][8][2];
};

static AI int32_t ld32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Dword p broadcast by a load (vpbroadcastd m32, no shuffle-port op): for the codes a row's
 * block or superblock was decoded into on the stack, which the compiler would otherwise keep
 * in registers and broadcast by shuffles. */
static AI __m256i bcast_ld(const void *p)
{
    __m256i r;
    __asm__("vpbroadcastd %1, %0" : "=x"(r) : "m"(*(const int32_t *)p));
    return r;
}

#ifndef __AVXVNNI__
/* ia[v] += the four-product sums of the signed codes q and x[v]: maddubs of |q| and x with
 * q's sign, then madd by ones. */
static AI void sgn_dot(__m256i q, const int V, const __m256i *x, __m256i *ia)
{
    __m256i a = _mm256_abs_epi8(q);
    _Pragma("GCC unroll 2")
    for (int v = 0; v < V; v++)
        ia[v] = _mm256_add_epi32(ia[v], _mm256_madd_epi16(
            _mm256_maddubs_epi16(a, _mm256_sign_epi8(x[v], q)), _mm256_set1_epi16(1)));
}
#endif

/* The block's sum of products of one row's broadcast codes and V vectors of sequences, on
 * top of ia. w: Q8_0 (AVX-VNNI only; plain AVX2 runs q8x_rows) 8 dwords of codes; Q4_0 and
 * IQ4_NL 4 dwords of nibble pairs; Q5_0 its 32 codes decoded to bytes 0..31 (8 dwords). */
static AI void cols_dot(const enum ggml_type t, const int V, const char *w, const __m256i *x,
                        __m256i *ia)
{
    const __m256i low4 = _mm256_set1_epi8(15);
#ifdef __AVXVNNI__
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    if (t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q5_0) {
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            __m256i c = t == GGML_TYPE_Q8_0
                            ? _mm256_xor_si256(_mm256_set1_epi32(ld32(w + 4 * j)), flip)
                            : bcast_ld(w + 4 * j);
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia[v] = _mm256_dpbusd_avx_epi32(ia[v], c, x[2 * j + v]);
        }
        return;
    }
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        __m256i c = _mm256_set1_epi32(ld32(w + 4 * j));
        __m256i lo = _mm256_and_si256(c, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
        if (t == GGML_TYPE_IQ4_NL) {
            lo = _mm256_xor_si256(_mm256_shuffle_epi8(iq4_table(), lo), flip);
            hi = _mm256_xor_si256(_mm256_shuffle_epi8(iq4_table(), hi), flip);
        }
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++) {
            ia[v] = _mm256_dpbusd_avx_epi32(ia[v], lo, x[2 * j + v]);
            ia[v] = _mm256_dpbusd_avx_epi32(ia[v], hi, x[2 * (4 + j) + v]);
        }
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (t == GGML_TYPE_Q4_0) {
        __m256i p[2];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            __m256i c = _mm256_set1_epi32(ld32(w + 4 * j));
            __m256i lo = _mm256_and_si256(c, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++) {
                __m256i q = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x[2 * j + v]),
                                             _mm256_maddubs_epi16(hi, x[2 * (4 + j) + v]));
                p[v] = j ? _mm256_add_epi16(p[v], q) : q;
            }
        }
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            ia[v] = _mm256_add_epi32(ia[v], _mm256_madd_epi16(p[v], ones));
        return;
    }
    if (t == GGML_TYPE_Q5_0) {
        /* codes <= 31: four dwords' pairs (8 products of at most 31 * 128) per int16 sum */
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m256i p[2];
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                __m256i c = bcast_ld(w + 16 * h + 4 * j);
                _Pragma("GCC unroll 2")
                for (int v = 0; v < V; v++) {
                    __m256i q = _mm256_maddubs_epi16(c, x[2 * (4 * h + j) + v]);
                    p[v] = j ? _mm256_add_epi16(p[v], q) : q;
                }
            }
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia[v] = _mm256_add_epi32(ia[v], _mm256_madd_epi16(p[v], ones));
        }
        return;
    }
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        __m256i c = _mm256_set1_epi32(ld32(w + 4 * j));
        sgn_dot(_mm256_shuffle_epi8(iq4_table(), _mm256_and_si256(c, low4)), V, x + 2 * j, ia);
        sgn_dot(_mm256_shuffle_epi8(iq4_table(), _mm256_and_si256(_mm256_srli_epi16(c, 4), low4)),
                V, x + 2 * (4 + j), ia);
    }
#endif
}

/* R rows (rb bytes apart, from w0) over ng blocks against V vectors of the panel:
 * out[16 * r + 8 * v + l]. */
/* A 32-element block's f16 scale (its first two bytes), in every lane. */
static AI __m256 block_scale(const char *w)
{
    uint16_t h;
    memcpy(&h, w, sizeof h);
    return _mm256_set1_ps(_cvtsh_ss(h));
}

/* matmul_b32's float step for a block, the same operations in the same order:
 * acc + float(ia) * (sc * dx). */
static AI __m256 b32_step(__m256 acc, __m256i ia, __m256 sc, const __m256 *dx)
{
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), _mm256_mul_ps(sc, _mm256_load_ps((const float *)dx)),
                           acc);
}

static AI void cols_rows(const enum ggml_type t, const int R, const int V, const char *w0,
                         size_t rb, int ng, const struct cols_panel *P, float *out)
{
    const size_t bb = t == GGML_TYPE_Q8_0 ? sizeof(struct quant_block_q8_0)
                    : t == GGML_TYPE_Q5_0 ? sizeof(struct quant_block_q5_0)
                                          : sizeof(struct quant_block_q4_0);
    __m256 acc[COLS_R1 > COLS_R2 ? COLS_R1 : COLS_R2][2];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const char *wb = w0 + (size_t)g * bb;
        const __m256i *x = P->x[8 * g];
        const size_t pfo = g + COLS_PF < ng ? COLS_PF * bb : COLS_PF * bb + (size_t)(R - 1) * rb;
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            _mm_prefetch(wb + (size_t)r * rb + pfo, _MM_HINT_T0);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            __m256i ia[2];
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia[v] = _mm256_load_si256(&P->ic[g][v]);
            const char *wr = wb + (size_t)r * rb, *c = wr + 2;
            uint8_t q5[QUANT_QK] __attribute__((aligned(32)));
            if (t == GGML_TYPE_Q5_0) {
                const struct quant_block_q5_0 *b5 = (const struct quant_block_q5_0 *)wr;
                _mm256_store_si256((__m256i *)q5,
                                   _mm256_or_si256(nibbles(b5->qs), gemm_bits5(b5->qh)));
                c = (const char *)q5;
            }
            cols_dot(t, V, c, x, ia);
            const __m256 sc = block_scale(wr);
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                acc[r][v] = b32_step(acc[r][v], ia[v], sc, &P->dx[g][v]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            _mm256_storeu_ps(out + 16 * r + 8 * v, acc[r][v]);
}

#ifndef __AVXVNNI__
/* Q8_0 on plain AVX2 at 8 sequences (one vector), lane = sequence: each activation byte x
 * split in the panel as x + 128 = 16 xh + xl, xl = x & 15, xh = (x >> 4) + 8 (both 0..15).
 * Per 4 codes w, broadcast raw from the row: maddubs(xl, w) and maddubs(xh, w) (products of
 * at most 15 * 128, a pair 3840), each summed over the whole block in int16 (8 pairs: 30720),
 * then one madd by 1 and one by 16; the 128 comes off as -128 * sum(w), the same for every
 * sequence, which q8x_pre computed for the row and block (with its scale) before. Two
 * multiply-port ops per 4 codes (the sign path, maddubs of |w| and sign(x, w) then madd:
 * three), one broadcast per 4 codes and row, straight from W, no decode of the row.
 * bench_kernels (avx2, Q8_0, CPU ms per call, best of 4): 2048x5632 at 8 sequences 1.591 ->
 * 1.492 (against the sign path, with this prefetch). At 16 sequences q8w_rows does better. */
#ifndef Q8X_R
#define Q8X_R 4
#endif
_Static_assert(Q8X_R <= COLS_OUT, "the caller's out[] holds COLS_OUT rows of 16 sequences");
_Static_assert(8 % Q8X_R == 0, "the caller runs eight rows as whole groups");
/* The f32 bits of a Q8_0 block's f16 scale (its first two bytes), in general registers (for
 * q8w_rows, whose vector ports are the busy ones): a normal f16 (exponent 1..30) is its sign,
 * then exponent + 112 and mantissa shifted by 13; zero, subnormals, infinities and NaNs
 * (exponent 0 or 31, where the exponent + 1 has no bit 1..4 set) go through _cvtsh_ss. Both
 * give vcvtph2ps' bits. */
static AI int32_t q8x_scale(const char *w)
{
    int16_t h16;
    memcpy(&h16, w, sizeof h16);
    const int32_t h = h16;
    if (__builtin_expect(!((h + 0x400) & 0x7800), 0)) {
        const float f = _cvtsh_ss((uint16_t)h16);
        int32_t b;
        memcpy(&b, &f, sizeof b);
        return b;
    }
    return (int32_t)((((uint32_t)h << 13) & 0x8FFFFFFFu) + 0x38000000u);
}

/* R rows (rb bytes apart, from w0; row r is row i + r of its eight-row group, for which
 * q8x_pre left each block's zero point and scale in zc and zs: &P->zc[0][i], &P->zs[0][i])
 * over ng blocks against the panel's first vector: out[16 * r + l]. */
static AI void q8x_rows(const int R, const char *w0, size_t rb, int ng,
                        const struct cols_panel *P, const int32_t *zc, const float *zs,
                        float *out)
{
    const size_t bb = sizeof(struct quant_block_q8_0);
    __m256 acc[Q8X_R];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps();
    for (int g = 0; g < ng; g++) {
        const char *wb = w0 + (size_t)g * bb;
        /* the same block of the row eight on, which the next group's q8x_pre reads first
         * (then this loop from cache): a whole group's work ahead of its use, so the misses
         * to DRAM are long done; prefetching each row 32 blocks ahead of itself instead
         * made q8x_pre wait on them (scratch harness, 2048x2048 at 16 sequences, when this
         * loop still ran them: 1.02 ms against 0.79) */
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++)
            _mm_prefetch(wb + (size_t)(r + 8) * rb, _MM_HINT_T0);
        __m256i pl[Q8X_R], ph[Q8X_R];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            __m256i w[Q8X_R];
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++)
                w[r] = bcast_ld(wb + (size_t)r * rb + 2 + 4 * j);
            __m256i xl = _mm256_load_si256(&P->x[8 * g + j][0]);
            __m256i xh = _mm256_load_si256(&P->xh[8 * g + j][0]);
            /* into registers once for the R rows: GCC otherwise folds them into each row's
             * maddubs as memory operands, and loads are what this loop runs short of (one
             * more stack broadcast per 4 codes and row cost 14% at 16 sequences, bench_kernels,
             * when this loop still ran them) */
            __asm__("" : "+x"(xl), "+x"(xh));
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                __m256i ql = _mm256_maddubs_epi16(xl, w[r]);
                __m256i qh = _mm256_maddubs_epi16(xh, w[r]);
                pl[r] = j ? _mm256_add_epi16(pl[r], ql) : ql;
                ph[r] = j ? _mm256_add_epi16(ph[r], qh) : qh;
                __asm__("" : "+x"(pl[r]), "+x"(ph[r]));
            }
        }
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const __m256 sc = _mm256_broadcast_ss(zs + 8 * g + r);
            const __m256i z = bcast_ld(zc + 8 * g + r);
            __m256i ia = _mm256_add_epi32(
                z, _mm256_add_epi32(_mm256_madd_epi16(pl[r], _mm256_set1_epi16(1)),
                                    _mm256_madd_epi16(ph[r], _mm256_set1_epi16(16))));
            acc[r] = b32_step(acc[r], ia, sc, &P->dx[g][0]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _mm256_storeu_ps(out + 16 * r, acc[r]);
}

/* Q8_0 on plain AVX2 at 9 to 16 sequences (two vectors), lane = sequence: the panel holds
 * the activations as int16 pairs (xw), each row's block is widened to 32 int16 once, and per
 * pair of codes one broadcast dword of the row and per vector one madd gives each sequence
 * x_a w_a + x_b w_b exactly (at most 2 * 128 * 128), summed over the block in int32. No zero
 * point, no int16 sums: 32 madds per row and block against the nibble split's 32 maddubs
 * and 4 madds, and no 28 int16 adds (30 int32 adds instead); the scale is converted in
 * general registers (q8x_scale). Scratch harness (CPU ms per call, 16 sequences): 2048x2048
 * in cache 0.686-0.710 -> 0.644-0.658, 5632x2048 from DRAM 1.89-1.93 -> 1.73-1.81 (mean
 * 1.98-2.13 -> 1.78-1.85), against the nibble split with its zero point in registers. */
#ifndef Q8W_R
#define Q8W_R 4
#endif
_Static_assert(Q8W_R <= COLS_OUT, "the caller's out[] holds COLS_OUT rows of 16 sequences");
_Static_assert(8 % Q8W_R == 0, "the caller runs eight rows as whole groups");

/* R rows' block (rb bytes apart, from wb) as int16 codes into wbuf[r]. */
static AI void q8w_widen(const int R, const char *wb, size_t rb, int16_t (*wbuf)[QUANT_QK])
{
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        const char *qs = wb + (size_t)r * rb + 2;
        _mm256_store_si256((__m256i *)wbuf[r],
                           _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)qs)));
        _mm256_store_si256((__m256i *)wbuf[r] + 1,
                           _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16))));
    }
}

/* R rows (rb bytes apart, from w0) over ng blocks against both vectors of the panel (xw):
 * out[16 * r + 8 * v + l]. */
static AI void q8w_rows(const int R, const char *w0, size_t rb, int ng,
                        const struct cols_panel *P, float *out)
{
    const size_t bb = sizeof(struct quant_block_q8_0);
    __m256 acc[Q8W_R][2];
    /* the next block is widened while this one runs: broadcasts straight after the store
     * they read made the loop wait on it (scratch harness, 2048x2048: 0.72 ms against 0.65) */
    int16_t wbuf[2][Q8W_R][QUANT_QK] __attribute__((aligned(32)));
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < 2; v++)
            acc[r][v] = _mm256_setzero_ps();
    if (ng > 0)
        q8w_widen(R, w0, rb, wbuf[0]);
    for (int g = 0; g < ng; g++) {
        const char *wb = w0 + (size_t)g * bb;
        /* the same block of the row eight on, read by the next group of rows (from DRAM
         * then, had it not been asked for a group's work ahead) */
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++)
            _mm_prefetch(wb + (size_t)(r + 8) * rb, _MM_HINT_T0);
        if (g + 1 < ng)
            q8w_widen(R, wb + bb, rb, wbuf[(g + 1) & 1]);
        int16_t(*wc)[QUANT_QK] = wbuf[g & 1];
        __m256i ia[Q8W_R][2];
        _Pragma("GCC unroll 16")
        for (int t = 0; t < QUANT_QK / 2; t++) {
            __m256i x0 = _mm256_load_si256(&P->xw[16 * g + t][0]);
            __m256i x1 = _mm256_load_si256(&P->xw[16 * g + t][1]);
            __asm__("" : "+x"(x0), "+x"(x1)); /* loaded once for the R rows, as in q8x_rows */
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m256i w = bcast_ld(&wc[r][2 * t]);
                const __m256i m0 = _mm256_madd_epi16(x0, w), m1 = _mm256_madd_epi16(x1, w);
                ia[r][0] = t ? _mm256_add_epi32(ia[r][0], m0) : m0;
                ia[r][1] = t ? _mm256_add_epi32(ia[r][1], m1) : m1;
                __asm__("" : "+x"(ia[r][0]), "+x"(ia[r][1]));
            }
        }
        /* into memory, from which each is broadcast by a load (no shuffle op) */
        int32_t sr[Q8W_R];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++)
            sr[r] = q8x_scale(wb + (size_t)r * rb);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const __m256 sc = _mm256_castsi256_ps(bcast_ld(&sr[r]));
            _Pragma("GCC unroll 2")
            for (int v = 0; v < 2; v++)
                acc[r][v] = b32_step(acc[r][v], ia[r][v], sc, &P->dx[g][v]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < 2; v++)
            _mm256_storeu_ps(out + 16 * r + 8 * v, acc[r][v]);
}

/* For n rows (at most 8; rb bytes apart, from w0) over ng blocks, what q8x_rows takes per
 * row and block: P->zc[g][i] = -128 * the sum of row i's 32 codes, P->zs[g][i] its scale.
 * Eight rows by vectors: per block each row's codes + 128 summed by vpsadbw into four
 * qwords, the eight rows' qwords packed and added down to one vector of eight sums, and the
 * eight f16 scales converted at once. Done per group of rows, this takes the xor of every
 * broadcast and the scale's conversion out of q8x_rows (scratch harness, 16 sequences:
 * 2048x2048 in cache 0.807, 0.848 -> 0.793, 0.782 CPU ms per call; 5632x2048 from DRAM
 * 2.27-2.30 -> 2.19-2.23; the nibble split ran at 16 sequences too then). At 8 sequences
 * the code sums in general registers inside q8x_rows cost more than this pass (scratch
 * harness, 5632x2048 from DRAM: 1.12-1.20 -> 1.33-1.40 CPU ms per call). */
static void q8x_pre(const char *w0, size_t rb, int n, int ng, struct cols_panel *P)
{
    const size_t bb = sizeof(struct quant_block_q8_0);
    if (n < 8) {
        for (int g = 0; g < ng; g++)
            for (int i = 0; i < n; i++) {
                const struct quant_block_q8_0 *b =
                    (const struct quant_block_q8_0 *)(w0 + (size_t)i * rb) + g;
                int32_t sum = 0;
                for (int l = 0; l < QUANT_QK; l++)
                    sum += b->qs[l];
                P->zc[g][i] = -128 * sum;
                P->zs[g][i] = _cvtsh_ss(b->d);
            }
        return;
    }
    const __m256i flip = _mm256_set1_epi8((char)0x80), z = _mm256_setzero_si256();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int g = 0; g < ng; g++) {
        const char *wb = w0 + (size_t)g * bb;
        __m256i s[8];
        __m128i h = _mm_setzero_si128();
        _Pragma("GCC unroll 8")
        for (int i = 0; i < 8; i++) {
            const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)(wb + (size_t)i * rb);
            s[i] = _mm256_sad_epu8(
                _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), flip), z);
            h = _mm_insert_epi16(h, b->d, i);
        }
        _mm256_store_ps(P->zs[g], _mm256_cvtph_ps(h));
        /* per 128-bit lane, words of qwords (a, b) of rows 0..3: a0 b0 a1 b1 a2 b2 a3 b3 (each
         * sum at most 8 * 255, so the packs do not saturate) */
        __m256i p0 = _mm256_packus_epi32(_mm256_packus_epi32(s[0], s[1]),
                                         _mm256_packus_epi32(s[2], s[3]));
        __m256i p1 = _mm256_packus_epi32(_mm256_packus_epi32(s[4], s[5]),
                                         _mm256_packus_epi32(s[6], s[7]));
        __m256i m0 = _mm256_madd_epi16(p0, ones), m1 = _mm256_madd_epi16(p1, ones);
        __m256i t = _mm256_add_epi32(_mm256_permute2x128_si256(m0, m1, 0x20),
                                     _mm256_permute2x128_si256(m0, m1, 0x31));
        /* t = sum(w + 128): -128 * sum(w) = -128 * (t - 32 * 128) */
        _mm256_store_si256((__m256i *)P->zc[g],
                           _mm256_sub_epi32(_mm256_set1_epi32(128 * QUANT_QK * 128),
                                            _mm256_slli_epi32(t, 7)));
    }
}
#endif

/* Superblock sb of a Q4_K or Q6_K row, decoded: its 256 codes in element order (Q4_K's
 * 0..15, Q6_K's 0..63, Q6_K's zero point 32 left on), its sub-block scales sc (Q4_K 8 of 32
 * elements, Q6_K 16 of 16) and min pairs mp[i] = (m_2i, m_2i+1) (Q4_K) or scale pairs
 * (sc_2i, sc_2i+1) (Q6_K), d and dmin. */
static AI void k_decode(const enum ggml_type t, const char *w, uint8_t *q, int16_t *sc,
                        int32_t *mp, float *d, float *dmin)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    if (t == GGML_TYPE_Q4_K) {
        const struct quant_block_q4_k *b = (const struct quant_block_q4_k *)w;
        __m128i sc16, m16;
        q4_k_scales(b->scales, &sc16, &m16);
        _mm_storeu_si128((__m128i *)sc, sc16);
        /* the int16 mins in order are the little-endian pairs (m_2i, m_2i+1) */
        _mm_storeu_si128((__m128i *)mp, m16);
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
            _mm256_store_si256((__m256i *)(q + 64 * c), _mm256_and_si256(raw, low4));
            _mm256_store_si256((__m256i *)(q + 64 * c + 32),
                               _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
        }
        *d = _cvtsh_ss(b->d);
        *dmin = _cvtsh_ss(b->dmin);
        return;
    }
    const struct quant_block_q6_k *b = (const struct quant_block_q6_k *)w;
    const __m256i hi2 = _mm256_set1_epi8(0x30);
    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    _mm256_storeu_si256((__m256i *)sc, sc16);
    _mm256_storeu_si256((__m256i *)mp, sc16);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        _Pragma("GCC unroll 4")
        for (int v = 0; v < 4; v++) {
            __m256i l = v & 1 ? l1 : l0;
            __m256i lo = v < 2 ? _mm256_and_si256(l, low4)
                               : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
            __m256i hb = v == 0 ? _mm256_slli_epi16(qh, 4)
                       : v == 1 ? _mm256_slli_epi16(qh, 2)
                       : v == 2 ? qh : _mm256_srli_epi16(qh, 2);
            _mm256_store_si256((__m256i *)(q + 128 * h + 32 * v),
                               _mm256_or_si256(lo, _mm256_and_si256(hb, hi2)));
        }
    }
    *d = _cvtsh_ss(b->d);
    *dmin = 0.0f;
}

/* ia[v] += sc * (the G codes at q . the G activation bytes of x[.][v]) for one sub-block,
 * exactly: int16 partial sums where they fit (Q4_K: 16 products of at most 15 * 128; Q6_K:
 * 4 of at most 63 * 128), then madd by sc (or vpdpwssd against (sc, 0)). */
static AI void k_sub(const enum ggml_type t, const int V, const uint8_t *q, const __m256i *x,
                     int sc, __m256i (*ia)[2])
{
#ifdef __AVXVNNI__
    if (t == GGML_TYPE_Q4_K) {
        /* two chains of four vpdpbusd (each sum at most 16 * 15 * 128), each into its own
         * accumulator, so no chain waits on the other */
        const __m256i scv = _mm256_set1_epi32((uint16_t)sc), z = _mm256_setzero_si256();
        _Pragma("GCC unroll 2")
        for (int c = 0; c < 2; c++) {
            __m256i p[2] = {z, z};
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                __m256i w = _mm256_set1_epi32(ld32(q + 4 * (4 * c + k)));
                _Pragma("GCC unroll 2")
                for (int v = 0; v < V; v++)
                    p[v] = _mm256_dpbusd_avx_epi32(p[v], w, x[2 * (4 * c + k) + v]);
            }
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia[c][v] = _mm256_dpwssd_avx_epi32(ia[c][v], p[v], scv);
        }
        return;
    }
#endif
    /* maddubs + madd in both sets where the codes go beyond 15 (Q6_K: vpdpbusd would need a
     * vpdpwssd per four products) */
    const __m256i scv = _mm256_set1_epi16((short)sc);
    const int n = t == GGML_TYPE_Q4_K ? 8 : 2;
    for (int c = 0; c < (t == GGML_TYPE_Q4_K ? 1 : 2); c++) {
        __m256i p[2];
        _Pragma("GCC unroll 8")
        for (int k = 0; k < n; k++) {
            __m256i w = _mm256_set1_epi32(ld32(q + 4 * (n * c + k)));
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++) {
                __m256i m = _mm256_maddubs_epi16(w, x[2 * (n * c + k) + v]);
                p[v] = k ? _mm256_add_epi16(p[v], m) : m;
                /* Q4_K: keep the sum of 8 a chain; GCC otherwise issues all the sub-block's
                 * maddubs first and adds them as a tree, which needs more than 16 registers
                 * and spills in the loop (objdump) */
                if (t == GGML_TYPE_Q4_K)
                    __asm__("" : "+x"(p[v]));
            }
        }
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            ia[c][v] = _mm256_add_epi32(ia[c][v], _mm256_madd_epi16(p[v], scv));
    }
}

/* R rows of Q4_K or Q6_K over nsb superblocks against V vectors of the panel, as
 * kernels_avx2.c's tile_q45_k / tile_q6_k per (row, sequence): per superblock the exact
 * integer sum isum (sub-block scales folded in; Q6_K's zero point as -32 * sum sc_k bsum_k)
 * and for Q4_K msum = sum_j m_j bsum_j, then acc = fma(isum, d * dx, acc) and
 * acc = fnma(msum, dmin * dx, acc). */
static AI void k_rows(const enum ggml_type t, const int R, const int V, const char *w0,
                      size_t rb, int nsb, const struct cols_panel *P, float *out)
{
    const size_t bb = t == GGML_TYPE_Q4_K ? sizeof(struct quant_block_q4_k)
                                          : sizeof(struct quant_block_q6_k);
    const int G = t == GGML_TYPE_Q4_K ? 32 : 16, NP = t == GGML_TYPE_Q4_K ? 4 : 8;
    __m256 acc[COLS_RK][2];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (int sb = 0; sb < nsb; sb++) {
        uint8_t q[COLS_RK][QUANT_QK_K] __attribute__((aligned(32)));
        int16_t sc[COLS_RK][16];
        int32_t mp[COLS_RK][8];
        float d[COLS_RK], dmin[COLS_RK];
        const char *wb = w0 + (size_t)sb * bb;
        /* COLS_PFK superblocks ahead; past a row's end, the same row of the next block of rows
         * (R - 1 rows on from the row's continuation, which is a row this block reads) */
        const size_t pfo = sb + COLS_PFK < nsb ? COLS_PFK * bb : COLS_PFK * bb + (size_t)(R - 1) * rb;
        for (int r = 0; r < R; r++) {
            for (size_t o = 0; o < bb; o += 64)
                _mm_prefetch(wb + (size_t)r * rb + pfo + o, _MM_HINT_T0);
            k_decode(t, wb + (size_t)r * rb, q[r], sc[r], mp[r], &d[r], &dmin[r]);
        }
        const __m256i *x = P->x[64 * sb];
        for (int r = 0; r < R; r++) {
            __m256i ia2[2][2], ia[2], ib[2];
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia2[0][v] = ia2[1][v] = ib[v] = _mm256_setzero_si256();
            for (int j = 0; j < QUANT_QK_K / G; j++)
                k_sub(t, V, q[r] + G * j, x + 2 * (G / 4) * j, sc[r][j], ia2);
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++)
                ia[v] = _mm256_add_epi32(ia2[0][v], ia2[1][v]);
            _Pragma("GCC unroll 8")
            for (int i = 0; i < NP; i++) {
                __m256i m = _mm256_set1_epi32(mp[r][i]);
                _Pragma("GCC unroll 2")
                for (int v = 0; v < V; v++)
                    ib[v] = _mm256_add_epi32(ib[v], _mm256_madd_epi16(P->bs[sb][i][v], m));
            }
            __m256 dw = _mm256_set1_ps(d[r]), dm = _mm256_set1_ps(dmin[r]);
            _Pragma("GCC unroll 2")
            for (int v = 0; v < V; v++) {
                __m256 dx = _mm256_load_ps((const float *)&P->dx[sb][v]);
                if (t == GGML_TYPE_Q6_K)
                    ia[v] = _mm256_sub_epi32(ia[v], _mm256_slli_epi32(ib[v], 5));
                acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[v]), _mm256_mul_ps(dw, dx),
                                            acc[r][v]);
                if (t == GGML_TYPE_Q4_K)
                    acc[r][v] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ib[v]),
                                                 _mm256_mul_ps(dm, dx), acc[r][v]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 2")
        for (int v = 0; v < V; v++)
            _mm256_storeu_ps(out + 16 * r + 8 * v, acc[r][v]);
}

#define K_T(T)                                                                                 \
    do {                                                                                       \
        if (V == 1)                                                                            \
            R == COLS_RK ? k_rows(T, COLS_RK, 1, w0, rb, ng, P, out)                           \
                         : k_rows(T, 1, 1, w0, rb, ng, P, out);                                \
        else                                                                                   \
            R == COLS_RK ? k_rows(T, COLS_RK, 2, w0, rb, ng, P, out)                           \
                         : k_rows(T, 1, 2, w0, rb, ng, P, out);                                \
    } while (0)

#define COLS_T(T)                                                                              \
    do {                                                                                       \
        if (V == 1)                                                                            \
            R == COLS_R1 ? cols_rows(T, COLS_R1, 1, w0, rb, ng, P, out)                        \
                         : cols_rows(T, 1, 1, w0, rb, ng, P, out);                             \
        else                                                                                   \
            R == COLS_R2 ? cols_rows(T, COLS_R2, 2, w0, rb, ng, P, out)                        \
                         : cols_rows(T, 1, 2, w0, rb, ng, P, out);                             \
    } while (0)

/* R rows from w0 over ng blocks (i: the first row's place in its eight-row group, for
 * q8x_rows) into out[16 * r + s]. */
static void cols_any(enum ggml_type t, int V, int R, int i, const char *w0, size_t rb, int ng,
                     const struct cols_panel *P, float *out)
{
    if (t == GGML_TYPE_Q4_K)
        K_T(GGML_TYPE_Q4_K);
    else if (t == GGML_TYPE_Q6_K)
        K_T(GGML_TYPE_Q6_K);
    else if (t == GGML_TYPE_Q8_0)
#ifdef __AVXVNNI__
    {
        (void)i;
        COLS_T(GGML_TYPE_Q8_0);
    }
#else
    {
        const int32_t *zc = &P->zc[0][i];
        const float *zs = &P->zs[0][i];
        if (V == 1)
            R == Q8X_R ? q8x_rows(Q8X_R, w0, rb, ng, P, zc, zs, out)
                       : q8x_rows(1, w0, rb, ng, P, zc, zs, out);
        else
            R == Q8W_R ? q8w_rows(Q8W_R, w0, rb, ng, P, out) : q8w_rows(1, w0, rb, ng, P, out);
    }
#endif
    else if (t == GGML_TYPE_Q4_0)
        COLS_T(GGML_TYPE_Q4_0);
    else if (t == GGML_TYPE_Q5_0)
        COLS_T(GGML_TYPE_Q5_0);
    else
        COLS_T(GGML_TYPE_IQ4_NL);
}

static AI int32_t pair16(int lo, int hi)
{
    return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
}

/* The panel of n_seq Q8_K activations over ng superblocks for weight type t (zero beyond
 * n_seq): bytes, scales and the int16 pairs of bsums k_rows takes. */
static void panel_q8_k(enum ggml_type t, const struct kern_act *X, int n_seq, int V, int ng,
                       struct cols_panel *P)
{
    for (int g = 0; g < ng; g++) {
        int32_t xd[64][16], bs[8][16];
        float dx[16];
        for (int s = 0; s < 8 * V; s++) {
            const struct quant_block_q8_k *b =
                (const struct quant_block_q8_k *)((const char *)X->data +
                                                  (size_t)s * X->stride) + g;
            for (int j = 0; j < 64; j++)
                xd[j][s] = s < n_seq ? ld32(b->qs + 4 * j) : 0;
            dx[s] = s < n_seq ? b->d : 0.0f;
            for (int i = 0; i < 8; i++) {
                const int16_t *k = s < n_seq ? b->bsums : NULL;
                if (!k)
                    bs[i][s] = 0;
                else if (t == GGML_TYPE_Q6_K)
                    bs[i][s] = pair16(k[2 * i], k[2 * i + 1]);
                else /* Q4_K: sub-blocks of 32 */
                    bs[i][s] = i < 4 ? pair16(k[4 * i] + k[4 * i + 1], k[4 * i + 2] + k[4 * i + 3])
                                     : 0;
            }
        }
        for (int v = 0; v < V; v++) {
            for (int j = 0; j < 64; j++)
                P->x[64 * g + j][v] = _mm256_loadu_si256((const __m256i *)&xd[j][8 * v]);
            P->dx[g][v] = _mm256_loadu_ps(&dx[8 * v]);
            for (int i = 0; i < 8; i++)
                P->bs[g][i][v] = _mm256_loadu_si256((const __m256i *)&bs[i][8 * v]);
        }
    }
}

/* The panel of n_seq Q8_0 activations over ng blocks (zero beyond n_seq), eight sequences
 * at a time: each sequence's 32 bytes in one vector, transposed so that vector j holds dword
 * j of the eight. split (plain AVX2's Q8_0), no ic: at one vector (q8x_rows) x holds each
 * byte's x & 15 and xh its (x >> 4) + 8 (q8x_pre's per-row zero point), at two (q8w_rows) xw
 * holds the bytes as int16 pairs; otherwise x holds the bytes and ic -zero * sum(bytes). */
static void panel_q8_0(const struct kern_act *X, int n_seq, int V, int ng, int split, int zero,
                       struct cols_panel *P)
{
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int g = 0; g < ng; g++)
        for (int v = 0; v < V; v++) {
            __m256i r[8], t[8];
            uint16_t h[8];
            for (int i = 0; i < 8; i++) {
                int s = 8 * v + i;
                if (s < n_seq) {
                    const struct quant_block_q8_0 *b =
                        (const struct quant_block_q8_0 *)((const char *)X->data +
                                                          (size_t)s * X->stride) + g;
                    r[i] = _mm256_loadu_si256((const __m256i *)b->qs);
                    h[i] = b->d;
                } else {
                    r[i] = _mm256_setzero_si256();
                    h[i] = 0;
                }
            }
            _mm256_store_ps((float *)&P->dx[g][v],
                            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
#ifdef __AVXVNNI__
            (void)split;
#else
            if (split && V == 2) {
                /* q8w_rows: each sequence's 32 bytes widened to int16, dword t = elements
                 * 2t and 2t + 1 */
                __m256i lo[8], hi[8];
                for (int i = 0; i < 8; i++) {
                    lo[i] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(r[i]));
                    hi[i] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(r[i], 1));
                }
                transpose8x8_epi32(lo, t);
                for (int j = 0; j < 8; j++)
                    _mm256_store_si256(&P->xw[16 * g + j][v], t[j]);
                transpose8x8_epi32(hi, t);
                for (int j = 0; j < 8; j++)
                    _mm256_store_si256(&P->xw[16 * g + 8 + j][v], t[j]);
                continue;
            }
            if (split) {
                const __m256i low4 = _mm256_set1_epi8(15), eight = _mm256_set1_epi8(8);
                __m256i lo[8];
                for (int i = 0; i < 8; i++) {
                    lo[i] = _mm256_and_si256(r[i], low4);
                    /* (x >> 4) + 8 = ((x >> 4) & 15) ^ 8 */
                    r[i] = _mm256_xor_si256(_mm256_and_si256(_mm256_srli_epi16(r[i], 4), low4),
                                            eight);
                }
                transpose8x8_epi32(lo, t);
                for (int j = 0; j < 8; j++)
                    _mm256_store_si256(&P->x[8 * g + j][v], t[j]);
                transpose8x8_epi32(r, t);
                for (int j = 0; j < 8; j++)
                    _mm256_store_si256(&P->xh[8 * g + j][v], t[j]);
                continue;
            }
#endif
            transpose8x8_epi32(r, t);
            __m256i a = _mm256_setzero_si256();
            for (int j = 0; j < 8; j++) {
                _mm256_store_si256(&P->x[8 * g + j][v], t[j]);
                a = _mm256_add_epi16(a, _mm256_maddubs_epi16(ones8, t[j]));
            }
            __m256i sum = _mm256_madd_epi16(a, ones16);
            _mm256_store_si256(&P->ic[g][v], _mm256_mullo_epi32(sum, _mm256_set1_epi32(-zero)));
        }
}

int COLS_FN(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
            int y_stride, int row_begin, int row_end)
{
    static _Thread_local struct cols_panel P __attribute__((aligned(32)));
    const enum ggml_type t = W->type;
    const int kq = t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K;
    if ((!kq && t != GGML_TYPE_Q8_0 && t != GGML_TYPE_Q4_0 && t != GGML_TYPE_Q5_0 &&
         t != GGML_TYPE_IQ4_NL) ||
        n_seq < 1 || n_seq > 16 || W->cols > COLS_MAXK || W->cols % (kq ? QUANT_QK_K : QUANT_QK))
        return -1;
    /* Q6_K's decode into codes costs as much as kernels_avx2.c's tiles save at one vector of
     * sequences (bench_kernels) */
    if (t == GGML_TYPE_Q6_K && n_seq <= 8)
        return -1;
#ifdef __AVXVNNI__
    const int zero = t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : 128;
#else
    /* Q8_0: q8x_rows (its own correction per row and block, q8x_pre) */
    const int zero = t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : 0;
#endif
    const int ng = W->cols / (kq ? QUANT_QK_K : QUANT_QK), V = n_seq > 8 ? 2 : 1;
#ifdef __AVXVNNI__
    const int q8x = 0;
#else
    const int q8x = t == GGML_TYPE_Q8_0;
#endif
    if (kq)
        panel_q8_k(t, X, n_seq, V, ng, &P);
    if (!kq)
        panel_q8_0(X, n_seq, V, ng, q8x, zero, &P);
    float out[COLS_OUT * 16] __attribute__((aligned(32)));
    const size_t rb = W->row_bytes;
#ifdef __AVXVNNI__
    const int RV = kq ? COLS_RK : V == 1 ? COLS_R1 : COLS_R2;
#else
    const int RV = kq ? COLS_RK
                 : q8x ? (V == 2 ? Q8W_R : Q8X_R)
                 : V == 1 ? COLS_R1 : COLS_R2;
#endif
    for (int r = row_begin; r < row_end;) {
        if (row_end - r >= 8) {
            /* eight rows, then per vector of sequences one 8x8 transpose, so each sequence
             * takes its eight results in one store (not 8 * n_seq scalar ones) */
#ifndef __AVXVNNI__
            if (q8x && V == 1)
                q8x_pre((const char *)W->data + (size_t)r * rb, rb, 8, ng, &P);
#endif
            for (int i = 0; i < 8; i += RV)
                cols_any(t, V, RV, i, (const char *)W->data + (size_t)(r + i) * rb, rb, ng, &P,
                         out + 16 * i);
            for (int v = 0; v < V; v++) {
                __m256i o[8], y[8];
                for (int i = 0; i < 8; i++)
                    o[i] = _mm256_castps_si256(_mm256_load_ps(out + 16 * i + 8 * v));
                transpose8x8_epi32(o, y);
                for (int j = 0; j < 8 && 8 * v + j < n_seq; j++)
                    _mm256_storeu_ps(Y + (size_t)(8 * v + j) * y_stride + r,
                                     _mm256_castsi256_ps(y[j]));
            }
            r += 8;
            continue;
        }
        int R = row_end - r >= RV ? RV : 1;
#ifndef __AVXVNNI__
        if (q8x && V == 1)
            q8x_pre((const char *)W->data + (size_t)r * rb, rb, R, ng, &P);
#endif
        cols_any(t, V, R, 0, (const char *)W->data + (size_t)r * rb, rb, ng, &P, out);
        for (int i = 0; i < R; i++)
            for (int s = 0; s < n_seq; s++)
                Y[(size_t)s * y_stride + r + i] = out[16 * i + s];
        r += R;
    }
    return 0;
}
