/* Logging to stderr: "2026-12-02T09:00:00.123Z kiln[pid] worker 1: INFO message". Each line is
 * formatted into a stack buffer and written with one write(), so that lines from the front and
 * its workers (which share stderr) never interleave mid-line. No allocation, no locks. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Process-wide logging configuration: set once by log_init() at startup (before threads or
 * forks), read-only afterwards. The one piece of global state this module needs. */
static char log_role[32] = "kiln";
static enum log_level log_min = LOG_LEVEL_INFO;
static int log_json;

static void log_write_all(const char *buf, size_t len);

static const char *const log_level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void log_init(const char *role, enum log_level level)
{
    if (role != NULL)
        snprintf(log_role, sizeof(log_role), "%s", role);
    log_min = level;
    const char *fmt = getenv("KILN_LOG_FORMAT");
    if (fmt && strcmp(fmt, "json") == 0)
        log_json = 1;
}

void log_set_json(int on)
{
    log_json = on;
}

static const char *const log_level_lower[] = {"debug", "info", "warn", "error"};

const char *log_level_name(enum log_level level)
{
    return (unsigned)level <= LOG_LEVEL_ERROR ? log_level_lower[level] : "?";
}

enum log_level log_level_parse(const char *name, enum log_level dflt)
{
    for (int i = 0; name && i <= LOG_LEVEL_ERROR; i++)
        if (strcmp(name, log_level_lower[i]) == 0)
            return (enum log_level)i;
    return dflt;
}

bool log_is_json(void)
{
    return log_json != 0;
}

void log_json_escape(char *out, size_t cap, size_t *off, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    for (; *s && *off + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[(*off)++] = '\\';
            out[(*off)++] = (char)c;
        } else if (c < 0x20) {
            memcpy(out + *off, "\\u00", 4);
            out[*off + 4] = hex[c >> 4];
            out[*off + 5] = hex[c & 15];
            *off += 6;
        } else {
            out[(*off)++] = (char)c;
        }
    }
}

/* The JSON line of a message already formatted in text (its timestamp in stamp). */
static void log_write_json(enum log_level level, const char *stamp, const char *msg)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    char out[3 * 1024];
    size_t off = 0;
    int n = snprintf(out, sizeof(out), "{\"time\":\"%s\",\"pid\":%ld,\"role\":\"", stamp,
                     (long)getpid());
    off = n > 0 ? (size_t)n : 0;
    log_json_escape(out, sizeof(out), &off, log_role);
    n = snprintf(out + off, sizeof(out) - off, "\",\"level\":\"%s\",\"msg\":\"", names[level]);
    off += n > 0 ? (size_t)n : 0;
    log_json_escape(out, sizeof(out) - 3, &off, msg);
    memcpy(out + off, "\"}\n", 3);
    off += 3;
    log_write_all(out, off);
}

/* Writes all of buf, retrying on EINTR and short writes; errors are dropped (there is no
 * better place to report a failure to log). */
static void log_write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* A line that repeats (the same format, as from a loop that keeps failing) is written at
 * most LOG_REPEAT_BURST times a second; how many were left out is said with the next one
 * written. Per thread, so no lock: the state is the last format and its window. */
#define LOG_REPEAT_BURST 3
static _Thread_local const char *log_last_fmt;
static _Thread_local time_t log_last_sec;
static _Thread_local unsigned log_in_window, log_dropped;

/* Whether this line is written (and, when lines were left out, a note first). */
static int log_admit(const char *fmt, const struct timespec *ts, char *note, size_t cap)
{
    note[0] = '\0';
    if (fmt == log_last_fmt && ts->tv_sec == log_last_sec) {
        if (++log_in_window > LOG_REPEAT_BURST) {
            log_dropped++;
            return 0;
        }
        return 1;
    }
    if (log_dropped)
        snprintf(note, cap, " (and %u more like the last line)", log_dropped);
    log_dropped = 0;
    log_in_window = 1;
    log_last_sec = ts->tv_sec;
    if (fmt != log_last_fmt)
        log_last_fmt = fmt;
    return 1;
}

void log_time_stamp(char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

void log_write(enum log_level level, const char *fmt, ...)
{
    char line[1024], note[64];
    struct timespec ts;
    struct tm tm;
    size_t off;
    int n;
    int saved_errno = errno; /* callers may log and then inspect errno */

    if (level < log_min || level > LOG_LEVEL_ERROR)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (!log_admit(fmt, &ts, note, sizeof(note))) {
        errno = saved_errno;
        return;
    }
    gmtime_r(&ts.tv_sec, &tm);
    if (log_json) {
        char stamp[40], msg[1024];
        size_t so = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(stamp + so, sizeof(stamp) - so, ".%03ldZ", ts.tv_nsec / 1000000);
        va_list aj;
        va_start(aj, fmt);
        n = vsnprintf(msg, sizeof(msg) - sizeof(note), fmt, aj);
        va_end(aj);
        size_t ml = n < 0 ? 0 : strlen(msg);
        while (ml > 0 && msg[ml - 1] == '\n')
            msg[--ml] = '\0';
        snprintf(msg + ml, sizeof(msg) - ml, "%s", note);
        log_write_json(level, stamp, msg);
        errno = saved_errno;
        return;
    }
    off = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n = snprintf(line + off, sizeof(line) - off, ".%03ldZ kiln[%ld] %s: %s ",
                 ts.tv_nsec / 1000000, (long)getpid(), log_role, log_level_names[level]);
    if (n > 0)
        off += (size_t)n;
    if (off >= sizeof(line) - 1)
        off = sizeof(line) - 2;

    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(line + off, sizeof(line) - off - 1, fmt, ap);
    va_end(ap);
    if (n > 0)
        off += (size_t)n < sizeof(line) - off - 1 ? (size_t)n : sizeof(line) - off - 2;
    /* A truncated message still ends its line. Strip a trailing newline the caller added. */
    while (off > 0 && line[off - 1] == '\n')
        off--;
    n = snprintf(line + off, sizeof(line) - off - 1, "%s", note);
    if (n > 0)
        off += (size_t)n < sizeof(line) - off - 1 ? (size_t)n : sizeof(line) - off - 2;
    line[off++] = '\n';
    log_write_all(line, off);
    errno = saved_errno;
}
