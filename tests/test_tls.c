/* Integration tests of HTTPS (--tls-cert, --tls-key) against `kiln --model mock`: curl and
 * `openssl s_client` against a self-signed certificate each test makes with the openssl CLI
 * (TLS 1.1 refused, 1.2 and 1.3 accepted), an SSE stream over TLS, a stream paused for a
 * client that stops reading and resumed whole, the header deadline and a half-closed client
 * over TLS, the certificate read again on SIGHUP, and a bad, missing or mismatched key or
 * certificate refused at start with the file named. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>

#include <cmocka.h>

#include "lib/harness.h"

static char dir[64];
static char cert[96], key[96], cert2[96], key2[96];

/* Run a shell command (bounded by `timeout` inside it); its stdout (and stderr) into out. */
static int run(char *out, size_t cap, const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = 0;
    if (out) {
        n = fread(out, 1, cap - 1, p);
        out[n] = '\0';
    } else {
        char sink[4096];
        while (fread(sink, 1, sizeof(sink), p) > 0) {
        }
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A self-signed P-256 certificate for 127.0.0.1 and its key. */
static void make_cert(const char *c, const char *k)
{
    assert_int_equal(run(NULL, 0,
                         "timeout 30 openssl req -x509 -newkey ec -pkeyopt "
                         "ec_paramgen_curve:P-256 -nodes -keyout %s -out %s -days 2 "
                         "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>&1",
                         k, c),
                     0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kiln-tls-%ld", (long)getpid());
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -1;
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(cert2, sizeof(cert2), "%s/cert2.pem", dir);
    snprintf(key2, sizeof(key2), "%s/key2.pem", dir);
    make_cert(cert, key);
    make_cert(cert2, key2);
    return 0;
}

static int teardown_all(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    kiln_destroy(*state);
    *state = NULL;
    return 0;
}

static struct kiln_proc *start_with(void **state, const char *c, const char *k,
                                    const char *const *more)
{
    const char *args[24] = {"--model", "mock", "--tls-cert", c, "--tls-key", k};
    size_t n = 6;
    for (size_t i = 0; more && more[i] && n < 23; i++)
        args[n++] = more[i];
    args[n] = NULL;
    struct kiln_proc *p = kiln_start(args);
    assert_non_null(p);
    *state = p;
    return p;
}

static struct kiln_proc *start_tls(void **state, const char *const *more)
{
    return start_with(state, cert, key, more);
}

static void test_tls_serves_https_to_curl_and_no_plain_http(void **state)
{
    int port = kiln_port(start_tls(state, NULL));
    char out[8192];
    assert_int_equal(run(out, sizeof(out),
                         "timeout 20 curl -sS --cacert %s https://127.0.0.1:%d/health 2>&1",
                         cert, port),
                     0);
    assert_non_null(strstr(out, "\"status\":\"ok\""));
    /* plain HTTP on the TLS port gets no HTTP answer */
    run(out, sizeof(out), "timeout 20 curl -s -o /dev/null -w '%%{http_code}' "
                          "http://127.0.0.1:%d/health", port);
    assert_null(strstr(out, "200"));
}

static void test_tls_refuses_1_1_and_accepts_1_2_and_1_3(void **state)
{
    int port = kiln_port(start_tls(state, NULL));
    char out[16384];
    /* SECLEVEL=0 so the client itself would offer TLS 1.1: the refusal is the server's */
    run(out, sizeof(out),
        "timeout 20 openssl s_client -connect 127.0.0.1:%d -tls1_1 -cipher 'DEFAULT@SECLEVEL=0' "
        "</dev/null 2>&1", port);
    assert_non_null(strstr(out, "Cipher is (NONE)"));
    run(out, sizeof(out),
        "timeout 20 openssl s_client -connect 127.0.0.1:%d -tls1_2 -CAfile %s </dev/null 2>&1",
        port, cert);
    assert_non_null(strstr(out, "New, TLSv1.2, Cipher is ECDHE-"));
    assert_non_null(strstr(out, "Verify return code: 0 (ok)"));
    run(out, sizeof(out),
        "timeout 20 openssl s_client -connect 127.0.0.1:%d -tls1_3 -CAfile %s </dev/null 2>&1",
        port, cert);
    assert_non_null(strstr(out, "New, TLSv1.3, Cipher is TLS_"));
    /* the server is still there after the refused and the closed connections */
    assert_int_equal(run(out, sizeof(out),
                         "timeout 20 curl -sS --cacert %s https://127.0.0.1:%d/health 2>&1",
                         cert, port),
                     0);
    assert_non_null(strstr(out, "\"status\":\"ok\""));
}

static void test_tls_streams_sse(void **state)
{
    static const char *more[] = {"--mock-reply", "abcdefghij", NULL};
    int port = kiln_port(start_tls(state, more));
    char out[32768];
    assert_int_equal(run(out, sizeof(out),
                         "timeout 30 curl -sS -N --cacert %s https://127.0.0.1:%d/v1/completions "
                         "-H 'Content-Type: application/json' "
                         "-d '{\"prompt\":\"hi\",\"max_tokens\":8,\"stream\":true}' 2>&1",
                         cert, port),
                     0);
    int frames = 0;
    for (const char *p = out; (p = strstr(p, "data: {")); p++)
        frames++;
    assert_true(frames >= 8);
    assert_non_null(strstr(out, "\"finish_reason\":\"length\""));
    assert_non_null(strstr(out, "data: [DONE]"));
}

static void test_tls_header_deadline_is_408(void **state)
{
    static const char *more[] = {"--header-timeout-ms", "300", NULL};
    int port = kiln_port(start_tls(state, more));
    char out[16384];
    /* the handshake and half a header block: the header deadline answers 408 through TLS */
    run(out, sizeof(out),
        "printf 'GET /health HTTP/1.1\\r\\nHost: x\\r\\n' | "
        "timeout 20 openssl s_client -quiet -ign_eof -connect 127.0.0.1:%d 2>&1",
        port);
    assert_non_null(strstr(out, "HTTP/1.1 408"));
    assert_non_null(strstr(out, "request_timeout"));
}

/* A TLS connection to the front, every read bounded (20 s); rcvbuf > 0 shrinks the socket's
 * receive buffer so that a client that does not read fills up quickly. */
static SSL *tls_connect(int port, int rcvbuf, SSL_CTX **ctx, int *fd)
{
    *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(*ctx);
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*fd >= 0);
    if (rcvbuf > 0)
        (void)setsockopt(*fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(*fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {20, 0};
    setsockopt(*fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    SSL *ssl = SSL_new(*ctx);
    SSL_set_fd(ssl, *fd);
    assert_int_equal(SSL_connect(ssl), 1);
    return ssl;
}

/* POST body to /v1/completions over ssl, with Connection: close. */
static void tls_post(SSL *ssl, const char *body)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     strlen(body), body);
    assert_true(n > 0 && n < (int)sizeof(req));
    assert_int_equal(SSL_write(ssl, req, n), n);
}

/* A client that sends its request and shuts its sending side (TCP) still reads the answer. */
static void test_tls_half_closed_client_gets_its_answer(void **state)
{
    static const char *more[] = {"--mock-delay-ms", "20", NULL};
    int port = kiln_port(start_tls(state, more));
    SSL_CTX *ctx;
    int fd;
    SSL *ssl = tls_connect(port, 0, &ctx, &fd);
    tls_post(ssl, "{\"prompt\":\"hi\",\"max_tokens\":4}");
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    char resp[16384];
    size_t got = 0;
    int r;
    while (got < sizeof(resp) - 1 && (r = SSL_read(ssl, resp + got, (int)(sizeof(resp) - 1 - got))) > 0)
        got += (size_t)r;
    resp[got] = '\0';
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    assert_non_null(strstr(resp, "\"finish_reason\":\"length\""));
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
}

struct paused_cond {
    int port;
};

/* kiln_streams_paused_total is at least 1 (read over HTTPS with curl). */
static bool stream_paused(void *arg)
{
    struct paused_cond *c = arg;
    char out[256];
    if (run(out, sizeof(out),
            "timeout 10 curl -sS --cacert %s https://127.0.0.1:%d/metrics 2>&1 | "
            "grep '^kiln_streams_paused_total '",
            cert, c->port) != 0)
        return false;
    return strtod(out + strlen("kiln_streams_paused_total "), NULL) >= 1;
}

/* Backpressure over TLS: a client that stops reading a fast stream gets it paused on the
 * worker once its (unencrypted) output passes --max-client-buffer-bytes, and when it reads
 * again it gets the whole stream, every token once, in order. */
static void test_tls_unread_stream_pauses_then_resumes_whole(void **state)
{
    char reply[4001];
    for (int i = 0; i < 4000; i++)
        reply[i] = (char)('a' + i % 26);
    reply[4000] = '\0';
    const char *more[] = {"--mock-reply", reply, "--max-client-buffer-bytes", "8192", NULL};
    int port = kiln_port(start_tls(state, more));
    SSL_CTX *ctx;
    int fd;
    SSL *ssl = tls_connect(port, 4096, &ctx, &fd);
    tls_post(ssl, "{\"prompt\":\"hi\",\"stream\":true,\"max_tokens\":4000,\"ignore_eos\":true}");
    struct paused_cond pc = {port};
    assert_true(wait_until(stream_paused, &pc, 20000));
    /* now read it all: the text of every frame, joined, is the mock's reply */
    size_t cap = 4u << 20, got = 0;
    char *resp = malloc(cap);
    assert_non_null(resp);
    int r;
    while (got < cap - 1 && (r = SSL_read(ssl, resp + got, (int)(cap - 1 - got))) > 0)
        got += (size_t)r;
    resp[got] = '\0';
    assert_non_null(strstr(resp, "HTTP/1.1 200"));
    assert_non_null(strstr(resp, "data: [DONE]"));
    char *text = malloc(4001);
    assert_non_null(text);
    size_t len = 0;
    for (const char *p = resp; (p = strstr(p, "\"text\":\"")); ) {
        p += strlen("\"text\":\"");
        while (*p && *p != '"' && len < 4000)
            text[len++] = *p++;
    }
    text[len] = '\0';
    assert_int_equal(len, 4000);
    assert_string_equal(text, reply);
    free(text);
    free(resp);
    SSL_free(ssl);
    close(fd);
    SSL_CTX_free(ctx);
}

static bool reloaded(void *arg)
{
    return kiln_output_contains(arg, "certificate") &&
           kiln_output_contains(arg, "read again");
}

static void test_tls_certificate_is_read_again_on_sighup(void **state)
{
    char out[8192], want[256], got[256], rc[128], rk[128];
    snprintf(rc, sizeof(rc), "%s/renewed-cert.pem", dir);
    snprintf(rk, sizeof(rk), "%s/renewed-key.pem", dir);
    assert_int_equal(run(NULL, 0, "cp %s %s && cp %s %s", cert, rc, key, rk), 0);
    struct kiln_proc *p = start_with(state, rc, rk, NULL);
    int port = kiln_port(p);
    run(want, sizeof(want), "openssl x509 -in %s -noout -fingerprint -sha256", cert2);
    run(got, sizeof(got),
        "timeout 20 openssl s_client -connect 127.0.0.1:%d </dev/null 2>/dev/null | "
        "openssl x509 -noout -fingerprint -sha256", port);
    assert_string_not_equal(got, want);
    /* renewed in place, as certbot or an operator would */
    assert_int_equal(run(NULL, 0, "cp %s %s && cp %s %s", cert2, rc, key2, rk), 0);
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    assert_true(wait_until(reloaded, p, 10000));
    run(got, sizeof(got),
        "timeout 20 openssl s_client -connect 127.0.0.1:%d </dev/null 2>/dev/null | "
        "openssl x509 -noout -fingerprint -sha256", port);
    assert_string_equal(got, want);
    assert_int_equal(run(out, sizeof(out),
                         "timeout 20 curl -sS --cacert %s https://127.0.0.1:%d/health 2>&1",
                         cert2, port),
                     0);
}

/* kiln started with these TLS files exits at once, saying which file is wrong. */
static void refused(const char *c, const char *k, const char *needle)
{
    const char *args[] = {"--model", "mock", "--tls-cert", c, "--tls-key", k, NULL};
    struct kiln_proc *p = kiln_start(args);
    assert_null(p); /* it never listened; the harness printed its output */
    char out[8192];
    run(out, sizeof(out), "timeout 20 %s/kiln --model mock --port 0 --tls-cert %s --tls-key %s "
                          "2>&1", getenv("KILN_BIN_DIR") ? getenv("KILN_BIN_DIR") : "build",
        c, k);
    assert_non_null(strstr(out, needle));
}

static void test_tls_bad_files_are_refused_naming_the_file(void **state)
{
    (void)state;
    char bad[128], missing[128];
    snprintf(bad, sizeof(bad), "%s/bad.pem", dir);
    snprintf(missing, sizeof(missing), "%s/none.pem", dir);
    FILE *fp = fopen(bad, "w");
    assert_non_null(fp);
    fputs("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n", fp);
    fclose(fp);
    char want[256];
    snprintf(want, sizeof(want), "--tls-key %s", bad);
    refused(cert, bad, want);
    snprintf(want, sizeof(want), "--tls-cert %s", missing);
    refused(missing, key, want);
    snprintf(want, sizeof(want), "--tls-key %s does not match", key2);
    refused(cert, key2, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_tls_serves_https_to_curl_and_no_plain_http, teardown),
        cmocka_unit_test_teardown(test_tls_refuses_1_1_and_accepts_1_2_and_1_3, teardown),
        cmocka_unit_test_teardown(test_tls_streams_sse, teardown),
        cmocka_unit_test_teardown(test_tls_header_deadline_is_408, teardown),
        cmocka_unit_test_teardown(test_tls_half_closed_client_gets_its_answer, teardown),
        cmocka_unit_test_teardown(test_tls_unread_stream_pauses_then_resumes_whole, teardown),
        cmocka_unit_test_teardown(test_tls_certificate_is_read_again_on_sighup, teardown),
        cmocka_unit_test(test_tls_bad_files_are_refused_naming_the_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown_all);
}
