/* /health's body (api_impl.h), rendered from the supervisor's plain view of the workers. */
#include <stdio.h>
#include <time.h>

#include <jansson.h>

#include "api_impl.h"
#include "shm_region.h"
#include "supervisor.h"

static json_t *iso_time(int64_t unix_ms)
{
    char buf[48];
    struct tm tm;
    time_t s = (time_t)(unix_ms / 1000);
    if (!unix_ms || !gmtime_r(&s, &tm))
        return json_null();
    size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(unix_ms % 1000));
    return json_string(buf);
}

static json_t *str_or_null(const char *s)
{
    return s && s[0] ? json_string(s) : json_null();
}

static json_t *worker_json(const struct worker_view *v)
{
    uint32_t waiting = 0, active = 0, kv_blocks = 0, kv_used = 0, kv_cached = 0;
    json_t *o = json_object();
    if (!o)
        return NULL;
    if (v->hdr) {
        waiting = atomic_load_explicit(&v->hdr->waiting, memory_order_relaxed);
        active = atomic_load_explicit(&v->hdr->running, memory_order_relaxed);
        kv_blocks = atomic_load_explicit(&v->hdr->kv_blocks, memory_order_relaxed);
        kv_used = atomic_load_explicit(&v->hdr->kv_used, memory_order_relaxed);
        kv_cached = atomic_load_explicit(&v->hdr->kv_cached, memory_order_relaxed);
    }
    json_object_set_new(o, "id", json_integer(v->id));
    json_object_set_new(o, "state", json_string(worker_view_state(v)));
    json_object_set_new(o, "model", json_string(v->model));
    json_object_set_new(o, "pid", v->pid > 0 ? json_integer(v->pid) : json_null());
    json_object_set_new(o, "running", json_integer(v->running));
    json_object_set_new(o, "waiting", json_integer(waiting));
    json_object_set_new(o, "active", json_integer(active));
    json_object_set_new(o, "restarts", json_integer((json_int_t)v->restarts));
    /* the KV cache: blocks held by running sequences and kept for reuse, of all */
    json_object_set_new(o, "cache",
                        json_pack("{s:I, s:I, s:I, s:f}", "blocks", (json_int_t)kv_blocks,
                                  "used", (json_int_t)kv_used, "cached", (json_int_t)kv_cached,
                                  "fill",
                                  kv_blocks ? (double)(kv_used + kv_cached) / kv_blocks : 0.0));
    if (v->restart_in_ms >= 0)
        json_object_set_new(o, "restart_in_ms", json_integer(v->restart_in_ms));
    json_object_set_new(o, "last_exit", str_or_null(v->last_exit));
    json_object_set_new(o, "last_exit_at", iso_time(v->last_exit_at));
    json_object_set_new(o, "last_error", str_or_null(v->last_error));
    return o;
}

json_t *api_health_json(const struct supervisor_view *v, bool details, int *http_status)
{
    json_t *j = json_object(), *arr = json_array();
    uint32_t running = 0, ready = 0, starting = 0, by_reload = 0;

    if (!j || !arr)
        goto fail;
    for (uint32_t i = 0; i < v->n; i++) {
        const struct worker_view *w = &v->w[i];
        running += w->running;
        ready += w->serving;
        starting += w->loading;
        by_reload += w->reload_start;
        if (details) {
            json_t *o = worker_json(w);
            if (!o)
                goto fail;
            json_array_append_new(arr, o);
        }
    }
    *http_status = !v->draining && ready ? 200 : 503;
    if (!details) {
        json_decref(arr);
        json_object_set_new(j, "status", json_string(v->draining ? "draining"
                                                     : ready     ? "ok"
                                                     : starting  ? "loading"
                                                                 : "failed"));
        return j;
    }
    /* a worker a reload is starting is capacity being added: not a degraded service */
    json_object_set_new(j, "status", json_string(v->draining              ? "draining"
                                                 : ready + by_reload == v->n ? "ok"
                                                 : ready                  ? "degraded"
                                                                          : "unavailable"));
    json_object_set_new(j, "running", json_integer(running));
    json_object_set_new(j, "workers", arr);
    return j;
fail:
    json_decref(j);
    json_decref(arr);
    *http_status = 500;
    return NULL;
}
