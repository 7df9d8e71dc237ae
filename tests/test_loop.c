/* The worker's scheduler loop, in a thread over a real shared-memory region: the test plays
 * the front (JOB and CANCEL in, STARTED/TOKEN/DONE/FAILED out) and the model is the mock
 * wrapped in a recorder (a log of calls, a gate on the first prefill, a short decode_batch). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "notify.h"
#include "proto.h"
#include "shm_region.h"
#include "tokenizer.h"
#include "../worker/loop.h"
#include "../worker/model.h"
#include "../worker/model_llama.h"
#include "../worker/model_mock.h"
#include "lib/model_gen.h"

#define WAIT_MS  10000 /* the bound on every wait: a hang becomes a failure */
#define MAX_REQS 8
#define MAX_LOG  1024 /* more than any test's calls: a full log would drop the last ones */

/* --- the recording model ---------------------------------------------------------------- */

struct recorder {
    struct model base;
    struct model *inner;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char log[MAX_LOG][16]; /* "P4" prefill of 4 tokens, "D3" decode of 3 sequences */
    int n_log;
    bool gate_armed, gate_entered, gate_released;
    bool drop_a_result;
    int nan_slot; /* decode_batch fills this slot's row of logits with NaN; -1: none */
};

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void rec_log(struct recorder *r, char kind, int n)
{
    if (r->n_log < MAX_LOG)
        snprintf(r->log[r->n_log++], sizeof(r->log[0]), "%c%d", kind, n);
}

static int rec_prefill(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                       float *logits)
{
    struct recorder *r = (struct recorder *)m;
    struct timespec dl;
    int rc;

    pthread_mutex_lock(&r->mu);
    rec_log(r, 'P', (int)n);
    if (r->gate_armed) {
        r->gate_armed = false;
        r->gate_entered = true;
        pthread_cond_broadcast(&r->cv);
        deadline_in(&dl, WAIT_MS);
        while (!r->gate_released)
            if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT)
                break; /* the test failed already; let the loop go on */
    }
    pthread_mutex_unlock(&r->mu);
    rc = model_prefill(r->inner, slot, prompt, n, logits);
    if (rc < 0)
        snprintf(m->error, sizeof(m->error), "%s", r->inner->error);
    return rc;
}

static int rec_decode(struct model *m, int slot, uint32_t token, float *logits)
{
    struct recorder *r = (struct recorder *)m;

    return r->inner->ops->decode(r->inner, slot, token, logits);
}

static int rec_decode_batch(struct model *m, const int *slots, const uint32_t *tokens, int n,
                            float *logits, struct model_result *res)
{
    struct recorder *r = (struct recorder *)m;
    int got;

    pthread_mutex_lock(&r->mu);
    rec_log(r, 'D', n);
    pthread_mutex_unlock(&r->mu);
    got = model_decode_batch(r->inner, slots, tokens, n, logits, res);
    for (int i = 0; i < got; i++)
        if (slots[i] == r->nan_slot)
            for (uint32_t k = 0; k < m->n_vocab; k++)
                logits[(size_t)i * m->n_vocab + k] = NAN;
    return r->drop_a_result && got > 0 ? got - 1 : got;
}

static void rec_seq_free(struct model *m, int slot)
{
    model_seq_free(((struct recorder *)m)->inner, slot);
}

static void rec_destroy(struct model *m)
{
    struct recorder *r = (struct recorder *)m;

    model_destroy(r->inner);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static const struct model_ops rec_ops = {
    .prefill = rec_prefill,
    .decode = rec_decode,
    .decode_batch = rec_decode_batch,
    .seq_free = rec_seq_free,
    .destroy = rec_destroy,
};

/* Over the Llama engine: its own cache claims and batched prefills, each pass logged as
 * "B<sequences>" (whole prompts) or "C<sequences>" (parts). */
static int rec_seq_begin(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                         uint32_t max_len, int reuse)
{
    struct recorder *r = (struct recorder *)m;
    int rc = model_seq_begin(r->inner, slot, prompt, n, max_len, reuse);

    if (rc < 0)
        snprintf(m->error, sizeof(m->error), "%s", r->inner->error);
    return rc;
}

static int rec_prefill_batch(struct model *m, const int *slots, const uint32_t *const *prompts,
                             const uint32_t *ns, int count, float *logits,
                             struct model_result *res)
{
    struct recorder *r = (struct recorder *)m;

    pthread_mutex_lock(&r->mu);
    rec_log(r, 'B', count);
    pthread_mutex_unlock(&r->mu);
    return model_prefill_batch(r->inner, slots, prompts, ns, count, logits, res);
}

static int rec_prefill_part(struct model *m, const int *slots, const uint32_t *const *prompts,
                            const uint32_t *ns, const uint8_t *last, int count, float *logits,
                            struct model_result *res)
{
    struct recorder *r = (struct recorder *)m;

    pthread_mutex_lock(&r->mu);
    rec_log(r, 'C', count);
    pthread_mutex_unlock(&r->mu);
    return r->inner->ops->prefill_part(r->inner, slots, prompts, ns, last, count, logits, res);
}

static const struct model_ops rec_llama_ops = {
    .prefill = rec_prefill,
    .decode = rec_decode,
    .decode_batch = rec_decode_batch,
    .seq_free = rec_seq_free,
    .seq_begin = rec_seq_begin,
    .prefill_batch = rec_prefill_batch,
    .prefill_part = rec_prefill_part,
    .destroy = rec_destroy,
};

static struct recorder *recorder_create(const struct model_mock_opts *o)
{
    struct recorder *r = calloc(1, sizeof(*r));
    char err[128];

    assert_non_null(r);
    r->inner = model_mock_create(o, err, sizeof(err));
    assert_non_null(r->inner);
    r->base = *r->inner;
    r->base.ops = &rec_ops;
    r->base.heartbeat = NULL;
    r->nan_slot = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return r;
}

/* A recorder over the Llama engine on the file at path; parts 0: it prefills prompts whole
 * (as a model without prefill_part). */
static struct recorder *recorder_create_llama(const char *path, bool parts)
{
    struct recorder *r = calloc(1, sizeof(*r));
    struct model_llama_opts mo = {.max_sequences = 4, .ctx = 512, .threads = 2, .quiet = 1};
    static struct model_ops whole;
    char err[256];

    assert_non_null(r);
    r->inner = model_llama_create(path, &mo, err, sizeof(err));
    if (!r->inner)
        fail_msg("%s", err);
    r->base = *r->inner;
    whole = rec_llama_ops;
    whole.prefill_part = NULL;
    r->base.ops = parts ? &rec_llama_ops : &whole;
    r->base.heartbeat = NULL;
    r->nan_slot = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return r;
}

/* --- the test's front --------------------------------------------------------------------- */

struct transcript {
    uint64_t req_id;
    int started;       /* prompt_tokens, -1 before STARTED */
    char text[256];    /* TOKEN ids < 256, as bytes */
    uint32_t ids[64];  /* the first TOKEN ids */
    int n_tokens, n_eos_tokens;
    int started_at, first_at; /* the record count at STARTED and at the first TOKEN */
    int final;         /* 0, MSG_TYPE_DONE or MSG_TYPE_FAILED */
    int n_finals;
    enum finish_reason reason;
    uint32_t completion_tokens;
    char error[WIRE_MAX_ERROR + 1];
};

struct fixture {
    struct shm_region reg;
    int wake_fd, notify_fd;
    struct recorder *rec;
    struct loop *loop;
    pthread_t thread;
    bool running;
    volatile sig_atomic_t stop;
    int loop_rc;
    struct transcript tr[MAX_REQS];
    int n_records; /* read so far */
    struct proto_msg msg;
    unsigned char buf[65536];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    if (shm_region_create(&f->reg, 1u << 16, 1u << 16) < 0)
        return -1;
    f->wake_fd = notify_eventfd();
    f->notify_fd = notify_eventfd();
    if (f->wake_fd < 0 || f->notify_fd < 0)
        return -1;
    for (int i = 0; i < MAX_REQS; i++) {
        f->tr[i].req_id = 100 + (uint64_t)i;
        f->tr[i].started = -1;
    }
    *state = f;
    return 0;
}

static void *loop_thread(void *arg)
{
    struct fixture *f = arg;

    f->loop_rc = loop_run(f->loop, &f->stop);
    return NULL;
}

static void start_loop(struct fixture *f, struct recorder *rec, uint32_t max_prefill_tokens)
{
    struct loop_opts o = {.max_prefill_tokens = max_prefill_tokens, .idle_timeout_ms = 200};
    int err;

    o.tok = tokenizer_create_bytes(); /* the mock's vocabulary, for grammar jobs */
    assert_non_null(o.tok);
    f->rec = rec;
    f->loop = loop_create(&rec->base, &f->reg, f->wake_fd, f->notify_fd, &o, &err);
    tokenizer_destroy((struct tokenizer *)o.tok); /* read at create only */
    assert_non_null(f->loop);
    assert_int_equal(pthread_create(&f->thread, NULL, loop_thread, f), 0);
    f->running = true;
}

static void stop_loop(struct fixture *f)
{
    if (!f->running)
        return;
    f->stop = 1;
    (void)eventfd_write(f->wake_fd, 1);
    pthread_join(f->thread, NULL); /* the loop re-checks stop at least every 200 ms */
    f->running = false;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    if (f->rec) { /* release a gate a failed test left closed */
        pthread_mutex_lock(&f->rec->mu);
        f->rec->gate_released = true;
        pthread_cond_broadcast(&f->rec->cv);
        pthread_mutex_unlock(&f->rec->mu);
    }
    stop_loop(f);
    loop_destroy(f->loop);
    if (f->rec)
        model_destroy(&f->rec->base);
    shm_region_destroy(&f->reg);
    close(f->wake_fd);
    close(f->notify_fd);
    free(f);
    return 0;
}

static void push_raw(struct fixture *f, const void *rec, uint32_t len)
{
    assert_int_equal(shm_ring_push(&f->reg.to_worker, rec, len), 0);
    assert_int_equal(notify_wake(&f->reg.to_worker, f->wake_fd), 0);
}

static void push_msg(struct fixture *f)
{
    int len = proto_encode(&f->msg, f->buf, sizeof(f->buf));

    assert_true(len > 0);
    push_raw(f, f->buf, (uint32_t)len);
}

/* JOB for request tr[i] of n token ids, greedy unless sampling is given */
static void push_job_tokens(struct fixture *f, int i, uint32_t *toks, uint32_t n,
                            uint32_t max_new, const struct proto_sampling *sampling)
{
    memset(&f->msg, 0, sizeof(f->msg));
    f->msg.type = MSG_TYPE_JOB;
    f->msg.req_id = f->tr[i].req_id;
    f->msg.u.job.prompt = toks;
    f->msg.u.job.n_prompt = n;
    f->msg.u.job.max_new_tokens = max_new;
    if (sampling)
        f->msg.u.job.sampling = *sampling;
    else
        proto_sampling_init(&f->msg.u.job.sampling);
    push_msg(f);
}

/* JOB for request tr[i]: prompt text as bytes */
static void push_job_with(struct fixture *f, int i, const char *prompt, uint32_t max_new,
                          const struct proto_sampling *sampling)
{
    uint32_t toks[256];
    uint32_t n = 0;

    while (prompt[n] && n < 256) {
        toks[n] = (unsigned char)prompt[n];
        n++;
    }
    push_job_tokens(f, i, toks, n, max_new, sampling);
}

static void push_job(struct fixture *f, int i, const char *prompt, uint32_t max_new)
{
    push_job_with(f, i, prompt, max_new, NULL);
}

static void push_cancel(struct fixture *f, int i)
{
    memset(&f->msg, 0, sizeof(f->msg));
    f->msg.type = MSG_TYPE_CANCEL;
    f->msg.req_id = f->tr[i].req_id;
    push_msg(f);
}

static struct transcript *find_tr(struct fixture *f, uint64_t req_id)
{
    for (int i = 0; i < MAX_REQS; i++)
        if (f->tr[i].req_id == req_id)
            return &f->tr[i];
    fail_msg("a record for unknown request %llu", (unsigned long long)req_id);
    return NULL;
}

/* Read one record from the worker, sleeping on notify_fd as the front does. Bounded. */
static void read_one(struct fixture *f)
{
    struct proto_msg *m = &f->msg;
    const void *rec;
    uint32_t len;
    struct transcript *t;
    int rc;

    while ((rc = shm_ring_peek(&f->reg.to_front, &rec, &len)) == -EAGAIN) {
        if (notify_prepare_sleep(&f->reg.to_front)) {
            struct pollfd p = {.fd = f->notify_fd, .events = POLLIN};

            rc = poll(&p, 1, WAIT_MS);
            notify_end_sleep(&f->reg.to_front);
            assert_int_equal(rc, 1); /* else the worker went silent */
            assert_int_equal(notify_consume(f->notify_fd), 0);
        }
    }
    assert_int_equal(rc, 0);
    assert_int_equal(proto_decode(rec, len, m, NULL, 0), 0);
    shm_ring_pop(&f->reg.to_front);
    /* as the front does: a worker waiting for room is woken by the pop */
    assert_int_equal(notify_wake_producer(&f->reg.to_front, f->wake_fd), 0);
    if (m->type == MSG_TYPE_CACHE)
        return; /* the Llama engine's block events, for the front's prefix index */
    t = find_tr(f, m->req_id);
    f->n_records++;
    switch (m->type) {
    case MSG_TYPE_STARTED:
        assert_int_equal(t->started, -1);
        t->started = (int)m->u.prompt_tokens;
        t->started_at = f->n_records;
        break;
    case MSG_TYPE_TOKEN:
        assert_int_equal(t->final, 0);
        if (t->n_tokens == 0)
            t->first_at = f->n_records;
        if (t->n_tokens < 64)
            t->ids[t->n_tokens] = m->u.token.token;
        t->n_tokens++;
        if (m->u.token.token < 256 && strlen(t->text) + 1 < sizeof(t->text))
            t->text[strlen(t->text)] = (char)m->u.token.token;
        if (m->u.token.token == TOKENIZER_BYTES_EOS)
            t->n_eos_tokens++;
        break;
    case MSG_TYPE_DONE:
        t->final = MSG_TYPE_DONE;
        t->n_finals++;
        t->reason = m->u.done.reason;
        t->completion_tokens = m->u.done.completion_tokens;
        break;
    case MSG_TYPE_FAILED:
        t->final = MSG_TYPE_FAILED;
        t->n_finals++;
        snprintf(t->error, sizeof(t->error), "%s", m->u.error);
        break;
    default:
        fail_msg("unexpected record type %d", (int)m->type);
    }
}

/* Read until request tr[i] has its final record */
static void until_final(struct fixture *f, int i)
{
    while (!f->tr[i].final)
        read_one(f);
}

static void until_started(struct fixture *f, int i)
{
    while (f->tr[i].started < 0)
        read_one(f);
}

static void wait_gate_entered(struct recorder *r)
{
    struct timespec dl;

    deadline_in(&dl, WAIT_MS);
    pthread_mutex_lock(&r->mu);
    while (!r->gate_entered)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&r->mu);
    assert_true(r->gate_entered);
}

static void release_gate(struct recorder *r)
{
    pthread_mutex_lock(&r->mu);
    r->gate_released = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Whether *v becomes non-zero within WAIT_MS (checked every millisecond) */
static bool eventually_set(_Atomic uint32_t *v)
{
    for (int64_t end = now_ms() + WAIT_MS; now_ms() < end; pause_ms(1))
        if (atomic_load(v))
            return true;
    return false;
}

/* Whether *v moves away from was within WAIT_MS (checked every millisecond) */
static bool eventually_moves(_Atomic uint64_t *v, uint64_t was)
{
    for (int64_t end = now_ms() + WAIT_MS; now_ms() < end; pause_ms(1))
        if (atomic_load(v) != was)
            return true;
    return false;
}

/* How far the loop's heartbeat moves over ms */
static uint64_t heartbeats_over(struct fixture *f, int ms)
{
    uint64_t h0 = atomic_load(&f->reg.hdr->heartbeat);

    pause_ms(ms);
    return atomic_load(&f->reg.hdr->heartbeat) - h0;
}

/* Mark in seen[] (when add) or find (when !add) this process's io_uring fds: returns the
 * first io_uring fd not yet in seen[], or -1 */
#define MAX_FDS 1024
static int io_uring_fds(bool seen[MAX_FDS], bool add)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[64], target[64];
    int found = -1;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        ssize_t n;

        if (e->d_name[0] == '.' || fd < 0 || fd >= MAX_FDS)
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, target, sizeof(target) - 1);
        if (n < 0)
            continue;
        target[n] = '\0';
        if (strcmp(target, "anon_inode:[io_uring]") != 0)
            continue;
        if (add)
            seen[fd] = true;
        else if (!seen[fd] && found < 0)
            found = fd;
    }
    closedir(d);
    return found;
}

/* --- the tests ------------------------------------------------------------------------- */

static void test_loop_short_decode_batch_fails_every_sequence_of_the_step(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "hi"};
    struct recorder *r = recorder_create(&o);

    r->drop_a_result = true;
    start_loop(f, r, 0);
    push_job(f, 0, "x", 100);
    until_final(f, 0);
    /* the first token comes from the prefill; the first decode step returns nothing */
    assert_int_equal(f->tr[0].started, 1);
    assert_string_equal(f->tr[0].text, "h");
    assert_int_equal(f->tr[0].final, MSG_TYPE_FAILED);
    assert_string_equal(f->tr[0].error, "decode_batch returned 0 results for 1 sequences");
}

static void test_loop_prefills_between_decode_steps_stay_within_the_budget(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "0123456789", .max_sequences = 4};
    struct recorder *r = recorder_create(&o);
    static const char *const want[] = {"P1", "D1", "P4", "P4", "D3", "P4", "D4"};

    r->gate_armed = true;
    start_loop(f, r, 8);
    /* the first request holds the worker in its prefill while three more queue up */
    push_job(f, 0, "a", 100);
    wait_gate_entered(r);
    for (int i = 1; i <= 3; i++)
        push_job(f, i, "abcd", 100);
    release_gate(r);
    for (int i = 0; i <= 3; i++) {
        until_final(f, i);
        assert_string_equal(f->tr[i].text, "0123456789");
        assert_int_equal(f->tr[i].final, MSG_TYPE_DONE);
        assert_int_equal(f->tr[i].reason, FINISH_REASON_STOP);
        assert_int_equal(f->tr[i].n_finals, 1);
    }
    /* two prompts of 4 fit a budget of 8; the third waits one step */
    pthread_mutex_lock(&r->mu);
    assert_true(r->n_log >= 7);
    for (int k = 0; k < 7; k++)
        assert_string_equal(r->log[k], want[k]);
    pthread_mutex_unlock(&r->mu);
}

/* --- prompts prefilled in parts (the Llama engine) ------------------------------------------ */

static void stories_path(char *path, size_t len)
{
    const char *shared = getenv("KILN_SHARED");

    snprintf(path, len, "%s/models/stories260K.gguf", shared ? shared : "../shared");
}

static void long_prompt(uint32_t *p, uint32_t n, uint32_t salt, uint32_t n_vocab)
{
    for (uint32_t i = 0; i < n; i++)
        p[i] = 3 + (i * 37 + salt * 101) % (n_vocab - 3);
}

/* While a 300-token prompt is prefilled 32 positions a pass, the sequence already running
 * keeps receiving tokens: records are counted, not time. */
static void test_loop_running_sequence_decodes_while_a_long_prompt_is_prefilled(void **state)
{
    struct fixture *f = *state;
    char path[512];
    struct recorder *r;
    struct proto_sampling sp;
    static uint32_t a[5], b[300];
    int before, parts = 0;

    stories_path(path, sizeof(path));
    r = recorder_create_llama(path, true);
    long_prompt(a, 5, 1, r->base.n_vocab);
    long_prompt(b, 300, 2, r->base.n_vocab);
    proto_sampling_init(&sp);
    sp.ignore_eos = true;
    start_loop(f, r, 32);
    push_job_tokens(f, 0, a, 5, 200, &sp);
    while (f->tr[0].n_tokens == 0)
        read_one(f);
    push_job_tokens(f, 1, b, 300, 4, &sp);
    until_started(f, 1);
    before = f->tr[0].n_tokens;
    while (f->tr[1].n_tokens == 0)
        read_one(f);
    /* 300 positions in passes of 32: a token of the running sequence after each */
    if (f->tr[0].n_tokens - before < 8)
        fail_msg("%d tokens of the running sequence during the long prefill",
                 f->tr[0].n_tokens - before);
    assert_int_equal(f->tr[1].started, 300);
    push_cancel(f, 0);
    until_final(f, 0);
    until_final(f, 1);
    assert_int_equal(f->tr[1].final, MSG_TYPE_DONE);
    assert_int_equal(f->tr[1].n_tokens, 4);
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < r->n_log; k++)
        parts += r->log[k][0] == 'C';
    pthread_mutex_unlock(&r->mu);
    assert_true(parts >= 10);
}

#define N_JOBS 3

/* Three jobs at once (greedy and seeded), their ids into out, with a prefill budget of
 * budget positions, prompts in parts or whole; the loop is stopped and freed after. */
static void run_three(struct fixture *f, const char *path, uint32_t budget, bool parts,
                      uint32_t out[N_JOBS][16])
{
    static const uint32_t ns[N_JOBS] = {100, 250, 40};
    static uint32_t p[N_JOBS][250];
    struct recorder *r = recorder_create_llama(path, parts);
    struct proto_sampling sp;

    start_loop(f, r, budget);
    for (int i = 0; i < N_JOBS; i++) {
        long_prompt(p[i], ns[i], (uint32_t)i, r->base.n_vocab);
        proto_sampling_init(&sp);
        sp.ignore_eos = true;
        if (i != 1) { /* seeded */
            sp.temperature = 0.9f;
            sp.seed = 7 + (uint64_t)i;
        }
        push_job_tokens(f, i, p[i], ns[i], 16, &sp);
    }
    for (int i = 0; i < N_JOBS; i++) {
        until_final(f, i);
        assert_int_equal(f->tr[i].final, MSG_TYPE_DONE);
        assert_int_equal(f->tr[i].n_tokens, 16);
        memcpy(out[i], f->tr[i].ids, sizeof(out[i]));
    }
    stop_loop(f);
    f->stop = 0;
    loop_destroy(f->loop);
    f->loop = NULL;
    model_destroy(&r->base);
    f->rec = NULL;
    for (int i = 0; i < MAX_REQS; i++) { /* a fresh transcript for the next run */
        uint64_t id = f->tr[i].req_id + 10;
        memset(&f->tr[i], 0, sizeof(f->tr[i]));
        f->tr[i].req_id = id;
        f->tr[i].started = -1;
    }
}

static void check_parts_equal_whole(struct fixture *f, const char *path)
{
    uint32_t whole[N_JOBS][16], parts[N_JOBS][16];

    run_three(f, path, 4096, false, whole);
    run_three(f, path, 13, true, parts); /* parts that end inside cache blocks */
    for (int i = 0; i < N_JOBS; i++)
        if (memcmp(whole[i], parts[i], sizeof(whole[i])) != 0)
            fail_msg("%s: job %d: its tokens differ when its prompt is prefilled in parts", path,
                     i);
}

/* The same tokens, greedy and seeded, whether prompts are prefilled whole in one batch or in
 * parts of 13 positions between decode steps: on stories260K and on a generated model. */
static void test_loop_outputs_equal_with_prompts_prefilled_in_parts(void **state)
{
    struct fixture *f = *state;
    char path[512], dir[] = "/tmp/kiln-loop-XXXXXX", err[256];
    struct model_gen_opts o = {.arch = "qwen2", .dim = 64, .layers = 3, .heads = 4,
                               .kv_heads = 2, .ffn = 128, .ctx = 512,
                               .type = GGML_TYPE_Q8_0, .seed = 3, .peak = 4.0f};

    stories_path(path, sizeof(path));
    check_parts_equal_whole(f, path);
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/qwen2.gguf", dir);
    assert_int_equal(model_gen_write(&o, path, err, sizeof(err)), 0);
    check_parts_equal_whole(f, path);
    unlink(path);
    rmdir(dir);
}

static void test_loop_cancelled_sequence_frees_its_slot(void **state)
{
    struct fixture *f = *state;
    char reply[201];
    struct model_mock_opts o = {.reply = reply, .delay_ms = 2, .max_sequences = 1};
    struct recorder *r;

    memset(reply, 'z', 200);
    reply[200] = '\0';
    r = recorder_create(&o);
    start_loop(f, r, 0);
    push_job(f, 0, "long", 1000);
    while (f->tr[0].n_tokens == 0)
        read_one(f);
    assert_int_equal(atomic_load(&f->reg.hdr->running), 1);
    push_cancel(f, 0);
    until_final(f, 0);
    assert_int_equal(f->tr[0].final, MSG_TYPE_DONE);
    assert_int_equal(f->tr[0].reason, FINISH_REASON_CANCELLED);
    assert_true(f->tr[0].n_tokens < 200);
    assert_int_equal(f->tr[0].completion_tokens, f->tr[0].n_tokens);
    assert_int_equal(atomic_load(&f->reg.hdr->running), 0);
    /* the only slot is free again: a new job runs */
    push_job(f, 1, "next", 3);
    until_final(f, 1);
    assert_int_equal(f->tr[1].started, 4);
    assert_string_equal(f->tr[1].text, "zzz");
    assert_int_equal(f->tr[1].reason, FINISH_REASON_LENGTH);
    assert_int_equal(f->tr[0].n_finals, 1);
}

static void test_loop_job_cancelled_while_waiting_is_dropped(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "ok", .max_sequences = 1};
    struct recorder *r = recorder_create(&o);
    int n_prefills;

    r->gate_armed = true;
    start_loop(f, r, 0);
    push_job(f, 0, "a", 100);
    wait_gate_entered(r);
    push_job(f, 1, "b", 100);
    push_cancel(f, 1);
    release_gate(r);
    until_final(f, 0);
    until_final(f, 1);
    assert_string_equal(f->tr[0].text, "ok");
    assert_int_equal(f->tr[1].started, -1); /* never started */
    assert_int_equal(f->tr[1].final, MSG_TYPE_DONE);
    assert_int_equal(f->tr[1].reason, FINISH_REASON_CANCELLED);
    assert_int_equal(f->tr[1].completion_tokens, 0);
    pthread_mutex_lock(&r->mu);
    n_prefills = 0;
    for (int k = 0; k < r->n_log; k++)
        n_prefills += r->log[k][0] == 'P';
    pthread_mutex_unlock(&r->mu);
    assert_int_equal(n_prefills, 1); /* "b" never reached the model */
}

static void test_loop_eos_stops_unsent_and_max_new_tokens_is_length(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "ok", .max_sequences = 2};
    struct recorder *r = recorder_create(&o);
    struct proto_sampling s;

    start_loop(f, r, 0);
    push_job(f, 0, "x", 100);
    until_final(f, 0);
    assert_string_equal(f->tr[0].text, "ok");
    assert_int_equal(f->tr[0].n_tokens, 2); /* EOS not sent */
    assert_int_equal(f->tr[0].reason, FINISH_REASON_STOP);
    assert_int_equal(f->tr[0].completion_tokens, 2);

    push_job(f, 1, "x", 1);
    until_final(f, 1);
    assert_string_equal(f->tr[1].text, "o");
    assert_int_equal(f->tr[1].reason, FINISH_REASON_LENGTH);
    assert_int_equal(f->tr[1].completion_tokens, 1);

    /* ignore_eos: EOS is a token like any other, and length ends it */
    proto_sampling_init(&s);
    s.ignore_eos = true;
    push_job_with(f, 2, "x", 4, &s);
    until_final(f, 2);
    assert_int_equal(f->tr[2].n_tokens, 4);
    assert_int_equal(f->tr[2].n_eos_tokens, 2);
    assert_int_equal(f->tr[2].reason, FINISH_REASON_LENGTH);
    assert_true(atomic_load(&f->reg.hdr->n_prefills) == 3);
    assert_true(atomic_load(&f->reg.hdr->heartbeat) > 0);
}

static void test_loop_malformed_record_is_rejected_and_the_next_job_served(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "fine", .max_context = 64};
    struct recorder *r = recorder_create(&o);
    char big[100];
    uint32_t outside[2] = {'a', TOKENIZER_BYTES_EOS + 1};
    uint32_t toks[3] = {'a', 'b', 'c'};
    int len;

    start_loop(f, r, 0);
    /* a JOB cut short inside its sampling: its header names it, so it gets its FAILED (else
     * the front's slot would never come free) */
    push_job_tokens(f, 3, toks, 3, 5, NULL);
    memset(&f->msg, 0, sizeof(f->msg));
    f->msg.type = MSG_TYPE_JOB;
    f->msg.req_id = f->tr[4].req_id;
    f->msg.u.job.prompt = toks;
    f->msg.u.job.n_prompt = 3;
    f->msg.u.job.max_new_tokens = 5;
    proto_sampling_init(&f->msg.u.job.sampling);
    len = proto_encode(&f->msg, f->buf, sizeof(f->buf));
    assert_true(len > 2);
    push_raw(f, f->buf, (uint32_t)len - 2);
    /* well-formed but unusable: an out-of-vocabulary token, an oversize prompt */
    push_job_tokens(f, 0, outside, 2, 5, NULL);
    memset(big, 'b', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    push_job(f, 1, big, 5);
    push_job(f, 2, "hello", 100);
    until_final(f, 4);
    assert_int_equal(f->tr[4].final, MSG_TYPE_FAILED);
    assert_int_equal(f->tr[4].n_finals, 1);
    assert_string_equal(f->tr[4].error, "the worker received a malformed job");
    until_final(f, 2);
    assert_string_equal(f->tr[2].text, "fine");
    assert_int_equal(f->tr[2].reason, FINISH_REASON_STOP);
    until_final(f, 1);
    assert_int_equal(f->tr[1].final, MSG_TYPE_FAILED);
    assert_non_null(strstr(f->tr[1].error, "does not fit a context of 64"));
    assert_int_equal(f->tr[1].started, -1);
    until_final(f, 0);
    assert_int_equal(f->tr[0].final, MSG_TYPE_FAILED);
    assert_non_null(strstr(f->tr[0].error, "outside the vocabulary"));
    until_final(f, 3);
    assert_int_equal(f->tr[3].final, MSG_TYPE_DONE);
    stop_loop(f);
    assert_int_equal(f->loop_rc, 0);
}

static void test_loop_record_without_a_header_is_a_protocol_error(void **state)
{
    struct fixture *f = *state;
    char reply[201];
    struct model_mock_opts o = {.reply = reply, .delay_ms = 2};
    struct recorder *r;
    static const unsigned char junk[] = {0x93, 0x01, 0xff, 0xc1, 'j', 'u', 'n', 'k'};

    memset(reply, 'q', 200);
    reply[200] = '\0';
    r = recorder_create(&o);
    start_loop(f, r, 0);
    push_job(f, 0, "x", 1000);
    until_started(f, 0);
    /* no request to answer: the worker stops (the supervisor fails and restarts it), and
     * what it held ends with FAILED rather than waiting forever */
    push_raw(f, junk, sizeof(junk));
    until_final(f, 0);
    assert_int_equal(f->tr[0].final, MSG_TYPE_FAILED);
    pthread_join(f->thread, NULL); /* loop_run returned: no stop was asked */
    f->running = false;
    assert_int_equal(f->loop_rc, -EPROTO);
}

static void test_loop_stop_fails_what_is_held(void **state)
{
    struct fixture *f = *state;
    char reply[201];
    struct model_mock_opts o = {.reply = reply, .delay_ms = 2};
    struct recorder *r;

    memset(reply, 'q', 200);
    reply[200] = '\0';
    r = recorder_create(&o);
    start_loop(f, r, 0);
    push_job(f, 0, "x", 1000);
    until_started(f, 0);
    stop_loop(f);
    until_final(f, 0);
    assert_int_equal(f->tr[0].final, MSG_TYPE_FAILED);
    assert_string_equal(f->tr[0].error, "the worker is stopping");
}

static void test_loop_nan_logits_fail_their_sequence_and_the_batch_goes_on(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "abcdef", .max_sequences = 2};
    struct recorder *r = recorder_create(&o);

    /* both jobs are read before the first admission: slots 0 and 1, one decode batch */
    r->nan_slot = 1;
    push_job(f, 0, "x", 100);
    push_job(f, 1, "y", 100);
    start_loop(f, r, 0);
    until_final(f, 0);
    until_final(f, 1);
    assert_string_equal(f->tr[0].text, "abcdef");
    assert_int_equal(f->tr[0].final, MSG_TYPE_DONE);
    assert_int_equal(f->tr[0].reason, FINISH_REASON_STOP);
    assert_int_equal(f->tr[0].completion_tokens, 6);
    /* the prefill's token went out; the poisoned step sent no TOKEN, only the FAILED */
    assert_int_equal(f->tr[1].started, 1);
    assert_string_equal(f->tr[1].text, "a");
    assert_int_equal(f->tr[1].n_tokens, 1);
    assert_int_equal(f->tr[1].final, MSG_TYPE_FAILED);
    assert_int_equal(f->tr[1].n_finals, 1);
    assert_string_equal(f->tr[1].error, "the model produced non-finite logits");
    assert_int_equal(atomic_load(&f->reg.hdr->running), 0);
    pthread_mutex_lock(&r->mu);
    assert_true(r->n_log >= 3);
    assert_string_equal(r->log[2], "D2"); /* they shared the step */
    pthread_mutex_unlock(&r->mu);
}

/* A JOB whose grammar is given: the output follows it and ends as soon as it is complete; a
 * grammar that does not compile fails that job only; a job whose every allowed token is
 * banned by logit_bias fails alone while its batch neighbour finishes. */
static void push_grammar_job(struct fixture *f, int i, const char *grammar,
                             const struct proto_sampling *sampling)
{
    uint32_t tok = 'x';

    memset(&f->msg, 0, sizeof(f->msg));
    f->msg.type = MSG_TYPE_JOB;
    f->msg.req_id = f->tr[i].req_id;
    f->msg.u.job.prompt = &tok;
    f->msg.u.job.n_prompt = 1;
    f->msg.u.job.max_new_tokens = 50;
    if (sampling)
        f->msg.u.job.sampling = *sampling;
    else
        proto_sampling_init(&f->msg.u.job.sampling);
    f->msg.u.job.grammar = grammar;
    f->msg.u.job.grammar_len = (uint32_t)strlen(grammar);
    push_msg(f);
}

static void test_loop_grammar_constrains_and_a_bad_one_fails_only_its_job(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "abcdef", .max_sequences = 3};
    struct recorder *r = recorder_create(&o);

    push_grammar_job(f, 0, "root ::= \"abc\" [x-z]{2}", NULL);
    push_grammar_job(f, 1, "root ::= (\"a\"", NULL);
    push_job(f, 2, "y", 100);
    start_loop(f, r, 0);
    until_final(f, 0);
    until_final(f, 1);
    until_final(f, 2);
    assert_int_equal(f->tr[0].final, MSG_TYPE_DONE);
    assert_int_equal(f->tr[0].reason, FINISH_REASON_STOP);
    assert_int_equal(strlen(f->tr[0].text), 5);
    assert_memory_equal(f->tr[0].text, "abc", 3);
    assert_true(f->tr[0].text[3] >= 'x' && f->tr[0].text[3] <= 'z');
    assert_true(f->tr[0].text[4] >= 'x' && f->tr[0].text[4] <= 'z');
    assert_int_equal(f->tr[1].final, MSG_TYPE_FAILED);
    assert_int_equal(f->tr[1].started, -1);
    assert_non_null(strstr(f->tr[1].error, "grammar was refused: line 1, column 10"));
    assert_string_equal(f->tr[2].text, "abcdef");
    assert_int_equal(f->tr[2].final, MSG_TYPE_DONE);
}

static void test_loop_grammar_with_every_allowed_token_banned_fails_alone(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "abcdef", .max_sequences = 2};
    struct recorder *r = recorder_create(&o);
    struct proto_sampling s;

    proto_sampling_init(&s);
    s.n_logit_bias = 1;
    s.logit_bias[0].token = 'q';
    s.logit_bias[0].bias = -100.0f;
    push_job(f, 0, "x", 100);
    push_grammar_job(f, 1, "root ::= \"a\" \"q\"", &s);
    start_loop(f, r, 0);
    until_final(f, 0);
    until_final(f, 1);
    assert_string_equal(f->tr[0].text, "abcdef");
    assert_int_equal(f->tr[0].final, MSG_TYPE_DONE);
    assert_string_equal(f->tr[1].text, "a");
    assert_int_equal(f->tr[1].final, MSG_TYPE_FAILED);
    assert_string_equal(f->tr[1].error, "no token the grammar allows is left after logit_bias");
    assert_int_equal(atomic_load(&f->reg.hdr->running), 0);
}

static void test_loop_broken_io_uring_waiter_falls_back_to_poll_without_spinning(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "up"};
    bool seen[MAX_FDS] = {false};
    int ring_fd, null_fd;
    uint64_t beats;

    (void)io_uring_fds(seen, true);
    start_loop(f, recorder_create(&o), 0);
    ring_fd = io_uring_fds(seen, false);
    if (ring_fd < 0)
        skip(); /* no io_uring here: the loop sleeps in poll() from the start */
    /* the ring's fd now names /dev/null: every io_uring_enter fails with EOPNOTSUPP, as a
     * broken ring's would; the wake ends the current wait so the next one meets it */
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(null_fd >= 0);
    assert_true(dup2(null_fd, ring_fd) == ring_fd);
    close(null_fd);
    assert_int_equal(eventfd_write(f->wake_fd, 1), 0);
    /* idle with an idle timeout of 200 ms: a few beats, not one per failed wait */
    beats = heartbeats_over(f, 600);
    print_message("idle on poll(): %llu heartbeats in 600 ms\n", (unsigned long long)beats);
    assert_true(beats <= 12);
    /* poll() still wakes the idle loop for a job */
    push_job(f, 0, "x", 100);
    until_final(f, 0);
    assert_string_equal(f->tr[0].text, "up");
    assert_int_equal(f->tr[0].reason, FINISH_REASON_STOP);
}

static void test_loop_full_ring_sleeps_until_the_front_pops_and_wakes(void **state)
{
    struct fixture *f = *state;
    struct model_mock_opts o = {.reply = "x"};
    struct shm_ring *out;
    struct proto_sampling s;
    int64_t fastest = WAIT_MS;
    uint64_t beats;

    /* a to_front ring of about a hundred TOKENs, and a job of far more that nobody reads */
    shm_region_destroy(&f->reg);
    assert_int_equal(shm_region_create(&f->reg, 1u << 16, 4096), 0);
    out = f->reg.to_front.shared;
    proto_sampling_init(&s);
    s.ignore_eos = true;
    push_job_with(f, 0, "x", 400, &s);
    start_loop(f, recorder_create(&o), 0);
    assert_true(eventually_set(&out->producer_waiting));
    /* asleep in steps of 100 ms, not polling every millisecond */
    beats = heartbeats_over(f, 500);
    print_message("waiting for room: %llu heartbeats in 500 ms\n", (unsigned long long)beats);
    assert_true(beats >= 1 && beats <= 12);
    /* each round: just after a beat (a fresh 100 ms sleep begins), pop a few records, which
     * wakes the worker; it pushes again long before its sleep would end. The fastest of
     * three rounds, so that one slow thread switch on a busy machine does not count. */
    for (int round = 0; round < 3; round++) {
        uint64_t beat = atomic_load(&f->reg.hdr->heartbeat), head;
        int64_t t0;

        assert_true(eventually_moves(&f->reg.hdr->heartbeat, beat));
        assert_true(eventually_set(&out->producer_waiting));
        head = atomic_load(&out->head);
        t0 = now_ms();
        for (int k = 0; k < 4; k++)
            read_one(f); /* pops, then notify_wake_producer() */
        assert_true(eventually_moves(&out->head, head));
        if (now_ms() - t0 < fastest)
            fastest = now_ms() - t0;
    }
    print_message("woken by the pops: pushing again after %lld ms\n", (long long)fastest);
    assert_true(fastest < 60);
    until_final(f, 0);
    assert_int_equal(f->tr[0].n_tokens, 400);
    assert_int_equal(f->tr[0].final, MSG_TYPE_DONE);
    assert_int_equal(f->tr[0].reason, FINISH_REASON_LENGTH);
    assert_int_equal(f->tr[0].completion_tokens, 400);
    assert_int_equal(f->tr[0].n_finals, 1);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_loop_short_decode_batch_fails_every_sequence_of_the_step),
        T(test_loop_prefills_between_decode_steps_stay_within_the_budget),
        T(test_loop_running_sequence_decodes_while_a_long_prompt_is_prefilled),
        T(test_loop_outputs_equal_with_prompts_prefilled_in_parts),
        T(test_loop_cancelled_sequence_frees_its_slot),
        T(test_loop_job_cancelled_while_waiting_is_dropped),
        T(test_loop_eos_stops_unsent_and_max_new_tokens_is_length),
        T(test_loop_malformed_record_is_rejected_and_the_next_job_served),
        T(test_loop_record_without_a_header_is_a_protocol_error),
        T(test_loop_stop_fails_what_is_held),
        T(test_loop_nan_logits_fail_their_sequence_and_the_batch_goes_on),
        T(test_loop_grammar_constrains_and_a_bad_one_fails_only_its_job),
        T(test_loop_grammar_with_every_allowed_token_banned_fails_alone),
        T(test_loop_broken_io_uring_waiter_falls_back_to_poll_without_spinning),
        T(test_loop_full_ring_sleeps_until_the_front_pops_and_wakes),
    };
#undef T

    return cmocka_run_group_tests_name("loop", tests, NULL, NULL);
}
