/* metrics: exact rendered lines, cumulative buckets, worker series read from a region
 * header, label escaping, one HELP/TYPE block per family, and promtool's own check. */
#include "../server/metrics.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shm_region.h"

struct fixture {
    struct metrics m;
    struct shm_region_hdr hdr[2]; /* stand-ins for two workers' regions */
    char *text;
    size_t len;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (!f)
        return -1;
    metrics_init(&f->m);
    for (int i = 0; i < 2; i++) {
        hist_init(&f->hdr[i].prefill);
        hist_init(&f->hdr[i].decode_step);
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;

    free(f->text);
    free(f);
    return 0;
}

static const char *render(struct fixture *f, const struct metrics_worker_view *w, size_t n)
{
    free(f->text);
    f->text = metrics_render(&f->m, w, n, &f->len);
    assert_non_null(f->text);
    assert_int_equal(strlen(f->text), f->len);
    return f->text;
}

/* Whether text holds line as a whole line (line given without its '\n'). */
static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

static void assert_line(const char *text, const char *line)
{
    if (!has_line(text, line))
        fail_msg("missing line: %s\n--- rendered:\n%s", line, text);
}

/* The value of the sample whose line begins with prefix (e.g. `name{le="1"}`), or -1. */
static long long sample(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);

    for (const char *p = text; (p = strstr(p, prefix)); p++)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtoll(p + n + 1, NULL, 10);
    return -1;
}

static void test_metrics_render_counters_and_gauges_exact_lines(void **state)
{
    struct fixture *f = *state;
    const char *t;

    metrics_count_tokens(&f->m, 10, 4);
    metrics_count_tokens(&f->m, 5, 1);
    metrics_count_finished(&f->m, METRICS_FINISH_STOP);
    metrics_count_finished(&f->m, METRICS_FINISH_STOP);
    metrics_count_finished(&f->m, METRICS_FINISH_LENGTH);
    metrics_count_finished(&f->m, (enum metrics_finish)99); /* counted as an error */
    metrics_count_rejected(&f->m, METRICS_REJECT_RATE_LIMITED);
    metrics_count_rejected(&f->m, METRICS_REJECT_QUEUE_FULL);
    metrics_count_rejected(&f->m, METRICS_REJECT_QUEUE_FULL);
    metrics_count_rejected(&f->m, (enum metrics_reject)99); /* ignored */
    metrics_set_requests(&f->m, 3, 7);
    t = render(f, NULL, 0);

    assert_line(t, "# HELP kiln_prompt_tokens_total Prompt tokens processed.");
    assert_line(t, "# TYPE kiln_prompt_tokens_total counter");
    assert_line(t, "kiln_prompt_tokens_total 15");
    assert_line(t, "kiln_generation_tokens_total 5");
    assert_line(t, "# TYPE kiln_requests_total counter");
    assert_line(t, "kiln_requests_total{reason=\"stop\"} 2");
    assert_line(t, "kiln_requests_total{reason=\"length\"} 1");
    assert_line(t, "kiln_requests_total{reason=\"cancelled\"} 0");
    assert_line(t, "kiln_requests_total{reason=\"error\"} 1");
    assert_line(t, "kiln_requests_rejected_total{reason=\"queue_full\"} 2");
    assert_line(t, "kiln_requests_rejected_total{reason=\"rate_limited\"} 1");
    assert_line(t, "kiln_requests_rejected_total{reason=\"unauthorized\"} 0");
    assert_line(t, "kiln_requests_rejected_total{reason=\"too_large\"} 0");
    assert_line(t, "# TYPE kiln_requests_running gauge");
    assert_line(t, "kiln_requests_running 3");
    assert_line(t, "kiln_requests_waiting 7");
    /* no workers: no worker families at all */
    assert_null(strstr(t, "kiln_worker_"));
    assert_int_equal(t[f->len - 1], '\n');
}

static void test_metrics_histogram_is_cumulative_in_seconds(void **state)
{
    struct fixture *f = *state;
    const char *name = "kiln_time_to_first_token_seconds";
    char prefix[128];
    long long prev = 0, v;
    const char *t;

    metrics_observe_ttft(&f->m, 30);      /* <= 50 us */
    metrics_observe_ttft(&f->m, 50);      /* <= 50 us: bounds are inclusive */
    metrics_observe_ttft(&f->m, 1500000); /* <= 1.5 s */
    metrics_observe_ttft(&f->m, 90000000); /* beyond 60 s: +Inf only */
    metrics_observe_queue_time(&f->m, 700);
    t = render(f, NULL, 0);

    assert_line(t, "# TYPE kiln_time_to_first_token_seconds histogram");
    assert_line(t, "kiln_time_to_first_token_seconds_bucket{le=\"0.00005\"} 2");
    assert_line(t, "kiln_time_to_first_token_seconds_bucket{le=\"0.0001\"} 2");
    assert_line(t, "kiln_time_to_first_token_seconds_bucket{le=\"1\"} 2");
    assert_line(t, "kiln_time_to_first_token_seconds_bucket{le=\"1.5\"} 3");
    assert_line(t, "kiln_time_to_first_token_seconds_bucket{le=\"60\"} 3");
    assert_line(t, "kiln_time_to_first_token_seconds_bucket{le=\"+Inf\"} 4");
    assert_line(t, "kiln_time_to_first_token_seconds_sum 91.50008");
    assert_line(t, "kiln_time_to_first_token_seconds_count 4");
    assert_line(t, "kiln_queue_time_seconds_bucket{le=\"0.0005\"} 0");
    assert_line(t, "kiln_queue_time_seconds_bucket{le=\"0.001\"} 1");
    assert_line(t, "kiln_queue_time_seconds_sum 0.0007");
    assert_line(t, "kiln_inter_token_latency_seconds_count 0");
    assert_line(t, "kiln_request_duration_seconds_count 0");

    /* every bound, in order, never decreasing, ending at _count */
    for (int i = 0; i < HIST_BUCKETS; i++) {
        if (i < HIST_BUCKETS - 1) {
            uint64_t us = hist_bounds_us[i];

            if (us % 1000000u == 0)
                snprintf(prefix, sizeof(prefix), "%s_bucket{le=\"%llu\"}", name,
                         (unsigned long long)(us / 1000000u));
            else
                snprintf(prefix, sizeof(prefix), "%s_bucket{le=\"%g\"}", name,
                         (double)us / 1e6);
            /* %g prints 5e-05 for 50 us, which we render as 0.00005: check that one above */
            if (us < 100)
                continue;
        } else {
            snprintf(prefix, sizeof(prefix), "%s_bucket{le=\"+Inf\"}", name);
        }
        v = sample(t, prefix);
        if (v < 0)
            fail_msg("no sample %s", prefix);
        assert_true(v >= prev);
        prev = v;
    }
    snprintf(prefix, sizeof(prefix), "%s_count", name);
    assert_int_equal(sample(t, prefix), prev);
}

static void test_metrics_worker_series_from_region_headers(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker_view w[3] = {
        {.id = 0, .state = "ready", .restarts = 0, .hdr = &f->hdr[0]},
        {.id = 1, .state = "backoff", .restarts = 4, .hdr = NULL}, /* no process */
        {.id = 2, .state = "starting", .restarts = 1, .hdr = &f->hdr[1]},
    };
    const char *t;

    hist_observe(&f->hdr[0].prefill, 20000);
    hist_observe(&f->hdr[0].prefill, 120000);
    hist_observe(&f->hdr[0].decode_step, 900);
    hist_observe(&f->hdr[1].decode_step, 3000);
    t = render(f, w, 3);

    assert_line(t, "# TYPE kiln_worker_prefill_seconds histogram");
    assert_line(t, "kiln_worker_prefill_seconds_bucket{worker=\"0\",le=\"0.02\"} 1");
    assert_line(t, "kiln_worker_prefill_seconds_bucket{worker=\"0\",le=\"0.2\"} 2");
    assert_line(t, "kiln_worker_prefill_seconds_bucket{worker=\"0\",le=\"+Inf\"} 2");
    assert_line(t, "kiln_worker_prefill_seconds_sum{worker=\"0\"} 0.14");
    assert_line(t, "kiln_worker_prefill_seconds_count{worker=\"0\"} 2");
    assert_line(t, "kiln_worker_prefill_seconds_count{worker=\"2\"} 0");
    assert_line(t, "kiln_worker_decode_step_seconds_bucket{worker=\"0\",le=\"0.001\"} 1");
    assert_line(t, "kiln_worker_decode_step_seconds_count{worker=\"2\"} 1");
    assert_null(strstr(t, "_seconds_count{worker=\"1\"}"));

    assert_line(t, "# TYPE kiln_worker_restarts_total counter");
    assert_line(t, "kiln_worker_restarts_total{worker=\"0\"} 0");
    assert_line(t, "kiln_worker_restarts_total{worker=\"1\"} 4");
    assert_line(t, "kiln_worker_state{worker=\"0\",state=\"ready\"} 1");
    assert_line(t, "kiln_worker_state{worker=\"0\",state=\"starting\"} 0");
    assert_line(t, "kiln_worker_state{worker=\"1\",state=\"backoff\"} 1");
    assert_line(t, "kiln_worker_state{worker=\"1\",state=\"ready\"} 0");
    assert_line(t, "kiln_worker_state{worker=\"1\",state=\"failed\"} 0");
    assert_line(t, "kiln_worker_state{worker=\"2\",state=\"starting\"} 1");
    assert_line(t, "kiln_worker_up{worker=\"0\"} 1");
    assert_line(t, "kiln_worker_up{worker=\"1\"} 0");
    assert_line(t, "kiln_worker_up{worker=\"2\"} 0");
}

/* A worker a reload drains has its own series, there (at 0) for every worker all along, and
 * it takes no new jobs, so it is not up. */
static void test_metrics_draining_worker_has_a_state_series(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker_view w[2] = {
        {.id = 0, .state = "draining", .restarts = 0, .hdr = &f->hdr[0]},
        {.id = 1, .state = "ready", .restarts = 0, .hdr = &f->hdr[1]},
    };
    const char *t = render(f, w, 2);
    assert_line(t, "kiln_worker_state{worker=\"0\",state=\"draining\"} 1");
    assert_line(t, "kiln_worker_state{worker=\"0\",state=\"ready\"} 0");
    assert_line(t, "kiln_worker_state{worker=\"1\",state=\"draining\"} 0");
    assert_line(t, "kiln_worker_state{worker=\"1\",state=\"ready\"} 1");
    assert_line(t, "kiln_worker_up{worker=\"0\"} 0");
    assert_line(t, "kiln_worker_up{worker=\"1\"} 1");
}

static void test_metrics_unknown_state_label_is_escaped(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker_view w = {.id = 7, .state = "we\"ird\\na\nme", .hdr = NULL};
    const char *t = render(f, &w, 1);

    assert_line(t, "kiln_worker_state{worker=\"7\",state=\"we\\\"ird\\\\na\\nme\"} 1");
    assert_line(t, "kiln_worker_state{worker=\"7\",state=\"ready\"} 0");
}

/* Strip a histogram suffix so samples can be matched to their family. */
static void family_of(const char *sample_line, const char *typed, char *out, size_t cap)
{
    size_t n = strcspn(sample_line, "{ ");
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};

    snprintf(out, cap, "%.*s", (int)n, sample_line);
    for (int i = 0; i < 3; i++) {
        size_t tl = strlen(typed), sl = strlen(sfx[i]);

        if (n == tl + sl && strncmp(out, typed, tl) == 0 && strcmp(out + tl, sfx[i]) == 0)
            out[tl] = '\0';
    }
}

static void test_metrics_every_sample_follows_its_one_type_line(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker_view w[2] = {
        {.id = 0, .state = "ready", .hdr = &f->hdr[0]},
        {.id = 1, .state = "failed", .hdr = &f->hdr[1]},
    };
    char *copy, *save = NULL, typed[128] = "", fam[128];
    char seen[64][128];
    int n_seen = 0;

    copy = strdup(render(f, w, 2));
    assert_non_null(copy);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# TYPE ", 7) == 0) {
            snprintf(typed, sizeof(typed), "%.*s", (int)strcspn(line + 7, " "), line + 7);
            for (int i = 0; i < n_seen; i++)
                if (strcmp(seen[i], typed) == 0)
                    fail_msg("family %s typed twice", typed);
            assert_true(n_seen < 64);
            snprintf(seen[n_seen++], sizeof(seen[0]), "%s", typed);
            assert_int_equal(strncmp(typed, "kiln_", 5), 0);
        } else if (line[0] != '#') {
            family_of(line, typed, fam, sizeof(fam));
            if (strcmp(fam, typed) != 0)
                fail_msg("sample '%s' is not under its TYPE (last TYPE %s)", line, typed);
        }
    }
    free(copy);
}

static bool have_promtool(void)
{
    return system("command -v promtool >/dev/null 2>&1") == 0;
}

/* promtool's own parser and linter on a fully populated exposition; bounded by timeout(1). */
static void test_metrics_promtool_check_accepts_output(void **state)
{
    struct fixture *f = *state;
    struct metrics_worker_view w[2] = {
        {.id = 0, .state = "ready", .restarts = 2, .hdr = &f->hdr[0]},
        {.id = 1, .state = "odd \"state\"\n", .restarts = 0, .hdr = NULL},
    };
    char path[] = "/tmp/kiln-test-metrics-XXXXXX";
    char cmd[256], out[4096];
    const char *t;
    FILE *p;
    size_t got;
    int fd, status;

    if (!have_promtool()) {
        fprintf(stderr, "promtool not installed (Debian: apt-get install prometheus): skipped\n");
        skip();
    }
    metrics_observe_ttft(&f->m, 12345);
    metrics_observe_itl(&f->m, 456);
    metrics_observe_e2e(&f->m, 2000000);
    metrics_count_tokens(&f->m, 9, 3);
    metrics_count_finished(&f->m, METRICS_FINISH_CANCELLED);
    hist_observe(&f->hdr[0].prefill, 7000);
    t = render(f, w, 2);

    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, t, f->len), (ssize_t)f->len);
    close(fd);
    snprintf(cmd, sizeof(cmd), "timeout 30 promtool check metrics < %s 2>&1", path);
    p = popen(cmd, "r");
    assert_non_null(p);
    got = fread(out, 1, sizeof(out) - 1, p);
    out[got] = '\0';
    status = pclose(p);
    unlink(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("promtool check metrics failed (status %d):\n%s", status, out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_render_counters_and_gauges_exact_lines,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_histogram_is_cumulative_in_seconds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_metrics_worker_series_from_region_headers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_metrics_draining_worker_has_a_state_series, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_metrics_unknown_state_label_is_escaped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_metrics_every_sample_follows_its_one_type_line,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_promtool_check_accepts_output, setup,
                                        teardown),
    };

    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
