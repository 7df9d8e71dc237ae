/* The chat template through HTTP, on the mock: --chat-template-file renders chats with a real
 * Jinja template (Qwen2.5's, from ../shared/templates), POST /apply-template answers the prompt
 * without generating (add_generation_prompt on by default, off on request), tools and
 * chat_template_kwargs reach the template, a template that raises answers 400 with its own
 * message (Gemma 2 and a system message), a file the engine cannot parse falls back to the
 * family table with a warning naming the construct, and bad flags stop kiln at start. */
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

#include "front_util.h"

static char shared_tmpl[1024];

static const char *tmpl_path(const char *name)
{
    const char *shared = getenv("KILN_SHARED") ? getenv("KILN_SHARED") : "../shared";
    snprintf(shared_tmpl, sizeof(shared_tmpl), "%s/templates/%s", shared, name);
    return shared_tmpl;
}

static json_t *apply(int port, const char *body, int want_status)
{
    json_t *j = NULL;
    int st = front_call(port, "POST", "/apply-template", body, &j, NULL);
    if (st != want_status)
        fail_msg("/apply-template %s: status %d, want %d", body, st, want_status);
    assert_non_null(j);
    return j;
}

static void test_api_template_file_renders_and_apply_template_answers(void **state)
{
    (void)state;
    const char *args[] = {"--model", "mock", "--chat-template-file",
                          tmpl_path("Qwen-Qwen2.5-7B-Instruct.jinja"), NULL};
    struct kiln_proc *k = kiln_start(args);
    assert_non_null(k);
    int port = kiln_port(k);
    json_t *j = apply(port, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", 200);
    assert_string_equal(json_string_value(json_object_get(j, "prompt")),
                        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                        "helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\n");
    json_decref(j);
    j = apply(port, "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                    "{\"role\":\"user\",\"content\":\"Hi\"}],\"add_generation_prompt\":false}", 200);
    /* Qwen 2.5's template has no developer role: the message is its system message */
    assert_string_equal(json_string_value(json_object_get(j, "prompt")),
                        "<|im_start|>system\nBe brief.<|im_end|>\n"
                        "<|im_start|>user\nHi<|im_end|>\n");
    json_decref(j);
    /* tools reach the template */
    j = apply(port, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[{\"type\":"
                    "\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{}}}]}", 200);
    assert_non_null(strstr(json_string_value(json_object_get(j, "prompt")),
                           "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_time\""));
    json_decref(j);
    /* a malformed body and bad fields are 400s naming the field */
    j = apply(port, "{\"messages\":[]}", 400);
    json_decref(j);
    j = apply(port, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                    "\"add_generation_prompt\":1}", 400);
    json_decref(j);
    /* and the chat route generates from the same prompt */
    int st = front_call(port, "POST", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}",
                        &j, NULL);
    assert_int_equal(st, 200);
    assert_true(json_integer_value(json_object_get(json_object_get(j, "usage"),
                                                   "prompt_tokens")) > 20);
    json_decref(j);
    assert_int_equal(kiln_stop(k), 0);
    kiln_destroy(k);
}

static void test_api_template_that_raises_answers_400_with_its_message(void **state)
{
    (void)state;
    const char *args[] = {"--model", "mock", "--chat-template-file",
                          tmpl_path("google-gemma-2-2b-it.jinja"), NULL};
    struct kiln_proc *k = kiln_start(args);
    assert_non_null(k);
    int port = kiln_port(k);
    json_t *j = NULL;
    int st = front_call(port, "POST", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                        "{\"role\":\"user\",\"content\":\"Hi\"}]}", &j, NULL);
    assert_int_equal(st, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                        "System role not supported");
    json_decref(j);
    j = apply(port, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", 200);
    assert_string_equal(json_string_value(json_object_get(j, "prompt")),
                        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"); /* the mock has no BOS text */
    json_decref(j);
    assert_int_equal(kiln_stop(k), 0);
    kiln_destroy(k);
}

static void test_api_template_unparsable_file_falls_back_with_a_warning(void **state)
{
    (void)state;
    char path[] = "/tmp/kiln-tmpl-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *src = "<|im_start|>{% for m in messages %}{% frobnicate %}{% endfor %}";
    assert_int_equal(write(fd, src, strlen(src)), (ssize_t)strlen(src));
    close(fd);
    const char *args[] = {"--model", "mock", "--chat-template-file", path, NULL};
    struct kiln_proc *k = kiln_start(args);
    unlink(path);
    assert_non_null(k);
    int port = kiln_port(k);
    json_t *j = apply(port, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", 200);
    /* the family its text shows (chatml), and the warning names the construct */
    assert_string_equal(json_string_value(json_object_get(j, "prompt")),
                        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    json_decref(j);
    assert_true(kiln_wait_output(k, "frobnicate", 10000));
    assert_true(kiln_wait_output(k, "'chatml' family", 10000));
    assert_int_equal(kiln_stop(k), 0);
    kiln_destroy(k);
}

static void test_api_template_bad_flags_stop_kiln_at_start(void **state)
{
    (void)state;
    const char *missing[] = {"--model", "mock", "--chat-template-file", "/nonexistent/t.jinja",
                             NULL};
    assert_null(kiln_start(missing));
    const char *both[] = {"--model", "mock", "--chat-template", "chatml", "--chat-template-file",
                          tmpl_path("google-gemma-2-2b-it.jinja"), NULL};
    assert_null(kiln_start(both));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_template_file_renders_and_apply_template_answers),
        cmocka_unit_test(test_api_template_that_raises_answers_400_with_its_message),
        cmocka_unit_test(test_api_template_unparsable_file_falls_back_with_a_warning),
        cmocka_unit_test(test_api_template_bad_flags_stop_kiln_at_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
