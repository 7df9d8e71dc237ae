/* Integration-test harness: start the real kiln binary on an ephemeral port, capture its
 * stderr for failure messages, stop it with a bounded wait; bounded condition waits; /proc
 * queries (children, fds, exited). Not thread-safe per process handle except where noted. */
#ifndef HARNESS_H
#define HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* How long kiln_start() waits for the "listening on" line. */
#define HARNESS_START_TIMEOUT_MS 20000
/* How long kiln_stop() waits after SIGTERM before it sends SIGKILL. */
#define HARNESS_STOP_TIMEOUT_MS 10000

struct kiln_proc;

/* Run `$KILN_BIN_DIR/kiln --host 127.0.0.1 --port 0 extra_args...` (extra_args: NULL-terminated,
 * may be NULL; KILN_BIN_DIR defaults to "build") and wait until it prints
 * "listening on 127.0.0.1:PORT" on stderr. The child gets its own process group, dies with the
 * test (PR_SET_PDEATHSIG) and inherits the test's environment. Returns NULL if it exits or
 * stays silent past HARNESS_START_TIMEOUT_MS; what it printed is then copied to our stderr. */
struct kiln_proc *kiln_start(const char *const *extra_args);

/* The same for any server: argv[0] is the executable's path, argv is NULL-terminated, and
 * the server must print a line containing "listening on HOST:PORT" on stderr or stdout. */
struct kiln_proc *kiln_spawn(const char *const *argv, int timeout_ms);

int kiln_port(const struct kiln_proc *p);
pid_t kiln_pid(const struct kiln_proc *p);

/* Send sig to the server process (not its group). Returns 0 or -errno. */
int kiln_kill(struct kiln_proc *p, int sig);

/* Wait up to timeout_ms for the process to exit by itself. Returns its wait status (decode
 * with WIFEXITED & co.), or -ETIMEDOUT while it still runs. Once reaped, the status is kept
 * and returned again by every later call. */
int kiln_wait_exit(struct kiln_proc *p, int timeout_ms);

/* SIGTERM, wait up to HARNESS_STOP_TIMEOUT_MS, then SIGKILL to the whole process group (so
 * no worker outlives the test) and reap. Returns the wait status, the status it had if it
 * already exited, or -errno. Idempotent. */
int kiln_stop(struct kiln_proc *p);

/* kiln_stop() if still running, then free everything. NULL is fine. */
void kiln_destroy(struct kiln_proc *p);

/* Everything the server printed so far (stdout and stderr merged; the last 1 MiB when it is
 * longer), NUL-terminated. Valid until the next kiln_output() or kiln_destroy(). */
const char *kiln_output(struct kiln_proc *p);

/* Whether the output so far contains needle. */
bool kiln_output_contains(struct kiln_proc *p, const char *needle);

/* Whether the output contains needle within timeout_ms. What the server logged before it
 * answered a request may not have been read off its pipe yet when the answer arrives, so a
 * test that expects a line waits for it (bounded) rather than looking once. */
bool kiln_wait_output(struct kiln_proc *p, const char *needle, int timeout_ms);

/* Poll cond(arg) every few milliseconds until it is true or timeout_ms passes (checking once
 * more at the deadline). Returns its last value. For conditions another process makes true;
 * each wait is bounded. */
bool wait_until(bool (*cond)(void *), void *arg, int timeout_ms);

/* Live (not zombie) children of pid, from /proc/<any>/stat. Writes up to cap pids to out
 * (out may be NULL when cap is 0) and returns how many there are, or -errno. */
int proc_children(pid_t pid, pid_t *out, size_t cap);

/* Open file descriptors of pid (entries of /proc/pid/fd), or -errno. */
int proc_count_fds(pid_t pid);

/* Whether pid has exited: no /proc entry, or a zombie waiting for its parent. */
bool proc_gone(pid_t pid);

/* The state letter of /proc/pid/stat ('R', 'S', 'Z', ...), or 0 when there is none. */
char proc_state(pid_t pid);

#endif
