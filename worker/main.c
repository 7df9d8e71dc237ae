/* kiln-worker: one worker process. It inherits its shared-memory region and two eventfds
 * from the front, reads its parameters from the region (shm_params.h), loads the model, and
 * runs the scheduler loop until SIGTERM or its front dies. Startup failures exit 2 with a
 * message on stderr; the front reports it. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "log.h"
#include "shm_params.h"
#include "shm_region.h"
#include "tokenizer.h"
#include "loop.h"
#include "model.h"
#include "model_info.h"
#include "model_llama.h"
#include "model_mock.h"
#include "wire.h"

/* Signal flags: set by the handler only; the eventfd lets it cut the loop's sleep short. */
static volatile sig_atomic_t worker_stop;
static volatile sig_atomic_t worker_signal_wake_fd = -1;

static void on_stop_signal(int sig)
{
    int saved = errno;

    (void)sig;
    worker_stop = 1;
    if (worker_signal_wake_fd >= 0)
        (void)eventfd_write(worker_signal_wake_fd, 1); /* async-signal-safe: a write(2) */
    errno = saved;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: kiln-worker --shm-fd FD\n"
                 "  FD: the shared region kiln made for this worker, holding its parameters\n"
                 "  (kiln starts its workers itself; this is not a command for people)\n");
}

/* The region's fd from argv: "--shm-fd N". Returns it, or -1 with the usage printed. */
static int parse_args(int argc, char **argv)
{
    char *end;
    long fd;

    if (argc == 2 && strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        exit(0);
    }
    if (argc != 3 || strcmp(argv[1], "--shm-fd") != 0) {
        usage(stderr);
        return -1;
    }
    errno = 0;
    fd = strtol(argv[2], &end, 10);
    if (errno || end == argv[2] || *end || fd < 0 || fd > INT_MAX) {
        fprintf(stderr, "kiln-worker: bad value for --shm-fd: %s\n", argv[2]);
        return -1;
    }
    return (int)fd;
}

/* The vocabulary grammar masks need: the byte tokenizer for the mock, else the GGUF's. NULL
 * (logged) when it cannot be read: grammar jobs then fail, the rest is served. *g keeps the
 * file open while the tokenizer lives. */
static struct tokenizer *load_vocab(const struct shm_params *a, struct gguf **g)
{
    char err[256] = "";
    struct tokenizer *t;

    *g = NULL;
    if (strcmp(a->model, "mock") == 0)
        return tokenizer_create_bytes();
    if (!(*g = gguf_open(a->model, err, sizeof(err)))) {
        log_warn("no vocabulary for grammars: %s", err);
        return NULL;
    }
    if (!(t = tokenizer_create_gguf(*g, err, sizeof(err)))) {
        log_warn("no vocabulary for grammars: %s", err);
        gguf_close(*g);
        *g = NULL;
    }
    return t;
}

static struct model *load_model(const struct shm_params *a)
{
    char err[256] = "";
    struct model *m;

    if (strcmp(a->model, "mock") == 0) {
        struct model_mock_opts o = {
            .reply = a->mock_reply,
            .tool_reply = a->mock_tool_reply,
            .delay_ms = a->mock_delay_ms,
            .max_context = a->ctx,
            .max_sequences = a->max_sequences,
            .faults = a->mock_faults,
            .stop = &worker_stop,
        };

        /* A simulated load time, so tests see a worker that is not ready yet. */
        if (a->mock_load_ms > 0) {
            struct timespec ts = {a->mock_load_ms / 1000,
                                  (long)(a->mock_load_ms % 1000) * 1000000L};

            while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !worker_stop)
                ;
        }
        m = model_mock_create(&o, err, sizeof(err));
        if (!m)
            fprintf(stderr, "kiln-worker: mock model: %s\n", err);
        return m;
    }
    struct model_llama_opts lo = {
        .max_sequences = a->max_sequences,
        .ctx = a->ctx,
        .kv_tokens = a->kv_cache_tokens,
        /* 0 (run alone): every core; the front passes its share */
        .threads = a->threads ? (int)a->threads : (int)model_info_default_threads(1),
    };

    m = model_llama_create(a->model, &lo, err, sizeof(err));
    if (!m)
        fprintf(stderr, "kiln-worker: %s\n", err);
    return m;
}

int main(int argc, char **argv)
{
    struct shm_params a;
    struct shm_region reg = {.fd = -1};
    struct model *m;
    struct loop *l;
    struct loop_opts lo;
    struct tokenizer *tok;
    struct gguf *g;
    struct sigaction sa;
    char role[32], err[256], *store = NULL;
    size_t area_size;
    int rc, shm_fd;

    if ((shm_fd = parse_args(argc, argv)) < 0)
        return 2;
    /* the front's death kills us; checked once after, in case it died before the prctl */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
        fprintf(stderr, "kiln-worker: prctl(PR_SET_PDEATHSIG): %s\n", strerror(errno));
        return 2;
    }
    if ((rc = shm_region_attach(&reg, shm_fd)) < 0) {
        fprintf(stderr, "kiln-worker: attaching the shared region (fd %d): %s\n", shm_fd,
                strerror(-rc));
        return 2;
    }
    /* the parameters are copied out and checked once; nothing of them is trusted before */
    const void *area = shm_region_params(&reg, &area_size);
    if ((rc = shm_params_decode(area, area_size, &a, &store, err, sizeof(err))) < 0) {
        fprintf(stderr, "kiln-worker: the shared region's parameters: %s\n",
                rc == -EPROTO ? err : strerror(-rc));
        shm_region_destroy(&reg);
        return 2;
    }
    if (a.parent_pid && getppid() != (pid_t)a.parent_pid) {
        fprintf(stderr, "kiln-worker: the front (pid %u) is gone\n", a.parent_pid);
        rc = 1;
        goto out_params;
    }
    snprintf(role, sizeof(role), "worker %u", a.id);
    log_init(role, log_level_parse(getenv("KILN_LOG_LEVEL"), LOG_LEVEL_INFO));

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    worker_signal_wake_fd = (sig_atomic_t)a.wake_fd;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = 2;
    if (!(m = load_model(&a)))
        goto out_params;
    tok = load_vocab(&a, &g);
    lo = (struct loop_opts){.idle_timeout_ms = (int)a.heartbeat_ms,
                            .max_prefill_tokens = a.max_prefill_tokens, .tok = tok};
    l = loop_create(m, &reg, (int)a.wake_fd, (int)a.notify_fd, &lo, &rc);
    tokenizer_destroy(tok); /* the loop copied what it needs */
    gguf_close(g);
    if (!l) {
        fprintf(stderr, "kiln-worker: setting up the loop: %s\n", strerror(-rc));
        model_destroy(m);
        rc = 2;
        goto out_params;
    }
    log_info("serving %s: %u sequences, context %u, prefill budget %u", m->name,
             m->max_sequences, m->max_context, a.max_prefill_tokens);
    atomic_store_explicit(&reg.hdr->state, WORKER_STATE_READY, memory_order_release);
    /* Tell the front at once, so it dispatches the jobs waiting for a ready worker and its
     * /health and logs say ready now rather than at the next record. */
    if (eventfd_write((int)a.notify_fd, 1) < 0)
        log_warn("telling the front we are ready: %s", strerror(errno));
    rc = loop_run(l, &worker_stop);
    atomic_store_explicit(&reg.hdr->state, WORKER_STATE_STOPPING, memory_order_release);
    loop_destroy(l);
    model_destroy(m);
    rc = rc < 0 ? 1 : 0;
out_params:
    free(store);
    shm_region_destroy(&reg);
    return rc;
}
