/* hist: bucket placement, quantiles, the empty case, and the monotonic clock. */
#include "hist.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static int setup_hist(void **state)
{
    static struct hist h; /* test-local storage; reset for every test */

    hist_init(&h);
    *state = &h;
    return 0;
}

static void test_hist_bounds_increase_from_50us_to_60s(void **state)
{
    (void)state;
    assert_int_equal(hist_bounds_us[0], 50);
    assert_int_equal(hist_bounds_us[HIST_BUCKETS - 2], 60000000);
    for (int i = 1; i < HIST_BUCKETS - 1; i++)
        assert_true(hist_bounds_us[i] > hist_bounds_us[i - 1]);
}

static void test_hist_quantile_empty_is_zero(void **state)
{
    struct hist *h = *state;

    assert_int_equal(hist_quantile(h, 0.5), 0);
    assert_int_equal(hist_quantile(h, 1.0), 0);
}

static void test_hist_observe_places_values_on_bucket_bounds(void **state)
{
    struct hist *h = *state;

    hist_observe(h, 0);
    hist_observe(h, 50);  /* inclusive upper bound: still bucket 0 */
    hist_observe(h, 51);  /* bucket 1 */
    hist_observe(h, 60000001); /* beyond the last bound: +Inf bucket */
    assert_int_equal(atomic_load(&h->count[0]), 2);
    assert_int_equal(atomic_load(&h->count[1]), 1);
    assert_int_equal(atomic_load(&h->count[HIST_BUCKETS - 1]), 1);
    assert_int_equal(atomic_load(&h->total), 4);
    assert_int_equal(atomic_load(&h->sum_us), 0 + 50 + 51 + 60000001);
}

static void test_hist_quantile_returns_bucket_upper_bound(void **state)
{
    struct hist *h = *state;

    for (int i = 0; i < 90; i++)
        hist_observe(h, 30);   /* <= 50 */
    for (int i = 0; i < 9; i++)
        hist_observe(h, 700);  /* <= 1000 */
    hist_observe(h, 3000000);  /* <= 5 s */
    assert_int_equal(hist_quantile(h, 0.5), 50);
    assert_int_equal(hist_quantile(h, 0.9), 50);
    assert_int_equal(hist_quantile(h, 0.95), 1000);
    assert_int_equal(hist_quantile(h, 0.99), 1000);
    assert_int_equal(hist_quantile(h, 1.0), 5000000);
}

static void test_hist_quantile_of_unbounded_bucket_is_max(void **state)
{
    struct hist *h = *state;

    hist_observe(h, UINT64_C(1) << 40);
    assert_true(hist_quantile(h, 0.5) == UINT64_MAX);
}

static void test_hist_now_us_is_monotonic(void **state)
{
    (void)state;
    uint64_t a = hist_now_us(), b;

    for (int i = 0; i < 1000; i++) {
        b = hist_now_us();
        assert_true(b >= a);
        a = b;
    }
    assert_true(a > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_bounds_increase_from_50us_to_60s),
        cmocka_unit_test_setup_teardown(test_hist_quantile_empty_is_zero, setup_hist, NULL),
        cmocka_unit_test_setup_teardown(test_hist_observe_places_values_on_bucket_bounds,
                                        setup_hist, NULL),
        cmocka_unit_test_setup_teardown(test_hist_quantile_returns_bucket_upper_bound, setup_hist,
                                        NULL),
        cmocka_unit_test_setup_teardown(test_hist_quantile_of_unbounded_bucket_is_max, setup_hist,
                                        NULL),
        cmocka_unit_test(test_hist_now_us_is_monotonic),
    };
    return cmocka_run_group_tests_name("hist", tests, NULL, NULL);
}
