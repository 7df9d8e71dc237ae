/* The chat page: `/` (index.html) and `/webui/NAME` from the files the build embedded
 * (webui_assets.c), or from --webui-dir first when given; `/webui/config.json` tells the page
 * whether to ask for an API key. Static bytes only: the page talks to the API like any other
 * client. Not for big files, ranges or directory listings. */
#include "webui.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http.h"

#include "config.h"
#include "log.h"
#include "webui_assets.h"

#define WEBUI_PREFIX "/webui/"
/* A file read from --webui-dir may be at most this big (it is a development aid). */
#define WEBUI_DIR_MAX_BYTES (16u << 20)

/* No inline script or style, nothing from another origin; the page only fetches its own
 * files and calls its own server's API. Images only from here or data: (a markdown image
 * naming another host stays blank rather than tell that host who reads the answer). */
static const char webui_csp[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

static const struct {
    const char *ext;
    const char *type;
} webui_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".txt", "text/plain; charset=utf-8"},
    {".map", "application/json"},
    {".woff2", "font/woff2"},
};

const char *webui_content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (dot && !strchr(dot, '/'))
        for (size_t i = 0; i < sizeof(webui_types) / sizeof(webui_types[0]); i++)
            if (strcasecmp(dot, webui_types[i].ext) == 0)
                return webui_types[i].type;
    return "application/octet-stream";
}

/* Skip blanks. */
static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

bool webui_accepts_gzip(const char *ae)
{
    bool gzip_seen = false, gzip_ok = false, star_ok = false;

    if (!ae)
        return false;
    while (*ae) {
        const char *tok = skip_ws(ae), *end = tok;
        double q = 1.0;
        while (*end && *end != ',' && *end != ';' && *end != ' ' && *end != '\t')
            end++;
        size_t n = (size_t)(end - tok);
        const char *p = skip_ws(end);
        /* parameters: only q matters */
        while (*p == ';') {
            p = skip_ws(p + 1);
            if ((p[0] == 'q' || p[0] == 'Q') && p[1] == '=')
                q = strtod(p + 2, NULL);
            while (*p && *p != ',' && *p != ';')
                p++;
        }
        if (n == 4 && strncasecmp(tok, "gzip", 4) == 0) {
            gzip_seen = true;
            gzip_ok = q > 0;
        } else if (n == 1 && *tok == '*') {
            star_ok = q > 0;
        }
        while (*p && *p != ',')
            p++;
        ae = *p == ',' ? p + 1 : p;
    }
    return gzip_seen ? gzip_ok : star_ok;
}

bool webui_etag_matches(const char *inm, const char *etag)
{
    size_t elen = strlen(etag);

    if (!inm)
        return false;
    while (*inm) {
        const char *p = inm;
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        if (*p == '*')
            return true;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        const char *end = p;
        if (*end == '"') {
            end = strchr(p + 1, '"');
            end = end ? end + 1 : p + strlen(p);
        } else {
            while (*end && *end != ',')
                end++;
        }
        if ((size_t)(end - p) == elen && strncmp(p, etag, elen) == 0)
            return true;
        inm = end;
    }
    return false;
}

bool webui_safe_name(const char *rel)
{
    bool part_start = true;

    if (!*rel || strlen(rel) > 255)
        return false;
    for (const char *p = rel; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '/') {
            if (part_start)
                return false; /* an empty part: "//" or a leading '/' */
            part_start = true;
            continue;
        }
        if (part_start && c == '.')
            return false; /* ".", "..", hidden files */
        if (!isalnum(c) && c != '.' && c != '_' && c != '-')
            return false;
        part_start = false;
    }
    return !part_start;
}

static void add_common_headers(struct http_req *http, const char *type, const char *etag)
{
    if (type)
        http_set_header(http, "Content-Type", type);
    if (etag)
        http_set_header(http, "ETag", etag);
    /* revalidate every time: a new build changes the bytes and so the ETag */
    http_set_header(http, "Cache-Control", "no-cache");
    http_set_header(http, "Vary", "Accept-Encoding");
    http_set_header(http, "Content-Security-Policy", webui_csp);
    http_set_header(http, "X-Content-Type-Options", "nosniff");
    http_set_header(http, "Referrer-Policy", "no-referrer");
    http_set_header(http, "X-Frame-Options", "DENY");
    http_set_header(http, "Cross-Origin-Opener-Policy", "same-origin");
}

/* 304 when the client's copy is current; true when answered so. */
static bool not_modified(struct http_req *http, const char *etag)
{
    const char *inm = http_req_header(http, "If-None-Match");
    if (!webui_etag_matches(inm, etag))
        return false;
    add_common_headers(http, NULL, etag);
    http_reply(http, 304, "Not Modified", NULL, 0);
    return true;
}

static void send_body(struct http_req *http, const char *type, const char *etag,
                      const void *data, size_t len, bool gz)
{
    add_common_headers(http, type, etag);
    if (gz)
        http_set_header(http, "Content-Encoding", "gzip");
    /* the bytes are static: referenced, not copied */
    http_reply_static(http, 200, "OK", data, len);
}

static const struct webui_asset *find_asset(const char *url)
{
    for (unsigned i = 0; i < webui_n_assets; i++)
        if (webui_assets[i].url && strcmp(webui_assets[i].url, url) == 0)
            return &webui_assets[i];
    return NULL;
}

static void send_asset(struct http_req *http, const struct webui_asset *a)
{
    const char *ae = http_req_header(http, "Accept-Encoding");
    bool gz = a->gz && webui_accepts_gzip(ae);
    char etag[32];

    /* each encoding is its own representation, with its own tag */
    snprintf(etag, sizeof(etag), "\"%s%s\"", a->hash, gz ? "-gz" : "");
    if (not_modified(http, etag))
        return;
    send_body(http, webui_content_type(a->url), etag, gz ? a->gz : a->data,
              gz ? a->gz_len : a->len, gz);
}

/* Read len bytes of fd into body. Returns 0 or -errno (-EIO when the file shrank). */
static int read_into(char *body, int fd, size_t len)
{
    while (len > 0) {
        ssize_t n = read(fd, body, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;
        body += n;
        len -= (size_t)n;
    }
    return 0;
}

/* --webui-dir: dir/rel when it is a regular file. Returns 1 when answered, 0 when there is
 * no such file (the embedded one is tried next), -errno on a read error (answered 500). */
static int send_dir_file(struct http_req *http, const char *dir, const char *rel)
{
    char path[4096], etag[80];
    struct stat st;
    char *body;
    int fd;

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, rel) >= sizeof(path))
        return 0;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
        return 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > WEBUI_DIR_MAX_BYTES) {
        (void)close(fd);
        return 0;
    }
    snprintf(etag, sizeof(etag), "\"d%llx-%llx-%llx\"", (unsigned long long)st.st_ino,
             (unsigned long long)st.st_size,
             (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
                 (unsigned long long)st.st_mtim.tv_nsec);
    if (not_modified(http, etag)) {
        (void)close(fd);
        return 1;
    }
    if (!(body = malloc(st.st_size ? (size_t)st.st_size : 1)) ||
        read_into(body, fd, (size_t)st.st_size) < 0) {
        (void)close(fd);
        free(body);
        log_warn("webui: %s: cannot read", path);
        http_reply_error(http, 500);
        return -EIO;
    }
    (void)close(fd);
    add_common_headers(http, webui_content_type(rel), etag);
    http_reply(http, 200, "OK", body, (size_t)st.st_size);
    free(body);
    return 1;
}

static void send_config(struct http_req *http, bool key_required)
{
    char json[96];
    int n = snprintf(json, sizeof(json), "{\"api_key_required\":%s,\"markdown\":%s}\n",
                     key_required ? "true" : "false", webui_has_libs ? "true" : "false");
    add_common_headers(http, "application/json", NULL);
    http_set_header(http, "Cache-Control", "no-store");
    http_reply(http, 200, "OK", json, (size_t)n);
}

bool webui_handle(const struct kiln_config *cfg, struct http_req *http, const char *path,
                  bool key_required)
{
    enum http_method method = http_req_method(http);
    const char *url, *rel;
    const struct webui_asset *a;

    if (cfg->no_webui)
        return false;
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) {
        url = "/index.html";
    } else if (strncmp(path, WEBUI_PREFIX, strlen(WEBUI_PREFIX)) == 0) {
        url = path;
    } else {
        return false;
    }
    rel = url + (url == path ? strlen(WEBUI_PREFIX) : 1);
    if (!webui_safe_name(rel))
        return false; /* the API's 404 */
    if (method != HTTP_GET && method != HTTP_HEAD) {
        http_set_header(http, "Allow", "GET, HEAD");
        http_set_header(http, "Content-Type", "text/plain; charset=utf-8");
        http_reply(http, 405, "Method Not Allowed", NULL, 0);
        return true;
    }
    if (strcmp(url, WEBUI_PREFIX "config.json") == 0) {
        send_config(http, key_required);
        return true;
    }
    if (cfg->webui_dir && send_dir_file(http, cfg->webui_dir, rel) != 0)
        return true;
    if (!(a = find_asset(url)))
        return false;
    send_asset(http, a);
    return true;
}

int webui_init(const struct kiln_config *cfg, char *err, size_t errlen)
{
    struct stat st;

    if (cfg->no_webui) {
        if (cfg->webui_dir) {
            snprintf(err, errlen, "--webui-dir and --no-webui contradict each other");
            return -EINVAL;
        }
        log_info("web UI: off (--no-webui)");
        return 0;
    }
    if (cfg->webui_dir) {
        if (stat(cfg->webui_dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
            access(cfg->webui_dir, R_OK | X_OK) < 0) {
            snprintf(err, errlen, "--webui-dir %s: not a readable folder", cfg->webui_dir);
            return -EINVAL;
        }
        log_info("web UI: files from %s first, then the embedded ones", cfg->webui_dir);
    }
    if (!find_asset("/index.html")) {
        log_warn("web UI: this build embedded no page");
    } else if (!webui_has_libs) {
        log_warn("web UI: built without marked, DOMPurify and highlight.js (npm could not "
                 "install them): answers show as plain text");
    }
    return 0;
}
