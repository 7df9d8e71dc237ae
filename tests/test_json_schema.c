/* JSON Schema -> grammar: per construct, JSON texts the grammar must accept and ones it must
 * refuse; refusals that name the unsupported keyword; random sentences of each schema's
 * grammar parse as JSON (jansson) and are accepted back. (Schema validity of generated text
 * is checked by an independent validator, ajv, in tests/openai.) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grammar.h"
#include "json_schema.h"

struct jcase {
    const char *schema;
    const char *accept[6];
    const char *reject[6];
};

static const struct jcase cases[] = {
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"a\\nb\""}, {"\"a\"", "\"abcd\"", "1"}},
    {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", {"-12", "0", "99", "305", "-1"},
     {"-13", "306", "1.5", "007", "-0"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":10}", {"11", "123456"}, {"10", "9", "-1"}},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", {"0", "1", "0.25"}, {"1.5", "-0.1", "2"}},
    {"{\"type\":\"number\"}", {"1", "-2.5e10", "0.001"}, {"01", "1.", ".5", "1e"}},
    {"{\"type\":\"boolean\"}", {"true", "false"}, {"null", "1"}},
    {"{\"type\":[\"string\",\"null\"]}", {"\"x\"", "null"}, {"1"}},
    {"{\"enum\":[\"red\",1,null,{\"a\":[1]}]}", {"\"red\"", "1", "null", "{\"a\":[1]}"}, {"\"blue\"", "2"}},
    {"{\"const\":\"x\\\"y\"}", {"\"x\\\"y\""}, {"\"xy\""}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
     {"[1]", "[1, 2,3]"}, {"[]", "[1,2,3,4]", "[\"a\"]"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
     {"[\"a\",1]"}, {"[\"a\"]", "[\"a\",1,2]", "[1,1]"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
     "\"required\":[\"b\"],\"additionalProperties\":false}",
     {"{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}", "{ \"a\" : 1 , \"b\" : \"\" }"},
     {"{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"c\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
     {"{\"a\":1,\"ab\":true}", "{\"z\":false}", "{}"}, {"{\"a\":true}", "{\"z\":1}"}},
    {"{\"type\":\"object\"}", {"{}", "{\"x\":[1,{\"y\":null}]}"}, {"[]"}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}]}",
     {"3", "[true]"}, {"\"3\""}},
    {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
     "{\"properties\":{\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}]}",
     {"{\"a\":1,\"b\":true}"}, {"{\"a\":1}", "{\"b\":true}"}},
    {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"array\",\"items\":"
     "{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"c\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}",
     {"{\"c\":[]}", "{\"c\":[{\"c\":[{\"c\":[]}]}]}"}, {"{\"c\":[{}]}"}},
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{2,3}(x|\\\\.)?$\"}", {"\"AB-12\"", "\"XY-999x\"", "\"QQ-12.\""},
     {"\"ab-12\"", "\"AB-1\"", "\"AB-1234\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-28\"", "\"1999-12-31\""}, {"\"2024-02-30\"", "\"2024-13-01\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T03:04:05.123+01:00\""},
     {"\"2024-01-02 03:04:05Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123\""}},
    {"{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b@x.org\""}, {"\"a@b\"", "\"@x.org\""}},
    {"{\"type\":\"integer\",\"nullable\":true}", {"null", "5"}, {"\"5\""}},
};

static void test_json_schema_tables_accept_and_reject(void **state)
{
    char err[256];

    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        json_error_t je;
        json_t *s = json_loads(cases[c].schema, 0, &je);
        size_t len;
        char *text;
        struct grammar *g;

        if (!s)
            fail_msg("case %zu: bad test JSON: %s", c, je.text);
        if (!(text = json_schema_to_grammar(s, &len, err, sizeof(err))))
            fail_msg("case %zu: %s", c, err);
        if (!(g = grammar_compile(text, len, err, sizeof(err))))
            fail_msg("case %zu: the grammar does not compile: %s\n%s", c, err, text);
        for (int k = 0; k < 6 && cases[c].accept[k]; k++)
            if (!grammar_accepts(g, cases[c].accept[k], strlen(cases[c].accept[k])))
                fail_msg("case %zu rejects %s", c, cases[c].accept[k]);
        for (int k = 0; k < 6 && cases[c].reject[k]; k++)
            if (grammar_accepts(g, cases[c].reject[k], strlen(cases[c].reject[k])))
                fail_msg("case %zu accepts %s", c, cases[c].reject[k]);
        /* generated sentences are JSON and accepted back */
        uint64_t rng = c + 1;
        char out[8192];

        for (int k = 0; k < 50; k++) {
            long n = grammar_generate(g, &rng, 6, out, sizeof(out));

            assert_true(n >= 0);
            json_t *v = json_loads(out, JSON_DECODE_ANY, &je);

            if (!v)
                fail_msg("case %zu generated non-JSON: %s (%s)", c, out, je.text);
            json_decref(v);
            assert_true(grammar_accepts(g, out, (size_t)n));
        }
        grammar_destroy(g);
        free(text);
        json_decref(s);
    }
}

static void expect_refusal(const char *schema, const char *want)
{
    json_error_t je;
    json_t *s = json_loads(schema, 0, &je);
    char err[256];
    size_t len;
    char *text;

    assert_non_null(s);
    text = json_schema_to_grammar(s, &len, err, sizeof(err));
    if (text)
        fail_msg("%s was converted", schema);
    if (!strstr(err, want))
        fail_msg("%s: '%s' lacks '%s'", schema, err, want);
    json_decref(s);
}

static void test_json_schema_refusals_name_the_keyword(void **state)
{
    (void)state;
    expect_refusal("{\"type\":\"object\",\"minProperties\":1}", "'minProperties'");
    expect_refusal("{\"type\":\"number\",\"multipleOf\":3}", "'multipleOf'");
    expect_refusal("{\"type\":\"string\",\"format\":\"ipv4\"}", "'ipv4'");
    expect_refusal("{\"not\":{}}", "unsupported JSON Schema keyword 'not'");
    expect_refusal("{\"$ref\":\"#/$defs/missing\"}", "does not resolve");
    expect_refusal("{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "lookaround");
    expect_refusal("{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", "'\\b'");
    expect_refusal("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "'minimum'/'maximum'");
    expect_refusal("{\"type\":\"wat\"}", "unknown type");
}

static void test_json_schema_object_mode_is_any_object(void **state)
{
    size_t len;
    char *text = json_schema_object_grammar(&len), err[256];
    struct grammar *g;

    (void)state;
    assert_non_null(text);
    g = grammar_compile(text, len, err, sizeof(err));
    assert_non_null(g);
    const char *ok = "{\"a\": [1, 2.5, \"x\", {\"b\": null}]}";

    assert_true(grammar_accepts(g, ok, strlen(ok)));
    assert_false(grammar_accepts(g, "[1]", 3));
    assert_false(grammar_accepts(g, "{\"a\":1", 6));
    grammar_destroy(g);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_schema_tables_accept_and_reject),
        cmocka_unit_test(test_json_schema_refusals_name_the_keyword),
        cmocka_unit_test(test_json_schema_object_mode_is_any_object),
    };
    return cmocka_run_group_tests_name("json_schema", tests, NULL, NULL);
}
