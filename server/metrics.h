/* The front's Prometheus registry: its own latency histograms and request counters, plus a
 * renderer of the text exposition format (version 0.0.4) that also reads each worker's
 * shared-memory counters. No libevent and no I/O: metrics_render() returns a malloc'd
 * buffer the caller sends. The front is single-threaded, so the counters are plain. */
#ifndef METRICS_H
#define METRICS_H

#include "prefix_index.h"
#include <stddef.h>
#include <stdint.h>

#include "hist.h"

struct shm_region_hdr;

/* How a generation ended: kiln_requests_total{reason=...}. */
enum metrics_finish {
    METRICS_FINISH_STOP = 0,  /* EOS or a stop string */
    METRICS_FINISH_LENGTH,    /* max_tokens or the context */
    METRICS_FINISH_CANCELLED, /* the client left */
    METRICS_FINISH_ERROR,     /* a worker error or death */
    METRICS_FINISH_COUNT,
};

/* Why a request was refused before it ran: kiln_requests_rejected_total{reason=...}. */
enum metrics_reject {
    METRICS_REJECT_QUEUE_FULL = 0, /* 503: the waiting queue is full */
    METRICS_REJECT_RATE_LIMITED,   /* 429 */
    METRICS_REJECT_UNAUTHORIZED,   /* 401 */
    METRICS_REJECT_TOO_LARGE,      /* 413: body or prompt too long */
    METRICS_REJECT_INVALID,        /* 400: malformed JSON or parameters */
    METRICS_REJECT_UNAVAILABLE,    /* 503: no worker can serve (all failed, shutting down) */
    METRICS_REJECT_COUNT,
};

/* Why the front closed a client's connection itself: kiln_connections_dropped_total. */
enum metrics_drop {
    METRICS_DROP_CLIENT_TIMEOUT = 0, /* a paused stream's client read nothing */
    METRICS_DROP_HEADER_TIMEOUT,     /* 408: request line and headers too slow */
    METRICS_DROP_BODY_TIMEOUT,       /* 408: body too slow */
    METRICS_DROP_KEEPALIVE_TIMEOUT,  /* idle between requests */
    METRICS_DROP_COUNT,
};

/* What a chat prompt got from the memo of recent generations (server/gen_memo.h). */
enum metrics_memo {
    METRICS_MEMO_REUSED,    /* a remembered prompt and answer's ids, the rest tokenized */
    METRICS_MEMO_NONE,      /* nothing remembered starts it: tokenized whole */
    METRICS_MEMO_SPLIT,     /* one does, but the rest is not tokenized apart there: whole */
    METRICS_MEMO_COUNT,
};

/* The front's own series; all owned by the front process (one thread). */
struct metrics {
    struct hist ttft;       /* admission -> first token sent */
    struct hist itl;        /* between two tokens of one request */
    struct hist queue_time; /* admission -> job handed to a worker */
    struct hist e2e;        /* admission -> last byte */
    uint64_t prompt_tokens, generation_tokens;
    uint64_t finished[METRICS_FINISH_COUNT];
    uint64_t rejected[METRICS_REJECT_COUNT];
    uint64_t routed[PREFIX_ROUTE_COUNT]; /* jobs sent to a worker, by the rule that chose it */
    uint64_t memo[METRICS_MEMO_COUNT];   /* chat prompts, by what the memo gave them */
    uint64_t memo_tokens;                /* prompt ids taken from remembered generations */
    uint64_t running, waiting; /* gauges: set by metrics_set_requests() */
    uint64_t dropped[METRICS_DROP_COUNT];
    uint64_t streams_paused;   /* times a stream paused for a slow reader */
    uint64_t connections;      /* gauge: client connections open */
    uint64_t listener_paused;  /* times accepting stopped at --max-connections */
    struct hist loop_lag;      /* how late the loop ran a due timer: how long it was held */
    uint64_t loop_lag_max_us;  /* the longest of those */
};

/* What the front knows of one worker when it renders. state is a name from
 * worker_view_state() ("starting", "ready", "draining", "backoff", "failed", "stopped"; another name is
 * rendered as its own state label); hdr is the worker's live region, or NULL when no process
 * runs (its histograms are then left out). */
struct metrics_worker_view {
    uint32_t id;
    const char *state;
    uint64_t restarts; /* processes spawned after the first */
    const struct shm_region_hdr *hdr;
};

/* Zero every series. */
void metrics_init(struct metrics *m);

/* Latencies in microseconds (e.g. differences of hist_now_us()). */
void metrics_observe_ttft(struct metrics *m, uint64_t us);
void metrics_observe_itl(struct metrics *m, uint64_t us);
void metrics_observe_queue_time(struct metrics *m, uint64_t us);
void metrics_observe_e2e(struct metrics *m, uint64_t us);

/* Add one finished request's token counts (prompt, generated). */
void metrics_count_tokens(struct metrics *m, uint64_t prompt, uint64_t generated);
/* One request ended with reason (out-of-range reasons count as errors). */
void metrics_count_finished(struct metrics *m, enum metrics_finish reason);
/* One request was refused with reason (out-of-range reasons are ignored). */
void metrics_count_rejected(struct metrics *m, enum metrics_reject reason);
/* The current numbers of requests running on workers and waiting in the queue. */
void metrics_set_requests(struct metrics *m, uint64_t running, uint64_t waiting);

/* One connection closed by the front for reason (out-of-range reasons are ignored). */
void metrics_count_dropped(struct metrics *m, enum metrics_drop reason);
/* The event loop was held us microseconds past a due timer. */
void metrics_observe_loop_lag(struct metrics *m, uint64_t us);

/* The label value of each enum, as rendered ("stop", "queue_full", ...). */
const char *metrics_finish_name(enum metrics_finish reason);
const char *metrics_reject_name(enum metrics_reject reason);

/* Render every series of m and of workers[0..n_workers) in the Prometheus text format
 * (Content-Type "text/plain; version=0.0.4; charset=utf-8"). Returns a NUL-terminated
 * malloc'd string (the caller frees it) with its length in *len, or NULL when out of memory.
 * Worker regions are read with relaxed loads, so a histogram may be one observation behind
 * its worker; each rendered histogram is self-consistent (_count equals the +Inf bucket). */
char *metrics_render(const struct metrics *m, const struct metrics_worker_view *workers,
                     size_t n_workers, size_t *len);

#endif
