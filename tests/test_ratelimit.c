/* ratelimit: bursts, Retry-After, refill, independent clients and bounded memory, all on an
 * injected microsecond clock (no sleeping). */
#include "../server/ratelimit.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define SEC 1000000ull
#define T0 (1000 * SEC) /* an arbitrary start of the injected clock */

static int teardown(void **state)
{
    ratelimit_destroy(*state);
    return 0;
}

/* rate 1/s, burst 3, room for 4 clients */
static int setup_small(void **state)
{
    *state = ratelimit_create(1.0, 3, 4);
    return *state ? 0 : -1;
}

static void test_ratelimit_burst_then_refused_with_retry_after(void **state)
{
    struct ratelimit *rl = *state;
    uint32_t retry = 0;

    for (int i = 0; i < 3; i++)
        assert_int_equal(ratelimit_take(rl, "a10.0.0.1", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "a10.0.0.1", T0, &retry), -EAGAIN);
    assert_int_equal(retry, 1);
    /* still refused just before the token is due, with Retry-After never 0 */
    retry = 0;
    assert_int_equal(ratelimit_take(rl, "a10.0.0.1", T0 + SEC - 1, &retry), -EAGAIN);
    assert_int_equal(retry, 1);
    assert_int_equal(ratelimit_take(rl, "a10.0.0.1", T0 + SEC, &retry), 0);
}

static void test_ratelimit_retry_after_counts_whole_seconds_to_the_next_token(void **state)
{
    struct ratelimit *rl = ratelimit_create(0.1, 2, 8); /* one token per 10 s */
    uint32_t retry = 0;

    (void)state;
    assert_non_null(rl);
    assert_int_equal(ratelimit_take(rl, "k0", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k0", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k0", T0, &retry), -EAGAIN);
    assert_int_equal(retry, 10);
    assert_int_equal(ratelimit_take(rl, "k0", T0 + 2500000, &retry), -EAGAIN);
    assert_int_equal(retry, 8); /* 7.5 s left, rounded up */
    assert_int_equal(ratelimit_take(rl, "k0", T0 + 10 * SEC, &retry), 0);
    ratelimit_destroy(rl);
}

static void test_ratelimit_refills_over_time_up_to_burst(void **state)
{
    struct ratelimit *rl = ratelimit_create(2.0, 2, 8); /* a token per 0.5 s */
    uint32_t retry = 0;
    uint64_t t = T0;

    (void)state;
    assert_non_null(rl);
    assert_int_equal(ratelimit_take(rl, "k1", t, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k1", t, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k1", t + 400000, &retry), -EAGAIN);
    assert_int_equal(ratelimit_take(rl, "k1", t + 500000, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k1", t + 500000, &retry), -EAGAIN);
    /* a long idle time refills to the burst, not beyond */
    t += 3600 * SEC;
    assert_int_equal(ratelimit_take(rl, "k1", t, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k1", t, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k1", t, &retry), -EAGAIN);
    /* steady state: one request per 0.5 s always passes */
    for (int i = 1; i <= 100; i++)
        assert_int_equal(ratelimit_take(rl, "k1", t + (uint64_t)i * 500000, &retry), 0);
    ratelimit_destroy(rl);
}

static void test_ratelimit_clients_have_their_own_buckets(void **state)
{
    struct ratelimit *rl = *state;
    uint32_t retry;

    for (int i = 0; i < 3; i++)
        assert_int_equal(ratelimit_take(rl, "aA", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "aA", T0, &retry), -EAGAIN);
    assert_int_equal(ratelimit_take(rl, "aB", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "k0", T0, &retry), 0);
    assert_int_equal(ratelimit_size(rl), 3);
}

static void test_ratelimit_clock_stepping_back_adds_nothing(void **state)
{
    struct ratelimit *rl = *state;
    uint32_t retry = 0;

    for (int i = 0; i < 3; i++)
        assert_int_equal(ratelimit_take(rl, "aX", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "aX", T0 - 100 * SEC, &retry), -EAGAIN);
    assert_int_equal(retry, 1);
    assert_int_equal(ratelimit_take(rl, "aX", T0 + SEC, &retry), 0);
}

static void test_ratelimit_eviction_keeps_memory_bounded(void **state)
{
    struct ratelimit *rl = *state; /* capacity 4 */
    uint32_t retry;
    char id[RATELIMIT_ID_MAX];

    /* "hot" spends its burst, then stays in use while 1000 other addresses pass by */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ratelimit_take(rl, "ahot", T0, &retry), 0);
    for (int i = 0; i < 1000; i++) {
        snprintf(id, sizeof(id), "a2001:db8::%x", i);
        assert_int_equal(ratelimit_take(rl, id, T0, &retry), 0);
        assert_true(ratelimit_size(rl) <= 4);
        assert_int_equal(ratelimit_take(rl, "ahot", T0, &retry), -EAGAIN);
    }
    assert_int_equal(ratelimit_size(rl), 4);
    assert_int_equal(ratelimit_evictions(rl), 1000 - 3); /* hot + 3 filled it */
    /* the recently used attacker addresses are remembered (spent one token each) ... */
    assert_int_equal(ratelimit_take(rl, "a2001:db8::3e7", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "a2001:db8::3e7", T0, &retry), 0);
    assert_int_equal(ratelimit_take(rl, "a2001:db8::3e7", T0, &retry), -EAGAIN);
    /* ... an old one was forgotten and starts again with a full bucket */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ratelimit_take(rl, "a2001:db8::0", T0, &retry), 0);
    assert_int_equal(ratelimit_size(rl), 4);
}

static void test_ratelimit_rejects_bad_identities_and_parameters(void **state)
{
    struct ratelimit *rl = *state;
    char big[RATELIMIT_ID_MAX + 1];
    uint32_t retry;

    assert_int_equal(ratelimit_take(rl, "", T0, &retry), -EINVAL);
    memset(big, 'x', sizeof(big) - 1);
    big[RATELIMIT_ID_MAX] = '\0';
    assert_int_equal(ratelimit_take(rl, big, T0, &retry), -EINVAL);
    big[RATELIMIT_ID_MAX - 1] = '\0'; /* the longest that fits */
    assert_int_equal(ratelimit_take(rl, big, T0, &retry), 0);
    assert_int_equal(ratelimit_size(rl), 1);

    errno = 0;
    assert_null(ratelimit_create(0.0, 1, 1));
    assert_int_equal(errno, EINVAL);
    assert_null(ratelimit_create(-1.0, 1, 1));
    assert_null(ratelimit_create(1.0, 0, 1));
    assert_null(ratelimit_create(1.0, 1, 0));
}

static void test_ratelimit_identity_prefers_the_key_index(void **state)
{
    char buf[RATELIMIT_ID_MAX], tiny[4];

    (void)state;
    assert_int_equal(ratelimit_identity(buf, sizeof(buf), 3, "127.0.0.1"), 0);
    assert_string_equal(buf, "k3");
    assert_int_equal(ratelimit_identity(buf, sizeof(buf), INT_MAX, "127.0.0.1"), 0);
    assert_string_equal(buf, "a127.0.0.1");
    assert_int_equal(ratelimit_identity(buf, sizeof(buf), -EACCES, "::1"), 0);
    assert_string_equal(buf, "a::1");
    assert_int_equal(ratelimit_identity(buf, sizeof(buf), INT_MAX,
                                        "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"),
                     0);
    assert_int_equal(ratelimit_identity(tiny, sizeof(tiny), INT_MAX, "10.0.0.1"),
                     -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ratelimit_burst_then_refused_with_retry_after,
                                        setup_small, teardown),
        cmocka_unit_test(test_ratelimit_retry_after_counts_whole_seconds_to_the_next_token),
        cmocka_unit_test(test_ratelimit_refills_over_time_up_to_burst),
        cmocka_unit_test_setup_teardown(test_ratelimit_clients_have_their_own_buckets,
                                        setup_small, teardown),
        cmocka_unit_test_setup_teardown(test_ratelimit_clock_stepping_back_adds_nothing,
                                        setup_small, teardown),
        cmocka_unit_test_setup_teardown(test_ratelimit_eviction_keeps_memory_bounded,
                                        setup_small, teardown),
        cmocka_unit_test_setup_teardown(test_ratelimit_rejects_bad_identities_and_parameters,
                                        setup_small, teardown),
        cmocka_unit_test(test_ratelimit_identity_prefers_the_key_index),
    };

    return cmocka_run_group_tests_name("ratelimit", tests, NULL, NULL);
}
