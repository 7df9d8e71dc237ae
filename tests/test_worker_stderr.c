/* worker_stderr: a worker's stderr is forwarded to kiln's by whole lines, its tail is kept
 * within WORKER_STDERR_TAIL, and the last lines come out joined, printable and bounded. */
#include "../server/worker_stderr.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>

/* Run f with fd 2 on a pipe; what was forwarded is returned (malloc'd). */
static char *captured(void (*f)(struct worker_stderr *), struct worker_stderr *e)
{
    int p[2], saved = dup(STDERR_FILENO);
    char *buf = calloc(1, 65536);
    ssize_t n;
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    assert_true(dup2(p[1], STDERR_FILENO) >= 0);
    f(e);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    close(p[1]);
    n = read(p[0], buf, 65535);
    close(p[0]);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void feed_partial(struct worker_stderr *e)
{
    worker_stderr_consume(e, "one\ntw", 6);
}

static void feed_rest(struct worker_stderr *e)
{
    worker_stderr_consume(e, "o\nthree", 7);
    worker_stderr_finish(e); /* no pipe: only the unfinished line goes out, ended */
}

static void test_worker_stderr_forwards_whole_lines_only(void **state)
{
    (void)state;
    struct worker_stderr e;
    char *out;
    worker_stderr_init(&e);
    out = captured(feed_partial, &e);
    assert_string_equal(out, "one\n"); /* "tw" waits for its end */
    free(out);
    out = captured(feed_rest, &e);
    assert_string_equal(out, "two\nthree\n");
    free(out);
}

static void test_worker_stderr_last_lines_joined_and_printable(void **state)
{
    (void)state;
    struct worker_stderr e;
    char out[64];
    const char text[] = "first\nsecond \x1b[31mred\nthird\n\n";
    worker_stderr_init(&e);
    /* tail only: the bytes are not forwarded here, so feed the tail directly */
    memcpy(e.tail, text, sizeof(text) - 1);
    e.tail_len = sizeof(text) - 1;
    worker_stderr_lines(&e, 1, out, sizeof(out));
    assert_string_equal(out, "third");
    worker_stderr_lines(&e, 2, out, sizeof(out));
    assert_string_equal(out, "second ?[31mred | third");
    worker_stderr_lines(&e, 9, out, sizeof(out));
    assert_string_equal(out, "first | second ?[31mred | third");
    worker_stderr_lines(&e, 9, out, 8); /* the newest bytes when it does not fit */
    assert_true(strlen(out) < 8);
    assert_non_null(strstr("first | second ?[31mred | third", out));
}

static void feed_flood(struct worker_stderr *e)
{
    char *big = malloc(3 * WORKER_STDERR_TAIL);
    memset(big, 'a', 3 * WORKER_STDERR_TAIL);
    big[3 * WORKER_STDERR_TAIL - 1] = '\n';
    worker_stderr_consume(e, "x\n", 2);
    worker_stderr_consume(e, big, 3 * WORKER_STDERR_TAIL);
    worker_stderr_consume(e, "last\n", 5);
    free(big);
}

static void test_worker_stderr_tail_keeps_the_newest_bytes(void **state)
{
    (void)state;
    struct worker_stderr e;
    char line[16], *out;
    worker_stderr_init(&e);
    out = captured(feed_flood, &e);
    assert_int_equal(strlen(out), 2 + 3 * WORKER_STDERR_TAIL + 5); /* all of it forwarded */
    free(out);
    assert_int_equal(e.tail_len, WORKER_STDERR_TAIL);
    assert_memory_equal(e.tail + WORKER_STDERR_TAIL - 5, "last\n", 5);
    worker_stderr_lines(&e, 1, line, sizeof(line));
    assert_string_equal(line, "last");
}

static void test_worker_stderr_pipe_opens_and_closes(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct worker_stderr e;
    int child = -1;
    char *out;
    assert_non_null(base);
    worker_stderr_init(&e);
    assert_int_equal(worker_stderr_open(&e, base, &child), 0);
    assert_true(e.fd >= 0 && child >= 0);
    assert_int_equal(write(child, "from the pipe\nend", 17), 17);
    close(child);
    out = captured(worker_stderr_finish, &e); /* reads the rest, ends the last line */
    assert_string_equal(out, "from the pipe\nend\n");
    free(out);
    worker_stderr_close(&e);
    assert_int_equal(e.fd, -1);
    worker_stderr_close(&e); /* twice is fine */
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_stderr_forwards_whole_lines_only),
        cmocka_unit_test(test_worker_stderr_last_lines_joined_and_printable),
        cmocka_unit_test(test_worker_stderr_tail_keeps_the_newest_bytes),
        cmocka_unit_test(test_worker_stderr_pipe_opens_and_closes),
    };
    return cmocka_run_group_tests_name("worker_stderr", tests, NULL, NULL);
}
