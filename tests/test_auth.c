/* auth: the Bearer parse, the key index returned, near-miss keys refused, loading from a
 * file and a comma list, and the route policy with and without a metrics key. */
#include "../server/auth.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

static int setup(void **state)
{
    struct auth *a = calloc(1, sizeof(*a));

    if (!a)
        return -1;
    auth_init(a);
    *state = a;
    return 0;
}

static int teardown(void **state)
{
    struct auth *a = *state;

    auth_free(a);
    auth_free(a); /* safe twice */
    free(a);
    return 0;
}

static int add(struct auth *a, const char *key)
{
    return auth_add_key(a, key, strlen(key));
}

/* Write text to a new temp file; its path goes to path (PATH_MAX-ish buffer). */
static void write_temp(char *path, const char *text)
{
    int fd;

    strcpy(path, "/tmp/kiln-test-auth-XXXXXX");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void test_auth_no_keys_lets_everything_pass(void **state)
{
    struct auth *a = *state;

    assert_false(auth_enabled(a));
    assert_int_equal(auth_check(a, NULL), AUTH_OPEN);
    assert_int_equal(auth_check(a, "Bearer whatever"), AUTH_OPEN);
    assert_false(auth_route_needs_key(a, "/v1/completions"));
    assert_int_equal(auth_check_request(a, "/v1/chat/completions", NULL), AUTH_OPEN);
}

static void test_auth_bearer_scheme_is_case_insensitive_and_blanks_are_allowed(void **state)
{
    struct auth *a = *state;

    assert_int_equal(add(a, "sk-one"), 0);
    assert_int_equal(auth_check(a, "Bearer sk-one"), 0);
    assert_int_equal(auth_check(a, "bearer sk-one"), 0);
    assert_int_equal(auth_check(a, "BEARER sk-one"), 0);
    assert_int_equal(auth_check(a, "  Bearer \t  sk-one  "), 0);
    assert_int_equal(auth_check(a, "\tbEaReR sk-one\r\n"), 0);
}

static void test_auth_refuses_near_misses_and_malformed_headers(void **state)
{
    struct auth *a = *state;
    char longtok[AUTH_KEY_MAX + 16];

    assert_int_equal(add(a, "sk-abcdef"), 0);
    assert_int_equal(auth_check(a, NULL), -EACCES);
    assert_int_equal(auth_check(a, ""), -EACCES);
    assert_int_equal(auth_check(a, "Bearer"), -EACCES);
    assert_int_equal(auth_check(a, "Bearer   "), -EACCES);
    assert_int_equal(auth_check(a, "Bearersk-abcdef"), -EACCES);
    assert_int_equal(auth_check(a, "Basic sk-abcdef"), -EACCES);
    assert_int_equal(auth_check(a, "sk-abcdef"), -EACCES);
    assert_int_equal(auth_check(a, "Bearer sk-abcdef extra"), -EACCES);
    assert_int_equal(auth_check(a, "Bearer sk-abcde"), -EACCES);   /* a prefix */
    assert_int_equal(auth_check(a, "Bearer sk-abcdefg"), -EACCES); /* longer */
    assert_int_equal(auth_check(a, "Bearer sk-abcdeF"), -EACCES);  /* last byte */
    assert_int_equal(auth_check(a, "Bearer Sk-abcdef"), -EACCES);  /* first byte */
    memcpy(longtok, "Bearer ", 7);
    memset(longtok + 7, 'x', sizeof(longtok) - 8);
    longtok[sizeof(longtok) - 1] = '\0';
    assert_int_equal(auth_check(a, longtok), -EACCES);
}

static void test_auth_returns_the_index_of_the_matching_key(void **state)
{
    struct auth *a = *state;

    assert_int_equal(add(a, "alpha"), 0);
    assert_int_equal(add(a, "beta"), 1);
    assert_int_equal(add(a, "gamma-long-key"), 2);
    assert_int_equal(auth_check(a, "Bearer alpha"), 0);
    assert_int_equal(auth_check(a, "Bearer beta"), 1);
    assert_int_equal(auth_check(a, "Bearer gamma-long-key"), 2);
    assert_int_equal(auth_check(a, "Bearer gamma"), -EACCES);
}

static void test_auth_add_key_trims_dedupes_and_validates(void **state)
{
    struct auth *a = *state;
    char big[AUTH_KEY_MAX + 2];

    assert_int_equal(add(a, "  k1 \n"), 0);
    assert_int_equal(add(a, "k2"), 1);
    assert_int_equal(add(a, "k1"), 0); /* already there: same index */
    assert_int_equal(a->n_keys, 2);
    assert_int_equal(add(a, ""), -EINVAL);
    assert_int_equal(add(a, "   "), -EINVAL);
    assert_int_equal(add(a, "two words"), -EINVAL);
    assert_int_equal(add(a, "ctl\x01"), -EINVAL);
    memset(big, 'k', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(add(a, big), -EINVAL);
    big[AUTH_KEY_MAX] = '\0'; /* exactly the maximum is fine */
    assert_int_equal(add(a, big), 2);
    for (int i = 0; i < 40; i++) { /* grows past the first allocation */
        char k[16];

        snprintf(k, sizeof(k), "key-%d", i);
        assert_int_equal(add(a, k), 3 + i);
    }
    assert_int_equal(auth_check(a, "Bearer key-39"), 42);
    assert_int_equal(auth_check(a, "Bearer k2"), 1);
}

static void test_auth_load_file_skips_comments_and_blank_lines(void **state)
{
    struct auth *a = *state;
    char path[64], err[256] = "";

    write_temp(path, "# kiln keys\n\n   \nsk-first\n  sk-second  \r\n\t# indented comment\n"
                     "sk-third");
    assert_int_equal(auth_load_file(a, path, err, sizeof(err)), 3);
    unlink(path);
    assert_int_equal(a->n_keys, 3);
    assert_int_equal(auth_check(a, "Bearer sk-first"), 0);
    assert_int_equal(auth_check(a, "Bearer sk-second"), 1);
    assert_int_equal(auth_check(a, "Bearer sk-third"), 2);
    assert_int_equal(auth_check(a, "Bearer #"), -EACCES);
}

static void test_auth_load_file_names_the_bad_line(void **state)
{
    struct auth *a = *state;
    char path[64], err[256] = "", want[96];

    write_temp(path, "good\nbad key\n");
    assert_int_equal(auth_load_file(a, path, err, sizeof(err)), -EINVAL);
    unlink(path);
    snprintf(want, sizeof(want), "%s:2:", path);
    assert_non_null(strstr(err, want));
    assert_int_equal(auth_load_file(a, "/nonexistent/kiln-keys", err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/kiln-keys"));
}

static void test_auth_load_list_splits_on_commas(void **state)
{
    struct auth *a = *state;

    assert_int_equal(auth_load_list(a, NULL), 0);
    assert_int_equal(auth_load_list(a, ""), 0);
    assert_int_equal(auth_load_list(a, " a1 ,, b2,c3 ,"), 3);
    assert_int_equal(auth_check(a, "Bearer a1"), 0);
    assert_int_equal(auth_check(a, "Bearer b2"), 1);
    assert_int_equal(auth_check(a, "Bearer c3"), 2);
    assert_int_equal(auth_load_list(a, "ok,not ok"), -EINVAL);
}

static void test_auth_routes_need_a_key_except_health_and_metrics(void **state)
{
    struct auth *a = *state;

    assert_int_equal(add(a, "sk-x"), 0);
    assert_true(auth_route_needs_key(a, "/v1/completions"));
    assert_true(auth_route_needs_key(a, "/v1/chat/completions"));
    assert_true(auth_route_needs_key(a, "/v1/models"));
    assert_true(auth_route_needs_key(a, "/tokenize"));
    assert_true(auth_route_needs_key(a, "/detokenize"));
    assert_true(auth_route_needs_key(a, "/v1/unknown")); /* the API's space: deny by default */
    assert_false(auth_route_needs_key(a, "/unknown"));   /* not served: the front answers 404 */
    assert_false(auth_route_needs_key(a, "/healthz"));
    assert_false(auth_route_needs_key(a, "//health"));
    assert_false(auth_route_needs_key(a, "/health"));
    assert_false(auth_route_needs_key(a, "/health?verbose=1"));
    assert_false(auth_route_needs_key(a, "/metrics"));

    assert_int_equal(auth_check_request(a, "/health", NULL), AUTH_OPEN);
    assert_int_equal(auth_check_request(a, "/metrics", NULL), AUTH_OPEN);
    assert_int_equal(auth_check_request(a, "/v1/models", NULL), -EACCES);
    assert_int_equal(auth_check_request(a, "/v1/models?x=1", "Bearer sk-x"), 0);
    assert_int_equal(auth_check_request(a, "/tokenize", "Bearer sk-y"), -EACCES);
}

static void test_auth_metrics_key_guards_only_metrics(void **state)
{
    struct auth *a = *state;

    assert_int_equal(auth_set_metrics_key(a, "bad key"), -EINVAL);
    assert_false(auth_route_needs_key(a, "/metrics"));
    assert_int_equal(auth_set_metrics_key(a, "m-secret"), 0);
    /* no API keys: the API stays open, /metrics does not */
    assert_false(auth_route_needs_key(a, "/v1/completions"));
    assert_true(auth_route_needs_key(a, "/metrics"));
    assert_int_equal(auth_check_request(a, "/metrics", NULL), -EACCES);
    assert_int_equal(auth_check_request(a, "/metrics", "Bearer m-secre"), -EACCES);
    assert_int_equal(auth_check_request(a, "/metrics", "bearer m-secret"), AUTH_OPEN);
    /* an API key does not open /metrics, nor the metrics key the API */
    assert_int_equal(add(a, "sk-api"), 0);
    assert_int_equal(auth_check_request(a, "/metrics", "Bearer sk-api"), -EACCES);
    assert_int_equal(auth_check_request(a, "/v1/models", "Bearer m-secret"), -EACCES);
    assert_int_equal(auth_check_request(a, "/health", NULL), AUTH_OPEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_auth_no_keys_lets_everything_pass, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_auth_bearer_scheme_is_case_insensitive_and_blanks_are_allowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_refuses_near_misses_and_malformed_headers,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_returns_the_index_of_the_matching_key, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_auth_add_key_trims_dedupes_and_validates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_auth_load_file_skips_comments_and_blank_lines,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_load_file_names_the_bad_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_load_list_splits_on_commas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_routes_need_a_key_except_health_and_metrics,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_auth_metrics_key_guards_only_metrics, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
