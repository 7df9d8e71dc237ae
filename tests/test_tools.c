/* Integration tests of tool calls and reasoning through HTTP: the mock model replies with
 * each family's raw call markup (its byte tokenizer splits every marker across tokens), and
 * whole and streamed chat replies must carry exactly the calls (byte-exact arguments), the
 * text around them as content, the thinking as reasoning_content, and no markup; a malformed
 * call comes back as content; the request's tools, tool_choice, developer and tool messages
 * are checked and accepted. */
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

#define TOOLS "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":" \
              "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}," \
              "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]"
#define ASK   "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"}," \
              "{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"tools\":" TOOLS

struct want {
    const char *content; /* NULL: content must be null (whole) / absent (stream) */
    const char *reasoning;
    uint32_t n_calls;
    const char *name[3];
    const char *args[3];
    const char *finish;
};

struct call_acc {
    char id[64], name[64], args[1024];
    int n_heads; /* chunks that carried an id */
};

struct acc {
    char content[4096], reasoning[4096], finish[32];
    bool content_seen;
    uint32_t n_calls;
    struct call_acc calls[4];
};

static void cat(char *dst, size_t cap, const char *s)
{
    strncat(dst, s, cap - strlen(dst) - 1);
}

static void check_acc(const struct acc *a, const struct want *w)
{
    assert_string_equal(a->content, w->content ? w->content : "");
    assert_string_equal(a->reasoning, w->reasoning ? w->reasoning : "");
    assert_int_equal(a->n_calls, w->n_calls);
    for (uint32_t i = 0; i < w->n_calls; i++) {
        assert_string_equal(a->calls[i].name, w->name[i]);
        assert_string_equal(a->calls[i].args, w->args[i]);
        assert_true(strlen(a->calls[i].id) > 0);
    }
    assert_string_equal(a->finish, w->finish);
}

/* A whole reply into acc. */
static void whole(int port, const char *body, struct acc *a, bool *content_null)
{
    json_t *j;
    memset(a, 0, sizeof(*a));
    int st = front_call(port, "POST", "/v1/chat/completions", body, &j, NULL);
    assert_int_equal(st, 200);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *m = json_object_get(c, "message"), *v, *call;
    snprintf(a->finish, sizeof(a->finish), "%s",
             json_string_value(json_object_get(c, "finish_reason")));
    v = json_object_get(m, "content");
    *content_null = json_is_null(v);
    if (json_is_string(v))
        cat(a->content, sizeof(a->content), json_string_value(v));
    if (json_is_string(v = json_object_get(m, "reasoning_content")))
        cat(a->reasoning, sizeof(a->reasoning), json_string_value(v));
    size_t i;
    json_array_foreach(json_object_get(m, "tool_calls"), i, call) {
        struct call_acc *ca = &a->calls[a->n_calls++];
        json_t *fn = json_object_get(call, "function");
        assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
        snprintf(ca->id, sizeof(ca->id), "%s", json_string_value(json_object_get(call, "id")));
        snprintf(ca->name, sizeof(ca->name), "%s", json_string_value(json_object_get(fn, "name")));
        assert_true(json_is_string(json_object_get(fn, "arguments")));
        cat(ca->args, sizeof(ca->args), json_string_value(json_object_get(fn, "arguments")));
    }
    json_decref(j);
}

/* A streamed reply into acc: the deltas joined as a client joins them. */
static void streamed(int port, const char *body, struct acc *a)
{
    struct http_stream *s = NULL;
    struct sse_event ev;
    int rc;
    char req[8192];

    memset(a, 0, sizeof(*a));
    snprintf(req, sizeof(req), "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
    assert_int_equal(http_stream_open(port, "POST", "/v1/chat/completions", NULL, req, 10000, &s),
                     200);
    while ((rc = sse_next(s, &ev, 10000)) == 1) {
        if (ev.done)
            break;
        json_t *j = json_loads(ev.data, 0, NULL), *v, *tc;
        assert_non_null(j);
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        json_t *d = json_object_get(c, "delta");
        if (json_is_string(v = json_object_get(c, "finish_reason")))
            snprintf(a->finish, sizeof(a->finish), "%s", json_string_value(v));
        if (json_is_string(v = json_object_get(d, "content")))
            cat(a->content, sizeof(a->content), json_string_value(v));
        if (json_is_string(v = json_object_get(d, "reasoning_content")))
            cat(a->reasoning, sizeof(a->reasoning), json_string_value(v));
        size_t i;
        json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
            json_int_t k = json_integer_value(json_object_get(tc, "index"));
            json_t *fn = json_object_get(tc, "function");
            assert_true(k >= 0 && k < 4);
            struct call_acc *ca = &a->calls[k];
            if (json_is_string(v = json_object_get(tc, "id"))) {
                /* a call's first chunk: id, type and name, before any arguments */
                assert_int_equal(k, a->n_calls);
                a->n_calls++;
                ca->n_heads++;
                snprintf(ca->id, sizeof(ca->id), "%s", json_string_value(v));
                assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
                assert_true(json_is_string(json_object_get(fn, "name")));
                snprintf(ca->name, sizeof(ca->name), "%s",
                         json_string_value(json_object_get(fn, "name")));
            } else {
                assert_true(k < a->n_calls); /* arguments only after the head */
                assert_null(json_object_get(fn, "name"));
            }
            if (json_is_string(v = json_object_get(fn, "arguments")))
                cat(ca->args, sizeof(ca->args), json_string_value(v));
        }
        json_decref(j);
    }
    assert_int_equal(rc, 1);
    http_stream_close(s);
    for (uint32_t i = 0; i < a->n_calls; i++)
        assert_int_equal(a->calls[i].n_heads, 1);
}

/* Serve reply with the mock (extra: more flags, NULL-terminated) and check body's answer. */
static void run_case(const char *reply, const char *const *extra, const char *body,
                     const struct want *w)
{
    const char *args[16] = {"--model", "mock", "--workers", "1", "--mock-reply", reply};
    size_t n = 6;
    for (size_t i = 0; extra && extra[i]; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    int port = kiln_port(p);
    struct acc a;
    bool content_null = false;

    whole(port, body, &a, &content_null);
    check_acc(&a, w);
    assert_int_equal(content_null, w->content == NULL);
    streamed(port, body, &a);
    check_acc(&a, w);
    assert_int_equal(front_stop(p), 0);
}

static void test_tools_hermes_call_after_text(void **state)
{
    (void)state;
    struct want w = {"Let me check.", NULL, 1, {"get_weather"}, {"{\"city\": \"Paris\"}"},
                     "tool_calls"};
    run_case("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
             "{\"city\": \"Paris\"}}\n</tool_call>",
             NULL, ASK "}", &w);
}

static void test_tools_qwen3_coder_xml_call(void **state)
{
    (void)state;
    struct want w = {NULL, NULL, 1, {"get_weather"}, {"{\"city\":\"Paris\"}"}, "tool_calls"};
    run_case("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
             "</function>\n</tool_call>",
             NULL, ASK "}", &w);
}

static void test_tools_llama3_python_tag_and_bare_json(void **state)
{
    (void)state;
    struct want w = {NULL, NULL, 1, {"get_weather"}, {"{\"city\":  \"Paris\"}"}, "tool_calls"};
    run_case("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\":  \"Paris\"}}",
             NULL, ASK "}", &w);
    run_case("{\"name\": \"get_weather\", \"parameters\": {\"city\":  \"Paris\"}}", NULL,
             ASK "}", &w);
}

static void test_tools_mistral_two_calls(void **state)
{
    (void)state;
    struct want w = {NULL, NULL, 2, {"get_weather", "get_time"},
                     {"{\"city\": \"Paris\\u00e9\"}", "{}"}, "tool_calls"};
    run_case("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
             "\"Paris\\u00e9\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
             NULL, ASK "}", &w);
    /* Devstral's form: [TOOL_CALLS]name[ARGS]{...} per call */
    run_case("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\\u00e9\"}[TOOL_CALLS]get_time[ARGS]{}",
             NULL, ASK "}", &w);
}

static void test_tools_granite_call(void **state)
{
    (void)state;
    struct want w = {NULL, NULL, 1, {"get_time"}, {"{\"tz\": \"CET\"}"}, "tool_calls"};
    run_case("<|tool_call|>[{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]", NULL,
             ASK "}", &w);
}

static void test_tools_deepseek_r1_thinks_then_calls(void **state)
{
    (void)state;
    struct want w = {NULL, "Need the weather.", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"},
                     "tool_calls"};
    run_case("<think>\nNeed the weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
             "function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```"
             "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
             NULL, ASK "}", &w);
}

static void test_tools_functionary_recipient(void **state)
{
    (void)state;
    static const char *const fmt[] = {"--tool-call-format", "functionary", NULL};
    struct want w = {"Checking.", NULL, 1, {"get_weather"}, {"{\"city\": \"Paris\"}"},
                     "tool_calls"};
    run_case("all\nChecking.>>>get_weather\n{\"city\": \"Paris\"}", fmt, ASK "}", &w);
}

static void test_tools_malformed_call_is_content(void **state)
{
    (void)state;
    const char *bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n"
                      "</tool_call>";
    struct want w = {bad, NULL, 0, {NULL}, {NULL}, "stop"};
    run_case(bad, NULL, ASK "}", &w);
}

static void test_tools_reasoning_split_and_inline(void **state)
{
    (void)state;
    const char *reply = "<think>\nTwo and two.\n</think>\n\nFour.";
    struct want w = {"Four.", "Two and two.", 0, {NULL}, {NULL}, "stop"};
    run_case(reply, NULL, "{\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"}]}", &w);
    struct want inl = {reply, NULL, 0, {NULL}, {NULL}, "stop"};
    run_case(reply, NULL,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"}],\"reasoning_format\":"
             "\"none\",\"chat_template_kwargs\":{\"enable_thinking\":true}}",
             &inl);
}

static void test_tools_choice_none_leaves_markup_as_content(void **state)
{
    (void)state;
    const char *reply = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
    struct want w = {reply, NULL, 0, {NULL}, {NULL}, "stop"};
    run_case(reply, NULL, ASK ",\"tool_choice\":\"none\"}", &w);
}

static void test_tools_format_none_reads_no_calls(void **state)
{
    (void)state;
    static const char *const fmt[] = {"--tool-call-format", "none", NULL};
    const char *reply = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
    struct want w = {reply, NULL, 0, {NULL}, {NULL}, "stop"};
    run_case(reply, fmt, ASK "}", &w);
}

static void test_tools_parallel_off_keeps_first_call(void **state)
{
    (void)state;
    struct want w = {NULL, NULL, 1, {"get_weather"}, {"{}"}, "tool_calls"};
    run_case("<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>\n"
             "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
             NULL, ASK ",\"parallel_tool_calls\":false}", &w);
}

/* The request side: a tool loop's second turn is accepted; wrong fields are 400s naming them. */
static void test_tools_request_fields_checked(void **state)
{
    (void)state;
    static const char *args[] = {"--model", "mock", "--workers", "1", NULL};
    struct kiln_proc *p = front_start(args);
    assert_non_null(p);
    int port = kiln_port(p);
    json_t *j;
    static const char *const ok[] = {
        ASK ",\"tool_choice\":\"required\"}",
        "{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":"
        "\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"user\",\"content\":"
        "[{\"type\":\"text\",\"text\":\"hi\"}]}],\"tools\":" TOOLS "}",
        ASK ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}}",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
        "\"w?\",\"name\":\"ann\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{"
        "\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
        "\"call_1\",\"content\":\"sunny\"}],\"tools\":" TOOLS "}",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int st = front_call(port, "POST", "/v1/chat/completions", ok[i], &j, NULL);
        if (st != 200)
            fprintf(stderr, "case %zu: %d\n", i, st);
        assert_int_equal(st, 200);
        json_decref(j);
    }
    static const struct {
        const char *body, *param, *needle;
    } bad[] = {
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\","
         "\"function\":{\"name\":\"f\",\"arguments\":\"{not json\"}}]}]}",
         "messages", "not valid JSON"},
        {ASK ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
         "tool_choice", "nope"},
        {ASK ",\"tool_choice\":\"sometimes\"}", "tool_choice", "tool_choice"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
         "\"function\",\"function\":{\"name\":\"bad name\"}}]}",
         "tools", "tools[0].function.name"},
        {ASK ",\"parallel_tool_calls\":1}", "parallel_tool_calls", "boolean"},
        {ASK ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
         "tool_choice", "cannot be combined"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages", "wizard"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_format\":\"x\"}",
         "reasoning_format", "reasoning_format"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":1}",
         "chat_template_kwargs", "object"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int st = front_call(port, "POST", "/v1/chat/completions", bad[i].body, &j, NULL);
        json_t *e = json_object_get(j, "error");
        assert_int_equal(st, 400);
        assert_string_equal(json_string_value(json_object_get(e, "param")), bad[i].param);
        assert_non_null(strstr(json_string_value(json_object_get(e, "message")), bad[i].needle));
        json_decref(j);
    }
    assert_int_equal(front_stop(p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tools_hermes_call_after_text),
        cmocka_unit_test(test_tools_qwen3_coder_xml_call),
        cmocka_unit_test(test_tools_llama3_python_tag_and_bare_json),
        cmocka_unit_test(test_tools_mistral_two_calls),
        cmocka_unit_test(test_tools_granite_call),
        cmocka_unit_test(test_tools_deepseek_r1_thinks_then_calls),
        cmocka_unit_test(test_tools_functionary_recipient),
        cmocka_unit_test(test_tools_malformed_call_is_content),
        cmocka_unit_test(test_tools_reasoning_split_and_inline),
        cmocka_unit_test(test_tools_choice_none_leaves_markup_as_content),
        cmocka_unit_test(test_tools_format_none_reads_no_calls),
        cmocka_unit_test(test_tools_parallel_off_keeps_first_call),
        cmocka_unit_test(test_tools_request_fields_checked),
    };
    return cmocka_run_group_tests_name("tools", tests, NULL, NULL);
}
