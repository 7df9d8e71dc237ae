/* The reload of the config (reload.h). */
#include "reload.h"

#include <stdio.h>
#include <string.h>

#include "api.h"
#include "config.h"
#include "log.h"
#include "service.h"

static const char *level_name(enum log_level l)
{
    static const char *n[] = {"debug", "info", "warn", "error"};
    return (unsigned)l < 4 ? n[l] : "?";
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

void reload_run(struct front *f, struct service *svc, int argc, char **argv)
{
    struct kiln_config n;
    char err[512], status[256];
    /* the config is read-only for every module: only fields read on each use change */
    struct kiln_config *cur = (struct kiln_config *)f->cfg;

    service_reloading(svc, "reloading the configuration");
    config_init(&n);
    /* first the part that can fail (a key file that went bad): then nothing else changes */
    if (config_parse(&n, argc, argv, err, sizeof(err)) < 0 ||
        api_reload_guard(f, &n, err, sizeof(err)) < 0) {
        log_error("reload: %s; nothing changed", err);
        config_free(&n);
        service_status_line(f, status, sizeof(status));
        service_reloaded(svc, status);
        return;
    }
    log_info("reload: %zu API key(s)%s, rate limit %u/s (burst %u)", f->auth.n_keys,
             f->auth.has_metrics_key ? " and a metrics key" : "", n.rate_limit,
             n.rate_burst ? n.rate_burst : n.rate_limit);
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
#undef LIVE_U32
    if (!str_eq(n.model, cur->model) || n.threads != cur->threads || n.workers != cur->workers ||
        n.max_sequences != cur->max_sequences || n.ctx != cur->ctx ||
        n.watchdog_ms != cur->watchdog_ms)
        log_warn("reload: model, threads, workers, max-sequences, ctx and watchdog-ms take effect at the "
                 "next restart (a rolling restart of the workers is not implemented yet)");
    config_free(&n);
    service_status_line(f, status, sizeof(status));
    service_reloaded(svc, status);
}
