/* Q8_0 weights against Q8_0 activations on AMX-INT8 (the amx set, kernels_amx.c), for prompt
 * rows and for decode steps of several sequences.
 *
 * The weights are read in place: tile A is 16 rows x 32 bytes with the stride of a weight
 * row, so a block's codes of 16 rows (block g at byte g * 34 + 2 of each row) load as one
 * tile. Tile B holds the same block of 16 sequences' activations in the form TDPBSSD wants
 * (8 rows of 64 bytes: row t, bytes 4s..4s+3 = dword t of sequence s), built once per call
 * into a panel. One TDPBSSD gives the 16 x 16 exact int32 dots of one block (signed codes
 * times signed activations: the integers the AVX-512 paths form with their offsets taken
 * off). The C tile is stored and each of its rows (one weight row, lane = sequence) takes
 * step() of gemm_avx512.c: acc = fma(float(sum), scale * dx, acc), block by block in order,
 * so a (row, sequence) result is the bits of the AVX-512 set's gemm and matmul (the prompt
 * cache relies on it). Two C tiles alternate, so the next block's product runs while the
 * float steps of this one do. Calls of at most 8 sequences use 8-sequence panels (B 8 rows of
 * 32 bytes, C 16 x 8): the stored C tile then holds two weight rows per 64 bytes, so each
 * float step fills all 16 lanes of its register (the same lane operations, the same bits).
 *
 * Sequences go in chunks whose panels fit AMX_PANEL_BYTES (each weight row group is read
 * from memory once per chunk, then from cache for the chunk's other sequences); rows in
 * groups of 16, a last partial group by kern_gemm_avx512 (the same bits). Tile state is
 * configured at the start of a call and released at its end, on the calling thread: every
 * thread that calls configures its own tiles. The process must have been granted the tile
 * state first (kern_amx_ready). */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "kernels_simd.h"
#include "transpose8.h"

/* The longest row taken (elements). */
#define AMX_MAXK 16384
/* Panel bytes per sequence chunk: 16-sequence panels of the whole K, as many as fit (at
 * least one, at most AMX_MAXSUB). */
#define AMX_PANEL_BYTES (1u << 20)
#define AMX_MAXSUB 16
/* Blocks ahead each weight row is prefetched. */
#define AMX_PF 8
/* The most bytes of 16 rows for which the next 16 rows are prefetched into L2 as well, in
 * chunks of one panel (decode steps): short rows (2048 columns, 34 KiB per 16) gained by it,
 * long ones (5632 columns, 94 KiB) lost, their rows being long enough streams for the
 * hardware prefetcher. Chunks of several panels (prompts) keep the in-row prefetch alone:
 * there each group's reads are shared by all the panels, and the next-group prefetch was
 * only measured on decode. */
#define AMX_PF_NEXT (64u << 10)

/* A panel block of N sequences (N = 16, or 8 for calls of at most 8): tile B (8 rows of 4N
 * bytes) then the sequences' N activation scales as floats. */
#define AMX_BLK(N) (32 * (N) + 4 * (N))

struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Tiles 0 and 1: C (16 x N int32); 2: A (16 weight rows x 32 codes); 3: B (8 x 4N bytes). */
static void amx_config(int N)
{
    struct amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = c.rows[1] = 16;
    c.colsb[0] = c.colsb[1] = (uint16_t)(4 * N);
    c.rows[2] = 16;
    c.colsb[2] = 32;
    c.rows[3] = 8;
    c.colsb[3] = (uint16_t)(4 * N);
    /* GCC does not count LDTILECFG as reading c: where this function was not inlined it
     * dropped the stores above (only the palette byte was left, and the first tile
     * instruction faulted). The empty asm reads c. */
    __asm__ volatile("" : : "m"(c));
    _tile_loadconfig(&c);
}

/* Sequences [0, ns) (ns <= N) of X into the ng blocks of P, zeros for [ns, N). Each block is
 * a transpose of the sequences' 8 dwords of codes: row s's dwords into lane s of rows 0..7,
 * with masked loads (nothing read past sequence ns) and unpacks in registers; the scales by a
 * gather of the sequences' f16 words. */
static void amx_panel(const struct kern_act *X, int s0, int ns, int ng, int N, char *P)
{
    const char *x0 = (const char *)X->data + (size_t)s0 * X->stride;
    const __m512i sidx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)X->stride));
    const __mmask16 live = (__mmask16)((1u << ns) - 1);
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int g = 0; g < ng; g++) {
        char *pb = P + (size_t)g * AMX_BLK(N);
        const char *q = x0 + (size_t)g * sizeof(struct quant_block_q8_0);
        __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, sidx, q, 1);
        __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
        q += 2;
        if (N == 16) {
            /* z[s]: sequence s's dwords in the low half, s + 8's in the high half */
            __m512i z[8], a[8], b[8];
            for (int s = 0; s < 8; s++)
                z[s] = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_maskz_loadu_epi32(
                        (__mmask8)(s < ns ? 0xff : 0), q + (size_t)(s < ns ? s : 0) * X->stride)),
                    _mm256_maskz_loadu_epi32((__mmask8)(s + 8 < ns ? 0xff : 0),
                                             q + (size_t)(s + 8 < ns ? s + 8 : 0) * X->stride),
                    1);
            for (int s = 0; s < 8; s += 2) {
                a[s] = _mm512_unpacklo_epi32(z[s], z[s + 1]);
                a[s + 1] = _mm512_unpackhi_epi32(z[s], z[s + 1]);
            }
            /* b[j] (j < 4): dwords j and j + 4 of sequences 0-3 and 8-11; b[4 + j]: of 4-7
             * and 12-15 */
            for (int k = 0; k < 8; k += 4) {
                b[k] = _mm512_unpacklo_epi64(a[k], a[k + 2]);
                b[k + 1] = _mm512_unpackhi_epi64(a[k], a[k + 2]);
                b[k + 2] = _mm512_unpacklo_epi64(a[k + 1], a[k + 3]);
                b[k + 3] = _mm512_unpackhi_epi64(a[k + 1], a[k + 3]);
            }
            for (int j = 0; j < 4; j++) {
                _mm512_store_si512(pb + 64 * j, _mm512_permutex2var_epi64(b[j], lo, b[4 + j]));
                _mm512_store_si512(pb + 64 * (j + 4),
                                   _mm512_permutex2var_epi64(b[j], hi, b[4 + j]));
            }
            _mm512_storeu_ps(pb + 32 * N, d);
        } else {
            __m256i y[8], o[8];
            for (int s = 0; s < 8; s++)
                y[s] = _mm256_maskz_loadu_epi32((__mmask8)(s < ns ? 0xff : 0),
                                                q + (size_t)(s < ns ? s : 0) * X->stride);
            transpose8x8_epi32(y, o);
            for (int j = 0; j < 8; j++)
                _mm256_store_si256((__m256i *)(pb + 32 * j), o[j]);
            _mm256_storeu_ps((float *)(pb + 32 * N), _mm512_castps512_ps256(d));
        }
    }
}

/* Block g's scales of the 16 rows from w0 (rb bytes apart) as floats: sc[m] row m's. Read
 * as the block is used, so the rows stream from memory once, under the tile loads and their
 * prefetches. */
static AI __m512 amx_scales(const char *w0, size_t rb, int g, float *sc)
{
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)rb));
    __m512i h = _mm512_i32gather_epi32(idx, w0 + (size_t)g * sizeof(struct quant_block_q8_0), 1);
    __m512 v = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
    _mm512_store_ps(sc, v);
    return v;
}

/* step() for the 16 rows of one stored C tile (c: 16 rows of N int32, row m's scale sc[m]
 * and lane m of scv; dx the block's N activation scales). At N = 8 a register holds two rows
 * (rows 2p and 2p + 1 in acc[p]'s low and high halves), the lanes' operations those of N = 16. */
static AI void amx_step(const int N, __m512 acc[16], const int32_t *c, const float *sc,
                        __m512 scv, const float *dx)
{
    if (N == 16) {
        __m512 d = _mm512_load_ps(dx);
        _Pragma("GCC unroll 16")
        for (int m = 0; m < 16; m++)
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)),
                                     _mm512_mul_ps(_mm512_set1_ps(sc[m]), d), acc[m]);
    } else {
        __m512 d = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(dx))));
        _Pragma("GCC unroll 8")
        for (int p = 0; p < 8; p++) {
            __m512i pair = _mm512_set_epi32(2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                            2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                            2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p);
            acc[p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * p)),
                                     _mm512_mul_ps(_mm512_permutexvar_ps(pair, scv), d), acc[p]);
        }
    }
}

#define AMX_DP(C, g)                                                                           \
    do {                                                                                       \
        _tile_zero(C);                                                                         \
        _tile_loadd(2, w0 + (size_t)(g) * sizeof(struct quant_block_q8_0) + 2, (long)rb);     \
        _tile_loadd(3, P + (size_t)(g) * AMX_BLK(N), 4 * N);                                   \
        _tile_dpbssd(C, 2, 3);                                                              \
    } while (0)

/* While block g of the 16 rows from w0 runs: their block g + AMX_PF into L1, and block g's
 * share of the next 16 rows' bytes (nx, 16 * rb contiguous ones; none if NULL) into L2. The
 * 16 rows side by side in a page defeat the hardware prefetcher, and a group's first blocks
 * would otherwise be read at full latency. Rows of a multiple of 64 bytes (2048 columns)
 * take one prefetch per new line, about every other block, rather than one per block. */
static AI void amx_pf(const char *w0, const char *nx, size_t rb, int ng, int g)
{
    if (g + AMX_PF < ng) {
        const size_t bb = sizeof(struct quant_block_q8_0);
        const char *p = w0 + (size_t)(g + AMX_PF) * bb;
        if (rb % 64 == 0) {
            /* the 16 rows sit alike in their lines: the line of the block's last byte, when
             * it is not the previous block's */
            if (((uintptr_t)p + bb - 1) / 64 != ((uintptr_t)p - 1) / 64) {
                _Pragma("GCC unroll 16")
                for (int m = 0; m < 16; m++)
                    _mm_prefetch(p + bb - 1 + (size_t)m * rb, _MM_HINT_T0);
            }
        } else {
            _Pragma("GCC unroll 16")
            for (int m = 0; m < 16; m++)
                _mm_prefetch(p + (size_t)m * rb, _MM_HINT_T0);
        }
    }
    if (!nx)
        return;
    /* a row is ng blocks: block g's share of the next 16 rows is 16 blocks' bytes */
    const size_t share = 16 * sizeof(struct quant_block_q8_0);
    for (size_t l = (size_t)g * share & ~(size_t)63; l < (size_t)(g + 1) * share; l += 64)
        _mm_prefetch(nx + l, _MM_HINT_T1);
}

/* The 16 rows' results of sequences [0, ns) into y (sequence s's 16 floats at y + s * ys):
 * the accumulators (lane = sequence; at N = 8 two rows per register) transposed in
 * registers, one 64-byte store per sequence. Every loop over acc (here and in amx_rows16)
 * is unrolled in full: with one loop left rolled (its bound na is a constant only after
 * inlining) GCC 12 kept acc[] as an array on the stack, so each block's float step loaded
 * and stored all 16 accumulators. */
static AI void amx_store(const int N, __m512 acc[16], int ns, float *y, size_t ys)
{
    __m512 t[16], u[16];
    const int na = N == 16 ? 16 : 8;
    _Pragma("GCC unroll 16")
    for (int i = 0; i < na; i += 2) {
        t[i] = _mm512_unpacklo_ps(acc[i], acc[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(acc[i], acc[i + 1]);
    }
    /* u[4k + j], 128-bit lane L: element 4L + j of acc[4k..4k+3] */
    _Pragma("GCC unroll 16")
    for (int k = 0; k < na; k += 4) {
        u[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        u[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
        u[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
        u[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
    }
    if (N == 16) {
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 4; j++) {
            __m512 v01 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
            __m512 v23 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xee);
            __m512 w01 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
            __m512 w23 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xee);
            __m512 c[4] = {_mm512_shuffle_f32x4(v01, w01, 0x88), _mm512_shuffle_f32x4(v01, w01, 0xdd),
                           _mm512_shuffle_f32x4(v23, w23, 0x88), _mm512_shuffle_f32x4(v23, w23, 0xdd)};
            _Pragma("GCC unroll 16")
            for (int q = 0; q < 4; q++)
                if (4 * q + j < ns)
                    _mm512_storeu_ps(y + (size_t)(4 * q + j) * ys, c[q]);
        }
    } else {
        /* acc[p]: row 2p in lanes 0-7, row 2p + 1 in lanes 8-15; u[j] lane 0/1: rows 0, 2, 4,
         * 6 of sequence j / 4 + j, lanes 2/3 rows 1, 3, 5, 7; u[4 + j] the next 8 rows */
        const __m512i lo = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
        const __m512i hi = _mm512_setr_epi32(4, 12, 5, 13, 6, 14, 7, 15, 20, 28, 21, 29, 22, 30, 23, 31);
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 4; j++) {
            if (j < ns)
                _mm512_storeu_ps(y + (size_t)j * ys, _mm512_permutex2var_ps(u[j], lo, u[4 + j]));
            if (4 + j < ns)
                _mm512_storeu_ps(y + (size_t)(4 + j) * ys, _mm512_permutex2var_ps(u[j], hi, u[4 + j]));
        }
    }
}

/* 16 rows from w0 against one N-sequence panel over ng blocks, into sequence s's y + s * ys
 * for s < ns. Block g's
 * product runs in tile g % 2; the float steps of block g - 1 run while it does, from the
 * buffer its tile was stored to one block before (loads right after a tile store wait for
 * the store to complete). */
static AI void amx_rows16(const int N, const char *w0, size_t rb, int ng, const char *P,
                          int pf, const char *nx, int ns, float *y, size_t ys)
{
    int32_t cb[2][16 * 16] __attribute__((aligned(64)));
    float sc[16] __attribute__((aligned(64)));
    __m512 acc[16], scv;
    const int na = N == 16 ? 16 : 8;
    _Pragma("GCC unroll 16")
    for (int m = 0; m < na; m++)
        acc[m] = _mm512_setzero_ps();
#define AMX_DX(g) ((const float *)(P + (size_t)(g) * AMX_BLK(N) + 32 * N))
    AMX_DP(0, 0);
    for (int g = 0; g < ng; g += 2) {
        if (pf)
            amx_pf(w0, nx, rb, ng, g);
        _tile_stored(0, cb[0], 4 * N);
        if (g + 1 < ng)
            AMX_DP(1, g + 1);
        if (g > 0) {
            scv = amx_scales(w0, rb, g - 1, sc);
            amx_step(N, acc, cb[1], sc, scv, AMX_DX(g - 1));
        }
        if (g + 1 >= ng)
            break;
        if (pf)
            amx_pf(w0, nx, rb, ng, g + 1);
        _tile_stored(1, cb[1], 4 * N);
        if (g + 2 < ng)
            AMX_DP(0, g + 2);
        scv = amx_scales(w0, rb, g, sc);
        amx_step(N, acc, cb[0], sc, scv, AMX_DX(g));
    }
    /* the last block's steps */
    scv = amx_scales(w0, rb, ng - 1, sc);
    amx_step(N, acc, cb[(ng - 1) % 2], sc, scv, AMX_DX(ng - 1));
#undef AMX_DX
    amx_store(N, acc, ns, y, ys);
}

/* kern_gemm_amx with N-sequence panels. */
static AI void amx_gemm_n(const int N, const struct kern_mat *W, const struct kern_act *X,
                          int n_seq, float *Y, int y_stride, int row_begin, int r_end)
{
    static _Thread_local char pan[AMX_PANEL_BYTES] __attribute__((aligned(64)));
    const int ng = W->cols / QUANT_QK;
    const size_t rb = W->row_bytes, pb = (size_t)AMX_BLK(N) * (size_t)ng;
    int subs = (int)(sizeof pan / pb);
    if (subs > AMX_MAXSUB)
        subs = AMX_MAXSUB;

    amx_config(N);
    for (int s0 = 0; s0 < n_seq; s0 += N * subs) {
        int nsub = (n_seq - s0 + N - 1) / N < subs ? (n_seq - s0 + N - 1) / N : subs;
        for (int j = 0; j < nsub; j++) {
            int a = s0 + N * j;
            amx_panel(X, a, n_seq - a < N ? n_seq - a : N, ng, N, pan + (size_t)j * pb);
        }
        for (int r = row_begin; r < r_end; r += 16) {
            const char *w0 = (const char *)W->data + (size_t)r * rb;
            for (int j = 0; j < nsub; j++) {
                int a = s0 + N * j, ns = n_seq - a < N ? n_seq - a : N;
                amx_rows16(N, w0, rb, ng, pan + (size_t)j * pb, j == 0,
                           nsub == 1 && r + 32 <= W->rows && 16 * rb <= AMX_PF_NEXT
                               ? w0 + 16 * rb
                               : NULL,
                           ns, Y + (size_t)a * y_stride + r, (size_t)y_stride);
            }
        }
    }
    _tile_release();
}

int kern_gemm_amx(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                  int y_stride, int row_begin, int row_end)
{
    if (W->type != GGML_TYPE_Q8_0 || n_seq < 1 || W->cols > AMX_MAXK || W->cols % QUANT_QK)
        return -1;
    const int r_end = row_begin + (row_end - row_begin) / 16 * 16;
    if (r_end > row_begin) {
        if (n_seq <= 8)
            amx_gemm_n(8, W, X, n_seq, Y, y_stride, row_begin, r_end);
        else
            amx_gemm_n(16, W, X, n_seq, Y, y_stride, row_begin, r_end);
    }
    if (r_end < row_end)
        return kern_gemm_avx512(W, X, n_seq, Y, y_stride, r_end, row_end);
    return 0;
}
