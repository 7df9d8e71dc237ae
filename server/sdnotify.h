/* The service manager's notification protocol (sd_notify(3)), spoken directly: one datagram
 * of "KEY=VALUE\n" lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or '@' for
 * the abstract namespace). No libsystemd: the protocol is documented and stable. Without
 * $NOTIFY_SOCKET every call is a no-op, so kiln behaves the same outside systemd. */
#ifndef SDNOTIFY_H
#define SDNOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* Read $NOTIFY_SOCKET and $WATCHDOG_USEC/$WATCHDOG_PID, open the socket, and unset the
 * variables so the workers (our children) do not inherit them. Returns 0 (also when there is
 * no socket), or -errno when the variable is malformed or the socket cannot be made. */
int sdnotify_init(void);

/* Whether a service manager listens. */
bool sdnotify_enabled(void);

/* The watchdog interval systemd asked for ($WATCHDOG_USEC for this process), 0 when none. */
uint64_t sdnotify_watchdog_usec(void);

/* Send msg (one or more "KEY=VALUE" lines) as one datagram. Returns 0 (also when disabled)
 * or -errno. */
int sdnotify_send(const char *msg);

/* READY=1 with a STATUS= line. */
int sdnotify_ready(const char *status);
/* STATUS=status. */
int sdnotify_status(const char *status);
/* WATCHDOG=1. */
int sdnotify_watchdog(void);
/* RELOADING=1 with MONOTONIC_USEC= (Type=notify-reload wants it) and a STATUS= line. */
int sdnotify_reloading(const char *status);
/* STOPPING=1 with a STATUS= line. */
int sdnotify_stopping(const char *status);

/* Close the socket. */
void sdnotify_close(void);

#endif
