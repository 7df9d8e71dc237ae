/* Attention over the paged KV cache, tiled: one task takes a run of consecutive rows of one
 * sequence (a prefill's rows) and the query heads that share one KV head, and reads each key
 * and value once for all of them, converted from F16 once, instead of once per row and head.
 * On a long history (turn 10 of a chat: 164 new rows over 1,700 cached positions) this is
 * where a prefill's time goes.
 *
 * Every query's result depends on its own query and its own positions only, never on the
 * tile it was computed in: each q.k sum runs the same 8-lane FMA chain and the same fixed
 * reduction tree whether 1, 4 or 8 queries are reduced together; each softmax covers the
 * query's own range; each value sum runs over the tile's positions in order, with weight 0
 * outside the query's range (which adds exactly nothing). So a prefill chunked or batched
 * differently, or the same row decoded alone, gives the same bits. */
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "model_llama_impl.h"
#include "threadpool.h"

#define QMAX ATTN_QMAX

/* The rows of this forward grouped into tiles: runs of consecutive positions of one slot,
 * at most rows_per_tile rows each. */
static int make_tiles(struct llama *L, int n, int rows_per_tile)
{
    int t = 0;
    for (int b = 0; b < n; t++) {
        int e = b + 1;
        while (e < n && e - b < rows_per_tile && L->row_slot[e] == L->row_slot[b] &&
               L->row_pos[e] == L->row_pos[e - 1] + 1)
            e++;
        L->tile_r0[t] = b;
        L->tile_n[t] = e - b;
        b = e;
    }
    return t;
}

#if defined(__x86_64__)
/* x[i] = f32(f16(x[i])), as model_llama.c's round_f16 (kept apart: this file is built for
 * AVX2 only through target attributes). */
__attribute__((target("avx2,fma,f16c"))) static void round16(float *x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) {
        __m128 v = _mm_set_ss(x[i]);
        x[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
    }
}

/* F16 to F32, n values (the tail one at a time). */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline void to_f32(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(src[i])));
}

/* The sums of the 8 lanes of a[0..7], lane i of the result from a[i], all by one tree:
 * ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)). */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m256 hsum8(const __m256 *a)
{
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* The same tree for 4 (lanes 0-3 of the result). */
__attribute__((target("avx2,fma,f16c"), always_inline)) static inline __m128 hsum4(const __m256 *a)
{
    __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

#define AVX2 __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

/* NG (4 or 8, a constant once inlined) queries q against key k: the sums into r, by the
 * tree above whatever NG is. */
AVX2 void dots(float *r, const float *const *q, const float *k, int nc, const int NG)
{
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < NG; j++)
        acc[j] = _mm256_setzero_ps();
    for (int c = 0; c < nc; c++) {
        __m256 kv = _mm256_loadu_ps(k + 8 * c);
    #pragma GCC unroll 8
    for (int j = 0; j < NG; j++)
            acc[j] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[j] + 8 * c), acc[j]);
    }
    if (NG == 8)
        _mm256_storeu_ps(r, hsum8(acc));
    else
        _mm_storeu_ps(r, hsum4(acc));
}

/* s[j][t - lo] = scale * q_j . k_t for t in [a, e) (keys kf, rows of hd floats from a);
 * queries past nq in a group of 4 or 8 read zero. */
__attribute__((target("avx2,fma,f16c"))) static void scores(float *const *s, float *const *q, int nq,
                                                             const float *zero, const float *kf,
                                                             int a, int e, int lo, int hd,
                                                             float scale)
{
    int nc = hd / 8;
    for (int j0 = 0, ng; j0 < nq; j0 += ng) {
        const float *qq[8];
        float r[8];
        int real;
        ng = nq - j0 > 4 ? 8 : 4;
        real = nq - j0 < ng ? nq - j0 : ng;
        for (int j = 0; j < ng; j++)
            qq[j] = j < real ? q[j0 + j] : zero;
        for (int t = a; t < e; t++) {
            const float *k = kf + (size_t)(t - a) * hd;
            if (ng == 8)
                dots(r, qq, k, nc, 8);
            else
                dots(r, qq, k, nc, 4);
            for (int j = 0; j < real; j++) {
                float v = r[j];
                for (int d = nc * 8; d < hd; d++)
                    v += k[d] * qq[j][d];
                s[j0 + j][t - lo] = v * scale;
            }
        }
    }
}

/* out_j += w_j[t - lo] * v_t for t in [a, e), in order of t, NG (constant) queries. */
AVX2 void wsum(float *const *out, float *const *w, const float *vf, int a, int e, int lo,
               int hd, int nc, const int NG)
{
    for (int c = 0; c < nc; c++) {
        __m256 acc[8];
    #pragma GCC unroll 8
    for (int j = 0; j < NG; j++)
            acc[j] = _mm256_loadu_ps(out[j] + 8 * c);
        for (int t = a; t < e; t++) {
            __m256 v = _mm256_loadu_ps(vf + (size_t)(t - a) * hd + 8 * c);
        #pragma GCC unroll 8
    for (int j = 0; j < NG; j++)
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(w[j][t - lo]), v, acc[j]);
        }
    #pragma GCC unroll 8
    for (int j = 0; j < NG; j++)
            _mm256_storeu_ps(out[j] + 8 * c, acc[j]);
    }
}

/* out_j += sum over t in [a, e) of w_j[t - lo] * v_t, in order of t. */
__attribute__((target("avx2,fma,f16c"))) static void values(float *const *out, float *const *w,
                                                             int nq, const float *vf, int a, int e,
                                                             int lo, int hd)
{
    int nc = hd / 8;
    for (int j0 = 0; j0 < nq;) {
        int ng = nq - j0 >= 8 ? 8 : nq - j0 >= 4 ? 4 : nq - j0 >= 2 ? 2 : 1;
        switch (ng) {
        case 8: wsum(out + j0, w + j0, vf, a, e, lo, hd, nc, 8); break;
        case 4: wsum(out + j0, w + j0, vf, a, e, lo, hd, nc, 4); break;
        case 2: wsum(out + j0, w + j0, vf, a, e, lo, hd, nc, 2); break;
        default: wsum(out + j0, w + j0, vf, a, e, lo, hd, nc, 1); break;
        }
        j0 += ng;
    }
    for (int d = nc * 8; d < hd; d++)
        for (int j = 0; j < nq; j++)
            for (int t = a; t < e; t++)
                out[j][d] += w[j][t - lo] * vf[(size_t)(t - a) * hd + d];
}

/* x = softmax(x) over n: the maximum by vectors (exact in any order), then exp and the sum
 * in order, then the scaling. */
__attribute__((target("avx2,fma,f16c"))) static void softmax(float *x, int n)
{
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    float mx = -INFINITY, sum = 0.0f, m4[8], inv;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + i));
    _mm256_storeu_ps(m4, m8);
    for (int k = 0; k < 8; k++)
        mx = m4[k] > mx ? m4[k] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    inv = 1.0f / sum;
    __m256 v = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), v));
    for (; i < n; i++)
        x[i] *= inv;
}

/* Task: tile (task / groups), KV head and its query heads [h0, h0 + nh). */
__attribute__((target("avx2,fma,f16c"))) static void tile_task(void *ctx, int task, int thread)
{
    struct llama *L = ctx;
    const struct llama_config *c = &L->c;
    const struct llama_layer *ly = &L->layers[L->layer];
    int per_kv = c->n_heads / c->n_kv_heads, groups = c->n_kv_heads * L->attn_hchunks;
    int tile = task / groups, g = task % groups, kvh = g / L->attn_hchunks;
    int hc = g % L->attn_hchunks, h0 = kvh * per_kv + hc * L->attn_nh;
    int nh = per_kv - hc * L->attn_nh < L->attn_nh ? per_kv - hc * L->attn_nh : L->attn_nh;
    int r0 = L->tile_r0[tile], nr = L->tile_n[tile], hd = c->head_dim, nq = nr * nh;
    const uint32_t *tab = kv_cache_table(L->kvc, L->row_slot[r0]);
    size_t head = (size_t)kvh * hd, kv_dim = (size_t)c->kv_dim;
    float *scratch = L->attn_scratch + (size_t)thread * L->attn_scratch_per;
    float *kf = scratch; /* (KV_BLOCK, hd) one block's keys or values as floats */
    float *zero = kf + (size_t)KV_BLOCK * hd; /* (hd) */
    float *sbase = zero + hd;
    float *q[QMAX], *s[QMAX], *o[QMAX];
    int lo_j[QMAX], hi_j[QMAX], lo = 0, hi = 0;
    float cap = c->softcap_attn;

    for (int r = 0; r < nr; r++) {
        int b = r0 + r, pos = L->row_pos[b];
        int t0 = ly->window && (uint32_t)pos >= ly->window ? pos - (int)ly->window + 1 : 0;
        if (r == 0 || t0 < lo)
            lo = t0;
        if (pos + 1 > hi)
            hi = pos + 1;
        for (int h = 0; h < nh; h++) {
            int j = r * nh + h;
            q[j] = L->q + (size_t)b * c->q_dim + (size_t)(h0 + h) * hd;
            o[j] = L->ao + (size_t)b * c->q_dim + (size_t)(h0 + h) * hd;
            lo_j[j] = t0;
            hi_j[j] = pos + 1;
        }
    }
    for (int j = 0; j < nq; j++) {
        s[j] = sbase + (size_t)j * L->ctx;
        round16(q[j], hd); /* as llama.cpp's F16 products round the query */
    }
    /* scores over the tile's positions [lo, hi), a cache block at a time */
    for (int t = lo; t < hi;) {
        int e = (t / KV_BLOCK + 1) * KV_BLOCK;
        if (e > hi)
            e = hi;
        const uint16_t *kc = L->kv_k + llama_kv_at(L, tab[t / KV_BLOCK], L->layer,
                                                   (uint32_t)t % KV_BLOCK) + head;
        for (int u = t; u < e; u++)
            to_f32(kf + (size_t)(u - t) * hd, kc + (size_t)(u - t) * kv_dim, hd);
        scores(s, q, nq, zero, kf, t, e, lo, hd, c->attn_scale);
        t = e;
    }
    /* each query's own range: soft-cap, softmax, rounded to F16; 0 elsewhere */
    for (int j = 0; j < nq; j++) {
        float *sj = s[j] + (lo_j[j] - lo);
        int n_t = hi_j[j] - lo_j[j];
        if (cap > 0.0f)
            for (int t = 0; t < n_t; t++)
                sj[t] = cap * tanhf(sj[t] / cap);
        softmax(sj, n_t);
        round16(sj, n_t);
        memset(s[j], 0, (size_t)(lo_j[j] - lo) * sizeof(float));
        memset(s[j] + (hi_j[j] - lo), 0, (size_t)(hi - hi_j[j]) * sizeof(float));
        memset(o[j], 0, (size_t)hd * sizeof(float));
    }
    for (int t = lo; t < hi;) {
        int e = (t / KV_BLOCK + 1) * KV_BLOCK;
        if (e > hi)
            e = hi;
        const uint16_t *vc = L->kv_v + llama_kv_at(L, tab[t / KV_BLOCK], L->layer,
                                                   (uint32_t)t % KV_BLOCK) + head;
        for (int u = t; u < e; u++)
            to_f32(kf + (size_t)(u - t) * hd, vc + (size_t)(u - t) * kv_dim, hd);
        values(o, s, nq, kf, t, e, lo, hd);
        t = e;
    }
}
#endif

bool llama_attn_tiled(const struct llama *L)
{
#if defined(__x86_64__)
    return L->attn_scratch && strcmp(L->k->name, "scalar") != 0 &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    (void)L;
    return false;
#endif
}

void llama_attn_run(struct llama *L, int n)
{
#if defined(__x86_64__)
    const struct llama_config *c = &L->c;
    int per_kv = c->n_heads / c->n_kv_heads;
    int nh = per_kv < 8 ? per_kv : 8, rows = QMAX / nh, tiles;

    tiles = make_tiles(L, n, rows);
    /* too few tasks for the threads (a decode step of one or two sequences): one head per
     * task, which changes no result */
    if (tiles * c->n_kv_heads * ((per_kv + nh - 1) / nh) < 2 * L->n_threads)
        nh = 1;
    L->attn_nh = nh;
    L->attn_hchunks = (per_kv + nh - 1) / nh;
    threadpool_run(L->pool, tile_task, L, tiles * c->n_kv_heads * L->attn_hchunks);
#else
    (void)L;
    (void)n;
#endif
}
