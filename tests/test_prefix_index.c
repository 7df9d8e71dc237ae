/* The front's per-worker prefix index (server/prefix_index.c): a set of block keys that
 * survives removals in the middle of a probe run and growth, the keys of a prompt as the
 * worker computes them, the leading-match count, and the routing rule with its slack. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>

#include "../server/prefix_index.h"
#include "kv_hash.h"

static void test_prefix_index_set_keeps_keys_through_removals_and_growth(void **state)
{
    struct prefix_index *x = prefix_index_create();
    (void)state;
    assert_non_null(x);
    /* keys that share a home slot, then many more (growth past 1024 slots) */
    for (uint64_t i = 0; i < 3000; i++)
        assert_int_equal(prefix_index_add(x, ((i * 1024) << 32) | 1), 0);
    assert_int_equal(prefix_index_count(x), 3000);
    for (uint64_t i = 0; i < 3000; i += 2)
        prefix_index_remove(x, ((i * 1024) << 32) | 1);
    assert_int_equal(prefix_index_count(x), 1500);
    for (uint64_t i = 0; i < 3000; i++) {
        uint64_t k = ((i * 1024) << 32) | 1;
        assert_int_equal(prefix_index_match(x, &k, 1), i % 2);
    }
    prefix_index_add(x, 5);
    prefix_index_add(x, 5);
    assert_int_equal(prefix_index_count(x), 1501);
    prefix_index_clear(x);
    assert_int_equal(prefix_index_count(x), 0);
    prefix_index_destroy(x);
}

static void test_prefix_index_match_counts_the_leading_cached_blocks(void **state)
{
    uint32_t p[70];
    uint64_t keys[8];
    struct prefix_index *x = prefix_index_create();
    (void)state;
    for (uint32_t i = 0; i < 70; i++)
        p[i] = 100 + i;
    /* 70 tokens: the worker links at most 69 positions, 4 blocks */
    assert_int_equal(prefix_index_keys(p, 70, keys, 8), 4);
    assert_int_equal(prefix_index_keys(p, 65, keys, 8), 4);
    assert_int_equal(prefix_index_keys(p, 64, keys, 8), 3);
    assert_int_equal(keys[0], kv_hash_block(0, p));
    assert_int_equal(keys[1], kv_hash_block(keys[0], p + 16));
    assert_int_equal(prefix_index_keys(p, 70, keys, 8), 4);
    prefix_index_add(x, keys[0]);
    prefix_index_add(x, keys[1]);
    prefix_index_add(x, keys[3]); /* not after a gap */
    assert_int_equal(prefix_index_match(x, keys, 4), 2);
    prefix_index_destroy(x);
}

static void test_prefix_index_route_prefers_the_prefix_unless_much_busier(void **state)
{
    enum prefix_route_reason why;
    (void)state;
    /* no prefix anywhere: least loaded, first on a tie */
    struct prefix_route_cand a[] = {{3, 0}, {1, 0}, {1, 0}};
    assert_int_equal(prefix_route(a, 3, 4, &why), 1);
    assert_int_equal(why, PREFIX_ROUTE_LEAST_LOADED);
    /* longest prefix within the slack */
    struct prefix_route_cand b[] = {{1, 0}, {5, 2}, {4, 3}};
    assert_int_equal(prefix_route(b, 3, 4, &why), 2);
    assert_int_equal(why, PREFIX_ROUTE_PREFIX);
    /* the same prefix on two: the less busy */
    struct prefix_route_cand c[] = {{6, 3}, {2, 3}, {0, 0}};
    assert_int_equal(prefix_route(c, 3, 4, &why), 1);
    assert_int_equal(why, PREFIX_ROUTE_PREFIX);
    /* more than slack busier than the least loaded: the least loaded */
    struct prefix_route_cand d[] = {{0, 0}, {5, 9}};
    assert_int_equal(prefix_route(d, 2, 4, &why), 0);
    assert_int_equal(why, PREFIX_ROUTE_BUSY);
    assert_int_equal(prefix_route_slack(8), 4);
    assert_int_equal(prefix_route_slack(1), 2);
    assert_string_equal(prefix_route_name(PREFIX_ROUTE_BUSY), "busy");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_index_set_keeps_keys_through_removals_and_growth),
        cmocka_unit_test(test_prefix_index_match_counts_the_leading_cached_blocks),
        cmocka_unit_test(test_prefix_index_route_prefers_the_prefix_unless_much_busier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
