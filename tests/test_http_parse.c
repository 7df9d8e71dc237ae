/* Tests of kiln's HTTP/1.1 request parser, fed whole and in every cut: request line and
 * headers, Content-Length and chunked bodies (with extensions and trailers), pipelined
 * requests, keep-alive and Expect, the limits (413, 431), and what it refuses as ambiguous
 * framing (obs-fold, CL with TE, two Content-Lengths, other codings, bad versions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "../server/http_parse.h"

#define MAX_BODY 4096
#define MAX_HEADER 1024

struct got {
    int requests;          /* whole requests parsed */
    int status;            /* refusal status, 0 for none */
    char body[8192];       /* the last request's body */
    char target[256];      /* the last request's target */
    bool keep_alive, expect;
};

/* Parse s cut into pieces of step bytes (0: whole), request after request. */
static void parse(const char *s, size_t step, struct got *g)
{
    struct http_parser p;
    struct evbuffer *body = evbuffer_new();
    size_t n = strlen(s), off = 0;
    memset(g, 0, sizeof(*g));
    assert_int_equal(http_parser_init(&p, MAX_BODY, MAX_HEADER), 0);
    if (!step)
        step = n ? n : 1;
    enum http_parse_status st = HTTP_PARSE_MORE;
    /* after HEAD the parser is asked again, with no bytes if none are left: DONE for a
     * request without a body */
    while (off < n || st == HTTP_PARSE_HEAD) {
        size_t k = n - off < step ? n - off : step, used = 0;
        st = http_parser_feed(&p, s + off, k, body, &used);
        assert_true(used <= k);
        off += used;
        if (st == HTTP_PARSE_ERROR) {
            g->status = p.status;
            break;
        }
        if (st == HTTP_PARSE_HEAD) {
            snprintf(g->target, sizeof(g->target), "%s", p.target);
            g->keep_alive = p.keep_alive;
            g->expect = p.expect_continue;
        }
        if (st == HTTP_PARSE_DONE) {
            size_t len = evbuffer_get_length(body);
            assert_true(len < sizeof(g->body));
            evbuffer_remove(body, g->body, len);
            g->body[len] = '\0';
            g->requests++;
            http_parser_next(&p);
        }
    }
    http_parser_free(&p);
    evbuffer_free(body);
}

static const size_t steps[] = {0, 1, 2, 3, 7, 64};

static void expect(const char *s, int requests, int status, const char *body)
{
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        struct got g;
        parse(s, steps[i], &g);
        assert_int_equal(g.status, status);
        assert_int_equal(g.requests, requests);
        if (body)
            assert_string_equal(g.body, body);
    }
}

static void test_http_parse_get_and_headers(void **state)
{
    (void)state;
    struct got g;
    parse("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced value \t\r\n\r\n", 1, &g);
    assert_int_equal(g.requests, 1);
    assert_string_equal(g.target, "/v1/models?x=1");
    assert_true(g.keep_alive);
    struct http_parser p;
    struct evbuffer *b = evbuffer_new();
    size_t used;
    const char *s = "GET / HTTP/1.0\r\nX-Thing:  v  \r\nconnection: keep-alive\r\n\r\n";
    assert_int_equal(http_parser_init(&p, MAX_BODY, MAX_HEADER), 0);
    assert_int_equal(http_parser_feed(&p, s, strlen(s), b, &used), HTTP_PARSE_HEAD);
    assert_string_equal(http_parser_header(&p, "x-thing"), "v");
    assert_string_equal(p.method, "GET");
    assert_int_equal(p.minor, 0);
    assert_true(p.keep_alive);
    http_parser_free(&p);
    evbuffer_free(b);
}

static void test_http_parse_content_length_and_chunked_bodies(void **state)
{
    (void)state;
    expect("POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 1, 0, "hello");
    expect("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
           1, 0, "hello world");
    expect("POST /a HTTP/1.1\nContent-Length: 2\n\nok", 1, 0, "ok"); /* bare LF lines */
}

static void test_http_parse_pipelined_requests_in_order(void **state)
{
    (void)state;
    expect("\r\nGET /1 HTTP/1.1\r\n\r\nPOST /2 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
           "POST /3 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n",
           3, 0, "z");
}

static void test_http_parse_keep_alive_and_expect(void **state)
{
    (void)state;
    struct got g;
    parse("POST / HTTP/1.1\r\nConnection: close\r\nExpect: 100-continue\r\n"
          "Content-Length: 1\r\n\r\nx", 3, &g);
    assert_false(g.keep_alive);
    assert_true(g.expect);
    assert_int_equal(g.requests, 1);
    expect("POST / HTTP/1.1\r\nExpect: something\r\n\r\n", 0, 417, NULL);
}

static void test_http_parse_limits(void **state)
{
    (void)state;
    char big[2048];
    snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nX: %01200d\r\n\r\n", 0);
    expect(big, 0, 431, NULL);
    expect("POST / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n", 0, 413, NULL);
    expect("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1001\r\n", 0, 413, NULL);
    expect("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n", 0, 0, NULL);
}

static void test_http_parse_refuses_ambiguous_framing(void **state)
{
    (void)state;
    expect("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
           400, NULL);
    expect("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 0, 400, NULL);
    expect("POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n", 0, 400, NULL);
    expect("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, 501, NULL);
    expect("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 0, 400, NULL);
    expect("GET / HTTP/1.1\r\nX : a\r\n\r\n", 0, 400, NULL);
    expect("GET / HTTP/2.0\r\n\r\n", 0, 505, NULL);
    expect("GET /  HTTP/1.1\r\n\r\n", 0, 400, NULL);
    expect("GET / HTTP/1.1\r\nX: a\001b\r\n\r\n", 0, 400, NULL);
    expect("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, 400, NULL);
    expect("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 0, 400, NULL);
}

/* What the front's former framing guard checked, now the parser's: the limits are inclusive,
 * a chunked body's total counts, line ends may be bare LFs or split, and a Content-Length is
 * plain digits. */
static void test_http_parse_limits_are_inclusive_and_lengths_plain(void **state)
{
    (void)state;
    static char ok[8192], over[8192];
    expect("POST / HTTP/1.1\r\nContent-Length: 4096\r\n\r\n", 0, 0, NULL); /* waits for it */
    /* 0xf00 + 0x100 = 4096 is fine; one more byte is not */
    int n = snprintf(ok, sizeof(ok), "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nf00\r\n");
    memset(ok + n, 'a', 0xf00);
    n += 0xf00;
    memcpy(over, ok, (size_t)n);
    snprintf(ok + n, sizeof(ok) - (size_t)n, "\r\n100\r\n");
    memset(ok + strlen(ok), 'b', 0x100);
    strcat(ok, "\r\n0\r\n\r\n");
    expect(ok, 1, 0, NULL);
    snprintf(over + n, sizeof(over) - (size_t)n, "\r\n101\r\n");
    expect(over, 0, 413, NULL);
    expect("POST / HTTP/1.1\r\nContent-Length: 1\r\n\nx", 1, 0, "x"); /* CRLF then LF */
    expect("POST / HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", 0, 400, NULL);
    expect("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 0, 400, NULL);
    expect("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 0, 400, NULL);
    expect("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
           0, 501, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_parse_get_and_headers),
        cmocka_unit_test(test_http_parse_content_length_and_chunked_bodies),
        cmocka_unit_test(test_http_parse_pipelined_requests_in_order),
        cmocka_unit_test(test_http_parse_keep_alive_and_expect),
        cmocka_unit_test(test_http_parse_limits),
        cmocka_unit_test(test_http_parse_refuses_ambiguous_framing),
        cmocka_unit_test(test_http_parse_limits_are_inclusive_and_lengths_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
