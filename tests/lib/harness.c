/* Integration-test harness: spawns the server, reads its port from the "listening on" line,
 * drains its output in a thread (so the child never blocks on a full pipe) and stops it with
 * bounded waits. Also bounded polling waits and /proc queries. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hist.h"

/* Milliseconds on hist_now_us()'s monotonic clock. */
#define ms_now() ((long long)(hist_now_us() / 1000))

#define OUTPUT_MAX (1u << 20)

/* The drain thread appends to out under lock; the test thread reads copies of it. */
struct kiln_proc {
    pid_t pid;
    int port;
    int fd; /* read end of the child's stdout+stderr pipe, O_NONBLOCK */
    bool reaped;
    int status;
    pthread_t thread;
    bool thread_running;
    _Atomic bool stop_thread;
    pthread_mutex_t lock;
    char *out; /* OUTPUT_MAX + 1 bytes */
    size_t out_len;
    char *snapshot;
};

/* Append under lock, keeping the last OUTPUT_MAX bytes. */
static void output_append(struct kiln_proc *p, const char *buf, size_t n)
{
    pthread_mutex_lock(&p->lock);
    if (n >= OUTPUT_MAX) {
        buf += n - OUTPUT_MAX;
        n = OUTPUT_MAX;
    }
    if (p->out_len + n > OUTPUT_MAX) {
        size_t drop = p->out_len + n - OUTPUT_MAX;
        memmove(p->out, p->out + drop, p->out_len - drop);
        p->out_len -= drop;
    }
    memcpy(p->out + p->out_len, buf, n);
    p->out_len += n;
    p->out[p->out_len] = '\0';
    pthread_mutex_unlock(&p->lock);
}

/* Read what is available now. Returns bytes read, 0 at EOF, -EAGAIN when nothing is ready. */
static ssize_t output_read_some(struct kiln_proc *p)
{
    char buf[4096];
    ssize_t n;
    do {
        n = read(p->fd, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n > 0)
        output_append(p, buf, (size_t)n);
    return n;
}

static void *drain_thread(void *arg)
{
    struct kiln_proc *p = arg;
    bool eof = false;
    /* Poll with a short timeout so a stop request is seen even if a leaked grandchild keeps
     * the pipe's write end open. */
    while (!eof && !atomic_load(&p->stop_thread)) {
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
        int r = poll(&pfd, 1, 50);
        if (r <= 0)
            continue;
        ssize_t n;
        while ((n = output_read_some(p)) > 0)
            ;
        if (n == 0)
            eof = true;
    }
    /* Take whatever is already in the pipe. */
    while (!eof && output_read_some(p) > 0)
        ;
    return NULL;
}

/* Find "listening on HOST:PORT" in the output. Returns the port or 0. */
static int output_find_port(struct kiln_proc *p)
{
    int port = 0;
    pthread_mutex_lock(&p->lock);
    const char *s = strstr(p->out, "listening on ");
    if (s) {
        const char *eol = strchr(s, '\n');
        if (eol) {
            const char *colon = NULL;
            for (const char *c = s; c < eol; c++)
                if (*c == ':')
                    colon = c;
            if (colon) {
                long v = strtol(colon + 1, NULL, 10);
                if (v > 0 && v < 65536)
                    port = (int)v;
            }
        }
    }
    pthread_mutex_unlock(&p->lock);
    return port;
}

static int reap(struct kiln_proc *p, int options)
{
    if (p->reaped)
        return 1;
    int status;
    pid_t r;
    do {
        r = waitpid(p->pid, &status, options);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    if (r == 0)
        return 0;
    p->reaped = true;
    p->status = status;
    return 1;
}

struct kiln_proc *kiln_spawn(const char *const *argv, int timeout_ms)
{
    int pipefd[2] = {-1, -1}, devnull = -1;
    struct kiln_proc *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->fd = -1;
    p->pid = -1;
    pthread_mutex_init(&p->lock, NULL);
    p->out = malloc(OUTPUT_MAX + 1);
    if (!p->out)
        goto fail;
    p->out[0] = '\0';
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        goto fail;

    /* Everything the child needs is prepared here: after fork, while the test's threads
     * may hold locks (stdio, malloc), the child only makes async-signal-safe calls. */
    if ((devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        goto fail;
    pid_t parent = getpid();
    p->pid = fork();
    if (p->pid < 0)
        goto fail;
    if (p->pid == 0) {
        /* Child: own process group (so kiln_stop can kill workers too), die with the test. */
        (void)setpgid(0, 0);
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        (void)dup2(devnull, 0);
        (void)dup2(pipefd[1], 1);
        (void)dup2(pipefd[1], 2);
        execv(argv[0], (char *const *)argv);
        static const char msg[] = "harness: exec failed: ";
        (void)!write(2, msg, sizeof msg - 1);
        (void)!write(2, argv[0], strlen(argv[0]));
        (void)!write(2, "\n", 1);
        _exit(127);
    }
    /* The parent sets the group too: a kiln_stop() that runs before the child does must
     * still reach the group (the loser of the race gets EACCES or EPERM, harmlessly). */
    (void)setpgid(p->pid, p->pid);
    (void)close(devnull);
    devnull = -1;
    (void)close(pipefd[1]);
    pipefd[1] = -1;
    p->fd = pipefd[0];
    (void)fcntl(p->fd, F_SETFL, fcntl(p->fd, F_GETFL) | O_NONBLOCK);
    if (pthread_create(&p->thread, NULL, drain_thread, p) != 0)
        goto fail;
    p->thread_running = true;

    long long deadline = ms_now() + timeout_ms;
    for (;;) {
        p->port = output_find_port(p);
        if (p->port > 0)
            return p;
        if (reap(p, WNOHANG) != 0 || ms_now() >= deadline)
            break;
        (void)poll(NULL, 0, 10);
    }
    fprintf(stderr, "harness: %s did not report a port (%s); its output:\n%s\n", argv[0],
            p->reaped ? "it exited" : "timeout", kiln_output(p));
    kiln_destroy(p);
    return NULL;

fail:
    fprintf(stderr, "harness: cannot start %s: %s\n", argv[0], strerror(errno));
    if (devnull >= 0)
        (void)close(devnull);
    if (pipefd[1] >= 0)
        (void)close(pipefd[1]);
    if (p->fd < 0 && pipefd[0] >= 0)
        (void)close(pipefd[0]);
    kiln_destroy(p);
    return NULL;
}

struct kiln_proc *kiln_start(const char *const *extra_args)
{
    const char *dir = getenv("KILN_BIN_DIR");
    char path[4096];
    const char *argv[64];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/kiln", dir && *dir ? dir : "build");
    argv[n++] = path;
    argv[n++] = "--host";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (size_t i = 0; extra_args && extra_args[i]; i++) {
        if (n + 1 >= sizeof argv / sizeof argv[0]) {
            fprintf(stderr, "harness: too many arguments\n");
            return NULL;
        }
        argv[n++] = extra_args[i];
    }
    argv[n] = NULL;
    return kiln_spawn(argv, HARNESS_START_TIMEOUT_MS);
}

int kiln_port(const struct kiln_proc *p)
{
    return p->port;
}

pid_t kiln_pid(const struct kiln_proc *p)
{
    return p->pid;
}

int kiln_kill(struct kiln_proc *p, int sig)
{
    if (p->reaped)
        return -ESRCH;
    return kill(p->pid, sig) < 0 ? -errno : 0;
}

int kiln_wait_exit(struct kiln_proc *p, int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    for (;;) {
        int r = reap(p, WNOHANG);
        if (r < 0)
            return r;
        if (r > 0)
            return p->status;
        if (ms_now() >= deadline)
            return -ETIMEDOUT;
        (void)poll(NULL, 0, 5);
    }
}

int kiln_stop(struct kiln_proc *p)
{
    if (p->pid <= 0)
        return -ESRCH;
    if (!p->reaped) {
        (void)kill(p->pid, SIGTERM);
        int r = kiln_wait_exit(p, HARNESS_STOP_TIMEOUT_MS);
        if (r == -ETIMEDOUT) {
            fprintf(stderr, "harness: pid %d ignored SIGTERM for %d ms; killing\n", (int)p->pid,
                    HARNESS_STOP_TIMEOUT_MS);
            (void)kill(p->pid, SIGKILL);
            r = reap(p, 0);
        }
        if (r < 0)
            return r;
    }
    /* Anything left in its group (a worker that outlived the front) goes too. */
    (void)kill(-p->pid, SIGKILL);
    return p->status;
}

void kiln_destroy(struct kiln_proc *p)
{
    if (!p)
        return;
    if (p->pid > 0)
        (void)kiln_stop(p);
    if (p->thread_running) {
        atomic_store(&p->stop_thread, true);
        pthread_join(p->thread, NULL);
    }
    if (p->fd >= 0)
        (void)close(p->fd);
    pthread_mutex_destroy(&p->lock);
    free(p->out);
    free(p->snapshot);
    free(p);
}

const char *kiln_output(struct kiln_proc *p)
{
    pthread_mutex_lock(&p->lock);
    char *copy = p->out ? strdup(p->out) : strdup("");
    pthread_mutex_unlock(&p->lock);
    free(p->snapshot);
    p->snapshot = copy;
    return copy ? copy : "(out of memory)";
}

bool kiln_output_contains(struct kiln_proc *p, const char *needle)
{
    pthread_mutex_lock(&p->lock);
    bool found = strstr(p->out, needle) != NULL;
    pthread_mutex_unlock(&p->lock);
    return found;
}

struct output_wait {
    struct kiln_proc *p;
    const char *needle;
};

static bool output_has(void *arg)
{
    struct output_wait *w = arg;
    return kiln_output_contains(w->p, w->needle);
}

bool kiln_wait_output(struct kiln_proc *p, const char *needle, int timeout_ms)
{
    struct output_wait w = {p, needle};
    return wait_until(output_has, &w, timeout_ms);
}

bool wait_until(bool (*cond)(void *), void *arg, int timeout_ms)
{
    long long deadline = ms_now() + timeout_ms;
    while (ms_now() < deadline) {
        if (cond(arg))
            return true;
        (void)poll(NULL, 0, 5);
    }
    return cond(arg);
}

/* Parse the state and ppid of /proc/pid/stat; the comm field may hold spaces or ')'. */
static int proc_stat(pid_t pid, char *state, pid_t *ppid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int err = n < 0 ? -errno : 0;
    (void)close(fd);
    if (n <= 0)
        return err ? err : -EIO;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    int pp;
    char st;
    if (!rp || sscanf(rp + 1, " %c %d", &st, &pp) != 2)
        return -EIO;
    *state = st;
    *ppid = (pid_t)pp;
    return 0;
}

int proc_children(pid_t pid, pid_t *out, size_t cap)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -errno;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end != '\0' || v <= 0)
            continue;
        char st;
        pid_t pp;
        if (proc_stat((pid_t)v, &st, &pp) < 0 || pp != pid || st == 'Z' || st == 'X')
            continue;
        if ((size_t)count < cap)
            out[count] = (pid_t)v;
        count++;
    }
    closedir(d);
    return count;
}

int proc_count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            count++;
    closedir(d);
    /* opendir's own descriptor is listed when we count ourselves. */
    if (pid == getpid())
        count--;
    return count;
}

char proc_state(pid_t pid)
{
    char st;
    pid_t pp;
    return proc_stat(pid, &st, &pp) == 0 ? st : 0;
}

bool proc_gone(pid_t pid)
{
    char st = proc_state(pid);
    return st == 0 || st == 'Z' || st == 'X';
}
