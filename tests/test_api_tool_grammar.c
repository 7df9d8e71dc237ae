/* tool_choice enforced: the grammar made for "required" or a named function accepts exactly
 * one call in the format's markup to an allowed tool with arguments that fit its
 * parameters, and refuses text around it, another tool, or arguments off the schema. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "grammar.h"

#include "../server/api_chat.h"
#include "../server/api_impl.h"

#define TOOLS "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":" \
              "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}," \
              "\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":" \
              "\"get_time\"}}]"

/* The grammar for body's tool_choice in format f (NULL when none is made). */
static struct grammar *grammar_for(const char *body, enum toolcall_format f, int *rc)
{
    json_t *o = json_loads(body, 0, NULL);
    struct api_chat c;
    struct request r;
    struct perr e = {.status = 400};
    char err[200];
    assert_non_null(o);
    memset(&r, 0, sizeof(r));
    assert_int_equal(api_chat_parse(o, &c, &e), 0);
    *rc = api_tool_grammar(&r, &c, f, &e);
    api_chat_free(&c);
    json_decref(o);
    if (*rc < 0 || !r.grammar)
        return NULL;
    struct grammar *g = grammar_compile(r.grammar, r.grammar_len, err, sizeof(err));
    assert_non_null(g);
    free(r.grammar);
    return g;
}

static bool accepts(const struct grammar *g, const char *text)
{
    return grammar_accepts(g, text, strlen(text));
}

static void test_required_accepts_one_call_to_any_tool(void **state)
{
    (void)state;
    int rc;
    struct grammar *g = grammar_for("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                    "\"tool_choice\":\"required\",\"tools\":" TOOLS "}",
                                    TOOLCALL_FORMAT_HERMES, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(g);
    assert_true(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                           "{\"city\": \"Paris\"}}\n</tool_call>"));
    assert_true(accepts(g, "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>"));
    assert_false(accepts(g, "Sure. <tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n"
                            "</tool_call>"));
    assert_false(accepts(g, "<tool_call>\n{\"name\":\"get_news\",\"arguments\":{}}\n</tool_call>"));
    assert_false(accepts(g, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}\n"
                            "</tool_call>")); /* city is required */
    assert_false(accepts(g, "The weather is fine."));
    grammar_destroy(g);
}

static void test_named_function_allows_only_it(void **state)
{
    (void)state;
    int rc;
    struct grammar *g = grammar_for(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"type\":"
        "\"function\",\"function\":{\"name\":\"get_weather\"}},\"tools\":" TOOLS "}",
        TOOLCALL_FORMAT_LLAMA3, &rc);
    assert_int_equal(rc, 0);
    assert_true(accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"));
    assert_false(accepts(g, "{\"name\": \"get_time\", \"parameters\": {}}"));
    grammar_destroy(g);
    g = grammar_for("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{"
                    "\"type\":\"function\",\"function\":{\"name\":\"get_time\"}},\"tools\":" TOOLS
                    "}",
                    TOOLCALL_FORMAT_MISTRAL, &rc);
    assert_true(accepts(g, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]"));
    grammar_destroy(g);
}

static void test_auto_and_unconstrained_formats_make_no_grammar(void **state)
{
    (void)state;
    int rc;
    assert_null(grammar_for("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                            "\"tools\":" TOOLS "}",
                            TOOLCALL_FORMAT_HERMES, &rc));
    assert_int_equal(rc, 0);
    assert_null(grammar_for("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                            "\"tool_choice\":\"required\",\"tools\":" TOOLS "}",
                            TOOLCALL_FORMAT_FUNCTIONARY, &rc));
    assert_int_equal(rc, 0);
}

#define STRICT_TOOLS "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"," \
                     "\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":" \
                     "{\"type\":\"string\"}},\"required\":[\"city\"],\"additionalProperties\":false}}}," \
                     "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":" \
                     "{\"type\":\"object\",\"properties\":{\"tz\":{\"type\":\"string\"}}}}}]"

static void test_strict_tool_under_auto_allows_text_or_a_valid_call(void **state)
{
    (void)state;
    int rc;
    struct grammar *g = grammar_for("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                    "\"tools\":" STRICT_TOOLS "}",
                                    TOOLCALL_FORMAT_HERMES, &rc);
    assert_int_equal(rc, 0);
    assert_non_null(g);
    assert_true(accepts(g, "The weather is fine."));
    assert_true(accepts(g, ""));
    assert_true(accepts(g, "a < b, <tool and <tool_cal are text"));
    assert_true(accepts(g, "Let me look.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                           "{\"city\": \"Paris\"}}\n</tool_call>"));
    /* the strict tool's arguments must fit; the other tool's may be any object */
    assert_false(accepts(g, "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"town\":\"X\"}}"
                            "\n</tool_call>"));
    assert_true(accepts(g, "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"zone\":1}}"
                           "\n</tool_call>"));
    /* the marker never appears in text that is not a valid call */
    assert_false(accepts(g, "see <tool_call> here"));
    assert_false(accepts(g, "<<tool_call>"));
    grammar_destroy(g);
    g = grammar_for("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":" STRICT_TOOLS
                    "}",
                    TOOLCALL_FORMAT_LLAMA3, &rc);
    assert_non_null(g);
    assert_true(accepts(g, "It is sunny."));
    assert_true(accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"));
    assert_false(accepts(g, "{\"name\": \"get_weather\", \"parameters\": {}}"));
    assert_false(accepts(g, "{not json"));
    assert_false(accepts(g, "x<|python_tag|>y"));
    grammar_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_required_accepts_one_call_to_any_tool),
        cmocka_unit_test(test_named_function_allows_only_it),
        cmocka_unit_test(test_auto_and_unconstrained_formats_make_no_grammar),
        cmocka_unit_test(test_strict_tool_under_auto_allows_text_or_a_valid_call),
    };
    return cmocka_run_group_tests_name("api_tool_grammar", tests, NULL, NULL);
}
