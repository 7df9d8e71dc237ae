/* A worker's stderr pipe: forwarded by whole lines, its tail kept (worker_stderr.h). */
#include "worker_stderr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

static void forward(const char *b, size_t n)
{
    while (n > 0) {
        ssize_t k = write(STDERR_FILENO, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return; /* our own stderr is gone: nothing better to do */
        b += k;
        n -= (size_t)k;
    }
}

static void tail_append(struct worker_stderr *e, const char *b, size_t n)
{
    if (n >= WORKER_STDERR_TAIL) {
        memcpy(e->tail, b + n - WORKER_STDERR_TAIL, WORKER_STDERR_TAIL);
        e->tail_len = WORKER_STDERR_TAIL;
        return;
    }
    if (e->tail_len + n > WORKER_STDERR_TAIL) {
        size_t drop = e->tail_len + n - WORKER_STDERR_TAIL;
        memmove(e->tail, e->tail + drop, e->tail_len - drop);
        e->tail_len -= (uint32_t)drop;
    }
    memcpy(e->tail + e->tail_len, b, n);
    e->tail_len += (uint32_t)n;
}

/* Forward what is held of an unfinished line (at death, or when it grew too long). */
static void line_flush(struct worker_stderr *e, bool add_newline)
{
    if (!e->line_len)
        return;
    forward(e->line, e->line_len);
    if (add_newline)
        forward("\n", 1);
    e->line_len = 0;
}

void worker_stderr_consume(struct worker_stderr *e, const char *b, size_t n)
{
    const char *nl = memrchr(b, '\n', n);
    tail_append(e, b, n);
    if (nl) {
        line_flush(e, false);
        forward(b, (size_t)(nl + 1 - b));
        n -= (size_t)(nl + 1 - b);
        b = nl + 1;
    }
    if (e->line_len + n > WORKER_STDERR_LINE) {
        line_flush(e, false);
        forward(b, n);
        return;
    }
    memcpy(e->line + e->line_len, b, n);
    e->line_len += (uint32_t)n;
}

/* Read what the pipe holds. Returns 0 (would block), 1 at its end, or -errno. */
static int err_read(struct worker_stderr *e)
{
    char buf[4096];
    for (;;) {
        ssize_t n = read(e->fd, buf, sizeof(buf));
        if (n > 0) {
            worker_stderr_consume(e, buf, (size_t)n);
            continue;
        }
        if (n == 0)
            return 1;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN ? 0 : -errno;
    }
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct worker_stderr *e = arg;
    (void)fd;
    (void)what;
    if (err_read(e) != 0) {
        /* at its end a pipe stays readable: stop watching, the fd closes with the worker */
        line_flush(e, true);
        event_del(e->ev);
    }
}

void worker_stderr_init(struct worker_stderr *e)
{
    e->fd = -1;
    e->ev = NULL;
    e->tail_len = e->line_len = 0;
}

int worker_stderr_open(struct worker_stderr *e, struct event_base *base, int *child_end)
{
    int fds[2], err;
    worker_stderr_close(e);
    e->tail_len = e->line_len = 0;
    /* the read end does not block the loop; the worker's end blocks as a stderr should */
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    if (fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0) {
        err = -errno;
        goto fail;
    }
    if (!(e->ev = event_new(base, fds[0], EV_READ | EV_PERSIST, on_readable, e)) ||
        event_add(e->ev, NULL) < 0) {
        err = -ENOMEM;
        goto fail;
    }
    e->fd = fds[0];
    *child_end = fds[1];
    return 0;
fail:
    if (e->ev)
        event_free(e->ev);
    e->ev = NULL;
    (void)close(fds[0]);
    (void)close(fds[1]);
    return err;
}

void worker_stderr_finish(struct worker_stderr *e)
{
    if (e->fd >= 0)
        (void)err_read(e); /* its last words are all in the pipe now */
    line_flush(e, true);
}

void worker_stderr_close(struct worker_stderr *e)
{
    if (e->ev) {
        event_free(e->ev);
        e->ev = NULL;
    }
    if (e->fd >= 0)
        (void)close(e->fd);
    e->fd = -1;
}

void worker_stderr_lines(const struct worker_stderr *e, unsigned n, char *out, size_t cap)
{
    const char *t = e->tail;
    size_t end = e->tail_len, start;
    unsigned lines = 0;
    size_t o = 0;

    while (end > 0 && (t[end - 1] == '\n' || t[end - 1] == '\r'))
        end--;
    start = end;
    while (start > 0 && lines < n) {
        if (t[start - 1] == '\n' && ++lines == n)
            break;
        start--;
    }
    /* keep the newest bytes when it does not fit */
    if (end - start > cap - 1)
        start = end - (cap - 1);
    for (size_t i = start; i < end && o + 4 < cap; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c == '\n') {
            memcpy(out + o, " | ", 3);
            o += 3;
        } else {
            out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
        }
    }
    out[o] = '\0';
}
