/* The arithmetic of attn.c's tiles as small matrix products, lane = query: a tile's queries
 * (up to ATTN_LANES: the rows of one sequence times the query heads of one KV head) sit side
 * by side in one vector, so scores, softmax and the value sums run over all of them at once
 * with no horizontal sums.
 *
 * Layouts (ATTN_LANES floats a row; lanes past the tile's queries hold anything finite):
 *   Qt (hd rows)  query lane j's element d at Qt[d * ATTN_LANES + j]
 *   S  (n rows)   the score, then the weight, of position t for lane j at S[t * ATTN_LANES + j]
 *   Ot (hd rows)  lane j's output element d
 *   kf, vf        a cache block's keys or values as floats, KV_BLOCK rows of hd
 *
 * Every lane's result is a fixed sequence of float operations on that lane's own values:
 * q.k sums one FMA after another over d = 0..hd-1, then times the scale; the softmax's maximum
 * over the rows; exp by one polynomial (attn_exp); the sum of the weights one add after
 * another over the rows; the value sums one FMA after another over the rows. So a query's
 * bits do not depend on which other queries share its tile or which lanes are used, and the
 * scalar twin and the AVX2 and AVX-512 sets give the same bits (tested).
 *
 * A decode step's tile holds few queries (a KV head's query heads: 3 for SmolLM, 8 for
 * TinyLlama), so most of the lanes above would idle while every key and value is converted
 * to floats for them. Tiles of at most ATTN_FEW queries take the few-query forms instead,
 * which read the cache's F16 rows where they lie and keep the scores query-major:
 * scores_f16 puts 8 or 16 keys side by side in the lanes (each lane sums its own key over d,
 * in order, so the F16 rows are transposed on the way in), softmax_q a query's positions
 * (its sum of weights added one after another over the positions, as above), values_f16 the
 * elements d of one query's output. Each sum is still the same operations in the same order,
 * so the same bits. */
#ifndef ATTN_KERN_H
#define ATTN_KERN_H

#include <stdint.h>

#define ATTN_LANES 16
#define ATTN_FEW 8 /* tiles of at most this many queries take scores_f16 and values_f16 */

struct attn_kern {
    const char *name;
    /* S[(u - u0) * ATTN_LANES + j] = scale * (q_j . k_u) for u in [u0, u1) (u1 <= KV_BLOCK),
     * for the first 8 * nv lanes (nv 1 or 2). kf holds KV_BLOCK rows; rows outside [u0, u1)
     * are read but must be finite. */
    void (*scores)(float *S, const float *Qt, const float *kf, int u0, int u1, int hd, int nv,
                   float scale);
    /* Softmax of each lane over rows [0, n) of S (a lane's masked rows hold -INFINITY and
     * get weight 0; a lane with every row masked gets 0s), the weights rounded to F16. */
    void (*softmax)(float *S, int n, int nv);
    /* Ot[d * ATTN_LANES + j] += sum over u in [u0, u1), in order, of
     * S[(u - u0) * ATTN_LANES + j] * vf[u * hd + d]. */
    void (*values)(float *Ot, const float *S, const float *vf, int u0, int u1, int hd, int nv);
    /* The few-query forms, for tiles of nq <= ATTN_FEW queries, on query-major scores: query
     * j's score, then weight, of the tile's position t at Sq[j * ns + t].
     * scores_f16: Sq[j * ns + u - u0] = scale * (q_j . k_u) for u in [u0, u1) (u1 <= KV_BLOCK),
     * the keys read as F16 where they lie (key u at k[u * stride]; only [u0, u1) read). */
    void (*scores_f16)(float *Sq, int ns, const float *Qt, const uint16_t *k, int stride, int u0,
                       int u1, int hd, int nq, float scale);
    /* softmax for each row j < nq of Sq over [0, n). */
    void (*softmax_q)(float *Sq, int ns, int n, int nq);
    /* O[j * hd + d] += sum over u in [u0, u1), in order, of Sq[j * ns + u - u0] * v_u[d] (v_u at
     * v[u * stride], F16), for j < nq. */
    void (*values_f16)(float *O, const float *Sq, int ns, const uint16_t *v, int stride, int u0,
                       int u1, int hd, int nq);
    /* dst[r * hd + d] = src[r * stride + d] (F16 to float), rows [0, n). */
    void (*rows_f32)(float *dst, const uint16_t *src, int stride, int n, int hd);
    /* x[i] = f32(f16(x[i])), round to nearest even. */
    void (*round16)(float *x, int n);
};

extern const struct attn_kern attn_kern_scalar;
#if defined(__x86_64__)
extern const struct attn_kern attn_kern_avx2, attn_kern_avx512;
#endif

/* The set for a kernel set's name ("scalar", "avx2", "avxvnni", "avx512", "amx"): the amx
 * kernel set requires the avx512 set's CPU features, so it takes the avx512 attention. */
const struct attn_kern *attn_kern_for(const char *kernels);

/* exp(x) for x <= 0 (0 below -87), the polynomial every set evaluates in the same order. */
float attn_exp(float x);

#endif
