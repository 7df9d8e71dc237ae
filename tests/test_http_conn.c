/* The front's HTTP connection layer (server/http_conn.c) in-process, over TLS, where the order
 * of the event loop's callbacks matters: the test's handler runs in the loop, and a client
 * thread speaks TLS to it. A streamed answer whose last chunks come after its output had gone
 * out whole (the TLS bufferevent's write callback runs deferred, after them) still reaches
 * the client whole before the connection closes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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
#include <pthread.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <cmocka.h>

#include "../server/config.h"
#include "../server/http.h"
#include "../server/metrics.h"

#define TAIL_BYTES (256u << 10) /* the last chunk: more than one TLS record */
#define TAIL_END   "END-OF-ANSWER\n"

static char dir[64], cert[96], key[96];

static int setup(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(dir, sizeof(dir), "/tmp/kiln-http-conn-%ld", (long)getpid());
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -1;
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(cmd, sizeof(cmd),
             "timeout 30 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout %s -out %s -days 2 -subj /CN=127.0.0.1 >/dev/null 2>&1",
             key, cert);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- the server side: runs in the test's event loop ---- */

struct answer {
    struct event_base *base;
    struct http_req *req;
    struct event *ev_last; /* adds the last chunk and ends the answer */
    bool last_queued;
};

/* The last chunk and the end, from the loop, queued when the output had just gone out whole:
 * before the TLS bufferevent's deferred write callback for that runs. */
static void on_last(evutil_socket_t fd, short what, void *arg)
{
    struct answer *a = arg;
    (void)fd;
    (void)what;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    for (size_t n = 0; n + 1024 <= TAIL_BYTES; n += 1024) {
        char line[1024];
        memset(line, 'z', sizeof(line) - 1);
        line[sizeof(line) - 1] = '\n';
        evbuffer_add(b, line, sizeof(line));
    }
    evbuffer_add(b, TAIL_END, strlen(TAIL_END));
    http_req_on_drain(a->req, NULL, NULL);
    http_reply_chunk(a->req, b);
    evbuffer_free(b);
    http_reply_end(a->req);
    a->req = NULL;
}

static void on_drained(void *arg, size_t unsent)
{
    struct answer *a = arg;
    if (unsent == 0 && !a->last_queued) {
        a->last_queued = true;
        event_active(a->ev_last, 0, 0);
    }
}

/* A streamed answer: its head and a first chunk now, the rest once they went out. */
static void handler(struct http_req *req, void *arg)
{
    struct answer *a = arg;
    struct evbuffer *b = evbuffer_new();
    assert_non_null(b);
    a->req = req;
    http_set_header(req, "Content-Type", "text/plain");
    http_reply_start(req, 200, "OK");
    http_req_on_drain(req, on_drained, a);
    evbuffer_add_printf(b, "first\n");
    http_reply_chunk(req, b);
    evbuffer_free(b);
}

/* ---- the client: a thread that reads the whole answer ---- */

struct client {
    int port;
    int done_fd; /* written once when it is done: the loop stops */
    char *resp;
    size_t got;
    int last; /* SSL_read's last return and SSL_get_error of it */
    int ssl_err;
    bool connected;
};

static void *client_run(void *arg)
{
    struct client *c = arg;
    static const char req[] = "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    size_t cap = 2 * TAIL_BYTES;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    struct timeval tv = {20, 0}; /* a bound for a server that stops sending: not a timing */
    SSL *ssl = NULL;
    c->resp = malloc(cap);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ctx && fd >= 0 && c->resp &&
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
        (ssl = SSL_new(ctx)) && SSL_set_fd(ssl, fd) == 1 && SSL_connect(ssl) == 1 &&
        SSL_write(ssl, req, (int)strlen(req)) == (int)strlen(req)) {
        c->connected = true;
        while (c->got < cap - 1 &&
               (c->last = SSL_read(ssl, c->resp + c->got, (int)(cap - 1 - c->got))) > 0)
            c->got += (size_t)c->last;
        c->ssl_err = SSL_get_error(ssl, c->last);
    }
    if (c->resp)
        c->resp[c->got] = '\0';
    SSL_free(ssl);
    if (fd >= 0)
        close(fd);
    SSL_CTX_free(ctx);
    char one = 1;
    (void)!write(c->done_fd, &one, 1);
    return NULL;
}

static void on_client_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

static void on_bound(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg); /* the client never finished: fail below, do not hang */
}

static void test_http_conn_tls_close_waits_for_an_answers_last_chunks(void **state)
{
    (void)state;
    struct kiln_config cfg;
    struct metrics m;
    struct answer a = {0};
    struct client c = {0};
    int done[2];
    uint16_t port = 0;
    pthread_t th;

    config_init(&cfg);
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.tls_cert = cert;
    cfg.tls_key = key;
    metrics_init(&m);
    a.base = event_base_new();
    assert_non_null(a.base);
    a.ev_last = event_new(a.base, -1, 0, on_last, &a);
    assert_non_null(a.ev_last);
    struct http_server *s = http_create(a.base, &cfg, &m, handler, &a, &port);
    assert_non_null(s);
    assert_int_equal(pipe(done), 0);
    struct event *ev_done = event_new(a.base, done[0], EV_READ, on_client_done, a.base);
    struct event *ev_bound = evtimer_new(a.base, on_bound, a.base);
    struct timeval bound = {60, 0};
    assert_non_null(ev_done);
    assert_non_null(ev_bound);
    event_add(ev_done, NULL);
    evtimer_add(ev_bound, &bound);
    c.port = port;
    c.done_fd = done[1];
    assert_int_equal(pthread_create(&th, NULL, client_run, &c), 0);
    event_base_dispatch(a.base);
    bool finished = evtimer_pending(ev_bound, NULL); /* the client ended, not the bound */
    assert_int_equal(pthread_join(th, NULL), 0); /* its reads are bounded */
    assert_true(finished);
    assert_true(c.connected);
    assert_non_null(c.resp);
    assert_true(a.last_queued);
    assert_non_null(strstr(c.resp, "HTTP/1.1 200"));
    assert_non_null(strstr(c.resp, "first\n"));
    /* the whole last chunk, then the end of the chunked body, then the close */
    if (!strstr(c.resp, TAIL_END))
        fprintf(stderr, "the client got %zu bytes, then SSL_read %d (SSL error %d)\n", c.got,
                c.last, c.ssl_err);
    assert_non_null(strstr(c.resp, TAIL_END));
    assert_true(c.got > TAIL_BYTES);
    assert_non_null(strstr(c.resp, TAIL_END "\r\n0\r\n\r\n"));
    free(c.resp);
    event_free(ev_done);
    event_free(ev_bound);
    http_destroy(s);
    (void)event_base_loop(a.base, EVLOOP_NONBLOCK); /* the TLS bufferevents' deferred frees */
    event_free(a.ev_last);
    event_base_free(a.base);
    close(done[0]);
    close(done[1]);
    config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_conn_tls_close_waits_for_an_answers_last_chunks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
