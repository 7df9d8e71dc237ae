/* Attention over the paged KV cache, tiled: one task takes a run of consecutive rows of one
 * sequence (a prefill's rows) and the query heads that share one KV head, up to ATTN_QMAX
 * queries, and computes them as small matrix products with the queries side by side in
 * vector lanes (attn_kern.h): the scores of a cache block's keys (Q.K^T), the softmax of
 * every query at once, the weighted sum of the block's values (P.V). Each key and value is
 * read and converted from F16 once for all the tile's queries.
 *
 * Every query's result depends on its own query and its own positions only, never on the
 * tile it was computed in: each lane runs the same sequence of operations (attn_kern.h); a
 * tile covers the union of its queries' ranges, and a query's positions outside its own
 * range get the score -inf, so weight 0, which adds exactly nothing to its sums. So a
 * prefill chunked or batched differently, or the same row decoded alone, gives the same
 * bits, and every kernel set gives the same bits as the scalar twin.
 *
 * A tile of at most ATTN_FEW queries (a decode step's) reads the keys and values as F16 where
 * they lie in the cache (scores_f16, values_f16: the same sums, so the same bits) instead of
 * converting each block for lanes that would mostly idle, and its output is query-major.
 * Such a tile asks for its cache blocks a few blocks ahead of its reads (prefetch_block): the
 * blocks lie scattered by the page table, and a step's weights have evicted them, so the
 * kernels would otherwise wait on memory at every block. When every tile is few-query, a task
 * takes several KV heads' tiles of one row range (as many as fit the lanes, while the tasks
 * still keep the threads busy) and runs each block for all of them in turn: a block (all the
 * KV heads' rows) then comes from memory once for them all, while the kernels compute. */
#include <math.h>
#include <string.h>

#include "attn_kern.h"
#include "model_llama_impl.h"
#include "threadpool.h"

_Static_assert(ATTN_QMAX <= ATTN_LANES, "a tile's queries fit the lanes");

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

/* The first row of this layer's K or V head in the cache block that starts at position bs:
 * row u at + u * kv_dim. */
static const uint16_t *block_at(const struct llama *L, const uint16_t *base,
                                const uint32_t *tab, int bs, size_t head)
{
    return base + llama_kv_at(L, tab[bs / KV_BLOCK], L->layer, 0) + head;
}

/* One cache block's positions [t, e) (of the block starting at bs) of this layer's K or V
 * head as floats in kf, rows outside them zero. */
static void block_rows(const struct llama *L, const struct attn_kern *ak, float *kf,
                       const uint16_t *base, const uint32_t *tab, int bs, int t, int e,
                       size_t head)
{
    int hd = L->c.head_dim;
    const uint16_t *src = block_at(L, base, tab, bs, head);
    if (t > bs)
        memset(kf, 0, (size_t)(t - bs) * hd * sizeof(float));
    ak->rows_f32(kf + (size_t)(t - bs) * hd, src + (size_t)(t - bs) * L->c.kv_dim, L->c.kv_dim,
                 e - t, hd);
    if (bs + KV_BLOCK > e)
        memset(kf + (size_t)(e - bs) * hd, 0, (size_t)(bs + KV_BLOCK - e) * hd * sizeof(float));
}

/* Cache blocks a few-query tile asks for ahead of its reads. */
#define FEW_AHEAD 4

/* Ask the cache for the line at p (a hint: no fault, no effect on results). Written as asm on
 * x86, where GCC dropped __builtin_prefetch from these loops as dead code. */
static inline void prefetch_line(const char *p)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("prefetcht0 %0" : : "m"(*p));
#else
    __builtin_prefetch(p, 0, 3);
#endif
}

/* Ask for this layer's K or V block starting at position bs, whole: KV_BLOCK rows of every KV
 * head, contiguous, so that the tiles of the layer's other KV heads find it too. */
static void prefetch_block(const struct llama *L, const uint16_t *base, const uint32_t *tab,
                           int bs)
{
    uintptr_t a = (uintptr_t)block_at(L, base, tab, bs, 0);
    uintptr_t e = a + (size_t)KV_BLOCK * L->c.kv_dim * sizeof(uint16_t);
    for (a -= a % 64; a < e; a += 64)
        prefetch_line((const char *)a);
}

/* The i-th block a few-query tile reads, of the nb blocks from position blo: the keys' blocks
 * first, then the values'. Past the last, nothing. */
static void prefetch_nth(const struct llama *L, const uint32_t *tab, int blo, int nb, int i)
{
    if (i < nb)
        prefetch_block(L, L->kv_k, tab, blo + i * KV_BLOCK);
    else if (i < 2 * nb)
        prefetch_block(L, L->kv_v, tab, blo + (i - nb) * KV_BLOCK);
}

/* A tile of nq <= ATTN_FEW queries of each of the nk KV heads kv0.. over positions [lo, hi)
 * (query j's own [lo_j, hi_j); head k's queries are j = k * nq ..), the keys and values read
 * where they lie: the scores query-major in Sq (row j at j * (hi - lo)), the outputs in O
 * (nk * nq, hd), zeroed by the caller. The heads take each block in turn, so a block streamed
 * in for the first is still in cache for the others. */
static void few_tile(const struct llama *L, float *Sq, const float *Qt, float *O,
                     const uint32_t *tab, int kv0, int nk, int lo, int hi, int nq,
                     const int *lo_j, const int *hi_j)
{
    const struct llama_config *c = &L->c;
    const struct attn_kern *ak = L->attn_kern;
    int ns = hi - lo, hd = c->head_dim;
    float cap = c->softcap_attn;
    int blo = lo / KV_BLOCK * KV_BLOCK, nb = (hi - 1) / KV_BLOCK - lo / KV_BLOCK + 1;

    for (int i = 0; i < FEW_AHEAD; i++)
        prefetch_nth(L, tab, blo, nb, i);
    for (int t = lo; t < hi;) {
        int bs = t / KV_BLOCK * KV_BLOCK, e = bs + KV_BLOCK < hi ? bs + KV_BLOCK : hi;
        prefetch_nth(L, tab, blo, nb, (bs - blo) / KV_BLOCK + FEW_AHEAD);
        for (int k = 0; k < nk; k++)
            ak->scores_f16(Sq + (size_t)k * nq * ns + (t - lo), ns, Qt + k * nq,
                           block_at(L, L->kv_k, tab, bs, (size_t)(kv0 + k) * hd), c->kv_dim,
                           t - bs, e - bs, hd, nq, c->attn_scale);
        t = e;
    }
    for (int j = 0; j < nk * nq; j++) {
        float *s = Sq + (size_t)j * ns;
        if (cap > 0.0f)
            for (int t = 0; t < ns; t++)
                s[t] = cap * tanhf(s[t] / cap);
        for (int t = lo; t < lo_j[j]; t++)
            s[t - lo] = -INFINITY;
        for (int t = hi_j[j]; t < hi; t++)
            s[t - lo] = -INFINITY;
    }
    for (int k = 0; k < nk; k++)
        ak->softmax_q(Sq + (size_t)k * nq * ns, ns, ns, nq);
    for (int t = lo; t < hi;) {
        int bs = t / KV_BLOCK * KV_BLOCK, e = bs + KV_BLOCK < hi ? bs + KV_BLOCK : hi;
        prefetch_nth(L, tab, blo, nb, nb + (bs - blo) / KV_BLOCK + FEW_AHEAD);
        for (int k = 0; k < nk; k++)
            ak->values_f16(O + (size_t)k * nq * hd, Sq + (size_t)k * nq * ns + (t - lo), ns,
                           block_at(L, L->kv_v, tab, bs, (size_t)(kv0 + k) * hd), c->kv_dim,
                           t - bs, e - bs, hd, nq);
        t = e;
    }
}

/* A tile of nq queries over positions [lo, hi) (query j's own [lo_j, hi_j)), side by side in
 * the lanes: each cache block converted once into kf for all of them, the scores lane-major in
 * S (position t's row at (t - lo) * ATTN_LANES), the outputs in Ot (hd, LANES), zeroed by the
 * caller. */
static void wide_tile(const struct llama *L, float *S, const float *Qt, float *Ot, float *kf,
                      const uint32_t *tab, size_t head, int lo, int hi, int nq, const int *lo_j,
                      const int *hi_j)
{
    const struct llama_config *c = &L->c;
    const struct attn_kern *ak = L->attn_kern;
    int hd = c->head_dim, nv = nq <= 8 ? 1 : 2;
    float cap = c->softcap_attn;

    /* Q.K^T over the tile's positions [lo, hi), a cache block at a time */
    for (int t = lo; t < hi;) {
        int bs = t / KV_BLOCK * KV_BLOCK, e = bs + KV_BLOCK < hi ? bs + KV_BLOCK : hi;
        block_rows(L, ak, kf, L->kv_k, tab, bs, t, e, head);
        ak->scores(S + (size_t)(t - lo) * ATTN_LANES, Qt, kf, t - bs, e - bs, hd, nv,
                   c->attn_scale);
        t = e;
    }
    if (cap > 0.0f)
        for (size_t i = 0; i < (size_t)(hi - lo) * ATTN_LANES; i++)
            S[i] = cap * tanhf(S[i] / cap);
    /* each query's own range only */
    for (int j = 0; j < nq; j++) {
        for (int t = lo; t < lo_j[j]; t++)
            S[(size_t)(t - lo) * ATTN_LANES + j] = -INFINITY;
        for (int t = hi_j[j]; t < hi; t++)
            S[(size_t)(t - lo) * ATTN_LANES + j] = -INFINITY;
    }
    ak->softmax(S, hi - lo, nv);
    /* P.V */
    for (int t = lo; t < hi;) {
        int bs = t / KV_BLOCK * KV_BLOCK, e = bs + KV_BLOCK < hi ? bs + KV_BLOCK : hi;
        block_rows(L, ak, kf, L->kv_v, tab, bs, t, e, head);
        ak->values(Ot, S + (size_t)(t - lo) * ATTN_LANES, kf, t - bs, e - bs, hd, nv);
        t = e;
    }
}

/* Task: tile (task / groups); KV heads [kv0, kv0 + nk) (nk > 1 only when every tile is few,
 * llama_attn_run) and their query heads hc * attn_nh .. (nh of each). */
static void tile_task(void *ctx, int task, int thread)
{
    struct llama *L = ctx;
    const struct llama_config *c = &L->c;
    const struct llama_layer *ly = &L->layers[L->layer];
    const struct attn_kern *ak = L->attn_kern;
    int per_kv = c->n_heads / c->n_kv_heads, kvg = L->attn_kvg;
    int groups = (c->n_kv_heads + kvg - 1) / kvg * L->attn_hchunks;
    int tile = task / groups, g = task % groups, kv0 = g / L->attn_hchunks * kvg;
    int nk = c->n_kv_heads - kv0 < kvg ? c->n_kv_heads - kv0 : kvg;
    int hc = g % L->attn_hchunks;
    int nh = per_kv - hc * L->attn_nh < L->attn_nh ? per_kv - hc * L->attn_nh : L->attn_nh;
    int r0 = L->tile_r0[tile], nr = L->tile_n[tile], hd = c->head_dim, nq = nr * nh;
    const uint32_t *tab = kv_cache_table(L->kvc, L->row_slot[r0]);
    float *kf = L->attn_scratch + (size_t)thread * L->attn_scratch_per; /* (KV_BLOCK, hd) */
    float *Qt = kf + (size_t)KV_BLOCK * hd;                             /* (hd, LANES) */
    float *Ot = Qt + (size_t)hd * ATTN_LANES; /* (hd, LANES), or (nk * nq, hd) when few */
    float *S = Ot + (size_t)hd * ATTN_LANES;                            /* (ctx, LANES) */
    float *o[ATTN_LANES];
    int lo_j[ATTN_LANES], hi_j[ATTN_LANES], lo = 0, hi = 0;

    memset(Qt, 0, (size_t)hd * ATTN_LANES * sizeof(float));
    memset(Ot, 0, (size_t)hd * ATTN_LANES * sizeof(float));
    for (int r = 0; r < nr; r++) {
        int b = r0 + r, pos = L->row_pos[b];
        int t0 = ly->window && (uint32_t)pos >= ly->window ? pos - (int)ly->window + 1 : 0;
        if (r == 0 || t0 < lo)
            lo = t0;
        if (pos + 1 > hi)
            hi = pos + 1;
        for (int k = 0; k < nk; k++)
            for (int h = 0; h < nh; h++) {
                int j = k * nq + r * nh + h, qh = (kv0 + k) * per_kv + hc * L->attn_nh + h;
                float *q = L->q + (size_t)b * c->q_dim + (size_t)qh * hd;
                ak->round16(q, hd); /* as llama.cpp's F16 products round the query */
                for (int d = 0; d < hd; d++)
                    Qt[d * ATTN_LANES + j] = q[d];
                o[j] = L->ao + (size_t)b * c->q_dim + (size_t)qh * hd;
                lo_j[j] = t0;
                hi_j[j] = pos + 1;
            }
    }
    if (nq <= ATTN_FEW) {
        few_tile(L, S, Qt, Ot, tab, kv0, nk, lo, hi, nq, lo_j, hi_j);
        for (int j = 0; j < nk * nq; j++)
            memcpy(o[j], Ot + (size_t)j * hd, (size_t)hd * sizeof(float));
    } else {
        wide_tile(L, S, Qt, Ot, kf, tab, (size_t)kv0 * hd, lo, hi, nq, lo_j, hi_j);
        for (int j = 0; j < nq; j++)
            for (int d = 0; d < hd; d++)
                o[j][d] = Ot[d * ATTN_LANES + j];
    }
}

size_t llama_attn_scratch(const struct llama_config *c, uint32_t ctx)
{
    return (size_t)(KV_BLOCK + 2 * ATTN_LANES) * c->head_dim + (size_t)ATTN_LANES * ctx;
}

void llama_attn_run(struct llama *L, int n)
{
    const struct llama_config *c = &L->c;
    int per_kv = c->n_heads / c->n_kv_heads;
    int nh = per_kv < 8 ? per_kv : 8, rows = ATTN_QMAX / nh, tiles;

    tiles = make_tiles(L, n, rows);
    /* too few tasks for the threads (a decode step of one or two sequences): fewer query
     * heads per task, which changes no result */
    while (nh > 1 && tiles * c->n_kv_heads * ((per_kv + nh - 1) / nh) < 2 * L->n_threads)
        nh = (nh + 1) / 2;
    L->attn_nh = nh;
    L->attn_hchunks = (per_kv + nh - 1) / nh;
    /* every tile few-query (a decode step) with each KV head's query heads whole: several KV
     * heads a task, their queries side by side in the lanes, while the tasks still number at
     * least two a thread (or one thread runs them all), which changes no result */
    int kvg = 1, maxr = 0;
    for (int t = 0; t < tiles; t++)
        maxr = L->tile_n[t] > maxr ? L->tile_n[t] : maxr;
    if (L->attn_hchunks == 1 && maxr * per_kv <= ATTN_FEW) {
        kvg = ATTN_LANES / (maxr * per_kv);
        kvg = kvg < c->n_kv_heads ? kvg : c->n_kv_heads;
        while (kvg > 1 && L->n_threads > 1 &&
               tiles * ((c->n_kv_heads + kvg - 1) / kvg) < 2 * L->n_threads)
            kvg--;
    }
    L->attn_kvg = kvg;
    threadpool_run(L->pool, tile_task, L,
                   tiles * ((c->n_kv_heads + kvg - 1) / kvg) * L->attn_hchunks);
}
