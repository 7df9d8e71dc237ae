/* The access log (access_log.h). Lines are formatted on the stack and written with one
 * write(), like log.c's, so they never interleave with the workers' lines on a shared
 * stderr. */
#include "access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hist.h"

#include "log.h"

/* Process-wide, as log.c's: set at start (and on SIGHUP), read by the one event loop. */
static int access_fd = STDERR_FILENO; /* -1: off */
static char access_path[4096];        /* the file's path ("" for stderr or off) */

static int open_file(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        snprintf(err, errlen, "--access-log %s: %s", path, strerror(errno));
    return fd;
}

int access_log_open(const char *dest, char *err, size_t errlen)
{
    int fd = STDERR_FILENO;
    if (!dest || strcmp(dest, "stderr") == 0 || strcmp(dest, "off") == 0) {
        fd = dest && strcmp(dest, "off") == 0 ? -1 : STDERR_FILENO;
    } else {
        if (strlen(dest) >= sizeof(access_path)) {
            snprintf(err, errlen, "--access-log: the path is too long");
            return -ENAMETOOLONG;
        }
        if ((fd = open_file(dest, err, errlen)) < 0)
            return -errno;
    }
    access_log_close();
    access_fd = fd;
    snprintf(access_path, sizeof(access_path), "%s", fd > STDERR_FILENO ? dest : "");
    return 0;
}

void access_log_close(void)
{
    if (access_fd > STDERR_FILENO)
        close(access_fd);
    access_fd = -1;
    access_path[0] = '\0';
}

static const char *end_name(enum access_end e)
{
    static const char *const n[] = {"done", "error", "client_gone"};
    return (unsigned)e < 3 ? n[e] : "?";
}

/* s as one token of a text line: blanks, controls and non-ASCII bytes become '?'. */
static void text_token(char *out, size_t cap, size_t *off, const char *s)
{
    if (!*s)
        s = "-";
    for (; *s && *off + 1 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        out[(*off)++] = c <= ' ' || c >= 0x7f || c == '"' ? '?' : (char)c;
    }
    out[*off] = '\0';
}

/* Append printf output, clamped to the buffer. */
static void add(char *out, size_t cap, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(char *out, size_t cap, size_t *off, const char *fmt, ...)
{
    va_list ap;
    if (*off + 1 >= cap)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(out + *off, cap - *off, fmt, ap);
    va_end(ap);
    if (n > 0)
        *off += (size_t)n < cap - *off ? (size_t)n : cap - *off - 1;
}

static void add_json_str(char *out, size_t cap, size_t *off, const char *key, const char *s)
{
    add(out, cap, off, ",\"%s\":\"", key);
    log_json_escape(out, cap - 2, off, s);
    add(out, cap, off, "\"");
}

/* A millisecond figure from microseconds, or - (text) / null (JSON) for none. */
static void add_ms(char *out, size_t cap, size_t *off, bool json, const char *key, bool has,
                   uint64_t us)
{
    const char *sep = json ? "," : " ", *q = json ? "\"" : "", *eq = json ? ":" : "=";
    if (has)
        add(out, cap, off, "%s%s%s%s%s%.1f", sep, q, key, q, eq, (double)us / 1000.0);
    else
        add(out, cap, off, "%s%s%s%s%s%s", sep, q, key, q, eq, json ? "null" : "-");
}

size_t access_log_format(const struct access_entry *e, uint64_t now_us, bool json, char *out,
                         size_t cap)
{
    char stamp[40];
    size_t off = 0;
    bool has_ttft = e->t_start_us && e->t_first_us >= e->t_start_us;
    uint64_t dur = now_us >= e->t_start_us ? now_us - e->t_start_us : 0;

    cap -= 1; /* room for the '\n' */
    log_time_stamp(stamp, sizeof(stamp));
    if (json) {
        add(out, cap, &off, "{\"time\":\"%s\",\"pid\":%ld,\"role\":\"access\",\"level\":\"info\","
            "\"msg\":\"access\"", stamp, (long)getpid());
        add_json_str(out, cap, &off, "method", e->method);
        add_json_str(out, cap, &off, "route", e->route);
        add(out, cap, &off, ",\"status\":%d,\"tokens_in\":%" PRIu32 ",\"tokens_out\":%" PRIu32,
            e->status, e->tokens_in, e->tokens_out);
    } else {
        add(out, cap, &off, "%s kiln[%ld] access: ", stamp, (long)getpid());
        text_token(out, cap, &off, e->method);
        add(out, cap, &off, " ");
        text_token(out, cap, &off, e->route);
        add(out, cap, &off, " %d tokens_in=%" PRIu32 " tokens_out=%" PRIu32, e->status,
            e->tokens_in, e->tokens_out);
    }
    add_ms(out, cap, &off, json, "ttft_ms", has_ttft, has_ttft ? e->t_first_us - e->t_start_us : 0);
    add_ms(out, cap, &off, json, "duration_ms", e->t_start_us != 0, dur);
    if (json) {
        if (e->worker >= 0)
            add(out, cap, &off, ",\"worker\":%d", e->worker);
        else
            add(out, cap, &off, ",\"worker\":null");
        add_json_str(out, cap, &off, "client", e->client);
        add_json_str(out, cap, &off, "request_id", e->rid);
        add(out, cap, &off, ",\"end\":\"%s\"}", end_name(e->end));
    } else {
        if (e->worker >= 0)
            add(out, cap, &off, " worker=%d", e->worker);
        else
            add(out, cap, &off, " worker=-");
        add(out, cap, &off, " client=");
        text_token(out, cap, &off, e->client);
        add(out, cap, &off, " request_id=");
        text_token(out, cap, &off, e->rid);
        add(out, cap, &off, " end=%s", end_name(e->end));
    }
    out[off++] = '\n';
    out[off] = '\0';
    return off;
}

void access_log_make_id(char *out, size_t cap)
{
    uint64_t r[2];
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        static uint64_t n;
        r[0] = hist_now_us() ^ ((uint64_t)getpid() << 32);
        r[1] = ++n;
    }
    snprintf(out, cap, "%016" PRIx64 "%016" PRIx64, r[0], r[1]);
}

void access_log_refused(int fd, int status)
{
    access_log_refused_at(fd, status, 0, NULL);
}

void access_log_refused_at(int fd, int status, uint64_t t_start_us, const char *rid)
{
    struct access_entry e = {.status = status, .worker = -1, .t_start_us = t_start_us};
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    snprintf(e.method, sizeof(e.method), "-");
    snprintf(e.route, sizeof(e.route), "-");
    snprintf(e.client, sizeof(e.client), "-");
    if (rid && request_id_valid(rid))
        snprintf(e.rid, sizeof(e.rid), "%s", rid);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, e.client,
                      sizeof(e.client));
        else if (ss.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, e.client,
                      sizeof(e.client));
    }
    access_log_write(&e, t_start_us ? hist_now_us() : 0);
}

void access_log_write(struct access_entry *e, uint64_t now_us)
{
    char line[2048]; /* the longest: a 95-byte route of controls, each escaped to 6 */
    if (e->written)
        return;
    e->written = true;
    if (access_fd < 0)
        return;
    size_t len = access_log_format(e, now_us, log_is_json(), line, sizeof(line));
    for (size_t done = 0; done < len;) {
        ssize_t n = write(access_fd, line + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* nowhere better to say so */
        done += (size_t)n;
    }
}
