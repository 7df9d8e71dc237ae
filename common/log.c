/* Logging to stderr: "2026-12-02T09:00:00.123Z kiln[pid] worker 1: INFO message". Each line is
 * formatted into a stack buffer and written with one write(), so that lines from the front and
 * its workers (which share stderr) never interleave mid-line. No allocation, no locks. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Process-wide logging configuration: set once by log_init() at startup (before threads or
 * forks), read-only afterwards. The one piece of global state this module needs. */
static char log_role[32] = "kiln";
static enum log_level log_min = LOG_LEVEL_INFO;

static const char *const log_level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void log_init(const char *role, enum log_level level)
{
    if (role != NULL)
        snprintf(log_role, sizeof(log_role), "%s", role);
    log_min = level;
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

void log_write(enum log_level level, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t off;
    int n;
    int saved_errno = errno; /* callers may log and then inspect errno */

    if (level < log_min || level > LOG_LEVEL_ERROR)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
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
    line[off++] = '\n';
    log_write_all(line, off);
    errno = saved_errno;
}
