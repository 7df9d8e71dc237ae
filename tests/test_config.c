/* The flag table (server/config.c) is the one source of every flag's default: config_init
 * takes the defaults from it, --help prints it, and README's flag table must say the same
 * (flag, value, default, help, in the same order). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include <cmocka.h>

#include "../server/config.h"

/* s without backticks or single quotes (README quotes as code what --help quotes plainly)
 * and without one pair of parentheses around the whole. */
static void plain(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    while (n > 0 && *s == ' ')
        s++, n--;
    while (n > 0 && s[n - 1] == ' ')
        n--;
    for (size_t i = 0; i < n && o + 1 < cap; i++)
        if (s[i] != '`' && s[i] != '\'')
            out[o++] = s[i];
    out[o] = '\0';
    if (o >= 2 && out[0] == '(' && out[o - 1] == ')' && !strchr(out + 1, '(')) {
        memmove(out, out + 1, o - 2);
        out[o - 2] = '\0';
    }
}

static void test_config_readme_flag_table_is_the_flag_table(void **state)
{
    (void)state;
    FILE *f = fopen("README.md", "r");
    char line[2048];
    size_t i = 0;
    struct config_flag_doc d;

    assert_non_null(f); /* the tests run from the checkout's root */
    while (fgets(line, sizeof(line), f)) {
        char cell[3][1024], want[1024], got[1024];
        const char *c = line + 1, *bar;
        if (strncmp(line, "| `--", 5) != 0)
            continue;
        for (int k = 0; k < 3; k++) {
            bar = strstr(c, " |");
            assert_non_null(bar);
            plain(c, (size_t)(bar - c), cell[k], sizeof(cell[k]));
            c = bar + 2;
        }
        if (!config_flag_doc(i, &d))
            fail_msg("README documents %s, which the flag table does not have", cell[0]);
        snprintf(want, sizeof(want), "--%s%s%s", d.name, d.arg[0] ? " " : "", d.arg);
        if (strcmp(cell[0], want) != 0)
            fail_msg("README row %zu is '%s', the flag table's is '%s'", i + 1, cell[0], want);
        plain(d.defval, strlen(d.defval), got, sizeof(got));
        if (strcmp(cell[1], got) != 0)
            fail_msg("README gives %s the default '%s', the flag table '%s'", want, cell[1],
                     got);
        plain(d.help, strlen(d.help), got, sizeof(got));
        if (strcmp(cell[2], got) != 0)
            fail_msg("README describes %s as\n  '%s'\nthe flag table as\n  '%s'", want,
                     cell[2], got);
        i++;
    }
    fclose(f);
    if (config_flag_doc(i, &d))
        fail_msg("--%s is in the flag table but not in README's", d.name);
    assert_true(i > 40);
}

/* config_init's defaults are the table's: each value default parses into its field. */
static void test_config_defaults_come_from_the_table(void **state)
{
    (void)state;
    struct kiln_config c;
    config_init(&c);
    assert_string_equal(c.host, "127.0.0.1");
    assert_int_equal(c.port, 8080);
    assert_int_equal(c.workers, 1);
    assert_int_equal(c.max_sequences, 8);
    assert_int_equal(c.watchdog_ms, 10000);
    assert_int_equal(c.restart_backoff_ms, 100);
    assert_int_equal(c.max_client_buffer, 262144);
    assert_string_equal(c.log_format, "text");
    config_free(&c);
}

/* The KV cache's size in MiB, on the command line or in a --config file; with a size in
 * positions too it is refused by name. */
static void test_config_kv_cache_mib_is_one_way_to_size_the_cache(void **state)
{
    (void)state;
    struct kiln_config c;
    char err[256], path[] = "/tmp/kiln-config-XXXXXX";
    char *a1[] = {"kiln", "--model", "mock", "--kv-cache-mib", "512", NULL};
    char *a2[] = {"kiln", "--model", "mock", "--kv-cache-mib", "512", "--kv-cache-tokens", "64",
                  NULL};
    char *a3[] = {"kiln", "--model", "mock", "--config", path, NULL};
    int fd = mkstemp(path);

    config_init(&c);
    assert_int_equal(config_parse(&c, 5, a1, err, sizeof(err)), 0);
    assert_int_equal(c.kv_cache_mib, 512);
    config_free(&c);
    config_init(&c);
    assert_int_equal(config_parse(&c, 7, a2, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "--kv-cache-mib"));
    config_free(&c);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "kv-cache-mib = 256\n", 19), 19);
    close(fd);
    config_init(&c);
    assert_int_equal(config_parse(&c, 5, a3, err, sizeof(err)), 0);
    assert_int_equal(c.kv_cache_mib, 256);
    config_free(&c);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_readme_flag_table_is_the_flag_table),
        cmocka_unit_test(test_config_defaults_come_from_the_table),
        cmocka_unit_test(test_config_kv_cache_mib_is_one_way_to_size_the_cache),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
