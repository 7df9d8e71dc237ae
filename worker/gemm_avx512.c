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
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "gemm_decode.h"
#include "kernels_simd.h"

#define GEMM_SC 128

struct panel {
    __m512i codes[GEMM_KC / 4];
    float scale[GEMM_MAXG][16];
    float bias[GEMM_MAXG][16];
};

/* Rows [r, r + nr) (nr <= 16) of W, sub-blocks [g0, g0 + ng), into p. */
static void pack(const struct kern_mat *W, const struct gemm_type *ty, int r, int nr, int g0,
                 int ng, struct panel *p, uint8_t (*tmp)[GEMM_KC])
{
    int G = ty->g, n = ng * G;
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
    const __m512i flip = _mm512_set1_epi8(ty->sgn ? (char)0x80 : 0);
    for (int t = 0; t < n / 4; t += 8) {
        __m256i lo[8], hi[8];
        gemm_transpose8(tmp[0], GEMM_KC, t, lo);
        gemm_transpose8(tmp[8], GEMM_KC, t, hi);
        for (int i = 0; i < 8; i++)
            p->codes[t + i] = _mm512_xor_si512(join(lo[i], hi[i]), flip);
    }
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
                if (min)
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
