/* sd_notify's datagram protocol (sdnotify.h). */
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int sd_fd = -1;
static struct sockaddr_un sd_addr;
static socklen_t sd_addrlen;
static uint64_t sd_watchdog_usec;

static uint64_t parse_u64(const char *s, bool *ok)
{
    char *end;
    *ok = false;
    if (!s || !*s || *s == '-')
        return 0;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return 0;
    *ok = true;
    return v;
}

int sdnotify_init(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    bool ok;
    uint64_t usec = parse_u64(getenv("WATCHDOG_USEC"), &ok);
    uint64_t pid = parse_u64(getenv("WATCHDOG_PID"), &ok);

    /* WATCHDOG_PID, when set, names the process the watchdog is for */
    sd_watchdog_usec = usec;
    if (getenv("WATCHDOG_PID") && (!ok || pid != (uint64_t)getpid()))
        sd_watchdog_usec = 0;
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    if (!path || !*path) {
        unsetenv("NOTIFY_SOCKET");
        return 0;
    }
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sd_addr.sun_path))
        return -EINVAL;
    memset(&sd_addr, 0, sizeof(sd_addr));
    sd_addr.sun_family = AF_UNIX;
    memcpy(sd_addr.sun_path, path, len);
    if (path[0] == '@')
        sd_addr.sun_path[0] = '\0'; /* abstract: no terminating NUL counts */
    sd_addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
    unsetenv("NOTIFY_SOCKET");
    sd_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sd_fd < 0)
        return -errno;
    return 0;
}

bool sdnotify_enabled(void)
{
    return sd_fd >= 0;
}

uint64_t sdnotify_watchdog_usec(void)
{
    return sd_fd >= 0 ? sd_watchdog_usec : 0;
}

int sdnotify_send(const char *msg)
{
    if (sd_fd < 0)
        return 0;
    ssize_t n;
    do
        n = sendto(sd_fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sd_addr,
                   sd_addrlen);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : 0;
}

/* "HEAD" plus "STATUS=status" (a newline in status becomes a space), then send. */
static int send_with_status(const char *head, const char *status)
{
    char buf[1024];
    size_t hl = strlen(head), n = 0;
    if (hl + 16 >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, head, hl);
    n = hl;
    if (hl)
        buf[n++] = '\n';
    memcpy(buf + n, "STATUS=", 7);
    n += 7;
    for (const char *p = status ? status : ""; *p && n + 1 < sizeof(buf); p++)
        buf[n++] = *p == '\n' ? ' ' : *p;
    buf[n] = '\0';
    return sdnotify_send(buf);
}

int sdnotify_ready(const char *status)
{
    return send_with_status("READY=1", status);
}

int sdnotify_status(const char *status)
{
    return send_with_status("", status);
}

int sdnotify_watchdog(void)
{
    return sdnotify_send("WATCHDOG=1");
}

int sdnotify_reloading(const char *status)
{
    struct timespec ts;
    char head[96];
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(head, sizeof(head), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
    return send_with_status(head, status);
}

int sdnotify_stopping(const char *status)
{
    return send_with_status("STOPPING=1", status);
}

void sdnotify_close(void)
{
    if (sd_fd >= 0)
        close(sd_fd);
    sd_fd = -1;
}
