/* Integration tests of the reload's rolling restart (server/roll.c): a steady load through
 * a SIGHUP that changes the model file fails no request, every reply names the model that
 * served it (the mock's fixed text under "mock", stories260K's under its name), replies
 * before the reload come from the old model and after it from the new, and /v1/models lists
 * both while they are mixed; a model file that does not load (refused by the front, or by
 * the new worker) keeps the old workers serving, with the cause in /health and the service
 * status; --workers and --threads changes add, remove and restart workers; a new file moved
 * to the same path is rolled onto, the same file again is not. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"
#include "lib/model_gen.h"

static char stories[4096];

static int setup(void **state)
{
    (void)state;
    const char *shared = getenv("KILN_SHARED");
    snprintf(stories, sizeof(stories), "%s/models/stories260K.gguf", shared ? shared : "../shared");
    if (access(stories, R_OK) != 0) {
        fprintf(stderr, "no %s\n", stories);
        return -1;
    }
    return 0;
}

__attribute__((format(printf, 2, 3))) static void write_conf(const char *path, const char *fmt,
                                                              ...)
{
    char tmp[4200];
    va_list ap;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *fp = fopen(tmp, "w");
    assert_non_null(fp);
    va_start(ap, fmt);
    vfprintf(fp, fmt, ap);
    va_end(ap);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(rename(tmp, path), 0); /* kiln never reads half a file */
}

static json_t *health(int port)
{
    return front_health(port);
}

/* /health's reload.state is want. */
/* /health's reload.state is want, after count reloads that asked to change the workers. */
struct reload_cond {
    int port;
    const char *want;
    long long count;
};

static bool reload_is(void *arg)
{
    struct reload_cond *c = arg;
    json_t *h = health(c->port);
    json_t *rl = json_object_get(h, "reload");
    const char *st = json_string_value(json_object_get(rl, "state"));
    bool ok = st && strcmp(st, c->want) == 0 &&
              json_integer_value(json_object_get(rl, "count")) == c->count;
    json_decref(h);
    return ok;
}

/* Every worker /health lists is ready and there are n. */
struct workers_cond {
    int port;
    size_t n;
};

static bool workers_ready(void *arg)
{
    struct workers_cond *c = arg;
    json_t *h = health(c->port);
    json_t *ws = json_object_get(h, "workers");
    bool ok = json_array_size(ws) == c->n;
    for (size_t i = 0; ok && i < json_array_size(ws); i++)
        ok = strcmp(json_string_value(json_object_get(json_array_get(ws, i), "state")),
                    "ready") == 0;
    json_decref(h);
    return ok;
}

/* /v1/models' ids, joined with ',' into out; returns how many. */
static size_t models(int port, char *out, size_t cap)
{
    json_t *j = NULL;
    out[0] = '\0';
    if (front_call(port, "GET", "/v1/models", NULL, &j, NULL) != 200) {
        json_decref(j);
        return 0;
    }
    json_t *data = json_object_get(j, "data");
    for (size_t i = 0; i < json_array_size(data); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(data, i), "id"));
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "," : "", id ? id : "?");
    }
    size_t n = json_array_size(data);
    json_decref(j);
    return n;
}

static bool two_models(void *arg)
{
    char ids[512];
    return models(*(int *)arg, ids, sizeof(ids)) == 2;
}

/* ---- the load ---- */

#define LOAD_THREADS 3
#define MAX_RESULTS 4096

struct result {
    int phase;           /* the load's phase when the request was sent */
    int status;          /* HTTP status, or -errno */
    bool error_event;    /* a stream that ended in an error event */
    bool frames_agree;   /* a stream: every frame named the same model */
    char model[128];
    char text[512];
};

struct load {
    int port;
    atomic_int phase;    /* 0 before the reload, 1 while it rolls, 2 after it is done */
    atomic_bool stop;
    atomic_int n;
    atomic_int per_phase[3];
    struct result res[MAX_RESULTS];
};

#define BODY "{\"prompt\": \"Once upon a time\", \"max_tokens\": 40%s}"

static void one_whole(struct load *L, struct result *r)
{
    char body[160];
    json_t *j = NULL;
    snprintf(body, sizeof(body), BODY, "");
    r->status = front_call(L->port, "POST", "/v1/completions", body, &j, NULL);
    const char *m = json_string_value(json_object_get(j, "model"));
    const char *t =
        json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    snprintf(r->model, sizeof(r->model), "%s", m ? m : "");
    snprintf(r->text, sizeof(r->text), "%s", t ? t : "");
    r->frames_agree = true;
    json_decref(j);
}

static void one_stream(struct load *L, struct result *r)
{
    char body[160];
    struct http_stream *s = NULL;
    struct sse_event ev;
    int rc;
    snprintf(body, sizeof(body), BODY, ", \"stream\": true");
    r->frames_agree = true;
    r->status = http_stream_open(L->port, "POST", "/v1/completions", NULL, body, 30000, &s);
    if (r->status != 200) {
        http_stream_close(s);
        return;
    }
    while ((rc = sse_next(s, &ev, 30000)) == 1 && !ev.done) {
        json_t *j = json_loads(ev.data, 0, NULL);
        if (json_object_get(j, "error"))
            r->error_event = true;
        const char *m = json_string_value(json_object_get(j, "model"));
        if (m && !r->model[0])
            snprintf(r->model, sizeof(r->model), "%s", m);
        else if (m && strcmp(m, r->model) != 0)
            r->frames_agree = false;
        const char *t = front_chunk_text(json_array_get(json_object_get(j, "choices"), 0), false);
        if (t)
            strncat(r->text, t, sizeof(r->text) - strlen(r->text) - 1);
        json_decref(j);
    }
    if (rc < 0)
        r->status = rc;
    http_stream_close(s);
}

static void *load_thread(void *arg)
{
    struct load *L = arg;
    for (unsigned k = 0; !atomic_load(&L->stop); k++) {
        int i = atomic_fetch_add(&L->n, 1);
        if (i >= MAX_RESULTS)
            break;
        struct result *r = &L->res[i];
        r->phase = atomic_load(&L->phase);
        if (k % 2)
            one_stream(L, r);
        else
            one_whole(L, r);
        atomic_fetch_add(&L->per_phase[r->phase], 1);
    }
    return NULL;
}

struct phase_cond {
    struct load *L;
    int phase, n;
};

static bool phase_has(void *arg)
{
    struct phase_cond *c = arg;
    return atomic_load(&c->L->per_phase[c->phase]) >= c->n;
}

static struct kiln_proc *start_with_conf(const char *conf, const char *const *extra)
{
    const char *args[32] = {"--config", conf,         "--mock-delay-ms", "5",
                            "--drain-ms", "20000", "--mock-reply",    MOCK_REPLY};
    int n = 8;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return kiln_start(args);
}

static void test_roll_reload_to_another_model_under_load_fails_nothing(void **state)
{
    (void)state;
    char conf[128], ids[512], new_name[512];
    static struct load L;
    pthread_t th[LOAD_THREADS];

    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-%ld.conf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 2\nthreads = 1\n");
    struct kiln_proc *p = start_with_conf(conf, NULL);
    assert_non_null(p);
    struct workers_cond wc = {kiln_port(p), 2};
    assert_true(wait_until(workers_ready, &wc, 20000));

    memset(&L, 0, sizeof(L));
    L.port = kiln_port(p);
    for (int i = 0; i < LOAD_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, load_thread, &L), 0);
    struct phase_cond before = {&L, 0, 6};
    assert_true(wait_until(phase_has, &before, 30000));

    /* the reload: another model file, with another vocabulary */
    write_conf(conf, "model = %s\nworkers = 2\nthreads = 1\n", stories);
    atomic_store(&L.phase, 1);
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    int port = kiln_port(p);
    /* while old and new workers serve, /v1/models lists both */
    bool saw_both = wait_until(two_models, &port, 30000);
    struct reload_cond rc = {port, "done", 1};
    assert_true(wait_until(reload_is, &rc, 60000));
    atomic_store(&L.phase, 2);
    struct phase_cond after = {&L, 2, 6};
    bool enough = wait_until(phase_has, &after, 30000);
    atomic_store(&L.stop, true);
    for (int i = 0; i < LOAD_THREADS; i++)
        pthread_join(th[i], NULL);
    assert_true(enough);
    if (!saw_both)
        fail_msg("/v1/models never listed two models during the roll:\n%s", kiln_output(p));

    assert_int_equal(models(port, ids, sizeof(ids)), 1);
    snprintf(new_name, sizeof(new_name), "%s", ids);
    assert_string_not_equal(new_name, "mock");
    int n = atomic_load(&L.n);
    if (n > MAX_RESULTS)
        n = MAX_RESULTS;
    int per_model[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        struct result *r = &L.res[i];
        if (r->status != 200 || r->error_event)
            fail_msg("request %d (phase %d) failed: status %d%s\n%s", i, r->phase, r->status,
                     r->error_event ? ", error event" : "", kiln_output(p));
        assert_true(r->frames_agree);
        bool old = strcmp(r->model, "mock") == 0;
        if (!old && strcmp(r->model, new_name) != 0)
            fail_msg("request %d: model '%s'", i, r->model);
        /* the reply is the model's own: the mock's fixed text, or stories260K's */
        if (old != (strcmp(r->text, MOCK_REPLY) == 0))
            fail_msg("request %d: model '%s' but text '%s'", i, r->model, r->text);
        if (r->phase == 0 && !old)
            fail_msg("request %d was sent before the reload but served by %s", i, r->model);
        if (r->phase == 2 && old)
            fail_msg("request %d was sent after the reload but served by the mock", i);
        per_model[old ? 0 : 1]++;
    }
    print_message("roll: %d requests, %d by mock, %d by %s, none failed\n", n, per_model[0],
                  per_model[1], new_name);
    /* as many workers as before, every one on the new model */
    json_t *h = health(port);
    json_t *ws = json_object_get(h, "workers");
    assert_int_equal(json_array_size(ws), 2);
    for (size_t i = 0; i < 2; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(ws, i), "model")),
                            new_name);
    assert_string_equal(json_string_value(json_object_get(h, "model")), new_name);
    json_decref(h);
    assert_int_equal(front_stop(p), 0);
    unlink(conf);
}

/* ---- a model that does not load ---- */

struct notify_sock {
    int fd;
    char path[108];
};

static void notify_open(struct notify_sock *ns)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(ns->path, sizeof(ns->path), "/tmp/kiln-roll-notify-%ld.sock", (long)getpid());
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
}

/* Whether a datagram containing want comes within timeout_ms (copied to out when given). */
static bool notify_read(struct notify_sock *ns, const char *want, int timeout_ms, char *out,
                        size_t outlen)
{
    struct pollfd pf = {ns->fd, POLLIN, 0};
    char buf[2048];
    while (poll(&pf, 1, timeout_ms) == 1) {
        ssize_t k = recv(ns->fd, buf, sizeof(buf) - 1, 0);
        if (k <= 0)
            return false;
        buf[k] = '\0';
        if (strstr(buf, want)) {
            if (out)
                snprintf(out, outlen, "%s", buf);
            return true;
        }
    }
    return false;
}

static bool notify_wait(struct notify_sock *ns, const char *want, int timeout_ms)
{
    return notify_read(ns, want, timeout_ms, NULL, 0);
}

static void expect_mock_serves(int port)
{
    json_t *j = NULL;
    char body[160];
    snprintf(body, sizeof(body), BODY, "");
    assert_int_equal(front_call(port, "POST", "/v1/completions", body, &j, NULL), 200);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "mock");
    json_decref(j);
}

/* A SIGHUP to a model that does not load: the reload fails with why (naming the file and
 * containing cause), the same worker processes serve the mock on. */
static void expect_failed_reload(struct kiln_proc *p, const char *path, struct notify_sock *ns,
                                 long long count, const char *cause)
{
    int port = kiln_port(p);
    pid_t before[8], after[8];
    int nb = proc_children(kiln_pid(p), before, 8);
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    struct reload_cond rc = {port, "failed", count};
    assert_true(wait_until(reload_is, &rc, 30000));
    json_t *h = health(port);
    const char *err =
        json_string_value(json_object_get(json_object_get(h, "reload"), "error"));
    if (!err || !strstr(err, path) || !strstr(err, cause))
        fail_msg("reload error '%s' does not name %s and '%s'", err ? err : "(null)", path, cause);
    assert_string_equal(json_string_value(json_object_get(h, "model")), "mock");
    json_decref(h);
    struct workers_cond wc = {port, 2};
    assert_true(wait_until(workers_ready, &wc, 20000));
    /* the old workers never stopped */
    int na = proc_children(kiln_pid(p), after, 8);
    assert_int_equal(na, nb);
    for (int i = 0; i < nb; i++) {
        bool found = false;
        for (int k = 0; k < na; k++)
            found |= before[i] == after[k];
        assert_true(found);
    }
    expect_mock_serves(port);
    /* systemd hears the reload is over (READY=1) only with the failure, not while it rolls */
    char msg[2048];
    assert_true(notify_read(ns, "READY=1", 10000, msg, sizeof(msg)));
    if (!strstr(msg, "reload failed"))
        fail_msg("READY=1 came before the reload was over: %s", msg);
    assert_true(kiln_wait_output(p, path, 10000));
}

static void test_roll_broken_model_keeps_the_old_workers_serving(void **state)
{
    (void)state;
    char conf[128], bad[128], half[128], err[256];
    struct notify_sock ns;
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-bad-%ld.conf", (long)getpid());
    snprintf(bad, sizeof(bad), "/tmp/kiln-roll-bad-%ld.gguf", (long)getpid());
    snprintf(half, sizeof(half), "/tmp/kiln-roll-half-%ld.gguf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 2\n");
    notify_open(&ns);
    struct kiln_proc *p = start_with_conf(conf, NULL);
    assert_non_null(p);
    assert_true(notify_wait(&ns, "READY=1", 20000)); /* the start's */
    struct workers_cond wc = {kiln_port(p), 2};
    assert_true(wait_until(workers_ready, &wc, 20000));
    expect_mock_serves(kiln_port(p));

    /* a file the front itself refuses */
    write_conf(bad, "GGUF, but not really\n");
    write_conf(conf, "model = %s\nworkers = 2\n", bad);
    expect_failed_reload(p, bad, &ns, 1, "model");

    /* a file the front reads (vocabulary, context) but a worker cannot load: a tensor is
     * missing. The extra worker of the roll fails; the reload rolls back. */
    struct model_gen_opts o = {0};
    assert_int_equal(model_gen_preset(&o, "tiny"), 0);
    o.n_vocab = 512;
    o.seed = 7;
    o.omit_tensor = "output_norm.weight";
    assert_int_equal(model_gen_write(&o, half, err, sizeof(err)), 0);
    write_conf(conf, "model = %s\nworkers = 2\n", half);
    expect_failed_reload(p, half, &ns, 2, "could not start");
    if (getenv("ROLL_LOG"))
        fprintf(stderr, "%s", kiln_output(p));

    assert_int_equal(front_stop(p), 0);
    notify_close(&ns);
    unlink(conf);
    unlink(bad);
    unlink(half);
}

/* ---- systemd's view of a reload ---- */

/* RELOADING=1 at SIGHUP, STATUS= lines while the workers roll, and READY=1 (what ends
 * `systemctl reload` under Type=notify-reload) only once the roll is done. */
static void test_roll_systemd_hears_ready_only_when_the_roll_is_done(void **state)
{
    (void)state;
    char conf[128], msg[2048];
    struct notify_sock ns;
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-sd-%ld.conf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 2\nthreads = 1\n");
    notify_open(&ns);
    const char *extra[] = {"--mock-load-ms", "300", NULL};
    struct kiln_proc *p = start_with_conf(conf, extra);
    assert_non_null(p);
    int port = kiln_port(p);
    assert_true(notify_wait(&ns, "READY=1", 20000));

    write_conf(conf, "model = mock\nworkers = 2\nthreads = 2\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    assert_true(notify_wait(&ns, "RELOADING=1", 10000));
    assert_true(notify_read(&ns, "STATUS=", 10000, msg, sizeof(msg)));
    if (strstr(msg, "READY=1") || !strstr(msg, "reload: rolling"))
        fail_msg("the first status after RELOADING=1 is not the roll's: %s", msg);
    assert_true(notify_read(&ns, "READY=1", 60000, msg, sizeof(msg)));
    /* by the time systemd hears READY=1 the roll is over */
    struct reload_cond done = {port, "done", 1};
    if (!reload_is(&done))
        fail_msg("READY=1 came while the roll was not done: %s", msg);
    if (strstr(msg, "reload: rolling"))
        fail_msg("READY=1 with a rolling status: %s", msg);
    assert_int_equal(front_stop(p), 0);
    notify_close(&ns);
    unlink(conf);
}

/* `kiln reload` (systemd's ExecReload=): its exit status and output, run to its end. */
static int kiln_reload(struct kiln_proc *p, const char *conf, char *out, size_t cap)
{
    char cmd[1024];
    const char *dir = getenv("KILN_BIN_DIR");
    snprintf(cmd, sizeof(cmd), "%s/kiln reload --pid %ld --wait-ms 60000 --config %s --port %d 2>&1",
             dir && *dir ? dir : "build", (long)kiln_pid(p), conf, kiln_port(p));
    FILE *fp = popen(cmd, "r");
    assert_non_null(fp);
    size_t n = fread(out, 1, cap - 1, fp);
    out[n] = '\0';
    int st = pclose(fp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `kiln reload` signals kiln and returns once the reload is over: 0 when the roll is done (and
 * /health says so at that moment), 1 with the cause when it failed or the config does not
 * parse, so `systemctl reload kiln` reports the outcome on Debian 12's systemd 252 too. */
static void test_roll_kiln_reload_returns_when_the_roll_is_over(void **state)
{
    (void)state;
    char conf[128], out[4096];
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-rw-%ld.conf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 2\nthreads = 1\n");
    const char *extra[] = {"--mock-load-ms", "300", NULL};
    struct kiln_proc *p = start_with_conf(conf, extra);
    assert_non_null(p);
    int port = kiln_port(p);
    struct workers_cond two = {port, 2};
    assert_true(wait_until(workers_ready, &two, 20000));

    /* nothing to roll: applied at once */
    assert_int_equal(kiln_reload(p, conf, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "applied"));
    /* a roll: it returns once it is done */
    write_conf(conf, "model = mock\nworkers = 2\nthreads = 2\n");
    int rc = kiln_reload(p, conf, out, sizeof(out));
    if (rc != 0)
        fail_msg("kiln reload: %d: %s", rc, out);
    assert_non_null(strstr(out, "done"));
    struct reload_cond done = {port, "done", 1};
    assert_true(reload_is(&done));
    /* a model that does not load: 1, naming it */
    write_conf(conf, "model = /nonexistent-%ld.gguf\nworkers = 2\nthreads = 2\n", (long)getpid());
    assert_int_equal(kiln_reload(p, conf, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "failed"));
    assert_non_null(strstr(out, "/nonexistent-"));
    /* a config that does not parse: 1, and kiln is not signalled */
    write_conf(conf, "model = mock\nworkers = lots\n");
    assert_int_equal(kiln_reload(p, conf, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "workers"));
    expect_mock_serves(port);
    assert_int_equal(front_stop(p), 0);
    unlink(conf);
}

/* ---- --workers and --threads ---- */

static void test_roll_worker_count_and_threads_change_live(void **state)
{
    (void)state;
    char conf[128];
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-n-%ld.conf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 1\nthreads = 1\n");
    struct kiln_proc *p = start_with_conf(conf, NULL);
    assert_non_null(p);
    int port = kiln_port(p);
    struct workers_cond one = {port, 1}, three = {port, 3};
    assert_true(wait_until(workers_ready, &one, 20000));

    write_conf(conf, "model = mock\nworkers = 3\nthreads = 1\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    struct reload_cond done = {port, "done", 1};
    assert_true(wait_until(reload_is, &done, 30000));
    assert_true(wait_until(workers_ready, &three, 20000));
    assert_int_equal(proc_children(kiln_pid(p), NULL, 0), 3);
    expect_mock_serves(port);

    /* threads: every worker restarted (new pids), still three */
    pid_t before[8], after[8];
    assert_int_equal(proc_children(kiln_pid(p), before, 8), 3);
    write_conf(conf, "model = mock\nworkers = 3\nthreads = 2\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    done.count = 2;
    assert_true(wait_until(reload_is, &done, 30000));
    assert_true(wait_until(workers_ready, &three, 20000));
    assert_int_equal(proc_children(kiln_pid(p), after, 8), 3);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 3; k++)
            assert_int_not_equal(before[i], after[k]);

    write_conf(conf, "model = mock\nworkers = 1\nthreads = 2\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    done.count = 3;
    assert_true(wait_until(reload_is, &done, 30000));
    assert_true(wait_until(workers_ready, &one, 30000));
    assert_int_equal(proc_children(kiln_pid(p), NULL, 0), 1);
    expect_mock_serves(port);
    assert_int_equal(front_stop(p), 0);
    unlink(conf);
}

/* ---- watchdog-ms ---- */

/* A reload that turns the watchdog on restarts the workers at its heartbeat, and from then on
 * a worker that hangs is killed after watchdog-ms (before, the change waited for a restart
 * and the hung request never ended). */
static void test_roll_watchdog_change_is_applied_by_the_roll(void **state)
{
    (void)state;
    char conf[128];
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-wd-%ld.conf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 2\nwatchdog-ms = 0\nmock-faults = true\n");
    struct kiln_proc *p = start_with_conf(conf, NULL);
    assert_non_null(p);
    int port = kiln_port(p);
    struct workers_cond two = {port, 2};
    assert_true(wait_until(workers_ready, &two, 20000));
    pid_t before[8], after[8];
    assert_int_equal(proc_children(kiln_pid(p), before, 8), 2);

    write_conf(conf, "model = mock\nworkers = 2\nwatchdog-ms = 500\nmock-faults = true\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    struct reload_cond done = {port, "done", 1};
    assert_true(wait_until(reload_is, &done, 30000));
    assert_true(wait_until(workers_ready, &two, 20000));
    assert_int_equal(proc_children(kiln_pid(p), after, 8), 2);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            assert_int_not_equal(before[i], after[k]);
    /* a hang is now ended by the watchdog: the request fails instead of waiting forever */
    json_t *j = NULL;
    int st = front_call(port, "POST", "/v1/completions",
                        "{\"prompt\": \"[[kiln:hang]]\", \"max_tokens\": 8}", &j, NULL);
    json_decref(j);
    assert_int_equal(st, 500);
    assert_true(kiln_wait_output(p, "made no progress", 10000));
    assert_true(kiln_wait_output(p, "reload: watchdog-ms 0 -> 500", 10000));
    assert_int_equal(front_stop(p), 0);
    unlink(conf);
}

/* ---- 64 workers: no room for the extra one ---- */

/* How many workers /health lists, or -1. */
static long health_workers(int port)
{
    json_t *h = health(port);
    long n = h ? (long)json_array_size(json_object_get(h, "workers")) : -1;
    json_decref(h);
    return n;
}

struct max_cond {
    int port;
    long most;   /* the most workers /health listed so far */
    int served;  /* requests answered 200 meanwhile */
    int failed;
};

/* Done when the reload is; meanwhile note the worker count and send a request. */
static bool roll_done_watching(void *arg)
{
    struct max_cond *c = arg;
    long n = health_workers(c->port);
    if (n > c->most)
        c->most = n;
    json_t *j = NULL;
    char body[160];
    snprintf(body, sizeof(body), BODY, "");
    if (front_call(c->port, "POST", "/v1/completions", body, &j, NULL) == 200)
        c->served++;
    else
        c->failed++;
    json_decref(j);
    struct reload_cond done = {c->port, "done", 1};
    return reload_is(&done);
}

/* At CONFIG_MAX_WORKERS (64) the roll cannot add its extra worker: it replaces each worker in
 * place (N-1 serve during each step), never runs more than 64, and fails no request. */
static void test_roll_at_64_workers_replaces_them_in_place(void **state)
{
    (void)state;
    char conf[128];
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-64-%ld.conf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 64\nthreads = 1\n");
    struct kiln_proc *p = start_with_conf(conf, NULL);
    assert_non_null(p);
    int port = kiln_port(p);
    struct workers_cond all = {port, 64};
    assert_true(wait_until(workers_ready, &all, 120000));
    pid_t before[80], after[80];
    assert_int_equal(proc_children(kiln_pid(p), before, 80), 64);

    write_conf(conf, "model = mock\nworkers = 64\nthreads = 2\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    struct max_cond mc = {port, 0, 0, 0};
    assert_true(wait_until(roll_done_watching, &mc, 240000));
    assert_true(wait_until(workers_ready, &all, 60000));
    print_message("roll at 64 workers: at most %ld listed, %d requests served, %d failed\n",
                  mc.most, mc.served, mc.failed);
    assert_int_equal(mc.most, 64);
    assert_int_equal(mc.failed, 0);
    assert_int_equal(proc_children(kiln_pid(p), after, 80), 64);
    for (int i = 0; i < 64; i++)
        for (int k = 0; k < 64; k++)
            assert_int_not_equal(before[i], after[k]);
    assert_true(kiln_wait_output(p, "replaced in place", 10000));
    assert_int_equal(front_stop(p), 0);
    unlink(conf);
}

/* ---- ctx and the KV cache: worker parameters ---- */

/* /v1/models' context_length of its first model. */
static long long context_length(int port)
{
    json_t *j = NULL;
    long long n = -1;
    if (front_call(port, "GET", "/v1/models", NULL, &j, NULL) == 200)
        n = json_integer_value(
            json_object_get(json_array_get(json_object_get(j, "data"), 0), "context_length"));
    json_decref(j);
    return n;
}

/* A reload that changes ctx (a worker parameter, and the front's prompt limit) rolls the
 * workers onto a new generation of the same model: new processes, the new limit enforced. */
static void test_roll_ctx_change_is_rolled_onto_the_workers(void **state)
{
    (void)state;
    char conf[128], body[9000];
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-ctx-%ld.conf", (long)getpid());
    write_conf(conf, "model = mock\nworkers = 2\nctx = 4096\n");
    struct kiln_proc *p = start_with_conf(conf, NULL);
    assert_non_null(p);
    int port = kiln_port(p);
    struct workers_cond two = {port, 2};
    assert_true(wait_until(workers_ready, &two, 20000));
    assert_int_equal(context_length(port), 4096);
    /* a prompt of 3000 bytes (the mock's tokens are bytes) fits 4096 */
    char prompt[3001];
    memset(prompt, 'a', 3000);
    prompt[3000] = '\0';
    snprintf(body, sizeof(body), "{\"prompt\": \"%s\", \"max_tokens\": 1}", prompt);
    json_t *j = NULL;
    assert_int_equal(front_call(port, "POST", "/v1/completions", body, &j, NULL), 200);
    json_decref(j);

    pid_t before[8], after[8];
    assert_int_equal(proc_children(kiln_pid(p), before, 8), 2);
    write_conf(conf, "model = mock\nworkers = 2\nctx = 2048\n");
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    struct reload_cond done = {port, "done", 1};
    assert_true(wait_until(reload_is, &done, 30000));
    assert_true(wait_until(workers_ready, &two, 20000));
    assert_int_equal(context_length(port), 2048);
    assert_int_equal(proc_children(kiln_pid(p), after, 8), 2);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            assert_int_not_equal(before[i], after[k]);
    /* the same prompt is now over the limit */
    j = NULL;
    assert_int_equal(front_call(port, "POST", "/v1/completions", body, &j, NULL), 400);
    json_decref(j);
    assert_true(kiln_wait_output(p, "reload: ctx 4096 -> 2048", 10000));
    assert_int_equal(front_stop(p), 0);
    unlink(conf);
}

/* ---- the same path, a new file ---- */

static void copy_file(const char *from, const char *to)
{
    char buf[65536];
    size_t n;
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static bool reloaded(void *arg)
{
    return kiln_output_contains(arg, "SIGHUP: reloading the configuration");
}

static void test_roll_new_file_at_the_same_path_is_rolled_onto(void **state)
{
    (void)state;
    char conf[128], path[128], next[128], err[256], ids[512];
    snprintf(conf, sizeof(conf), "/tmp/kiln-roll-same-%ld.conf", (long)getpid());
    snprintf(path, sizeof(path), "/tmp/kiln-roll-same-%ld.gguf", (long)getpid());
    snprintf(next, sizeof(next), "/tmp/kiln-roll-next-%ld.gguf", (long)getpid());
    copy_file(stories, path);
    write_conf(conf, "model = %s\nworkers = 2\nthreads = 1\n", path);
    struct kiln_proc *p = start_with_conf(conf, NULL);
    assert_non_null(p);
    int port = kiln_port(p);
    struct workers_cond two = {port, 2};
    assert_true(wait_until(workers_ready, &two, 20000));
    assert_int_equal(models(port, ids, sizeof(ids)), 1);
    assert_string_equal(ids, "llama");

    /* the same file: a reload changes no worker */
    pid_t before[8], after[8];
    assert_int_equal(proc_children(kiln_pid(p), before, 8), 2);
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    assert_true(wait_until(reloaded, p, 10000));
    /* the front handled the signal whole before it answers this */
    struct reload_cond idle = {port, "idle", 0};
    assert_true(reload_is(&idle));
    assert_int_equal(proc_children(kiln_pid(p), after, 8), 2);
    for (int i = 0; i < 2; i++)
        assert_true(before[i] == after[0] || before[i] == after[1]);

    /* another model moved into place at the same path: rolled onto */
    struct model_gen_opts o = {0};
    assert_int_equal(model_gen_preset(&o, "tiny"), 0);
    o.n_vocab = 512;
    o.seed = 11;
    assert_int_equal(model_gen_write(&o, next, err, sizeof(err)), 0);
    assert_int_equal(rename(next, path), 0);
    assert_int_equal(kiln_kill(p, SIGHUP), 0);
    struct reload_cond done = {port, "done", 1};
    assert_true(wait_until(reload_is, &done, 30000));
    assert_true(wait_until(workers_ready, &two, 20000));
    assert_int_equal(models(port, ids, sizeof(ids)), 1);
    assert_string_not_equal(ids, "llama");
    assert_int_equal(proc_children(kiln_pid(p), after, 8), 2);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            assert_int_not_equal(before[i], after[k]);
    json_t *j = NULL;
    assert_int_equal(front_call(port, "POST", "/v1/completions",
                                "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4}", &j,
                                NULL),
                     200);
    assert_string_equal(json_string_value(json_object_get(j, "model")), ids);
    json_decref(j);
    /* /tokenize, /detokenize and /apply-template take "model" as the completions do: a
     * model no longer served is a 404, the one served is used */
    char body[640];
    snprintf(body, sizeof(body), "{\"content\": \"Once upon\", \"model\": \"%s\"}", ids);
    j = NULL;
    assert_int_equal(front_call(port, "POST", "/tokenize", body, &j, NULL), 200);
    assert_true(json_array_size(json_object_get(j, "tokens")) > 0);
    json_decref(j);
    j = NULL;
    assert_int_equal(front_call(port, "POST", "/tokenize",
                                "{\"content\": \"Once upon\", \"model\": \"llama\"}", &j, NULL),
                     404);
    json_decref(j);
    j = NULL;
    assert_int_equal(front_call(port, "POST", "/detokenize",
                                "{\"tokens\": [1], \"model\": \"llama\"}", &j, NULL),
                     404);
    json_decref(j);
    j = NULL;
    assert_int_equal(front_call(port, "POST", "/apply-template",
                                "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                "\"model\": \"llama\"}",
                                &j, NULL),
                     404);
    json_decref(j);
    assert_int_equal(front_stop(p), 0);
    unlink(conf);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roll_reload_to_another_model_under_load_fails_nothing),
        cmocka_unit_test(test_roll_broken_model_keeps_the_old_workers_serving),
        cmocka_unit_test(test_roll_systemd_hears_ready_only_when_the_roll_is_done),
        cmocka_unit_test(test_roll_kiln_reload_returns_when_the_roll_is_over),
        cmocka_unit_test(test_roll_worker_count_and_threads_change_live),
        cmocka_unit_test(test_roll_ctx_change_is_rolled_onto_the_workers),
        cmocka_unit_test(test_roll_at_64_workers_replaces_them_in_place),
        cmocka_unit_test(test_roll_watchdog_change_is_applied_by_the_roll),
        cmocka_unit_test(test_roll_new_file_at_the_same_path_is_rolled_onto),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
