/* The access log: one line for each HTTP request once it is over for its client (answered,
 * failed, or the client gone): method, route, status, tokens in and out, time to the first
 * token, duration, worker, client address, request id and how it ended. Text or one JSON
 * object a line as --log-format says; to stderr with the other log lines, to a file of its
 * own (--access-log FILE, appended, opened again on SIGHUP for logrotate) or off. */
#ifndef ACCESS_LOG_H
#define ACCESS_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request_id.h"

/* How the request ended for its client. */
enum access_end {
    ACCESS_END_DONE,        /* answered (whatever the status) */
    ACCESS_END_ERROR,       /* failed after its answer began (an error event in a stream) or
                             * with a 5xx of its own (a worker crash, a timeout, ...) */
    ACCESS_END_CLIENT_GONE, /* the client left before the answer was over */
};

/* One request's line, filled as it goes. */
struct access_entry {
    char method[8];
    char route[96];               /* the path, without the query */
    char client[48];              /* the peer's address */
    char rid[REQUEST_ID_MAX + 1]; /* X-Request-Id */
    int status;                   /* as sent; 499 when the client left before any */
    enum access_end end;
    uint32_t tokens_in, tokens_out;
    int worker;                   /* the worker that ran it (the first choice's), -1: none */
    uint64_t t_start_us;          /* hist_now_us() when it came; 0: unknown */
    uint64_t t_first_us;          /* the first text, 0: none */
    bool written;                 /* its line is out: never twice */
};

/* Where lines go: "stderr" (the default), "off", or a file path (created 0640, appended;
 * opened anew on each call, so SIGHUP after logrotate moved it starts a new file). Returns 0,
 * or -errno with a one-line message in err (the destination is then unchanged). */
int access_log_open(const char *dest, char *err, size_t errlen);

/* Close a file opened by access_log_open(); lines go nowhere after. */
void access_log_close(void);

/* e's line (text, or JSON when json) into out (cap bytes, NUL-terminated, ending in '\n');
 * now_us is the end of the request. Returns its length (less than cap: the route is cut to
 * fit). */
size_t access_log_format(const struct access_entry *e, uint64_t now_us, bool json, char *out,
                         size_t cap);

/* Write e's line once (e->written set), in the log's format, with one write(). */
void access_log_write(struct access_entry *e, uint64_t now_us);

/* The line of a request the connection guard answered itself with status (400, 408, 413,
 * 431) before the API saw it: the peer of fd as the client, nothing else known. */
void access_log_refused(int fd, int status);

/* The same, with when its first byte came (hist_now_us(); 0: unknown, no duration) and the
 * X-Request-Id its refusal carries (NULL: none). */
void access_log_refused_at(int fd, int status, uint64_t t_start_us, const char *rid);

/* A request id for an answer the API does not give (a refusal): 32 hex digits, random, into
 * out (at least 33 bytes). */
void access_log_make_id(char *out, size_t cap);

#endif
