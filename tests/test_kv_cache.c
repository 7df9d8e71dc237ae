/* The paged KV cache's bookkeeping (worker/kv_cache.c): prefix blocks shared by reference,
 * the last prompt token always computed, LRU eviction of released blocks only, admission by
 * reservation (-EAGAIN now, -ENOSPC never), and reuse switched off per sequence. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "../worker/kv_cache.h"

static void fill(uint32_t *p, uint32_t n, uint32_t base)
{
    for (uint32_t i = 0; i < n; i++)
        p[i] = base + i;
}

/* Runs a whole prompt into slot as the engine does: grow, then commit. */
static int run(struct kv_cache *c, int slot, const uint32_t *p, uint32_t n, uint32_t max_len,
               bool reuse)
{
    struct kv_copy cp;
    int got = kv_cache_begin(c, slot, p, n, max_len, reuse, &cp);
    if (got < 0)
        return got;
    assert_int_equal(kv_cache_grow(c, slot, n - (uint32_t)got), 0);
    kv_cache_commit(c, slot, p + got, n - (uint32_t)got, true);
    assert_int_equal(kv_cache_len(c, slot), n);
    return got;
}

static void test_kv_cache_second_prompt_links_the_first_ones_full_blocks(void **state)
{
    int err = 0;
    uint32_t p[100], q[100];
    struct kv_cache_stats st;
    struct kv_cache *c = kv_cache_create(32, 2, 256, &err);
    (void)state;
    assert_non_null(c);
    fill(p, 100, 1000);
    memcpy(q, p, sizeof(q));
    q[70] = 7; /* q agrees with p on 4 full blocks (64 positions), and 6 more */
    assert_int_equal(run(c, 0, p, 100, 100, true), 0);
    assert_int_equal(run(c, 1, q, 100, 100, true), 4 * KV_BLOCK + 6);
    /* the same blocks, not copies */
    for (int i = 0; i < 4; i++)
        assert_int_equal(kv_cache_table(c, 1)[i], kv_cache_table(c, 0)[i]);
    assert_int_not_equal(kv_cache_table(c, 1)[4], kv_cache_table(c, 0)[4]);
    kv_cache_get_stats(c, &st);
    assert_int_equal(st.used, 7 + 3); /* 7 of p, 3 more of q */
    assert_int_equal(st.reused_tokens, 4 * KV_BLOCK + 6);
    /* ending p keeps the shared blocks with q; its own blocks stay cached */
    kv_cache_end(c, 0);
    kv_cache_get_stats(c, &st);
    assert_int_equal(st.used, 7);
    assert_int_equal(st.cached, 3); /* p's blocks 4 and 5, and 6, partial, kept for copies */
    kv_cache_destroy(c);
}

static void test_kv_cache_whole_prompt_cached_still_computes_the_last_token(void **state)
{
    int err = 0;
    uint32_t p[64];
    struct kv_cache *c = kv_cache_create(16, 1, 256, &err);
    (void)state;
    fill(p, 64, 5);
    assert_int_equal(run(c, 0, p, 64, 64, true), 0);
    kv_cache_end(c, 0);
    /* 64 tokens = 4 full blocks cached, but the 4th holds the last token: 3 linked, and
     * the 4th's first 15 positions copied */
    assert_int_equal(run(c, 0, p, 64, 64, true), 4 * KV_BLOCK - 1);
    kv_cache_end(c, 0);
    /* a longer prompt links all 4 */
    uint32_t q[65];
    memcpy(q, p, sizeof(p));
    q[64] = 9;
    assert_int_equal(run(c, 0, q, 65, 65, true), 4 * KV_BLOCK);
    kv_cache_destroy(c);
}

static void test_kv_cache_reuse_off_computes_everything(void **state)
{
    int err = 0;
    uint32_t p[40];
    struct kv_cache *c = kv_cache_create(16, 1, 256, &err);
    (void)state;
    fill(p, 40, 5);
    assert_int_equal(run(c, 0, p, 40, 40, true), 0);
    kv_cache_end(c, 0);
    assert_int_equal(run(c, 0, p, 40, 40, false), 0);
    kv_cache_destroy(c);
}

static void test_kv_cache_evicts_released_blocks_least_recent_first(void **state)
{
    int err = 0;
    uint32_t a[33], b[33], d[33], e[33];
    struct kv_cache_stats st;
    struct kv_cache *c = kv_cache_create(6, 2, 256, &err); /* 6 blocks */
    (void)state;
    fill(a, 33, 100);
    fill(b, 33, 200);
    fill(d, 33, 300);
    fill(e, 33, 400);
    assert_int_equal(run(c, 0, a, 33, 33, true), 0); /* 3 blocks, 2 full */
    kv_cache_end(c, 0);
    assert_int_equal(run(c, 0, b, 33, 33, true), 0);
    kv_cache_end(c, 0); /* cached: a0 a1 b0 b1 */
    /* d needs 3: 2 free, then a's tail block, released longest ago */
    assert_int_equal(run(c, 0, d, 33, 33, true), 0);
    kv_cache_get_stats(c, &st);
    assert_int_equal(st.evictions, 1);
    kv_cache_end(c, 0);
    /* a's head block survives alone: a links nothing past it; b is whole */
    assert_int_equal(run(c, 1, b, 33, 33, true), 2 * KV_BLOCK);
    kv_cache_end(c, 1);
    assert_int_equal(run(c, 1, a, 33, 33, true), KV_BLOCK);
    kv_cache_end(c, 1);
    (void)e;
    kv_cache_destroy(c);
}

static void test_kv_cache_running_sequence_keeps_its_blocks_and_reservation(void **state)
{
    int err = 0;
    uint32_t a[20], b[20];
    struct kv_copy cp;
    struct kv_cache *c = kv_cache_create(4, 2, 256, &err);
    (void)state;
    fill(a, 20, 1);
    fill(b, 20, 500);
    /* a may grow to 48 positions: 3 blocks reserved, 2 taken now */
    assert_int_equal(run(c, 0, a, 20, 48, true), 0);
    /* b needs 2: only 1 is not reserved by a: wait */
    assert_int_equal(kv_cache_begin(c, 1, b, 20, 20, true, &cp), -EAGAIN);
    /* a never loses its reservation: it grows into its third block */
    for (uint32_t i = 20; i < 48; i++) {
        uint32_t t = i;
        assert_int_equal(kv_cache_grow(c, 0, 1), 0);
        kv_cache_commit(c, 0, &t, 1, false);
    }
    /* past its reservation only from unreserved blocks: the fourth, then none */
    for (uint32_t i = 48; i < 64; i++) {
        uint32_t t = i;
        assert_int_equal(kv_cache_grow(c, 0, 1), 0);
        kv_cache_commit(c, 0, &t, 1, false);
    }
    assert_int_equal(kv_cache_grow(c, 0, 1), -ENOSPC);
    kv_cache_end(c, 0);
    assert_int_equal(run(c, 1, b, 20, 20, true), 0);
    kv_cache_destroy(c);
}

static void test_kv_cache_sequence_larger_than_the_pool_is_refused(void **state)
{
    int err = 0;
    uint32_t a[20];
    struct kv_copy cp;
    struct kv_cache *c = kv_cache_create(4, 1, 256, &err);
    (void)state;
    fill(a, 20, 1);
    assert_int_equal(kv_cache_begin(c, 0, a, 20, 65, true, &cp), -ENOSPC);
    assert_int_equal(kv_cache_begin(c, 0, a, 20, 64, true, &cp), 0);
    kv_cache_destroy(c);
    assert_null(kv_cache_create(0, 1, 16, &err));
    assert_int_equal(err, -EINVAL);
}

/* The positions past the last linked block come by copy from a cached block that continues
 * the same history: a finished sequence's partial last block, or a full block the new prompt
 * leaves part way; the copy goes into a block of the new sequence's own. */
static void test_kv_cache_partial_block_is_reused_by_copy(void **state)
{
    int err = 0;
    uint32_t p[40], q[60];
    struct kv_copy cp;
    struct kv_cache *c = kv_cache_create(16, 2, 256, &err);
    (void)state;
    fill(p, 40, 100); /* 2 full blocks and 8 positions */
    fill(q, 60, 100);
    q[45] = 1;
    assert_int_equal(run(c, 0, p, 40, 40, true), 0);
    uint32_t partial = kv_cache_table(c, 0)[2];
    kv_cache_end(c, 0);
    /* q continues p: 32 linked, 8 copied from p's partial block */
    assert_int_equal(kv_cache_begin(c, 1, q, 60, 60, true, &cp), 40);
    assert_int_equal(cp.src, partial);
    assert_int_equal(cp.n, 8);
    assert_int_not_equal(cp.dst, partial);
    assert_int_equal(kv_cache_table(c, 1)[2], cp.dst);
    assert_int_equal(kv_cache_len(c, 1), 40);
    assert_int_equal(kv_cache_grow(c, 1, 20), 0);
    kv_cache_commit(c, 1, q + 40, 20, true);
    uint32_t full = kv_cache_table(c, 1)[2];
    kv_cache_end(c, 1);
    /* p again: its third block is now q's full one, equal up to position 45 */
    fill(q, 60, 100);
    assert_int_equal(kv_cache_begin(c, 0, q, 44, 44, true, &cp), 43);
    assert_int_equal(cp.src, full);
    assert_int_equal(cp.n, 11);
    kv_cache_end(c, 0);
    /* reuse off copies nothing */
    assert_int_equal(kv_cache_begin(c, 0, q, 44, 44, false, &cp), 0);
    assert_int_equal(cp.n, 0);
    kv_cache_destroy(c);
}

/* Positions a decode step computed are never shared: neither their block nor those after
 * are indexed, and the block where decoding began is kept only up to it. */
static void test_kv_cache_decoded_positions_are_not_shared(void **state)
{
    int err = 0;
    uint32_t p[70], t;
    struct kv_copy cp;
    struct kv_cache *c = kv_cache_create(16, 1, 256, &err);
    (void)state;
    fill(p, 70, 100);
    assert_int_equal(run(c, 0, p, 20, 70, true), 0); /* a prompt of 20 */
    for (uint32_t i = 20; i < 70; i++) {           /* 50 decode steps */
        t = p[i];
        assert_int_equal(kv_cache_grow(c, 0, 1), 0);
        kv_cache_commit(c, 0, &t, 1, false);
    }
    kv_cache_end(c, 0);
    /* the prompt re-sent with its answer: block 0 linked, 4 positions copied, no more */
    assert_int_equal(kv_cache_begin(c, 0, p, 70, 70, true, &cp), 20);
    assert_int_equal(cp.n, 4);
    kv_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_cache_second_prompt_links_the_first_ones_full_blocks),
        cmocka_unit_test(test_kv_cache_whole_prompt_cached_still_computes_the_last_token),
        cmocka_unit_test(test_kv_cache_reuse_off_computes_everything),
        cmocka_unit_test(test_kv_cache_evicts_released_blocks_least_recent_first),
        cmocka_unit_test(test_kv_cache_running_sequence_keeps_its_blocks_and_reservation),
        cmocka_unit_test(test_kv_cache_sequence_larger_than_the_pool_is_refused),
        cmocka_unit_test(test_kv_cache_partial_block_is_reused_by_copy),
        cmocka_unit_test(test_kv_cache_decoded_positions_are_not_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
