/* The front's Prometheus registry and its text-format renderer. Histograms come from struct
 * hist (microsecond buckets) and are rendered in seconds, cumulatively; worker series are
 * read from each worker's shared region. Renders into a growable buffer; sends nothing. */
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm_region.h"

/* Worker states that always get a kiln_worker_state series (0 or 1), so a dashboard sees a
 * state change as a value change rather than a series appearing. */
static const char *const known_states[] = {"starting", "ready",   "draining",
                                           "backoff",  "failed",  "stopped"};
#define N_KNOWN_STATES (sizeof(known_states) / sizeof(known_states[0]))

static const char *const finish_names[METRICS_FINISH_COUNT] = {
    [METRICS_FINISH_STOP] = "stop",
    [METRICS_FINISH_LENGTH] = "length",
    [METRICS_FINISH_CANCELLED] = "cancelled",
    [METRICS_FINISH_ERROR] = "error",
};

static const char *const reject_names[METRICS_REJECT_COUNT] = {
    [METRICS_REJECT_QUEUE_FULL] = "queue_full",
    [METRICS_REJECT_RATE_LIMITED] = "rate_limited",
    [METRICS_REJECT_UNAUTHORIZED] = "unauthorized",
    [METRICS_REJECT_TOO_LARGE] = "too_large",
    [METRICS_REJECT_INVALID] = "invalid",
    [METRICS_REJECT_UNAVAILABLE] = "unavailable",
};

void metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof(*m));
    hist_init(&m->ttft);
    hist_init(&m->itl);
    hist_init(&m->queue_time);
    hist_init(&m->e2e);
    hist_init(&m->loop_lag);
}

void metrics_observe_ttft(struct metrics *m, uint64_t us)
{
    hist_observe(&m->ttft, us);
}

void metrics_observe_itl(struct metrics *m, uint64_t us)
{
    hist_observe(&m->itl, us);
}

void metrics_observe_queue_time(struct metrics *m, uint64_t us)
{
    hist_observe(&m->queue_time, us);
}

void metrics_observe_e2e(struct metrics *m, uint64_t us)
{
    hist_observe(&m->e2e, us);
}

void metrics_count_tokens(struct metrics *m, uint64_t prompt, uint64_t generated)
{
    m->prompt_tokens += prompt;
    m->generation_tokens += generated;
}

void metrics_count_finished(struct metrics *m, enum metrics_finish reason)
{
    if ((unsigned)reason >= METRICS_FINISH_COUNT)
        reason = METRICS_FINISH_ERROR;
    m->finished[reason]++;
}

void metrics_count_rejected(struct metrics *m, enum metrics_reject reason)
{
    if ((unsigned)reason < METRICS_REJECT_COUNT)
        m->rejected[reason]++;
}

void metrics_set_requests(struct metrics *m, uint64_t running, uint64_t waiting)
{
    m->running = running;
    m->waiting = waiting;
}

const char *metrics_finish_name(enum metrics_finish reason)
{
    return (unsigned)reason < METRICS_FINISH_COUNT ? finish_names[reason] : "error";
}

const char *metrics_reject_name(enum metrics_reject reason)
{
    return (unsigned)reason < METRICS_REJECT_COUNT ? reject_names[reason] : "unknown";
}

/* A growable output buffer; the first failure sticks in err and later appends do nothing,
 * so the render code checks once at the end. */
struct buf {
    char *p;
    size_t len, cap;
    int err;
};

static bool buf_reserve(struct buf *b, size_t more)
{
    size_t cap;
    char *p;

    if (b->err)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more + 1)
        cap *= 2;
    if (!(p = realloc(b->p, cap))) {
        b->err = -ENOMEM;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

__attribute__((format(printf, 2, 3))) static void buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (!buf_reserve(b, 128))
        return;
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->err = -EINVAL;
        return;
    }
    if ((size_t)n >= b->cap - b->len) {
        if (!buf_reserve(b, (size_t)n))
            return;
        va_start(ap, fmt);
        n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

static void buf_puts(struct buf *b, const char *s)
{
    size_t n = strlen(s);

    if (!buf_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

/* A label value with the format's three escapes: backslash, double quote, newline. */
static void buf_label_value(struct buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            buf_puts(b, "\\\\");
        else if (*s == '"')
            buf_puts(b, "\\\"");
        else if (*s == '\n')
            buf_puts(b, "\\n");
        else if (buf_reserve(b, 1)) {
            b->p[b->len++] = *s;
            b->p[b->len] = '\0';
        }
    }
}

/* Microseconds as an exact decimal number of seconds: 50 -> "0.00005", 1500000 -> "1.5".
 * Exact digits keep `le` values stable across releases (no float rounding). */
static void buf_seconds(struct buf *b, uint64_t us)
{
    uint64_t frac = us % 1000000u;
    char digits[8];
    int n;

    if (frac == 0) {
        buf_printf(b, "%" PRIu64, us / 1000000u);
        return;
    }
    n = snprintf(digits, sizeof(digits), "%06" PRIu64, frac);
    while (n > 0 && digits[n - 1] == '0')
        digits[--n] = '\0';
    buf_printf(b, "%" PRIu64 ".%s", us / 1000000u, digits);
}

static void buf_family(struct buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series. labels: "" or already-rendered pairs like `worker="0"`. The
 * buckets are snapshotted once and _count is their sum, so the rendered histogram is
 * cumulative and consistent even while its (worker) writer keeps observing. */
static void buf_hist(struct buf *b, const char *name, const char *labels, const struct hist *h)
{
    uint64_t cum = 0, counts[HIST_BUCKETS];
    uint64_t sum_us = atomic_load_explicit(&h->sum_us, memory_order_relaxed);
    const char *sep = labels[0] ? "," : "";

    for (int i = 0; i < HIST_BUCKETS; i++)
        counts[i] = atomic_load_explicit(&h->count[i], memory_order_relaxed);
    for (int i = 0; i < HIST_BUCKETS - 1; i++) {
        cum += counts[i];
        buf_printf(b, "%s_bucket{%s%sle=\"", name, labels, sep);
        buf_seconds(b, hist_bounds_us[i]);
        buf_printf(b, "\"} %" PRIu64 "\n", cum);
    }
    cum += counts[HIST_BUCKETS - 1];
    buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);
    buf_printf(b, "%s_sum%s%s%s ", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "");
    buf_seconds(b, sum_us);
    buf_printf(b, "\n%s_count%s%s%s %" PRIu64 "\n", name, labels[0] ? "{" : "", labels,
               labels[0] ? "}" : "", cum);
}

static const char *const drop_names[METRICS_DROP_COUNT] = {
    [METRICS_DROP_CLIENT_TIMEOUT] = "client_timeout",
    [METRICS_DROP_HEADER_TIMEOUT] = "header_timeout",
    [METRICS_DROP_BODY_TIMEOUT] = "body_timeout",
    [METRICS_DROP_KEEPALIVE_TIMEOUT] = "keepalive_timeout",
};

void metrics_count_dropped(struct metrics *m, enum metrics_drop reason)
{
    if ((unsigned)reason < METRICS_DROP_COUNT)
        m->dropped[reason]++;
}

void metrics_observe_loop_lag(struct metrics *m, uint64_t us)
{
    hist_observe(&m->loop_lag, us);
    if (us > m->loop_lag_max_us)
        m->loop_lag_max_us = us;
}

static void render_connections(struct buf *b, const struct metrics *m)
{
    buf_family(b, "kiln_connections_dropped_total", "counter",
               "Client connections the front closed itself, by reason.");
    for (int i = 0; i < METRICS_DROP_COUNT; i++)
        buf_printf(b, "kiln_connections_dropped_total{reason=\"%s\"} %" PRIu64 "\n",
                   drop_names[i], m->dropped[i]);
    buf_family(b, "kiln_streams_paused_total", "counter",
               "Times a stream was paused on its worker because its client read too slowly.");
    buf_printf(b, "kiln_streams_paused_total %" PRIu64 "\n", m->streams_paused);
    buf_family(b, "kiln_connections_open", "gauge", "Client connections open.");
    buf_printf(b, "kiln_connections_open %" PRIu64 "\n", m->connections);
    buf_family(b, "kiln_listener_paused_total", "counter",
               "Times the front stopped accepting at --max-connections.");
    buf_printf(b, "kiln_listener_paused_total %" PRIu64 "\n", m->listener_paused);
    buf_family(b, "kiln_event_loop_lag_seconds", "histogram",
               "How late the front's event loop ran a due 10 ms probe timer (how long one "
               "iteration held it), while connections are open.");
    buf_hist(b, "kiln_event_loop_lag_seconds", "", &m->loop_lag);
    buf_family(b, "kiln_event_loop_lag_max_seconds", "gauge",
               "The longest event-loop iteration measured by the probe since start.");
    buf_printf(b, "kiln_event_loop_lag_max_seconds ");
    buf_seconds(b, m->loop_lag_max_us);
    buf_puts(b, "\n");
}

static void render_front(struct buf *b, const struct metrics *m)
{
    buf_family(b, "kiln_time_to_first_token_seconds", "histogram",
               "Time from admission to the first generated token sent.");
    buf_hist(b, "kiln_time_to_first_token_seconds", "", &m->ttft);
    buf_family(b, "kiln_inter_token_latency_seconds", "histogram",
               "Time between two consecutive tokens of one request.");
    buf_hist(b, "kiln_inter_token_latency_seconds", "", &m->itl);
    buf_family(b, "kiln_queue_time_seconds", "histogram",
               "Time a request waited in the front's queue before a worker took it.");
    buf_hist(b, "kiln_queue_time_seconds", "", &m->queue_time);
    buf_family(b, "kiln_request_duration_seconds", "histogram",
               "End-to-end request latency, from admission to the last byte.");
    buf_hist(b, "kiln_request_duration_seconds", "", &m->e2e);

    buf_family(b, "kiln_prompt_tokens_total", "counter", "Prompt tokens processed.");
    buf_printf(b, "kiln_prompt_tokens_total %" PRIu64 "\n", m->prompt_tokens);
    buf_family(b, "kiln_generation_tokens_total", "counter", "Tokens generated.");
    buf_printf(b, "kiln_generation_tokens_total %" PRIu64 "\n", m->generation_tokens);

    buf_family(b, "kiln_requests_total", "counter", "Requests finished, by finish reason.");
    for (int i = 0; i < METRICS_FINISH_COUNT; i++)
        buf_printf(b, "kiln_requests_total{reason=\"%s\"} %" PRIu64 "\n", finish_names[i],
                   m->finished[i]);
    buf_family(b, "kiln_requests_rejected_total", "counter",
               "Requests refused before they ran, by reason.");
    for (int i = 0; i < METRICS_REJECT_COUNT; i++)
        buf_printf(b, "kiln_requests_rejected_total{reason=\"%s\"} %" PRIu64 "\n",
                   reject_names[i], m->rejected[i]);

    buf_family(b, "kiln_route_decisions_total", "counter",
               "Jobs sent to a worker, by the rule that chose it: prefix (it held the longest "
               "cached prefix), least_loaded (none held one), busy (the one that did was much "
               "busier).");
    for (int i = 0; i < PREFIX_ROUTE_COUNT; i++)
        buf_printf(b, "kiln_route_decisions_total{reason=\"%s\"} %" PRIu64 "\n",
                   prefix_route_name((enum prefix_route_reason)i), m->routed[i]);

    static const char *const memo_names[METRICS_MEMO_COUNT] = {"reused", "none", "split"};
    buf_family(b, "kiln_chat_memo_total", "counter",
               "Chat prompts with cache_prompt on, by what the memo of recent answers gave: "
               "reused (a remembered prompt and answer's ids, the rest tokenized), none "
               "(nothing remembered starts the prompt), split (one does, but the rest cannot "
               "be tokenized on its own where it ends: tokenized whole).");
    for (int i = 0; i < METRICS_MEMO_COUNT; i++)
        buf_printf(b, "kiln_chat_memo_total{outcome=\"%s\"} %" PRIu64 "\n", memo_names[i],
                   m->memo[i]);
    buf_family(b, "kiln_chat_memo_tokens_total", "counter",
               "Chat prompt ids taken from remembered answers (and their prompts).");
    buf_printf(b, "kiln_chat_memo_tokens_total %" PRIu64 "\n", m->memo_tokens);

    buf_family(b, "kiln_requests_running", "gauge", "Requests running on a worker.");
    buf_printf(b, "kiln_requests_running %" PRIu64 "\n", m->running);
    buf_family(b, "kiln_requests_waiting", "gauge", "Requests waiting in the front's queue.");
    buf_printf(b, "kiln_requests_waiting %" PRIu64 "\n", m->waiting);
    render_connections(b, m);
}

static bool is_known_state(const char *s)
{
    for (size_t i = 0; i < N_KNOWN_STATES; i++)
        if (strcmp(s, known_states[i]) == 0)
            return true;
    return false;
}

/* Every series of a family sits under its one HELP/TYPE block, so each family loops over
 * the workers rather than each worker over the families. */
static void render_workers(struct buf *b, const struct metrics_worker_view *w, size_t n)
{
    char labels[32];

    buf_family(b, "kiln_worker_prefill_seconds", "histogram",
               "Worker time to prefill one prompt (current process).");
    for (size_t i = 0; i < n; i++) {
        if (!w[i].hdr)
            continue;
        snprintf(labels, sizeof(labels), "worker=\"%" PRIu32 "\"", w[i].id);
        buf_hist(b, "kiln_worker_prefill_seconds", labels, &w[i].hdr->prefill);
    }
    buf_family(b, "kiln_worker_decode_step_seconds", "histogram",
               "Worker time of one batched decode step (current process).");
    for (size_t i = 0; i < n; i++) {
        if (!w[i].hdr)
            continue;
        snprintf(labels, sizeof(labels), "worker=\"%" PRIu32 "\"", w[i].id);
        buf_hist(b, "kiln_worker_decode_step_seconds", labels, &w[i].hdr->decode_step);
    }

    buf_family(b, "kiln_worker_prompt_tokens_total", "counter",
               "Prompt tokens by how they were had: computed by a prefill, or reused from the "
               "KV cache (current process).");
    for (size_t i = 0; i < n; i++) {
        uint64_t all, reused;
        if (!w[i].hdr)
            continue;
        all = atomic_load_explicit(&w[i].hdr->n_prefill_tokens, memory_order_relaxed);
        reused = atomic_load_explicit(&w[i].hdr->n_prompt_reused, memory_order_relaxed);
        buf_printf(b, "kiln_worker_prompt_tokens_total{worker=\"%" PRIu32 "\",kind=\"computed\"} %" PRIu64 "\n",
                   w[i].id, all > reused ? all - reused : 0);
        buf_printf(b, "kiln_worker_prompt_tokens_total{worker=\"%" PRIu32 "\",kind=\"reused\"} %" PRIu64 "\n",
                   w[i].id, reused);
    }
    buf_family(b, "kiln_worker_kv_blocks", "gauge",
               "KV cache blocks: used by running sequences, cached (kept for reuse), free.");
    for (size_t i = 0; i < n; i++) {
        uint32_t all, used, cached;
        if (!w[i].hdr)
            continue;
        all = atomic_load_explicit(&w[i].hdr->kv_blocks, memory_order_relaxed);
        used = atomic_load_explicit(&w[i].hdr->kv_used, memory_order_relaxed);
        cached = atomic_load_explicit(&w[i].hdr->kv_cached, memory_order_relaxed);
        buf_printf(b, "kiln_worker_kv_blocks{worker=\"%" PRIu32 "\",state=\"used\"} %" PRIu32 "\n",
                   w[i].id, used);
        buf_printf(b, "kiln_worker_kv_blocks{worker=\"%" PRIu32 "\",state=\"cached\"} %" PRIu32 "\n",
                   w[i].id, cached);
        buf_printf(b, "kiln_worker_kv_blocks{worker=\"%" PRIu32 "\",state=\"free\"} %" PRIu32 "\n",
                   w[i].id, all >= used + cached ? all - used - cached : 0);
    }
    buf_family(b, "kiln_worker_kv_evictions_total", "counter",
               "Cached KV blocks reused for other tokens (current process).");
    for (size_t i = 0; i < n; i++)
        if (w[i].hdr)
            buf_printf(b, "kiln_worker_kv_evictions_total{worker=\"%" PRIu32 "\"} %" PRIu64 "\n",
                       w[i].id, atomic_load_explicit(&w[i].hdr->n_kv_evictions, memory_order_relaxed));

    buf_family(b, "kiln_worker_restarts_total", "counter",
               "Worker processes spawned after the first.");
    for (size_t i = 0; i < n; i++)
        buf_printf(b, "kiln_worker_restarts_total{worker=\"%" PRIu32 "\"} %" PRIu64 "\n",
                   w[i].id, w[i].restarts);

    buf_family(b, "kiln_worker_state", "gauge", "1 for the worker's current state, else 0.");
    for (size_t i = 0; i < n; i++) {
        const char *cur = w[i].state ? w[i].state : "unknown";

        for (size_t s = 0; s < N_KNOWN_STATES; s++)
            buf_printf(b, "kiln_worker_state{worker=\"%" PRIu32 "\",state=\"%s\"} %d\n",
                       w[i].id, known_states[s], strcmp(cur, known_states[s]) == 0);
        if (!is_known_state(cur)) {
            buf_printf(b, "kiln_worker_state{worker=\"%" PRIu32 "\",state=\"", w[i].id);
            buf_label_value(b, cur);
            buf_puts(b, "\"} 1\n");
        }
    }

    buf_family(b, "kiln_worker_up", "gauge", "1 when the worker is ready to serve.");
    for (size_t i = 0; i < n; i++)
        buf_printf(b, "kiln_worker_up{worker=\"%" PRIu32 "\"} %d\n", w[i].id,
                   w[i].state && strcmp(w[i].state, "ready") == 0);
}

char *metrics_render(const struct metrics *m, const struct metrics_worker_view *workers,
                     size_t n_workers, size_t *len)
{
    struct buf b = {0};

    render_front(&b, m);
    if (n_workers)
        render_workers(&b, workers, n_workers);
    if (b.err || !b.p) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
