/* The service manager's view of the front (service.h). */
#include "service.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "api.h"
#include "roll.h"
#include "sdnotify.h"
#include "supervisor.h"
#include "workers.h"

/* How often the counts are looked at when systemd asked for no watchdog. */
#define SERVICE_TICK_MS 250

struct service {
    struct front *f;
    struct event *ev_tick;
    bool ready_sent;
    bool reloading;        /* RELOADING=1 sent: READY=1 once the reload is applied whole */
    bool stopping;
    uint64_t last_ping_us; /* monotonic */
    char last_status[512];
};

void service_status_line(struct front *f, char *buf, size_t len)
{
    struct supervisor_view *v = supervisor_view(f->sup);
    uint32_t n = v ? v->n : 0, ready = 0, failed = 0;
    for (uint32_t i = 0; i < n; i++) {
        ready += v->w[i].life == WORKER_LIFE_READY;
        failed += v->w[i].life == WORKER_LIFE_FAILED;
    }
    free(v);
    char reload[448] = "";
    if (f->roll)
        roll_status(f->roll, reload, sizeof(reload));
    snprintf(buf, len, "%u/%u workers ready, %u failed; %u running, %u waiting%s", ready, n,
             failed, f->n_active, f->queue.n, reload);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct service *s = arg;
    char line[512];
    (void)fd;
    (void)what;
    uint64_t wd = sdnotify_watchdog_usec();
    if (wd) { /* ping at half the interval systemd asked for */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
        if (now - s->last_ping_us >= wd / 2) {
            sdnotify_watchdog();
            s->last_ping_us = now;
        }
    }
    if (s->stopping)
        return;
    service_status_line(s->f, line, sizeof(line));
    bool reload_over = s->reloading && !roll_active(s->f->roll);
    if (reload_over)
        s->reloading = false;
    if (reload_over && s->ready_sent) { /* the roll a reload began is over */
        sdnotify_ready(line);
    } else if (!s->ready_sent && !s->reloading && workers_any_ready(s->f->workers)) {
        s->ready_sent = true;
        sdnotify_ready(line);
    } else if (strcmp(line, s->last_status) != 0) {
        sdnotify_status(line);
    }
    snprintf(s->last_status, sizeof(s->last_status), "%s", line);
}

struct service *service_start(struct front *f)
{
    struct service *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->f = f;
    if (!sdnotify_enabled())
        return s;
    uint64_t usec = SERVICE_TICK_MS * 1000;
    uint64_t wd = sdnotify_watchdog_usec();
    if (wd && wd / 2 < usec)
        usec = wd / 2 ? wd / 2 : 1;
    struct timeval tv = {(time_t)(usec / 1000000), (suseconds_t)(usec % 1000000)};
    s->ev_tick = event_new(f->base, -1, EV_PERSIST, on_tick, s);
    if (!s->ev_tick || event_add(s->ev_tick, &tv) < 0) {
        service_free(s);
        return NULL;
    }
    sdnotify_status("starting: loading the model in the workers");
    return s;
}

void service_reloading(struct service *s, const char *msg)
{
    if (!s)
        return;
    s->reloading = true;
    sdnotify_reloading(msg);
}

void service_reloaded(struct service *s, const char *msg)
{
    if (!s)
        return;
    snprintf(s->last_status, sizeof(s->last_status), "%s", msg);
    /* READY=1 from the tick once the roll is over, or once a worker is ready at start */
    if (roll_active(s->f->roll) || !s->ready_sent) {
        sdnotify_status(msg);
        return;
    }
    s->reloading = false;
    sdnotify_ready(msg);
}

void service_stopping(struct service *s, const char *msg)
{
    if (!s)
        return;
    s->stopping = true;
    sdnotify_stopping(msg);
}

void service_free(struct service *s)
{
    if (!s)
        return;
    if (s->ev_tick)
        event_free(s->ev_tick);
    free(s);
}
