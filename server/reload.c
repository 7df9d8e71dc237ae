/* The reload of the config (reload.h). */
#include "reload.h"

#include <stdio.h>
#include <string.h>

#include "access_log.h"
#include "api.h"
#include "config.h"
#include "front_model.h"
#include "hf_pull.h"
#include "http.h"
#include "log.h"
#include "roll.h"
#include "service.h"

static const char *level_name(enum log_level l)
{
    static const char *n[] = {"debug", "info", "warn", "error"};
    return (unsigned)l < 4 ? n[l] : "?";
}

/* The model file, the settings a model generation is made with (ctx, the KV cache's size, the
 * chat template and tool-call format: front_model.h), --threads and --workers: a rolling
 * restart of the workers (roll.h) when any changed. A model that does not load in the front
 * keeps everything as it was. */
static void reload_workers(struct front *f, const struct kiln_config *n, bool watchdog)
{
    uint32_t threads, count;
    struct front_model *target = roll_target(f->roll, &threads, &count), *m = NULL;
    char err[512], why[1024];

    if (hf_is_ref(n->model) && strcmp(n->model, target->arg) != 0) {
        snprintf(why, sizeof(why),
                 "model %s: a Hugging Face reference is pulled only at start; run `kiln pull "
                 "%s` and give the file's path",
                 n->model, n->model);
        log_error("reload: %s; the workers keep model %s", why, target->name);
        roll_failed(f->roll, why);
        return;
    }
    /* the file, or a setting the front's model and the workers' engine are made with */
    char what[1024];
    const char *path = hf_is_ref(n->model) ? target->path : n->model;
    bool file_changed = !hf_is_ref(n->model) && front_model_changed(target, n->model);
    if (front_model_settings_changed(target, n, what, sizeof(what)) || file_changed) {
        if (!(m = front_model_load(n, path, f->next_gen + 1, err, sizeof(err)))) {
            snprintf(why, sizeof(why), "model %.400s: %s", path, err);
            log_error("reload: %s; the workers keep model %s", why, target->name);
            roll_failed(f->roll, why);
            return;
        }
        f->next_gen++;
        if (file_changed)
            log_info("reload: model %s -> %s (%s)", target->path, m->path, m->name);
        if (what[0])
            log_info("reload: %s", what);
    }
    if (!m && n->threads == threads && n->workers == count && !watchdog)
        return;
    if (n->threads != threads)
        log_info("reload: threads %u -> %u", threads, n->threads);
    if (n->workers != count)
        log_info("reload: workers %u -> %u", count, n->workers);
    roll_start(f->roll, m ? m : front_model_ref(target), n->threads, n->workers);
}

void reload_run(struct front *f, struct service *svc, int argc, char **argv)
{
    struct kiln_config n;
    char err[512], status[512];
    /* the config is read-only for every module: only fields read on each use change */
    struct kiln_config *cur = (struct kiln_config *)f->cfg;

    service_reloading(svc, "reloading the configuration");
    roll_reload_begin(f->roll);
    config_init(&n);
    /* first the part that can fail (a key file that went bad): then nothing else changes */
    if (config_parse(&n, argc, argv, err, sizeof(err)) < 0 ||
        api_reload_guard(f, &n, err, sizeof(err)) < 0) {
        log_error("reload: %s; nothing changed", err);
        roll_refused(f->roll, err);
        config_free(&n);
        service_status_line(f, status, sizeof(status));
        service_reloaded(svc, status);
        return;
    }
    log_info("reload: %zu API key(s)%s, rate limit %u/s (burst %u)", f->auth.n_keys,
             f->auth.has_metrics_key ? " and a metrics key" : "", n.rate_limit,
             n.rate_burst ? n.rate_burst : n.rate_limit);
    /* the same file opened again (logrotate moved it), or a new destination */
    if (access_log_open(n.access_log, err, sizeof(err)) < 0)
        log_error("reload: %s; the access log goes on where it went", err);
    if (n.log_level != cur->log_level) {
        log_info("reload: log-level %s -> %s", level_name(cur->log_level),
                 level_name(n.log_level));
        cur->log_level = n.log_level;
        log_init("kiln", n.log_level);
    }
#define LIVE_U32(field, name)                                                              \
    if (n.field != cur->field) {                                                           \
        log_info("reload: " name " %u -> %u", cur->field, n.field);                        \
        cur->field = n.field;                                                              \
    }
    LIVE_U32(request_timeout_ms, "request-timeout-ms");
    LIVE_U32(header_timeout_ms, "header-timeout-ms");
    LIVE_U32(body_timeout_ms, "body-timeout-ms");
    LIVE_U32(keepalive_timeout_ms, "keepalive-timeout-ms");
    LIVE_U32(client_timeout_ms, "client-timeout-ms");
    LIVE_U32(drain_ms, "drain-ms");
    /* the workers beat at its pace: applied by restarting them (each is watched with the
     * value it was started under meanwhile) */
    bool watchdog = n.watchdog_ms != cur->watchdog_ms;
    LIVE_U32(watchdog_ms, "watchdog-ms");
#undef LIVE_U32
    int tls = http_reload_tls(f->http, &n, err, sizeof(err));
    if (tls < 0)
        log_error("reload: %s; the certificate in use stays", err);
    else if (tls > 0)
        log_warn("reload: TLS is switched on or off at the next restart, not live");
    else if (n.tls_cert)
        log_info("reload: certificate %s read again", n.tls_cert);
    reload_workers(f, &n, watchdog);
    if (n.max_sequences != cur->max_sequences)
        log_warn("reload: max-sequences takes effect at the next restart");
    config_free(&n);
    service_status_line(f, status, sizeof(status));
    service_reloaded(svc, status);
}
