/* The prefill GEMM on AVX-512 VNNI: a prompt's activation rows against a quantized weight
 * matrix, for the types gemm_decode.h describes.
 *
 * Blocking: sequences in chunks of GEMM_SC, K in chunks of GEMM_KC elements. For each chunk
 * pair, the activations' per-sub-block scale and byte sum are read once; then for each pair
 * of 16-row groups the weights are decoded once into a panel whose 512-bit vector t holds
 * bytes 4t..4t+3 of each of the 16 rows (lane = row), reused by every sequence of the chunk.
 * The register tile is 32 rows x 4 sequences: per 4 elements, two panel loads, four
 * broadcast activation dwords and eight vpdpbusd (codes unsigned, activations signed), so
 * a lane's sum is one row's dot and no horizontal sums are needed; per sub-block the int32
 * sums become floats with the rows' scales times the sequence's. The zero point of the
 * codes (and 128 for signed codes, which are offset to unsigned) is taken off in integers:
 * the sums start from -off * sum(activation bytes). The float steps for one (row,
 * sequence) are the same whatever the tile, so a result does not depend on n_seq, the row
 * range, or the other sequences. */
#include <immintrin.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "gemm_decode.h"
#include "kernels_simd.h"

#define GEMM_SC 128
/* Calls of at most this many sequences take narrow_rows. */
#ifndef GEMM_NARROW
#define GEMM_NARROW 8
#endif
/* Calls of this many sequences up to 16 take kern_gemm_avx512_cols where it has the type. */
#ifndef GEMM_COLS
#define GEMM_COLS 8
#endif
/* The most sub-blocks narrow_rows takes (K up to 16384 elements of 16-element sub-blocks). */
#define NARROW_MAXG 1024

struct panel {
    __m512i codes[GEMM_KC / 4];
    float scale[GEMM_MAXG][16];
    float bias[GEMM_MAXG][16];
};

/* Rows [r, r + nr) (nr <= 16) of W, sub-blocks [g0, g0 + ng): codes in element order into
 * tmp (rows past nr zero), scales and biases into p (lane = row). */
static void decode(const struct kern_mat *W, const struct gemm_type *ty, int r, int nr, int g0,
                   int ng, struct panel *p, uint8_t (*tmp)[GEMM_KC])
{
    int n = ng * ty->g;
    for (int i = 0; i < 16; i++) {
        if (i < nr) {
            gemm_decode_row(W->type, (const char *)W->data + (size_t)(r + i) * W->row_bytes,
                            g0, ng, tmp[i], &p->scale[0][i], &p->bias[0][i], 16);
        } else {
            memset(tmp[i], 0, (size_t)n);
            for (int g = 0; g < ng; g++)
                p->scale[g][i] = p->bias[g][i] = 0.0f;
        }
    }
}

/* The same, codes transposed into p's panel (lane = row, signed codes offset to unsigned). */
static void pack(const struct kern_mat *W, const struct gemm_type *ty, int r, int nr, int g0,
                 int ng, struct panel *p, uint8_t (*tmp)[GEMM_KC])
{
    int n = ng * ty->g;
    decode(W, ty, r, nr, g0, ng, p, tmp);
    const __m512i flip = _mm512_set1_epi8(ty->sgn ? (char)0x80 : 0);
    for (int t = 0; t < n / 4; t += 8) {
        __m256i lo[8], hi[8];
        gemm_transpose8(tmp[0], GEMM_KC, t, lo);
        gemm_transpose8(tmp[8], GEMM_KC, t, hi);
        for (int i = 0; i < 8; i++)
            p->codes[t + i] = _mm512_xor_si512(join(lo[i], hi[i]), flip);
    }
}

/* The per sub-block float step of one register of 16 rows (lane = row) and one sequence:
 * ia the integer sums, sc/bi the rows' scales and biases, d the sequence's scale, xm its
 * dx * sum. Every path of this file ends each sub-block with it, so a (row, sequence)
 * result is the same bits whichever path and tile computed its integers. */
static AI __m512 step(__m512 acc, __m512i ia, __m512 sc, __m512 bi, __m512 d, __m512 xm,
                      const int min)
{
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(sc, d), acc);
    return min ? _mm512_fnmadd_ps(bi, xm, acc) : acc;
}

/* Sequences xs[0..S) against the panels P[0..R): sub-blocks [0, ng) of the chunk, whose
 * activation bytes start at offsets off[g] of each row; dx/ic per sequence (GEMM_MAXG apart)
 * the sub-block scale and the integer start -zero * sum; xsum the float dx * sum for mins.
 * Y is read (unless first) and written. */
static AI void tile(const struct panel *const *P, const int R, const char *const *xs,
                    const int S, const size_t *off, int ng, const int G, const int min,
                    const float *dx, const int32_t *ic, const float *xsum, float *y, size_t ys,
                    __mmask16 m0, __mmask16 m1, int first)
{
    __m512 acc[2][4];
    _Pragma("GCC unroll 2")
    for (int r = 0; r < R; r++) {
        __mmask16 m = r ? m1 : m0;
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            acc[r][k] = first ? _mm512_setzero_ps()
                              : _mm512_maskz_loadu_ps(m, y + (size_t)k * ys + 16 * r);
    }
    for (int g = 0; g < ng; g++) {
        __m512i ia[2][4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m512i st = _mm512_set1_epi32(ic[k * GEMM_MAXG + g]);
            _Pragma("GCC unroll 2")
            for (int r = 0; r < R; r++)
                ia[r][k] = st;
        }
        const __m512i *c0 = &P[0]->codes[g * (G / 4)];
        const __m512i *c1 = R > 1 ? &P[1]->codes[g * (G / 4)] : c0;
        _Pragma("GCC unroll 8")
        for (int t = 0; t < G / 4; t++) {
            __m512i w0 = _mm512_load_si512(c0 + t), w1 = _mm512_setzero_si512();
            if (R > 1)
                w1 = _mm512_load_si512(c1 + t);
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                int32_t v;
                memcpy(&v, xs[k] + off[g] + 4 * t, 4);
                __m512i xb = _mm512_set1_epi32(v);
                ia[0][k] = _mm512_dpbusd_epi32(ia[0][k], w0, xb);
                if (R > 1)
                    ia[1][k] = _mm512_dpbusd_epi32(ia[1][k], w1, xb);
            }
        }
        __m512 sc[2], bi[2];
        _Pragma("GCC unroll 2")
        for (int r = 0; r < R; r++) {
            sc[r] = _mm512_load_ps(P[r]->scale[g]);
            bi[r] = min ? _mm512_load_ps(P[r]->bias[g]) : _mm512_setzero_ps();
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m512 d = _mm512_set1_ps(dx[k * GEMM_MAXG + g]);
            __m512 xm = min ? _mm512_set1_ps(xsum[k * GEMM_MAXG + g]) : d;
            _Pragma("GCC unroll 2")
            for (int r = 0; r < R; r++) {
                acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r][k]), _mm512_mul_ps(sc[r], d),
                                            acc[r][k]);
                if (min) /* step()'s operations, written out: the panel tile's registers */
                    acc[r][k] = _mm512_fnmadd_ps(bi[r], xm, acc[r][k]);
            }
        }
    }
    _Pragma("GCC unroll 2")
    for (int r = 0; r < R; r++) {
        __mmask16 m = r ? m1 : m0;
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            _mm512_mask_storeu_ps(y + (size_t)k * ys + 16 * r, m, acc[r][k]);
    }
}

/* tile for every S in 1..4 and R in 1..2, G and min fixed per call site. */
#define TILE_S(R, G, MIN)                                                                      \
    do {                                                                                       \
        switch (S) {                                                                           \
        case 4: tile(P, R, xs, 4, off, ng, G, MIN, dx, ic, xsum, y, ys, m0, m1, first); break; \
        case 3: tile(P, R, xs, 3, off, ng, G, MIN, dx, ic, xsum, y, ys, m0, m1, first); break; \
        case 2: tile(P, R, xs, 2, off, ng, G, MIN, dx, ic, xsum, y, ys, m0, m1, first); break; \
        default: tile(P, R, xs, 1, off, ng, G, MIN, dx, ic, xsum, y, ys, m0, m1, first); break; \
        }                                                                                      \
    } while (0)

static void tile_any(const struct panel *const *P, int R, const char *const *xs, int S,
                     const size_t *off, int ng, int G, int min, const float *dx,
                     const int32_t *ic, const float *xsum, float *y, size_t ys, __mmask16 m0,
                     __mmask16 m1, int first)
{
    if (G == 32 && !min) {
        if (R == 2) TILE_S(2, 32, 0); else TILE_S(1, 32, 0);
    } else if (G == 32) {
        if (R == 2) TILE_S(2, 32, 1); else TILE_S(1, 32, 1);
    } else {
        if (R == 2) TILE_S(2, 16, 0); else TILE_S(1, 16, 0);
    }
}


/* The first steps of reduce16 and reduce16_pairs: u[q] quarter L lane j = sum of dwords
 * 4L..4L+3 of p[4q + j]. Exact integers. */
static AI void sum_quarters(const __m512i p[16], __m512i u[4])
{
    __m512i t[8];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++)
        t[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * j], p[2 * j + 1]),
                                _mm512_unpackhi_epi32(p[2 * j], p[2 * j + 1]));
    _Pragma("GCC unroll 4")
    for (int q = 0; q < 4; q++)
        u[q] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * q], t[2 * q + 1]),
                                _mm512_unpackhi_epi64(t[2 * q], t[2 * q + 1]));
}

/* Sums of the four 128-bit quarters of 16 registers of dwords (register i: row i), as four
 * registers of 16 rows: out[L] lane i = sum of dwords 4L..4L+3 of p[i]. Exact integers. */
static AI void reduce16(const __m512i p[16], __m512i out[4])
{
    __m512i u[4], a[2], b[2];
    sum_quarters(p, u);
    a[0] = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0));
    a[1] = _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0));
    b[0] = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1));
    b[1] = _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1));
    out[0] = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(2, 0, 2, 0));
    out[2] = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(3, 1, 3, 1));
    out[1] = _mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(2, 0, 2, 0));
    out[3] = _mm512_shuffle_i32x4(b[0], b[1], _MM_SHUFFLE(3, 1, 3, 1));
}

/* The same for 32-element sub-blocks, quarters added in pairs: out[j] lane i = sum of dwords
 * 8j..8j+7 of p[i]. Two shuffles fewer than reduce16 and its adds. Exact integers. */
static AI void reduce16_pairs(const __m512i p[16], __m512i out[2])
{
    __m512i u[4], s[2];
    sum_quarters(p, u);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) /* s[h]: rows 8h..8h+3 sub-blocks 0, 1, rows 8h+4.. the same */
        s[h] = _mm512_add_epi32(
            _mm512_shuffle_i32x4(u[2 * h], u[2 * h + 1], _MM_SHUFFLE(2, 0, 2, 0)),
            _mm512_shuffle_i32x4(u[2 * h], u[2 * h + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    out[0] = _mm512_shuffle_i32x4(s[0], s[1], _MM_SHUFFLE(2, 0, 2, 0));
    out[1] = _mm512_shuffle_i32x4(s[0], s[1], _MM_SHUFFLE(3, 1, 3, 1));
}

/* tile for few sequences, without the panel: the 16 rows' codes stay in element order
 * (tmp), each row's 64 codes meet a sequence's 64 activation bytes in one vpdpbusd, and
 * reduce16 turns the 16 rows' partial sums into lane = row sums per sub-block; the same
 * integers as tile, then the same float steps. The transposes of pack, which dominate a
 * small batch, are not needed. */
static AI void tile_narrow(const struct gemm_type *ty, const struct panel *P,
                           uint8_t (*tmp)[GEMM_KC], const char *const *xs, const int S,
                           const size_t *off, int ng, const int G, const int min,
                           const float *dx, const int32_t *ic, const float *xsum, const int xst,
                           float *y, size_t ys, __mmask16 m0, int first)
{
    const __m512i flip = _mm512_set1_epi8(ty->sgn ? (char)0x80 : 0);
    const int per = 64 / G; /* sub-blocks per 64 bytes */
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + (size_t)k * ys);
    for (int g = 0; g < ng; g += per) {
        __m512i ia[4][4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m512i xb, p[16], q[4];
            if (G == 16 || ty->act_q8_k)
                xb = _mm512_loadu_si512(xs[k] + off[g]);
            else /* a last odd sub-block meets zeros */
                xb = join(_mm256_loadu_si256((const __m256i *)(xs[k] + off[g])),
                          g + 1 < ng ? _mm256_loadu_si256((const __m256i *)(xs[k] + off[g + 1]))
                                     : _mm256_setzero_si256());
            _Pragma("GCC unroll 16")
            for (int i = 0; i < 16; i++)
                p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                           _mm512_xor_si512(_mm512_load_si512(tmp[i] + g * G),
                                                            flip),
                                           xb);
            if (G == 32) {
                reduce16_pairs(p, q);
                ia[k][0] = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g]), q[0]);
                ia[k][1] = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g + 1]), q[1]);
            } else {
                reduce16(p, q);
                _Pragma("GCC unroll 4")
                for (int j = 0; j < 4; j++)
                    ia[k][j] = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g + j]), q[j]);
            }
        }
        for (int j = 0; j < per && g + j < ng; j++) {
            __m512 sc = _mm512_load_ps(P->scale[g + j]);
            __m512 bi = min ? _mm512_load_ps(P->bias[g + j]) : _mm512_setzero_ps();
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m512 d = _mm512_set1_ps(dx[k * xst + g + j]);
                __m512 xm = min ? _mm512_set1_ps(xsum[k * xst + g + j]) : d;
                acc[k] = step(acc[k], ia[k][j], sc, bi, d, xm, min);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        _mm512_mask_storeu_ps(y + (size_t)k * ys, m0, acc[k]);
}

#define NARROW_S(G, MIN)                                                                       \
    do {                                                                                       \
        switch (S) {                                                                           \
        case 4: tile_narrow(ty, P, tmp, xs, 4, off, ng, G, MIN, dx, ic, xsum, xst, y, ys, m0, first); break; \
        case 3: tile_narrow(ty, P, tmp, xs, 3, off, ng, G, MIN, dx, ic, xsum, xst, y, ys, m0, first); break; \
        case 2: tile_narrow(ty, P, tmp, xs, 2, off, ng, G, MIN, dx, ic, xsum, xst, y, ys, m0, first); break; \
        default: tile_narrow(ty, P, tmp, xs, 1, off, ng, G, MIN, dx, ic, xsum, xst, y, ys, m0, first); break; \
        }                                                                                      \
    } while (0)

static void narrow_any(const struct gemm_type *ty, const struct panel *P, uint8_t (*tmp)[GEMM_KC],
                       const char *const *xs, int S, const size_t *off, int ng, const float *dx,
                       const int32_t *ic, const float *xsum, int xst, float *y, size_t ys,
                       __mmask16 m0, int first)
{
    if (ty->g == 16)
        NARROW_S(16, 0);
    else if (ty->min)
        NARROW_S(32, 1);
    else
        NARROW_S(32, 0);
}


/* The 64 codes of the two blocks at blk of a row of a 32-element type with Q8_0 activations
 * (Q8_0, Q4_0, Q5_0, IQ4_NL), in registers, as gemm_decode_row gives them: the first block
 * in the low half. When !two, the second block is not read and the high half holds any
 * codes (they meet zero activations). The 4-bit types take each block's 16 bytes into two
 * 128-bit lanes by broadcast loads, shift the high-nibble lanes and mask; Q5_0's fifth bits
 * are a mask register made from the two qh words, for one masked add. */
static AI __m512i codes64(const enum ggml_type t, const char *blk, const int two)
{
    if (t == GGML_TYPE_Q8_0) {
        const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)blk;
        return join(_mm256_loadu_si256((const __m256i *)b[0].qs),
                    two ? _mm256_loadu_si256((const __m256i *)b[1].qs) : _mm256_setzero_si256());
    }
    const uint8_t *qs0, *qs1;
    __mmask64 hi5 = 0;
    if (t == GGML_TYPE_Q5_0) {
        const struct quant_block_q5_0 *b = (const struct quant_block_q5_0 *)blk;
        uint32_t h0, h1;
        memcpy(&h0, b[0].qh, sizeof h0);
        memcpy(&h1, b[two].qh, sizeof h1);
        hi5 = _cvtu64_mask64((uint64_t)h1 << 32 | h0);
        qs0 = b[0].qs, qs1 = b[two].qs;
    } else {
        const struct quant_block_q4_0 *b = (const struct quant_block_q4_0 *)blk;
        qs0 = b[0].qs, qs1 = b[two].qs;
    }
    /* lanes: the first block's bytes twice, then the second's twice */
    __m512i v = _mm512_mask_broadcast_i32x4(
        _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs0)), 0xff00,
        _mm_loadu_si128((const __m128i *)qs1));
    __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xff00ff00u, v, 4),
                                 _mm512_set1_epi8(15));
    if (t == GGML_TYPE_Q5_0)
        return _mm512_mask_add_epi8(q, hi5, q, _mm512_set1_epi8(0x10));
    if (t == GGML_TYPE_IQ4_NL)
        q = _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4_values)), q);
    return q;
}

static AI size_t block32_bytes(const enum ggml_type t)
{
    return t == GGML_TYPE_Q8_0 ? sizeof(struct quant_block_q8_0)
         : t == GGML_TYPE_Q5_0 ? sizeof(struct quant_block_q5_0)
                               : sizeof(struct quant_block_q4_0);
}

/* tile_rows32v's activations of sub-blocks g and g + 1 of S sequences for one 64-code step
 * (the second half zeros when !two): tile_rows32's loads. (tile_rows32 keeps its own copy of
 * these and of rows32_steps: through the helpers GCC allocated its registers differently, and
 * its Q8_0 rows measured about 3% slower streaming a whole model.) */
static AI void rows32_act(const char *const *xs, const int S, const size_t *off, int g,
                          const int two, __m512i xb[4])
{
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        xb[k] = join(_mm256_loadu_si256((const __m256i *)(xs[k] + off[g])),
                     two ? _mm256_loadu_si256((const __m256i *)(xs[k] + off[g + 1]))
                         : _mm256_setzero_si256());
}

/* The end of one tile_rows32v step: p[k] the 16 rows' vpdpbusd sums for sequence k, sc the
 * rows' scales of the step's first and second block; reduce16_pairs, then the float steps
 * of tile_rows32 (and tile_narrow) into acc. */
static AI void rows32_steps(__m512i p[4][16], const __m512 sc[2], const int S, int g,
                            const int two, const float *dx, const int32_t *ic, const int xst,
                            __m512 acc[4])
{
    __m512i ia[4][2];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++) {
        __m512i q[2];
        reduce16_pairs(p[k], q);
        ia[k][0] = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g]), q[0]);
        ia[k][1] = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g + two]), q[1]);
    }
    for (int j = 0; j < 1 + two; j++) {
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m512 d = _mm512_set1_ps(dx[k * xst + g + j]);
            acc[k] = step(acc[k], ia[k][j], sc[j], _mm512_setzero_ps(), d, d, 0);
        }
    }
}

/* tile_narrow for the 32-element types, straight from W: each row's blocks decoded in
 * registers, the 16 rows' f16 scales of a block gathered (lane = row), so nothing is
 * stored: the integers and the float steps of tile and tile_narrow. Rows past nr repeat
 * row nr - 1 and are not stored. */
static AI void tile_rows32(const enum ggml_type t, const struct kern_mat *W, int r, int g0,
                           const char *const *xs, const int S, const size_t *off, int ng,
                           const float *dx, const int32_t *ic, const int xst, float *y,
                           size_t ys, int first)
{
    const int sgn = t == GGML_TYPE_Q8_0 || t == GGML_TYPE_IQ4_NL; /* ty->sgn */
    const size_t bb = block32_bytes(t), rb = W->row_bytes;
    const char *w0 = (const char *)W->data + (size_t)r * rb;
    const __m512i vidx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rb));
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)k * ys);
    /* the next 16 rows (contiguous after these), prefetched a share per step: rows of a few
     * hundred bytes (SmolLM's 576 columns) are too short a stream for the hardware
     * prefetcher, and 16 of them side by side in a page defeat it */
    const char *pf = w0 + 16 * rb;
    for (int g = 0; g < ng; g += 2) {
        const int two = g + 1 < ng;
        const char *wg = w0 + (size_t)(g0 + g) * bb;
        __m512i xb[4], p[4][16], ia[4][2];
        for (int l = 0; l < 32 * (int)bb; l += 64)
            _mm_prefetch(pf + l, _MM_HINT_T0);
        pf += 32 * bb;
        __m512 sc[2];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            xb[k] = join(_mm256_loadu_si256((const __m256i *)(xs[k] + off[g])),
                         two ? _mm256_loadu_si256((const __m256i *)(xs[k] + off[g + 1]))
                             : _mm256_setzero_si256());
        _Pragma("GCC unroll 16")
        for (int i = 0; i < 16; i++) {
            const char *wr = wg + (size_t)i * rb;
            __m512i cw = codes64(t, wr, two);
            if (sgn)
                cw = _mm512_xor_si512(cw, _mm512_set1_epi8((char)0x80));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++)
                p[k][i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), cw, xb[k]);
        }
        for (int j = 0; j < 1 + two; j++)
            sc[j] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                _mm512_i32gather_epi32(vidx, wg + (size_t)j * bb, 1)));
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m512i q[2];
            reduce16_pairs(p[k], q);
            ia[k][0] = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g]), q[0]);
            ia[k][1] = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g + two]), q[1]);
        }
        for (int j = 0; j < 1 + two; j++) {
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m512 d = _mm512_set1_ps(dx[k * xst + g + j]);
                acc[k] = step(acc[k], ia[k][j], sc[j], _mm512_setzero_ps(), d, d, 0);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        _mm512_storeu_ps(y + (size_t)k * ys, acc[k]);
}

/* TILE (tile_rows32 or tile_rows32v) for type T with the call's S as a constant. */
#define ROWS32_S(TILE, T)                                                                      \
    do {                                                                                       \
        switch (S) {                                                                           \
        case 4: TILE(T, W, r, g0, xs, 4, off, ng, dx, ic, xst, y, ys, first); break;          \
        case 3: TILE(T, W, r, g0, xs, 3, off, ng, dx, ic, xst, y, ys, first); break;          \
        case 2: TILE(T, W, r, g0, xs, 2, off, ng, dx, ic, xst, y, ys, first); break;          \
        default: TILE(T, W, r, g0, xs, 1, off, ng, dx, ic, xst, y, ys, first); break;         \
        }                                                                                      \
    } while (0)

static void rows32_any(const struct kern_mat *W, int r, int g0, const char *const *xs, int S,
                       const size_t *off, int ng, const float *dx, const int32_t *ic, int xst,
                       float *y, size_t ys, int first)
{
    switch (W->type) {
    case GGML_TYPE_Q8_0: ROWS32_S(tile_rows32, GGML_TYPE_Q8_0); break;
    case GGML_TYPE_Q4_0: ROWS32_S(tile_rows32, GGML_TYPE_Q4_0); break;
    case GGML_TYPE_Q5_0: ROWS32_S(tile_rows32, GGML_TYPE_Q5_0); break;
    default: ROWS32_S(tile_rows32, GGML_TYPE_IQ4_NL); break;
    }
}


/* ---- the same tiles with VBMI and BITALG (Ice Lake, Zen 4 and later) ----
 * Q4_0, Q5_0 and IQ4_NL rows load each row's two blocks (36 or 44 bytes) with one masked
 * load that feeds everything: vpermb lays out the code bytes, Q5_0's fifth bits become the
 * add mask by vpshufbitqmb, and the 16 rows' f16 scales are merged from the same registers
 * (scales16) instead of gathered. The same codes and scales, so the same bits as
 * tile_rows32. Q8_0 keeps tile_rows32: its two blocks (68 bytes) do not fit one load, and it
 * runs at memory speed already. Chosen at run time (rows32v_ok). */

/* Bytes 0..63 in order, for building byte permutes. */
static AI __m512i byte_iota(void)
{
    return _mm512_set_epi64(0x3f3e3d3c3b3a3938, 0x3736353433323130, 0x2f2e2d2c2b2a2928,
                            0x2726252423222120, 0x1f1e1d1c1b1a1918, 0x1716151413121110,
                            0x0f0e0d0c0b0a0908, 0x0706050403020100);
}

/* The f16 scales of two blocks of 16 rows as floats, lane = row: v[i] holds row i's bytes
 * from its first block's start (d at word 0, the second block's d at word w1 = bb / 2, and
 * w1 % 8 < 4 for every 32-element type). Word unpacks pair the rows in each 128-bit lane,
 * then three dword permutes merge pairs into 4, 8 and 16 rows: the first blocks' words in
 * dwords 0..7, the second blocks' in 8..15. */
static AI void scales16(const enum ggml_type t, const __m512i v[16], __m512 sc[2])
{
    const int w1 = (int)block32_bytes(t) / 2, d1 = (w1 / 8) * 4 + w1 % 8; /* the pair's dword */
    __m512i u[8], a[4], b[2];
    _Pragma("GCC unroll 8")
    for (int m = 0; m < 8; m++) /* rows 2m, 2m + 1: dword 0 the first d's, d1 the second's */
        u[m] = _mm512_unpacklo_epi16(v[2 * m], v[2 * m + 1]);
    const __m512i i2 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 16 + d1, d1, 0, 0, 0, 0, 0, 0, 16, 0);
    const __m512i i3 = _mm512_set_epi32(0, 0, 0, 0, 25, 24, 9, 8, 0, 0, 0, 0, 17, 16, 1, 0);
    const __m512i i4 = _mm512_set_epi32(27, 26, 25, 24, 11, 10, 9, 8, 19, 18, 17, 16, 3, 2, 1, 0);
    _Pragma("GCC unroll 4")
    for (int m = 0; m < 4; m++) /* rows 4m..4m+3: dwords 0..1 and 8..9 */
        a[m] = _mm512_permutex2var_epi32(u[2 * m], i2, u[2 * m + 1]);
    b[0] = _mm512_permutex2var_epi32(a[0], i3, a[1]); /* rows 0..7: dwords 0..3, 8..11 */
    b[1] = _mm512_permutex2var_epi32(a[2], i3, a[3]);
    __m512i f = _mm512_permutex2var_epi32(b[0], i4, b[1]);
    sc[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(f));
    sc[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f, 1));
}

#pragma GCC push_options
#pragma GCC target("avx512vbmi,avx512bitalg")

/* codes64 of Q4_0, Q5_0 or IQ4_NL from v, the row's bytes from the first block's start (the
 * second block's bytes zero when only one is read): qs index p % 16 of block p / 32 to byte
 * p, high nibbles on lanes 1 and 3; for Q5_0, qword j gets block j / 4's qh in its low 32
 * bits and vpshufbitqmb picks bit p % 32 for byte p. */
static AI __m512i codes64v(const enum ggml_type t, const __m512i v)
{
    const __m512i iota = byte_iota(), bbv = _mm512_set1_epi8((char)block32_bytes(t));
    const __mmask64 blk1 = 0xffffffff00000000u;
    const int five = t == GGML_TYPE_Q5_0;
    const __m512i ql = _mm512_add_epi8(_mm512_and_si512(iota, _mm512_set1_epi8(15)),
                                       _mm512_set1_epi8(five ? 6 : 2)); /* qs offset */
    const __m512i qi = _mm512_mask_add_epi8(ql, blk1, ql, bbv);
    __m512i b = _mm512_permutexvar_epi8(qi, v);
    __m512i q = _mm512_and_si512(_mm512_mask_srli_epi16(b, 0xff00ff00u, b, 4),
                                 _mm512_set1_epi8(15));
    if (five) {
        const __m512i hl = _mm512_add_epi8(_mm512_and_si512(iota, _mm512_set1_epi8(3)),
                                           _mm512_set1_epi8(2));
        const __m512i hi = _mm512_mask_add_epi8(hl, blk1, hl, bbv);
        __mmask64 hi5 = _mm512_bitshuffle_epi64_mask(_mm512_permutexvar_epi8(hi, v),
                                                     _mm512_and_si512(iota, _mm512_set1_epi8(31)));
        return _mm512_mask_add_epi8(q, hi5, q, _mm512_set1_epi8(0x10));
    }
    if (t == GGML_TYPE_IQ4_NL)
        q = _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4_values)), q);
    return q;
}

/* tile_rows32 for Q4_0, Q5_0 and IQ4_NL with one load per row and step (above). */
static AI void tile_rows32v(const enum ggml_type t, const struct kern_mat *W, int r, int g0,
                            const char *const *xs, const int S, const size_t *off, int ng,
                            const float *dx, const int32_t *ic, const int xst, float *y,
                            size_t ys, int first)
{
    const size_t bb = block32_bytes(t), rb = W->row_bytes;
    const char *w0 = (const char *)W->data + (size_t)r * rb;
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)k * ys);
    const char *pf = w0 + 16 * rb; /* as tile_rows32 */
    for (int g = 0; g < ng; g += 2) {
        const int two = g + 1 < ng;
        const char *wg = w0 + (size_t)(g0 + g) * bb;
        const __mmask64 lm = ((__mmask64)1 << ((1 + two) * bb)) - 1; /* at most 44 bytes */
        __m512i xb[4], v[16], p[4][16];
        __m512 sc[2];
        for (int l = 0; l < 32 * (int)bb; l += 64)
            _mm_prefetch(pf + l, _MM_HINT_T0);
        pf += 32 * bb;
        rows32_act(xs, S, off, g, two, xb);
        _Pragma("GCC unroll 16")
        for (int i = 0; i < 16; i++) {
            v[i] = _mm512_maskz_loadu_epi8(lm, wg + (size_t)i * rb);
            __m512i cw = codes64v(t, v[i]);
            if (t == GGML_TYPE_IQ4_NL) /* signed codes */
                cw = _mm512_xor_si512(cw, _mm512_set1_epi8((char)0x80));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++)
                p[k][i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), cw, xb[k]);
        }
        scales16(t, v, sc);
        rows32_steps(p, sc, S, g, two, dx, ic, xst, acc);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        _mm512_storeu_ps(y + (size_t)k * ys, acc[k]);
}

/* rows32_any for Q4_0, Q5_0 and IQ4_NL on a CPU with VBMI and BITALG. */
static void rows32v_any(const struct kern_mat *W, int r, int g0, const char *const *xs, int S,
                        const size_t *off, int ng, const float *dx, const int32_t *ic, int xst,
                        float *y, size_t ys, int first)
{
    switch (W->type) {
    case GGML_TYPE_Q4_0: ROWS32_S(tile_rows32v, GGML_TYPE_Q4_0); break;
    case GGML_TYPE_Q5_0: ROWS32_S(tile_rows32v, GGML_TYPE_Q5_0); break;
    default: ROWS32_S(tile_rows32v, GGML_TYPE_IQ4_NL); break;
    }
}

#pragma GCC pop_options

static atomic_int rows32v_allowed = 1;

void kern_gemm_avx512_vbmi(int on)
{
    atomic_store_explicit(&rows32v_allowed, on, memory_order_relaxed);
}

/* 1 when rows of type t take rows32v_any: the CPU has VBMI and BITALG, the test hook allows
 * it and t is one of its types. */
static int rows32v_ok(enum ggml_type t)
{
    return (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_IQ4_NL) &&
           atomic_load_explicit(&rows32v_allowed, memory_order_relaxed) &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg");
}


/* Transpose 16 registers of 16 dwords (register i: row i) into out (out[j] lane i = r[i]
 * lane j). */
static AI void transpose16(const __m512i r[16], __m512i out[16])
{
    __m512i t[16], u[16];
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    _Pragma("GCC unroll 4")
    for (int m = 0; m < 4; m++) {
        u[4 * m] = _mm512_unpacklo_epi64(t[4 * m], t[4 * m + 2]);
        u[4 * m + 1] = _mm512_unpackhi_epi64(t[4 * m], t[4 * m + 2]);
        u[4 * m + 2] = _mm512_unpacklo_epi64(t[4 * m + 1], t[4 * m + 3]);
        u[4 * m + 3] = _mm512_unpackhi_epi64(t[4 * m + 1], t[4 * m + 3]);
    }
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        __m512i a0 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(2, 0, 2, 0));
        __m512i a1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(2, 0, 2, 0));
        __m512i b0 = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 1, 3, 1));
        __m512i b1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 1, 3, 1));
        out[j] = _mm512_shuffle_i32x4(a0, a1, _MM_SHUFFLE(2, 0, 2, 0));
        out[8 + j] = _mm512_shuffle_i32x4(a0, a1, _MM_SHUFFLE(3, 1, 3, 1));
        out[4 + j] = _mm512_shuffle_i32x4(b0, b1, _MM_SHUFFLE(2, 0, 2, 0));
        out[12 + j] = _mm512_shuffle_i32x4(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

static AI size_t blockk_bytes(const enum ggml_type t)
{
    return t == GGML_TYPE_Q4_K ? sizeof(struct quant_block_q4_k)
         : t == GGML_TYPE_Q5_K ? sizeof(struct quant_block_q5_k)
         : t == GGML_TYPE_Q6_K ? sizeof(struct quant_block_q6_k)
                               : sizeof(struct quant_block_iq4_xs);
}

/* A 256-element block's sub-block scales (lanes 0..7, or 0..15 for Q6_K) and biases (lanes
 * 8..15 of Q4_K/Q5_K) as floats, each the product gemm_decode_row forms. */
static AI __m512 scalesk(const enum ggml_type t, const char *b)
{
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) {
        const struct quant_block_q4_k *q = (const struct quant_block_q4_k *)b; /* same head */
        __m128i sc16, m16;
        q4_k_scales(q->scales, &sc16, &m16);
        __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_set_m128i(m16, sc16)));
        __m512 dd = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(_cvtsh_ss(q->d)))),
            _mm256_castps_pd(_mm256_set1_ps(_cvtsh_ss(q->dmin))), 1));
        return _mm512_mul_ps(dd, v);
    }
    if (t == GGML_TYPE_Q6_K) {
        const struct quant_block_q6_k *q = (const struct quant_block_q6_k *)b;
        __m512 v = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q->scales)));
        return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(q->d)), v);
    }
    const struct quant_block_iq4_xs *q = (const struct quant_block_iq4_xs *)b;
    int32_t sc[16] = {0};
    for (int j = 0; j < 8; j++)
        sc[j] = quant_iq4_xs_scale(q, j) - 32;
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(q->d)),
                         _mm512_cvtepi32_ps(_mm512_loadu_si512(sc)));
}

/* Elements 64c..64c+63 of a 256-element block's codes, as gemm_decode_row gives them. */
static AI __m512i codesk(const enum ggml_type t, const char *b, const int c)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) {
        const int five = t == GGML_TYPE_Q5_K;
        const uint8_t *qs = five ? ((const struct quant_block_q5_k *)b)->qs
                                 : ((const struct quant_block_q4_k *)b)->qs;
        __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(raw, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if (five) {
            const __m256i one = _mm256_set1_epi8(1);
            __m256i hb = _mm256_loadu_si256((const __m256i *)((const struct quant_block_q5_k *)b)->qh);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(
                _mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one), 4));
        }
        return join(lo, hi);
    }
    if (t == GGML_TYPE_Q6_K) {
        const struct quant_block_q6_k *q = (const struct quant_block_q6_k *)b;
        const __m256i hi2 = _mm256_set1_epi8(0x30);
        const int h = c / 2;
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(q->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(q->qh + 32 * h));
        if (c % 2 == 0)
            return join(_mm256_or_si256(_mm256_and_si256(l0, low4),
                                        _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2)),
                        _mm256_or_si256(_mm256_and_si256(l1, low4),
                                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2)));
        return join(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                    _mm256_and_si256(qh, hi2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2)));
    }
    const struct quant_block_iq4_xs *q = (const struct quant_block_iq4_xs *)b;
    const __m256i tab = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)quant_iq4_values));
    __m256i v[2];
    for (int j = 0; j < 2; j++) {
        __m128i raw = _mm_loadu_si128((const __m128i *)(q->qs + 16 * (2 * c + j)));
        v[j] = _mm256_shuffle_epi8(
            tab, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4));
    }
    return join(v[0], v[1]);
}

/* tile_rows32 for the 256-element types (Q8_K activations): per block, the 16 rows' scales
 * (and biases) transposed to lane = row, then per 64 elements each row's codes meet each
 * sequence's bytes in one vpdpbusd and reduce16 gives the sub-block sums; then the float
 * steps of tile. xst: floats between sequences in dx, ic and xsum. */
static AI void tile_rowsk(const enum ggml_type t, const struct gemm_type *ty,
                          const struct kern_mat *W, int r, const char *const *xs, const int S,
                          const size_t *off, int ng, const float *dx, const int32_t *ic,
                          const float *xsum, const int xst, float *y, size_t ys)
{
    const __m512i flip = _mm512_set1_epi8(ty->sgn ? (char)0x80 : 0);
    const size_t bb = blockk_bytes(t), rb = W->row_bytes;
    const int G = ty->g, per = QUANT_QK_K / G, min = ty->min;
    const char *w0 = (const char *)W->data + (size_t)r * rb;
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = _mm512_setzero_ps();
    for (int i = 0; i < ng / per; i++) {
        const char *wb = w0 + (size_t)i * bb;
        __m512i f[16], sc[16];
        _Pragma("GCC unroll 16")
        for (int ii = 0; ii < 16; ii++)
            f[ii] = _mm512_castps_si512(scalesk(t, wb + (size_t)ii * rb));
        transpose16(f, sc);
        for (int c = 0; c < 4; c++) {
            const int g = i * per + c * (64 / G);
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m512i xb = _mm512_loadu_si512(xs[k] + off[g]), p[16], q[4];
                _Pragma("GCC unroll 16")
                for (int ii = 0; ii < 16; ii++)
                    p[ii] = _mm512_dpbusd_epi32(
                        _mm512_setzero_si512(),
                        _mm512_xor_si512(codesk(t, wb + (size_t)ii * rb, c), flip), xb);
                if (G == 32)
                    reduce16_pairs(p, q);
                else
                    reduce16(p, q);
                for (int j = 0; j < 64 / G; j++) {
                    const int gl = c * (64 / G) + j; /* sub-block within the block */
                    __m512i ia = _mm512_add_epi32(_mm512_set1_epi32(ic[k * xst + g + j]), q[j]);
                    __m512 d = _mm512_set1_ps(dx[k * xst + g + j]);
                    __m512 xm = min ? _mm512_set1_ps(xsum[k * xst + g + j]) : d;
                    acc[k] = step(acc[k], ia, _mm512_castsi512_ps(sc[gl]),
                                  min ? _mm512_castsi512_ps(sc[8 + gl]) : _mm512_setzero_ps(), d,
                                  xm, min);
                }
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        _mm512_storeu_ps(y + (size_t)k * ys, acc[k]);
}

#define ROWSK_S(T)                                                                             \
    do {                                                                                       \
        switch (S) {                                                                           \
        case 4: tile_rowsk(T, ty, W, r, xs, 4, off, ng, dx, ic, xsum, xst, y, ys); break;      \
        case 3: tile_rowsk(T, ty, W, r, xs, 3, off, ng, dx, ic, xsum, xst, y, ys); break;      \
        case 2: tile_rowsk(T, ty, W, r, xs, 2, off, ng, dx, ic, xsum, xst, y, ys); break;      \
        default: tile_rowsk(T, ty, W, r, xs, 1, off, ng, dx, ic, xsum, xst, y, ys); break;     \
        }                                                                                      \
    } while (0)

static void rowsk_any(const struct gemm_type *ty, const struct kern_mat *W, int r,
                      const char *const *xs, int S, const size_t *off, int ng, const float *dx,
                      const int32_t *ic, const float *xsum, int xst, float *y, size_t ys)
{
    switch (W->type) {
    case GGML_TYPE_Q4_K: ROWSK_S(GGML_TYPE_Q4_K); break;
    case GGML_TYPE_Q5_K: ROWSK_S(GGML_TYPE_Q5_K); break;
    case GGML_TYPE_Q6_K: ROWSK_S(GGML_TYPE_Q6_K); break;
    default: ROWSK_S(GGML_TYPE_IQ4_XS); break;
    }
}

/* Few sequences (at most GEMM_NARROW): each group of 16 rows runs over the whole K before
 * the next (a decode row streams from memory start to end, as matmul's rows do), the
 * activations' scales and sums prepared once for all of K. Full groups of the 32-element
 * types take tile_rows32 straight from W; the others are decoded a K chunk at a time into
 * tmp for tile_narrow. Returns -1 (nothing done) when K is too long for the arrays. */
static int narrow_rows(const struct gemm_type *ty, const struct kern_mat *W,
                       const struct kern_act *X, int n_seq, float *Y, int y_stride,
                       int row_begin, int row_end, struct panel *pan, uint8_t (*tmp)[GEMM_KC])
{
    static _Thread_local float dx[GEMM_NARROW * NARROW_MAXG], xsum[GEMM_NARROW * NARROW_MAXG];
    static _Thread_local int32_t ic[GEMM_NARROW * NARROW_MAXG];
    static _Thread_local size_t off[NARROW_MAXG];
    const int ngt = W->cols / ty->g, zero = ty->sgn ? 128 : ty->off, gk = GEMM_KC / ty->g;
    const int v = rows32v_ok(W->type);
    const char *xs[GEMM_NARROW];
    if (ngt > NARROW_MAXG)
        return -1;
    for (int g = 0; g < ngt; g++)
        off[g] = gemm_act_off(ty, g);
    for (int s = 0; s < n_seq; s++) {
        float *d = dx + s * NARROW_MAXG;
        int32_t *c = ic + s * NARROW_MAXG;
        xs[s] = (const char *)X->data + (size_t)s * X->stride;
        gemm_act_prep(ty, xs[s], 0, ngt, d, c);
        for (int g = 0; g < ngt; g++) {
            xsum[s * NARROW_MAXG + g] = d[g] * (float)c[g];
            c[g] *= -zero;
        }
    }
    for (int r = row_begin; r < row_end; r += 16) {
        int nr = row_end - r < 16 ? row_end - r : 16;
        __mmask16 m0 = (__mmask16)((1u << nr) - 1);
        if (nr == 16) {
            for (int s = 0; s < n_seq; s += 4) {
                int S = n_seq - s < 4 ? n_seq - s : 4;
                size_t o = (size_t)s * NARROW_MAXG;
                float *y = Y + (size_t)s * y_stride + r;
                if (ty->act_q8_k)
                    rowsk_any(ty, W, r, xs + s, S, off, ngt, dx + o, ic + o, xsum + o,
                              NARROW_MAXG, y, (size_t)y_stride);
                else if (v)
                    rows32v_any(W, r, 0, xs + s, S, off, ngt, dx + o, ic + o, NARROW_MAXG, y,
                                (size_t)y_stride, 1);
                else
                    rows32_any(W, r, 0, xs + s, S, off, ngt, dx + o, ic + o, NARROW_MAXG, y,
                               (size_t)y_stride, 1);
            }
            continue;
        }
        for (int g0 = 0; g0 < ngt; g0 += gk) {
            int ng = ngt - g0 < gk ? ngt - g0 : gk;
            decode(W, ty, r, nr, g0, ng, pan, tmp);
            for (int s = 0; s < n_seq; s += 4) {
                size_t o = (size_t)s * NARROW_MAXG + (size_t)g0;
                narrow_any(ty, pan, tmp, xs + s, n_seq - s < 4 ? n_seq - s : 4, off + g0, ng,
                           dx + o, ic + o, xsum + o, NARROW_MAXG, Y + (size_t)s * y_stride + r,
                           (size_t)y_stride, m0, g0 == 0);
            }
        }
    }
    return 0;
}

int kern_gemm_avx512_agrees(enum ggml_type t)
{
    return !gemm_type_of(t).act_q8_k;
}

int kern_gemm_avx512(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                     int y_stride, int row_begin, int row_end)
{
    struct gemm_type ty = gemm_type_of(W->type);
    if (!ty.g || (ty.min && ty.g != 32))
        return -1;
    const int G = ty.g, zero = ty.sgn ? 128 : ty.off, gk = GEMM_KC / G;
    const int ngt = W->cols / G;
    static _Thread_local struct panel pan[2] __attribute__((aligned(64)));
    static _Thread_local uint8_t tmp[16][GEMM_KC] __attribute__((aligned(64)));
    static _Thread_local float dx[GEMM_SC * GEMM_MAXG], xsum[GEMM_SC * GEMM_MAXG];
    static _Thread_local int32_t ic[GEMM_SC * GEMM_MAXG];
    size_t off[GEMM_MAXG];

    if (n_seq >= GEMM_COLS && n_seq <= 16 &&
        kern_gemm_avx512_cols(W, X, n_seq, Y, y_stride, row_begin, row_end) == 0)
        return 0;
    if (n_seq <= GEMM_NARROW &&
        narrow_rows(&ty, W, X, n_seq, Y, y_stride, row_begin, row_end, &pan[0], tmp) == 0)
        return 0;
    for (int s0 = 0; s0 < n_seq; s0 += GEMM_SC) {
        int ns = n_seq - s0 < GEMM_SC ? n_seq - s0 : GEMM_SC;
        for (int g0 = 0; g0 < ngt; g0 += gk) {
            int ng = ngt - g0 < gk ? ngt - g0 : gk, first = g0 == 0;
            for (int g = 0; g < ng; g++)
                off[g] = gemm_act_off(&ty, g0 + g);
            for (int s = 0; s < ns; s++) {
                const char *x = (const char *)X->data + (size_t)(s0 + s) * X->stride;
                float *d = dx + s * GEMM_MAXG;
                gemm_act_prep(&ty, x, g0, ng, d, ic + s * GEMM_MAXG);
                for (int g = 0; g < ng; g++) {
                    int32_t sx = ic[s * GEMM_MAXG + g];
                    xsum[s * GEMM_MAXG + g] = d[g] * (float)sx;
                    ic[s * GEMM_MAXG + g] = -zero * sx;
                }
            }
            for (int r = row_begin; r < row_end; r += 32) {
                int nr = row_end - r < 32 ? row_end - r : 32;
                int R = nr > 16 ? 2 : 1;
                __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
                __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
                pack(W, &ty, r, nr < 16 ? nr : 16, g0, ng, &pan[0], tmp);
                if (R > 1)
                    pack(W, &ty, r + 16, nr - 16, g0, ng, &pan[1], tmp);
                const struct panel *P[2] = {&pan[0], &pan[1]};
                for (int s = 0; s < ns; s += 4) {
                    int S = ns - s < 4 ? ns - s : 4;
                    const char *xs[4];
                    for (int k = 0; k < S; k++)
                        xs[k] = (const char *)X->data + (size_t)(s0 + s + k) * X->stride +
                                0 * g0;
                    /* off[] is relative to the row start: sub-block g0 + g */
                    tile_any(P, R, xs, S, off, ng, G, ty.min, dx + s * GEMM_MAXG,
                             ic + s * GEMM_MAXG, xsum + s * GEMM_MAXG,
                             Y + (size_t)(s0 + s) * y_stride + r, (size_t)y_stride, m0, m1,
                             first);
                }
            }
        }
    }
    return 0;
}
