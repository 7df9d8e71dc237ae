/* hf: models: SHA-256 against published vectors, spec parsing and quant matching, and pulls
 * from a fake hub on 127.0.0.1 that mimics Hugging Face's URL layout and headers (the tree
 * listing with lfs.oid, /resolve/main/ answering 302 with X-Linked-Etag and X-Linked-Size, a
 * CDN path that honours Range): the quant picks the file, it is checked and renamed into the
 * cache, a cut transfer resumes with Range, a wrong checksum leaves nothing, a cached file is
 * served with the hub gone, and kiln serves hf:OWNER/REPO:QUANT end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../server/config.h"
#include "../server/hf_pull.h"
#include "../server/sha256.h"
#include "lib/harness.h"
#include "lib/http_client.h"

#define STORIES_SHA "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"

/* ---- the fake hub ---- */

struct hub_file {
    const char *path;
    const unsigned char *data;
    size_t len;
    const char *sha; /* what the hub publishes */
    unsigned long long listed; /* the size the listing gives; 0: len */
};

struct hub {
    int fd, port;
    pthread_t thread;
    atomic_bool stop;
    struct hub_file files[6];
    size_t n_files;
    size_t cut_after;      /* the first CDN transfer stops after this many bytes; 0: never */
    atomic_int requests;
    atomic_int cdn_requests;
    char last_range[64];   /* the Range header of the last CDN request */
    char listing_auth[128]; /* the Authorization header of the last listing request */
};

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void header_value(const char *req, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    for (const char *p = strstr(req, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        size_t n = strlen(name);
        if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
            const char *v = p + 3 + n;
            while (*v == ' ')
                v++;
            size_t len = strcspn(v, "\r");
            snprintf(out, cap, "%.*s", (int)len, v);
            return;
        }
    }
}

static void reply(int fd, const char *status, const char *extra, const void *body, size_t len)
{
    char head[1024];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n", status,
                     len, extra ? extra : "");
    send_all(fd, head, (size_t)n);
    if (len)
        send_all(fd, body, len);
}

static void serve_listing(struct hub *h, int fd)
{
    char *json = malloc(8192);
    size_t n = 0;
    n += (size_t)sprintf(json + n, "[{\"type\":\"file\",\"path\":\"README.md\",\"size\":5}");
    for (size_t i = 0; i < h->n_files; i++)
        n += (size_t)sprintf(json + n,
                             ",{\"type\":\"file\",\"oid\":\"0123\",\"size\":134,\"path\":\"%s\","
                             "\"lfs\":{\"oid\":\"%s\",\"size\":%zu,\"pointerSize\":134}}",
                             h->files[i].path, h->files[i].sha,
                             (size_t)(h->files[i].listed ? h->files[i].listed : h->files[i].len));
    n += (size_t)sprintf(json + n, "]");
    reply(fd, "200 OK", "Content-Type: application/json\r\n", json, n);
    free(json);
}

static void serve_cdn(struct hub *h, int fd, const struct hub_file *f, const char *req)
{
    char range[64], extra[256];
    header_value(req, "Range", range, sizeof(range));
    snprintf(h->last_range, sizeof(h->last_range), "%s", range);
    int nth = atomic_fetch_add(&h->cdn_requests, 1);
    size_t from = 0;
    if (strncmp(range, "bytes=", 6) == 0)
        from = strtoull(range + 6, NULL, 10);
    if (from >= f->len && from > 0) {
        reply(fd, "416 Range Not Satisfiable", NULL, NULL, 0);
        return;
    }
    snprintf(extra, sizeof(extra), "ETag: \"%s\"\r\n%s%zu-%zu/%zu\r\n", f->sha,
             from ? "Content-Range: bytes " : "X-Whole: ", from, f->len - 1, f->len);
    size_t len = f->len - from;
    if (nth == 0 && h->cut_after && h->cut_after < len) {
        /* announce everything, send part of it, hang up */
        char head[512];
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                         from ? "206 Partial Content" : "200 OK", len, extra);
        send_all(fd, head, (size_t)n);
        send_all(fd, f->data + from, h->cut_after);
        return;
    }
    reply(fd, from ? "206 Partial Content" : "200 OK", extra, f->data + from, len);
}

static void serve(struct hub *h, int fd)
{
    char req[8192], method[16], path[2048];
    size_t n = 0;
    while (n < sizeof(req) - 1) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) <= 0)
            return;
        ssize_t r = recv(fd, req + n, sizeof(req) - 1 - n, 0);
        if (r <= 0)
            return;
        n += (size_t)r;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    if (sscanf(req, "%15s %2047s", method, path) != 2)
        return;
    atomic_fetch_add(&h->requests, 1);
    if (strcmp(path, "/api/models/o/r/tree/main?recursive=true") == 0) {
        header_value(req, "Authorization", h->listing_auth, sizeof(h->listing_auth));
        serve_listing(h, fd);
        return;
    }
    for (size_t i = 0; i < h->n_files; i++) {
        const struct hub_file *f = &h->files[i];
        char want[512], extra[512];
        snprintf(want, sizeof(want), "/o/r/resolve/main/%s", f->path);
        if (strcmp(path, want) == 0) { /* the hub: a redirect that names the LFS object */
            snprintf(extra, sizeof(extra),
                     "Location: /cdn/%s\r\nX-Linked-Etag: \"%s\"\r\nX-Linked-Size: %zu\r\n"
                     "X-Repo-Commit: 0123456789abcdef\r\n",
                     f->path, f->sha, f->len);
            reply(fd, "302 Found", extra, NULL, 0);
            return;
        }
        snprintf(want, sizeof(want), "/cdn/%s", f->path);
        if (strcmp(path, want) == 0) {
            serve_cdn(h, fd, f, req);
            return;
        }
    }
    reply(fd, "404 Not Found", NULL, "not found", 9);
}

static void *hub_main(void *arg)
{
    struct hub *h = arg;
    while (!atomic_load(&h->stop)) {
        struct pollfd p = {h->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept(h->fd, NULL, NULL);
        if (c < 0)
            continue;
        serve(h, c);
        close(c);
    }
    return NULL;
}

static void hub_start(struct hub *h)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    h->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(h->fd >= 0);
    assert_int_equal(bind(h->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(h->fd, 16), 0);
    assert_int_equal(getsockname(h->fd, (struct sockaddr *)&a, &al), 0);
    h->port = ntohs(a.sin_port);
    atomic_store(&h->stop, false);
    assert_int_equal(pthread_create(&h->thread, NULL, hub_main, h), 0);
}

static void hub_stop(struct hub *h)
{
    if (h->fd < 0)
        return;
    atomic_store(&h->stop, true);
    pthread_join(h->thread, NULL);
    close(h->fd);
    h->fd = -1;
}

/* ---- fixture: a hub with a few files, a fresh models folder ---- */

struct fx {
    struct hub hub;
    unsigned char *stories;
    size_t stories_len;
    unsigned char small[4096];
    char dir[64], endpoint[64];
    struct hf_pull_opts opts;
    FILE *log;
};

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return p;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    const char *shared = getenv("KILN_SHARED");
    char path[512];
    if (!f)
        return -1;
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared ? shared : "../shared");
    if (!(f->stories = read_all(path, &f->stories_len))) {
        fprintf(stderr, "cannot read %s\n", path);
        free(f);
        return -1;
    }
    for (size_t i = 0; i < sizeof(f->small); i++)
        f->small[i] = (unsigned char)(i * 7);
    f->hub.fd = -1;
    f->hub.files[0] = (struct hub_file){"stories-Q8_0.gguf", f->stories, f->stories_len,
                                        STORIES_SHA, 0};
    f->hub.files[1] = (struct hub_file){"stories-Q4_K_M.gguf", f->small, sizeof(f->small),
                                        "0000000000000000000000000000000000000000000000000000000000000000", 0};
    f->hub.files[2] = (struct hub_file){"mmproj-stories-f16.gguf", f->small, 16, STORIES_SHA, 0};
    f->hub.files[3] = (struct hub_file){"split/stories-Q6_K-00001-of-00002.gguf", f->small, 16,
                                        STORIES_SHA, 0};
    f->hub.files[4] = (struct hub_file){"huge-Q2_K.gguf", f->small, 16, STORIES_SHA,
                                        1ull << 60}; /* an exabyte: no disk has room */
    f->hub.n_files = 5;
    hub_start(&f->hub);
    snprintf(f->dir, sizeof(f->dir), "/tmp/kiln-hf-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->endpoint, sizeof(f->endpoint), "http://127.0.0.1:%d/", f->hub.port);
    f->log = tmpfile();
    f->opts = (struct hf_pull_opts){.models_dir = f->dir,
                                    .endpoint = f->endpoint,
                                    .token = "",
                                    .progress = DOWNLOAD_PROGRESS_LINES,
                                    .out = f->log};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[128];
    hub_stop(&f->hub);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    fclose(f->log);
    free(f->stories);
    free(f);
    return 0;
}

static char *log_text(struct fx *f)
{
    static char buf[16384];
    fflush(f->log);
    rewind(f->log);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f->log);
    buf[n] = '\0';
    return buf;
}

static void assert_file_is(const char *path, const unsigned char *data, size_t len)
{
    size_t n;
    unsigned char *p = read_all(path, &n);
    assert_non_null(p);
    assert_int_equal(n, len);
    assert_memory_equal(p, data, len);
    free(p);
}

/* ---- tests ---- */

static void test_sha256_matches_published_vectors(void **state)
{
    (void)state;
    struct sha256 s;
    char hex[65];
    sha256_init(&s);
    sha256_hex(&s, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha256_init(&s);
    sha256_update(&s, "abc", 3);
    sha256_hex(&s, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_init(&s);
    sha256_update(&s, two, 20); /* in uneven pieces */
    sha256_update(&s, two + 20, strlen(two) - 20);
    sha256_hex(&s, hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char a[1000];
    memset(a, 'a', sizeof(a));
    sha256_init(&s);
    for (int i = 0; i < 1000; i++)
        sha256_update(&s, a, sizeof(a));
    sha256_hex(&s, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_hf_ref_parsing_and_quant_names(void **state)
{
    (void)state;
    struct hf_ref r;
    char err[256];
    assert_int_equal(hf_parse_ref("hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", &r, err,
                                  sizeof(err)),
                     0);
    assert_string_equal(r.owner, "bartowski");
    assert_string_equal(r.repo, "Llama-3.2-1B-Instruct-GGUF");
    assert_string_equal(r.quant, "Q4_K_M");
    assert_int_equal(hf_parse_ref("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF", &r, err, sizeof(err)), 0);
    assert_string_equal(r.quant, "");
    assert_int_equal(
        hf_parse_ref("hf:ggml-org/models/tinyllamas/stories260K.gguf", &r, err, sizeof(err)), 0);
    assert_string_equal(r.file, "tinyllamas/stories260K.gguf");
    static const char *const bad[] = {"hf:", "hf:owner", "hf:/repo", "hf:o/r:", "hf:o/r:Q4 K",
                                      "hf:o/../x.gguf", "hf:o/r/../../etc/passwd.gguf",
                                      "hf:o/r/file.bin", "models/x.gguf"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(hf_parse_ref(bad[i], &r, err, sizeof(err)), -EINVAL);
        assert_true(err[0] != '\0');
    }
    assert_true(hf_name_matches_quant("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "q4_k_m"));
    assert_true(hf_name_matches_quant("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"));
    assert_true(hf_name_matches_quant("dir/model.IQ4_XS.gguf", "IQ4_XS"));
    assert_false(hf_name_matches_quant("model-Q4_K_M.gguf", "Q4_K"));
    assert_false(hf_name_matches_quant("model-IQ4_XS.gguf", "Q4_XS"));
    assert_false(hf_name_matches_quant("model-Q8_0.gguf", "Q8"));
}

static void test_hf_pull_picks_the_quant_checks_and_caches_it(void **state)
{
    struct fx *f = *state;
    char path[4096], err[512], want[256];
    f->opts.token = "secret-token";
    assert_int_equal(hf_pull("hf:o/r:q8_0", &f->opts, path, sizeof(path), err, sizeof(err)), 0);
    snprintf(want, sizeof(want), "%s/o/r/stories-Q8_0.gguf", f->dir);
    assert_string_equal(path, want);
    assert_file_is(path, f->stories, f->stories_len);
    assert_string_equal(f->hub.listing_auth, "Bearer secret-token");
    char part[4200];
    snprintf(part, sizeof(part), "%s.part", path);
    assert_int_not_equal(access(part, F_OK), 0);
    const char *log = log_text(f);
    fprintf(stderr, "%s", log);
    assert_non_null(strstr(log, "kiln: downloading stories-Q8_0.gguf: 100%"));

    /* the hub gone: the cached file is used, no request made */
    int before = atomic_load(&f->hub.requests);
    hub_stop(&f->hub);
    assert_int_equal(hf_pull("hf:o/r:Q8_0", &f->opts, path, sizeof(path), err, sizeof(err)), 0);
    assert_string_equal(path, want);
    assert_int_equal(atomic_load(&f->hub.requests), before);
}

static void test_hf_pull_resumes_a_cut_transfer_with_range(void **state)
{
    struct fx *f = *state;
    char path[4096], err[512];
    f->hub.cut_after = 300000;
    assert_int_equal(hf_pull("hf:o/r:Q8_0", &f->opts, path, sizeof(path), err, sizeof(err)), 0);
    assert_file_is(path, f->stories, f->stories_len);
    assert_int_equal(atomic_load(&f->hub.cdn_requests), 2);
    assert_string_equal(f->hub.last_range, "bytes=300000-");
    assert_non_null(strstr(log_text(f), "retrying from byte 300000"));
}

static void test_hf_pull_resumes_a_part_file_left_by_an_earlier_run(void **state)
{
    struct fx *f = *state;
    char path[4096], err[512], part[300];
    snprintf(part, sizeof(part), "%s/o/r", f->dir);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s", part);
    assert_int_equal(system(cmd), 0);
    snprintf(part, sizeof(part), "%s/o/r/stories-Q8_0.gguf.part", f->dir);
    FILE *p = fopen(part, "wb");
    assert_non_null(p);
    assert_int_equal(fwrite(f->stories, 1, 1000, p), 1000);
    fclose(p);
    assert_int_equal(hf_pull("hf:o/r:Q8_0", &f->opts, path, sizeof(path), err, sizeof(err)), 0);
    assert_file_is(path, f->stories, f->stories_len);
    assert_string_equal(f->hub.last_range, "bytes=1000-");
}

static void test_hf_pull_refuses_a_wrong_checksum_and_keeps_nothing(void **state)
{
    struct fx *f = *state;
    char path[4096], err[512], dest[300];
    long rc = hf_pull("hf:o/r:Q4_K_M", &f->opts, path, sizeof(path), err, sizeof(err));
    fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, -EBADMSG);
    assert_non_null(strstr(err, "checksum mismatch"));
    snprintf(dest, sizeof(dest), "%s/o/r/stories-Q4_K_M.gguf", f->dir);
    assert_int_not_equal(access(dest, F_OK), 0);
    strcat(dest, ".part");
    assert_int_not_equal(access(dest, F_OK), 0);
}

static void test_hf_pull_names_what_the_repository_has(void **state)
{
    struct fx *f = *state;
    char path[4096], err[1024];
    assert_int_equal(hf_pull("hf:o/r:Q3_K_L", &f->opts, path, sizeof(path), err, sizeof(err)),
                     -ENOENT);
    fprintf(stderr, "%s\n", err);
    assert_non_null(strstr(err, "stories-Q8_0.gguf"));
    assert_null(strstr(err, "README"));
    assert_int_equal(hf_pull("hf:o/r:Q6_K", &f->opts, path, sizeof(path), err, sizeof(err)),
                     -ENOENT);
    assert_non_null(strstr(err, "split"));
    assert_true(hf_pull("hf:o/missing:Q8_0", &f->opts, path, sizeof(path), err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "o/missing"));
    /* a file larger than the free space is refused before any byte is fetched */
    int cdn = atomic_load(&f->hub.cdn_requests);
    assert_int_equal(hf_pull("hf:o/r:Q2_K", &f->opts, path, sizeof(path), err, sizeof(err)),
                     -ENOSPC);
    fprintf(stderr, "%s\n", err);
    assert_non_null(strstr(err, "free"));
    assert_int_equal(atomic_load(&f->hub.cdn_requests), cdn);
    /* offline and not cached: refused without a request */
    int before = atomic_load(&f->hub.requests);
    f->opts.offline = true;
    assert_int_equal(hf_pull("hf:o/r:Q8_0", &f->opts, path, sizeof(path), err, sizeof(err)),
                     -ENOENT);
    assert_int_equal(atomic_load(&f->hub.requests), before);
}

/* No --models-dir: the XDG cache folder (the flag's default is not a literal path). */
static void test_hf_pull_defaults_to_the_xdg_cache(void **state)
{
    struct fx *f = *state;
    struct kiln_config c;
    char path[4096], err[512], want[256];
    config_init(&c);
    assert_null(c.models_dir);
    f->opts.models_dir = c.models_dir;
    setenv("XDG_CACHE_HOME", f->dir, 1);
    assert_int_equal(hf_pull("hf:o/r:Q8_0", &f->opts, path, sizeof(path), err, sizeof(err)), 0);
    unsetenv("XDG_CACHE_HOME");
    snprintf(want, sizeof(want), "%s/kiln/models/o/r/stories-Q8_0.gguf", f->dir);
    assert_string_equal(path, want);
    assert_file_is(path, f->stories, f->stories_len);
}

/* The bar a terminal gets: one line redrawn with \r, bytes, rate and time left. */
static void test_hf_pull_draws_a_bar_with_bytes_rate_and_time_left(void **state)
{
    struct fx *f = *state;
    char path[4096], err[512];
    f->opts.progress = DOWNLOAD_PROGRESS_BAR;
    assert_int_equal(hf_pull("hf:o/r:Q8_0", &f->opts, path, sizeof(path), err, sizeof(err)), 0);
    const char *log = log_text(f);
    const char *bar = strstr(log, "\rstories-Q8_0.gguf [##############################] 100% ");
    assert_non_null(bar);
    assert_non_null(strstr(bar, " MiB / 1.1 MiB "));
    assert_non_null(strstr(bar, "/s "));
    assert_non_null(strstr(bar, " left \n"));
}

static bool worker_ready(void *arg)
{
    return kiln_output_contains(arg, "INFO serving");
}

/* kiln pull, then kiln --model hf:o/r:Q8_0 serving the file it finds in the cache */
static void test_kiln_serves_an_hf_model(void **state)
{
    struct fx *f = *state;
    char cmd[1024];
    const char *bin = getenv("KILN_BIN_DIR");
    setenv("HF_ENDPOINT", f->endpoint, 1);
    snprintf(cmd, sizeof(cmd), "timeout 60 %s/kiln pull hf:o/r:Q8_0 --models-dir %s --quiet",
             bin && *bin ? bin : "build", f->dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(atomic_load(&f->hub.cdn_requests), 1);

    const char *args[] = {"--model", "hf:o/r:Q8_0", "--models-dir", f->dir, NULL};
    struct kiln_proc *k = kiln_start(args);
    assert_non_null(k);
    assert_true(wait_until(worker_ready, k, 30000));
    assert_true(kiln_wait_output(k, "(cached)", 10000));
    struct http_response resp;
    const char *body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0}";
    assert_int_equal(http_request(kiln_port(k), "POST", "/v1/completions", NULL, body, &resp),
                     200);
    assert_non_null(strstr(resp.body, "\"text\""));
    http_response_free(&resp);
    assert_int_equal(kiln_stop(k), 0);
    kiln_destroy(k);
    assert_int_equal(atomic_load(&f->hub.cdn_requests), 1); /* served from the cache */
    unsetenv("HF_ENDPOINT");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_matches_published_vectors),
        cmocka_unit_test(test_hf_ref_parsing_and_quant_names),
        cmocka_unit_test_setup_teardown(test_hf_pull_picks_the_quant_checks_and_caches_it,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_hf_pull_resumes_a_cut_transfer_with_range, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hf_pull_resumes_a_part_file_left_by_an_earlier_run,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_hf_pull_refuses_a_wrong_checksum_and_keeps_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_hf_pull_names_what_the_repository_has, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_hf_pull_draws_a_bar_with_bytes_rate_and_time_left,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_hf_pull_defaults_to_the_xdg_cache, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_kiln_serves_an_hf_model, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
