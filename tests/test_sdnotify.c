/* Integration tests of kiln under a service manager, with a real NOTIFY_SOCKET datagram
 * socket standing in for systemd: a status while loading, READY=1 once a worker serves,
 * WATCHDOG=1 at the asked interval, RELOADING=1 (with MONOTONIC_USEC) and READY=1 again on
 * SIGHUP, STOPPING=1 on SIGTERM; the workers do not inherit the socket. Also: a config file
 * at start (refused with its line), SIGHUP applying a changed log level, and
 * deploy/kiln.service passing `systemd-analyze verify`. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

struct notify_sock {
    int fd;
    char path[108];
};

static void notify_open(struct notify_sock *ns)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(ns->path, sizeof(ns->path), "/tmp/kiln-notify-%ld.sock", (long)getpid());
    unlink(ns->path);
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", ns->path);
    ns->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(ns->fd >= 0);
    assert_int_equal(bind(ns->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    setenv("NOTIFY_SOCKET", ns->path, 1);
}

static void notify_close(struct notify_sock *ns)
{
    close(ns->fd);
    unlink(ns->path);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
}

/* Read datagrams until one contains want (copied to out) or timeout_ms passes. Every
 * datagram read is appended to log (when given). Returns true when found. */
static bool notify_wait(struct notify_sock *ns, const char *want, char *out, size_t outlen,
                        int timeout_ms, int *n_watchdog)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (el >= timeout_ms)
            return false;
        struct pollfd p = {ns->fd, POLLIN, 0};
        if (poll(&p, 1, (int)(timeout_ms - el)) <= 0)
            continue;
        char buf[2048];
        ssize_t n = recv(ns->fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (n_watchdog && strcmp(buf, "WATCHDOG=1") == 0)
            (*n_watchdog)++;
        if (strstr(buf, want)) {
            if (out)
                snprintf(out, outlen, "%s", buf);
            return true;
        }
    }
}

static bool env_has(pid_t pid, const char *name)
{
    char path[64], buf[65536];
    snprintf(path, sizeof(path), "/proc/%ld/environ", (long)pid);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    size_t nl = strlen(name);
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
        buf[n] = '\0';
        if (strncmp(buf + i, name, nl) == 0 && buf[i + nl] == '=')
            return true;
    }
    return false;
}

static void test_sdnotify_ready_status_watchdog_reload_stopping(void **state)
{
    (void)state;
    struct notify_sock ns;
    char msg[2048];
    int n_wd = 0;
    notify_open(&ns);
    setenv("WATCHDOG_USEC", "200000", 1);
    const char *args[] = {"--model", "mock", "--workers", "2", "--mock-load-ms", "300", NULL};
    struct kiln_proc *p = kiln_start(args);
    assert_non_null(p);

    /* a status while the model loads, then READY=1 once a worker can serve */
    assert_true(notify_wait(&ns, "STATUS=starting", msg, sizeof(msg), 10000, &n_wd));
    assert_true(notify_wait(&ns, "READY=1", msg, sizeof(msg), 10000, &n_wd));
    assert_non_null(strstr(msg, "\nSTATUS="));
    assert_non_null(strstr(msg, "workers ready"));
    json_t *h = front_health(kiln_port(p));
    assert_non_null(h);
    json_decref(h);

    /* the workers do not inherit the socket (only the front speaks to systemd) */
    pid_t kids[8];
    int nk = proc_children(kiln_pid(p), kids, 8);
    assert_true(nk >= 1);
    for (int i = 0; i < nk && i < 8; i++)
        assert_false(env_has(kids[i], "NOTIFY_SOCKET"));

    /* WATCHDOG=1 at half of WATCHDOG_USEC: several within a second */
    n_wd = 0;
    notify_wait(&ns, "no such message", NULL, 0, 1000, &n_wd);
    if (n_wd < 3)
        fail_msg("only %d WATCHDOG=1 in 1 s with WATCHDOG_USEC=200000", n_wd);

    /* SIGHUP: RELOADING=1 with MONOTONIC_USEC, then READY=1 again */
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    assert_true(notify_wait(&ns, "RELOADING=1", msg, sizeof(msg), 5000, NULL));
    assert_non_null(strstr(msg, "MONOTONIC_USEC="));
    assert_true(notify_wait(&ns, "READY=1", msg, sizeof(msg), 5000, NULL));

    /* SIGTERM: STOPPING=1, and a clean exit */
    assert_int_equal(kiln_kill(p, SIGTERM), 0);
    assert_true(notify_wait(&ns, "STOPPING=1", msg, sizeof(msg), 5000, NULL));
    int st = kiln_wait_exit(p, 10000);
    assert_true(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    kiln_destroy(p);
    notify_close(&ns);
}

static void test_sdnotify_without_socket_is_silent(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    const char *args[] = {"--model", "mock", NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    assert_int_equal(front_stop(p), 0);
}

static const char *bin_dir(void)
{
    const char *d = getenv("KILN_BIN_DIR");
    return d ? d : "build";
}

/* Run kiln with args through the shell; its output (2>&1) into out. Returns the exit code. */
static int run_kiln(const char *args, char *out, size_t outlen)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "timeout 20 %s/kiln %s 2>&1", bin_dir(), args);
    FILE *fp = popen(cmd, "r");
    assert_non_null(fp);
    size_t n = fread(out, 1, outlen - 1, fp);
    out[n] = '\0';
    int st = pclose(fp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_sdnotify_bad_config_file_refused_at_start_with_its_line(void **state)
{
    (void)state;
    char path[64], args[128];
    static char out[65536];
    snprintf(path, sizeof(path), "/tmp/kiln-bad-%ld.conf", (long)getpid());
    write_file(path, "model = mock\nworkers = 1\nmax-waiting = lots\n");
    snprintf(args, sizeof(args), "--config %s", path);
    assert_int_equal(run_kiln(args, out, sizeof(out)), 2);
    char want[128];
    snprintf(want, sizeof(want), "%s:3: --max-waiting: 'lots'", path);
    if (!strstr(out, want))
        fail_msg("no '%s' in:\n%s", want, out);
    unlink(path);
}

static void test_sdnotify_sighup_rereads_the_config_file(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/kiln-reload-%ld.conf", (long)getpid());
    write_file(path, "model = mock\nlog-level = info\n");
    const char *args[] = {"--config", path, NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    write_file(path, "model = mock\nlog-level = debug\nrequest-timeout-ms = 60000\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    assert_true(kiln_wait_output(p, "request-timeout-ms 0 -> 60000", 10000));
    assert_true(kiln_wait_output(p, "reload: log-level info -> debug", 10000));
    assert_true(kiln_wait_output(p, "reload: request-timeout-ms 0 -> 60000", 10000));
    /* a broken file leaves everything as it was, said in the log */
    write_file(path, "model = mock\nbogus = 1\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    assert_true(kiln_wait_output(p, "unknown key 'bogus'", 10000));
    assert_true(kiln_wait_output(p, "nothing changed", 10000));
    json_t *h = front_health(kiln_port(p));
    assert_non_null(h);
    json_decref(h);
    assert_int_equal(front_stop(p), 0);
    unlink(path);
}

static void test_sdnotify_unit_file_passes_systemd_analyze_verify(void **state)
{
    (void)state;
    char cmd[1024], out[4096];
    if (system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
        fprintf(stderr, "skipped: systemd-analyze is not installed (apt-get install systemd)\n");
        skip();
    }
    /* ExecStart must name an executable that exists: the one just built */
    char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/kiln-unit-%ld", (long)getpid());
    snprintf(cmd, sizeof(cmd),
             "mkdir -p %s && sed 's|/usr/local/bin/kiln|%s/kiln|' deploy/kiln.service > "
             "%s/kiln.service && systemd-analyze verify %s/kiln.service 2>&1; echo rc=$?",
             dir, bin_dir(), dir, dir);
    FILE *fp = popen(cmd, "r");
    assert_non_null(fp);
    size_t n = fread(out, 1, sizeof(out) - 1, fp);
    out[n] = '\0';
    pclose(fp);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (!strstr(out, "rc=0") || strstr(out, "kiln.service:"))
        fail_msg("systemd-analyze verify deploy/kiln.service:\n%s", out);
    /* the stop timeout covers the drain: TimeoutStopSec > drain-ms of kiln.conf + 5 s */
    fp = fopen("deploy/kiln.service", "r");
    assert_non_null(fp);
    long stop_s = 0;
    char line[256];
    while (fgets(line, sizeof(line), fp))
        if (sscanf(line, "TimeoutStopSec=%lds", &stop_s) == 1)
            break;
    fclose(fp);
    fp = fopen("deploy/kiln.conf", "r");
    assert_non_null(fp);
    long drain = -1;
    while (fgets(line, sizeof(line), fp))
        if (sscanf(line, "drain-ms = %ld", &drain) == 1)
            break;
    fclose(fp);
    assert_true(drain >= 0);
    if (stop_s * 1000 < drain + 5000)
        fail_msg("TimeoutStopSec=%lds does not cover drain-ms %ld + 5 s", stop_s, drain);
}

/* A value of deploy/kiln.service ("" when absent). */
static void unit_value(const char *key, char *out, size_t cap)
{
    char line[512];
    size_t kl = strlen(key);
    FILE *fp = fopen("deploy/kiln.service", "r");
    assert_non_null(fp);
    out[0] = '\0';
    while (fgets(line, sizeof(line), fp))
        if (strncmp(line, key, kl) == 0 && line[kl] == '=') {
            snprintf(out, cap, "%s", line + kl + 1);
            out[strcspn(out, "\n")] = '\0';
        }
    fclose(fp);
}

/* The access-log file kiln.conf suggests is in a folder the sandboxed unit may write (its
 * LogsDirectory), and the unit's user is named, so the instances of the template
 * docs/deploy.md makes share it; that template passes `systemd-analyze verify` too. */
static void test_sdnotify_unit_can_write_the_access_log_and_be_a_template(void **state)
{
    (void)state;
    char logs[128], user[64], want[256], cmd[1024], out[4096];
    unit_value("LogsDirectory", logs, sizeof(logs));
    unit_value("User", user, sizeof(user));
    if (!logs[0])
        fail_msg("deploy/kiln.service has no LogsDirectory= for --access-log FILE");
    assert_true(user[0] != '\0');
    snprintf(want, sizeof(want), "/var/log/%s/access.log", logs);
    FILE *fp = fopen("deploy/kiln.conf", "r");
    assert_non_null(fp);
    size_t n = fread(out, 1, sizeof(out) - 1, fp);
    out[n] = '\0';
    fclose(fp);
    if (!strstr(out, want))
        fail_msg("deploy/kiln.conf does not suggest %s", want);
    if (system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
        fprintf(stderr, "skipped: systemd-analyze is not installed (apt-get install systemd)\n");
        skip();
    }
    char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/kiln-tmpl-%ld", (long)getpid());
    snprintf(cmd, sizeof(cmd),
             "mkdir -p %s && sed -e 's|/usr/local/bin/kiln|%s/kiln|' -e "
             "'s|--config /etc/kiln/kiln.conf|--config /etc/kiln/%%i.conf|' deploy/kiln.service "
             "> %s/kiln@.service && cp %s/kiln@.service %s/kiln@kiln1.service && "
             "systemd-analyze verify %s/kiln@kiln1.service 2>&1; echo rc=$?",
             dir, bin_dir(), dir, dir, dir, dir);
    fp = popen(cmd, "r");
    assert_non_null(fp);
    n = fread(out, 1, sizeof(out) - 1, fp);
    out[n] = '\0';
    pclose(fp);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (!strstr(out, "rc=0") || strstr(out, "kiln@"))
        fail_msg("systemd-analyze verify of the kiln@.service template:\n%s", out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdnotify_ready_status_watchdog_reload_stopping),
        cmocka_unit_test(test_sdnotify_without_socket_is_silent),
        cmocka_unit_test(test_sdnotify_bad_config_file_refused_at_start_with_its_line),
        cmocka_unit_test(test_sdnotify_sighup_rereads_the_config_file),
        cmocka_unit_test(test_sdnotify_unit_file_passes_systemd_analyze_verify),
        cmocka_unit_test(test_sdnotify_unit_can_write_the_access_log_and_be_a_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
