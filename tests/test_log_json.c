/* Integration test of --log-format json: every line kiln and its workers log is one JSON
 * object (time, pid, role, level, msg), for journald, Loki or Elastic; a bad format is
 * refused at start. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "front_util.h"

static void test_log_json_every_line_is_an_object_workers_too(void **state)
{
    (void)state;
    const char *args[] = {"--model", "mock", "--workers", "2", "--log-format", "json",
                          "--log-level", "debug", NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    json_t *out = NULL;
    assert_int_equal(front_call(kiln_port(p), "POST", "/v1/completions",
                                "{\"prompt\": \"a \\\"quoted\\\"\\n prompt\", \"max_tokens\": 4}",
                                &out, NULL),
                     200);
    json_decref(out);
    struct kiln_proc *keep = p;
    int st = kiln_stop(p);
    assert_true(st >= 0);
    char *text = strdup(kiln_output(keep));
    kiln_destroy(keep);
    assert_non_null(text);
    int n_json = 0, n_worker = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "kiln: listening on ", 19) == 0) /* the harness's start line */
            continue;
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!j)
            fail_msg("not a JSON line: %s (%s)", line, e.text);
        const char *role = json_string_value(json_object_get(j, "role"));
        assert_non_null(json_string_value(json_object_get(j, "time")));
        assert_true(json_is_integer(json_object_get(j, "pid")));
        assert_non_null(json_string_value(json_object_get(j, "level")));
        assert_non_null(json_string_value(json_object_get(j, "msg")));
        assert_non_null(role);
        n_worker += strncmp(role, "worker", 6) == 0;
        n_json++;
        json_decref(j);
    }
    free(text);
    assert_true(n_json >= 5);
    assert_true(n_worker >= 2);
}

static void test_log_json_unknown_format_is_refused(void **state)
{
    (void)state;
    char cmd[512], out[256];
    const char *d = getenv("KILN_BIN_DIR");
    snprintf(cmd, sizeof(cmd), "%s/kiln --model mock --log-format xml 2>&1 | head -1",
             d ? d : "build");
    FILE *fp = popen(cmd, "r");
    assert_non_null(fp);
    size_t n = fread(out, 1, sizeof(out) - 1, fp);
    out[n] = '\0';
    pclose(fp);
    assert_non_null(strstr(out, "--log-format: 'xml' is not text or json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_json_every_line_is_an_object_workers_too),
        cmocka_unit_test(test_log_json_unknown_format_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
