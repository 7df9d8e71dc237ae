/* Integration tests of SIGHUP's live settings (reload.c): API keys and rate limits read again
 * from the config file take effect for the next request, on connections already open; a key
 * file gone bad keeps the old keys. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

struct seen {
    struct kiln_proc *p;
    const char *text;
    int times; /* how many times text must be in the output */
};

static bool output_has(void *arg)
{
    struct seen *s = arg;
    const char *o = kiln_output(s->p);
    int n = 0;
    for (const char *q = o; (q = strstr(q, s->text)); q++)
        n++;
    return n >= s->times;
}

/* SIGHUP, then wait (bounded) for the times-th "reload: ... API key(s)" or "nothing changed". */
static void reload(struct kiln_proc *p, const char *mark, int times)
{
    struct seen s = {p, mark, times};
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    if (!wait_until(output_has, &s, 10000))
        fail_msg("no %d x '%s' after SIGHUP:\n%s", times, mark, kiln_output(p));
}

/* GET /v1/models on c with "Authorization: Bearer key"; the status. */
static int models_with_key(struct http_conn *c, const char *key)
{
    char req[256];
    struct http_response r;
    snprintf(req, sizeof(req),
             "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", key);
    assert_int_equal(http_raw_send(http_conn_fd(c), req, strlen(req)), 0);
    int st = http_conn_read_response(c, "GET", &r, 10000);
    if (st > 0)
        http_response_free(&r);
    return st;
}

static void test_reload_new_api_key_replaces_the_old_on_an_open_connection(void **state)
{
    (void)state;
    char path[64];
    struct http_conn *c = NULL;
    snprintf(path, sizeof(path), "/tmp/kiln-reload-keys-%ld.conf", (long)getpid());
    write_file(path, "model = mock\napi-key = old-key-1\n");
    const char *args[] = {"--config", path, NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    assert_int_equal(http_conn_open(kiln_port(p), &c), 0);
    assert_int_equal(models_with_key(c, "old-key-1"), 200);
    assert_int_equal(models_with_key(c, "new-key-2"), 401);

    write_file(path, "model = mock\napi-key = new-key-2\n");
    reload(p, "reload: 1 API key(s)", 1);
    /* the same connection, never dropped: the old key is refused, the new one taken */
    assert_int_equal(models_with_key(c, "old-key-1"), 401);
    assert_int_equal(models_with_key(c, "new-key-2"), 200);

    /* a key file that cannot be read: nothing changes */
    write_file(path, "model = mock\napi-key-file = /nonexistent/kiln-keys\n");
    reload(p, "nothing changed", 1);
    assert_int_equal(models_with_key(c, "new-key-2"), 200);
    assert_int_equal(http_conn_wait_closed(c, 0), 0);
    http_conn_close(c);
    assert_int_equal(front_stop(p), 0);
    unlink(path);
}

static void test_reload_turns_a_rate_limit_on_and_off(void **state)
{
    (void)state;
    char path[64];
    struct http_conn *c = NULL;
    snprintf(path, sizeof(path), "/tmp/kiln-reload-rate-%ld.conf", (long)getpid());
    write_file(path, "model = mock\n");
    const char *args[] = {"--config", path, NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    assert_int_equal(http_conn_open(kiln_port(p), &c), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(models_with_key(c, "any"), 200);

    /* one request a second, burst 1: the second at once is refused */
    write_file(path, "model = mock\nrate-limit = 1\nrate-burst = 1\n");
    reload(p, "rate limit 1/s (burst 1)", 1);
    assert_int_equal(models_with_key(c, "any"), 200);
    assert_int_equal(models_with_key(c, "any"), 429);

    write_file(path, "model = mock\n");
    reload(p, "rate limit 0/s", 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(models_with_key(c, "any"), 200);
    http_conn_close(c);
    assert_int_equal(front_stop(p), 0);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload_new_api_key_replaces_the_old_on_an_open_connection),
        cmocka_unit_test(test_reload_turns_a_rate_limit_on_and_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
