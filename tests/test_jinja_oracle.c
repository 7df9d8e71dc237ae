/* jinja oracle: every real template of ../shared/templates, rendered with every conversation
 * of tests/fixtures/jinja/conversations.json (add_generation_prompt on and off), is byte for
 * byte what @huggingface/jinja 0.5.11 rendered (tests/reference/jinja/render.mjs wrote the
 * fixtures), or both raise. A pair listed in known_differences.txt may differ (each is
 * printed); any other difference fails. The count of identical pairs is printed. */
#include "jinja.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#define FIXTURES "tests/fixtures/jinja"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p)
        p[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return p;
}

static bool known(const char *list, const char *tmpl, const char *key)
{
    char line[512];
    snprintf(line, sizeof(line), "%s %s\n", tmpl, key);
    return list && strstr(list, line) != NULL;
}

static void test_jinja_oracle_templates_match_huggingface(void **state)
{
    (void)state;
    const char *shared = getenv("KILN_SHARED") ? getenv("KILN_SHARED") : "../shared";
    char path[1024];
    size_t len;
    json_error_t jerr;
    json_t *spec = json_load_file(FIXTURES "/conversations.json", 0, &jerr);
    assert_non_null(spec);
    char *knownlist = slurp(FIXTURES "/known_differences.txt", &len);
    json_t *convs = json_object_get(spec, "conversations");
    struct jinja_limits lim = {.now = (time_t)json_integer_value(json_object_get(spec, "now"))};
    setenv("TZ", "UTC", 1);
    tzset();

    snprintf(path, sizeof(path), "%s/templates", shared);
    FILE *ls = NULL;
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "ls %s/*.jinja", path);
    ls = popen(cmd, "r");
    assert_non_null(ls);
    int same = 0, total = 0, unexpected = 0, templates = 0, raises = 0;
    char file[1024];
    while (fgets(file, sizeof(file), ls)) {
        file[strcspn(file, "\n")] = '\0';
        const char *base = strrchr(file, '/') + 1;
        char name[256], fx[1400];
        snprintf(name, sizeof(name), "%.*s", (int)(strlen(base) - 6), base);
        snprintf(fx, sizeof(fx), FIXTURES "/%s.json", name);
        json_t *want = json_load_file(fx, 0, &jerr);
        if (!want)
            fail_msg("no fixture %s: run tests/reference/jinja/render.mjs", fx);
        templates++;
        char *src = slurp(file, &len), err[512];
        assert_non_null(src);
        struct jinja_template *t = jinja_parse(src, len, err, sizeof(err));
        free(src);
        if (json_object_get(want, "parse_error")) {
            total++;
            if (!t) {
                same++;
            } else {
                printf("DIFF %s: the oracle cannot parse it, kiln can\n", base);
                unexpected++;
            }
            jinja_free(t);
            json_decref(want);
            continue;
        }
        if (!t) {
            printf("DIFF %s: kiln cannot parse it: %s\n", base, err);
            unexpected++;
            json_decref(want);
            continue;
        }
        const char *cname;
        json_t *c;
        json_object_foreach(convs, cname, c) {
            for (int gen = 1; gen >= 0; gen--) {
                char key[300];
                snprintf(key, sizeof(key), "%s/%s", cname, gen ? "gen" : "nogen");
                json_t *w = json_object_get(want, key);
                struct jinja_var vars[16];
                size_t nv = 0;
                json_t *g = json_boolean(gen);
                vars[nv++] = (struct jinja_var){"messages", json_object_get(c, "messages"), true};
                vars[nv++] = (struct jinja_var){"bos_token", json_object_get(spec, "bos_token"), false};
                vars[nv++] = (struct jinja_var){"eos_token", json_object_get(spec, "eos_token"), false};
                vars[nv++] = (struct jinja_var){"add_generation_prompt", g, false};
                if (json_is_true(json_object_get(c, "tools")))
                    vars[nv++] = (struct jinja_var){"tools", json_object_get(spec, "tools"), true};
                const char *k;
                json_t *v;
                json_object_foreach(json_object_get(c, "kwargs"), k, v) {
                    if (nv < 16)
                        vars[nv++] = (struct jinja_var){k, v, true};
                }
                struct jinja_output out;
                int rc = jinja_render(t, vars, nv, &lim, &out, err, sizeof(err));
                bool ok;
                total++;
                raises += !json_is_string(w);
                if (json_is_string(w))
                    ok = rc == 0 && out.len == json_string_length(w) &&
                         !memcmp(out.text, json_string_value(w), out.len);
                else
                    ok = rc != 0;
                if (ok) {
                    same++;
                } else {
                    bool k2 = known(knownlist, base, key);
                    unexpected += !k2;
                    printf("%s %s %s: oracle %s, kiln %s\n", k2 ? "KNOWN" : "DIFF", base, key,
                           json_is_string(w) ? "renders" : "raises",
                           rc ? err : "renders");
                    if (getenv("JINJA_ORACLE_VERBOSE") && rc == 0 && json_is_string(w))
                        printf("--- want\n%s\n--- got\n%s\n---\n", json_string_value(w), out.text);
                }
                if (rc == 0) {
                    free(out.text);
                    free(out.spans);
                }
                json_decref(g);
            }
        }
        jinja_free(t);
        json_decref(want);
    }
    pclose(ls);
    printf("jinja oracle: %d templates, %d of %d template x conversation renders identical to "
           "@huggingface/jinja 0.5.11 (or both raise; the reference raises on %d); %d "
           "unexpected differences\n", templates, same, total, raises, unexpected);
    free(knownlist);
    json_decref(spec);
    assert_int_equal(templates, 39);
    assert_int_equal(unexpected, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jinja_oracle_templates_match_huggingface),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
