/* The prefill GEMM on AVX2 (no VNNI): gemm_avx512.c's blocking with 8 rows per 256-bit
 * panel vector (lane = row) and a register tile of 8 rows x 4 sequences. The integer dot is
 * maddubs (unsigned x signed bytes) + madd: unsigned codes (at most 63, so a pair of maddubs
 * results fits in int16 and is added before the madd) multiply the activations directly,
 * their zero point taken off in integers as in the VNNI kernel (Q3_K and Q2_K too, which only
 * this GEMM tiles: gemm_type_of_avx2); signed codes (IQ4_*, Q8_0) give maddubs their absolute
 * value and move their sign onto the activations. Q8_0 runs gemm_avx2_cols.c's decode kernel
 * 16 sequences at a time instead, where that kernel takes the matrix (see GEMM_FN). Exact
 * integers, then per sub-block the same float steps whatever the tile, so a (row,
 * sequence) result does not depend on n_seq, the row range, or the other sequences. */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "gemm_decode.h"
#include "kernels_simd.h"

#ifdef __AVXVNNI__
#define GEMM_FN kern_gemm_avxvnni
#define COLS_FN kern_gemm_avxvnni_cols
#else
#define GEMM_FN kern_gemm_avx2
#define COLS_FN kern_gemm_avx2_cols
#endif

/* Sequences per chunk: a 512-token prompt chunk in one, so each row block's panel is decoded
 * and transposed once, not once per 128 sequences (the K types' decode is a tenth of their
 * prefill) */
#define GEMM_SC 512

/* Calls of fewer sequences return -1, so the set's matmul computes them: with so few sequences
 * to share a panel its decode and transpose cost more than the tiles save (bench_kernels, Q3_K,
 * Q4_K and Q8_0 at 16 sequences), and matmul gives the same bits (rows_agree). */
#define GEMM_MIN_SEQ 32

#define GEMM_MAXSB (GEMM_KC / QUANT_QK_K)

struct panel {
    __m256i codes[GEMM_KC / 4];
    float scale[GEMM_MAXG][8];
    float bias[GEMM_MAXG][8];
    /* the K types (Q8_K activations): per sub-block the integer scale and min of each row as
     * an int16 pair (madd operands), per superblock d and dmin */
    int32_t isc[GEMM_MAXG][8];
    int32_t imin[GEMM_MAXG][8];
    float d[GEMM_MAXSB][8];
    float dmin[GEMM_MAXSB][8];
};

static AI int32_t pair16(int v)
{
    return (int32_t)((uint32_t)(uint16_t)v * 0x10001u);
}

/* Row i's integer sub-block scales and mins and its superblock scales, for sub-blocks
 * [g0, g0 + ng) of a K type (whole superblocks). */
static void pack_k(enum ggml_type t, const void *w, int g0, int ng, int i, struct panel *p)
{
    int per = QUANT_QK_K / gemm_type_of_avx2(t).g;
    for (int sb = 0; sb < ng / per; sb++) {
        int b = g0 / per + sb, sc[16], m[16] = {0};
        float d, dmin = 0.0f;
        if (t == GGML_TYPE_Q6_K) {
            const struct quant_block_q6_k *q = (const struct quant_block_q6_k *)w + b;
            for (int j = 0; j < 16; j++)
                sc[j] = q->scales[j];
            d = _cvtsh_ss(q->d);
        } else if (t == GGML_TYPE_Q3_K) {
            const struct quant_block_q3_k *q = (const struct quant_block_q3_k *)w + b;
            int8_t s8[16];
            gemm_q3_k_scales(q->scales, s8);
            for (int j = 0; j < 16; j++)
                sc[j] = s8[j];
            d = _cvtsh_ss(q->d);
        } else if (t == GGML_TYPE_Q2_K) {
            const struct quant_block_q2_k *q = (const struct quant_block_q2_k *)w + b;
            for (int j = 0; j < 16; j++)
                sc[j] = q->scales[j] & 15, m[j] = q->scales[j] >> 4;
            d = _cvtsh_ss(q->d);
            dmin = _cvtsh_ss(q->dmin);
        } else if (t == GGML_TYPE_IQ4_XS) {
            const struct quant_block_iq4_xs *q = (const struct quant_block_iq4_xs *)w + b;
            for (int j = 0; j < 8; j++)
                sc[j] = quant_iq4_xs_scale(q, j) - 32;
            d = _cvtsh_ss(q->d);
        } else {
            /* Q5_K's d, dmin and scales lie as Q4_K's */
            const struct quant_block_q4_k *q = (const struct quant_block_q4_k *)
                ((const char *)w + (size_t)b * (t == GGML_TYPE_Q5_K
                                                    ? sizeof(struct quant_block_q5_k)
                                                    : sizeof(struct quant_block_q4_k)));
            for (int j = 0; j < 8; j++) {
                uint8_t s8, m8;
                quant_q4_k_scale_min(q->scales, j, &s8, &m8);
                sc[j] = s8, m[j] = m8;
            }
            d = _cvtsh_ss(q->d);
            dmin = _cvtsh_ss(q->dmin);
        }
        p->d[sb][i] = d;
        p->dmin[sb][i] = dmin;
        for (int j = 0; j < per; j++) {
            p->isc[sb * per + j][i] = pair16(sc[j]);
            p->imin[sb * per + j][i] = pair16(m[j]);
        }
    }
}

/* Rows [r, r + nr) (nr <= 8) of W, sub-blocks [g0, g0 + ng), into p. */
static void pack(const struct kern_mat *W, int r, int nr, int g0, int ng, int G, struct panel *p,
                 uint8_t (*tmp)[GEMM_KC])
{
    int n = ng * G, k = gemm_type_of_avx2(W->type).act_q8_k;
    for (int i = 0; i < 8; i++) {
        if (i < nr) {
            const char *w = (const char *)W->data + (size_t)(r + i) * W->row_bytes;
            gemm_decode_row(W->type, w, g0, ng, tmp[i], &p->scale[0][i], &p->bias[0][i], 8);
            if (k)
                pack_k(W->type, w, g0, ng, i, p);
        } else {
            memset(tmp[i], 0, (size_t)n);
            for (int g = 0; g < ng; g++) {
                p->scale[g][i] = p->bias[g][i] = 0.0f;
                p->isc[g][i] = p->imin[g][i] = 0;
            }
            for (int sb = 0; sb < GEMM_MAXSB; sb++)
                p->d[sb][i] = p->dmin[sb][i] = 0.0f;
        }
    }
    for (int t = 0; t < n / 4; t += 8)
        gemm_transpose8(tmp[0], GEMM_KC, t, &p->codes[t]);
}

static AI __m256 maskload(const float *y, int nr)
{
    const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    return _mm256_maskload_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane));
}

static AI void maskstore(float *y, int nr, __m256 v)
{
    const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane), v);
}

/* Sequences xs[0..S) against panel P (nr rows): as gemm_avx512.c's tile. */
static AI void tile(const struct panel *P, const char *const *xs, const int S, const size_t *off,
                    int ng, const int G, const int min, const int sgn, const float *dx,
                    const int32_t *ic, const float *xsum, float *y, size_t ys, int nr,
                    int first)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = first ? _mm256_setzero_ps() : maskload(y + (size_t)k * ys, nr);
    for (int g = 0; g < ng; g++) {
        __m256i ia[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            ia[k] = _mm256_set1_epi32(ic[k * GEMM_MAXG + g]);
        const __m256i *c = &P->codes[g * (G / 4)];
        if (sgn) {
            /* one dword column at a time: signed codes gain nothing from pairing (their
             * products cannot share an int16), and fewer live vectors keep the sums ia out
             * of the stack */
            _Pragma("GCC unroll 8")
            for (int t = 0; t < G / 4; t++) {
                __m256i w = _mm256_load_si256(c + t), a = _mm256_abs_epi8(w);
                _Pragma("GCC unroll 4")
                for (int k = 0; k < S; k++) {
                    int32_t v;
                    memcpy(&v, xs[k] + off[g] + 4 * t, 4);
                    /* |w| x sign(w) x: each pair at most 2 * 128 * 127 */
                    __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(v), w);
#ifdef __AVXVNNI__
                    ia[k] = _mm256_dpbusd_avx_epi32(ia[k], a, x);
#else
                    ia[k] = _mm256_add_epi32(ia[k],
                                             _mm256_madd_epi16(_mm256_maddubs_epi16(a, x), ones));
#endif
                }
            }
        } else {
            _Pragma("GCC unroll 4")
            for (int t = 0; t < G / 4; t += 2) {
                __m256i w0 = _mm256_load_si256(c + t), w1 = _mm256_load_si256(c + t + 1);
                _Pragma("GCC unroll 4")
                for (int k = 0; k < S; k++) {
                    int32_t v0, v1;
                    memcpy(&v0, xs[k] + off[g] + 4 * t, 4);
                    memcpy(&v1, xs[k] + off[g] + 4 * t + 4, 4);
                    __m256i x0 = _mm256_set1_epi32(v0), x1 = _mm256_set1_epi32(v1);
#ifdef __AVXVNNI__
                    /* the same four-product sums, accumulated in int32 */
                    ia[k] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(ia[k], w0, x0), w1,
                                                    x1);
#else
                    /* codes <= 63: two pairs sum to at most 4 * 63 * 128 < 2^15 */
                    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0),
                                                 _mm256_maddubs_epi16(w1, x1));
                    ia[k] = _mm256_add_epi32(ia[k], _mm256_madd_epi16(p, ones));
#endif
                }
            }
        }
#ifdef __AVXVNNI__
        (void)ones;
#endif
        __m256 sc = _mm256_load_ps(P->scale[g]);
        __m256 bi = min ? _mm256_load_ps(P->bias[g]) : _mm256_setzero_ps();
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m256 d = _mm256_set1_ps(dx[k * GEMM_MAXG + g]);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[k]), _mm256_mul_ps(sc, d), acc[k]);
            if (min)
                acc[k] = _mm256_fnmadd_ps(bi, _mm256_set1_ps(xsum[k * GEMM_MAXG + g]), acc[k]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++) {
        if (nr >= 8)
            _mm256_storeu_ps(y + (size_t)k * ys, acc[k]);
        else
            maskstore(y + (size_t)k * ys, nr, acc[k]);
    }
}

/* The K types: per superblock the integer sum isum = sum over sub-blocks j of sc_j * (codes .
 * x)_j (sc_j by madd in place of ones; the zero point 2^zs of Q6_K (32) and Q3_K (4) as
 * -2^zs * sum_j sc_j * sx_j) and for Q4_K/Q5_K msum = sum_j m_j * sx_j, then
 * acc = fma(isum, d * dx, acc) and acc = fnma(msum, dmin * dx, acc): the chain
 * kernels_avx2*.c's decode rows compute. */
static AI void tile_k(const struct panel *P, const char *const *xs, const int S,
                      const size_t *off, int ng, const int G, const int min, const int sgn,
                      const int zs, const float *dx, const int32_t *sx, float *y, size_t ys,
                      int nr, int first)
{
#ifdef __AVXVNNI__
    /* Q6_K's codes reach 63: four-product sums (eight could pass int16) */
    const int z32 = zs == 5;
#endif
    const int per = QUANT_QK_K / G;
    __m256 acc[4];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc[k] = first ? _mm256_setzero_ps() : maskload(y + (size_t)k * ys, nr);
    for (int sb = 0; sb < ng / per; sb++) {
        __m256i ia[4], ib[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            ia[k] = ib[k] = _mm256_setzero_si256();
        for (int j = 0; j < per; j++) {
            int g = sb * per + j;
            __m256i sc = _mm256_load_si256((const __m256i *)P->isc[g]);
#ifdef __AVXVNNI__
            __m256i sc_lo = _mm256_and_si256(sc, _mm256_set1_epi32(0xffff));
#endif
            const __m256i *c = &P->codes[g * (G / 4)];
            _Pragma("GCC unroll 4")
            for (int t = 0; t < G / 4; t += 2) {
                __m256i w0 = _mm256_load_si256(c + t), w1 = _mm256_load_si256(c + t + 1);
                __m256i a0 = sgn ? _mm256_abs_epi8(w0) : w0, a1 = sgn ? _mm256_abs_epi8(w1) : w1;
                _Pragma("GCC unroll 4")
                for (int k = 0; k < S; k++) {
                    int32_t v0, v1;
                    memcpy(&v0, xs[k] + off[g] + 4 * t, 4);
                    memcpy(&v1, xs[k] + off[g] + 4 * t + 4, 4);
                    __m256i x0 = _mm256_set1_epi32(v0), x1 = _mm256_set1_epi32(v1);
                    if (sgn) {
                        __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(x0, w0));
                        __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(x1, w1));
                        ia[k] = _mm256_add_epi32(ia[k], _mm256_add_epi32(_mm256_madd_epi16(p0, sc),
                                                                         _mm256_madd_epi16(p1, sc)));
                    } else {
#ifdef __AVXVNNI__
                        /* four-product sums (Q6_K's codes <= 63: |sum| <= 32256) or, for
                         * codes <= 31, eight-product ones (<= 31744), each its low int16,
                         * times the scale zero-extended: vpdpwssd's high half meets a 0 */
                        const __m256i z = _mm256_setzero_si256();
                        if (z32) {
                            ia[k] = _mm256_dpwssd_avx_epi32(
                                ia[k], _mm256_dpbusd_avx_epi32(z, a0, x0), sc_lo);
                            ia[k] = _mm256_dpwssd_avx_epi32(
                                ia[k], _mm256_dpbusd_avx_epi32(z, a1, x1), sc_lo);
                        } else {
                            __m256i p = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, a0, x0),
                                                                a1, x1);
                            ia[k] = _mm256_dpwssd_avx_epi32(ia[k], p, sc_lo);
                        }
#else
                        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(a0, x0),
                                                     _mm256_maddubs_epi16(a1, x1));
                        ia[k] = _mm256_add_epi32(ia[k], _mm256_madd_epi16(p, sc));
#endif
                    }
                }
            }
            if (min || zs) {
                __m256i m = min ? _mm256_load_si256((const __m256i *)P->imin[g]) : sc;
                _Pragma("GCC unroll 4")
                for (int k = 0; k < S; k++)
                    ib[k] = _mm256_add_epi32(ib[k], _mm256_madd_epi16(
                        m, _mm256_set1_epi32(sx[k * GEMM_MAXG + g] & 0xffff)));
            }
        }
        __m256 d = _mm256_load_ps(P->d[sb]), dm = _mm256_load_ps(P->dmin[sb]);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            __m256 dxk = _mm256_set1_ps(dx[k * GEMM_MAXG + sb * per]);
            if (zs)
                ia[k] = _mm256_sub_epi32(ia[k], _mm256_slli_epi32(ib[k], zs));
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[k]), _mm256_mul_ps(d, dxk), acc[k]);
            if (min)
                acc[k] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ib[k]), _mm256_mul_ps(dm, dxk),
                                          acc[k]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++) {
        if (nr >= 8)
            _mm256_storeu_ps(y + (size_t)k * ys, acc[k]);
        else
            maskstore(y + (size_t)k * ys, nr, acc[k]);
    }
}

#define TILE_K(G, MIN, SGN, ZS)                                                                \
    do {                                                                                       \
        switch (S) {                                                                           \
        case 4: tile_k(P, xs, 4, off, ng, G, MIN, SGN, ZS, dx, sx, y, ys, nr, first); break;  \
        case 3: tile_k(P, xs, 3, off, ng, G, MIN, SGN, ZS, dx, sx, y, ys, nr, first); break;  \
        case 2: tile_k(P, xs, 2, off, ng, G, MIN, SGN, ZS, dx, sx, y, ys, nr, first); break;  \
        default: tile_k(P, xs, 1, off, ng, G, MIN, SGN, ZS, dx, sx, y, ys, nr, first); break; \
        }                                                                                      \
    } while (0)

#define TILE_S(G, MIN, SGN)                                                                    \
    do {                                                                                       \
        switch (S) {                                                                           \
        case 4: tile(P, xs, 4, off, ng, G, MIN, SGN, dx, ic, xsum, y, ys, nr, first); break;   \
        case 3: tile(P, xs, 3, off, ng, G, MIN, SGN, dx, ic, xsum, y, ys, nr, first); break;   \
        case 2: tile(P, xs, 2, off, ng, G, MIN, SGN, dx, ic, xsum, y, ys, nr, first); break;   \
        default: tile(P, xs, 1, off, ng, G, MIN, SGN, dx, ic, xsum, y, ys, nr, first); break;  \
        }                                                                                      \
    } while (0)

static void tile_any(const struct panel *P, const char *const *xs, int S, const size_t *off,
                     int ng, const struct gemm_type *ty, const float *dx, const int32_t *ic,
                     const float *xsum, const int32_t *sx, float *y, size_t ys, int nr,
                     int first)
{
    if (ty->act_q8_k) {
        if (ty->sgn)
            TILE_K(32, 0, 1, 0);
        else if (ty->min && ty->g == 32)
            TILE_K(32, 1, 0, 0);
        else if (ty->min)
            TILE_K(16, 1, 0, 0);
        else if (ty->off == 4)
            TILE_K(16, 0, 0, 2);
        else
            TILE_K(16, 0, 0, 5);
    } else if (ty->sgn)
        TILE_S(32, 0, 1);
    else if (ty->min)
        TILE_S(32, 1, 0);
    else if (ty->g == 32)
        TILE_S(32, 0, 0);
    else
        TILE_S(16, 0, 0);
}

int GEMM_FN(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
            int y_stride, int row_begin, int row_end)
{
    struct gemm_type ty = gemm_type_of_avx2(W->type);
    if (!ty.g || n_seq < GEMM_MIN_SEQ)
        return -1;
    if (W->type == GGML_TYPE_Q8_0) {
        /* the decode kernel (gemm_avx2_cols.c), 16 sequences at a time: its activation split
         * (or vpdpbusd) costs less per product than these tiles' sign path, and it gives the
         * same bits (rows_agree). Scratch harness, 2048x2048 in cache, 512 sequences, min CPU
         * ms per call: avx2 33.0-33.5 -> 28.1-28.7, avxvnni 21.6-21.8 -> 16.4-16.8 */
        int s = 0;
        for (; s < n_seq; s += 16) {
            struct kern_act c = *X;
            c.data = (const char *)X->data + (size_t)s * X->stride;
            if (COLS_FN(W, &c, n_seq - s < 16 ? n_seq - s : 16, Y + (size_t)s * y_stride,
                        y_stride, row_begin, row_end) < 0)
                break;
        }
        /* it refuses a matrix wider than it takes (first chunk, nothing written): the tiles
         * below then take it, the same bits */
        if (s >= n_seq)
            return 0;
        if (s > 0)
            return -1;
    }
    const int G = ty.g, zero = ty.sgn ? 0 : ty.off, gk = GEMM_KC / G;
    const int ngt = W->cols / G;
    static _Thread_local struct panel pan __attribute__((aligned(32)));
    static _Thread_local uint8_t tmp[8][GEMM_KC] __attribute__((aligned(32)));
    static _Thread_local float dx[GEMM_SC * GEMM_MAXG], xsum[GEMM_SC * GEMM_MAXG];
    static _Thread_local int32_t ic[GEMM_SC * GEMM_MAXG], sx[GEMM_SC * GEMM_MAXG];
    size_t off[GEMM_MAXG];

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
                    int32_t v = ic[s * GEMM_MAXG + g];
                    sx[s * GEMM_MAXG + g] = v;
                    xsum[s * GEMM_MAXG + g] = d[g] * (float)v;
                    ic[s * GEMM_MAXG + g] = -zero * v;
                }
            }
            for (int r = row_begin; r < row_end; r += 8) {
                int nr = row_end - r < 8 ? row_end - r : 8;
                pack(W, r, nr, g0, ng, G, &pan, tmp);
                for (int s = 0; s < ns; s += 4) {
                    int S = ns - s < 4 ? ns - s : 4;
                    const char *xs[4];
                    for (int k = 0; k < S; k++)
                        xs[k] = (const char *)X->data + (size_t)(s0 + s + k) * X->stride;
                    tile_any(&pan, xs, S, off, ng, &ty, dx + s * GEMM_MAXG, ic + s * GEMM_MAXG,
                             xsum + s * GEMM_MAXG, sx + s * GEMM_MAXG,
                             Y + (size_t)(s0 + s) * y_stride + r,
                             (size_t)y_stride, nr, first);
                }
            }
        }
    }
    return 0;
}
