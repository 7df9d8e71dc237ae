/* Tests of the front's HTTP connection layer (server/http.c, http_conn.c, http_response.c)
 * against `kiln --model mock`: requests over its limits or with framing the parser refuses are
 * answered with OpenAI-shaped JSON (413, 431, 400) and Connection: close, after the answers to
 * the requests pipelined before them, while normal and pipelined requests still work. The
 * parser alone is tests/test_http_parse.c's. */
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

#include "front_util.h"

#define MAX_BODY 4096
#define MAX_HEADER 1024

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

/* An OpenAI error body of type invalid_request_error (any code). */
static void assert_openai_error_type(const struct http_response *r)
{
    json_t *j = json_loads(r->body, 0, NULL);
    assert_non_null(j);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_string(json_object_get(e, "message")));
    assert_string_equal(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    json_decref(j);
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

static void test_http_body_over_limit_is_413_json(void **state)
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

static void test_http_declared_oversize_is_refused_without_the_body(void **state)
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

static void test_http_chunked_body_over_limit_is_413_json(void **state)
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

static void test_http_headers_over_limit_are_431_json(void **state)
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

static void test_http_pipelined_requests_are_all_answered(void **state)
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

static void test_http_pipelined_request_before_a_refused_one_is_answered(void **state)
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

/* Send req alone on a new connection; the answer's status (the body parsed into r). */
static int raw_exchange(int port, const char *req, struct http_response *r)
{
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    int st = http_raw_read_response(fd, r, 10000);
    close(fd);
    return st;
}

static void test_http_refused_framing_is_json_with_its_status(void **state)
{
    int port = kiln_port(*state);
    static const struct {
        const char *req;
        int status;
    } cases[] = {
        {"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n"
         "Transfer-Encoding: chunked\r\n\r\n", 400},
        {"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", 400},
        {"GET /health HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400},
        {"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"GET /health HTTP/2.0\r\n\r\n", 505},
        {"POST /v1/completions HTTP/1.1\r\nExpect: a-miracle\r\nContent-Length: 2\r\n\r\n{}", 417},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct http_response r;
        int st = raw_exchange(port, cases[i].req, &r);
        if (st != cases[i].status)
            fail_msg("%d, not %d, for: %s", st, cases[i].status, cases[i].req);
        json_t *j = json_loads(r.body, 0, NULL);
        assert_non_null(j);
        assert_true(json_is_string(json_object_get(json_object_get(j, "error"), "message")));
        json_decref(j);
        assert_string_equal(http_header_get(&r, "Connection"), "close");
        http_response_free(&r);
    }
    assert_still_serves(port);
}

static void test_http_head_http10_and_expect_continue(void **state)
{
    int port = kiln_port(*state);
    struct http_response r;
    char *all = NULL;
    size_t len = 0;
    /* HEAD: the GET's headers (its length) and no body */
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    const char *req = "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    assert_int_equal(http_raw_read_all(fd, &all, &len, 10000), 0);
    assert_true(len > 12 && memcmp(all, "HTTP/1.1 200", 12) == 0);
    assert_non_null(strcasestr(all, "\r\nContent-Length: "));
    assert_non_null(strstr(all, "\r\nConnection: close\r\n"));
    assert_memory_equal(all + len - 4, "\r\n\r\n", 4); /* nothing after the headers */
    free(all);
    close(fd);
    /* HTTP/1.0 without keep-alive: answered in 1.0, then the connection ends */
    fd = http_raw_connect(port);
    assert_true(fd >= 0);
    req = "GET /health HTTP/1.0\r\n\r\n";
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    all = NULL;
    len = 0;
    assert_int_equal(http_raw_read_all(fd, &all, &len, 10000), 0);
    assert_true(len > 12 && memcmp(all, "HTTP/1.0 200", 12) == 0);
    assert_non_null(strstr(all, "\"status\""));
    free(all);
    close(fd);
    /* Expect: 100-continue: the interim answer comes before the body is sent */
    fd = http_raw_connect(port);
    assert_true(fd >= 0);
    const char *body = "{\"prompt\":\"hi\",\"max_tokens\":4}";
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     strlen(body));
    assert_int_equal(http_raw_send(fd, head, (size_t)n), 0);
    char got[64];
    size_t have = 0;
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    while (have < sizeof(cont) - 1) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&pfd, 1, 10000), 1);
        ssize_t k = recv(fd, got + have, sizeof(cont) - 1 - have, 0);
        assert_true(k > 0);
        have += (size_t)k;
    }
    assert_memory_equal(got, cont, sizeof(cont) - 1);
    assert_int_equal(http_raw_send(fd, body, strlen(body)), 0);
    assert_int_equal(http_raw_read_response(fd, &r, 10000), 200);
    assert_non_null(strstr(r.body, "choices"));
    http_response_free(&r);
    close(fd);
}

static void test_http_target_without_a_path_is_400_json(void **state)
{
    int port = kiln_port(*state);
    struct http_response r;
    /* absolute-form names a path; "*" and an authority do not */
    assert_int_equal(raw_exchange(port, "GET http://x/health HTTP/1.1\r\nHost: x\r\n\r\n", &r),
                     200);
    http_response_free(&r);
    assert_int_equal(raw_exchange(port, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", &r), 400);
    assert_openai_error_type(&r);
    http_response_free(&r);
}

int main(void)
{
    const struct CMUnitTest server[] = {
        cmocka_unit_test(test_http_body_over_limit_is_413_json),
        cmocka_unit_test(test_http_declared_oversize_is_refused_without_the_body),
        cmocka_unit_test(test_http_chunked_body_over_limit_is_413_json),
        cmocka_unit_test(test_http_headers_over_limit_are_431_json),
        cmocka_unit_test(test_http_pipelined_requests_are_all_answered),
        cmocka_unit_test(test_http_pipelined_request_before_a_refused_one_is_answered),
        cmocka_unit_test(test_http_refused_framing_is_json_with_its_status),
        cmocka_unit_test(test_http_head_http10_and_expect_continue),
        cmocka_unit_test(test_http_target_without_a_path_is_400_json),
    };
    return cmocka_run_group_tests_name("http", server, server_setup, server_teardown);
}
