/* The worker's scheduler: DESIGN's six steps per iteration, over the jobs the front sends.
 * It owns the sequence slots and the per-slot samplers; the front owns admission across
 * workers. Nothing here allocates after loop_create. */
#include "loop.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmask.h"
#include "hist.h"
#include "log.h"
#include "notify.h"
#include "proto.h"
#include "sampler.h"

#define LOOP_OUT_BUF      8192 /* the largest record we send: a TOKEN with 20 alternatives */
#define LOOP_ROOM_WAIT_MS 100  /* the longest sleep for room in a full to_front ring (the
                                  * front wakes us sooner; this keeps heartbeat and stop live) */

/* A job received from the front, not yet admitted */
struct loop_job {
    uint64_t req_id;
    char rid[WIRE_MAX_REQUEST_ID + 1]; /* the client's X-Request-Id ("": none), for the log */
    uint32_t n_prompt, max_new_tokens;
    bool cancelled;
    bool paused; /* PAUSE came while it waited: it starts paused */
    uint32_t *prompt; /* (max_context) */
    struct proto_sampling sampling;
    struct gmask_grammar *grammar; /* NULL: unconstrained; a reference held */
};

/* A running sequence; its index is its model slot */
struct loop_seq {
    bool active, cancelled, ignore_eos;
    bool paused; /* PAUSE: kept in its slot, left out of decode steps until RESUME */
    bool prefilling; /* admitted, its prompt computed in chunks: not running yet */
    uint32_t job;    /* while prefilling: its job (prompt, sampling, grammar) */
    uint32_t done;   /* while prefilling: prompt positions in the cache */
    uint64_t req_id;
    char rid[WIRE_MAX_REQUEST_ID + 1]; /* its job's */
    uint32_t last; /* the token to decode next */
    uint32_t generated, max_new_tokens;
    struct sampler *sampler;
    struct gmask_seq *gs;          /* the slot's grammar matcher */
    struct gmask_grammar *grammar; /* NULL: unconstrained; a reference held */
};

struct loop {
    struct model *m;
    struct gmask *gm; /* NULL: no vocabulary, so grammars are refused */
    struct shm_region *reg;
    struct shm_region_hdr *hdr;
    int wake_fd, notify_fd;
    struct notify_waiter *waiter; /* NULL: poll() fallback */
    uint32_t max_prefill_tokens, n_slots, cap_jobs;
    int idle_ms;
    volatile sig_atomic_t *stop;
    bool stopping; /* sends no longer wait for room */
    bool kv_wait;  /* the next job waits for room in the KV cache: a sequence must end */

    struct loop_seq *seqs; /* (n_slots) */
    int *order;            /* (n_slots) running slots, in admission order */
    uint32_t n_order, n_active;
    uint32_t n_paused;     /* of the running slots in order */
    int *batch_of;         /* (n_slots) decode_step: order index of each batch row */
    int *pre;              /* (n_slots) slots prefilling, in admission order */
    uint32_t n_pre;

    struct loop_job *jobs; /* (cap_jobs) */
    uint32_t *queue;       /* (cap_jobs) FIFO of job indices */
    uint32_t q_head, q_len;
    uint32_t *free_jobs; /* (cap_jobs) stack of unused job indices */
    uint32_t n_free_jobs;
    uint32_t *prompt_store; /* (cap_jobs, max_context) */

    float *logits;            /* (n_slots, n_vocab) */
    int *slots;               /* (n_slots) */
    uint32_t *tokens;         /* (n_slots) */
    struct model_result *res; /* (n_slots) */
    struct loop_job **pf_jobs;     /* (n_slots) admit: the jobs of one batched prefill */
    const uint32_t **pf_prompts;   /* (n_slots) their prompts */
    uint32_t *pf_ns;               /* (n_slots) and where this pass's chunk of each ends */
    uint8_t *pf_last;              /* (n_slots) whether that is the prompt's end */
    uint32_t *prompt_in;      /* (WIRE_MAX_PROMPT) a JOB's prompt as decoded */
    struct proto_msg in, out;
    struct proto_decoder *dec;
    unsigned char *buf; /* (LOOP_OUT_BUF) */
    uint32_t unflushed; /* records pushed since the last wake of the front */
};

static void loop_heartbeat(void *ctx)
{
    struct loop *l = ctx;

    atomic_fetch_add_explicit(&l->hdr->heartbeat, 1, memory_order_relaxed);
}

static void publish_counts(struct loop *l)
{
    struct model_cache_stats cs;

    atomic_store_explicit(&l->hdr->running, l->n_active + l->n_pre, memory_order_relaxed);
    atomic_store_explicit(&l->hdr->waiting, l->q_len, memory_order_relaxed);
    model_cache_stats(l->m, &cs);
    atomic_store_explicit(&l->hdr->kv_blocks, cs.blocks, memory_order_relaxed);
    atomic_store_explicit(&l->hdr->kv_used, cs.used, memory_order_relaxed);
    atomic_store_explicit(&l->hdr->kv_cached, cs.cached, memory_order_relaxed);
    atomic_store_explicit(&l->hdr->n_prompt_reused, cs.reused_tokens, memory_order_relaxed);
    atomic_store_explicit(&l->hdr->n_kv_evictions, cs.evictions, memory_order_relaxed);
}

/* Sleep on wake_fd for at most ms: through the io_uring waiter, or poll() without one. A
 * waiter error recurs (a submit that fails, a read completing with -EBADF), so calling it
 * again would return at once and spin: drop the waiter for good and poll() from then on. */
static void wait_wake(struct loop *l, int ms)
{
    if (l->waiter) {
        int rc = notify_waiter_wait(l->waiter, ms);

        if (rc >= 0)
            return; /* woken, timed out or interrupted: the caller re-checks */
        log_warn("the io_uring wait failed (%s): sleeping in poll() from now on", strerror(-rc));
        notify_waiter_destroy(l->waiter);
        l->waiter = NULL;
    }
    struct pollfd p = {.fd = l->wake_fd, .events = POLLIN};

    if (poll(&p, 1, ms) > 0)
        (void)notify_consume(l->wake_fd);
}

/* Wake the front if records went out since the last time (one write per batch, and only
 * when the front sleeps) */
static void flush(struct loop *l)
{
    int rc;

    if (!l->unflushed)
        return;
    l->unflushed = 0;
    if ((rc = notify_wake(&l->reg->to_front, l->notify_fd)) < 0)
        log_warn("waking the front: %s", strerror(-rc));
}

/* Push one record to the front. When the ring is full, the front is busy draining it into
 * its own buffers: say we wait for room (producer_waiting), wake it, and sleep on wake_fd
 * until its next pop wakes us, in bounded steps with the heartbeat moving. Returns 0,
 * -ECANCELED when told to stop meanwhile (the record is lost with the worker), or -errno. */
static int send_msg(struct loop *l, const struct proto_msg *msg)
{
    int len = proto_encode(msg, l->buf, LOOP_OUT_BUF), rc;

    if (len < 0) {
        log_error("encoding a record of type %d for request %llu: %s", (int)msg->type,
                  (unsigned long long)msg->req_id, strerror(-len));
        return len;
    }
    while ((rc = shm_ring_push(&l->reg->to_front, l->buf, (uint32_t)len)) == -EAGAIN) {
        l->unflushed = 1;
        flush(l);
        if (l->stopping || *l->stop)
            return -ECANCELED;
        loop_heartbeat(l);
        /* Announce, then retry: a pop between our full push and the announcement would
         * otherwise go unseen (notify.h's handshake). */
        notify_prepare_wait_room(&l->reg->to_front);
        rc = shm_ring_push(&l->reg->to_front, l->buf, (uint32_t)len);
        if (rc == -EAGAIN)
            wait_wake(l, LOOP_ROOM_WAIT_MS);
        notify_end_wait_room(&l->reg->to_front);
        if (rc != -EAGAIN)
            break;
    }
    if (rc < 0) {
        log_error("a record of %d bytes does not go into the ring: %s", len, strerror(-rc));
        return rc;
    }
    l->unflushed++;
    return 0;
}

/* "request 12 [client-id]" (or "request 12" without an id): how a job's log lines begin,
 * so that an operator finds the worker's lines of a request by the X-Request-Id the client,
 * the balancer and the front's access log name it by. */
static const char *job_tag(char *buf, size_t cap, uint64_t req_id, const char *rid)
{
    snprintf(buf, cap, "request %llu%s%s%s", (unsigned long long)req_id, rid[0] ? " [" : "",
             rid, rid[0] ? "]" : "");
    return buf;
}

static void send_started(struct loop *l, uint64_t req_id, const char *rid,
                         uint32_t prompt_tokens, uint32_t cached_tokens)
{
    char tag[WIRE_MAX_REQUEST_ID + 40];

    log_debug("%s: started, %u prompt tokens (%u cached)", job_tag(tag, sizeof(tag), req_id, rid),
              prompt_tokens, cached_tokens);
    l->out.type = MSG_TYPE_STARTED;
    l->out.req_id = req_id;
    l->out.u.prompt_tokens = prompt_tokens;
    l->out.cached_tokens = cached_tokens;
    (void)send_msg(l, &l->out); /* failures are logged where they happen */
}

/* The KV cache's block events since the last call, to the front's prefix index. */
static void send_cache_events(struct loop *l)
{
    int lost;
    uint32_t n;

    while ((n = model_cache_events(l->m, l->out.u.cache.ev, WIRE_MAX_CACHE_EVENTS, &lost)) ||
           lost) {
        l->out.type = MSG_TYPE_CACHE;
        l->out.req_id = 0;
        l->out.u.cache.reset = lost != 0;
        l->out.u.cache.n = n;
        if (send_msg(l, &l->out) < 0)
            return;
    }
}

static void send_done(struct loop *l, uint64_t req_id, const char *rid,
                      enum finish_reason reason, uint32_t completion_tokens)
{
    static const char *const why[] = {"stop", "length", "cancelled"};
    char tag[WIRE_MAX_REQUEST_ID + 40];

    log_debug("%s: done (%s), %u tokens", job_tag(tag, sizeof(tag), req_id, rid),
              (unsigned)reason < 3 ? why[reason] : "?", completion_tokens);
    l->out.type = MSG_TYPE_DONE;
    l->out.req_id = req_id;
    l->out.u.done.reason = reason;
    l->out.u.done.completion_tokens = completion_tokens;
    (void)send_msg(l, &l->out);
}

/* Every job that fails here goes through this one line of the log, with the reason its
 * client is given. */
static void send_failed(struct loop *l, uint64_t req_id, const char *rid, const char *error)
{
    char tag[WIRE_MAX_REQUEST_ID + 40];

    log_warn("%s: failed: %s", job_tag(tag, sizeof(tag), req_id, rid), error);
    l->out.type = MSG_TYPE_FAILED;
    l->out.req_id = req_id;
    snprintf(l->out.u.error, sizeof(l->out.u.error), "%s", error);
    (void)send_msg(l, &l->out);
}

/* Free a sequence's slot; the counts are published before its final record goes out, so a
 * front that reads the final record sees the slot free */
static void seq_end(struct loop *l, struct loop_seq *s)
{
    gmask_grammar_put(l->gm, s->grammar);
    s->grammar = NULL;
    model_seq_free(l->m, (int)(s - l->seqs));
    l->kv_wait = false;
    if (s->paused) {
        s->paused = false;
        l->n_paused--;
    }
    s->active = false;
    l->n_active--;
    publish_counts(l);
}

/* Whether a row of logits can be sampled: NaN or +inf (a broken model or kernel) makes the
 * sampler's choice and its logprobs meaningless. -inf is a masked token, which is fine. */
static bool logits_finite(const float *logits, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return false;
    return true;
}

#define LOOP_NONFINITE "the model produced non-finite logits"

/* Mask the logits by the sequence's grammar. Returns false when the sequence ended (a dead
 * end: no token can continue, which a correct grammar never reaches; failed, not the batch). */
static bool mask_grammar(struct loop *l, struct loop_seq *s, float *logits)
{
    long n = gmask_apply(l->gm, s->gs, logits);

    if (n > 0)
        return true;
    seq_end(l, s);
    send_failed(l, s->req_id, s->rid, n == 0 ? "the grammar allows no token here (a dead end)"
                                     : "the grammar is too ambiguous to follow");
    return false;
}

/* DESIGN step 6: sample the next token and send it; whether the sequence goes on. A token
 * that cannot be sent ends the sequence with FAILED rather than go missing yet be counted. */
static bool advance(struct loop *l, struct loop_seq *s, float *logits)
{
    uint32_t token;
    int rc;

    if (!logits_finite(logits, l->m->n_vocab)) {
        seq_end(l, s);
        send_failed(l, s->req_id, s->rid, LOOP_NONFINITE);
        return false;
    }
    if (s->grammar && !mask_grammar(l, s, logits))
        return false;
    token = sampler_sample(s->sampler, logits, &l->out.u.token);
    if (s->grammar && gmask_accept(l->gm, s->gs, token) < 0) {
        /* every allowed token had -inf (a logit_bias of -100 on each): nothing to pick */
        seq_end(l, s);
        send_failed(l, s->req_id, s->rid, "no token the grammar allows is left after logit_bias");
        return false;
    }
    for (uint32_t i = 0; s->grammar && i < l->m->n_eos && i < 16; i++) {
        if (token == l->m->eos[i]) { /* the grammar allowed it: it is complete */
            seq_end(l, s);
            send_done(l, s->req_id, s->rid, FINISH_REASON_STOP, s->generated);
            return false;
        }
    }
    if (!s->ignore_eos) {
        for (uint32_t i = 0; i < l->m->n_eos && i < 16; i++) {
            if (token == l->m->eos[i]) {
                seq_end(l, s);
                send_done(l, s->req_id, s->rid, FINISH_REASON_STOP, s->generated);
                return false;
            }
        }
    }
    l->out.type = MSG_TYPE_TOKEN;
    l->out.req_id = s->req_id;
    if ((rc = send_msg(l, &l->out)) < 0) {
        seq_end(l, s);
        send_failed(l, s->req_id, s->rid,
                    rc == -EINVAL ? LOOP_NONFINITE : "the worker could not send a token");
        return false;
    }
    s->generated++;
    s->last = token;
    if (s->grammar && gmask_seq_must_end(s->gs)) {
        /* complete, and nothing may follow: the end token is the only choice left */
        seq_end(l, s);
        send_done(l, s->req_id, s->rid, FINISH_REASON_STOP, s->generated);
        return false;
    }
    if (s->generated >= s->max_new_tokens) {
        seq_end(l, s);
        send_done(l, s->req_id, s->rid, FINISH_REASON_LENGTH, s->generated);
        return false;
    }
    return true;
}

/* --- the waiting list ------------------------------------------------------------------ */

static struct loop_job *queue_front(struct loop *l)
{
    return &l->jobs[l->queue[l->q_head]];
}

/* A job that will not start gives its grammar back */
static void job_release(struct loop *l, struct loop_job *job)
{
    gmask_grammar_put(l->gm, job->grammar);
    job->grammar = NULL;
}

/* The front job leaves the line, its storage kept (a job being prefilled) */
static uint32_t queue_take(struct loop *l)
{
    uint32_t idx = l->queue[l->q_head];
    l->q_head = (l->q_head + 1) % l->cap_jobs;
    l->q_len--;
    return idx;
}

static void job_free(struct loop *l, uint32_t idx)
{
    l->free_jobs[l->n_free_jobs++] = idx;
}

static void queue_pop(struct loop *l)
{
    job_free(l, queue_take(l));
}

/* A JOB from the front: checked, then queued; one that cannot run fails at once */
static void on_job(struct loop *l, const struct proto_msg *msg)
{
    const struct proto_job *j = &msg->u.job;
    uint32_t room, idx;
    struct loop_job *job;
    char why[160];

    if (j->n_prompt == 0) {
        send_failed(l, msg->req_id, j->request_id, "the prompt is empty");
        return;
    }
    if (j->n_prompt >= l->m->max_context) {
        snprintf(why, sizeof(why), "a prompt of %u tokens does not fit a context of %u",
                 j->n_prompt, l->m->max_context);
        send_failed(l, msg->req_id, j->request_id, why);
        return;
    }
    for (uint32_t i = 0; i < j->n_prompt; i++) {
        if (j->prompt[i] >= l->m->n_vocab) {
            snprintf(why, sizeof(why), "token id %u is outside the vocabulary of %u",
                     j->prompt[i], l->m->n_vocab);
            send_failed(l, msg->req_id, j->request_id, why);
            return;
        }
    }
    if (l->n_free_jobs == 0) {
        log_warn("request %llu: %u jobs wait already", (unsigned long long)msg->req_id,
                 l->q_len);
        send_failed(l, msg->req_id, j->request_id, "the worker's waiting list is full");
        return;
    }
    struct gmask_grammar *grammar = NULL;

    if (j->grammar_len) {
        char err[256];

        if (!l->gm) {
            send_failed(l, msg->req_id, j->request_id,
                        "this worker has no vocabulary to follow a grammar with");
            return;
        }
        /* compiled here, from the record's private copy: the compiler is the validator, so
         * a malformed grammar fails this job only */
        if (!(grammar = gmask_grammar_get(l->gm, j->grammar, j->grammar_len, err, sizeof(err)))) {
            snprintf(why, sizeof(why), "the job's grammar was refused: %.120s", err);
            send_failed(l, msg->req_id, j->request_id, why);
            return;
        }
    }
    idx = l->free_jobs[--l->n_free_jobs];
    job = &l->jobs[idx];
    job->grammar = grammar;
    job->req_id = msg->req_id;
    memcpy(job->rid, j->request_id, sizeof(job->rid)); /* checked by the decoder */
    job->n_prompt = j->n_prompt;
    room = l->m->max_context - j->n_prompt;
    job->max_new_tokens = j->max_new_tokens < room ? j->max_new_tokens : room;
    if (job->max_new_tokens == 0)
        job->max_new_tokens = 1; /* the front never sends 0; one token, then length */
    job->cancelled = false;
    job->paused = false;
    memcpy(job->prompt, j->prompt, (size_t)j->n_prompt * sizeof(*j->prompt));
    job->sampling = j->sampling;
    l->queue[(l->q_head + l->q_len) % l->cap_jobs] = idx;
    l->q_len++;
}

/* A CANCEL: mark the sequence or the waiting job; steps 1 and 3 end it. A request that has
 * already ended is not found, and that is fine: its final record is on its way. */
static void on_cancel(struct loop *l, uint64_t req_id)
{
    for (uint32_t i = 0; i < l->n_slots; i++) {
        if ((l->seqs[i].active || l->seqs[i].prefilling) && l->seqs[i].req_id == req_id) {
            l->seqs[i].cancelled = true;
            return;
        }
    }
    for (uint32_t k = 0; k < l->q_len; k++) {
        struct loop_job *job = &l->jobs[l->queue[(l->q_head + k) % l->cap_jobs]];

        if (job->req_id == req_id) {
            job->cancelled = true;
            return;
        }
    }
}

/* PAUSE / RESUME: the front's client reads slower than the sequence is generated. A paused
 * sequence keeps its slot and KV cache and is left out of decode steps, so it costs a slot but
 * no compute and no output. A job still waiting starts paused; an ended one is not found,
 * and that is fine. */
static void on_pause(struct loop *l, uint64_t req_id, bool pause)
{
    for (uint32_t i = 0; i < l->n_order; i++) {
        struct loop_seq *s = &l->seqs[l->order[i]];

        if (s->req_id == req_id) {
            if (s->paused != pause)
                l->n_paused += pause ? 1 : (uint32_t)-1;
            s->paused = pause;
            return;
        }
    }
    for (uint32_t i = 0; i < l->n_pre; i++) {
        struct loop_seq *s = &l->seqs[l->pre[i]];

        if (s->req_id == req_id) {
            l->jobs[s->job].paused = pause; /* it starts paused */
            return;
        }
    }
    for (uint32_t k = 0; k < l->q_len; k++) {
        struct loop_job *job = &l->jobs[l->queue[(l->q_head + k) % l->cap_jobs]];

        if (job->req_id == req_id) {
            job->paused = pause;
            return;
        }
    }
}

/* A record that did not decode. A JOB whose header names it gets its one final record, so
 * the front's slot comes free; a CANCEL's request is cancelled (its DONE follows). Anything
 * else is a broken front: -EPROTO, and the worker exits so the supervisor fails its jobs and
 * starts a new one, rather than leave a job that never ends. */
static int on_malformed(struct loop *l, uint32_t len)
{
    switch (l->in.type) {
    case MSG_TYPE_JOB:
        log_warn("request %llu: rejected a malformed JOB of %u bytes",
                 (unsigned long long)l->in.req_id, len);
        send_failed(l, l->in.req_id, "", "the worker received a malformed job");
        return 0;
    case MSG_TYPE_CANCEL:
        log_warn("request %llu: a malformed CANCEL of %u bytes, cancelling",
                 (unsigned long long)l->in.req_id, len);
        on_cancel(l, l->in.req_id);
        return 0;
    default:
        log_error("a malformed record of %u bytes from the front (no usable header)", len);
        return -EPROTO;
    }
}

/* Every record the front has sent. Returns 0, or -EPROTO when the ring is corrupt or a record
 * is beyond answering. */
static int read_records(struct loop *l)
{
    const void *rec;
    uint32_t len;
    int rc;

    while ((rc = shm_ring_peek(&l->reg->to_worker, &rec, &len)) == 0) {
        /* Decoded from a private copy with a zone kept across records: the front cannot
         * change the bytes between the checks and the use, and nothing is allocated here. */
        rc = proto_decoder_decode(l->dec, rec, len, &l->in, l->prompt_in, WIRE_MAX_PROMPT);
        shm_ring_pop(&l->reg->to_worker); /* nothing in l->in points into the ring */
        if (rc < 0) {
            if ((rc = on_malformed(l, len)) < 0)
                return rc;
            continue;
        }
        switch (l->in.type) {
        case MSG_TYPE_JOB:
            on_job(l, &l->in);
            break;
        case MSG_TYPE_CANCEL:
            on_cancel(l, l->in.req_id);
            break;
        case MSG_TYPE_PAUSE:
        case MSG_TYPE_RESUME:
            on_pause(l, l->in.req_id, l->in.type == MSG_TYPE_PAUSE);
            break;
        default:
            log_warn("rejected a record of type %d from the front", (int)l->in.type);
            break;
        }
    }
    if (rc != -EAGAIN) {
        log_error("the front's ring is corrupt: %s", strerror(-rc));
        return rc;
    }
    return 0;
}

/* --- the six steps --------------------------------------------------------------------- */

/* A sequence cancelled (why NULL) or failed while its prompt was being prefilled: its slot
 * and job come free; the caller takes it off l->pre. */
static void pre_end(struct loop *l, struct loop_seq *s, enum finish_reason reason,
                    const char *why)
{
    struct loop_job *job = &l->jobs[s->job];

    model_seq_free(l->m, (int)(s - l->seqs));
    s->prefilling = false;
    s->cancelled = false;
    job_release(l, job);
    job_free(l, s->job);
    publish_counts(l);
    if (why)
        send_failed(l, job->req_id, job->rid, why);
    else
        send_done(l, job->req_id, job->rid, reason, 0);
}

/* Step 1: cancelled sequences end with DONE cancelled, and their slots come free */
static void drop_cancelled(struct loop *l)
{
    uint32_t keep = 0;

    for (uint32_t i = 0; i < l->n_order; i++) {
        struct loop_seq *s = &l->seqs[l->order[i]];

        if (s->cancelled) {
            seq_end(l, s);
            send_done(l, s->req_id, s->rid, FINISH_REASON_CANCELLED, s->generated);
        } else {
            l->order[keep++] = l->order[i];
        }
    }
    l->n_order = keep;
    keep = 0;
    for (uint32_t i = 0; i < l->n_pre; i++) {
        struct loop_seq *s = &l->seqs[l->pre[i]];

        if (s->cancelled)
            pre_end(l, s, FINISH_REASON_CANCELLED, NULL);
        else
            l->pre[keep++] = l->pre[i];
    }
    l->n_pre = keep;
}

/* Step 2: sleep until the front sends a record (or the idle timeout, to check stop) */
static void sleep_idle(struct loop *l)
{
    flush(l);
    if (notify_prepare_sleep(&l->reg->to_worker)) {
        wait_wake(l, l->idle_ms);
        notify_end_sleep(&l->reg->to_worker);
    }
}

/* Step 4, after the batched prefill: the first token of a job in slot, whose prefill gave
 * logits (rc 0) or failed with why. The new sequence joins this iteration's decode step
 * unless it ended already. */
static void start_finish(struct loop *l, struct loop_job *job, int slot, int rc, const char *why,
                         float *logits)
{
    struct loop_seq *s = &l->seqs[slot];

    if (rc < 0) {
        model_seq_free(l->m, slot);
        job_release(l, job);
        send_failed(l, job->req_id, job->rid, why);
        return;
    }
    atomic_fetch_add_explicit(&l->hdr->n_prefills, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->hdr->n_prefill_tokens, job->n_prompt, memory_order_relaxed);
    s->active = true;
    s->cancelled = false;
    s->paused = job->paused;
    l->n_paused += job->paused;
    s->ignore_eos = job->sampling.ignore_eos;
    s->req_id = job->req_id;
    memcpy(s->rid, job->rid, sizeof(s->rid));
    s->generated = 0;
    s->max_new_tokens = job->max_new_tokens;
    s->grammar = job->grammar; /* the reference moves to the sequence */
    job->grammar = NULL;
    l->n_active++;
    publish_counts(l);
    if (s->grammar && gmask_seq_start(l->gm, s->gs, s->grammar) < 0) {
        seq_end(l, s);
        send_failed(l, job->req_id, job->rid, "the grammar is too ambiguous to follow");
        return;
    }
    if (advance(l, s, logits))
        l->order[l->n_order++] = slot;
}

/* A slot neither running nor taken by the first n jobs of this admission. */
static int free_slot(const struct loop *l, uint32_t n)
{
    for (uint32_t i = 0; i < l->n_slots; i++) {
        bool taken = l->seqs[i].active || l->seqs[i].prefilling;
        for (uint32_t k = 0; k < n && !taken; k++)
            taken = l->slots[k] == (int)i;
        if (!taken)
            return (int)i;
    }
    return -1; /* admission counts the free slots, so never */
}

/* Step 3: admit waiting jobs in order within the prefill budget and the KV cache's room; a
 * job cancelled while it waited is dropped when it reaches the front. With a model that
 * prefills in parts (ops->prefill_part), the budget bounds the prompt positions computed
 * between two decode steps: the sequences already prefilling go first, then new jobs; a
 * job is admitted when its prompt fits what is left, or when it is this iteration's first
 * prefill work, and then its prompt is cut to the budget and goes on in the next
 * iterations, so running sequences keep decoding meanwhile. Without it, the first job's
 * prompt is computed whole, however long.
 * Step 4: STARTED for each new job, one batched pass over every chunk, then the first token
 * of each sequence whose prompt is done. */
static void admit(struct loop *l)
{
    int slot, rc;
    bool parts = l->m->ops->prefill_part != NULL;
    uint32_t budget = l->max_prefill_tokens, count = 0, keep = 0;
    uint32_t free_slots = l->n_slots - l->n_active - l->n_pre;
    uint64_t t0;

    for (uint32_t i = 0; i < l->n_pre && budget > 0; i++) {
        struct loop_seq *s = &l->seqs[l->pre[i]];
        struct loop_job *job = &l->jobs[s->job];
        uint32_t len = job->n_prompt - s->done < budget ? job->n_prompt - s->done : budget;

        budget -= len;
        l->slots[count] = l->pre[i];
        l->pf_jobs[count] = job;
        l->pf_prompts[count] = job->prompt;
        l->pf_ns[count] = s->done + len;
        l->pf_last[count++] = s->done + len == job->n_prompt;
    }
    while (l->q_len) {
        struct loop_job *job = queue_front(l);
        uint32_t len;

        if (job->cancelled) {
            job_release(l, job);
            queue_pop(l); /* its storage stays untouched until the next read_records */
            publish_counts(l);
            send_done(l, job->req_id, job->rid, FINISH_REASON_CANCELLED, 0);
            continue;
        }
        if ((count > 0 && job->n_prompt > budget) || budget == 0 || free_slots == 0)
            break;
        slot = free_slot(l, count);
        /* room in the KV cache: linked prefix blocks and a reservation for its growth */
        rc = model_seq_begin(l->m, slot, job->prompt, job->n_prompt,
                             job->n_prompt + job->max_new_tokens, !job->sampling.no_cache);
        if (rc == -EAGAIN) {
            l->kv_wait = true; /* until a sequence ends */
            break;
        }
        if (rc < 0) {
            const char *why = l->m->error[0] ? l->m->error : strerror(-rc);

            job_release(l, job);
            queue_pop(l);
            publish_counts(l);
            send_failed(l, job->req_id, job->rid, why);
            continue;
        }
        len = job->n_prompt - (uint32_t)rc;
        if (parts && len > budget)
            len = budget;
        budget = parts ? budget - len : job->n_prompt < budget ? budget - job->n_prompt : 0;
        l->seqs[slot].job = queue_take(l); /* freed when its prompt is done */
        l->seqs[slot].req_id = job->req_id;
        l->seqs[slot].cancelled = false;
        free_slots--;
        publish_counts(l);
        l->slots[count] = slot;
        l->pf_jobs[count] = job;
        l->pf_prompts[count] = job->prompt;
        l->pf_ns[count] = (uint32_t)rc + len;
        l->pf_last[count++] = (uint32_t)rc + len == job->n_prompt;
        send_started(l, job->req_id, job->rid, job->n_prompt, (uint32_t)rc);
        sampler_reset(l->seqs[slot].sampler, &job->sampling, job->prompt, job->n_prompt);
    }
    if (count == 0)
        return;
    flush(l); /* the front learns of the starts before a long prefill */
    t0 = hist_now_us();
    if (parts)
        rc = l->m->ops->prefill_part(l->m, l->slots, l->pf_prompts, l->pf_ns, l->pf_last,
                                     (int)count, l->logits, l->res);
    else
        rc = model_prefill_batch(l->m, l->slots, l->pf_prompts, l->pf_ns, (int)count, l->logits,
                                 l->res);
    hist_observe(&l->hdr->prefill, hist_now_us() - t0);
    for (uint32_t i = 0; i < count; i++) {
        struct loop_seq *s = &l->seqs[l->slots[i]];
        int st = rc == (int)count ? l->res[i].status : -EIO;
        const char *why = st == -EIO && rc != (int)count ? "the batched prefill failed"
                          : l->res[i].error[0]           ? l->res[i].error
                                                         : strerror(-st);

        if (st >= 0 && !l->pf_last[i]) { /* more of its prompt next time */
            s->prefilling = true;
            s->done = l->pf_ns[i];
            l->pre[keep++] = l->slots[i];
            continue;
        }
        s->prefilling = false;
        start_finish(l, l->pf_jobs[i], l->slots[i], st, why,
                     l->logits + (size_t)i * l->m->n_vocab);
        job_free(l, s->job);
    }
    l->n_pre = keep;
    publish_counts(l);
}

/* Steps 5 and 6: one decode_batch over every running sequence that is not paused, then
 * advance each; paused ones keep their place in order */
static void decode_step(struct loop *l)
{
    uint32_t n = 0, keep = 0, b = 0;
    uint64_t t0;
    int got;

    for (uint32_t i = 0; i < l->n_order; i++) {
        struct loop_seq *s = &l->seqs[l->order[i]];

        if (s->paused)
            continue;
        l->slots[n] = l->order[i];
        l->tokens[n] = s->last;
        l->batch_of[n++] = (int)i;
    }
    if (n == 0)
        return;
    t0 = hist_now_us();
    got = model_decode_batch(l->m, l->slots, l->tokens, (int)n, l->logits, l->res);
    hist_observe(&l->hdr->decode_step, hist_now_us() - t0);
    atomic_fetch_add_explicit(&l->hdr->n_decode_steps, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->hdr->n_decoded_tokens, n, memory_order_relaxed);
    if (got != (int)n) {
        char why[96];

        snprintf(why, sizeof(why), "decode_batch returned %d results for %u sequences", got, n);
        log_error("%s", why);
        for (uint32_t i = 0; i < n; i++) {
            struct loop_seq *s = &l->seqs[l->slots[i]];

            seq_end(l, s);
            send_failed(l, s->req_id, s->rid, why);
        }
        for (uint32_t i = 0; i < l->n_order; i++)
            if (l->seqs[l->order[i]].paused)
                l->order[keep++] = l->order[i];
        l->n_order = keep;
        return;
    }
    for (uint32_t i = 0; i < l->n_order; i++) {
        struct loop_seq *s = &l->seqs[l->order[i]];

        if (b >= n || l->batch_of[b] != (int)i) {
            l->order[keep++] = l->order[i]; /* paused */
            continue;
        }
        if (l->res[b].status < 0) {
            const char *why = l->res[b].error[0] ? l->res[b].error : strerror(-l->res[b].status);

            seq_end(l, s);
            send_failed(l, s->req_id, s->rid, why);
        } else if (advance(l, s, l->logits + (size_t)b * l->m->n_vocab)) {
            l->order[keep++] = l->order[i];
        }
        b++;
    }
    l->n_order = keep;
}

/* On stop: whatever is held ends with FAILED, as far as the ring has room */
static void fail_all(struct loop *l, const char *why)
{
    l->stopping = true;
    for (uint32_t i = 0; i < l->n_order; i++) {
        struct loop_seq *s = &l->seqs[l->order[i]];

        seq_end(l, s);
        send_failed(l, s->req_id, s->rid, why);
    }
    l->n_order = 0;
    for (uint32_t i = 0; i < l->n_pre; i++)
        pre_end(l, &l->seqs[l->pre[i]], FINISH_REASON_CANCELLED, why);
    l->n_pre = 0;
    while (l->q_len) {
        struct loop_job *job = queue_front(l);

        job_release(l, job);
        queue_pop(l); /* its storage stays untouched until the next read_records */
        publish_counts(l);
        send_failed(l, job->req_id, job->rid, why);
    }
    flush(l);
}

/* Whether step 3 has something to do: a waiting job and a free slot, or a cancelled job
 * to drop. */
static bool can_admit(const struct loop *l)
{
    if (l->q_len == 0)
        return false;
    if (l->kv_wait && !l->jobs[l->queue[l->q_head]].cancelled)
        return false;
    return l->n_active + l->n_pre < l->n_slots || l->jobs[l->queue[l->q_head]].cancelled;
}

int loop_run(struct loop *l, volatile sig_atomic_t *stop)
{
    int rc = 0;

    l->stop = stop;
    l->stopping = false;
    while (!*stop) {
        loop_heartbeat(l);
        if ((rc = read_records(l)) < 0)
            break;
        drop_cancelled(l);
        publish_counts(l);
        /* nothing to decode (none running, or all paused), to prefill or to admit */
        if (l->n_order == l->n_paused && l->n_pre == 0 && !can_admit(l)) {
            sleep_idle(l);
            continue;
        }
        admit(l);
        if (l->n_order)
            decode_step(l);
        send_cache_events(l);
        publish_counts(l);
        flush(l);
    }
    fail_all(l, rc < 0 ? "the worker's ring is corrupt" : "the worker is stopping");
    return rc;
}

struct loop *loop_create(struct model *m, struct shm_region *reg, int wake_fd, int notify_fd,
                         const struct loop_opts *o, int *err)
{
    struct loop_opts d = {0};
    struct loop *l;
    size_t nv = m->n_vocab;

    if (!o)
        o = &d;
    if (m->max_sequences == 0 || m->n_vocab == 0 || m->max_context == 0) {
        *err = -EINVAL;
        return NULL;
    }
    l = calloc(1, sizeof(*l));
    if (!l)
        goto nomem;
    l->m = m;
    l->reg = reg;
    l->hdr = reg->hdr;
    l->wake_fd = wake_fd;
    l->notify_fd = notify_fd;
    l->n_slots = m->max_sequences;
    l->max_prefill_tokens = o->max_prefill_tokens ? o->max_prefill_tokens : 512;
    l->cap_jobs = o->max_waiting ? o->max_waiting : 2 * l->n_slots + 8;
    l->idle_ms = o->idle_timeout_ms > 0 ? o->idle_timeout_ms : 1000;
    l->seqs = calloc(l->n_slots, sizeof(*l->seqs));
    l->order = calloc(l->n_slots, sizeof(*l->order));
    l->batch_of = calloc(l->n_slots, sizeof(*l->batch_of));
    l->jobs = calloc(l->cap_jobs, sizeof(*l->jobs));
    l->queue = calloc(l->cap_jobs, sizeof(*l->queue));
    l->free_jobs = calloc(l->cap_jobs, sizeof(*l->free_jobs));
    l->prompt_store = calloc((size_t)l->cap_jobs * m->max_context, sizeof(*l->prompt_store));
    l->logits = calloc((size_t)l->n_slots * nv, sizeof(*l->logits));
    l->slots = calloc(l->n_slots, sizeof(*l->slots));
    l->tokens = calloc(l->n_slots, sizeof(*l->tokens));
    l->res = calloc(l->n_slots, sizeof(*l->res));
    l->pf_jobs = calloc(l->n_slots, sizeof(*l->pf_jobs));
    l->pf_prompts = calloc(l->n_slots, sizeof(*l->pf_prompts));
    l->pf_ns = calloc(l->n_slots, sizeof(*l->pf_ns));
    l->pf_last = calloc(l->n_slots, sizeof(*l->pf_last));
    l->pre = calloc(l->n_slots, sizeof(*l->pre));
    l->prompt_in = calloc(WIRE_MAX_PROMPT, sizeof(*l->prompt_in));
    l->buf = malloc(LOOP_OUT_BUF);
    l->dec = proto_decoder_create();
    if (!l->dec || !l->seqs || !l->order || !l->batch_of || !l->jobs || !l->queue || !l->free_jobs || !l->prompt_store ||
        !l->logits || !l->slots || !l->tokens || !l->res || !l->prompt_in || !l->buf ||
        !l->pf_jobs || !l->pf_prompts || !l->pf_ns || !l->pf_last || !l->pre)
        goto nomem;
    for (uint32_t i = 0; i < l->n_slots; i++)
        if (!(l->seqs[i].sampler = sampler_create(m->n_vocab)) ||
            !(l->seqs[i].gs = gmask_seq_create()))
            goto nomem;
    /* every job and sequence may hold a grammar, so the cache never fills with ones in use */
    if (o->tok && !(l->gm = gmask_create(o->tok, m->n_vocab, m->eos, m->n_eos,
                                         l->n_slots + l->cap_jobs + 4)))
        goto nomem;
    for (uint32_t i = 0; i < l->cap_jobs; i++) {
        l->jobs[i].prompt = l->prompt_store + (size_t)i * m->max_context;
        l->free_jobs[l->n_free_jobs++] = l->cap_jobs - 1 - i;
    }
    l->waiter = notify_waiter_create(wake_fd, err);
    if (!l->waiter)
        log_warn("no io_uring (%s): sleeping in poll()", strerror(-*err));
    m->heartbeat = loop_heartbeat;
    m->heartbeat_ctx = l;
    *err = 0;
    return l;

nomem:
    loop_destroy(l);
    *err = -ENOMEM;
    return NULL;
}

void loop_destroy(struct loop *l)
{
    if (!l)
        return;
    if (l->m && l->m->heartbeat_ctx == l) {
        l->m->heartbeat = NULL;
        l->m->heartbeat_ctx = NULL;
    }
    if (l->waiter)
        notify_waiter_destroy(l->waiter);
    if (l->seqs)
        for (uint32_t i = 0; i < l->n_slots; i++) {
            sampler_destroy(l->seqs[i].sampler);
            gmask_seq_destroy(l->seqs[i].gs);
        }
    gmask_destroy(l->gm);
    free(l->seqs);
    free(l->order);
    free(l->batch_of);
    free(l->jobs);
    free(l->queue);
    free(l->free_jobs);
    free(l->prompt_store);
    free(l->logits);
    free(l->slots);
    free(l->tokens);
    free(l->res);
    free(l->pf_jobs);
    free(l->pf_prompts);
    free(l->pf_ns);
    free(l->pf_last);
    free(l->pre);
    free(l->prompt_in);
    free(l->buf);
    proto_decoder_destroy(l->dec);
    free(l);
}
