/* `kiln reload` (reload_wait.h): SIGHUP, then /health's reload.signals and state polled. */
#include "reload_wait.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#include "auth.h"
#include "config.h"

/* How often /health is read while waiting. */
#define WAIT_POLL_MS 100
/* The default wait: under the unit's TimeoutStartSec (300 s), which bounds a reload too. */
#define WAIT_DEFAULT_MS 290000

struct body {
    char buf[65536];
    size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    size_t k = size * n;
    if (k > sizeof(b->buf) - 1 - b->len)
        return 0; /* too long for /health: an error */
    memcpy(b->buf + b->len, p, k);
    b->len += k;
    return k;
}

/* /health's "reload" object (a new reference), or NULL when kiln does not answer with it. */
static json_t *reload_state(const char *url, const char *auth_header, int tls)
{
    struct body b = {.len = 0};
    CURL *c = curl_easy_init();
    struct curl_slist *h = auth_header ? curl_slist_append(NULL, auth_header) : NULL;
    json_t *root = NULL, *rl = NULL;
    long code = 0;
    if (!c)
        goto out;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    if (h)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (tls) { /* kiln's own certificate, on its own address: the name need not match */
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (curl_easy_perform(c) != CURLE_OK)
        goto out;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    b.buf[b.len] = '\0';
    if ((root = json_loads(b.buf, 0, NULL)) && json_is_object(json_object_get(root, "reload")))
        rl = json_incref(json_object_get(root, "reload"));
out:
    json_decref(root);
    curl_slist_free_all(h);
    if (c)
        curl_easy_cleanup(c);
    return rl;
}

/* A key /health shows its details to: the metrics key, else the first API key. */
static int bearer(const struct kiln_config *cfg, char *out, size_t cap)
{
    struct auth a;
    char err[256];
    const struct auth_key *k = NULL;
    auth_init(&a);
    for (uint32_t i = 0; i < cfg->api_keys.n; i++)
        (void)auth_add_key(&a, cfg->api_keys.v[i], strlen(cfg->api_keys.v[i]));
    if (cfg->api_key_file)
        (void)auth_load_file(&a, cfg->api_key_file, err, sizeof(err));
    (void)auth_load_list(&a, getenv("KILN_API_KEYS"));
    if (cfg->metrics_key)
        (void)auth_set_metrics_key(&a, cfg->metrics_key);
    if (a.has_metrics_key)
        k = &a.metrics_key;
    else if (a.n_keys)
        k = &a.keys[0];
    out[0] = '\0';
    if (k)
        snprintf(out, cap, "Authorization: Bearer %.*s", (int)k->len, (const char *)k->bytes);
    auth_free(&a);
    return k != NULL;
}

static long long signals_of(json_t *rl)
{
    return json_integer_value(json_object_get(rl, "signals"));
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int reload_wait_main(int argc, char **argv)
{
    struct kiln_config cfg;
    char err[512], url[300], auth[AUTH_KEY_MAX + 32];
    long pid = 0, wait_ms = WAIT_DEFAULT_MS;
    char *rest[256];
    int n = 0, status = 3;
    rest[n++] = "kiln";
    for (int i = 1; i < argc && n < 255; i++) {
        if (strcmp(argv[i], "--pid") == 0 && i + 1 < argc)
            pid = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--wait-ms") == 0 && i + 1 < argc)
            wait_ms = strtol(argv[++i], NULL, 10);
        else
            rest[n++] = argv[i];
    }
    rest[n] = NULL;
    config_init(&cfg);
    if (pid <= 0 || wait_ms <= 0) {
        fprintf(stderr, "usage: kiln reload --pid PID [--wait-ms N] [--config FILE] [kiln's "
                        "flags, as the server was started with]\n");
        config_free(&cfg);
        return 2;
    }
    if (config_parse(&cfg, n, rest, err, sizeof(err)) < 0) { /* kiln would refuse it too */
        fprintf(stderr, "kiln reload: %s; kiln was not signalled\n", err);
        config_free(&cfg);
        return 1;
    }
    /* where kiln listens: a wildcard address is reached on loopback */
    const char *host = cfg.host;
    if (!host || !*host || strcmp(host, "0.0.0.0") == 0)
        host = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
        host = "::1";
    snprintf(url, sizeof(url), "%s://%s%.100s%s:%u/health", cfg.tls_cert ? "https" : "http",
             strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", cfg.port);
    const char *ah = bearer(&cfg, auth, sizeof(auth)) ? auth : NULL;
    int tls = cfg.tls_cert != NULL;
    curl_global_init(CURL_GLOBAL_DEFAULT);

    json_t *before = reload_state(url, ah, tls);
    if (!before) {
        fprintf(stderr, "kiln reload: no /health reload state from %s (is kiln running there, "
                        "with the same config and keys?)\n", url);
        goto out;
    }
    long long s0 = signals_of(before);
    json_decref(before);
    if (kill((pid_t)pid, SIGHUP) < 0) {
        fprintf(stderr, "kiln reload: cannot signal pid %ld: %s\n", pid, strerror(errno));
        goto out;
    }
    long long end = mono_ms() + wait_ms;
    while (mono_ms() < end) {
        sleep_ms(WAIT_POLL_MS);
        json_t *rl = reload_state(url, ah, tls);
        const char *st = rl ? json_string_value(json_object_get(rl, "state")) : NULL;
        if (rl && st && signals_of(rl) > s0 && strcmp(st, "rolling") != 0) {
            const char *why = json_string_value(json_object_get(rl, "error"));
            if (strcmp(st, "failed") == 0) {
                fprintf(stderr, "kiln reload: failed: %s\n", why ? why : "(no reason given)");
                status = 1;
            } else {
                printf("kiln reload: %s\n", strcmp(st, "done") == 0 ? "done: the workers rolled"
                                                                  : "applied");
                status = 0;
            }
            json_decref(rl);
            goto out;
        }
        json_decref(rl);
    }
    fprintf(stderr, "kiln reload: not over after %ld ms (see /health's reload and the log)\n",
            wait_ms);
out:
    curl_global_cleanup();
    config_free(&cfg);
    return status;
}
