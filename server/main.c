/* kiln, the front process: parse flags, learn the model's facts, spawn the workers, serve
 * the OpenAI API from one libevent loop, and stop cleanly on SIGTERM/SIGINT: stop accepting,
 * let running requests finish within --drain-ms, cancel the rest, stop the workers, exit 0.
 * A second signal stops at once (the workers are killed). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <event2/event.h>

#include "api.h"
#include "config.h"
#include "hf_pull.h"
#include "http.h"
#include "log.h"
#include "queue.h"
#include "reload.h"
#include "reload_wait.h"
#include "request.h"
#include "roll.h"
#include "sdnotify.h"
#include "service.h"
#include "supervisor.h"
#include "workers.h"

/* How long workers get to exit after SIGTERM before SIGKILL. */
#define WORKER_STOP_MS 3000
/* While draining, how often to look whether every request is over. */
#define DRAIN_TICK_MS 50
/* After the workers are gone, time for the last answers to leave the sockets. */
#define FLUSH_MS 50

enum front_phase { FRONT_SERVING, FRONT_DRAINING, FRONT_STOPPING };

/* The shutdown's state, driven by the signal events and the drain tick. */
struct shutdown {
    struct front *f;
    enum front_phase phase;
    bool hard;              /* a second signal: workers killed, loop left at once */
    struct event *ev_tick;  /* draining: are the requests over? */
    struct timespec deadline;
    struct service *svc;    /* systemd's notifications */
    int argc;               /* the command line, read again on SIGHUP */
    char **argv;
};

/* The event loop. libevent runs callbacks activated from a callback in the same turn, so a
 * worker's records, handled DRAIN_BUDGET at a time and re-activated for the rest, would run
 * on without the sockets' turn while a fast worker keeps its ring full: after a few callbacks
 * the loop polls again, and ready sockets queue up behind what is already active. */
static struct event_base *loop_new(void)
{
    struct event_config *c = event_config_new();
    struct event_base *base;
    if (!c)
        return NULL;
    (void)event_config_set_max_dispatch_interval(c, NULL, 16, 0);
    base = event_base_new_with_config(c);
    event_config_free(c);
    return base;
}

static void on_job_record(void *ctx, struct worker *w, void *owner, const struct proto_msg *m)
{
    (void)ctx;
    (void)w;
    request_on_record(owner, m);
}

static void on_job_lost(void *ctx, struct worker *w, void *owner, const char *cause)
{
    (void)ctx;
    (void)w;
    request_on_job_lost(owner, cause);
}

static void on_capacity(void *ctx)
{
    struct front *f = ctx;
    queue_dispatch(&f->queue);
}

static const struct workers_ops ops = {on_job_record, on_job_lost, on_capacity};

static void on_workers_stopped(void *arg)
{
    struct shutdown *sd = arg;
    /* not loopbreak: the last error events and stream ends still have to be written */
    struct timeval tv = {0, FLUSH_MS * 1000};
    event_base_loopexit(sd->f->base, &tv);
}

/* The first unfinished request, or NULL. */
static struct request *first_unfinished(struct front *f)
{
    struct request *r;
    TAILQ_FOREACH(r, &f->requests, link_all)
        if (!request_over(r))
            return r;
    return NULL;
}

/* Drain over: cancel what still runs (its client gets an error event and the end of its
 * stream, or a 503), then stop the workers; the loop ends once they are reaped. */
static void begin_stop(struct shutdown *sd)
{
    struct front *f = sd->f;
    struct request *r;
    sd->phase = FRONT_STOPPING;
    event_del(sd->ev_tick);
    /* a failed request is over (and freed later, from the loop): look for the next */
    while ((r = first_unfinished(f))) {
        log_warn("request %llu: not finished when the drain ended; cancelled",
                 (unsigned long long)r->req_id);
        request_fail(r, 503, "server_error", "the server is shutting down", NULL,
                     "shutting_down");
    }
    supervisor_stop(f->sup, WORKER_STOP_MS, on_workers_stopped, sd);
}

static void on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    struct shutdown *sd = arg;
    struct timespec now;
    (void)fd;
    (void)what;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!first_unfinished(sd->f) || now.tv_sec > sd->deadline.tv_sec ||
        (now.tv_sec == sd->deadline.tv_sec && now.tv_nsec >= sd->deadline.tv_nsec))
        begin_stop(sd);
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    struct shutdown *sd = arg;
    struct front *f = sd->f;
    (void)what;
    if (sd->phase == FRONT_SERVING) {
        log_info("%s: draining: no new connections, running requests get %u ms",
                 strsignal((int)sig), f->cfg->drain_ms);
        sd->phase = FRONT_DRAINING;
        service_stopping(sd->svc, "draining: running requests finish, no new ones");
        http_stop_listening(f->http);
        supervisor_drain(f->sup);
        clock_gettime(CLOCK_MONOTONIC, &sd->deadline);
        sd->deadline.tv_sec += f->cfg->drain_ms / 1000;
        sd->deadline.tv_nsec += (long)(f->cfg->drain_ms % 1000) * 1000000L;
        if (sd->deadline.tv_nsec >= 1000000000L) {
            sd->deadline.tv_sec++;
            sd->deadline.tv_nsec -= 1000000000L;
        }
        struct timeval tick = {0, DRAIN_TICK_MS * 1000};
        event_add(sd->ev_tick, &tick);
        on_drain_tick(-1, 0, sd);
        return;
    }
    log_warn("%s again: stopping now", strsignal((int)sig));
    sd->hard = true;
    supervisor_kill_all(f->sup);
    event_base_loopbreak(f->base);
}

static void on_hup_signal(evutil_socket_t sig, short what, void *arg)
{
    struct shutdown *sd = arg;
    (void)sig;
    (void)what;
    if (sd->phase != FRONT_SERVING)
        return;
    log_info("SIGHUP: reloading the configuration");
    reload_run(sd->f, sd->svc, sd->argc, sd->argv);
}

/* libevent's own warnings (an accept() that fails, ...) go through our log, so a repeated
 * one is rate-limited like ours. */
static void on_libevent_log(int severity, const char *msg)
{
    if (severity >= EVENT_LOG_WARN)
        log_warn("libevent: %s", msg);
    else
        log_debug("libevent: %s", msg);
}

/* Whether host names only this machine (127.0.0.0/8, ::1, localhost). */
static bool host_is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
           strcmp(host, "localhost") == 0;
}

int main(int argc, char **argv)
{
    struct kiln_config cfg;
    struct front f;
    char err[512];
    struct event *ev_term = NULL, *ev_int = NULL, *ev_hup = NULL;
    struct shutdown sd = {.phase = FRONT_SERVING};
    uint16_t port = 0;
    int status = 1;

    if (argc >= 2 && strcmp(argv[1], "pull") == 0)
        return hf_pull_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "reload") == 0)
        return reload_wait_main(argc - 1, argv + 1);
    config_init(&cfg);
    if (config_parse(&cfg, argc, argv, err, sizeof(err)) < 0) {
        fprintf(stderr, "kiln: %s\n", err);
        config_usage(stderr, "kiln");
        return 2;
    }
    if (cfg.help) {
        config_usage(stdout, "kiln");
        return 0;
    }
    /* the workers read it from the environment they inherit */
    setenv("KILN_LOG_FORMAT", cfg.log_format, 1);
    setenv("KILN_LOG_LEVEL", log_level_name(cfg.log_level), 1);
    log_init("kiln", cfg.log_level);
    if (sdnotify_init() < 0) /* before any worker starts: they must not inherit it */
        log_warn("NOTIFY_SOCKET is not an absolute path or @abstract name; not notifying");
    event_set_log_callback(on_libevent_log);
    signal(SIGPIPE, SIG_IGN);
    const char *model_arg = cfg.model; /* what a reload compares its --model with */
    if (hf_is_ref(cfg.model)) { /* download (or find in the cache) before any worker starts */
        static char model_path[4096];
        struct hf_pull_opts po = {.models_dir = cfg.models_dir, .out = stderr};
        if (hf_pull(cfg.model, &po, model_path, sizeof(model_path), err, sizeof(err)) < 0) {
            log_error("%s", err);
            return 1;
        }
        cfg.model = model_path;
    }

    memset(&f, 0, sizeof(f));
    f.cfg = &cfg;
    f.started_at = (int64_t)time(NULL);
    TAILQ_INIT(&f.requests);
    if (getrandom(&f.id_salt, sizeof(f.id_salt), 0) != sizeof(f.id_salt))
        f.id_salt = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    struct kiln_config as_given = cfg;
    as_given.model = model_arg;
    if (!(f.model = front_model_load(&as_given, cfg.model, 1, err, sizeof(err)))) {
        log_error("%s", err);
        return 1;
    }
    f.next_gen = 1;
    if (api_init(&f, err, sizeof(err)) < 0) {
        log_error("%s", err);
        api_free(&f);
        front_model_put(f.model);
        return 1;
    }
    if (!host_is_loopback(cfg.host) && f.auth.n_keys == 0)
        log_warn("listening on %s without an API key: anyone who can reach this port can use "
                 "the model (set --api-key or --api-key-file)",
                 cfg.host);
    if (!(f.base = loop_new())) {
        log_error("event_base_new failed");
        goto out;
    }
    if (queue_init(&f.queue, &f, cfg.max_waiting) < 0)
        goto out;
    if (!(f.workers = workers_create(f.base, &cfg, f.model, &ops, &f)) ||
        !(f.sup = supervisor_create(f.base, &cfg, f.workers)) || !(f.roll = roll_create(&f)))
        goto out;
    if (!(f.http = http_create(f.base, &cfg, &f.metrics, api_handle, &f, &port)))
        goto out;
    sd.f = &f;
    sd.ev_tick = event_new(f.base, -1, EV_PERSIST, on_drain_tick, &sd);
    ev_term = evsignal_new(f.base, SIGTERM, on_stop_signal, &sd);
    ev_int = evsignal_new(f.base, SIGINT, on_stop_signal, &sd);
    ev_hup = evsignal_new(f.base, SIGHUP, on_hup_signal, &sd);
    sd.argc = argc;
    sd.argv = argv;
    if (!sd.ev_tick || !ev_term || !ev_int || !ev_hup || event_add(ev_term, NULL) < 0 ||
        event_add(ev_int, NULL) < 0 || event_add(ev_hup, NULL) < 0)
        goto out;
    if (!(sd.svc = service_start(&f)))
        goto out;
    log_info("model %s, context %u, %u worker(s) of %u slots", f.model->name,
             f.model->max_context, cfg.workers, cfg.max_sequences);

    fprintf(stderr, "kiln: listening on %s:%u\n", cfg.host, port);
    fflush(stderr);
    if (event_base_dispatch(f.base) < 0)
        log_error("event loop failed");
    else
        status = sd.hard ? 1 : 0;
out:
    while (!TAILQ_EMPTY(&f.requests))
        request_abort(TAILQ_FIRST(&f.requests));
    roll_free(f.roll);
    supervisor_destroy(f.sup, sd.hard ? 0 : WORKER_STOP_MS);
    workers_destroy(f.workers);
    http_destroy(f.http);
    if (sd.ev_tick)
        event_free(sd.ev_tick);
    if (f.base)
        queue_free(&f.queue);
    if (ev_term)
        event_free(ev_term);
    if (ev_int)
        event_free(ev_int);
    if (ev_hup)
        event_free(ev_hup);
    service_free(sd.svc);
    sdnotify_close();
    if (f.base)
        event_base_free(f.base);
    api_free(&f);
    front_model_put(f.model);
    config_free(&cfg);
    return status;
}
