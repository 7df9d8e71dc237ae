/* The AVX2+FMA+F16C kernel set. The quantized types gemm_avx2.c tiles go through it for
 * prompt rows; their decode rows (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS here,
 * the others in kernels_avx2_ext.c) compute the GEMM's float chain, so a row is the same bits
 * whichever computed it; float types use FMA here. Built with -mavx2 -mfma
 * -mf16c: reached only through kern_ops_get after a CPU check. kernels_avxvnni.c builds this
 * file again with -mavxvnni as the avxvnni set: the integer dots (kernels_simd.h's dot_u8s8*)
 * become vpdpbusd and vpdpwssd with the same sums, so the two sets give the same bits. Every
 * (row, sequence) dot forms the same exact integer sums and runs the same float steps whether
 * it is computed alone, in a tile of 4 sequences or beside other rows (the one-sequence
 * Q4_K/Q5_K/Q6_K rows go four, then two at a time; Q5_0 rows eight at a time, two blocks a
 * step), so batching never changes a result bit. */
#include "kernels.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "gemm.h"
#include "gemm_decode.h"
#include "kernels_simd.h"
#include "quant.h"
#include "vexp.h"

/* ---- the types gemm_avx2.c tiles (see there), as decode rows ----
 * Per (row, sequence) the result is the chain gemm_avx2.c computes, unit by unit (a 32-element
 * block, or a 256-element superblock of the K types): the unit's exact integer sum isum (its
 * sub-block scales folded in, and for Q4_K/Q5_K the min sum msum apart), then
 * acc = fma(isum, dw * dx, acc) and for Q4_K/Q5_K acc = fnma(msum, dmin * dx, acc). Here the
 * integer sums come row-wise (8 lanes per sequence) and are summed across lanes, exactly;
 * four sequences share one float step, lane k being sequence k. */

enum b32_kind { B32_Q8_0, B32_Q4_0, B32_Q5_0, B32_IQ4_NL };

/* Block i of a 32-element type as 32 signed bytes (the codes less their zero point). */
static AI __m256i b32_signed(const char *w, const enum b32_kind kind, int i, float *d)
{
    if (kind == B32_Q8_0) {
        const struct quant_block_q8_0 *b = (const struct quant_block_q8_0 *)w + i;
        *d = f16(b->d);
        return _mm256_loadu_si256((const __m256i *)b->qs);
    }
    if (kind == B32_Q5_0) {
        const struct quant_block_q5_0 *b = (const struct quant_block_q5_0 *)w + i;
        *d = f16(b->d);
        return _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), gemm_bits5(b->qh)),
                               _mm256_set1_epi8(16));
    }
    const struct quant_block_q4_0 *b = (const struct quant_block_q4_0 *)w + i; /* IQ4_NL too */
    *d = f16(b->d);
    if (kind == B32_IQ4_NL)
        return _mm256_shuffle_epi8(iq4_table(), nibbles(b->qs));
    return _mm256_sub_epi8(nibbles(b->qs), _mm256_set1_epi8(8));
}

/* Block i of Q4_0 or Q5_0 as its 32 stored codes (unsigned, the zero point b32_zero apart
 * from the signed weights); its f16 scale in *h. */
static AI __m256i b32_codes(const char *w, const enum b32_kind kind, int i, uint16_t *h)
{
    if (kind == B32_Q5_0) {
        const struct quant_block_q5_0 *b = (const struct quant_block_q5_0 *)w + i;
        *h = b->d;
        return _mm256_or_si256(nibbles(b->qs), gemm_bits5(b->qh));
    }
    const struct quant_block_q4_0 *b = (const struct quant_block_q4_0 *)w + i;
    *h = b->d;
    return nibbles(b->qs);
}

static AI int b32_zero(const enum b32_kind kind)
{
    return kind == B32_Q5_0 ? 16 : 8;
}

/* Blocks [i0, i1) of one row against S (<= 4) Q8_0 activations; dx holds block i's
 * activation scales as floats at dx[4 * i + k]. The chain continues y's values unless first. */
static AI void tile_b32(const char *w, const enum b32_kind kind, const char *x, size_t xs,
                        const float *dx, int i0, int i1, const int S, int first, float *y,
                        size_t ys)
{
    __m128 acc = _mm_setzero_ps();
    if (!first) {
        float a[4] = {0};
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            a[k] = y[k * ys];
        acc = _mm_loadu_ps(a);
    }
    for (int i = i0; i < i1; i++) {
        float dw;
        __m256i q = b32_signed(w, kind, i, &dw), aq = _mm256_abs_epi8(q), v[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const struct quant_block_q8_0 *a = (const struct quant_block_q8_0 *)(x + k * xs) + i;
            __m256i qx = _mm256_loadu_si256((const __m256i *)a->qs);
            v[k] = dot_u8s8(aq, _mm256_sign_epi8(qx, q));
        }
        __m128 dxv = S == 1 ? _mm_set1_ps(dx[4 * (i - i0)]) : _mm_loadu_ps(dx + 4 * (i - i0));
        __m128 dd = _mm_mul_ps(_mm_set1_ps(dw), dxv);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum_s(v, S)), dd, acc);
    }
    store_s(acc, S, y, ys);
}

/* Four rows (rb bytes apart) against one activation: as tile_b32, lane r for row r, whose
 * results land in y[0..3]. One sequence's float chain is the same as in tile_b32. Q4_0 and
 * Q5_0 take their unsigned codes u = w + z times x less z * (sum of x in each group of
 * four), the latter once per block for the four rows: each int32 lane is tile_b32's exact
 * sum, for less work per row. */
static AI void tile_b32_r4(const char *w, size_t rb, const enum b32_kind kind, const char *x,
                           const float *dx, int i0, int i1, int first, float *y)
{
    __m128 acc = first ? _mm_setzero_ps() : _mm_loadu_ps(y);
    const size_t bb = kind == B32_Q8_0 ? sizeof(struct quant_block_q8_0)
                    : kind == B32_Q5_0 ? sizeof(struct quant_block_q5_0)
                                       : sizeof(struct quant_block_q4_0);
    /* the rows 16 ahead (contiguous), a block's share per step: a short row (SmolLM's 576
     * columns, 612 bytes of Q8_0) is too short a stream for the hardware prefetcher */
    const char *pf = w + 16 * rb + (size_t)i0 * 4 * bb;
    for (int i = i0; i < i1; i++) {
        for (size_t l = 0; l < 4 * bb; l += 64)
            _mm_prefetch(pf + l, _MM_HINT_T0);
        pf += 4 * bb;
        const struct quant_block_q8_0 *a = (const struct quant_block_q8_0 *)x + i;
        __m256i qx = _mm256_loadu_si256((const __m256i *)a->qs), v[4];
        __m128 dwv;
        if (kind == B32_Q4_0 || kind == B32_Q5_0) {
            __m256i zx = dot_u8s8(_mm256_set1_epi8((char)b32_zero(kind)), qx);
            uint16_t h[4];
            _Pragma("GCC unroll 4")
            for (int r = 0; r < 4; r++)
                v[r] = _mm256_sub_epi32(dot_u8s8(b32_codes(w + r * rb, kind, i, &h[r]), qx), zx);
            dwv = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, (short)h[3], (short)h[2], (short)h[1],
                                             (short)h[0]));
        } else {
            float dw[4];
            _Pragma("GCC unroll 4")
            for (int r = 0; r < 4; r++) {
                __m256i q = b32_signed(w + r * rb, kind, i, &dw[r]);
                v[r] = dot_u8s8(_mm256_abs_epi8(q), _mm256_sign_epi8(qx, q));
            }
            dwv = _mm_set_ps(dw[3], dw[2], dw[1], dw[0]);
        }
        __m128 dd = _mm_mul_ps(dwv, _mm_set1_ps(dx[4 * (i - i0)]));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum4(v[0], v[1], v[2], v[3])), dd, acc);
    }
    _mm_storeu_ps(y, acc);
}

/* A Q5_0 fifth bit as its code's 16, from the block's qh byte masked to the bit tested
 * (byte l tests bit l % 8): vpsignb of this vector by the masked byte keeps 16 where a bit
 * 0..6 is set, negates -16 to 16 where bit 7 is (the masked byte is then -128) and gives 0
 * where the bit is clear. One op where and + cmpeq + and took three. */
static AI __m256i b32_bit5(void)
{
    return _mm256_set1_epi64x((long long)0xf010101010101010ULL);
}

/* Q4_0's and Q5_0's 32 codes of block i as tile_b32_r8 takes them: the 16 packed bytes
 * broadcast to both halves by the load, the high half shifted by 4 per 32-bit lane (no
 * cross-lane shuffle). The same codes as b32_codes. Q4_0 gives its f16 scale in *h; Q5_0
 * loads its first 8 bytes (scale, then the fifth bits) broadcast to every 64-bit lane, in
 * *dq: the fifth bits (b32_bit5) from there, the scale (int16 lane 0) for b32_scales8. */
static AI __m256i b32_codes8(const char *w, const enum b32_kind kind, int i, uint16_t *h,
                             __m256i *dq)
{
    const __m256i cnt = _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0);
    const uint8_t *qs = kind == B32_Q5_0 ? ((const struct quant_block_q5_0 *)w)[i].qs
                                         : ((const struct quant_block_q4_0 *)w)[i].qs;
    __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    __m256i q = _mm256_and_si256(_mm256_srlv_epi32(raw, cnt), _mm256_set1_epi8(15));
    if (kind == B32_Q5_0) {
        long long head;
        memcpy(&head, (const struct quant_block_q5_0 *)w + i, sizeof head);
        __m256i v = _mm256_set1_epi64x(head);
        *dq = v;
        /* byte l: qh byte l / 8 (block bytes 2..5), tested against bit l % 8 */
        v = _mm256_shuffle_epi8(v, _mm256_set_epi64x(0x0505050505050505LL, 0x0404040404040404LL,
                                                      0x0303030303030303LL,
                                                      0x0202020202020202LL));
        __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        return _mm256_or_si256(q, _mm256_sign_epi8(b32_bit5(), _mm256_and_si256(v, bit)));
    }
    *h = ((const struct quant_block_q4_0 *)w)[i].d;
    return q;
}

/* Eight rows' f16 scales (int16 lane 0 of dq[r]) as int16 lanes 0..7. */
static AI __m128i b32_scales8(const __m256i dq[8])
{
    __m128i d[8];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < 8; r++)
        d[r] = _mm256_castsi256_si128(dq[r]);
    __m128i a = _mm_unpacklo_epi32(_mm_unpacklo_epi16(d[0], d[1]), _mm_unpacklo_epi16(d[2], d[3]));
    __m128i b = _mm_unpacklo_epi32(_mm_unpacklo_epi16(d[4], d[5]), _mm_unpacklo_epi16(d[6], d[7]));
    return _mm_unpacklo_epi64(a, b);
}

/* Four rows' integer sums of one block as tile_b32_r4 forms them, before the zero-point
 * term: lane r (and r + 4) of the result holds part of row r's sum, the two halves adding
 * to it. */
static AI __m256i b32_quad(const char *w, size_t rb, const enum b32_kind kind, int i,
                           __m256i qx, uint16_t *h, float *dw, __m256i *dq)
{
    __m256i v[4];
#ifndef __AVXVNNI__
    if (kind == B32_Q4_0 || kind == B32_Q5_0) {
        /* codes <= 31, |x| <= 128: each int16 of maddubs is at most 7936 in size, so four
         * of them (vphaddw twice) still fit, and one vpmaddwd finishes the four rows */
        _Pragma("GCC unroll 4")
        for (int r = 0; r < 4; r++)
            v[r] = _mm256_maddubs_epi16(b32_codes8(w + r * rb, kind, i, &h[r], &dq[r]), qx);
        return _mm256_madd_epi16(_mm256_hadd_epi16(_mm256_hadd_epi16(v[0], v[1]),
                                                   _mm256_hadd_epi16(v[2], v[3])),
                                 _mm256_set1_epi16(1));
    }
#endif
    _Pragma("GCC unroll 4")
    for (int r = 0; r < 4; r++) {
        if (kind == B32_Q4_0 || kind == B32_Q5_0) {
            v[r] = dot_u8s8(b32_codes8(w + r * rb, kind, i, &h[r], &dq[r]), qx);
        } else {
            __m256i q = b32_signed(w + r * rb, kind, i, &dw[r]);
            v[r] = dot_u8s8(_mm256_abs_epi8(q), _mm256_sign_epi8(qx, q));
        }
    }
    return _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
}

/* Blocks i and i + 1 of one Q5_0 row (b at block i) against the activation blocks' elements
 * 0..15 (x1) and 16..31 (x2), block i in the low 128-bit half, i + 1 in the high: int32 lanes
 * 0..3 hold parts of block i's sum of code * x, lanes 4..7 of block i + 1's, each part a sum
 * of eight products (at most 31 * 128 * 8 = 31744 in size). Each block's low nibbles (elements
 * 0..15) fill one vector's half and its high nibbles (16..31) the other vector's, so the two
 * vectors' products add without mixing the blocks, and one 32-byte load (bytes 0..31 of the
 * two 22-byte blocks) holds both blocks' scales and fifth bits: in *hd, block i's f16 scale
 * is int16 lane 0, block i + 1's int16 lane 11. */
static AI __m256i b32_q5_0_two(const char *b, __m256i x1, __m256i x2, __m256i *hd)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    const size_t bb = sizeof(struct quant_block_q5_0), qo = offsetof(struct quant_block_q5_0, qs);
    __m256i raw = _mm256_loadu2_m128i((const __m128i *)(b + bb + qo), (const __m128i *)(b + qo));
    __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    __m256i h = _mm256_loadu_si256((const __m256i *)b);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i f = b32_bit5();
    /* byte l of the low half: block i's qh byte l / 8 (block bytes 2, 3), of the high half:
     * block i + 1's (bytes 24, 25 of the load, 8 and 9 of the half); then bytes 4, 5 and
     * 10, 11 for elements 16..31 */
    __m256i t0 = _mm256_shuffle_epi8(h, _mm256_set_epi64x(0x0909090909090909LL,
                                                          0x0808080808080808LL,
                                                          0x0303030303030303LL,
                                                          0x0202020202020202LL));
    __m256i t1 = _mm256_shuffle_epi8(h, _mm256_set_epi64x(0x0b0b0b0b0b0b0b0bLL,
                                                          0x0a0a0a0a0a0a0a0aLL,
                                                          0x0505050505050505LL,
                                                          0x0404040404040404LL));
    lo = _mm256_or_si256(lo, _mm256_sign_epi8(f, _mm256_and_si256(t0, bit)));
    hi = _mm256_or_si256(hi, _mm256_sign_epi8(f, _mm256_and_si256(t1, bit)));
    *hd = h;
#ifdef __AVXVNNI__
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, x1), hi,
                                   x2);
#else
    /* each int16 of maddubs is at most 2 * 31 * 128 = 7936 in size: the two add exactly */
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, x1),
                                              _mm256_maddubs_epi16(hi, x2)),
                             _mm256_set1_epi16(1));
#endif
}

/* Eight Q5_0 rows (rb bytes apart from w), blocks i and i + 1 against one activation x:
 * lane r of *s0 is row r's exact integer sum of block i, of *s1 of block i + 1 (the zero
 * point not yet taken off), *d0 and *d1 the rows' f16 scales as floats. b32_q5_0_two per row,
 * then packed to int16 (exact: each part <= 31744 in size), summed in pairs by vpmaddwd and
 * across rows by shuffles: no vphaddw/vphaddd, which cost four times a vpmaddubsw here. */
static AI void b32_q5_0_oct2(const char *w, size_t rb, int i, const char *x, __m256i *s0,
                             __m256i *s1, __m256 *d0, __m256 *d1)
{
    const struct quant_block_q8_0 *a = (const struct quant_block_q8_0 *)x + i;
    __m256i x1 = _mm256_loadu2_m128i((const __m128i *)a[1].qs, (const __m128i *)a[0].qs);
    __m256i x2 =
        _mm256_loadu2_m128i((const __m128i *)(a[1].qs + 16), (const __m128i *)(a[0].qs + 16));
    const char *b = w + (size_t)i * sizeof(struct quant_block_q5_0);
    const __m256i one = _mm256_set1_epi16(1);
    __m256i p[8], hd[8];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < 8; r++)
        p[r] = b32_q5_0_two(b + r * rb, x1, x2, &hd[r]);
    /* [r0 r0 r1 r1 | r0' r0' r1' r1'] (' = block i + 1), then [r0 r1 r2 r3 | r0' r1' r2' r3'] */
    __m256 m01 = _mm256_castsi256_ps(_mm256_madd_epi16(_mm256_packs_epi32(p[0], p[1]), one));
    __m256 m23 = _mm256_castsi256_ps(_mm256_madd_epi16(_mm256_packs_epi32(p[2], p[3]), one));
    __m256 m45 = _mm256_castsi256_ps(_mm256_madd_epi16(_mm256_packs_epi32(p[4], p[5]), one));
    __m256 m67 = _mm256_castsi256_ps(_mm256_madd_epi16(_mm256_packs_epi32(p[6], p[7]), one));
    __m256i lo = _mm256_add_epi32(_mm256_castps_si256(_mm256_shuffle_ps(m01, m23, 0x88)),
                                  _mm256_castps_si256(_mm256_shuffle_ps(m01, m23, 0xdd)));
    __m256i hi = _mm256_add_epi32(_mm256_castps_si256(_mm256_shuffle_ps(m45, m67, 0x88)),
                                  _mm256_castps_si256(_mm256_shuffle_ps(m45, m67, 0xdd)));
    *s0 = _mm256_permute2x128_si256(lo, hi, 0x20);
    *s1 = _mm256_permute2x128_si256(lo, hi, 0x31);
    /* scales: int16 lane 0 (block i) and 11 (block i + 1) of each hd[r] */
    __m256i a01 = _mm256_unpacklo_epi16(hd[0], hd[1]), a23 = _mm256_unpacklo_epi16(hd[2], hd[3]);
    __m256i a45 = _mm256_unpacklo_epi16(hd[4], hd[5]), a67 = _mm256_unpacklo_epi16(hd[6], hd[7]);
    __m256i c0 = _mm256_unpacklo_epi32(a01, a23), c1 = _mm256_unpacklo_epi32(a45, a67);
    __m256i e0 = _mm256_unpackhi_epi32(a01, a23), e1 = _mm256_unpackhi_epi32(a45, a67);
    __m256i dv = _mm256_blend_epi32(_mm256_unpacklo_epi64(c0, c1), _mm256_unpackhi_epi64(e0, e1),
                                    0xf0);
    *d0 = _mm256_cvtph_ps(_mm256_castsi256_si128(dv));
    *d1 = _mm256_cvtph_ps(_mm256_extracti128_si256(dv, 1));
}

/* Eight rows (rb bytes apart) against one activation, lane r for row r, results in
 * y[0..7]: tile_b32_r4's integers and float steps (each lane's chain is the one tile_b32
 * runs), eight rows a float step. zs[i - i0] is z * (sum of x over block i) for Q4_0 and
 * Q5_0. Q5_0 takes two blocks a step (b32_q5_0_oct2), the same sums and float steps. */
static AI void tile_b32_r8(const char *w, size_t rb, const enum b32_kind kind, const char *x,
                           const float *dx, const int32_t *zs, int i0, int i1, int first,
                           float *y)
{
    __m256 acc = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
    const size_t bb = kind == B32_Q8_0 ? sizeof(struct quant_block_q8_0)
                    : kind == B32_Q5_0 ? sizeof(struct quant_block_q5_0)
                                       : sizeof(struct quant_block_q4_0);
    /* the rows 32 ahead, a block's share per step, as tile_b32_r4 (32: bench_kernels at
     * 50257x576 from memory, Q5_0 2.418 CPU ms per call vs 2.760 at 16) */
    const char *pf = w + 32 * rb + (size_t)i0 * 8 * bb;
    int i = i0;
    /* Q5_0: two blocks a step, the float steps in block order; an odd last block as below */
    if (kind == B32_Q5_0)
        for (; i + 2 <= i1; i += 2) {
            for (size_t l = 0; l < 16 * bb; l += 64)
                _mm_prefetch(pf + l, _MM_HINT_T0);
            pf += 16 * bb;
            __m256i s0, s1;
            __m256 d0, d1;
            b32_q5_0_oct2(w, rb, i, x, &s0, &s1, &d0, &d1);
            s0 = _mm256_sub_epi32(s0, _mm256_set1_epi32(zs[i - i0]));
            s1 = _mm256_sub_epi32(s1, _mm256_set1_epi32(zs[i + 1 - i0]));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0),
                                  _mm256_mul_ps(d0, _mm256_set1_ps(dx[4 * (i - i0)])), acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1),
                                  _mm256_mul_ps(d1, _mm256_set1_ps(dx[4 * (i + 1 - i0)])), acc);
        }
    for (; i < i1; i++) {
        for (size_t l = 0; l < 8 * bb; l += 64)
            _mm_prefetch(pf + l, _MM_HINT_T0);
        pf += 8 * bb;
        const struct quant_block_q8_0 *a = (const struct quant_block_q8_0 *)x + i;
        __m256i qx = _mm256_loadu_si256((const __m256i *)a->qs);
        uint16_t h[8];
        float dw[8];
        __m256i dq[8];
        __m256i e0 = b32_quad(w, rb, kind, i, qx, h, dw, dq);
        __m256i e1 = b32_quad(w + 4 * rb, rb, kind, i, qx, h + 4, dw + 4, dq + 4);
        /* [e0 low + e0 high | e1 high + e1 low] */
        __m256i s = _mm256_add_epi32(_mm256_blend_epi32(e0, e1, 0xf0),
                                     _mm256_permute2x128_si256(e0, e1, 0x21));
        __m256 dwv;
        if (kind == B32_Q5_0) {
            s = _mm256_sub_epi32(s, _mm256_set1_epi32(zs[i - i0]));
            dwv = _mm256_cvtph_ps(b32_scales8(dq));
        } else if (kind == B32_Q4_0) {
            s = _mm256_sub_epi32(s, _mm256_set1_epi32(zs[i - i0]));
            dwv = _mm256_cvtph_ps(_mm_set_epi16((short)h[7], (short)h[6], (short)h[5],
                                                (short)h[4], (short)h[3], (short)h[2],
                                                (short)h[1], (short)h[0]));
        } else {
            dwv = _mm256_set_ps(dw[7], dw[6], dw[5], dw[4], dw[3], dw[2], dw[1], dw[0]);
        }
        __m256 dd = _mm256_mul_ps(dwv, _mm256_set1_ps(dx[4 * (i - i0)]));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, acc);
    }
    _mm256_storeu_ps(y, acc);
}

/* The sum of a Q8_0 block's 32 codes. */
static AI int32_t b32_xsum(const struct quant_block_q8_0 *a)
{
    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1),
                                                       _mm256_loadu_si256((const __m256i *)a->qs)),
                                  _mm256_set1_epi16(1));
    return _mm_cvtsi128_si32(hsum8_all(p));
}

/* Rows [rb, re) of a 32-element type: sequences in chunks and blocks in passes of at most
 * B32_KB, each pass's activation scales converted to floats once for every row. */
#define B32_KB 512
#define B32_DXF 8192

static AI void matmul_b32(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                          int y_stride, int rb, int re, const enum b32_kind kind)
{
    static _Thread_local float dxf[B32_DXF] __attribute__((aligned(32)));
    static _Thread_local int32_t zs[B32_KB];
    const int nb = X->n / QUANT_QK, kb = nb < B32_KB ? nb : B32_KB;
    int chunk = kern_seq_chunk(X->stride);
    if (chunk > (B32_DXF / kb) / 4 * 4)
        chunk = (B32_DXF / kb) / 4 * 4;
    for (int s0 = 0; s0 < n_seq; s0 += chunk) {
        int ns = n_seq - s0 < chunk ? n_seq - s0 : chunk;
        const char *x0 = (const char *)X->data + (size_t)s0 * X->stride;
        for (int i0 = 0; i0 < nb; i0 += kb) {
            int i1 = nb - i0 < kb ? nb : i0 + kb;
            for (int s = 0; s < ns; s += 4)
                for (int i = i0; i < i1; i++)
                    for (int k = 0; k < 4; k++)
                        dxf[(s / 4) * 4 * kb + 4 * (i - i0) + k] =
                            s + k < ns ? f16(((const struct quant_block_q8_0 *)(
                                              x0 + (size_t)(s + k) * X->stride))[i].d)
                                       : 0.0f;
            /* four sequences a tile; the rest eight rows a tile, then four, then one by one
             * (no whole tile: no pass over the rows, a batch-1 call would walk them idle) */
            int s4 = ns / 4 * 4;
            for (int r = rb; s4 > 0 && r < re; r++) {
                const char *w = (const char *)W->data + (size_t)r * W->row_bytes;
                float *y = Y + (size_t)s0 * y_stride + r;
                for (int s = 0; s < s4; s += 4)
                    tile_b32(w, kind, x0 + (size_t)s * X->stride, X->stride, dxf + s * kb, i0,
                             i1, 4, i0 == 0, y + (size_t)s * y_stride, (size_t)y_stride);
            }
            for (int s = s4; s < ns; s++) {
                const char *x = x0 + (size_t)s * X->stride;
                const float *dx = dxf + (s / 4) * 4 * kb + s % 4;
                float *y = Y + (size_t)(s0 + s) * y_stride;
                int r = rb;
                if (kind == B32_Q4_0 || kind == B32_Q5_0)
                    for (int i = i0; i < i1; i++)
                        zs[i - i0] = b32_zero(kind) *
                                     b32_xsum((const struct quant_block_q8_0 *)x + i);
                for (; r + 8 <= re; r += 8)
                    tile_b32_r8((const char *)W->data + (size_t)r * W->row_bytes, W->row_bytes,
                                kind, x, dx, zs, i0, i1, i0 == 0, y + r);
                for (; r + 4 <= re; r += 4)
                    tile_b32_r4((const char *)W->data + (size_t)r * W->row_bytes, W->row_bytes,
                                kind, x, dx, i0, i1, i0 == 0, y + r);
                for (; r < re; r++)
                    tile_b32((const char *)W->data + (size_t)r * W->row_bytes, kind, x,
                             X->stride, dx, i0, i1, 1, i0 == 0, y + r, (size_t)y_stride);
            }
        }
    }
}

/* matmul_b32 for each kind, its branches on the kind resolved at compile time. */
#define MATMUL_B32(name, kind)                                                                 \
    static void name(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,  \
                     int y_stride, int rb, int re)                                             \
    {                                                                                          \
        matmul_b32(W, X, n_seq, Y, y_stride, rb, re, kind);                                    \
    }

MATMUL_B32(matmul_q8_0, B32_Q8_0)
MATMUL_B32(matmul_q4_0, B32_Q4_0)
MATMUL_B32(matmul_q5_0, B32_Q5_0)
MATMUL_B32(matmul_iq4_nl, B32_IQ4_NL)

/* A Q4_K/Q5_K block's scales and mins from their 12 packed bytes (q4_k_scales' formulas) with
 * loads and lane-wise operations: r1 bytes 0..3 are scales 0..3, bytes 4..7 mins 0..3, bytes
 * 8..11 mins 4..7; r2 bytes 0..3 scales 4..7. Words u0..u2 of the packed bytes are lined up by
 * where the loads start (the block's head, its scales, 8 bytes on), all inside the block. */
static AI void q4_k_scales_x(const uint8_t *head, const uint8_t *sc, __m128i *r1, __m128i *r2)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)sc);        /* u0 u1 u2 u3 */
    const __m128i vh = _mm_loadu_si128((const __m128i *)head);     /* (d, dmin) u0 u1 u2 */
    const __m128i v8 = _mm_loadu_si128((const __m128i *)(sc + 8)); /* u2 u3 (codes) */
    const __m128i hi2 = _mm_set1_epi8(0x30), low4 = _mm_set1_epi8(15);
    __m128i x = _mm_and_si128(_mm_srlv_epi32(v, _mm_set_epi32(0, 4, 0, 0)),
                              _mm_set_epi32(0, 0x0f0f0f0f, 0x3f3f3f3f, 0x3f3f3f3f));
    *r1 = _mm_or_si128(x, _mm_and_si128(_mm_srli_epi32(vh, 2), _mm_set_epi32(0, 0x30303030, 0, 0)));
    *r2 = _mm_or_si128(_mm_and_si128(v8, low4), _mm_and_si128(_mm_srli_epi32(v, 2), hi2));
}

/* Q4_K and Q5_K: sub-block by sub-block, each (weights, scales) pair used by all S sequences
 * before the next is decoded, so the tile fits AVX2's 16 registers. A sub-block's scale pair
 * (sc, sc) is a broadcast load from a small table (no shuffle, no register held). */
static AI void tile_q45_k(const char *w, const int five, const char *x, size_t xs, int nb,
                          const int S, float *y, size_t ys)
{
    const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct quant_block_q4_k *b4 = (const struct quant_block_q4_k *)w + i;
        const struct quant_block_q5_k *b5 = (const struct quant_block_q5_k *)w + i;
        const uint8_t *qs = five ? b5->qs : b4->qs;
        if (five)
            prefetch_unit(b5 + ROW_PFK, sizeof *b5);
        else
            prefetch_unit(b4 + ROW_PFK, sizeof *b4);
        __m128i r1, r2;
        q4_k_scales_x((const uint8_t *)(five ? (const void *)b5 : (const void *)b4),
                      five ? b5->scales : b4->scales, &r1, &r2);
        /* int32 j of the table: scale j twice as int16 */
        const __m128i pair = _mm_set_epi8(-128, 3, -128, 3, -128, 2, -128, 2, -128, 1, -128, 1,
                                          -128, 0, -128, 0);
        float sct[8]; /* as float only to be broadcast by vbroadcastss, a load alone */
        _mm_storeu_ps(sct, _mm_castsi128_ps(_mm_shuffle_epi8(r1, pair)));
        _mm_storeu_ps(sct + 4, _mm_castsi128_ps(_mm_shuffle_epi8(r2, pair)));
        __asm__("" : "+m"(sct)); /* else GCC takes the pairs from registers by shuffles */
        __m256i hq = five ? _mm256_loadu_si256((const __m256i *)b5->qh) : _mm256_setzero_si256();
        __m256i isum[4], msum[4];
        const struct quant_block_q8_k *a[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            isum[k] = _mm256_setzero_si256();
            a[k] = (const struct quant_block_q8_k *)(x + k * xs) + i;
        }
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i q0 = _mm256_and_si256(raw, low4);
            __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            if (five) {
                __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hq, 2 * c), one);
                __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hq, 2 * c + 1), one);
                q0 = _mm256_or_si256(q0, _mm256_slli_epi16(h0, 4));
                q1 = _mm256_or_si256(q1, _mm256_slli_epi16(h1, 4));
            }
            __m256i s0 = _mm256_castps_si256(_mm256_broadcast_ss(sct + 2 * c));
            __m256i s1 = _mm256_castps_si256(_mm256_broadcast_ss(sct + 2 * c + 1));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m256i x0 = _mm256_loadu_si256((const __m256i *)(a[k]->qs + 64 * c));
                __m256i x1 = _mm256_loadu_si256((const __m256i *)(a[k]->qs + 64 * c + 32));
                isum[k] = dot_u8s8_scaled(dot_u8s8_scaled(isum[k], q0, x0, s0), q1, x1, s1);
            }
        }
        /* bsums k covers 16 elements; sub-block j is bsums 2j and 2j+1 */
        __m256i mv = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
            r1, _mm_set_epi8(11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5, 4, 4)));
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            msum[k] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a[k]->bsums), mv);
        if (S == 1) {
            /* k_step in lane 0: both sums in one reduction (lanes 0 and 2), d and dmin
             * converted together, each times dx */
            __m256i h = _mm256_hadd_epi32(isum[0], msum[0]);
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            __m128 f = _mm_cvtepi32_ps(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1)));
            uint32_t dd;
            memcpy(&dd, five ? (const void *)b5 : (const void *)b4, sizeof dd); /* d, dmin */
            __m128 g = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(a[0]->d));
            acc = _mm_fmadd_ps(f, g, acc);
            acc = _mm_fnmadd_ps(_mm_movehl_ps(f, f), _mm_movehdup_ps(g), acc);
        } else {
            acc = k_step(acc, isum, msum, S, f16(five ? b5->d : b4->d),
                         f16(five ? b5->dmin : b4->dmin), x, xs, i);
        }
    }
    store_s(acc, S, y, ys);
}

/* Superblocks ahead each row of tile_q45_k_r2 and tile_q6_k_r2 prefetches: two rows'
 * interleaved streams need more than one row's 16 (bench_kernels KILN_KERNELS=avx2
 * KILN_BENCH_SEQS=1 from memory, 2048x5632 / 5632x2048: Q4_K GB/s 12.09 / 15.69 at 16,
 * 21.52 / 19.96 at 64; Q6_K CPU ms/call 0.984 / 0.558 at 16, 0.450 / 0.402 at 32, 0.337 /
 * 0.346 at 64, 0.336 / 0.390 at 128). */
#define ROW2_PFK 64

/* q4_k_scales_x on two Q4_K/Q5_K blocks at once, b0 and b0 + rb (scales so bytes into a
 * block): r1, r2 as there, row r in 128-bit lane r; vh each block's first 16 bytes ((d, dmin)
 * first), row r in lane r. */
static AI void q45_k_scales2(const char *b0, size_t rb, size_t so, __m256i *r1, __m256i *r2,
                             __m256i *vh)
{
    const char *b1 = b0 + rb;
    const __m256i v = _mm256_loadu2_m128i((const __m128i *)(b1 + so), (const __m128i *)(b0 + so));
    const __m256i v8 = _mm256_loadu2_m128i((const __m128i *)(b1 + so + 8),
                                           (const __m128i *)(b0 + so + 8));
    *vh = _mm256_loadu2_m128i((const __m128i *)b1, (const __m128i *)b0);
    __m256i t = _mm256_and_si256(
        _mm256_srlv_epi32(v, _mm256_set_epi32(0, 4, 0, 0, 0, 4, 0, 0)),
        _mm256_set_epi32(0, 0x0f0f0f0f, 0x3f3f3f3f, 0x3f3f3f3f, 0, 0x0f0f0f0f, 0x3f3f3f3f,
                         0x3f3f3f3f));
    *r1 = _mm256_or_si256(
        t, _mm256_and_si256(_mm256_srli_epi32(*vh, 2),
                            _mm256_set_epi32(0, 0x30303030, 0, 0, 0, 0x30303030, 0, 0)));
    *r2 = _mm256_or_si256(_mm256_and_si256(v8, _mm256_set1_epi8(15)),
                          _mm256_and_si256(_mm256_srli_epi32(v, 2), _mm256_set1_epi8(0x30)));
}

/* Two Q4_K or Q5_K rows (rb bytes apart) against one sequence, results in y[0] and y[1]:
 * tile_q45_k's integer sums and float steps at S = 1 for each row, the two rows sharing the
 * activation loads, one scale decode (row r in 128-bit lane r), one mins product and one
 * reduction and float step (row r in float lane r). A sub-block's scale vector is one vpshufd
 * of its row's scales (no store and reload, which stalls on store forwarding). The mins
 * product takes the activation's bsums summed per 32-element sub-block (pairs of bsums fit
 * int16), each row's mins against them: the same integer msum. */
static AI void tile_q45_k_r2(const char *w, size_t rb, const int five, const char *x, int nb,
                             float *y)
{
    const size_t bs = five ? sizeof(struct quant_block_q5_k) : sizeof(struct quant_block_q4_k);
    const size_t so = five ? offsetof(struct quant_block_q5_k, scales)
                           : offsetof(struct quant_block_q4_k, scales);
    const size_t qo = five ? offsetof(struct quant_block_q5_k, qs)
                           : offsetof(struct quant_block_q4_k, qs);
    const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    /* each lane's int32 j: its row's scale j as dot_u8s8_pair takes it */
    const __m256i pair = _mm256_broadcastsi128_si256(SCALE_PAIRS_CTL);
    /* each lane: its row's mins 0..7 as int16 */
    const __m256i mins = _mm256_broadcastsi128_si256(_mm_set_epi8(
        -128, 11, -128, 10, -128, 9, -128, 8, -128, 7, -128, 6, -128, 5, -128, 4));
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const char *b0 = w + (size_t)i * bs, *b1 = b0 + rb;
        prefetch_unit(b0 + ROW2_PFK * bs, bs);
        prefetch_unit(b1 + ROW2_PFK * bs, bs);
        const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)x + i;
        __m256i r1, r2, vh;
        q45_k_scales2(b0, rb, so, &r1, &r2, &vh);
        __m256i p1 = _mm256_shuffle_epi8(r1, pair), p2 = _mm256_shuffle_epi8(r2, pair);
        /* sp[r][h]: row r's scales 4h..4h+3 in both lanes */
        const __m256i sp[2][2] = {
            {_mm256_permute2x128_si256(p1, p1, 0x00), _mm256_permute2x128_si256(p2, p2, 0x00)},
            {_mm256_permute2x128_si256(p1, p1, 0x11), _mm256_permute2x128_si256(p2, p2, 0x11)}};
        __m256i hq[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        if (five) {
            hq[0] = _mm256_loadu_si256((const __m256i *)((const struct quant_block_q5_k *)b0)->qh);
            hq[1] = _mm256_loadu_si256((const __m256i *)((const struct quant_block_q5_k *)b1)->qh);
        }
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * c));
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * c + 32));
            _Pragma("GCC unroll 2")
            for (int r = 0; r < 2; r++) {
                __m256i raw = _mm256_loadu_si256((const __m256i *)((r ? b1 : b0) + qo + 32 * c));
                __m256i q0 = _mm256_and_si256(raw, low4);
                __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
                if (five) {
                    __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hq[r], 2 * c), one);
                    __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hq[r], 2 * c + 1), one);
                    q0 = _mm256_or_si256(q0, _mm256_slli_epi16(h0, 4));
                    q1 = _mm256_or_si256(q1, _mm256_slli_epi16(h1, 4));
                }
                __m256i s0 = _mm256_shuffle_epi32(sp[r][c / 2], (2 * (c % 2)) * 0x55);
                __m256i s1 = _mm256_shuffle_epi32(sp[r][c / 2], (2 * (c % 2) + 1) * 0x55);
                isum[r] = dot_u8s8_pair(dot_u8s8_pair(isum[r], q0, x0, s0), q1, x1, s1);
                /* in this order: GCC's reassociated sums keep more registers live than
                 * AVX2 has, and spill */
                __asm__("" : "+x"(isum[r]));
            }
        }
        /* lane 0: row 0's mins 0..3 then row 1's; lane 1: mins 4..7 likewise; against the
         * bsums pairs 0..3 (lane 0) and 4..7 (lane 1), each twice */
        __m256i mv = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(r1, mins),
                                              _MM_SHUFFLE(3, 1, 2, 0));
        __m256i bsv = _mm256_loadu_si256((const __m256i *)a->bsums);
        __m256i msum = _mm256_madd_epi16(mv, _mm256_hadd_epi16(bsv, bsv));
        /* lanes: isum row 0, isum row 1, msum row 0, msum row 1 (exact) */
        __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(isum[0], isum[1]), msum);
        __m128 f = _mm_cvtepi32_ps(_mm_add_epi32(_mm256_castsi256_si128(h),
                                                 _mm256_extracti128_si256(h, 1)));
        /* (d, dmin) of each row as f16 lanes d0 d1 dmin0 dmin1 */
        __m128i dd = _mm_unpacklo_epi32(_mm256_castsi256_si128(vh),
                                        _mm256_extracti128_si256(vh, 1));
        dd = _mm_shufflelo_epi16(dd, _MM_SHUFFLE(3, 1, 2, 0));
        __m128 g = _mm_mul_ps(_mm_cvtph_ps(dd), _mm_set1_ps(a->d));
        acc = _mm_fmadd_ps(f, g, acc);
        acc = _mm_fnmadd_ps(_mm_movehl_ps(f, f), _mm_movehl_ps(g, g), acc);
    }
    _mm_storel_pi((__m64 *)y, acc);
}

/* One Q4_K/Q5_K block's (at b) exact integer sum against activation block a, its sub-block
 * scales folded in, the mins apart: tile_q45_k_r2's sums for one row. sp0, sp1: the row's
 * scales 0..3 and 4..7 as dot_u8s8_pair takes them, in both lanes. */
static AI __m256i q45_k_isum(const char *b, const int five, const struct quant_block_q8_k *a,
                             __m256i sp0, __m256i sp1)
{
    const size_t qo = five ? offsetof(struct quant_block_q5_k, qs)
                           : offsetof(struct quant_block_q4_k, qs);
    const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i hq = _mm256_setzero_si256(), isum = _mm256_setzero_si256();
    if (five)
        hq = _mm256_loadu_si256((const __m256i *)((const struct quant_block_q5_k *)b)->qh);
    _Pragma("GCC unroll 4")
    for (int c = 0; c < 4; c++) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * c));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(a->qs + 64 * c + 32));
        __m256i raw = _mm256_loadu_si256((const __m256i *)(b + qo + 32 * c));
        __m256i q0 = _mm256_and_si256(raw, low4);
        __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        if (five) {
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(hq, 2 * c), one);
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(hq, 2 * c + 1), one);
            q0 = _mm256_or_si256(q0, _mm256_slli_epi16(h0, 4));
            q1 = _mm256_or_si256(q1, _mm256_slli_epi16(h1, 4));
        }
        __m256i sp = c < 2 ? sp0 : sp1;
#ifdef __AVXVNNI__
        /* each int32 of vpdpbusd (four products, codes <= 31, |x| <= 128) fits int16: the
         * two sub-blocks' sums packed into one vector take one vpdpwssd, its scales
         * (sc, sc) for sub-block 2c's words, then 2c + 1's */
        __m256i p = _mm256_packs_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q0, x0),
                                       _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q1, x1));
        const int j = 2 * (c % 2);
        isum = _mm256_dpwssd_avx_epi32(isum, p,
                                       _mm256_shuffle_epi32(sp, _MM_SHUFFLE(j + 1, j + 1, j, j)));
#else
        __m256i s0 = _mm256_shuffle_epi32(sp, (2 * (c % 2)) * 0x55);
        __m256i s1 = _mm256_shuffle_epi32(sp, (2 * (c % 2) + 1) * 0x55);
        isum = dot_u8s8_pair(dot_u8s8_pair(isum, q0, x0, s0), q1, x1, s1);
#endif
        __asm__("" : "+x"(isum)); /* in order, as in tile_q45_k_r2 */
    }
    return isum;
}

/* Four Q4_K or Q5_K rows (rb bytes apart) against one sequence, results in y[0..3]:
 * tile_q45_k_r2's integer sums and float steps (tile_q45_k's at S = 1) for each row. The
 * rows' scales are decoded two rows a vector as there; the four rows' sums are reduced
 * together (lane r for row r) and their float steps are lane-wise. */
static AI void tile_q45_k_r4(const char *w, size_t rb, const int five, const char *x, int nb,
                             float *y)
{
    const size_t bs = five ? sizeof(struct quant_block_q5_k) : sizeof(struct quant_block_q4_k);
    const size_t so = five ? offsetof(struct quant_block_q5_k, scales)
                           : offsetof(struct quant_block_q4_k, scales);
    /* each lane's int32 j: its row's scale j as (sc, sc), as q45_k_isum takes it */
    const __m256i pair = _mm256_broadcastsi128_si256(
        _mm_set_epi8(-128, 3, -128, 3, -128, 2, -128, 2, -128, 1, -128, 1, -128, 0, -128, 0));
    const __m256i mins = _mm256_broadcastsi128_si256(_mm_set_epi8(
        -128, 11, -128, 10, -128, 9, -128, 8, -128, 7, -128, 6, -128, 5, -128, 4));
    /* per dword (d, dmin) of rows 0..3: the four d, then the four dmin */
    const __m128i dsplit = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    struct pf4 pf = pf4_start(w, rb, nb, bs);
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const char *b0 = w + (size_t)i * bs;
        pf4_step(&pf);
        const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)x + i;
        __m256i bsv = _mm256_loadu_si256((const __m256i *)a->bsums);
        bsv = _mm256_hadd_epi16(bsv, bsv);
        __m256i isum[4], msum[2], vh[2];
        _Pragma("GCC unroll 2")
        for (int p = 0; p < 2; p++) {
            __m256i r1, r2;
            q45_k_scales2(b0 + 2 * p * rb, rb, so, &r1, &r2, &vh[p]);
            /* as tile_q45_k_r2: lanes [rows 2p, 2p + 1 mins 0..3 | mins 4..7] */
            msum[p] = _mm256_madd_epi16(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(r1, mins),
                                                                 _MM_SHUFFLE(3, 1, 2, 0)),
                                        bsv);
            __m256i p1 = _mm256_shuffle_epi8(r1, pair), p2 = _mm256_shuffle_epi8(r2, pair);
            _Pragma("GCC unroll 2")
            for (int l = 0; l < 2; l++)
                isum[2 * p + l] = q45_k_isum(b0 + (2 * p + l) * rb, five, a,
                                             _mm256_permute2x128_si256(p1, p1, l ? 0x11 : 0x00),
                                             _mm256_permute2x128_si256(p2, p2, l ? 0x11 : 0x00));
        }
        /* isum of rows 0..3, then msum of rows 0..3 (exact): each half of hi and hm holds
         * part of every row's sum */
        __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(isum[0], isum[1]),
                                       _mm256_hadd_epi32(isum[2], isum[3]));
        __m256i hm = _mm256_hadd_epi32(msum[0], msum[1]);
        __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_permute2x128_si256(hi, hm, 0x20),
                                                       _mm256_permute2x128_si256(hi, hm, 0x31)));
        /* dwords (d, dmin) of rows 0..3 */
        __m256i u = _mm256_unpacklo_epi32(vh[0], vh[1]); /* [h0 h2 . . | h1 h3 . .] */
        __m128i h = _mm_unpacklo_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
        __m256 g = _mm256_mul_ps(_mm256_cvtph_ps(_mm_shuffle_epi8(h, dsplit)),
                                 _mm256_set1_ps(a->d));
        acc = _mm_fmadd_ps(_mm256_castps256_ps128(f), _mm256_castps256_ps128(g), acc);
        acc = _mm_fnmadd_ps(_mm256_extractf128_ps(f, 1), _mm256_extractf128_ps(g, 1), acc);
    }
    _mm_storeu_ps(y, acc);
}

/* Codes 32v..32v+31 of a Q6_K half-block (0..63, stored +32): their low 4 bits from l (ql
 * bytes, low nibbles for v < 2, high ones after), their high 2 bits from qh's bit pair 2v. */
static AI __m256i q6_k_codes(__m256i l, __m256i qh, int v)
{
    const __m256i low4 = _mm256_set1_epi8(15), hi2 = _mm256_set1_epi8(0x30);
    __m256i lo = v < 2 ? _mm256_and_si256(l, low4)
                       : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
    __m256i hb = v == 0 ? _mm256_slli_epi16(qh, 4)
               : v == 1 ? _mm256_slli_epi16(qh, 2)
               : v == 2 ? qh : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hb, hi2));
}

/* Q6_K: each 32-weight vector (two 16-element sub-blocks) and its scales are decoded once
 * and used by all S sequences before the next. */
static AI void tile_q6_k(const struct quant_block_q6_k *w, const char *x, size_t xs, int nb,
                         const int S, float *y, size_t ys)
{
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        prefetch_unit(w + i + ROW_PFK, sizeof *w);
        /* vector v holds sub-blocks 2v (int16 lanes 0-7) and 2v+1 (lanes 8-15) */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[i].scales));
        __m256i isum[4];
        const struct quant_block_q8_k *a[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            a[k] = (const struct quant_block_q8_k *)(x + k * xs) + i;
            /* q was stored +32: start from -32 * sum_k sc_k * bsum_k */
            __m256i bs = _mm256_loadu_si256((const __m256i *)a[k]->bsums);
            isum[k] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
        }
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m256i half = _mm256_permute2x128_si256(sc16, sc16, h ? 0x11 : 0x00);
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            _Pragma("GCC unroll 4")
            for (int v = 0; v < 4; v++) {
                __m256i q = q6_k_codes(v & 1 ? l1 : l0, qh, v);
                __m256i scv = bcast16(half, 2 * v, 2 * v + 1);
                _Pragma("GCC unroll 4")
                for (int k = 0; k < S; k++) {
                    __m256i qx = _mm256_loadu_si256((const __m256i *)(a[k]->qs + 128 * h + 32 * v));
                    isum[k] = dot_u8s8_scaled(isum[k], q, qx, scv);
                }
            }
        }
        acc = k_step(acc, isum, NULL, S, f16(w[i].d), 0.0f, x, xs, i);
    }
    store_s(acc, S, y, ys);
}

/* Two Q6_K rows (rb bytes apart) against one sequence, results in y[0] and y[1]: tile_q6_k's
 * integer sums and float step at S = 1 for each row, the two rows sharing the activation
 * loads, one reduction and one float step (row r in float lane r). */
static AI void tile_q6_k_r2(const char *w, size_t rb, const char *x, int nb, float *y)
{
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct quant_block_q6_k *b[2] = {(const struct quant_block_q6_k *)w + i,
                                               (const struct quant_block_q6_k *)(w + rb) + i};
        prefetch_unit(b[0] + ROW2_PFK, sizeof *b[0]);
        prefetch_unit(b[1] + ROW2_PFK, sizeof *b[1]);
        const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)x + i;
        __m256i bsv = _mm256_loadu_si256((const __m256i *)a->bsums), sc16[2], isum[2];
        _Pragma("GCC unroll 2")
        for (int r = 0; r < 2; r++) {
            /* as tile_q6_k: q was stored +32, so start from -32 * sum_k sc_k * bsum_k */
            sc16[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[r]->scales));
            isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                       _mm256_slli_epi32(_mm256_madd_epi16(bsv, sc16[r]), 5));
        }
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m256i half[2];
            _Pragma("GCC unroll 2")
            for (int r = 0; r < 2; r++)
                half[r] = _mm256_permute2x128_si256(sc16[r], sc16[r], h ? 0x11 : 0x00);
            _Pragma("GCC unroll 4")
            for (int v = 0; v < 4; v++) {
                __m256i qx = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * h + 32 * v));
                _Pragma("GCC unroll 2")
                for (int r = 0; r < 2; r++) {
                    __m256i l = _mm256_loadu_si256(
                        (const __m256i *)(b[r]->ql + 64 * h + 32 * (v & 1)));
                    __m256i qh = _mm256_loadu_si256((const __m256i *)(b[r]->qh + 32 * h));
                    __m256i q = q6_k_codes(l, qh, v);
                    isum[r] = dot_u8s8_pair(isum[r], q, qx, bcast16_pair(half[r], 2 * v, 2 * v + 1));
                    __asm__("" : "+x"(isum[r])); /* in order, as in tile_q45_k_r2 */
                }
            }
        }
        /* lanes [A01 + A45, A23 + A67, B01 + B45, B23 + B67], then [A, B, A, B] (exact) */
        __m256i t = _mm256_hadd_epi32(isum[0], isum[1]);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        __m128 f = _mm_cvtepi32_ps(_mm_hadd_epi32(s, s));
        int32_t u[2]; /* scales 14 and 15, then d, of each row: the block's last 4 bytes */
        _Pragma("GCC unroll 2")
        for (int r = 0; r < 2; r++)
            memcpy(&u[r], (const char *)b[r] + offsetof(struct quant_block_q6_k, d) - 2, 4);
        __m128i dd = _mm_unpacklo_epi32(_mm_cvtsi32_si128(u[0]), _mm_cvtsi32_si128(u[1]));
        dd = _mm_shufflelo_epi16(dd, _MM_SHUFFLE(3, 1, 3, 1));
        acc = _mm_fmadd_ps(f, _mm_mul_ps(_mm_cvtph_ps(dd), _mm_set1_ps(a->d)), acc);
    }
    _mm_storel_pi((__m64 *)y, acc);
}

#ifdef __AVXVNNI__
/* The scales of two Q6_K code vectors' vpdpbusd sums packed together (vpackssdw of vectors v
 * and v + 1 of a half-block): from half (the half-block's 8 int16 scales in both 128-bit
 * lanes), int16 lanes 0-3 of 128-bit lane 0 scale 2v, 4-7 scale 2v + 2; of lane 1, 2v + 1
 * and 2v + 3. One byte shuffle. */
static AI __m256i bcast16_quad(__m256i half, int v)
{
#define Q16(s) ((long long)(0x0001000100010001ULL * (unsigned)((2 * (s) + 1) << 8 | 2 * (s))))
    return _mm256_shuffle_epi8(half, _mm256_set_epi64x(Q16(2 * v + 3), Q16(2 * v + 1),
                                                       Q16(2 * v + 2), Q16(2 * v)));
#undef Q16
}
#endif

/* One Q6_K block's (b) exact integer sum against activation block a (bsv its bsums):
 * tile_q6_k_r2's sums for one row. */
static AI __m256i q6_k_isum(const struct quant_block_q6_k *b, const struct quant_block_q8_k *a,
                            __m256i bsv)
{
    /* as tile_q6_k: q was stored +32, so start from -32 * sum_k sc_k * bsum_k */
    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(),
                                    _mm256_slli_epi32(_mm256_madd_epi16(bsv, sc16), 5));
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        __m256i half = _mm256_permute2x128_si256(sc16, sc16, h ? 0x11 : 0x00);
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
#ifdef __AVXVNNI__
        /* each int32 of vpdpbusd (four products, codes <= 63, |x| <= 128) fits int16: two
         * vectors' sums packed into one take one vpdpwssd, int16 lanes 0-3 of each 128-bit
         * lane from vector v, 4-7 from v + 1, each against its sub-block's scale */
        _Pragma("GCC unroll 2")
        for (int v = 0; v < 4; v += 2) {
            __m256i p[2];
            _Pragma("GCC unroll 2")
            for (int e = 0; e < 2; e++) {
                const int u = v + e;
                __m256i qx = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * h + 32 * u));
                __m256i l = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (u & 1)));
                p[e] = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q6_k_codes(l, qh, u), qx);
            }
            isum = _mm256_dpwssd_avx_epi32(isum, _mm256_packs_epi32(p[0], p[1]),
                                           bcast16_quad(half, v));
            __asm__("" : "+x"(isum));
        }
#else
        _Pragma("GCC unroll 4")
        for (int v = 0; v < 4; v++) {
            __m256i qx = _mm256_loadu_si256((const __m256i *)(a->qs + 128 * h + 32 * v));
            __m256i l = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32 * (v & 1)));
            isum = dot_u8s8_pair(isum, q6_k_codes(l, qh, v), qx,
                                 bcast16_pair(half, 2 * v, 2 * v + 1));
            __asm__("" : "+x"(isum)); /* in order, as in tile_q45_k_r2 */
        }
#endif
    }
    return isum;
}

/* Four Q6_K rows (rb bytes apart) against one sequence, results in y[0..3]: tile_q6_k_r2's
 * integer sums and float step (tile_q6_k's at S = 1) for each row, the four rows' sums
 * reduced together (lane r for row r) and their float steps lane-wise. */
static AI void tile_q6_k_r4(const char *w, size_t rb, const char *x, int nb, float *y)
{
    struct pf4 pf = pf4_start(w, rb, nb, sizeof(struct quant_block_q6_k));
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        const struct quant_block_q8_k *a = (const struct quant_block_q8_k *)x + i;
        const __m256i bsv = _mm256_loadu_si256((const __m256i *)a->bsums);
        __m256i isum[4];
        uint64_t d4 = 0;
        pf4_step(&pf);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < 4; r++) {
            const struct quant_block_q6_k *b = (const struct quant_block_q6_k *)(w + r * rb) + i;
            isum[r] = q6_k_isum(b, a, bsv);
            d4 |= (uint64_t)b->d << 16 * r;
        }
        __m128 f = _mm_cvtepi32_ps(hsum4(isum[0], isum[1], isum[2], isum[3]));
        __m128 g = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)d4)), _mm_set1_ps(a->d));
        acc = _mm_fmadd_ps(f, g, acc);
    }
    _mm_storeu_ps(y, acc);
}

/* IQ4_XS: per sub-block of 32, the table lookup gives signed levels; the sign moves onto x.
 * maddubs + madd by the scale in both sets (the four-product sums can exceed vpdpwssd's
 * int16). */
static AI void tile_iq4_xs(const struct quant_block_iq4_xs *w, const char *x, size_t xs,
                           int nb, const int S, float *y, size_t ys)
{
    const __m256i table = iq4_table();
    __m128 acc = _mm_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i isum[4];
        const struct quant_block_q8_k *a[4];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            isum[k] = _mm256_setzero_si256();
            a[k] = (const struct quant_block_q8_k *)(x + k * xs) + i;
        }
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            __m256i q = _mm256_shuffle_epi8(table, nibbles(w[i].qs + 16 * j));
            __m256i aq = _mm256_abs_epi8(q);
            int ls = (((w[i].scales_l[j / 2] >> (4 * (j % 2))) & 15) |
                      ((w[i].scales_h >> (2 * j)) & 3) << 4) - 32;
            __m256i scv = _mm256_set1_epi16((short)ls);
            _Pragma("GCC unroll 4")
            for (int k = 0; k < S; k++) {
                __m256i qx = _mm256_loadu_si256((const __m256i *)(a[k]->qs + 32 * j));
                __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(qx, q));
                isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, scv));
            }
        }
        acc = k_step(acc, isum, NULL, S, f16(w[i].d), 0.0f, x, xs, i);
    }
    store_s(acc, S, y, ys);
}

/* Float weights (F32, F16, BF16) against F32 activations: 16 elements a step in two
 * chains, then 8, then a scalar tail. */
static AI __m256 load_w(const void *w, enum ggml_type t, int i)
{
    if (t == GGML_TYPE_F32)
        return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (t == GGML_TYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static AI float load_w1(const void *w, enum ggml_type t, int i)
{
    if (t == GGML_TYPE_F32)
        return ((const float *)w)[i];
    if (t == GGML_TYPE_F16)
        return f16(((const uint16_t *)w)[i]);
    return quant_bf16_to_f32(((const uint16_t *)w)[i]);
}

static AI void tile_float(const void *w, enum ggml_type t, const char *x, size_t xs, int n,
                          const int S, float *y, size_t ys)
{
    __m256 acc0[4], acc1[4];
    int i = 0;
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++)
        acc0[k] = acc1[k] = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = load_w(w, t, i), w1 = load_w(w, t, i + 8);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++) {
            const float *xf = (const float *)(x + k * xs);
            acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xf + i), acc0[k]);
            acc1[k] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xf + i + 8), acc1[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 w0 = load_w(w, t, i);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < S; k++)
            acc0[k] = _mm256_fmadd_ps(w0, _mm256_loadu_ps((const float *)(x + k * xs) + i),
                                      acc0[k]);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < S; k++) {
        const float *xf = (const float *)(x + k * xs);
        float s = hsum8(_mm256_add_ps(acc0[k], acc1[k]));
        for (int j = i; j < n; j++)
            s += load_w1(w, t, j) * xf[j];
        y[k * ys] = s;
    }
}

/* One row against sequences [0, ns): tiles of 4, then 1 at a time. */
#define ROW_FN(name, call)                                                                     \
    static void name(const void *w, const char *x, size_t xs, int n, int ns, float *y,         \
                     size_t ys)                                                                \
    {                                                                                          \
        int s = 0;                                                                             \
        for (; s + 4 <= ns; s += 4)                                                            \
            call(w, x + s * xs, xs, n, 4, y + s * ys, ys);                                     \
        for (; s < ns; s++)                                                                    \
            call(w, x + s * xs, xs, n, 1, y + s * ys, ys);                                     \
    }

#define CALL_Q4_K(w, x, xs, n, S, y, ys)   tile_q45_k(w, 0, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_Q5_K(w, x, xs, n, S, y, ys)   tile_q45_k(w, 1, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_Q6_K(w, x, xs, n, S, y, ys)   tile_q6_k(w, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_IQ4_XS(w, x, xs, n, S, y, ys) tile_iq4_xs(w, x, xs, (n) / QUANT_QK_K, S, y, ys)
#define CALL_F32(w, x, xs, n, S, y, ys)  tile_float(w, GGML_TYPE_F32, x, xs, n, S, y, ys)
#define CALL_F16(w, x, xs, n, S, y, ys)  tile_float(w, GGML_TYPE_F16, x, xs, n, S, y, ys)
#define CALL_BF16(w, x, xs, n, S, y, ys) tile_float(w, GGML_TYPE_BF16, x, xs, n, S, y, ys)

ROW_FN(row_q4_k, CALL_Q4_K)
ROW_FN(row_q5_k, CALL_Q5_K)
ROW_FN(row_q6_k, CALL_Q6_K)
ROW_FN(row_iq4_xs, CALL_IQ4_XS)
ROW_FN(row_f32, CALL_F32)
ROW_FN(row_f16, CALL_F16)
ROW_FN(row_bf16, CALL_BF16)

typedef kern_row_fn row_fn;

/* Two rows (rb bytes apart) against one sequence of n elements, results in y[0], y[1]: the
 * bits row_fn gives each row alone. The four-row functions take the same type. */
typedef void (*row2_fn)(const char *w, size_t rb, const char *x, int n, float *y);

static void row2_q4_k(const char *w, size_t rb, const char *x, int n, float *y)
{
    tile_q45_k_r2(w, rb, 0, x, n / QUANT_QK_K, y);
}

static void row2_q5_k(const char *w, size_t rb, const char *x, int n, float *y)
{
    tile_q45_k_r2(w, rb, 1, x, n / QUANT_QK_K, y);
}

static void row2_q6_k(const char *w, size_t rb, const char *x, int n, float *y)
{
    tile_q6_k_r2(w, rb, x, n / QUANT_QK_K, y);
}

/* Four rows (rb bytes apart) likewise, results in y[0..3]. */
static void row4_q4_k(const char *w, size_t rb, const char *x, int n, float *y)
{
    tile_q45_k_r4(w, rb, 0, x, n / QUANT_QK_K, y);
}

static void row4_q5_k(const char *w, size_t rb, const char *x, int n, float *y)
{
    tile_q45_k_r4(w, rb, 1, x, n / QUANT_QK_K, y);
}

static void row4_q6_k(const char *w, size_t rb, const char *x, int n, float *y)
{
    tile_q6_k_r4(w, rb, x, n / QUANT_QK_K, y);
}

/* Calls of this many sequences up to 16 take gemm_avx2_cols.c (the sequence as the lane)
 * where it has the type: the same bits as the tiles here and in gemm_avx2.c. */
#define COLS_MIN 8

static int cols(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                int y_stride, int row_begin, int row_end)
{
    if (n_seq < COLS_MIN || n_seq > 16)
        return -1;
#ifdef __AVXVNNI__
    return kern_gemm_avxvnni_cols(W, X, n_seq, Y, y_stride, row_begin, row_end);
#else
    return kern_gemm_avx2_cols(W, X, n_seq, Y, y_stride, row_begin, row_end);
#endif
}

void KSET(matmul)(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                  int y_stride, int row_begin, int row_end)
{
    row_fn f;
    row2_fn f2 = NULL, f4 = NULL;
    if (cols(W, X, n_seq, Y, y_stride, row_begin, row_end) == 0)
        return;
    switch (W->type) {
    case GGML_TYPE_Q8_0:
        matmul_q8_0(W, X, n_seq, Y, y_stride, row_begin, row_end);
        return;
    case GGML_TYPE_Q4_0:
        matmul_q4_0(W, X, n_seq, Y, y_stride, row_begin, row_end);
        return;
    case GGML_TYPE_Q5_0:
        matmul_q5_0(W, X, n_seq, Y, y_stride, row_begin, row_end);
        return;
    case GGML_TYPE_IQ4_NL:
        matmul_iq4_nl(W, X, n_seq, Y, y_stride, row_begin, row_end);
        return;
    case GGML_TYPE_Q4_K:
        f = row_q4_k, f2 = row2_q4_k, f4 = row4_q4_k;
        break;
    case GGML_TYPE_Q5_K:
        f = row_q5_k, f2 = row2_q5_k, f4 = row4_q5_k;
        break;
    case GGML_TYPE_Q6_K:
        f = row_q6_k, f2 = row2_q6_k, f4 = row4_q6_k;
        break;
    case GGML_TYPE_IQ4_XS: f = row_iq4_xs; break;
    case GGML_TYPE_F32:
        f = row_f32;
        break;
    case GGML_TYPE_F16:
        f = row_f16;
        break;
    case GGML_TYPE_BF16:
        f = row_bf16;
        break;
    default:
        if (!(f = KSET(ext_row)(W->type)))
            __builtin_trap(); /* an unsupported type got past model load */
    }
    const char *wd = W->data, *xd = X->data;
    int chunk = kern_seq_chunk(X->stride);
    for (int s0 = 0; s0 < n_seq; s0 += chunk) {
        int ns = n_seq - s0 < chunk ? n_seq - s0 : chunk;
        /* with f2, the sequences past the last whole tile of 4 go one at a time, four rows a
         * call, then two, then one */
        int n4 = f2 ? ns / 4 * 4 : ns;
        if (n4)
            for (int r = row_begin; r < row_end; r++)
                f(wd + (size_t)r * W->row_bytes, xd + (size_t)s0 * X->stride, X->stride, X->n,
                  n4, Y + (size_t)s0 * y_stride + r, (size_t)y_stride);
        for (int s = n4; s < ns; s++) {
            const char *x = xd + (size_t)(s0 + s) * X->stride;
            float *y = Y + (size_t)(s0 + s) * y_stride;
            int r = row_begin;
            for (; r + 4 <= row_end; r += 4)
                f4(wd + (size_t)r * W->row_bytes, W->row_bytes, x, X->n, y + r);
            for (; r + 2 <= row_end; r += 2)
                f2(wd + (size_t)r * W->row_bytes, W->row_bytes, x, X->n, y + r);
            for (; r < row_end; r++)
                f(wd + (size_t)r * W->row_bytes, x, X->stride, X->n, 1, y + r,
                  (size_t)y_stride);
        }
    }
}

/* ---- float kernels (built once, in the avx2 set; the avxvnni set shares them) ---- */
#ifndef __AVXVNNI__

float kern_avx2_dot_f32(const float *a, const float *b, int n)
{
    float r;
    tile_float(a, GGML_TYPE_F32, (const char *)b, 0, n, 1, &r, 0);
    return r;
}

float kern_avx2_dot_f16(const uint16_t *a, const float *b, int n)
{
    float r;
    tile_float(a, GGML_TYPE_F16, (const char *)b, 0, n, 1, &r, 0);
    return r;
}

void kern_avx2_axpy_f32(float *restrict y, float alpha, const float *restrict x, int n)
{
    __m256 a = _mm256_set1_ps(alpha);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += alpha * x[i];
}

void kern_avx2_axpy_f16(float *restrict y, float alpha, const uint16_t *restrict x, int n)
{
    __m256 a = _mm256_set1_ps(alpha);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, v, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++)
        y[i] += alpha * f16(x[i]);
}

void kern_avx2_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    float ss = kern_avx2_dot_f32(x, x, n);
    __m256 r = _mm256_set1_ps(1.0f / sqrtf(ss / (float)n + eps));
    float rs = 1.0f / sqrtf(ss / (float)n + eps);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), r),
                                                _mm256_loadu_ps(w + i)));
    for (; i < n; i++)
        out[i] = x[i] * rs * w[i];
}

void kern_avx2_softmax(float *x, int n)
{
    if (n <= 0)
        return;
    float mx = x[0], sum = 0.0f;
    for (int i = 1; i < n; i++)
        mx = fmaxf(mx, x[i]);
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    __m256 inv = _mm256_set1_ps(1.0f / sum);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++)
        x[i] *= 1.0f / sum;
}

/* silu(g) * up = g / (1 + e^-g) * up, with t = e^-|g| (vexp.h, which takes x <= 0): g / (1 + t)
 * for g >= 0, g t / (1 + t) below. */
void kern_avx2_swiglu(float *out, const float *gate, const float *up, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 t = vexp8(_mm256_or_ps(g, _mm256_set1_ps(-0.0f)));
        __m256 num = _mm256_blendv_ps(g, _mm256_mul_ps(g, t), g);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), t)),
                                                _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) {
        float g = gate[i], t = vexp_f32(-fabsf(g));
        out[i] = (g < 0.0f ? g * t : g) / (1.0f + t) * up[i];
    }
}

void kern_avx2_add(float *restrict y, const float *restrict x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] += x[i];
}

#endif

static void avx2_gemm(const struct kern_mat *W, const struct kern_act *X, int n_seq, float *Y,
                      int y_stride, int row_begin, int row_end)
{
    if (cols(W, X, n_seq, Y, y_stride, row_begin, row_end) == 0)
        return;
#ifdef __AVXVNNI__
    if (kern_gemm_avxvnni(W, X, n_seq, Y, y_stride, row_begin, row_end) < 0)
#else
    if (kern_gemm_avx2(W, X, n_seq, Y, y_stride, row_begin, row_end) < 0)
#endif
        KSET(matmul)(W, X, n_seq, Y, y_stride, row_begin, row_end);
}

/* gemm and matmul take one float chain per unit for every type (f88180e). */
static int avx2_rows_agree(enum ggml_type wtype)
{
    (void)wtype;
    return 1;
}

static const struct kern_ops ops = {
    .name = KSET_NAME,
    .matmul = KSET(matmul),
    .gemm = avx2_gemm,
    .rows_agree = avx2_rows_agree,
    .dot_f32 = kern_avx2_dot_f32,
    .dot_f16 = kern_avx2_dot_f16,
    .axpy_f32 = kern_avx2_axpy_f32,
    .axpy_f16 = kern_avx2_axpy_f16,
    .rmsnorm = kern_avx2_rmsnorm,
    .softmax = kern_avx2_softmax,
    .swiglu = kern_avx2_swiglu,
    .add = kern_avx2_add,
    .quantize_act = kern_avx2_quantize_act,
};

const struct kern_ops *KSET_TABLE(void)
{
    return &ops;
}
