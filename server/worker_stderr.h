/* A worker process's stderr, read from a pipe on the front's loop: forwarded to kiln's own
 * stderr as whole lines (so they do not interleave with the front's log lines), and its last
 * bytes kept, so that the supervisor can name the cause of a death. */
#ifndef WORKER_STDERR_H
#define WORKER_STDERR_H

#include <stddef.h>
#include <stdint.h>

struct event;
struct event_base;

/* Bytes of a worker's stderr kept for the cause of its death. */
#define WORKER_STDERR_TAIL 2048
/* Longest line held back while its end has not come (longer ones go out in parts). */
#define WORKER_STDERR_LINE 1024

struct worker_stderr {
    int fd;           /* the pipe's read end (non-blocking); -1 when none */
    struct event *ev; /* fd readable */
    char tail[WORKER_STDERR_TAIL]; /* the last bytes read (not NUL-terminated) */
    uint32_t tail_len;
    char line[WORKER_STDERR_LINE]; /* a line being forwarded, its end not read yet */
    uint32_t line_len;
};

/* An empty one, with no pipe. */
void worker_stderr_init(struct worker_stderr *e);

/* A pipe for a new process's stderr, watched on base from now on; the tail starts empty.
 * *child_end gets the write end (blocking, close-on-exec): the child dup2s it to its fd 2 and
 * the parent closes it after fork. Returns 0 or -errno with nothing left open. */
int worker_stderr_open(struct worker_stderr *e, struct event_base *base, int *child_end);

/* The process is gone: read what the pipe still holds and forward an unfinished line. */
void worker_stderr_finish(struct worker_stderr *e);

/* Close the pipe (the tail is kept). */
void worker_stderr_close(struct worker_stderr *e);

/* Take bytes the process wrote: kept in the tail, forwarded by whole lines. */
void worker_stderr_consume(struct worker_stderr *e, const char *b, size_t n);

/* The last n lines of the tail into out (cap > 0 bytes, NUL-terminated), joined with " | ",
 * printable ASCII only (other bytes become '?'; it goes into logs and JSON); the newest bytes
 * when they do not fit. */
void worker_stderr_lines(const struct worker_stderr *e, unsigned n, char *out, size_t cap);

#endif
