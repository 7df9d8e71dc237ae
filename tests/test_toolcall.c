/* The reply parser: every format's calls, byte-exact arguments, text around calls kept as
 * content, reasoning split off, markers split across pushes at every byte, malformed calls
 * released as content, and the format chosen from the real templates in ../shared. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "../server/toolcall.h"

struct got {
    char content[8192], reasoning[8192];
    size_t n_content, n_reasoning;
    uint32_t n_calls;
    char name[8][64];
    char args[8][1024];
};

static int collect(void *arg, const struct toolcall_piece *p)
{
    struct got *g = arg;
    switch (p->kind) {
    case TOOLCALL_CONTENT:
        assert_true(g->n_content + p->len < sizeof(g->content));
        memcpy(g->content + g->n_content, p->text, p->len);
        g->n_content += p->len;
        break;
    case TOOLCALL_REASONING:
        assert_true(g->n_reasoning + p->len < sizeof(g->reasoning));
        memcpy(g->reasoning + g->n_reasoning, p->text, p->len);
        g->n_reasoning += p->len;
        break;
    case TOOLCALL_CALL:
        assert_int_equal(p->index, g->n_calls);
        assert_true(g->n_calls < 8 && p->name_len < 64 && p->len < 1024);
        memcpy(g->name[g->n_calls], p->name, p->name_len);
        memcpy(g->args[g->n_calls], p->text, p->len);
        g->n_calls++;
        break;
    }
    return 0;
}

static bool utf8_cont(char c)
{
    return ((unsigned char)c & 0xC0) == 0x80;
}

/* Parse text fed in pieces of step bytes (moved to character boundaries; 0: whole). */
static void parse(const struct toolcall_config *c, const char *text, size_t step, struct got *g)
{
    memset(g, 0, sizeof(*g));
    struct toolcall *t = toolcall_create(c);
    assert_non_null(t);
    size_t n = strlen(text), i = 0;
    while (i < n) {
        size_t k = step ? step : n;
        if (i + k > n)
            k = n - i;
        while (i + k < n && utf8_cont(text[i + k]))
            k++;
        assert_int_equal(toolcall_push(t, text + i, k, collect, g), 0);
        i += k;
    }
    assert_int_equal(toolcall_finish(t, collect, g), 0);
    toolcall_destroy(t);
}

/* The same result whole and at every piece size. */
static void check(enum toolcall_format f, bool reasoning, const char *text, const char *content,
                  const char *reason, uint32_t n_calls, const char *const *names,
                  const char *const *args)
{
    struct toolcall_config c = {.format = f, .reasoning = reasoning, .parallel = true};
    size_t n = strlen(text);
    for (size_t step = 0; step <= n; step++) {
        struct got g;
        parse(&c, text, step, &g);
        if (strcmp(g.content, content) != 0 || g.n_calls != n_calls)
            fprintf(stderr, "step %zu: content '%s' calls %u\n", step, g.content, g.n_calls);
        assert_string_equal(g.content, content);
        assert_string_equal(g.reasoning, reason ? reason : "");
        assert_int_equal(g.n_calls, n_calls);
        for (uint32_t i = 0; i < n_calls; i++) {
            assert_string_equal(g.name[i], names[i]);
            assert_string_equal(g.args[i], args[i]);
        }
    }
}

static const char *const weather[] = {"get_weather"};
static const char *const paris[] = {"{\"city\": \"Paris\", \"unit\":\"c\"}"};

static void test_hermes_call_with_text_before(void **state)
{
    (void)state;
    check(TOOLCALL_FORMAT_HERMES, false,
          "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
          "\"Paris\", \"unit\":\"c\"}}\n</tool_call>\n",
          "Let me look.", NULL, 1, weather, paris);
}

static void test_hermes_two_calls(void **state)
{
    (void)state;
    static const char *const names[] = {"a", "b"};
    static const char *const args[] = {"{}", "{\"x\":[1,2,{\"y\":\"}\"}]}"};
    check(TOOLCALL_FORMAT_HERMES, false,
          "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"arguments\":"
          "{\"x\":[1,2,{\"y\":\"}\"}]},\"name\":\"b\"}</tool_call>",
          "", NULL, 2, names, args);
}

static void test_hermes_arguments_as_json_string_unwrapped(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\":\"Paris\"}"};
    check(TOOLCALL_FORMAT_HERMES, false,
          "<tool_call>{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}"
          "</tool_call>",
          "", NULL, 1, weather, args);
}

static void test_qwen3_coder_xml_call(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\":\"Paris\",\"days\":3,\"note\":\"two\\nlines\"}"};
    check(TOOLCALL_FORMAT_HERMES, false,
          "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
          "<parameter=days>\n3\n</parameter>\n<parameter=note>\ntwo\nlines\n</parameter>\n"
          "</function>\n</tool_call>",
          "Checking.", NULL, 1, weather, args);
    const char *bad = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n"
                      "</tool_call>";
    check(TOOLCALL_FORMAT_HERMES, false, bad, bad, NULL, 0, NULL, NULL);
}

static void test_glm_arg_key_call(void **state)
{
    (void)state;
    static const char *const names[] = {"get_weather", "get_time"};
    static const char *const args[] = {"{\"city\":\"Paris\",\"days\":[1,2]}", "{}"};
    check(TOOLCALL_FORMAT_HERMES, true,
          "<think>need it</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
          "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>[1,2]</arg_value>\n"
          "</tool_call>\n<tool_call>get_time\n</tool_call>",
          "", "need it", 2, names, args);
    const char *bad = "<tool_call>get_weather\n<arg_key>city</arg_key>\n</tool_call>";
    check(TOOLCALL_FORMAT_HERMES, false, bad, bad, NULL, 0, NULL, NULL);
}

static void test_hermes_malformed_call_is_content(void **state)
{
    (void)state;
    const char *bad = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": }"
                      "</tool_call>";
    check(TOOLCALL_FORMAT_HERMES, false, bad, bad, NULL, 0, NULL, NULL);
    const char *unclosed = "ok <tool_call>{\"name\": \"x\"";
    check(TOOLCALL_FORMAT_HERMES, false, unclosed, unclosed, NULL, 0, NULL, NULL);
    const char *noname = "<tool_call>{\"arguments\": {}}</tool_call>";
    check(TOOLCALL_FORMAT_HERMES, false, noname, noname, NULL, 0, NULL, NULL);
}

static void test_hermes_unclosed_valid_call_at_end_is_a_call(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\": \"Paris\", \"unit\":\"c\"}"};
    check(TOOLCALL_FORMAT_HERMES, false,
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
          "\"unit\":\"c\"}}\n",
          "", NULL, 1, weather, args);
}

static void test_plain_text_and_lookalikes_pass(void **state)
{
    (void)state;
    const char *t = "a < b and <tool> or <tool_cal then </tool_call> too\n";
    check(TOOLCALL_FORMAT_HERMES, false, t, t,
          NULL, 0, NULL, NULL);
}

static void test_llama3_bare_json_call(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\": \"Paris\"}"};
    check(TOOLCALL_FORMAT_LLAMA3, false,
          "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", NULL, 1,
          weather, args);
    /* JSON that is not a call is the reply */
    check(TOOLCALL_FORMAT_LLAMA3, false, "{\"answer\": 42}", "{\"answer\": 42}", NULL, 0, NULL,
          NULL);
}

static void test_llama3_python_tag(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\": \"Paris\"}"};
    check(TOOLCALL_FORMAT_LLAMA3, false,
          "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
          NULL, 1, weather, args);
    static const char *const names[] = {"brave_search"};
    static const char *const q[] = {"{\"query\":\"kiln \\\"fire\\\"\",\"n\":3}"};
    check(TOOLCALL_FORMAT_LLAMA3, false,
          "<|python_tag|>brave_search.call(query=\"kiln \\\"fire\\\"\", n=3)", "", NULL, 1, names,
          q);
}

static void test_mistral_array_of_calls(void **state)
{
    (void)state;
    static const char *const names[] = {"get_weather", "get_time"};
    static const char *const args[] = {"{\"city\": \"Paris\"}", "{\"tz\": \"CET\"}"};
    check(TOOLCALL_FORMAT_MISTRAL, false,
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
          "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}, \"id\": \"abcdefghi\"}]",
          "", NULL, 2, names, args);
}

static void test_devstral_name_args_calls(void **state)
{
    (void)state;
    static const char *const names[] = {"get_weather", "get_time"};
    static const char *const args[] = {"{\"city\": \"Paris\"}", "{}"};
    check(TOOLCALL_FORMAT_MISTRAL, false,
          "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}", "",
          NULL, 2, names, args);
    const char *bad = "[TOOL_CALLS]get_weather[ARGS]{\"city\": Paris}";
    check(TOOLCALL_FORMAT_MISTRAL, false, bad, bad, NULL, 0, NULL, NULL);
}

static void test_granite_and_phi4_calls(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\": \"Paris\"}"};
    check(TOOLCALL_FORMAT_GRANITE, false,
          "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", "",
          NULL, 1, weather, args);
    check(TOOLCALL_FORMAT_GRANITE, false,
          "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"
          "<|/tool_call|>",
          "", NULL, 1, weather, args);
}

static void test_deepseek_r1_calls_after_thinking(void **state)
{
    (void)state;
    static const char *const names[] = {"get_weather", "get_time"};
    static const char *const args[] = {"{\"city\": \"Paris\"}", "{}"};
    check(TOOLCALL_FORMAT_DEEPSEEK_R1, true,
          "<think>\nThe user wants weather.\n</think>\n\n"
          "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
          "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n"
          "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
          "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
          "", "The user wants weather.", 2, names, args);
}

static void test_functionary_recipient_lines(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\": \"Paris\"}"};
    check(TOOLCALL_FORMAT_FUNCTIONARY, false,
          "all\nChecking.>>>get_weather\n{\"city\": \"Paris\"}", "Checking.", NULL, 1, weather,
          args);
    check(TOOLCALL_FORMAT_FUNCTIONARY, false, "all\nJust text.", "Just text.", NULL, 0, NULL,
          NULL);
}

static void test_any_format_reads_every_marker(void **state)
{
    (void)state;
    static const char *const args[] = {"{\"city\": \"Paris\"}"};
    check(TOOLCALL_FORMAT_ANY, false,
          "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
          "</tool_call>",
          "", NULL, 1, weather, args);
    check(TOOLCALL_FORMAT_ANY, false,
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", "",
          NULL, 1, weather, args);
}

static void test_reasoning_split_from_answer(void **state)
{
    (void)state;
    check(TOOLCALL_FORMAT_NONE, true, "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.", "It is 4.",
          "Hmm, 2+2.", 0, NULL, NULL);
    check(TOOLCALL_FORMAT_NONE, true, "No thinking here.", "No thinking here.", NULL, 0, NULL,
          NULL);
    /* Granite 3.3: the answer inside <response></response> */
    check(TOOLCALL_FORMAT_GRANITE, true, "<think>Plan.</think><response>Done.</response>",
          "Done.", "Plan.", 0, NULL, NULL);
    check(TOOLCALL_FORMAT_NONE, true, "<think>Plan.</think>\n<response>\nDone.\n</response>\n",
          "Done.", "Plan.", 0, NULL, NULL);
    /* cut by max_tokens inside the block: all of it is reasoning */
    check(TOOLCALL_FORMAT_NONE, true, "<think>still going", "", "still going", 0, NULL, NULL);
}

static void test_reasoning_opened_by_the_template(void **state)
{
    (void)state;
    struct toolcall_config c = {.format = TOOLCALL_FORMAT_HERMES, .reasoning = true,
                                .in_think = true, .parallel = true};
    const char *text = "I should call it.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    for (size_t step = 0; step <= strlen(text); step++) {
        struct got g;
        parse(&c, text, step, &g);
        assert_string_equal(g.reasoning, "I should call it.");
        assert_string_equal(g.content, "");
        assert_int_equal(g.n_calls, 1);
        assert_string_equal(g.args[0], "{\"city\": \"Paris\"}");
    }
    assert_true(toolcall_prompt_in_think("<｜Assistant｜><think>\n", strlen("<｜Assistant｜><think>\n")));
    assert_false(toolcall_prompt_in_think("<|im_start|>assistant\n", 22));
}

static void test_parallel_off_keeps_the_first_call(void **state)
{
    (void)state;
    struct toolcall_config c = {.format = TOOLCALL_FORMAT_HERMES};
    struct got g;
    parse(&c,
          "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\","
          "\"arguments\":{}}</tool_call>",
          1, &g);
    assert_int_equal(g.n_calls, 1);
    assert_string_equal(g.name[0], "a");
    assert_string_equal(g.content, "");
}

static void test_json_span_edges(void **state)
{
    (void)state;
    assert_int_equal(toolcall_json_span("{\"a\": [1, 2.5e3, \"\\u00e9\"]} x", 28), 27);
    assert_int_equal(toolcall_json_span("{\"a\": [1, 2", 11), 0);
    assert_int_equal(toolcall_json_span("{\"a\" 1}", 7), -EINVAL);
    assert_int_equal(toolcall_json_span("{\"a\": tru", 9), 0);
    assert_int_equal(toolcall_json_span("{\"a\": trux}", 11), -EINVAL);
    char deep[200];
    memset(deep, '[', sizeof(deep));
    assert_int_equal(toolcall_json_span(deep, sizeof(deep)), -EINVAL);
}

/* The format each real template writes, from its text. */
static void test_format_detected_from_real_templates(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        enum toolcall_format f;
        bool thinks;
    } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", TOOLCALL_FORMAT_HERMES, false},
        {"Qwen-Qwen3-0.6B.jinja", TOOLCALL_FORMAT_HERMES, true},
        {"Qwen3.5-4B.jinja", TOOLCALL_FORMAT_HERMES, true},
        {"GLM-4.6.jinja", TOOLCALL_FORMAT_HERMES, true},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", TOOLCALL_FORMAT_HERMES, false},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", TOOLCALL_FORMAT_LLAMA3, false},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", TOOLCALL_FORMAT_LLAMA3, false},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", TOOLCALL_FORMAT_MISTRAL, false},
        {"unsloth-mistral-Devstral-Small-2507.jinja", TOOLCALL_FORMAT_MISTRAL, false},
        {"ibm-granite-granite-3.3-2B-Instruct.jinja", TOOLCALL_FORMAT_GRANITE, true},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TOOLCALL_FORMAT_DEEPSEEK_R1, true},
        {"meetkai-functionary-medium-v3.2.jinja", TOOLCALL_FORMAT_FUNCTIONARY, false},
        {"HuggingFaceTB-SmolLM3-3B.jinja", TOOLCALL_FORMAT_NONE, true},
        {"google-gemma-2-2b-it.jinja", TOOLCALL_FORMAT_NONE, false},
    };
    const char *shared = getenv("KILN_SHARED");
    if (!shared)
        skip();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[512], *buf = malloc(1 << 20);
        assert_non_null(buf);
        snprintf(path, sizeof(path), "%s/templates/%s", shared, cases[i].file);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        size_t n = fread(buf, 1, (1 << 20) - 1, fp);
        fclose(fp);
        if (toolcall_format_detect(buf, n) != cases[i].f)
            fprintf(stderr, "%s: %s\n", cases[i].file,
                    toolcall_format_name(toolcall_format_detect(buf, n)));
        assert_int_equal(toolcall_format_detect(buf, n), cases[i].f);
        assert_int_equal(toolcall_template_thinks(buf, n), cases[i].thinks);
        free(buf);
    }
}

/* Random replies made of markers and JSON pieces, in every format and at random piece
 * sizes: every call released has arguments that are one JSON object, and no more text comes
 * out than went in. */
static int check_piece(void *arg, const struct toolcall_piece *p)
{
    size_t *text = arg;
    if (p->kind != TOOLCALL_CALL) {
        *text += p->len;
        return 0;
    }
    assert_true(p->name_len > 0);
    json_t *a = json_loadb(p->text, p->len, JSON_DECODE_ANY, NULL);
    assert_true(json_is_object(a));
    json_decref(a);
    return 0;
}

static void test_random_replies_keep_the_invariants(void **state)
{
    (void)state;
    static const char *const frags[] = {
        "<tool_call>", "</tool_call>", "{", "}", "[", "]", "\"name\"", ": ", "\"f\"", ", ",
        "\"arguments\"", "\"parameters\"", "<think>", "</think>", "[TOOL_CALLS]", "[ARGS]",
        "<|tool_call|>", "<|/tool_call|>", "<|python_tag|>", ".call(", "q=", "\"x\"", ")",
        ">>>", "all", "\n", " ", "x", "<function=f>", "<parameter=k>", "</parameter>",
        "</function>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "\xc3\xa9", "\\", "\"", "```json", "```", "1", "null",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>function",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
    };
    const size_t n_frags = sizeof(frags) / sizeof(frags[0]);
    uint64_t x = 88172645463325252ull;
    char text[2048];
    for (int iter = 0; iter < 4000; iter++) {
        size_t len = 0, parts;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        parts = 1 + x % 48;
        for (size_t k = 0; k < parts; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const char *f = frags[x % n_frags];
            size_t fl = strlen(f);
            if (len + fl >= sizeof(text))
                break;
            memcpy(text + len, f, fl);
            len += fl;
        }
        struct toolcall_config c = {.format = (enum toolcall_format)(iter % TOOLCALL_FORMAT_COUNT),
                                    .reasoning = iter & 8, .in_think = iter & 16,
                                    .parallel = iter & 32};
        struct toolcall *t = toolcall_create(&c);
        size_t out = 0, step = 1 + (size_t)(x >> 40) % 9;
        assert_non_null(t);
        for (size_t i = 0; i < len;) {
            size_t k = i + step <= len ? step : len - i;
            while (i + k < len && utf8_cont(text[i + k]))
                k++;
            assert_int_equal(toolcall_push(t, text + i, k, check_piece, &out), 0);
            i += k;
        }
        assert_int_equal(toolcall_finish(t, check_piece, &out), 0);
        assert_true(out <= len);
        toolcall_destroy(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes_call_with_text_before),
        cmocka_unit_test(test_hermes_two_calls),
        cmocka_unit_test(test_hermes_arguments_as_json_string_unwrapped),
        cmocka_unit_test(test_qwen3_coder_xml_call),
        cmocka_unit_test(test_glm_arg_key_call),
        cmocka_unit_test(test_hermes_malformed_call_is_content),
        cmocka_unit_test(test_hermes_unclosed_valid_call_at_end_is_a_call),
        cmocka_unit_test(test_plain_text_and_lookalikes_pass),
        cmocka_unit_test(test_llama3_bare_json_call),
        cmocka_unit_test(test_llama3_python_tag),
        cmocka_unit_test(test_mistral_array_of_calls),
        cmocka_unit_test(test_devstral_name_args_calls),
        cmocka_unit_test(test_granite_and_phi4_calls),
        cmocka_unit_test(test_deepseek_r1_calls_after_thinking),
        cmocka_unit_test(test_functionary_recipient_lines),
        cmocka_unit_test(test_any_format_reads_every_marker),
        cmocka_unit_test(test_reasoning_split_from_answer),
        cmocka_unit_test(test_reasoning_opened_by_the_template),
        cmocka_unit_test(test_parallel_off_keeps_the_first_call),
        cmocka_unit_test(test_json_span_edges),
        cmocka_unit_test(test_random_replies_keep_the_invariants),
        cmocka_unit_test(test_format_detected_from_real_templates),
    };
    return cmocka_run_group_tests_name("toolcall", tests, NULL, NULL);
}
