/* log.c: a line that repeats in a loop is written a few times a second, not millions, and
 * the next line written says how many were left out. stderr is captured through a pipe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

/* Run fn with stderr going to a pipe; its output in buf. */
static void capture(void (*fn)(void), char *buf, size_t cap)
{
    int p[2], saved = dup(STDERR_FILENO);
    assert_int_equal(pipe(p), 0);
    dup2(p[1], STDERR_FILENO);
    close(p[1]);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = read(p[0], buf, cap - 1);
    close(p[0]);
    buf[n > 0 ? n : 0] = '\0';
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (; (s = strstr(s, needle)); s++)
        n++;
    return n;
}

static void repeat_many(void)
{
    for (int i = 0; i < 300; i++) /* unlimited, 30 KB: within a pipe's 64 KB */
        log_warn("accept failed: %s", "Too many open files");
    log_info("a different line");
}

static void test_log_a_repeated_line_is_rate_limited(void **state)
{
    static char out[65536];
    (void)state;
    log_init("test", LOG_LEVEL_INFO);
    capture(repeat_many, out, sizeof(out));
    int n = count(out, "accept failed");
    /* a few per second (the loop may straddle a second boundary) */
    assert_true(n >= 1 && n <= 6);
    assert_int_equal(count(out, "a different line"), 1);
    assert_non_null(strstr(out, "more like the last line"));
}

static void alternate(void)
{
    for (int i = 0; i < 5; i++) {
        log_info("one %d", i);
        log_info("two %d", i);
    }
}

static void test_log_different_lines_are_all_written(void **state)
{
    static char out[8192];
    (void)state;
    log_init("test", LOG_LEVEL_INFO);
    capture(alternate, out, sizeof(out));
    assert_int_equal(count(out, "one "), 5);
    assert_int_equal(count(out, "two "), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_a_repeated_line_is_rate_limited),
        cmocka_unit_test(test_log_different_lines_are_all_written),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
