/* webui: the header parsers (Accept-Encoding, If-None-Match), the file-name check and the
 * content types; then kiln serving the embedded page: types, the security headers, gzip,
 * ETag revalidation, HEAD, 405, --no-webui, --webui-dir, and that the page needs no key and
 * is not rate limited while the API still is. The page in a browser is tests/webui's. */
#include "../server/webui.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "lib/harness.h"
#include "lib/http_client.h"

static void test_webui_accepts_gzip_by_token_and_q(void **state)
{
    (void)state;
    assert_true(webui_accepts_gzip("gzip"));
    assert_true(webui_accepts_gzip("gzip, deflate, br"));
    assert_true(webui_accepts_gzip("br;q=1.0, GZIP;q=0.5"));
    assert_true(webui_accepts_gzip("*"));
    assert_false(webui_accepts_gzip(NULL));
    assert_false(webui_accepts_gzip(""));
    assert_false(webui_accepts_gzip("deflate, br"));
    assert_false(webui_accepts_gzip("gzip;q=0"));
    assert_false(webui_accepts_gzip("gzip ; q=0.000, *"));
    assert_false(webui_accepts_gzip("x-gzip2"));
    assert_false(webui_accepts_gzip("*;q=0"));
}

static void test_webui_etag_matches_lists_weak_tags_and_star(void **state)
{
    (void)state;
    assert_true(webui_etag_matches("\"abc\"", "\"abc\""));
    assert_true(webui_etag_matches("\"x\", \"abc\"", "\"abc\""));
    assert_true(webui_etag_matches("W/\"abc\"", "\"abc\""));
    assert_true(webui_etag_matches("*", "\"abc\""));
    assert_false(webui_etag_matches(NULL, "\"abc\""));
    assert_false(webui_etag_matches("\"abcd\"", "\"abc\""));
    assert_false(webui_etag_matches("\"ab\"", "\"abc\""));
    assert_false(webui_etag_matches("\"abc-gz\"", "\"abc\""));
    assert_false(webui_etag_matches("", "\"abc\""));
}

static void test_webui_safe_name_refuses_traversal_and_odd_bytes(void **state)
{
    (void)state;
    assert_true(webui_safe_name("index.html"));
    assert_true(webui_safe_name("lib/marked.js"));
    assert_true(webui_safe_name("a-b_c.d.css"));
    assert_false(webui_safe_name(""));
    assert_false(webui_safe_name("../etc/passwd"));
    assert_false(webui_safe_name("lib/../../x"));
    assert_false(webui_safe_name(".hidden"));
    assert_false(webui_safe_name("lib//x.js"));
    assert_false(webui_safe_name("lib/"));
    assert_false(webui_safe_name("/abs"));
    assert_false(webui_safe_name("a%2e%2e"));
    assert_false(webui_safe_name("a b"));
    assert_false(webui_safe_name("a\\b"));
}

static void test_webui_content_types_by_extension(void **state)
{
    (void)state;
    assert_string_equal(webui_content_type("/index.html"), "text/html; charset=utf-8");
    assert_string_equal(webui_content_type("app.js"), "text/javascript; charset=utf-8");
    assert_string_equal(webui_content_type("style.CSS"), "text/css; charset=utf-8");
    assert_string_equal(webui_content_type("icon.svg"), "image/svg+xml");
    assert_string_equal(webui_content_type("noext"), "application/octet-stream");
    assert_string_equal(webui_content_type("dir.js/file"), "application/octet-stream");
}

/* ---- kiln serving the page ---- */

static struct kiln_proc *start(const char *const *extra)
{
    const char *base[] = {"--model", "mock", NULL};
    const char *args[32];
    size_t n = 0;

    for (size_t i = 0; base[i]; i++)
        args[n++] = base[i];
    for (size_t i = 0; extra && extra[i] && n < 31; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    struct kiln_proc *p = kiln_start(args);
    assert_non_null(p);
    return p;
}

static void test_webui_serves_the_page_with_type_and_security_headers(void **state)
{
    struct kiln_proc *p = start(NULL);
    struct http_response r;
    (void)state;

    assert_int_equal(http_request(kiln_port(p), "GET", "/", NULL, NULL, &r), 200);
    assert_string_equal(http_header_get(&r, "Content-Type"), "text/html; charset=utf-8");
    assert_non_null(strstr(r.body, "<!doctype html>"));
    const char *csp = http_header_get(&r, "Content-Security-Policy");
    assert_non_null(csp);
    assert_non_null(strstr(csp, "default-src 'none'"));
    assert_non_null(strstr(csp, "script-src 'self'"));
    assert_null(strstr(csp, "unsafe-inline"));
    assert_string_equal(http_header_get(&r, "X-Content-Type-Options"), "nosniff");
    assert_string_equal(http_header_get(&r, "Cache-Control"), "no-cache");
    assert_null(http_header_get(&r, "Content-Encoding"));
    assert_non_null(http_header_get(&r, "ETag"));
    /* no inline script in the page itself */
    assert_null(strstr(r.body, "<script>"));
    http_response_free(&r);

    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/app.js", NULL, NULL, &r), 200);
    assert_string_equal(http_header_get(&r, "Content-Type"), "text/javascript; charset=utf-8");
    http_response_free(&r);
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/style.css", NULL, NULL, &r), 200);
    assert_string_equal(http_header_get(&r, "Content-Type"), "text/css; charset=utf-8");
    http_response_free(&r);
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/config.json", NULL, NULL, &r), 200);
    assert_string_equal(http_header_get(&r, "Content-Type"), "application/json");
    assert_non_null(strstr(r.body, "\"api_key_required\":false"));
    http_response_free(&r);
    /* what is not the page's stays the API's 404 */
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/nope.js", NULL, NULL, &r), 404);
    http_response_free(&r);
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/../health", NULL, NULL, &r), 404);
    http_response_free(&r);
    assert_int_equal(http_request(kiln_port(p), "GET", "/other", NULL, NULL, &r), 404);
    http_response_free(&r);
    kiln_destroy(p);
}

static void test_webui_gzip_etag_head_and_methods(void **state)
{
    struct kiln_proc *p = start(NULL);
    struct http_response r;
    const char *gz[] = {"Accept-Encoding: gzip, br", NULL};
    const char *nogz[] = {"Accept-Encoding: gzip;q=0", NULL};
    char plain_tag[64], gz_tag[64], inm[96];
    size_t plain_len;
    (void)state;

    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/app.js", nogz, NULL, &r), 200);
    assert_null(http_header_get(&r, "Content-Encoding"));
    snprintf(plain_tag, sizeof(plain_tag), "%s", http_header_get(&r, "ETag"));
    plain_len = r.body_len;
    http_response_free(&r);

    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/app.js", gz, NULL, &r), 200);
    assert_string_equal(http_header_get(&r, "Content-Encoding"), "gzip");
    assert_string_equal(http_header_get(&r, "Vary"), "Accept-Encoding");
    assert_true(r.body_len < plain_len);
    assert_int_equal((unsigned char)r.body[0], 0x1f); /* the gzip magic */
    assert_int_equal((unsigned char)r.body[1], 0x8b);
    snprintf(gz_tag, sizeof(gz_tag), "%s", http_header_get(&r, "ETag"));
    assert_string_not_equal(gz_tag, plain_tag);
    http_response_free(&r);

    snprintf(inm, sizeof(inm), "If-None-Match: %s", plain_tag);
    const char *cond[] = {inm, NULL};
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/app.js", cond, NULL, &r), 304);
    assert_int_equal(r.body_len, 0);
    assert_string_equal(http_header_get(&r, "ETag"), plain_tag);
    http_response_free(&r);
    const char *stale[] = {"If-None-Match: \"0000000000000000\"", NULL};
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/app.js", stale, NULL, &r), 200);
    http_response_free(&r);

    assert_int_equal(http_request(kiln_port(p), "HEAD", "/", NULL, NULL, &r), 200);
    assert_int_equal(r.body_len, 0);
    assert_string_equal(http_header_get(&r, "Content-Type"), "text/html; charset=utf-8");
    http_response_free(&r);
    assert_int_equal(http_request(kiln_port(p), "POST", "/", NULL, "{}", &r), 405);
    assert_string_equal(http_header_get(&r, "Allow"), "GET, HEAD");
    http_response_free(&r);
    kiln_destroy(p);
}

static void test_webui_no_webui_turns_the_page_off(void **state)
{
    const char *extra[] = {"--no-webui", NULL};
    struct kiln_proc *p = start(extra);
    struct http_response r;
    (void)state;

    assert_int_equal(http_request(kiln_port(p), "GET", "/", NULL, NULL, &r), 404);
    http_response_free(&r);
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/app.js", NULL, NULL, &r), 404);
    http_response_free(&r);
    /* the API is still routed (200, or 503 while the worker loads) */
    int st = http_request(kiln_port(p), "GET", "/health", NULL, NULL, &r);
    assert_true(st == 200 || st == 503);
    http_response_free(&r);
    kiln_destroy(p);
}

static void test_webui_dir_serves_its_files_first_then_the_embedded_ones(void **state)
{
    char dir[] = "/tmp/kiln-test-webui-XXXXXX", path[256];
    struct http_response r;
    FILE *f;
    (void)state;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/index.html", dir);
    assert_non_null(f = fopen(path, "w"));
    fputs("<!doctype html><p>from the folder</p>", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/extra.txt", dir);
    assert_non_null(f = fopen(path, "w"));
    fputs("more", f);
    fclose(f);

    const char *extra[] = {"--webui-dir", dir, NULL};
    struct kiln_proc *p = start(extra);
    assert_int_equal(http_request(kiln_port(p), "GET", "/", NULL, NULL, &r), 200);
    assert_string_equal(r.body, "<!doctype html><p>from the folder</p>");
    assert_non_null(http_header_get(&r, "Content-Security-Policy"));
    char inm[96];
    snprintf(inm, sizeof(inm), "If-None-Match: %s", http_header_get(&r, "ETag"));
    http_response_free(&r);
    const char *cond[] = {inm, NULL};
    assert_int_equal(http_request(kiln_port(p), "GET", "/", cond, NULL, &r), 304);
    http_response_free(&r);
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/extra.txt", NULL, NULL, &r), 200);
    assert_string_equal(r.body, "more");
    assert_string_equal(http_header_get(&r, "Content-Type"), "text/plain; charset=utf-8");
    http_response_free(&r);
    /* not in the folder: the embedded one */
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/app.js", NULL, NULL, &r), 200);
    http_response_free(&r);
    kiln_destroy(p);

    unlink(path);
    snprintf(path, sizeof(path), "%s/index.html", dir);
    unlink(path);
    rmdir(dir);

    /* a folder that is not there stops kiln at start with a message */
    const char *bad[] = {"--webui-dir", "/nonexistent/kiln-webui", NULL};
    const char *args[] = {"--model", "mock", bad[0], bad[1], NULL};
    assert_null(kiln_start(args));
}

static void test_webui_page_needs_no_key_and_is_not_rate_limited(void **state)
{
    const char *extra[] = {"--api-key", "k-123", "--rate-limit", "1", "--rate-burst", "1", NULL};
    struct kiln_proc *p = start(extra);
    struct http_response r;
    (void)state;

    for (int i = 0; i < 5; i++) {
        assert_int_equal(http_request(kiln_port(p), "GET", "/", NULL, NULL, &r), 200);
        http_response_free(&r);
    }
    assert_int_equal(http_request(kiln_port(p), "GET", "/webui/config.json", NULL, NULL, &r), 200);
    assert_non_null(strstr(r.body, "\"api_key_required\":true"));
    http_response_free(&r);
    /* the API itself still wants the key */
    assert_int_equal(http_request(kiln_port(p), "GET", "/v1/models", NULL, NULL, &r), 401);
    http_response_free(&r);
    kiln_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_webui_accepts_gzip_by_token_and_q),
        cmocka_unit_test(test_webui_etag_matches_lists_weak_tags_and_star),
        cmocka_unit_test(test_webui_safe_name_refuses_traversal_and_odd_bytes),
        cmocka_unit_test(test_webui_content_types_by_extension),
        cmocka_unit_test(test_webui_serves_the_page_with_type_and_security_headers),
        cmocka_unit_test(test_webui_gzip_etag_head_and_methods),
        cmocka_unit_test(test_webui_no_webui_turns_the_page_off),
        cmocka_unit_test(test_webui_dir_serves_its_files_first_then_the_embedded_ones),
        cmocka_unit_test(test_webui_page_needs_no_key_and_is_not_rate_limited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
