/* Q4_K and Q6_K weights against Q8_K activations on AMX-INT8 (the amx set, kernels_amx.c),
 * for prompt rows of many sequences (its gemm, AMX_K_GEMM_MIN), with the integers and float
 * steps of the avx512 set's K-quant rows (kernels_avx512.c, gemm_avx512_colsk.c), so a
 * (row, sequence) result is their bits and rows_agree stays 1.
 *
 * Per (row, sequence) and superblock that chain forms the exact integers isum = sum over
 * sub-blocks g of sc_g * (codes_g . x_g) (Q6_K codes taken as stored - 32) and for Q4_K
 * msum = sum_g m_g * bsum_g, then acc = fma(isum, d * dx, acc) and for Q4_K
 * acc = fnma(msum, dmin * dx, acc). Here the sub-block scales go into the weight bytes: a
 * superblock of 16 rows is unpacked once into three pieces of int8 "codes times a digit of
 * the scale", each digit small enough that the product fits a signed byte, and TDPBSSD
 * (16 rows x 16 sequences, 64 elements a step) sums each piece over the superblock:
 *   Q4_K (codes 0..15, scales 0..63): piece 0 code * (sc & 7), piece 1 code * (sc >> 3),
 *        piece 2 the sub-block's min m_g in each of its bytes (so its sum is msum);
 *        isum = C0 + 8 * C1.
 *   Q6_K (codes -32..31, scales -128..127 as balanced base-7 digits e0 + 7 e1 + 49 e2 with
 *        |e| <= 3): piece p code * e_p; isum = C0 + 7 * (C1 + 7 * C2).
 * These are the same exact integers (TDPBSSD's int32 sums cannot overflow here: at most
 * 256 * 105 * 128 in magnitude), then the float step runs on AVX-512 in the chain's order.
 *
 * Tile B of a 64-element chunk holds dword d of 16 sequences (row d, bytes 4s..4s+3), built
 * once per call into panels; sequences go in chunks whose panels fit AMXK_PANEL_BYTES. Per
 * group of 16 rows each superblock is unpacked once and serves every panel of the chunk
 * (the rows are read from memory once per chunk); rows in groups of 16, the caller runs a
 * last partial group. The C tiles are stored and their float steps run while the next
 * (superblock, panel)'s products do. Tile state is configured at the start of a call and
 * released at its end, on the calling thread (kern_amx_ready's grant first). */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gemm.h"
#include "kernels_simd.h"
#include "q6_k_codes.h"

/* Panel bytes per sequence chunk (16-sequence panels of the whole K, as many as fit, at
 * least one, at most AMXK_MAXSUB). */
#define AMXK_PANEL_BYTES (1u << 20)
#define AMXK_MAXSUB 32
/* Superblocks ahead each weight row is prefetched. */
#define AMXK_PF 4

/* One superblock of 16 sequences: b[d] is tile row d (dword d of each sequence), chunk c's
 * tile B rows 16c..16c+15; dx the sequences' scales. */
struct amxk_blk {
    int8_t b[64][64];
    float dx[16];
};

/* One superblock of 16 weight rows, unpacked: a[p][c] piece p's tile A over elements
 * 64c..64c+63; the rows' float scales. */
struct amxk_w {
    int8_t a[3][4][16][64];
    float d[16], dmin[16];
};

struct amxk_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* Tiles 0..2: C (16 x 16 int32) of pieces 0..2; 3..5: A of pieces 0..2; 6, 7: B of even
 * and odd chunks. All 16 rows of 64 bytes. */
static void amxk_config(void)
{
    struct amxk_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

/* Sequences [s0, s0 + ns) (ns <= 16) of X into P[0..nb): missing sequences are zeros. */
static void amxk_panel(const struct kern_act *X, int s0, int ns, int nb, struct amxk_blk *P)
{
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)X->stride));
    const __mmask16 k = (__mmask16)(ns >= 16 ? 0xffffu : (1u << ns) - 1u);
    const char *x0 = (const char *)X->data + (size_t)s0 * X->stride;
    for (int i = 0; i < nb; i++) {
        const char *b = x0 + (size_t)i * sizeof(struct quant_block_q8_k);
        const char *qs = b + offsetof(struct quant_block_q8_k, qs);
        for (int d = 0; d < 64; d++)
            _mm512_store_si512(P[i].b[d], _mm512_mask_i32gather_epi32(
                                              _mm512_setzero_si512(), k, idx, qs + 4 * d, 1));
        const char *dp = b + offsetof(struct quant_block_q8_k, d);
        _mm512_store_ps(P[i].dx, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, dp, 1));
    }
}

/* Every byte of 128-bit lane l: byte sel[l] of the dword v. */
static AI __m512i lane_bytes(uint32_t v, const __m512i sel)
{
    return _mm512_shuffle_epi8(_mm512_set1_epi32((int)v), sel);
}

/* Bytes v * k (mod 256; exact where the product fits a signed byte) for signed v and k, k
 * the same in both bytes of each 16-bit lane. */
static AI __m512i mul_bytes(__m512i v, __m512i k)
{
    __m512i kw = _mm512_srai_epi16(_mm512_slli_epi16(k, 8), 8);
    __m512i lo = _mm512_mullo_epi16(v, kw);
    __m512i hi = _mm512_slli_epi16(_mm512_mullo_epi16(_mm512_srai_epi16(v, 8), kw), 8);
    return _mm512_mask_blend_epi8((__mmask64)0xAAAAAAAAAAAAAAAAULL, lo, hi);
}

static AI void amxk_pf(const char *b, size_t bb)
{
    const char *p = b + AMXK_PF * bb;
    for (size_t o = 0; o < bb; o += 64)
        _mm_prefetch(p + o, _MM_HINT_T0);
}

/* Superblock i of 16 Q4_K rows from w0 (rb bytes apart) into o. */
static void unpack_q4_k(const char *w0, size_t rb, int i, int pf, struct amxk_w *o)
{
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m512i w7 = _mm512_set1_epi16(7);
    /* lanes 0 and 1: byte 0 (sub-block 2c), lanes 2 and 3: byte 1 (sub-block 2c + 1) */
    const __m512i sel = _mm512_set_epi64(0x0101010101010101LL, 0x0101010101010101LL,
                                         0x0101010101010101LL, 0x0101010101010101LL, 0, 0, 0, 0);
    for (int m = 0; m < 16; m++) {
        const struct quant_block_q4_k *b =
            (const struct quant_block_q4_k *)(w0 + (size_t)m * rb) + i;
        if (pf)
            amxk_pf((const char *)b, sizeof *b);
        __m128i sc16, m16;
        q4_k_scales(b->scales, &sc16, &m16);
        uint8_t sc[16], mn[16];
        _mm_storeu_si128((__m128i *)sc, _mm_packus_epi16(sc16, sc16));
        _mm_storeu_si128((__m128i *)mn, _mm_packus_epi16(m16, m16));
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
            __m512i q = join(_mm256_and_si256(raw, low4),
                             _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
            __m512i ks = lane_bytes((uint32_t)sc[2 * c] | (uint32_t)sc[2 * c + 1] << 8, sel);
            /* codes <= 15 and digits <= 7: each byte's product fits it, no carries */
            _mm512_store_si512(o->a[0][c][m], _mm512_mullo_epi16(q, _mm512_and_si512(ks, w7)));
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(ks, 3), w7);
            _mm512_store_si512(o->a[1][c][m], _mm512_mullo_epi16(q, hi));
            _mm512_store_si512(o->a[2][c][m],
                               lane_bytes((uint32_t)mn[2 * c] | (uint32_t)mn[2 * c + 1] << 8, sel));
        }
        o->d[m] = _cvtsh_ss(b->d);
        o->dmin[m] = _cvtsh_ss(b->dmin);
    }
}

/* floor((v + 3) / 7) for int16 lanes v in [-128, 127]. */
static AI __m256i div7(__m256i v)
{
    __m256i u = _mm256_add_epi16(v, _mm256_set1_epi16(3 + 7 * 19)); /* 8..263 */
    return _mm256_sub_epi16(_mm256_mulhi_epu16(u, _mm256_set1_epi16(9363)), _mm256_set1_epi16(19));
}

static AI void pack16(__m256i v, int8_t *out)
{
    _mm_storeu_si128((__m128i *)out,
                     _mm_packs_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* Superblock i of 16 Q6_K rows from w0 (rb bytes apart) into o. */
static void unpack_q6_k(const char *w0, size_t rb, int i, int pf, struct amxk_w *o)
{
    const __m256i seven = _mm256_set1_epi16(7);
    /* 128-bit lane l (sub-block 4c + l): byte l */
    const __m512i sel = _mm512_set_epi64(0x0303030303030303LL, 0x0303030303030303LL,
                                         0x0202020202020202LL, 0x0202020202020202LL,
                                         0x0101010101010101LL, 0x0101010101010101LL, 0, 0);
    for (int m = 0; m < 16; m++) {
        const struct quant_block_q6_k *b =
            (const struct quant_block_q6_k *)(w0 + (size_t)m * rb) + i;
        if (pf)
            amxk_pf((const char *)b, sizeof *b);
        /* the scales as balanced base-7 digits: sc = e0 + 7 * (e1 + 7 * e2) */
        __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
        __m256i q1 = div7(s), q2 = div7(q1);
        int8_t e[3][16];
        pack16(_mm256_sub_epi16(s, _mm256_mullo_epi16(q1, seven)), e[0]);
        pack16(_mm256_sub_epi16(q1, _mm256_mullo_epi16(q2, seven)), e[1]);
        pack16(q2, e[2]);
        __m512i q[4];
        for (int h = 0; h < 2; h++) {
            __m256i p[4];
            q6_k_half_codes(b, h, p);
            q[2 * h] = _mm512_sub_epi8(join(p[0], p[1]), _mm512_set1_epi8(32));
            q[2 * h + 1] = _mm512_sub_epi8(join(p[2], p[3]), _mm512_set1_epi8(32));
        }
        for (int p = 0; p < 3; p++)
            for (int c = 0; c < 4; c++) {
                uint32_t dw;
                memcpy(&dw, e[p] + 4 * c, sizeof dw);
                _mm512_store_si512(o->a[p][c][m], mul_bytes(q[c], lane_bytes(dw, sel)));
            }
        o->d[m] = _cvtsh_ss(b->d);
        o->dmin[m] = 0.0f;
    }
}

/* Chunk C's products of one superblock (A pieces in W, B in P) into tiles 0..2. */
#define AMXK_CHUNK(C, BT)                                                                      \
    do {                                                                                       \
        _tile_loadd(BT, P->b[16 * (C)], 64);                                                   \
        _tile_loadd(3, W->a[0][C], 64);                                                        \
        _tile_loadd(4, W->a[1][C], 64);                                                        \
        _tile_loadd(5, W->a[2][C], 64);                                                        \
        _tile_dpbssd(0, 3, BT);                                                                \
        _tile_dpbssd(1, 4, BT);                                                                \
        _tile_dpbssd(2, 5, BT);                                                                \
    } while (0)

static AI void amxk_products(const struct amxk_w *W, const struct amxk_blk *P)
{
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    AMXK_CHUNK(0, 6);
    AMXK_CHUNK(1, 7);
    AMXK_CHUNK(2, 6);
    AMXK_CHUNK(3, 7);
}

/* The chain's float step of one superblock for 16 rows from the stored C tiles. */
static AI void amxk_step(const int six, const int32_t (*cb)[16][16], const struct amxk_w *W,
                         __m512 dx, float (*acc)[16])
{
    _Pragma("GCC unroll 16")
    for (int m = 0; m < 16; m++) {
        __m512i c0 = _mm512_load_si512(cb[0][m]), c1 = _mm512_load_si512(cb[1][m]);
        __m512i c2 = _mm512_load_si512(cb[2][m]), is;
        if (six) {
            __m512i t = _mm512_add_epi32(c1, _mm512_sub_epi32(_mm512_slli_epi32(c2, 3), c2));
            is = _mm512_add_epi32(c0, _mm512_sub_epi32(_mm512_slli_epi32(t, 3), t));
        } else {
            is = _mm512_add_epi32(c0, _mm512_slli_epi32(c1, 3));
        }
        __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                   _mm512_mul_ps(_mm512_set1_ps(W->d[m]), dx),
                                   _mm512_load_ps(acc[m]));
        if (!six)
            a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(c2),
                                 _mm512_mul_ps(_mm512_set1_ps(W->dmin[m]), dx), a);
        _mm512_store_ps(acc[m], a);
    }
}

/* 16 rows from w0 against nsub panels (panel j's superblock i at pan[j * nb + i]) over nb
 * superblocks: acc[j][m][s]. Superblock by superblock, panel by panel; the products of the
 * next (superblock, panel) run while the float steps of this one do. */
static AI void amxk_rows16(const int six, const char *w0, size_t rb, int nb,
                           const struct amxk_blk *pan, int nsub, struct amxk_w wb[2],
                           float (*acc)[16][16])
{
    int32_t cb[3][16][16] __attribute__((aligned(64)));
    memset(acc, 0, sizeof(float) * 256 * (size_t)nsub);
    const int n = nb * nsub;
    if (six)
        unpack_q6_k(w0, rb, 0, AMXK_PF < nb, &wb[0]);
    else
        unpack_q4_k(w0, rb, 0, AMXK_PF < nb, &wb[0]);
    amxk_products(&wb[0], &pan[0]);
    for (int q = 0, i = 0, j = 0; q < n; q++) {
        _tile_stored(0, cb[0], 64);
        _tile_stored(1, cb[1], 64);
        _tile_stored(2, cb[2], 64);
        int i1 = j + 1 < nsub ? i : i + 1, j1 = j + 1 < nsub ? j + 1 : 0;
        if (q + 1 < n) {
            if (j1 == 0) {
                int pf = i1 + AMXK_PF < nb;
                if (six)
                    unpack_q6_k(w0, rb, i1, pf, &wb[i1 & 1]);
                else
                    unpack_q4_k(w0, rb, i1, pf, &wb[i1 & 1]);
            }
            amxk_products(&wb[i1 & 1], &pan[(size_t)j1 * nb + i1]);
        }
        amxk_step(six, (const int32_t(*)[16][16])cb, &wb[i & 1],
                  _mm512_load_ps(pan[(size_t)j * nb + i].dx), acc[j]);
        i = i1;
        j = j1;
    }
}

static void amxk_rows16_any(int six, const char *w0, size_t rb, int nb,
                            const struct amxk_blk *pan, int nsub, struct amxk_w wb[2],
                            float (*acc)[16][16])
{
    if (six)
        amxk_rows16(1, w0, rb, nb, pan, nsub, wb, acc);
    else
        amxk_rows16(0, w0, rb, nb, pan, nsub, wb, acc);
}

int kern_gemm_amx_k(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                    int y_stride, int row_begin, int row_end)
{
    static _Thread_local struct amxk_blk pan[AMXK_PANEL_BYTES / sizeof(struct amxk_blk)]
        __attribute__((aligned(64)));
    static _Thread_local struct amxk_w wb[2] __attribute__((aligned(64)));
    static _Thread_local float acc[AMXK_MAXSUB][16][16] __attribute__((aligned(64)));
    const enum ggml_type t = W->type;
    if ((t != GGML_TYPE_Q4_K && t != GGML_TYPE_Q6_K) || n_seq < 1 || W->cols % QUANT_QK_K ||
        W->cols < QUANT_QK_K)
        return -1;
    const int six = t == GGML_TYPE_Q6_K, nb = W->cols / QUANT_QK_K;
    const size_t rb = W->row_bytes;
    int subs = (int)(sizeof pan / sizeof pan[0] / (size_t)nb);
    if (subs < 1)
        return -1;
    if (subs > AMXK_MAXSUB)
        subs = AMXK_MAXSUB;
    const int r_end = row_begin + (row_end - row_begin) / 16 * 16;
    if (r_end == row_begin)
        return 0;
    amxk_config();
    for (int s0 = 0; s0 < n_seq; s0 += 16 * subs) {
        int nsub = (n_seq - s0 + 15) / 16 < subs ? (n_seq - s0 + 15) / 16 : subs;
        for (int j = 0; j < nsub; j++) {
            int a = s0 + 16 * j;
            amxk_panel(X, a, n_seq - a < 16 ? n_seq - a : 16, nb, pan + (size_t)j * nb);
        }
        for (int r = row_begin; r < r_end; r += 16) {
            amxk_rows16_any(six, (const char *)W->data + (size_t)r * rb, rb, nb, pan, nsub, wb,
                            acc);
            for (int j = 0; j < nsub; j++) {
                int a = s0 + 16 * j, ns = n_seq - a < 16 ? n_seq - a : 16;
                for (int s = 0; s < ns; s++)
                    for (int m = 0; m < 16; m++)
                        Y[(size_t)(a + s) * y_stride + r + m] = acc[j][m][s];
            }
        }
    }
    _tile_release();
    return r_end - row_begin;
}
