/* Tests of the request-framing guard: the tracker alone, fed byte by byte and in pieces
 * (Content-Length, chunked, pipelined requests, split CRLFs, the header limit, oversize bodies
 * declared or chunked, malformed framing), then `kiln --model mock` answering requests over its
 * limits with OpenAI-shaped JSON (413, 431) while normal and pipelined requests still work. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../server/http_guard.h"
#include "front_util.h"

#define MAX_BODY 4096
#define MAX_HEADER 1024

/* ---- the tracker ---- */

/* Feed s in pieces of step bytes (0: all at once); returns the bytes consumed. */
static size_t feed_steps(struct http_guard *g, const char *s, size_t n, size_t step)
{
    size_t off = 0;
    if (step == 0)
        step = n;
    while (off < n) {
        size_t k = n - off < step ? n - off : step;
        size_t used = http_guard_feed(g, s + off, k);
        off += used;
        if (used < k)
            break;
    }
    return off;
}

static const size_t steps[] = {0, 1, 2, 3, 7, 64};
#define N_STEPS (sizeof(steps) / sizeof(steps[0]))

/* Every way of cutting s: the same requests and verdict. */
static void expect_all_steps(const char *s, uint64_t want_requests,
                             enum http_guard_verdict want, size_t want_consumed)
{
    for (size_t i = 0; i < N_STEPS; i++) {
        struct http_guard g;
        http_guard_init(&g, MAX_BODY, MAX_HEADER);
        size_t used = feed_steps(&g, s, strlen(s), steps[i]);
        assert_int_equal(g.requests, want_requests);
        assert_int_equal(g.verdict, want);
        assert_int_equal(used, want_consumed);
    }
}

static void test_http_guard_content_length_body_is_one_request(void **state)
{
    (void)state;
    const char *s = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    expect_all_steps(s, 1, HTTP_GUARD_OK, strlen(s));
}

static void test_http_guard_holds_an_incomplete_header_block(void **state)
{
    (void)state;
    struct http_guard g;
    const char *s = "POST / HTTP/1.1\r\nContent-Length: 3\r\n";
    http_guard_init(&g, MAX_BODY, MAX_HEADER);
    assert_int_equal(http_guard_feed(&g, s, strlen(s)), strlen(s));
    assert_int_equal(http_guard_held(&g), strlen(s)); /* nothing of it may pass yet */
    assert_int_equal(http_guard_feed(&g, "\r\n", 2), 2);
    assert_int_equal(http_guard_held(&g), 0);         /* whole: it passes, the body follows */
    assert_int_equal(g.state, HTTP_GUARD_ST_BODY);
    assert_int_equal(http_guard_feed(&g, "abc", 3), 3);
    assert_int_equal(g.requests, 1);
}

static void test_http_guard_chunked_body_with_trailers(void **state)
{
    (void)state;
    const char *s = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\nhello\r\n1a ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\n";
    expect_all_steps(s, 1, HTTP_GUARD_OK, strlen(s));
}

static void test_http_guard_pipelined_requests_are_counted(void **state)
{
    (void)state;
    const char *s = "GET /health HTTP/1.1\r\n\r\n"
                    "POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
                    "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
                    "GET /health HTTP/1.1\r\nContent-Length: 4\r\n\r\n";
    /* GET carries no body for libevent: its Content-Length frames nothing */
    expect_all_steps(s, 4, HTTP_GUARD_OK, strlen(s));
}

static void test_http_guard_bare_lf_and_split_crlf_end_a_header_block(void **state)
{
    (void)state;
    static const char *const ok[] = {
        "POST / HTTP/1.1\nContent-Length: 1\n\nx",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\n\nx",
        "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", /* a lone CR is part of a line, not its end */
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        expect_all_steps(ok[i], 1, HTTP_GUARD_OK, strlen(ok[i]));
}

static void test_http_guard_header_block_over_limit_is_431(void **state)
{
    (void)state;
    size_t n = MAX_HEADER + 200;
    char *s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, "GET / HTTP/1.1\r\nX-Big: ", 23);
    memset(s + 23, 'a', n - 23);
    s[n] = '\0';
    expect_all_steps(s, 0, HTTP_GUARD_HEADERS_TOO_LARGE, MAX_HEADER);
    struct http_guard g;
    http_guard_init(&g, MAX_BODY, MAX_HEADER);
    http_guard_feed(&g, s, n);
    assert_int_equal(http_guard_held(&g), MAX_HEADER); /* all of it is dropped */
    assert_int_equal(http_guard_status(g.verdict), 431);
    free(s);
}

static void test_http_guard_declared_body_over_limit_is_413_before_the_body(void **state)
{
    (void)state;
    const char *ok = "GET / HTTP/1.1\r\n\r\n";
    const char *bad = "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4097\r\n\r\n";
    char s[256];
    snprintf(s, sizeof(s), "%s%s", ok, bad);
    /* decided at the header block's last byte: no body byte is needed */
    expect_all_steps(s, 1, HTTP_GUARD_BODY_TOO_LARGE, strlen(s) - 1);
    struct http_guard g;
    http_guard_init(&g, MAX_BODY, MAX_HEADER);
    size_t used = http_guard_feed(&g, s, strlen(s));
    /* the bytes before the bad request pass; the bad one's are held (dropped) */
    assert_int_equal(used - http_guard_held(&g), strlen(ok));
    assert_int_equal(http_guard_status(g.verdict), 413);
    /* exactly the limit is fine */
    const char *limit = "POST / HTTP/1.1\r\nContent-Length: 4096\r\n\r\n";
    expect_all_steps(limit, 0, HTTP_GUARD_OK, strlen(limit));
}

static void test_http_guard_chunked_total_over_limit_is_413(void **state)
{
    (void)state;
    /* 0xf00 + 0x100 = 4096 is fine; one more byte is not */
    const char *head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nf00\r\n";
    expect_all_steps(head, 0, HTTP_GUARD_OK, strlen(head));
    struct http_guard g;
    http_guard_init(&g, MAX_BODY, MAX_HEADER);
    assert_int_equal(http_guard_feed(&g, head, strlen(head)), strlen(head));
    char *data = calloc(1, 0xf00);
    assert_non_null(data);
    assert_int_equal(http_guard_feed(&g, data, 0xf00), 0xf00);
    free(data);
    assert_int_equal(http_guard_feed(&g, "\r\n101\r\n", 7), 6); /* stops at the line's end */
    assert_int_equal(g.verdict, HTTP_GUARD_BODY_TOO_LARGE);
    assert_int_equal(http_guard_held(&g), 0); /* the headers and body so far already passed */
    assert_int_equal(http_guard_feed(&g, "x", 1), 0);   /* and nothing more is taken */
}

static void test_http_guard_malformed_framing_is_400(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "POST / HTTP/1.1\r\nContent-Length: 12x\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length : 1\r\n\r\n",
        "POST / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x\r\n",
        "POST / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct http_guard g;
        http_guard_init(&g, MAX_BODY, MAX_HEADER);
        http_guard_feed(&g, bad[i], strlen(bad[i]));
        if (g.verdict != HTTP_GUARD_MALFORMED)
            fail_msg("not refused: %s", bad[i]);
        assert_int_equal(http_guard_status(g.verdict), 400);
    }
}

/* ---- against kiln ---- */

static int server_setup(void **state)
{
    static const char *args[] = {"--model", "mock", "--workers", "1", "--mock-reply", MOCK_REPLY,
                                 "--max-body-bytes", "4096", "--max-header-bytes", "1024",
                                 NULL};
    struct kiln_proc *p = front_start(args);
    if (!p)
        return -1;
    *state = p;
    return 0;
}

static int server_teardown(void **state)
{
    int rc = *state ? front_stop(*state) : 0;
    *state = NULL;
    return rc;
}

/* An OpenAI error body with this type and code. */
static void assert_openai_error(const struct http_response *r, const char *code)
{
    json_t *j = json_loads(r->body, 0, NULL);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_true(json_is_string(json_object_get(e, "message")));
    assert_string_equal(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    assert_true(json_is_null(json_object_get(e, "param")));
    assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    json_decref(j);
    const char *ct = http_header_get(r, "Content-Type");
    assert_non_null(ct);
    assert_string_equal(ct, "application/json");
}

static void assert_still_serves(int port)
{
    json_t *j;
    int st = front_call(port, "POST", "/v1/completions", "{\"prompt\":\"hi\",\"max_tokens\":4}",
                        &j, NULL);
    assert_int_equal(st, 200);
    assert_non_null(json_object_get(j, "choices"));
    json_decref(j);
}

/* ---- answers to pipelined requests ----
 * http_raw_read_response reads ahead (whatever one recv brings) and drops what follows the
 * answer it returns: when kiln writes the second answer before the client has read the first,
 * both arrive in one recv and the second is lost (its read times out). So the answers on one
 * connection are gathered here, cut whole (kiln frames them with Content-Length), and each is
 * parsed by the client's own parser through a socketpair holding exactly its bytes. */
struct answers {
    int fd;
    size_t len;
    char buf[16384];
};

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The length of the whole answer at the front of p, 0 while it is incomplete, -EPROTO when it
 * has no Content-Length. */
static long answer_len(const char *p, size_t n)
{
    const char *end = memmem(p, n, "\r\n\r\n", 4);
    static const char cl[] = "\r\ncontent-length:";
    if (!end)
        return 0;
    for (const char *h = p; h + sizeof(cl) - 1 <= end; h++) {
        if (strncasecmp(h, cl, sizeof(cl) - 1) == 0) {
            size_t head = (size_t)(end - p) + 4;
            size_t body = strtoul(h + sizeof(cl) - 1, NULL, 10);
            return head + body <= n ? (long)(head + body) : 0;
        }
    }
    return -EPROTO;
}

/* Read until `want` whole answers are gathered. Returns 0 or -errno. */
static int answers_gather(struct answers *a, int want, int timeout_ms)
{
    long long deadline = mono_ms() + timeout_ms;
    for (;;) {
        size_t off = 0;
        int have = 0;
        long k;
        while (have < want && (k = answer_len(a->buf + off, a->len - off)) > 0) {
            off += (size_t)k;
            have++;
        }
        if (have == want)
            return 0;
        if (k < 0)
            return (int)k;
        if (a->len == sizeof(a->buf))
            return -EMSGSIZE;
        long long left = deadline - mono_ms();
        struct pollfd pfd = {.fd = a->fd, .events = POLLIN};
        int r = left > 0 ? poll(&pfd, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -ETIMEDOUT;
        ssize_t n = recv(a->fd, a->buf + a->len, sizeof(a->buf) - a->len, 0);
        if (n == 0)
            return -ECONNRESET;
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n > 0)
            a->len += (size_t)n;
    }
}

/* The next gathered answer, parsed. Returns its status or -errno. */
static int answers_next(struct answers *a, struct http_response *r)
{
    int sv[2], st;
    long k = answer_len(a->buf, a->len);
    if (k <= 0)
        return k < 0 ? (int)k : -ENODATA;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    if (write(sv[0], a->buf, (size_t)k) != k) {
        close(sv[0]);
        close(sv[1]);
        return -EIO;
    }
    close(sv[0]);
    st = http_raw_read_response(sv[1], r, 1000);
    close(sv[1]);
    a->len -= (size_t)k;
    memmove(a->buf, a->buf + k, a->len);
    return st;
}

static void test_http_guard_body_over_limit_is_413_json(void **state)
{
    int port = kiln_port(*state);
    size_t n = 8192;
    char *body = malloc(n);
    assert_non_null(body);
    memset(body, ' ', n);
    body[0] = '{';
    body[n - 1] = '}';
    struct http_response r;
    int st = http_request_ex(port, "POST", "/v1/completions", NULL, body, n, 10000, &r);
    free(body);
    assert_int_equal(st, 413);
    assert_openai_error(&r, "request_too_large");
    assert_string_equal(http_header_get(&r, "Connection"), "close");
    http_response_free(&r);
    assert_still_serves(port);
}

static void test_http_guard_declared_oversize_is_refused_without_the_body(void **state)
{
    int port = kiln_port(*state);
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    /* Expect: 100-continue and no body sent: the answer must come without it */
    const char *req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                      "\r\nExpect: 100-continue\r\nContent-Length: 1000000\r\n\r\n";
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    struct http_response r;
    assert_int_equal(http_raw_read_response(fd, &r, 10000), 413);
    assert_openai_error(&r, "request_too_large");
    http_response_free(&r);
    close(fd);
    assert_still_serves(port);
}

static void test_http_guard_chunked_body_over_limit_is_413_json(void **state)
{
    int port = kiln_port(*state);
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                       "\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_int_equal(http_raw_send(fd, head, strlen(head)), 0);
    char chunk[1024 + 16];
    int k = snprintf(chunk, sizeof(chunk), "400\r\n");
    memset(chunk + k, ' ', 1024);
    memcpy(chunk + k + 1024, "\r\n", 2);
    /* five chunks of 1 KiB: the fifth passes 4096 */
    for (int i = 0; i < 5; i++)
        if (http_raw_send(fd, chunk, (size_t)k + 1026) < 0)
            break; /* refused and closed already */
    struct http_response r;
    assert_int_equal(http_raw_read_response(fd, &r, 10000), 413);
    assert_openai_error(&r, "request_too_large");
    http_response_free(&r);
    close(fd);
    assert_still_serves(port);
}

static void test_http_guard_headers_over_limit_are_431_json(void **state)
{
    int port = kiln_port(*state);
    char big[2048];
    memcpy(big, "X-Big: ", 7);
    memset(big + 7, 'a', sizeof(big) - 8);
    big[sizeof(big) - 1] = '\0';
    const char *headers[] = {big, NULL};
    struct http_response r;
    int st = http_request(port, "GET", "/health", headers, NULL, &r);
    assert_int_equal(st, 431);
    assert_openai_error(&r, "request_header_fields_too_large");
    http_response_free(&r);
    assert_still_serves(port);
}

static void test_http_guard_pipelined_requests_are_all_answered(void **state)
{
    int port = kiln_port(*state);
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    const char *body = "{\"prompt\":\"hi\",\"max_tokens\":4}";
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     "\r\nContent-Length: %zu\r\n\r\n%s"
                     "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                     strlen(body), body);
    assert_int_equal(http_raw_send(fd, req, (size_t)n), 0); /* one write: both at once */
    /* both answers are in hand before either is parsed: the case a read-ahead loses */
    struct answers a = {.fd = fd};
    assert_int_equal(answers_gather(&a, 2, 10000), 0);
    struct http_response r;
    assert_int_equal(answers_next(&a, &r), 200);
    assert_non_null(strstr(r.body, "choices"));
    http_response_free(&r);
    assert_int_equal(answers_next(&a, &r), 200);
    assert_non_null(strstr(r.body, "status"));
    http_response_free(&r);
    assert_int_equal(a.len, 0);
    close(fd);
}

static void test_http_guard_pipelined_request_before_a_refused_one_is_answered(void **state)
{
    int port = kiln_port(*state);
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    /* a generation (answered later, by a worker) then a request over the limit, in one write:
     * the first answer must come first and whole, then the 413 */
    const char *body = "{\"prompt\":\"hi\",\"max_tokens\":8}";
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     "\r\nContent-Length: %zu\r\n\r\n%s"
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n",
                     strlen(body), body);
    assert_int_equal(http_raw_send(fd, req, (size_t)n), 0);
    struct answers a = {.fd = fd};
    assert_int_equal(answers_gather(&a, 2, 10000), 0);
    struct http_response r;
    assert_int_equal(answers_next(&a, &r), 200);
    assert_non_null(strstr(r.body, "choices"));
    http_response_free(&r);
    assert_int_equal(answers_next(&a, &r), 413);
    assert_openai_error(&r, "request_too_large");
    http_response_free(&r);
    /* and then the connection ends, with nothing after the 413 */
    assert_int_equal(a.len, 0);
    char *rest = NULL;
    size_t len = 0;
    assert_int_equal(http_raw_read_all(fd, &rest, &len, 10000), 0);
    assert_int_equal(len, 0);
    free(rest);
    close(fd);
    assert_still_serves(port);
    assert_false(proc_gone(kiln_pid(*state)));
}

int main(void)
{
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_http_guard_content_length_body_is_one_request),
        cmocka_unit_test(test_http_guard_holds_an_incomplete_header_block),
        cmocka_unit_test(test_http_guard_chunked_body_with_trailers),
        cmocka_unit_test(test_http_guard_pipelined_requests_are_counted),
        cmocka_unit_test(test_http_guard_bare_lf_and_split_crlf_end_a_header_block),
        cmocka_unit_test(test_http_guard_header_block_over_limit_is_431),
        cmocka_unit_test(test_http_guard_declared_body_over_limit_is_413_before_the_body),
        cmocka_unit_test(test_http_guard_chunked_total_over_limit_is_413),
        cmocka_unit_test(test_http_guard_malformed_framing_is_400),
    };
    const struct CMUnitTest server[] = {
        cmocka_unit_test(test_http_guard_body_over_limit_is_413_json),
        cmocka_unit_test(test_http_guard_declared_oversize_is_refused_without_the_body),
        cmocka_unit_test(test_http_guard_chunked_body_over_limit_is_413_json),
        cmocka_unit_test(test_http_guard_headers_over_limit_are_431_json),
        cmocka_unit_test(test_http_guard_pipelined_requests_are_all_answered),
        cmocka_unit_test(test_http_guard_pipelined_request_before_a_refused_one_is_answered),
    };
    int rc = cmocka_run_group_tests_name("http_guard", unit, NULL, NULL);
    rc += cmocka_run_group_tests_name("http_guard_kiln", server, server_setup, server_teardown);
    return rc;
}
