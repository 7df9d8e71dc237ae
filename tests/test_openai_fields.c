/* Integration tests of the OpenAI request fields against `kiln --model mock`: the model
 * check, fields kiln does not implement, n choices (whole and streamed), logprobs in each
 * route's shape, echo, token-id prompts and /v1/models. One server for the group. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "front_util.h"

static int group_setup(void **state)
{
    static const char *args[] = {"--model", "mock", "--workers", "1", "--mock-reply", MOCK_REPLY,
                                 "--ctx", "256", "--max-prompt-bytes", "100", NULL};
    struct kiln_proc *p = front_start(args);
    if (!p)
        return -1;
    *state = p;
    return 0;
}

static int group_teardown(void **state)
{
    return front_stop(*state);
}

static int port_of(void **state)
{
    return kiln_port(*state);
}

static void assert_error(int st, json_t *j, int want, const char *param, const char *code)
{
    assert_int_equal(st, want);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_true(json_is_string(json_object_get(e, "message")));
    if (param)
        assert_string_equal(json_string_value(json_object_get(e, "param")), param);
    if (code)
        assert_string_equal(json_string_value(json_object_get(e, "code")), code);
}

static void test_openai_fields_other_model_is_404(void **state)
{
    json_t *j;
    int st = front_call(port_of(state), "POST", "/v1/completions",
                        "{\"model\":\"gpt-4\",\"prompt\":\"hi\"}", &j, NULL);
    assert_error(st, j, 404, "model", "model_not_found");
    json_decref(j);
    /* the served name, or no model field at all, is accepted */
    st = front_call(port_of(state), "POST", "/v1/completions", "{\"prompt\":\"hi\"}", &j, NULL);
    assert_int_equal(st, 200);
    json_decref(j);
}

static void test_openai_fields_unsupported_fields_are_400_naming_them(void **state)
{
    static const struct {
        const char *body, *param;
    } cases[] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
         "tools"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\"}",
         "tool_choice"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[{\"name\":\"f\"}]}",
         "functions"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"function_call\":\"auto\"}",
         "function_call"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"not\":{}}}}}",
         "response_format"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"response_format\":{\"type\":\"xml\"}}",
         "response_format"},
        {"{\"prompt\":\"a\",\"grammar\":\"root ::= \\\"a\"}", "grammar"},
        {"{\"prompt\":\"a\",\"json_schema\":{\"type\":\"string\",\"format\":\"ipv4\"}}",
         "json_schema"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":9}", "n"},
        {"{\"prompt\":[\"a\",\"b\"]}", "prompt"},
        {"{\"prompt\":\"a\",\"suffix\":\"z\"}", "suffix"},
        {"{\"prompt\":\"a\",\"logprobs\":6}", "logprobs"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":21,"
         "\"logprobs\":true}",
         "top_logprobs"},
        {"{\"prompt\":[1,2,99999]}", "prompt"},
        {"{\"prompt\":\"" "0123456789012345678901234567890123456789012345678901234567890123456789"
         "0123456789012345678901234567890123456789\"}",
         "prompt"}, /* over --max-prompt-bytes 100 */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *j;
        const char *path = strstr(cases[i].body, "messages") ? "/v1/chat/completions"
                                                              : "/v1/completions";
        int st = front_call(port_of(state), "POST", path, cases[i].body, &j, NULL);
        if (st != 400)
            fprintf(stderr, "case %zu: %d\n", i, st);
        assert_error(st, j, 400, cases[i].param, NULL);
        json_decref(j);
    }
    /* accepted and ignored: user, response_format text, unknown fields */
    json_t *j;
    int st = front_call(port_of(state), "POST", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"user\":\"u1\","
                        "\"response_format\":{\"type\":\"text\"},\"whatever\":[1]}",
                        &j, NULL);
    assert_int_equal(st, 200);
    json_decref(j);
}

static void test_openai_fields_n_gives_indexed_choices_and_summed_usage(void **state)
{
    json_t *j;
    int st = front_call(port_of(state), "POST", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":3,"
                        "\"max_tokens\":5}",
                        &j, NULL);
    assert_int_equal(st, 200);
    json_t *ch = json_object_get(j, "choices");
    assert_int_equal(json_array_size(ch), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *c = json_array_get(ch, i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), (json_int_t)i);
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(c, "message"), "content")),
            "Hello");
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "length");
    }
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 15);
    json_decref(j);
}

static void test_openai_fields_n_streams_interleaved_chunks_then_usage(void **state)
{
    struct http_stream *s = NULL;
    struct sse_event ev;
    char text[3][64] = {{0}};
    int finishes = 0, usage = 0, done = 0, rc;
    int st = http_stream_open(port_of(state), "POST", "/v1/completions", NULL,
                              "{\"prompt\":\"hi\",\"n\":3,\"max_tokens\":4,\"stream\":true,"
                              "\"stream_options\":{\"include_usage\":true}}",
                              10000, &s);
    assert_int_equal(st, 200);
    while ((rc = sse_next(s, &ev, 10000)) == 1) {
        if (ev.done) {
            done++;
            continue;
        }
        json_t *j = json_loads(ev.data, 0, NULL);
        assert_non_null(j);
        json_t *ch = json_object_get(j, "choices");
        if (json_array_size(ch) == 0) {
            json_t *u = json_object_get(j, "usage");
            assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 12);
            usage++;
        } else {
            json_t *c = json_array_get(ch, 0);
            json_int_t i = json_integer_value(json_object_get(c, "index"));
            assert_true(i >= 0 && i < 3);
            assert_int_equal(usage, 0);
            const char *t = json_string_value(json_object_get(c, "text"));
            if (t)
                strncat(text[i], t, sizeof(text[i]) - strlen(text[i]) - 1);
            if (json_is_string(json_object_get(c, "finish_reason")))
                finishes++;
        }
        json_decref(j);
    }
    http_stream_close(s);
    assert_int_equal(rc, 0);
    assert_int_equal(finishes, 3);
    assert_int_equal(usage, 1);
    assert_int_equal(done, 1);
    for (int i = 0; i < 3; i++)
        assert_string_equal(text[i], "Hell");
}

static void test_openai_fields_chat_logprobs_have_tokens_and_alternatives(void **state)
{
    json_t *j;
    int st = front_call(port_of(state), "POST", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":3,"
                        "\"logprobs\":true,\"top_logprobs\":1}",
                        &j, NULL);
    assert_int_equal(st, 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *content = json_object_get(json_object_get(c, "logprobs"), "content");
    assert_int_equal(json_array_size(content), 3);
    const char *want[] = {"H", "e", "l"};
    for (size_t i = 0; i < 3; i++) {
        json_t *t = json_array_get(content, i);
        assert_string_equal(json_string_value(json_object_get(t, "token")), want[i]);
        assert_true(json_is_number(json_object_get(t, "logprob")));
        assert_true(json_number_value(json_object_get(t, "logprob")) <= 0);
        json_t *bytes = json_object_get(t, "bytes");
        assert_int_equal(json_array_size(bytes), 1);
        assert_int_equal(json_integer_value(json_array_get(bytes, 0)), want[i][0]);
        json_t *top = json_object_get(t, "top_logprobs");
        /* one alternative: the mock's second best is byte 0, a "\u0000" that jansson's
         * json_loads refuses; the chosen (greedy) token is the best alternative */
        assert_int_equal(json_array_size(top), 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(top, 0), "token")),
                            want[i]);
    }
    json_decref(j);
    /* without logprobs: null */
    st = front_call(port_of(state), "POST", "/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":1}", &j,
                    NULL);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                             "logprobs")));
    json_decref(j);
}

static void test_openai_fields_completion_logprobs_shape(void **state)
{
    json_t *j;
    int st = front_call(port_of(state), "POST", "/v1/completions",
                        "{\"prompt\":\"hi\",\"max_tokens\":4,\"logprobs\":1}", &j, NULL);
    assert_int_equal(st, 200);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    json_t *tokens = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs");
    json_t *tops = json_object_get(lp, "top_logprobs"), *offs = json_object_get(lp, "text_offset");
    assert_int_equal(json_array_size(tokens), 4);
    assert_int_equal(json_array_size(lps), 4);
    assert_int_equal(json_array_size(tops), 4);
    assert_int_equal(json_array_size(offs), 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(json_integer_value(json_array_get(offs, i)), (json_int_t)i);
        json_t *top = json_array_get(tops, i);
        assert_int_equal(json_object_size(top), 1);
        assert_non_null(json_object_get(top, json_string_value(json_array_get(tokens, i))));
    }
    json_decref(j);
}

static void test_openai_fields_echo_and_token_prompt(void **state)
{
    json_t *j;
    int st = front_call(port_of(state), "POST", "/v1/completions",
                        "{\"prompt\":\"Say: \",\"max_tokens\":5,\"echo\":true}", &j, NULL);
    assert_int_equal(st, 200);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0),
                                          "text")),
        "Say: Hello");
    json_decref(j);
    /* the mock's byte tokenizer: ids are bytes (+ specials); "hi" as ids, echoed back */
    st = front_call(port_of(state), "POST", "/v1/completions",
                    "{\"prompt\":[104,105],\"max_tokens\":2,\"echo\":true}", &j, NULL);
    assert_int_equal(st, 200);
    const char *t = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_non_null(t);
    assert_int_equal(strlen(t) >= 2, 1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                        "prompt_tokens")) >= 2, 1);
    json_decref(j);
}

/* Structured output on the mock (whose reply is not JSON): every choice follows the
 * grammar, a seeded request reproduces, and a grammar error names line and column. */
static void test_openai_fields_grammar_and_json_mode_constrain_the_output(void **state)
{
    json_t *j, *j2, *c;
    size_t i;
    int st;

    st = front_call(port_of(state), "POST", "/v1/completions",
                    "{\"prompt\":\"hi\",\"max_tokens\":20,\"temperature\":1,\"n\":3,\"seed\":5,"
                    "\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\" | [0-9]{2}\"}",
                    &j, NULL);
    assert_int_equal(st, 200);
    json_array_foreach(json_object_get(j, "choices"), i, c) {
        const char *t = json_string_value(json_object_get(c, "text"));

        assert_non_null(t);
        assert_true(strcmp(t, "yes") == 0 || strcmp(t, "no") == 0 ||
                    (strlen(t) == 2 && t[0] >= '0' && t[0] <= '9' && t[1] >= '0' && t[1] <= '9'));
        assert_string_equal(json_string_value(json_object_get(c, "finish_reason")), "stop");
    }
    st = front_call(port_of(state), "POST", "/v1/completions",
                    "{\"prompt\":\"hi\",\"max_tokens\":20,\"temperature\":1,\"n\":3,\"seed\":5,"
                    "\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\" | [0-9]{2}\"}",
                    &j2, NULL);
    assert_int_equal(st, 200);
    assert_true(json_equal(json_object_get(j, "choices"), json_object_get(j2, "choices")));
    json_decref(j);
    json_decref(j2);
    st = front_call(port_of(state), "POST", "/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":200,"
                    "\"temperature\":1,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                    "{\"name\":\"p\",\"schema\":{\"type\":\"object\",\"properties\":{\"ok\":"
                    "{\"type\":\"boolean\"},\"n\":{\"enum\":[1,2]}},\"required\":[\"ok\",\"n\"]}}}}",
                    &j, NULL);
    assert_int_equal(st, 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    const char *content = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
    json_error_t je;
    json_t *v = json_loads(content, 0, &je);

    assert_non_null(v);
    assert_true(json_is_boolean(json_object_get(v, "ok")));
    assert_true(json_is_integer(json_object_get(v, "n")));
    json_decref(v);
    json_decref(j);
    /* logprobs are those of the masked distribution: at the first step only 'y' and 'n' are
     * alternatives, and their probabilities sum to 1 */
    st = front_call(port_of(state), "POST", "/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,"
                    "\"logprobs\":true,\"top_logprobs\":5,"
                    "\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\"}",
                    &j, NULL);
    assert_int_equal(st, 200);
    c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *first = json_array_get(json_object_get(json_object_get(c, "logprobs"), "content"), 0);
    json_t *top = json_object_get(first, "top_logprobs");
    double mass = 0;

    assert_int_equal(json_array_size(top), 2);
    json_array_foreach(top, i, v) {
        const char *t = json_string_value(json_object_get(v, "token"));

        assert_true(strcmp(t, "y") == 0 || strcmp(t, "n") == 0);
        mass += exp(json_number_value(json_object_get(v, "logprob")));
    }
    assert_true(fabs(mass - 1.0) < 1e-3);
    json_decref(j);
    st = front_call(port_of(state), "POST", "/v1/completions",
                    "{\"prompt\":\"a\",\"grammar\":\"root ::= x\\nx ::= [a-\"}", &j, NULL);
    assert_error(st, j, 400, "grammar", NULL);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                           "line 2, column 7"));
    json_decref(j);
}

static void test_openai_fields_models_lists_context_length(void **state)
{
    json_t *j;
    int st = front_call(port_of(state), "GET", "/v1/models", NULL, &j, NULL);
    assert_int_equal(st, 200);
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "mock");
    assert_int_equal(json_integer_value(json_object_get(m, "context_length")), 256);
    json_decref(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openai_fields_other_model_is_404),
        cmocka_unit_test(test_openai_fields_unsupported_fields_are_400_naming_them),
        cmocka_unit_test(test_openai_fields_n_gives_indexed_choices_and_summed_usage),
        cmocka_unit_test(test_openai_fields_n_streams_interleaved_chunks_then_usage),
        cmocka_unit_test(test_openai_fields_chat_logprobs_have_tokens_and_alternatives),
        cmocka_unit_test(test_openai_fields_completion_logprobs_shape),
        cmocka_unit_test(test_openai_fields_echo_and_token_prompt),
        cmocka_unit_test(test_openai_fields_models_lists_context_length),
        cmocka_unit_test(test_openai_fields_grammar_and_json_mode_constrain_the_output),
    };
    return cmocka_run_group_tests_name("openai_fields", tests, group_setup, group_teardown);
}
