/* The mock model: a fixed reply over the byte vocabulary, with simulated compute time and,
 * for tests only, faults injected by markers in the prompt. No arithmetic, no weights. */
#include "model_mock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tokenizer.h"

#define MOCK_N_VOCAB  (TOKENIZER_BYTES_EOS + 1)
#define MOCK_LOGIT_ON 0.0f
/* far enough below that no temperature a client may ask for picks another token */
#define MOCK_LOGIT_OFF -30.0f

/* The hold gate's flag: set by the SIGUSR1 handler only. */
static volatile sig_atomic_t mock_usr1_seen;

enum mock_fault {
    MOCK_FAULT_ABORT = 1u << 0,
    MOCK_FAULT_SEGV = 1u << 1,
    MOCK_FAULT_HANG = 1u << 2,
    MOCK_FAULT_ERROR = 1u << 3,
    MOCK_FAULT_HOLD = 1u << 4,
};

static const struct {
    const char *marker;
    unsigned fault;
} mock_markers[] = {
    {"[[kiln:abort]]", MOCK_FAULT_ABORT}, {"[[kiln:segv]]", MOCK_FAULT_SEGV},
    {"[[kiln:hang]]", MOCK_FAULT_HANG},   {"[[kiln:error]]", MOCK_FAULT_ERROR},
    {"[[kiln:hold]]", MOCK_FAULT_HOLD},
};

struct mock_seq {
    uint32_t pos;      /* reply bytes emitted so far */
    uint32_t n_tokens; /* prompt and decoded tokens held */
    unsigned faults;   /* enum mock_fault bits, from the prompt */
    bool tool;         /* the prompt holds a tool result: tool_reply */
};

struct model_mock {
    struct model base; /* first: a struct model * is a struct model_mock * */
    char *reply, *tool_reply;
    size_t reply_len, tool_reply_len;
    uint32_t delay_ms;
    int faults;
    volatile sig_atomic_t *stop; /* the worker's, or NULL */
    struct mock_seq *seqs; /* (max_sequences) */
};

static void mock_on_usr1(int sig)
{
    (void)sig;
    mock_usr1_seen = 1;
}

static void mock_delay(struct model_mock *mm)
{
    struct timespec ts = {.tv_sec = mm->delay_ms / 1000,
                          .tv_nsec = (long)(mm->delay_ms % 1000) * 1000000L};

    if (!mm->delay_ms)
        return;
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Block until SIGUSR1 or until *stop is set. SIGUSR1, SIGTERM and SIGINT are blocked while
 * we test the flags, and sigsuspend unblocks them atomically, so a signal that comes in
 * between is not lost: a stop signal that came before the hold finds *stop already set. */
static void mock_hold(volatile sig_atomic_t *stop)
{
    sigset_t gate, old, wait_mask;

    sigemptyset(&gate);
    sigaddset(&gate, SIGUSR1);
    sigaddset(&gate, SIGTERM);
    sigaddset(&gate, SIGINT);
    pthread_sigmask(SIG_BLOCK, &gate, &old);
    wait_mask = old;
    sigdelset(&wait_mask, SIGUSR1);
    sigdelset(&wait_mask, SIGTERM);
    sigdelset(&wait_mask, SIGINT);
    while (!mock_usr1_seen && !(stop && *stop))
        sigsuspend(&wait_mask);
    /* a stop leaves the flag alone: a SIGUSR1 that came too still releases the next hold */
    if (mock_usr1_seen && !(stop && *stop))
        mock_usr1_seen = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void mock_hang(void)
{
    for (;;)
        pause();
}

/* Whether the byte tokens of prompt hold mk */
static bool mock_has(const uint32_t *prompt, uint32_t n, const char *mk)
{
    size_t len = strlen(mk);

    for (uint32_t i = 0; i + len <= n; i++) {
        size_t j = 0;

        while (j < len && prompt[i + j] == (unsigned char)mk[j])
            j++;
        if (j == len)
            return true;
    }
    return false;
}

static unsigned mock_scan_faults(const uint32_t *prompt, uint32_t n)
{
    unsigned faults = 0;

    for (size_t k = 0; k < sizeof(mock_markers) / sizeof(mock_markers[0]); k++)
        if (mock_has(prompt, n, mock_markers[k].marker))
            faults |= mock_markers[k].fault;
    return faults;
}

/* Logits for the token after pos reply bytes: all the mass on the next byte, then EOS */
static void mock_logits(const struct model_mock *mm, const struct mock_seq *s, uint32_t pos,
                        float *logits)
{
    const char *reply = s->tool ? mm->tool_reply : mm->reply;
    size_t len = s->tool ? mm->tool_reply_len : mm->reply_len;
    uint32_t next = pos < len ? (unsigned char)reply[pos] : TOKENIZER_BYTES_EOS;

    for (uint32_t v = 0; v < MOCK_N_VOCAB; v++)
        logits[v] = MOCK_LOGIT_OFF;
    logits[next] = MOCK_LOGIT_ON;
}

static int mock_prefill(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                        float *logits)
{
    struct model_mock *mm = (struct model_mock *)m;
    struct mock_seq *s;

    if (slot < 0 || (uint32_t)slot >= m->max_sequences) {
        snprintf(m->error, sizeof(m->error), "slot %d out of range", slot);
        return -EINVAL;
    }
    if (n == 0 || n >= m->max_context) {
        snprintf(m->error, sizeof(m->error), "prompt of %u tokens for a context of %u", n,
                 m->max_context);
        return -EINVAL;
    }
    s = &mm->seqs[slot];
    s->faults = mm->faults ? mock_scan_faults(prompt, n) : 0;
    s->tool = mm->tool_reply && mock_has(prompt, n, "<tool_response>");
    if (s->faults & MOCK_FAULT_SEGV) {
        /* the default action, whatever a test harness or sanitizer installed: the process
         * dies of SIGSEGV as it would of a bad pointer */
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    }
    if (s->faults & MOCK_FAULT_HOLD)
        mock_hold(mm->stop);
    if (m->heartbeat)
        m->heartbeat(m->heartbeat_ctx);
    mock_delay(mm);
    if (m->heartbeat)
        m->heartbeat(m->heartbeat_ctx);
    s->pos = 0;
    s->n_tokens = n;
    mock_logits(mm, s, 0, logits);
    return 0;
}

/* One sequence's step, without the simulated time (charged once per call or step) */
static int mock_step(struct model_mock *mm, int slot, uint32_t token, float *logits, char *err,
                     size_t errlen)
{
    struct mock_seq *s;

    if (slot < 0 || (uint32_t)slot >= mm->base.max_sequences) {
        snprintf(err, errlen, "slot %d out of range", slot);
        return -EINVAL;
    }
    if (token >= MOCK_N_VOCAB) {
        snprintf(err, errlen, "token %u out of range", token);
        return -EINVAL;
    }
    s = &mm->seqs[slot];
    if (s->faults & MOCK_FAULT_ABORT)
        abort();
    if (s->faults & MOCK_FAULT_HANG)
        mock_hang();
    if (s->faults & MOCK_FAULT_ERROR) {
        snprintf(err, errlen, "injected fault");
        return -EIO;
    }
    if (s->n_tokens >= mm->base.max_context) {
        snprintf(err, errlen, "the context of %u tokens is full", mm->base.max_context);
        return -ENOSPC;
    }
    s->n_tokens++;
    s->pos++;
    mock_logits(mm, s, s->pos, logits);
    return 0;
}

static int mock_decode(struct model *m, int slot, uint32_t token, float *logits)
{
    struct model_mock *mm = (struct model_mock *)m;

    mock_delay(mm);
    return mock_step(mm, slot, token, logits, m->error, sizeof(m->error));
}

static int mock_decode_batch(struct model *m, const int *slots, const uint32_t *tokens, int n,
                             float *logits, struct model_result *res)
{
    struct model_mock *mm = (struct model_mock *)m;

    mock_delay(mm);
    for (int i = 0; i < n; i++) {
        res[i].error[0] = '\0';
        res[i].status = mock_step(mm, slots[i], tokens[i], logits + (size_t)i * MOCK_N_VOCAB,
                                  res[i].error, sizeof(res[i].error));
    }
    return n;
}

static void mock_seq_free(struct model *m, int slot)
{
    struct model_mock *mm = (struct model_mock *)m;

    if (slot >= 0 && (uint32_t)slot < m->max_sequences)
        memset(&mm->seqs[slot], 0, sizeof(mm->seqs[slot]));
}

static void mock_destroy(struct model *m)
{
    struct model_mock *mm = (struct model_mock *)m;

    free(mm->reply);
    free(mm->tool_reply);
    free(mm->seqs);
    free(mm);
}

static const struct model_ops mock_ops = {
    .prefill = mock_prefill,
    .decode = mock_decode,
    .decode_batch = mock_decode_batch,
    .seq_free = mock_seq_free,
    .destroy = mock_destroy,
};

struct model *model_mock_create(const struct model_mock_opts *o, char *err, size_t errlen)
{
    struct model_mock *mm;
    const char *reply = o->reply ? o->reply : MODEL_MOCK_DEFAULT_REPLY;

    mm = calloc(1, sizeof(*mm));
    if (!mm)
        goto nomem;
    mm->base.ops = &mock_ops;
    snprintf(mm->base.name, sizeof(mm->base.name), "mock");
    mm->base.max_context = o->max_context ? o->max_context : 4096;
    mm->base.max_sequences = o->max_sequences ? o->max_sequences : 1;
    mm->base.n_vocab = MOCK_N_VOCAB;
    mm->base.n_eos = 1;
    mm->base.eos[0] = TOKENIZER_BYTES_EOS;
    mm->delay_ms = o->delay_ms;
    mm->faults = o->faults;
    mm->stop = o->stop;
    mm->reply = strdup(reply);
    mm->reply_len = strlen(reply);
    if (o->tool_reply && !(mm->tool_reply = strdup(o->tool_reply)))
        goto nomem;
    mm->tool_reply_len = o->tool_reply ? strlen(o->tool_reply) : 0;
    mm->seqs = calloc(mm->base.max_sequences, sizeof(*mm->seqs));
    if (!mm->reply || !mm->seqs)
        goto nomem;
    if (mm->base.max_context < 2) {
        snprintf(err, errlen, "a context of %u tokens is too small", mm->base.max_context);
        mock_destroy(&mm->base);
        return NULL;
    }
    if (o->faults) {
        struct sigaction sa;
        sigset_t usr1;

        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = mock_on_usr1;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
        /* a SIGUSR1 that comes before the hold stays pending for it */
        sigemptyset(&usr1);
        sigaddset(&usr1, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    }
    return &mm->base;

nomem:
    snprintf(err, errlen, "out of memory creating the mock model");
    if (mm)
        mock_destroy(&mm->base);
    return NULL;
}
