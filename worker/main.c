/* kiln-worker: one worker process. It inherits its shared-memory region and two eventfds
 * from the front, loads the model, and runs the scheduler loop until SIGTERM or its front
 * dies. Startup failures exit 2 with a message on stderr; the front reports it. */
#include <errno.h>
#include <getopt.h>
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

struct worker_args {
    long id, shm_fd, wake_fd, notify_fd, parent_pid;
    const char *model;
    long max_sequences, max_prefill_tokens, ctx, kv_cache_tokens, threads, mock_delay_ms, mock_load_ms;
    long heartbeat_ms; /* the longest idle sleep between heartbeats; 0: the loop's default */
    const char *mock_reply, *mock_tool_reply;
    int mock_faults;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: kiln-worker --id N --shm-fd FD --wake-fd FD --notify-fd FD\n"
            "                   --model mock|FILE.gguf [--parent-pid PID]\n"
            "                   [--max-sequences N] [--max-prefill-tokens N] [--ctx N]\n"
            "                   [--kv-cache-tokens N (default: max-sequences x ctx)]\n"
            "                   [--threads N (default: every core)] [--mock-reply TEXT]\n"
            "                   [--mock-tool-reply TEXT]\n"
            "                   [--mock-delay-ms N] [--mock-load-ms N]\n"
            "                   [--mock-faults] [--heartbeat-ms N]\n");
}

/* A whole non-negative number within [min, max], or -1 */
static long parse_num(const char *s, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    return v;
}

static int parse_args(int argc, char **argv, struct worker_args *a)
{
    static const struct option opts[] = {
        {"id", required_argument, NULL, 'i'},
        {"shm-fd", required_argument, NULL, 's'},
        {"wake-fd", required_argument, NULL, 'w'},
        {"notify-fd", required_argument, NULL, 'n'},
        {"parent-pid", required_argument, NULL, 'p'},
        {"model", required_argument, NULL, 'm'},
        {"max-sequences", required_argument, NULL, 'S'},
        {"max-prefill-tokens", required_argument, NULL, 'P'},
        {"ctx", required_argument, NULL, 'c'},
        {"kv-cache-tokens", required_argument, NULL, 'K'},
        {"threads", required_argument, NULL, 't'},
        {"mock-reply", required_argument, NULL, 'r'},
        {"mock-tool-reply", required_argument, NULL, 'T'},
        {"mock-delay-ms", required_argument, NULL, 'd'},
        {"mock-load-ms", required_argument, NULL, 'L'},
        {"mock-faults", no_argument, NULL, 'f'},
        {"heartbeat-ms", required_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    *a = (struct worker_args){.id = 0, .shm_fd = -1, .wake_fd = -1, .notify_fd = -1,
                              .parent_pid = 0, .max_sequences = 1, .max_prefill_tokens = 512,
                              .ctx = 4096, .threads = 0};
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        long *num = NULL, min = 0, max = INT_MAX;

        switch (c) {
        case 'i': num = &a->id; break;
        case 's': num = &a->shm_fd; break;
        case 'w': num = &a->wake_fd; break;
        case 'n': num = &a->notify_fd; break;
        case 'p': num = &a->parent_pid; min = 1; break;
        case 'S': num = &a->max_sequences; min = 1; max = 4096; break;
        case 'P': num = &a->max_prefill_tokens; min = 1; break;
        case 'c': num = &a->ctx; min = 2; max = WIRE_MAX_PROMPT; break;
        case 'K': num = &a->kv_cache_tokens; max = INT_MAX; break;
        case 't': num = &a->threads; max = 1024; break;
        case 'd': num = &a->mock_delay_ms; max = 3600000; break;
        case 'L': num = &a->mock_load_ms; max = 3600000; break;
        case 'H': num = &a->heartbeat_ms; min = 1; max = 60000; break;
        case 'm': a->model = optarg; break;
        case 'r': a->mock_reply = optarg; break;
        case 'T': a->mock_tool_reply = optarg; break;
        case 'f': a->mock_faults = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -EINVAL;
        }
        if (num && (*num = parse_num(optarg, min, max)) < 0) {
            const char *name = "?";

            for (const struct option *o = opts; o->name; o++)
                if (o->val == c)
                    name = o->name;
            fprintf(stderr, "kiln-worker: bad value for --%s: %s (%ld..%ld)\n", name, optarg,
                    min, max);
            return -EINVAL;
        }
    }
    if (optind < argc || a->shm_fd < 0 || a->wake_fd < 0 || a->notify_fd < 0 || !a->model) {
        usage(stderr);
        return -EINVAL;
    }
    return 0;
}

/* The vocabulary grammar masks need: the byte tokenizer for the mock, else the GGUF's. NULL
 * (logged) when it cannot be read: grammar jobs then fail, the rest is served. *g keeps the
 * file open while the tokenizer lives. */
static struct tokenizer *load_vocab(const struct worker_args *a, struct gguf **g)
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

static struct model *load_model(const struct worker_args *a)
{
    char err[256] = "";
    struct model *m;

    if (strcmp(a->model, "mock") == 0) {
        struct model_mock_opts o = {
            .reply = a->mock_reply,
            .tool_reply = a->mock_tool_reply,
            .delay_ms = (uint32_t)a->mock_delay_ms,
            .max_context = (uint32_t)a->ctx,
            .max_sequences = (uint32_t)a->max_sequences,
            .faults = a->mock_faults != 0,
            .stop = &worker_stop,
        };

        /* A simulated load time, so tests see a worker that is not ready yet. */
        if (a->mock_load_ms > 0) {
            struct timespec ts = {a->mock_load_ms / 1000, (a->mock_load_ms % 1000) * 1000000L};

            while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !worker_stop)
                ;
        }
        m = model_mock_create(&o, err, sizeof(err));
        if (!m)
            fprintf(stderr, "kiln-worker: mock model: %s\n", err);
        return m;
    }
    struct model_llama_opts lo = {
        .max_sequences = (uint32_t)a->max_sequences,
        .ctx = (uint32_t)a->ctx,
        .kv_tokens = (uint32_t)a->kv_cache_tokens,
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
    struct worker_args a;
    struct shm_region reg = {.fd = -1};
    struct model *m;
    struct loop *l;
    struct loop_opts lo;
    struct tokenizer *tok;
    struct gguf *g;
    struct sigaction sa;
    char role[32];
    int rc;

    if (parse_args(argc, argv, &a) < 0)
        return 2;
    /* the front's death kills us; checked once after, in case it died before the prctl */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
        fprintf(stderr, "kiln-worker: prctl(PR_SET_PDEATHSIG): %s\n", strerror(errno));
        return 2;
    }
    if (a.parent_pid && getppid() != (pid_t)a.parent_pid) {
        fprintf(stderr, "kiln-worker: the front (pid %ld) is gone\n", a.parent_pid);
        return 1;
    }
    snprintf(role, sizeof(role), "worker %ld", a.id);
    log_init(role, log_level_parse(getenv("KILN_LOG_LEVEL"), LOG_LEVEL_INFO));

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    worker_signal_wake_fd = (sig_atomic_t)a.wake_fd;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((rc = shm_region_attach(&reg, (int)a.shm_fd)) < 0) {
        fprintf(stderr, "kiln-worker: attaching the shared region (fd %ld): %s\n", a.shm_fd,
                strerror(-rc));
        return 2;
    }
    if (!(m = load_model(&a))) {
        shm_region_destroy(&reg);
        return 2;
    }
    tok = load_vocab(&a, &g);
    lo = (struct loop_opts){.idle_timeout_ms = (int)a.heartbeat_ms,
                            .max_prefill_tokens = (uint32_t)a.max_prefill_tokens, .tok = tok};
    l = loop_create(m, &reg, (int)a.wake_fd, (int)a.notify_fd, &lo, &rc);
    tokenizer_destroy(tok); /* the loop copied what it needs */
    gguf_close(g);
    if (!l) {
        fprintf(stderr, "kiln-worker: setting up the loop: %s\n", strerror(-rc));
        model_destroy(m);
        shm_region_destroy(&reg);
        return 2;
    }
    log_info("serving %s: %u sequences, context %u, prefill budget %ld", m->name,
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
    shm_region_destroy(&reg);
    return rc < 0 ? 1 : 0;
}
