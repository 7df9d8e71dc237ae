/* kiln under a service manager: a tick on the front's loop tells systemd (sdnotify.h) READY=1
 * once a worker can serve, a STATUS= line whenever the workers' or requests' counts change,
 * and WATCHDOG=1 at half the interval systemd asked for, so a wedged loop stops the pings and
 * systemd restarts kiln. Nothing is sent without $NOTIFY_SOCKET. */
#ifndef SERVICE_H
#define SERVICE_H

#include <stddef.h>

struct front;
struct service;

/* Start the tick on f's loop (after sdnotify_init()). Returns NULL when out of memory. */
struct service *service_start(struct front *f);

/* Write the one-line status ("2/2 workers ready, 0 failed; 3 running, 1 waiting") to buf. */
void service_status_line(struct front *f, char *buf, size_t len);

/* A reload begins (RELOADING=1), or its config was applied (msg as the status). READY=1
 * follows once the reload is over: at once, or when the rolling restart it began (roll.h)
 * is done, refused or rolled back, so Type=notify-reload's `systemctl reload` returns then,
 * and STATUS= lines tell the roll's progress meanwhile. */
void service_reloading(struct service *s, const char *msg);
void service_reloaded(struct service *s, const char *msg);

/* Shutdown began: STOPPING=1. */
void service_stopping(struct service *s, const char *msg);

void service_free(struct service *s);

#endif
