/* Unit tests of kiln's config file (--config): every flag as "key = value", comments and
 * quotes, the command line winning, and unknown keys or bad values refused with the line. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../server/config.h"

static char path[64];

static void write_conf(const char *text)
{
    snprintf(path, sizeof(path), "/tmp/kiln-conf-%ld.conf", (long)getpid());
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static int parse(struct kiln_config *c, char *err, int argc, char **argv)
{
    config_init(c);
    return config_parse(c, argc, argv, err, 512);
}

static void test_config_file_sets_every_kind_of_flag(void **state)
{
    (void)state;
    struct kiln_config c;
    char err[512] = "";
    write_conf("# kiln\n"
               "model = mock   # the mock model\n"
               "\n"
               "workers=3\n"
               "  max_waiting =  7\n"
               "log-level = debug\n"
               "mock-reply = \"a # inside quotes\"\n"
               "no-webui = yes\n"
               "api-key = k1\n"
               "api-key = 'k2'\n"
               "tls-cert = /etc/kiln/cert.pem\n"
               "tls_key = /etc/kiln/key.pem\n"
               "max-body-bytes = 4096\r\n");
    char *argv[] = {"kiln", "--config", path, NULL};
    assert_int_equal(parse(&c, err, 3, argv), 0);
    assert_string_equal(c.model, "mock");
    assert_int_equal(c.workers, 3);
    assert_int_equal(c.max_waiting, 7);
    assert_int_equal(c.log_level, LOG_LEVEL_DEBUG);
    assert_string_equal(c.mock_reply, "a # inside quotes");
    assert_true(c.no_webui);
    assert_int_equal(c.api_keys.n, 2);
    assert_string_equal(c.api_keys.v[1], "k2");
    assert_int_equal(c.max_body_bytes, 4096);
    assert_string_equal(c.tls_cert, "/etc/kiln/cert.pem");
    assert_string_equal(c.tls_key, "/etc/kiln/key.pem");
    assert_string_equal(c.config_file, path);
    config_free(&c);
    unlink(path);
}

static void test_config_file_command_line_wins(void **state)
{
    (void)state;
    struct kiln_config c;
    char err[512] = "";
    write_conf("model = mock\nworkers = 3\nport = 9000\n");
    char *argv[] = {"kiln", "--workers", "2", "--config=", path, NULL};
    /* --config= with an empty value names no file */
    assert_int_not_equal(parse(&c, err, 5, argv), 0);
    config_free(&c);
    char *argv2[] = {"kiln", "--workers", "2", "--config", path, NULL};
    assert_int_equal(parse(&c, err, 5, argv2), 0);
    assert_int_equal(c.workers, 2);
    assert_int_equal(c.port, 9000);
    config_free(&c);
    unlink(path);
}

static void test_config_file_unknown_key_names_the_line(void **state)
{
    (void)state;
    struct kiln_config c;
    char err[512] = "", want[128];
    write_conf("model = mock\n# fine\nwrokers = 2\n");
    char *argv[] = {"kiln", "--config", path, NULL};
    assert_int_equal(parse(&c, err, 3, argv), -ENOENT);
    snprintf(want, sizeof(want), "%s:3: unknown key 'wrokers'", path);
    assert_string_equal(err, want);
    config_free(&c);
    unlink(path);
}

static void test_config_file_bad_value_names_the_line(void **state)
{
    (void)state;
    struct kiln_config c;
    char err[512] = "";
    char *argv[] = {"kiln", "--config", path, NULL};
    static const char *bad[] = {
        "model = mock\nport = 70000\n",   "model = mock\nworkers = two\n",
        "model = mock\nno-webui = maybe\n", "model = mock\njust words\n",
        "model = mock\nmock-reply = \"open\n", "model = mock\n= 3\n",
        "model = mock\nhelp = true\n",    "model = mock\nconfig = other.conf\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_conf(bad[i]);
        assert_int_not_equal(parse(&c, err, 3, argv), 0);
        char want[96];
        snprintf(want, sizeof(want), "%s:2: ", path);
        if (strncmp(err, want, strlen(want)) != 0)
            fail_msg("case %zu: '%s' does not start with '%s'", i, err, want);
        config_free(&c);
    }
    unlink(path);
}

static void test_config_file_missing_file_is_named(void **state)
{
    (void)state;
    struct kiln_config c;
    char err[512] = "";
    char *argv[] = {"kiln", "--model", "mock", "--config", "/nonexistent/kiln.conf", NULL};
    assert_int_equal(parse(&c, err, 5, argv), -ENOENT);
    assert_non_null(strstr(err, "/nonexistent/kiln.conf"));
    config_free(&c);
}

static void test_config_file_example_in_deploy_parses(void **state)
{
    (void)state;
    struct kiln_config c;
    char err[512] = "";
    /* the commented example shipped in deploy/ must stay valid */
    char *argv[] = {"kiln", "--config", "deploy/kiln.conf", NULL};
    if (access("deploy/kiln.conf", R_OK) != 0)
        skip();
    if (parse(&c, err, 3, argv) != 0)
        fail_msg("%s", err);
    assert_non_null(c.model);
    config_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_file_sets_every_kind_of_flag),
        cmocka_unit_test(test_config_file_command_line_wins),
        cmocka_unit_test(test_config_file_unknown_key_names_the_line),
        cmocka_unit_test(test_config_file_bad_value_names_the_line),
        cmocka_unit_test(test_config_file_missing_file_is_named),
        cmocka_unit_test(test_config_file_example_in_deploy_parses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
