/* Decode rows of 5 to 16 sequences of Q4_K and Q6_K on AVX-512 VNNI, lane = sequence (as
 * gemm_avx512_cols.c does for the 32-element types): the activations are transposed once per
 * call into a panel whose 512-bit vectors hold 4 bytes of each sequence, and each weight
 * superblock is decoded once into codes; per 4 elements (16 sequences) or 8 (8 sequences,
 * two lanes a sequence running two sub-blocks side by side) one broadcast of a row's codes
 * and one vpdpbusd serve every sequence, with no horizontal sums of weights.
 *
 * Per (row, sequence) the result is the chain of the AVX-512 and avx2 sets' matmul
 * (kernels_avx512.c, kernels_avx2.c), superblock by superblock: the exact integer sum isum =
 * sum over sub-blocks g of sc_g * (codes . x)_g (for Q6_K, whose codes are stored + 32, less
 * 32 * sc_g * bsum_g) and for Q4_K msum = sum_g m_g * bsum_g, then acc = fma(isum, d * dx,
 * acc) and for Q4_K acc = fnma(msum, dmin * dx, acc). So a row is the same bits whether it
 * meets 1 or 16 sequences. Here a sub-block's sum is formed in its lane (at most 32 * 15 *
 * 127 or 16 * 63 * 127 in magnitude), multiplied by its scale (vpmulld) and added up in
 * int32; a sequence's two lanes are added before the float step.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "kernels_simd.h"

/* The longest row taken (elements), for the thread's panel. */
#define COLSK_MAXK 16384
#define COLSK_NB (COLSK_MAXK / QUANT_QK_K)
/* Rows computed together: each activation vector loaded serves this many rows. */
#define COLSK_R 8
_Static_assert(COLSK_R == 8, "kern_gemm_avx512_colsk stores a sequence's 8 results as one vector");
/* Superblocks ahead each row is prefetched (bench_kernels Q4_K at 8 and 16 sequences: 0, 4,
 * 8 or 16 ahead all within the noise). */
#ifndef COLSK_PF
#define COLSK_PF 4
#endif

struct colsk_panel {
    __m512i x[COLSK_MAXK / 4]; /* lane s * H + h: the dword colsk_dword gives of sequence s */
    __m512 dx[COLSK_NB];       /* lane s * H: the superblock's scale */
    /* Q4_K, 4 a superblock: lane s * H the int16 pair (bsum 2p, bsum 2p + 1) of 32-element
     * sums; Q6_K, 16 / H a superblock: lane s * H + h -32 * bsum (H g + h), the start of
     * sub-block H g + h */
    __m512i aux[COLSK_MAXK / 16];
};

/* One row's superblock, decoded. */
struct colsk_dec {
    uint8_t c[QUANT_QK_K] __attribute__((aligned(64))); /* codes in element order */
    int32_t sc[16];                                     /* sub-block scales */
    int32_t m[4];                                       /* Q4_K: int16 pairs of mins */
    float d, dmin;
};

static AI uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static AI void dec_q4_k(const struct quant_block_q4_k *b, const int H, struct colsk_dec *o)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    _Pragma("GCC unroll 4")
    for (int c = 0; c < 4; c++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        __m256i lo = _mm256_and_si256(raw, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if (H == 2) { /* qword q: dword j(q) of sub-blocks 2c and 2c + 1 (see colsk_dword) */
            __m256i a = _mm256_unpacklo_epi32(lo, hi);
            hi = _mm256_unpackhi_epi32(lo, hi);
            lo = a;
        }
        _mm256_store_si256((__m256i *)(o->c + 64 * c), lo);
        _mm256_store_si256((__m256i *)(o->c + 64 * c + 32), hi);
    }
    __m128i sc16, m16;
    q4_k_scales(b->scales, &sc16, &m16);
    _mm256_storeu_si256((__m256i *)o->sc, _mm256_cvtepu16_epi32(sc16));
    _mm_storeu_si128((__m128i *)o->m, m16);
    o->d = _cvtsh_ss(b->d);
    o->dmin = _cvtsh_ss(b->dmin);
}

/* Stores 32 codes (sub-blocks 2p and 2p + 1); with H = 2 qword t holds dwords t and 4 + t. */
static AI void put32(uint8_t *c, __m256i v, const int H)
{
    if (H == 2)
        v = _mm256_permutevar8x32_epi32(v, _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0));
    _mm256_store_si256((__m256i *)c, v);
}

static AI void dec_q6_k(const struct quant_block_q6_k *b, const int H, struct colsk_dec *o)
{
    const __m256i low4 = _mm256_set1_epi8(15), hi2 = _mm256_set1_epi8(0x30);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        uint8_t *c = o->c + 128 * h;
        put32(c, _mm256_or_si256(_mm256_and_si256(l0, low4),
                                 _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2)), H);
        put32(c + 32, _mm256_or_si256(_mm256_and_si256(l1, low4),
                                      _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2)), H);
        put32(c + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                      _mm256_and_si256(qh, hi2)), H);
        put32(c + 96, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                      _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2)), H);
    }
    _mm512_storeu_si512(o->sc, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)));
    o->d = _cvtsh_ss(b->d);
    o->dmin = 0.0f;
}

/* The dword of a superblock (elements 4d..4d+3) that panel step v gives lane h of each
 * sequence (H lanes a sequence), matching the decoded codes' layout. H = 1: d = v. H = 2: the
 * two lanes run two sub-blocks side by side, so one vpmulld scales both: Q4_K the low and
 * high nibbles of one packed dword (step 8c + q: sub-blocks 2c and 2c + 1), Q6_K sub-blocks
 * 2p and 2p + 1 (step 4p + t). */
static int colsk_dword(int six, int H, int v, int h)
{
    static const int j[8] = {0, 1, 4, 5, 2, 3, 6, 7}; /* unpacklo/hi_epi32's dword order */
    if (H == 1)
        return v;
    if (six)
        return 8 * (v / 4) + v % 4 + 4 * h;
    return 16 * (v / 8) + j[v % 8] + 8 * h;
}

/* A row's codes for panel vector v (lane s * H + h: dword H * v + h of the superblock). */
static AI __m512i codes_at(const uint8_t *c, const int H, int v)
{
    if (H == 2) {
        uint64_t q;
        memcpy(&q, c + 8 * v, sizeof q);
        return _mm512_set1_epi64((long long)q);
    }
    return _mm512_set1_epi32((int)ld32(c + 4 * v));
}

/* Group g's sub-block scales: sc[g], or with H = 2 sc[2g] in lane 2s and sc[2g + 1] in 2s + 1. */
static AI __m512i scales_at(const int32_t *sc, const int H, int g)
{
    if (H == 2) {
        uint64_t q;
        memcpy(&q, sc + 2 * g, sizeof q);
        return _mm512_set1_epi64((long long)q);
    }
    return _mm512_set1_epi32(sc[g]);
}

/* Lane s * H: the sum of lanes s * H .. s * H + H - 1 (exact). */
static AI __m512i lanes_sum(__m512i v, const int H)
{
    if (H > 1)
        v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
    return v;
}

/* R rows (rb bytes apart, from w0) over nb superblocks against the panel, H lanes a sequence:
 * out[r * 16 + s * H]. Q6_K when six, else Q4_K. */
static AI void colsk_rows(const int six, const int H, const char *w0, size_t rb, const int R,
                          int nb, const struct colsk_panel *P, float *out)
{
    const size_t bb = six ? sizeof(struct quant_block_q6_k) : sizeof(struct quant_block_q4_k);
    /* groups of H sub-blocks side by side, panel steps per group and per superblock */
    const int NG = (six ? 16 : 8) / H, V = six ? 4 : 8, VB = QUANT_QK_K / 4 / H;
    struct colsk_dec dec[COLSK_R];
    __m512 acc[COLSK_R];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const char *wb = w0 + (size_t)i * bb;
        /* COLSK_PF superblocks ahead, past a row's end the next block's row (rows are nb * bb
         * bytes: R - 1 rows on from the same row's continuation) */
        const size_t pfo = i + COLSK_PF < nb ? COLSK_PF * bb : COLSK_PF * bb + (size_t)(R - 1) * rb;
        __m512i isum[COLSK_R], msum[COLSK_R];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const char *pf = wb + (size_t)r * rb + pfo;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
            if (six)
                dec_q6_k((const struct quant_block_q6_k *)(wb + (size_t)r * rb), H, &dec[r]);
            else
                dec_q4_k((const struct quant_block_q4_k *)(wb + (size_t)r * rb), H, &dec[r]);
            isum[r] = msum[r] = _mm512_setzero_si512();
        }
        const __m512i *xv = &P->x[VB * i];
        for (int g = 0; g < NG; g++) {
            __m512i ia[COLSK_R];
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++)
                ia[r] = six ? P->aux[NG * i + g] : _mm512_setzero_si512();
            _Pragma("GCC unroll 8")
            for (int t = 0; t < V; t++) {
                __m512i x = _mm512_load_si512(&xv[g * V + t]);
                _Pragma("GCC unroll 8")
                for (int r = 0; r < R; r++)
                    ia[r] = _mm512_dpbusd_epi32(ia[r], codes_at(dec[r].c, H, g * V + t), x);
            }
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++)
                isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(ia[r], scales_at(dec[r].sc, H, g)));
        }
        if (!six) {
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                __m512i bs = _mm512_load_si512(&P->aux[4 * i + p]);
                _Pragma("GCC unroll 8")
                for (int r = 0; r < R; r++)
                    msum[r] = _mm512_dpwssd_epi32(msum[r], bs, _mm512_set1_epi32(dec[r].m[p]));
            }
        }
        __m512 dx = _mm512_load_ps(&P->dx[i]);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            /* k_step of kernels_avx512.c: the same operations in the same order */
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes_sum(isum[r], H)),
                                     _mm512_mul_ps(_mm512_set1_ps(dec[r].d), dx), acc[r]);
            if (!six)
                acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[r]),
                                          _mm512_mul_ps(_mm512_set1_ps(dec[r].dmin), dx), acc[r]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(out + 16 * r, acc[r]);
}

#define COLSK_H(SIX, H)                                                                        \
    do {                                                                                       \
        if (R == COLSK_R)                                                                      \
            colsk_rows(SIX, H, w0, rb, COLSK_R, nb, P, out);                                   \
        else                                                                                   \
            colsk_rows(SIX, H, w0, rb, 1, nb, P, out);                                         \
    } while (0)

static void colsk_any(int six, int H, const char *w0, size_t rb, int R, int nb,
                      const struct colsk_panel *P, float *out)
{
    if (six) {
        if (H == 2) COLSK_H(1, 2); else COLSK_H(1, 1);
    } else {
        if (H == 2) COLSK_H(0, 2); else COLSK_H(0, 1);
    }
}

/* The panel of n_seq sequences (H lanes a sequence, see struct colsk_panel), gathered: lane
 * s * H + h of each vector reads sequence s (lanes of missing sequences, and of x's lanes
 * the H = 2 odd lanes of dx and Q4_K's aux, are zeros). */
static void colsk_panel(const struct kern_act *X, int n_seq, int six, int H, int nb, int na,
                        struct colsk_panel *P)
{
    const int st = (int)X->stride;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i seq = H == 2 ? _mm512_srli_epi32(lane, 1) : lane;
    const __m512i odd = _mm512_and_si512(lane, _mm512_set1_epi32(H - 1)); /* h */
    const __m512i sidx = _mm512_mullo_epi32(seq, _mm512_set1_epi32(st));
    /* lane h of a sequence reads the dword 4 (Q6_K) or 8 (Q4_K) after lane 0's (colsk_dword) */
    const __m512i xidx = _mm512_add_epi32(sidx, _mm512_mullo_epi32(odd, _mm512_set1_epi32(six ? 16 : 32)));
    const __mmask16 k = (__mmask16)(n_seq * H >= 16 ? 0xffffu : (1u << (n_seq * H)) - 1u);
    const __mmask16 k0 = (__mmask16)(k & (H == 2 ? 0x5555u : 0xffffu));
    const __m512i ones = _mm512_set1_epi16(1), zero = _mm512_setzero_si512();
    const char *x0 = (const char *)X->data;
    for (int i = 0; i < nb; i++) {
        const char *b = x0 + (size_t)i * sizeof(struct quant_block_q8_k);
        const char *qs = b + offsetof(struct quant_block_q8_k, qs);
        const char *bs = b + offsetof(struct quant_block_q8_k, bsums);
        for (int v = 0; v < 64 / H; v++)
            _mm512_store_si512(&P->x[64 / H * i + v],
                               _mm512_mask_i32gather_epi32(zero, k, xidx,
                                                           qs + 4 * colsk_dword(six, H, v, 0), 1));
        P->dx[i] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k0, sidx,
                                            b + offsetof(struct quant_block_q8_k, d), 1);
        for (int a = 0; a < na; a++) {
            __m512i v;
            if (six) { /* int16 bsums H a + h, -32 times: dword (H a + h) / 2 */
                int j = H * a;
                __m512i d = _mm512_mask_i32gather_epi32(zero, k, sidx, bs + 4 * (j / 2), 1);
                /* the low int16 for even H a + h, else the high */
                __m512i lo = _mm512_srai_epi32(_mm512_slli_epi32(d, 16), 16);
                __m512i hi = _mm512_srai_epi32(d, 16);
                __m512i odd_j = H == 2 ? odd : _mm512_set1_epi32(j & 1);
                v = _mm512_mask_blend_epi32(_mm512_test_epi32_mask(odd_j, odd_j), lo, hi);
                v = _mm512_sub_epi32(zero, _mm512_slli_epi32(v, 5));
            } else { /* int16 pair (bsums 4a + bsums 4a + 1, bsums 4a + 2 + bsums 4a + 3) */
                __m512i p0 = _mm512_mask_i32gather_epi32(zero, k0, sidx, bs + 8 * a, 1);
                __m512i p1 = _mm512_mask_i32gather_epi32(zero, k0, sidx, bs + 8 * a + 4, 1);
                v = _mm512_or_si512(_mm512_and_si512(_mm512_madd_epi16(p0, ones),
                                                     _mm512_set1_epi32(0xffff)),
                                    _mm512_slli_epi32(_mm512_madd_epi16(p1, ones), 16));
            }
            _mm512_store_si512(&P->aux[na * i + a], v);
        }
    }
}

int kern_gemm_avx512_colsk(const struct kern_mat *W, const struct kern_act *X, int n_seq,
                           float *Y, int y_stride, int row_begin, int row_end)
{
    static _Thread_local struct colsk_panel P __attribute__((aligned(64)));
    const enum ggml_type t = W->type;
    const int six = t == GGML_TYPE_Q6_K;
    if ((t != GGML_TYPE_Q4_K && !six) || n_seq < 1 || n_seq > 16 || W->cols > COLSK_MAXK ||
        W->cols % QUANT_QK_K)
        return -1;
    /* lanes a sequence: 16 / H sequences fill the 16 lanes */
    const int H = n_seq <= 8 ? 2 : 1;
    const int nb = W->cols / QUANT_QK_K, na = six ? 16 / H : 4;
    colsk_panel(X, n_seq, six, H, nb, na, &P);
    float out[COLSK_R * 16] __attribute__((aligned(64)));
    const size_t rb = W->row_bytes;
    for (int r = row_begin; r < row_end;) {
        int R = row_end - r >= COLSK_R ? COLSK_R : 1;
        colsk_any(six, H, (const char *)W->data + (size_t)r * rb, rb, R, nb, &P, out);
        if (R == COLSK_R) { /* sequence s's R results: out[16 i + s H], i = 0..R-1 */
            const __m256i idx = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
            for (int s = 0; s < n_seq; s++)
                _mm256_storeu_ps(Y + (size_t)s * y_stride + r,
                                 _mm256_i32gather_ps(out + s * H, idx, 4));
        } else {
            for (int s = 0; s < n_seq; s++)
                Y[(size_t)s * y_stride + r] = out[s * H];
        }
        r += R;
    }
    return 0;
}
