/* Integration test: N kiln workers serving one GGUF share one copy of its weights. Each
 * worker maps the file read-only, so the pages they have both touched are counted once in the
 * page cache and split between them in Pss. kiln starts with 2 workers on a generated ~30 MB
 * Q8_0 model, both serve a request at once (so both have read every matrix; again, a few
 * times at most, until both have), and then each worker's Rss and Pss of the file mapping
 * come from /proc/PID/smaps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/harness.h"
#include "lib/http_client.h"
#include "lib/model_gen.h"

#define TIMEOUT_MS 60000

struct fixture {
    char dir[64], path[128];
    off_t file_bytes;
    struct kiln_proc *kiln;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct model_gen_opts o = {.dim = 512, .layers = 8, .heads = 8, .kv_heads = 8, .ffn = 1536,
                               .ctx = 256, .type = GGML_TYPE_Q8_0, .seed = 3, .n_vocab = 512};
    char err[256];
    struct stat st;

    if (!f)
        return -1;
    snprintf(f->dir, sizeof(f->dir), "/tmp/kiln-share-XXXXXX");
    if (!mkdtemp(f->dir))
        goto fail;
    snprintf(f->path, sizeof(f->path), "%s/share.gguf", f->dir);
    if (model_gen_write(&o, f->path, err, sizeof(err)) < 0 || stat(f->path, &st) < 0) {
        fprintf(stderr, "%s: %s\n", f->path, err);
        goto fail;
    }
    f->file_bytes = st.st_size;
    const char *args[] = {"--model", f->path, "--workers", "2", "--threads", "1",
                          "--max-sequences", "1", "--ctx", "256", NULL};
    if (!(f->kiln = kiln_start(args)))
        goto fail;
    *state = f;
    return 0;
fail:
    if (f->path[0])
        unlink(f->path);
    if (f->dir[0])
        rmdir(f->dir);
    free(f);
    return -1;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    int st = kiln_stop(f->kiln);
    kiln_destroy(f->kiln);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return st == 0 ? 0 : -1;
}

/* Rss and Pss (KiB) of pid's mappings of path, from /proc/pid/smaps. Returns 0 or -errno. */
static int file_rss_pss(pid_t pid, const char *path, long *rss, long *pss)
{
    char name[64], line[1024];
    int in_file = 0;

    snprintf(name, sizeof(name), "/proc/%d/smaps", (int)pid);
    FILE *fp = fopen(name, "r");
    if (!fp)
        return -errno;
    *rss = *pss = 0;
    while (fgets(line, sizeof(line), fp)) {
        unsigned long lo, hi, off, inode;
        unsigned maj, mnr;
        char perms[8];
        int at = 0;
        long v;

        /* a mapping's header: "start-end perms offset dev inode [path]" */
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %n", &lo, &hi, perms, &off, &maj, &mnr,
                   &inode, &at) == 7 && at > 0) {
            line[strcspn(line, "\n")] = '\0';
            in_file = strcmp(line + at, path) == 0;
            continue;
        }
        if (!in_file)
            continue;
        if (sscanf(line, "Rss: %ld kB", &v) == 1)
            *rss += v;
        else if (sscanf(line, "Pss: %ld kB", &v) == 1)
            *pss += v;
    }
    fclose(fp);
    return 0;
}

/* Two streams at once: with one slot per worker each lands on its own worker while the
 * other runs, so both read every matrix. If the first ends before the second is dispatched,
 * both land on one worker; the caller then tries again. */
static void serve_two_at_once(int port)
{
    const char *body = "{\"prompt\":[300,301,302,303],\"max_tokens\":64,\"temperature\":0,"
                       "\"ignore_eos\":true,\"stream\":true}";
    struct http_stream *s[2] = {NULL, NULL};
    struct sse_event ev;

    for (int i = 0; i < 2; i++)
        assert_int_equal(http_stream_open(port, "POST", "/v1/completions", NULL, body,
                                          TIMEOUT_MS, &s[i]),
                         200);
    for (int i = 0; i < 2; i++) {
        int rc, events = 0;
        while ((rc = sse_next(s[i], &ev, TIMEOUT_MS)) == 1 && !ev.done)
            events++;
        assert_int_equal(rc, 1);
        assert_true(events > 0);
        http_stream_close(s[i]);
    }
}

#define ROUNDS 5

static void test_model_share_two_workers_share_one_copy_of_the_weights(void **state)
{
    struct fixture *f = *state;
    int port = kiln_port(f->kiln);
    pid_t kids[4];
    char real[4096];
    long file_kb = (long)(f->file_bytes / 1024), rss[2], pss[2];

    assert_non_null(realpath(f->path, real));
    int n = proc_children(kiln_pid(f->kiln), kids, 4);
    assert_int_equal(n, 2);
    /* until both workers have most of the file resident (every matrix was read by each):
     * the two requests may meet one worker, and the kernel may reclaim idle page-cache
     * pages between a request and the reading of smaps */
    int both = 0;
    for (int round = 0; round < ROUNDS && !both; round++) {
        serve_two_at_once(port);
        both = 1;
        for (int i = 0; i < n; i++) {
            assert_int_equal(file_rss_pss(kids[i], real, &rss[i], &pss[i]), 0);
            fprintf(stderr, "round %d, worker pid %d: model file %ld KiB, mapped Rss %ld KiB, "
                            "Pss %ld KiB\n",
                    round, (int)kids[i], file_kb, rss[i], pss[i]);
            both &= rss[i] > file_kb * 8 / 10;
        }
    }
    assert_true(both);
    for (int i = 0; i < n; i++)
        /* each pays about half of what it maps: the pages are shared with the other worker */
        assert_true(pss[i] < rss[i] * 6 / 10);
    /* one copy in all (the front maps the file too, for the tokenizer, and takes a share of
     * the pages it touched) */
    assert_true(pss[0] + pss[1] < file_kb * 11 / 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_model_share_two_workers_share_one_copy_of_the_weights, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
