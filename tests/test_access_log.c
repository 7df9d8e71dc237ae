/* The access log (access_log.c): its line's text and JSON shapes, and, against the real
 * binaries, one line per request with the right fields however it ends: a completion, a
 * stream, a 400, a stream its client left, a request whose worker crashed, a 404, a 408 and
 * a 431 the connection guard answered; in JSON to a file of its own; none with --access-log
 * off. */
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

#include "../server/access_log.h"
#include "front_util.h"
#include "log.h"

/* ---- the line's shapes ---- */

static void fill(struct access_entry *e)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->method, sizeof(e->method), "POST");
    snprintf(e->route, sizeof(e->route), "/v1/chat/completions");
    snprintf(e->client, sizeof(e->client), "10.0.0.7");
    snprintf(e->rid, sizeof(e->rid), "req-42");
    e->status = 200;
    e->tokens_in = 12;
    e->tokens_out = 34;
    e->worker = 1;
    e->t_start_us = 1000000;
    e->t_first_us = 1250000;
}

static void test_access_log_text_line_has_every_field(void **state)
{
    (void)state;
    struct access_entry e;
    char out[2048];
    fill(&e);
    size_t n = access_log_format(&e, 3500000, false, out, sizeof(out));
    assert_int_equal(n, strlen(out));
    assert_int_equal(out[n - 1], '\n');
    assert_non_null(strstr(out, " access: POST /v1/chat/completions 200 tokens_in=12 "
                                "tokens_out=34 ttft_ms=250.0 duration_ms=2500.0 worker=1 "
                                "client=10.0.0.7 request_id=req-42 end=done\n"));
    /* nothing known: dashes; a route with blanks and controls stays one token */
    e.worker = -1;
    e.t_first_us = 0;
    e.end = ACCESS_END_CLIENT_GONE;
    snprintf(e.route, sizeof(e.route), "/a b\n\"c");
    access_log_format(&e, 3500000, false, out, sizeof(out));
    assert_non_null(strstr(out, " /a?b??c 200 "));
    assert_non_null(strstr(out, " ttft_ms=- "));
    assert_non_null(strstr(out, " worker=- "));
    assert_non_null(strstr(out, " end=client_gone\n"));
    /* a start not known: no duration either */
    e.t_start_us = 0;
    access_log_format(&e, 3500000, false, out, sizeof(out));
    assert_non_null(strstr(out, " ttft_ms=- duration_ms=- "));
}

static void test_access_log_json_line_parses_with_every_field(void **state)
{
    (void)state;
    struct access_entry e;
    char out[2048];
    json_error_t jerr;
    fill(&e);
    snprintf(e.route, sizeof(e.route), "/q\"\\\x01");
    e.end = ACCESS_END_ERROR;
    access_log_format(&e, 3500000, true, out, sizeof(out));
    json_t *j = json_loads(out, 0, &jerr);
    if (!j)
        fail_msg("not JSON (%s): %s", jerr.text, out);
    assert_string_equal(json_string_value(json_object_get(j, "msg")), "access");
    assert_string_equal(json_string_value(json_object_get(j, "method")), "POST");
    assert_string_equal(json_string_value(json_object_get(j, "route")), "/q\"\\\x01");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 200);
    assert_int_equal(json_integer_value(json_object_get(j, "tokens_in")), 12);
    assert_int_equal(json_integer_value(json_object_get(j, "tokens_out")), 34);
    assert_true(json_real_value(json_object_get(j, "ttft_ms")) == 250.0);
    assert_true(json_real_value(json_object_get(j, "duration_ms")) == 2500.0);
    assert_int_equal(json_integer_value(json_object_get(j, "worker")), 1);
    assert_string_equal(json_string_value(json_object_get(j, "client")), "10.0.0.7");
    assert_string_equal(json_string_value(json_object_get(j, "request_id")), "req-42");
    assert_string_equal(json_string_value(json_object_get(j, "end")), "error");
    assert_non_null(json_object_get(j, "time"));
    json_decref(j);
    /* nothing known: null */
    e.worker = -1;
    e.t_first_us = 0;
    access_log_format(&e, 3500000, true, out, sizeof(out));
    assert_non_null(j = json_loads(out, 0, &jerr));
    assert_true(json_is_null(json_object_get(j, "worker")));
    assert_true(json_is_null(json_object_get(j, "ttft_ms")));
    json_decref(j);
}

/* ---- through the server ---- */

struct want_line {
    struct kiln_proc *p;
    const char *file; /* read this file instead of the output (NULL: the output) */
    char needle[160];
    char line[2048];
};

static bool line_found(void *arg)
{
    struct want_line *w = arg;
    static char buf[1 << 20];
    const char *text = buf;
    if (w->file) {
        FILE *fp = fopen(w->file, "r");
        size_t n = fp ? fread(buf, 1, sizeof(buf) - 1, fp) : 0;
        if (fp)
            fclose(fp);
        buf[n] = '\0';
    } else {
        text = kiln_output(w->p);
    }
    const char *at = strstr(text, w->needle);
    if (!at)
        return false;
    const char *b = at, *e = strchr(at, '\n');
    while (b > text && b[-1] != '\n')
        b--;
    if (!e)
        return false; /* not whole yet */
    snprintf(w->line, sizeof(w->line), "%.*s", (int)(e - b), b);
    return true;
}

/* The access line naming request id rid (bounded wait). */
static const char *access_line(struct want_line *w, struct kiln_proc *p, const char *file,
                               const char *rid)
{
    w->p = p;
    w->file = file;
    snprintf(w->needle, sizeof(w->needle), file ? "\"request_id\":\"%s\"" : "request_id=%s ",
             rid);
    if (!wait_until(line_found, w, 10000))
        fail_msg("no access line for %s in:\n%s", rid, kiln_output(p));
    return w->line;
}

static void expect_in(const char *line, const char *part)
{
    if (!strstr(line, part))
        fail_msg("no '%s' in the access line:\n%s", part, line);
}

static int setup(void **state)
{
    static const char *args[] = {"--model", "mock", "--mock-delay-ms", "30", "--mock-faults",
                                 NULL};
    *state = front_start(args);
    return *state ? 0 : -1;
}

static int teardown(void **state)
{
    return front_stop(*state);
}

static int post(struct kiln_proc *p, const char *path, const char *rid, const char *body,
                json_t **out)
{
    char hdr[160];
    const char *h[] = {hdr, NULL};
    struct http_response r;
    snprintf(hdr, sizeof(hdr), "X-Request-Id: %s", rid);
    int st = http_request(kiln_port(p), "POST", path, h, body, &r);
    assert_true(st > 0);
    if (out)
        *out = json_loads(r.body, 0, NULL);
    http_response_free(&r);
    return st;
}

static void test_access_log_completion_line(void **state)
{
    struct want_line w;
    json_t *j = NULL;
    char part[96];
    assert_int_equal(post(*state, "/v1/completions", "t-compl-1",
                          "{\"prompt\": \"hello\", \"max_tokens\": 4}", &j),
                     200);
    json_t *u = json_object_get(j, "usage");
    long long in = json_integer_value(json_object_get(u, "prompt_tokens"));
    long long outt = json_integer_value(json_object_get(u, "completion_tokens"));
    json_decref(j);
    const char *l = access_line(&w, *state, NULL, "t-compl-1");
    expect_in(l, " access: POST /v1/completions 200 ");
    snprintf(part, sizeof(part), " tokens_in=%lld tokens_out=%lld ttft_ms=", in, outt);
    expect_in(l, part);
    expect_in(l, " worker=0 client=127.0.0.1 request_id=t-compl-1 end=done");
    assert_null(strstr(l, "ttft_ms=-"));
}

static void test_access_log_stream_line(void **state)
{
    struct want_line w;
    const char *h[] = {"X-Request-Id: t-stream-1", NULL};
    struct http_stream *st = NULL;
    struct sse_event ev;
    int n = 0, rc;
    assert_int_equal(http_stream_open(kiln_port(*state), "POST", "/v1/chat/completions", h,
                                      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
                                      " \"max_tokens\": 3, \"stream\": true}",
                                      10000, &st),
                     200);
    while ((rc = sse_next(st, &ev, 10000)) == 1)
        n++;
    assert_int_equal(rc, 0);
    assert_true(n > 1);
    http_stream_close(st);
    const char *l = access_line(&w, *state, NULL, "t-stream-1");
    expect_in(l, " access: POST /v1/chat/completions 200 ");
    expect_in(l, " tokens_out=3 ");
    expect_in(l, " worker=0 ");
    expect_in(l, " end=done");
    assert_null(strstr(l, "ttft_ms=-"));
}

static void test_access_log_bad_request_line(void **state)
{
    struct want_line w;
    /* refused before a request exists (not JSON), and after (a bad field) */
    assert_int_equal(post(*state, "/v1/completions", "t-bad-1", "{bad", NULL), 400);
    assert_int_equal(post(*state, "/v1/completions", "t-bad-2",
                          "{\"prompt\": \"x\", \"max_tokens\": 0}", NULL),
                     400);
    const char *l = access_line(&w, *state, NULL, "t-bad-1");
    expect_in(l, " access: POST /v1/completions 400 tokens_in=0 tokens_out=0 ttft_ms=- ");
    expect_in(l, " worker=- client=127.0.0.1 request_id=t-bad-1 end=done");
    l = access_line(&w, *state, NULL, "t-bad-2");
    expect_in(l, " access: POST /v1/completions 400 ");
    expect_in(l, " worker=- ");
    /* a route that is not one, and a wrong method */
    struct http_response r;
    const char *h404[] = {"X-Request-Id: t-404-1", NULL};
    assert_int_equal(http_request(kiln_port(*state), "GET", "/nope", h404, NULL, &r), 404);
    http_response_free(&r);
    expect_in(access_line(&w, *state, NULL, "t-404-1"), " access: GET /nope 404 ");
}

static void test_access_log_cancelled_stream_line(void **state)
{
    struct want_line w;
    const char *h[] = {"X-Request-Id: t-cancel-1", NULL};
    struct http_stream *st = NULL;
    struct sse_event ev;
    /* 30 ms a token, 500 tokens: it runs long after the client leaves */
    assert_int_equal(http_stream_open(kiln_port(*state), "POST", "/v1/completions", h,
                                      "{\"prompt\": \"go\", \"max_tokens\": 500, \"stream\": true,"
                                      " \"ignore_eos\": true}",
                                      10000, &st),
                     200);
    assert_int_equal(sse_next(st, &ev, 10000), 1);
    assert_int_equal(sse_next(st, &ev, 10000), 1);
    http_stream_close(st);
    const char *l = access_line(&w, *state, NULL, "t-cancel-1");
    expect_in(l, " access: POST /v1/completions 200 ");
    expect_in(l, " worker=0 ");
    expect_in(l, " end=client_gone");
    assert_null(strstr(l, "tokens_out=500 "));
}

static void test_access_log_worker_crash_line(void **state)
{
    struct want_line w;
    assert_int_equal(post(*state, "/v1/completions", "t-crash-1",
                          "{\"prompt\": \"[[kiln:segv]]\", \"max_tokens\": 8}", NULL),
                     500);
    const char *l = access_line(&w, *state, NULL, "t-crash-1");
    expect_in(l, " access: POST /v1/completions 500 ");
    expect_in(l, " worker=0 ");
    expect_in(l, " end=error");
    /* the front's log names the request the crash took, with the crash's error id */
    w.p = *state;
    w.file = NULL;
    snprintf(w.needle, sizeof(w.needle), "%s",
             " [t-crash-1]: lost: worker 0 crashed (signal 11) while running this request");
    if (!wait_until(line_found, &w, 10000))
        fail_msg("no line names the lost request in:\n%s", kiln_output(*state));
    expect_in(w.line, "WARN request ");
    expect_in(w.line, "(error id ");
}

static void test_access_log_socket_refusals_408_and_431(void **state)
{
    (void)state;
    struct want_line w;
    struct http_response r;
    const char *args[] = {"--model", "mock", "--header-timeout-ms", "300", NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    /* headers that never end: 408 once --header-timeout-ms passed */
    int fd = http_raw_connect(kiln_port(p));
    assert_true(fd >= 0);
    const char *part = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    assert_int_equal(http_raw_send(fd, part, strlen(part)), 0);
    assert_int_equal(http_raw_read_response(fd, &r, 10000), 408);
    /* the refusal carries an id, and its line has it and the time since the first byte */
    char rid[64], want[128];
    const char *h = http_header_get(&r, "X-Request-Id");
    assert_non_null(h);
    assert_int_equal(strlen(h), 32);
    snprintf(rid, sizeof(rid), "%s", h);
    http_response_free(&r);
    close(fd);
    w.p = p;
    w.file = NULL;
    snprintf(w.needle, sizeof(w.needle), " access: - - 408 ");
    if (!wait_until(line_found, &w, 10000))
        fail_msg("no 408 access line in:\n%s", kiln_output(p));
    expect_in(w.line, " tokens_in=0 tokens_out=0 ttft_ms=- duration_ms=");
    assert_null(strstr(w.line, "duration_ms=-"));
    snprintf(want, sizeof(want), " worker=- client=127.0.0.1 request_id=%s end=done", rid);
    expect_in(w.line, want);
    /* headers over --max-header-bytes: 431 */
    static char big[20000];
    int n = snprintf(big, sizeof(big), "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(big + n, 'a', sizeof(big) - (size_t)n - 5);
    memcpy(big + sizeof(big) - 5, "\r\n\r\n", 5);
    assert_true((fd = http_raw_connect(kiln_port(p))) >= 0);
    assert_int_equal(http_raw_send(fd, big, sizeof(big) - 1), 0);
    assert_int_equal(http_raw_read_response(fd, &r, 10000), 431);
    assert_non_null(h = http_header_get(&r, "X-Request-Id"));
    snprintf(want, sizeof(want), " request_id=%s end=done", h);
    http_response_free(&r);
    close(fd);
    snprintf(w.needle, sizeof(w.needle), " access: - - 431 ");
    if (!wait_until(line_found, &w, 10000))
        fail_msg("no 431 access line in:\n%s", kiln_output(p));
    expect_in(w.line, want);
    assert_null(strstr(w.line, "duration_ms=-"));
    assert_int_equal(front_stop(p), 0);
}

static void test_access_log_file_opened_anew_on_sighup_after_a_rotation(void **state)
{
    (void)state;
    struct want_line w;
    char path[64], moved[80];
    snprintf(path, sizeof(path), "/tmp/kiln-access-rot-%ld.log", (long)getpid());
    snprintf(moved, sizeof(moved), "%s.1", path);
    unlink(path);
    unlink(moved);
    const char *args[] = {"--model", "mock", "--access-log", path, NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    assert_int_equal(post(p, "/v1/completions", "t-rot-1", "{\"prompt\": \"a\", \"max_tokens\": 1}",
                          NULL),
                     200);
    w.p = p;
    w.file = path;
    snprintf(w.needle, sizeof(w.needle), "request_id=t-rot-1 ");
    assert_true(wait_until(line_found, &w, 10000));
    /* logrotate moves it, then reloads */
    assert_int_equal(rename(path, moved), 0);
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    w.file = NULL;
    snprintf(w.needle, sizeof(w.needle), "reload: 0 API key(s)");
    assert_true(wait_until(line_found, &w, 10000));
    assert_int_equal(post(p, "/v1/completions", "t-rot-2", "{\"prompt\": \"a\", \"max_tokens\": 1}",
                          NULL),
                     200);
    w.file = path;
    snprintf(w.needle, sizeof(w.needle), "request_id=t-rot-2 ");
    if (!wait_until(line_found, &w, 10000))
        fail_msg("no line in the new %s after SIGHUP", path);
    w.file = moved;
    assert_false(line_found(&w)); /* the old file got nothing more */
    assert_int_equal(front_stop(p), 0);
    unlink(path);
    unlink(moved);
}

static void test_access_log_json_to_a_file_and_off(void **state)
{
    (void)state;
    struct want_line w;
    char path[64];
    json_error_t jerr;
    snprintf(path, sizeof(path), "/tmp/kiln-access-%ld.log", (long)getpid());
    unlink(path);
    const char *args[] = {"--model", "mock", "--log-format", "json", "--access-log", path, NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    assert_int_equal(post(p, "/v1/completions", "t-json-1",
                          "{\"prompt\": \"hello\", \"max_tokens\": 2}", NULL),
                     200);
    json_t *j = json_loads(access_line(&w, p, path, "t-json-1"), 0, &jerr);
    if (!j)
        fail_msg("not JSON (%s): %s", jerr.text, w.line);
    assert_string_equal(json_string_value(json_object_get(j, "route")), "/v1/completions");
    assert_int_equal(json_integer_value(json_object_get(j, "status")), 200);
    assert_int_equal(json_integer_value(json_object_get(j, "tokens_out")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "worker")), 0);
    assert_string_equal(json_string_value(json_object_get(j, "end")), "done");
    assert_true(json_is_real(json_object_get(j, "ttft_ms")));
    json_decref(j);
    /* in the file, not on stderr */
    assert_false(kiln_output_contains(p, "t-json-1\",\"end\""));
    assert_int_equal(front_stop(p), 0);
    unlink(path);

    const char *off[] = {"--model", "mock", "--access-log", "off", NULL};
    p = front_start(off);
    assert_non_null(p);
    assert_int_equal(post(p, "/v1/completions", "t-off-1", "{\"prompt\": \"hi\", \"max_tokens\": 2}",
                          NULL),
                     200);
    assert_int_equal(post(p, "/v1/completions", "t-off-2", "{bad", NULL), 400);
    /* a line written after theirs would have been: the reload's */
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    w.p = p;
    w.file = NULL;
    snprintf(w.needle, sizeof(w.needle), "reload: 0 API key(s)");
    assert_true(wait_until(line_found, &w, 10000));
    assert_false(kiln_output_contains(p, "t-off-1"));
    assert_false(kiln_output_contains(p, "t-off-2"));
    assert_int_equal(front_stop(p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_access_log_text_line_has_every_field),
        cmocka_unit_test(test_access_log_json_line_parses_with_every_field),
        cmocka_unit_test_setup_teardown(test_access_log_completion_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_log_stream_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_log_bad_request_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_log_cancelled_stream_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_log_worker_crash_line, setup, teardown),
        cmocka_unit_test(test_access_log_socket_refusals_408_and_431),
        cmocka_unit_test(test_access_log_file_opened_anew_on_sighup_after_a_rotation),
        cmocka_unit_test(test_access_log_json_to_a_file_and_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
