/* kiln, the front process: parse flags, learn the model's facts, spawn the workers, serve
 * the OpenAI API from one libevent loop, and stop cleanly on SIGTERM/SIGINT. */
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
#include "http.h"
#include "log.h"
#include "queue.h"
#include "request.h"
#include "workers.h"

/* How long workers get to exit after SIGTERM before SIGKILL. */
#define WORKER_STOP_MS 3000

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

static void on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    struct front *f = arg;
    (void)what;
    log_info("%s: shutting down", strsignal((int)sig));
    event_base_loopbreak(f->base);
}

int main(int argc, char **argv)
{
    struct kiln_config cfg;
    struct front f;
    char err[512];
    struct event *ev_term = NULL, *ev_int = NULL;
    uint16_t port = 0;
    int status = 1;

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
    log_init("kiln", cfg.log_level);
    signal(SIGPIPE, SIG_IGN);

    memset(&f, 0, sizeof(f));
    f.cfg = &cfg;
    f.started_at = (int64_t)time(NULL);
    TAILQ_INIT(&f.requests);
    if (getrandom(&f.id_salt, sizeof(f.id_salt), 0) != sizeof(f.id_salt))
        f.id_salt = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (front_model_open(&f.model, &cfg, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return 1;
    }
    if (api_init(&f, err, sizeof(err)) < 0) {
        log_error("%s", err);
        api_free(&f);
        front_model_close(&f.model);
        return 1;
    }
    if (!(f.base = event_base_new())) {
        log_error("event_base_new failed");
        goto out;
    }
    queue_init(&f.queue, &f, cfg.max_waiting);
    if (!(f.workers = workers_create(f.base, &cfg, f.model.max_context, &ops, &f)))
        goto out;
    if (!(f.http = http_create(f.base, &cfg, api_handle, &f, &port)))
        goto out;
    ev_term = evsignal_new(f.base, SIGTERM, on_stop_signal, &f);
    ev_int = evsignal_new(f.base, SIGINT, on_stop_signal, &f);
    if (!ev_term || !ev_int || event_add(ev_term, NULL) < 0 || event_add(ev_int, NULL) < 0)
        goto out;
    log_info("model %s, context %u, %u worker(s) of %u slots", f.model.name,
             f.model.max_context, cfg.workers, cfg.max_sequences);
    fprintf(stderr, "kiln: listening on %s:%u\n", cfg.host, port);
    fflush(stderr);
    if (event_base_dispatch(f.base) < 0)
        log_error("event loop failed");
    else
        status = 0;
out:
    while (!TAILQ_EMPTY(&f.requests))
        request_abort(TAILQ_FIRST(&f.requests));
    workers_destroy(f.workers, WORKER_STOP_MS);
    http_destroy(f.http);
    if (ev_term)
        event_free(ev_term);
    if (ev_int)
        event_free(ev_int);
    if (f.base)
        event_base_free(f.base);
    api_free(&f);
    front_model_close(&f.model);
    return status;
}
