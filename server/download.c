/* Downloads with libcurl: the body of a small GET into memory (the hub's file listings), and
 * large files to "<dest>.part" with resume (Range), progress, a SHA-256 computed as the bytes
 * arrive, then fsync and rename. Knows nothing of Hugging Face's layout (hf_pull.c does). */
#include "download.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "sha256.h"

#define DL_USER_AGENT "kiln/1 (+libcurl)"
#define DL_CONNECT_TIMEOUT_S 15L
#define DL_STALL_S 60L /* a transfer that moves no byte this long is retried */

static void dl_global_init(void)
{
    static bool done;
    if (!done) {
        (void)curl_global_init(CURL_GLOBAL_DEFAULT);
        done = true;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct curl_slist *auth_header(const char *bearer)
{
    if (!bearer || !*bearer)
        return NULL;
    char *h = malloc(strlen(bearer) + 32);
    if (!h)
        return NULL;
    sprintf(h, "Authorization: Bearer %s", bearer);
    struct curl_slist *l = curl_slist_append(NULL, h);
    free(h);
    return l;
}

static void common_opts(CURL *c, const char *url, struct curl_slist *headers)
{
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    /* Authorization is not sent on to another host (the hub redirects to its CDN) */
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, DL_USER_AGENT);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, DL_CONNECT_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, DL_STALL_S);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    if (headers)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
}

static int status_errno(long code)
{
    if (code == 404)
        return -ENOENT;
    if (code == 401 || code == 403)
        return -EACCES;
    return -EIO;
}

/* ---- small bodies ---- */

struct membuf {
    char *p;
    size_t n, max;
    bool too_big;
};

static size_t mem_write(char *data, size_t size, size_t nmemb, void *arg)
{
    struct membuf *m = arg;
    size_t len = size * nmemb;
    if (m->n + len > m->max) {
        m->too_big = true;
        return 0;
    }
    char *p = realloc(m->p, m->n + len + 1);
    if (!p)
        return 0;
    memcpy(p + m->n, data, len);
    m->p = p;
    m->n += len;
    m->p[m->n] = '\0';
    return len;
}

int download_get(const char *url, const char *bearer, size_t max, char **body, size_t *len,
                 char *err, size_t errlen)
{
    struct membuf m = {.max = max};
    struct curl_slist *headers = auth_header(bearer);
    long code = 0;
    int rc = -EIO;
    dl_global_init();
    CURL *c = curl_easy_init();
    if (!c) {
        snprintf(err, errlen, "out of memory");
        curl_slist_free_all(headers);
        return -ENOMEM;
    }
    headers = curl_slist_append(headers, "Accept: application/json");
    common_opts(c, url, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (cc != CURLE_OK) {
        snprintf(err, errlen, "GET %s: %s", url,
                 m.too_big ? "answer too large" : curl_easy_strerror(cc));
    } else if (code != 200) {
        snprintf(err, errlen, "GET %s: HTTP %ld", url, code);
        rc = status_errno(code);
    } else {
        *body = m.p ? m.p : strdup("");
        *len = m.n;
        m.p = NULL;
        rc = *body ? 0 : -ENOMEM;
    }
    free(m.p);
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
    return rc;
}

/* ---- files ---- */

struct dl {
    const struct download_file_opts *o;
    CURL *curl;
    int fd;
    struct sha256 sha;
    uint64_t have;       /* bytes in the part file, all hashed */
    bool checked;        /* this attempt's status was looked at */
    int werr;            /* a write failure (-errno) */
    char linked_etag[96]; /* X-Linked-Etag of any response in the redirect chain */
    char etag[96];        /* ETag of the last response */
    /* progress */
    bool bar;
    double t0, last;
    uint64_t at0;     /* have when this run started */
    int last_tenth;
};

static void copy_header_value(char *dst, size_t cap, const char *v, size_t n)
{
    while (n && isspace((unsigned char)*v))
        v++, n--;
    while (n && isspace((unsigned char)v[n - 1]))
        n--;
    if (n >= 2 && v[0] == 'W' && v[1] == '/')
        v += 2, n -= 2;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"')
        v++, n -= 2;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg)
{
    struct dl *d = arg;
    size_t len = size * nmemb;
    static const char le[] = "x-linked-etag:", et[] = "etag:";
    if (len > 5 && strncmp(data, "HTTP/", 5) == 0)
        d->etag[0] = '\0'; /* a new response in the chain */
    else if (len > sizeof(le) - 1 && strncasecmp(data, le, sizeof(le) - 1) == 0)
        copy_header_value(d->linked_etag, sizeof(d->linked_etag), data + sizeof(le) - 1,
                          len - (sizeof(le) - 1));
    else if (len > sizeof(et) - 1 && strncasecmp(data, et, sizeof(et) - 1) == 0)
        copy_header_value(d->etag, sizeof(d->etag), data + sizeof(et) - 1,
                          len - (sizeof(et) - 1));
    return len;
}

static int restart_part(struct dl *d)
{
    if (ftruncate(d->fd, 0) < 0 || lseek(d->fd, 0, SEEK_SET) < 0)
        return -errno;
    sha256_init(&d->sha);
    d->have = 0;
    return 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct dl *d = arg;
    size_t len = size * nmemb, off = 0;
    if (!d->checked) {
        long code = 0;
        curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &code);
        d->checked = true;
        /* 200 to a Range request: the server sends the whole file again */
        if (code == 200 && d->have > 0 && (d->werr = restart_part(d)) < 0)
            return 0;
    }
    while (off < len) {
        ssize_t w = write(d->fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            d->werr = w < 0 ? -errno : -EIO;
            return 0;
        }
        off += (size_t)w;
    }
    sha256_update(&d->sha, data, len);
    d->have += len;
    return len;
}

static void fmt_mib(char *b, size_t cap, double bytes)
{
    if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(b, cap, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(b, cap, "%.1f MiB", bytes / (1024.0 * 1024));
}

static void fmt_eta(char *b, size_t cap, double s)
{
    if (s < 0 || s > 359999)
        snprintf(b, cap, "--:--");
    else if (s >= 3600)
        snprintf(b, cap, "%d:%02d:%02d", (int)s / 3600, (int)s / 60 % 60, (int)s % 60);
    else
        snprintf(b, cap, "%d:%02d", (int)s / 60, (int)s % 60);
}

static void show_progress(struct dl *d, bool final)
{
    const struct download_file_opts *o = d->o;
    double t = now_s(), el = t - d->t0;
    double rate = el > 0.001 ? (double)(d->have - d->at0) / el : 0;
    double total = o->size > 0 ? (double)o->size : 0;
    char got[32], tot[32], rs[32], eta[32];
    if (o->progress == DOWNLOAD_PROGRESS_NONE || !o->out)
        return;
    fmt_mib(got, sizeof(got), (double)d->have);
    fmt_mib(tot, sizeof(tot), total);
    fmt_mib(rs, sizeof(rs), rate);
    fmt_eta(eta, sizeof(eta), rate > 0 && total > 0 ? (total - (double)d->have) / rate : -1);
    int pct = total > 0 ? (int)(100.0 * (double)d->have / total) : 0;
    if (d->bar) {
        if (!final && t - d->last < 0.1)
            return;
        char bar[31];
        int fill = total > 0 ? pct * 30 / 100 : 0;
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(o->out, "\r%s [%s] %3d%% %s / %s  %s/s  %s left ", o->label, bar, pct, got,
                total > 0 ? tot : "?", rs, eta);
        if (final)
            fputc('\n', o->out);
    } else {
        int tenth = total > 0 ? pct / 10 : 0;
        if (tenth == d->last_tenth && (final ? tenth == 10 : t - d->last < 10))
            return;
        d->last_tenth = tenth;
        fprintf(o->out, "kiln: downloading %s: %d%% (%s of %s, %s/s, %s left)\n", o->label, pct,
                got, total > 0 ? tot : "?", rs, eta);
    }
    fflush(o->out);
    d->last = t;
}

static int on_xfer(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ult,
                   curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ult, (void)ulnow;
    show_progress(arg, false);
    return 0;
}

static bool is_sha256(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!isxdigit((unsigned char)s[n]))
            return false;
    return n == 64;
}

/* One transfer from d->have on. Returns 0, 1 when the server had nothing more (416), or
 * -errno (with err set) for a failure worth another attempt (-EIO) or not (others). */
static int transfer(struct dl *d, char *err, size_t errlen)
{
    const struct download_file_opts *o = d->o;
    struct curl_slist *headers = auth_header(o->bearer);
    long code = 0;
    int rc = 0;
    if (!(d->curl = curl_easy_init())) {
        curl_slist_free_all(headers);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    common_opts(d->curl, o->url, headers);
    curl_easy_setopt(d->curl, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(d->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, d);
    curl_easy_setopt(d->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(d->curl, CURLOPT_HEADERDATA, d);
    curl_easy_setopt(d->curl, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(d->curl, CURLOPT_XFERINFODATA, d);
    curl_easy_setopt(d->curl, CURLOPT_NOPROGRESS, 0L);
    if (d->have > 0)
        curl_easy_setopt(d->curl, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)d->have);
    d->checked = false;
    CURLcode cc = curl_easy_perform(d->curl);
    curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, &code);
    if (d->werr) {
        snprintf(err, errlen, "writing %s.part: %s", o->dest, strerror(-d->werr));
        rc = d->werr;
    } else if (cc == CURLE_HTTP_RETURNED_ERROR && code == 416 && d->have > 0) {
        rc = 1; /* the part file already holds everything */
    } else if (cc == CURLE_HTTP_RETURNED_ERROR) {
        snprintf(err, errlen, "GET %s: HTTP %ld", o->url, code);
        rc = code >= 500 || code == 429 ? -EIO : status_errno(code);
        if (rc == -EIO && code < 500 && code != 429)
            rc = -EPROTO;
    } else if (cc != CURLE_OK) {
        snprintf(err, errlen, "GET %s: %s", o->url, curl_easy_strerror(cc));
        rc = -EIO;
    } else if (d->have > 0 && code == 206 && !d->checked) {
        rc = 0; /* an empty 206: nothing was left */
    }
    curl_easy_cleanup(d->curl);
    d->curl = NULL;
    curl_slist_free_all(headers);
    return rc;
}

static int hash_existing(struct dl *d)
{
    char *buf = malloc(1 << 20);
    if (!buf)
        return -ENOMEM;
    sha256_init(&d->sha);
    d->have = 0;
    for (;;) {
        ssize_t n = read(d->fd, buf, 1 << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = -errno;
            free(buf);
            return e;
        }
        if (n == 0)
            break;
        sha256_update(&d->sha, buf, (size_t)n);
        d->have += (uint64_t)n;
    }
    free(buf);
    return 0;
}

static int fsync_dir_of(const char *path)
{
    char *dup = strdup(path);
    if (!dup)
        return -ENOMEM;
    int fd = open(dirname(dup), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dup);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int download_file(const struct download_file_opts *o, char *err, size_t errlen)
{
    struct dl d = {.o = o, .fd = -1, .last_tenth = -1};
    char part[4096], hex[65];
    unsigned attempts = o->attempts ? o->attempts : 5;
    int rc;

    dl_global_init();
    if (snprintf(part, sizeof(part), "%s.part", o->dest) >= (int)sizeof(part)) {
        snprintf(err, errlen, "path too long: %s", o->dest);
        return -ENAMETOOLONG;
    }
    if ((d.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", part, strerror(-rc));
        return rc;
    }
    while (flock(d.fd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            rc = -errno;
            snprintf(err, errlen, "lock %s: %s", part, strerror(-rc));
            goto fail;
        }
    }
    if (access(o->dest, F_OK) == 0) { /* another process finished it while we waited */
        rc = 0;
        unlink(part);
        goto out;
    }
    if ((rc = hash_existing(&d)) < 0) {
        snprintf(err, errlen, "reading %s: %s", part, strerror(-rc));
        goto fail;
    }
    struct statvfs vfs;
    if (o->size > 0 && (uint64_t)o->size > d.have && fstatvfs(d.fd, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < (uint64_t)o->size - d.have) {
        char need[32], have[32];
        fmt_mib(need, sizeof(need), (double)((uint64_t)o->size - d.have));
        fmt_mib(have, sizeof(have), (double)vfs.f_bavail * (double)vfs.f_frsize);
        snprintf(err, errlen, "%s needs %s more and its folder has %s free", o->label, need,
                 have);
        rc = -ENOSPC;
        if (d.have == 0)
            unlink(part);
        goto fail;
    }
    if (d.have > 0 && o->out && o->progress != DOWNLOAD_PROGRESS_NONE)
        fprintf(o->out, "kiln: resuming %s at byte %llu\n", o->label,
                (unsigned long long)d.have);
    d.bar = o->progress == DOWNLOAD_PROGRESS_BAR ||
            (o->progress == DOWNLOAD_PROGRESS_AUTO && o->out && isatty(fileno(o->out)));
    d.t0 = d.last = now_s();
    d.at0 = d.have;
    rc = -EIO;
    for (unsigned a = 0; a < attempts && rc == -EIO; a++) {
        if (o->size >= 0 && d.have == (uint64_t)o->size && a == 0 && d.have > 0) {
            rc = 0; /* complete but not yet renamed: just verify */
            break;
        }
        if (a > 0) {
            if (o->out && o->progress != DOWNLOAD_PROGRESS_NONE)
                fprintf(o->out, "%skiln: %s; retrying from byte %llu\n", d.bar ? "\n" : "", err,
                        (unsigned long long)d.have);
            struct timespec ts = {0, 250000000L << (a < 3 ? a : 2)}; /* 0.5 s .. 1 s */
            while (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            nanosleep(&ts, NULL); /* a back-off before reconnecting, not synchronisation */
        }
        rc = transfer(&d, err, errlen);
        if (rc == 1)
            rc = 0;
    }
    if (rc < 0)
        goto fail;
    show_progress(&d, true);

    sha256_hex(&d.sha, hex);
    const char *want = o->sha256 && *o->sha256 ? o->sha256
                       : is_sha256(d.linked_etag) ? d.linked_etag
                       : is_sha256(d.etag)        ? d.etag
                                                  : NULL;
    if (o->size >= 0 && d.have != (uint64_t)o->size) {
        snprintf(err, errlen, "%s: got %llu bytes, expected %lld", o->label,
                 (unsigned long long)d.have, (long long)o->size);
        rc = -EBADMSG;
        unlink(part);
        goto fail;
    }
    if (want && strcasecmp(want, hex) != 0) {
        snprintf(err, errlen, "%s: checksum mismatch: sha256 %s, the server publishes %s",
                 o->label, hex, want);
        rc = -EBADMSG;
        unlink(part);
        goto fail;
    }
    if (!want && o->out)
        fprintf(o->out, "kiln: %s: the server publishes no sha256; size checked only\n",
                o->label);
    if (fsync(d.fd) < 0 || rename(part, o->dest) < 0) {
        rc = -errno;
        snprintf(err, errlen, "saving %s: %s", o->dest, strerror(-rc));
        goto fail;
    }
    (void)fsync_dir_of(o->dest); /* the rename is durable on filesystems that allow it */
    rc = 0;
out:
fail:
    close(d.fd); /* also drops the lock */
    return rc;
}

int download_sha256_file(const char *path, char hex[65])
{
    struct dl d = {.fd = open(path, O_RDONLY | O_CLOEXEC)};
    if (d.fd < 0)
        return -errno;
    int rc = hash_existing(&d);
    close(d.fd);
    if (rc == 0)
        sha256_hex(&d.sha, hex);
    return rc;
}
