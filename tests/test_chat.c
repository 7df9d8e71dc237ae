/* chat: each family renders system + user + assistant + user exactly as its official template
 * does, detection from excerpts of the real Jinja templates, BOS/EOS texts from the file,
 * unknown roles refused. */
#include "chat.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf.h"
#include "lib/gguf_write.h"

static const struct chat_msg convo[] = {
    {"system", "You are helpful."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "How are you?"},
};
#define CONVO_N (sizeof(convo) / sizeof(convo[0]))

static void expect_render(enum chat_family f, const char *bos, const char *eos,
                          const struct chat_msg *m, size_t n, bool gen, const char *want)
{
    struct chat_template t = {.family = f};
    char err[256] = "";
    snprintf(t.bos, sizeof(t.bos), "%s", bos);
    snprintf(t.eos, sizeof(t.eos), "%s", eos);
    char *got = chat_render(&t, m, n, gen, err, sizeof(err));
    if (!got)
        fail_msg("render failed: %s", err);
    if (strcmp(got, want))
        fail_msg("%s:\n got: \"%s\"\nwant: \"%s\"", chat_family_name(f), got, want);
    free(got);
}

static void test_chat_chatml_renders_turns_and_generation_prompt(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_CHATML, "", "<|im_end|>", convo, CONVO_N, true,
                  "<|im_start|>system\nYou are helpful.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\nHow are you?<|im_end|>\n"
                  "<|im_start|>assistant\n");
    expect_render(CHAT_FAMILY_CHATML, "", "", convo + 1, 1, false,
                  "<|im_start|>user\nHi<|im_end|>\n");
}

static void test_chat_llama2_folds_system_into_first_inst(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_LLAMA2, "<s>", "</s>", convo, CONVO_N, true,
                  "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
                  "<s>[INST] How are you? [/INST]");
    /* content is stripped, as the template's .strip() does */
    const struct chat_msg m[] = {{"user", "  padded \n"}};
    expect_render(CHAT_FAMILY_LLAMA2, "<s>", "</s>", m, 1, true, "<s>[INST] padded [/INST]");
}

static void test_chat_llama3_renders_headers_and_bos(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_LLAMA3, "<|begin_of_text|>", "<|eot_id|>", convo, CONVO_N, true,
                  "<|begin_of_text|>"
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_render(CHAT_FAMILY_LLAMA3, "<|begin_of_text|>", "<|eot_id|>", convo + 1, 1, false,
                  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

static void test_chat_mistral_prepends_system_to_first_user(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_MISTRAL, "<s>", "</s>", convo, CONVO_N, true,
                  "<s>[INST] You are helpful.\n\nHi [/INST]Hello!</s>"
                  "[INST] How are you? [/INST]");
}

static void test_chat_zephyr_ends_turns_with_eos_newline(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_ZEPHYR, "<s>", "</s>", convo, CONVO_N, true,
                  "<|system|>\nYou are helpful.</s>\n"
                  "<|user|>\nHi</s>\n"
                  "<|assistant|>\nHello!</s>\n"
                  "<|user|>\nHow are you?</s>\n"
                  "<|assistant|>\n");
}

static void test_chat_phi3_ends_turns_with_end(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_PHI3, "<s>", "<|endoftext|>", convo, CONVO_N, true,
                  "<|system|>\nYou are helpful.<|end|>\n"
                  "<|user|>\nHi<|end|>\n"
                  "<|assistant|>\nHello!<|end|>\n"
                  "<|user|>\nHow are you?<|end|>\n"
                  "<|assistant|>\n");
    /* without the generation prompt the official template closes with eos_token */
    expect_render(CHAT_FAMILY_PHI3, "<s>", "<|endoftext|>", convo + 1, 1, false,
                  "<|user|>\nHi<|end|>\n<|endoftext|>");
}

static void test_chat_gemma_writes_model_role_and_merges_system(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_GEMMA, "<bos>", "<eos>", convo, CONVO_N, true,
                  "<bos><start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
                  "<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\nHow are you?<end_of_turn>\n"
                  "<start_of_turn>model\n");
}

static void test_chat_fallback_writes_role_lines(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_FALLBACK, "", "", convo, CONVO_N, true,
                  "system: You are helpful.\nuser: Hi\nassistant: Hello!\n"
                  "user: How are you?\nassistant:");
    expect_render(CHAT_FAMILY_FALLBACK, "", "", convo, 2, false,
                  "system: You are helpful.\nuser: Hi\n");
}

static void test_chat_empty_conversation_and_null_content(void **state)
{
    (void)state;
    expect_render(CHAT_FAMILY_CHATML, "", "", NULL, 0, true, "<|im_start|>assistant\n");
    const struct chat_msg m[] = {{"user", NULL}};
    expect_render(CHAT_FAMILY_CHATML, "", "", m, 1, false, "<|im_start|>user\n<|im_end|>\n");
}

static void test_chat_unknown_role_is_rejected(void **state)
{
    (void)state;
    const struct chat_msg m[] = {{"user", "Hi"}, {"wizard", "{}"}};
    struct chat_template t = {.family = CHAT_FAMILY_CHATML};
    char err[256] = "";
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++) {
        t.family = (enum chat_family)f;
        assert_null(chat_render(&t, m, 2, true, err, sizeof(err)));
        assert_non_null(strstr(err, "unknown role 'wizard'"));
    }
    const struct chat_msg nul[] = {{NULL, "x"}};
    assert_null(chat_render(&t, nul, 1, true, err, sizeof(err)));
    assert_non_null(strstr(err, "unknown role"));
}

/* The JSON entry point over the family table: developer renders as system, a tool result as
 * its role, text parts joined, and the spans cover the client's text. */
static void test_chat_json_renders_developer_tool_and_parts(void **state)
{
    (void)state;
    struct chat_template t = {.family = CHAT_FAMILY_CHATML};
    json_t *msgs = json_loads("[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                              "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                              "{\"type\":\"text\",\"text\":\"b\"}]},"
                              "{\"role\":\"tool\",\"content\":\"42\"}]", 0, NULL);
    struct chat_context c = {.messages = msgs, .add_generation_prompt = true};
    struct tokenizer_span *sp = NULL;
    size_t nsp = 0;
    char err[256], *out = NULL;
    assert_int_equal(chat_render_json(&t, &c, &out, &sp, &nsp, err, sizeof(err)), 0);
    assert_string_equal(out, "<|im_start|>system\nBe brief.<|im_end|>\n"
                             "<|im_start|>user\nab<|im_end|>\n"
                             "<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n");
    assert_int_equal(nsp, 3);
    assert_memory_equal(out + sp[1].off, "ab", 2);
    free(out);
    free(sp);
    json_decref(msgs);
    msgs = json_loads("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]", 0,
                      NULL);
    c.messages = msgs;
    assert_int_equal(chat_render_json(&t, &c, &out, NULL, NULL, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, "'image_url' is not supported"));
    json_decref(msgs);
}

static void test_chat_family_names_round_trip(void **state)
{
    (void)state;
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
        assert_int_equal(chat_family_from_name(chat_family_name((enum chat_family)f)), f);
    assert_int_equal(chat_family_from_name("llama4"), -1);
    assert_int_equal(chat_family_from_name(NULL), -1);
    assert_null(chat_family_name(CHAT_FAMILY_COUNT));
}

/* ---- detection from files ---- */

/* Short excerpts of the families' published Jinja templates ('\\n' is Jinja's escape). */
static const struct {
    const char *tmpl;
    enum chat_family want;
} excerpts[] = {
    {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
     "{{ '<|im_start|>assistant\\n' }}{% endif %}",
     CHAT_FAMILY_CHATML},
    {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
     "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
     "{% endif %}{{ content }}{% endfor %}",
     CHAT_FAMILY_LLAMA3},
    {"{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
     "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% endif %}{% if "
     "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}",
     CHAT_FAMILY_LLAMA2},
    {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] "
     "' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
     "message['content'] + eos_token}}{% endif %}{% endfor %}",
     CHAT_FAMILY_MISTRAL},
    {"{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
     "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
     "'<|system|>\\n' + message['content'] + eos_token }}\n{% endif %}\n{% endfor %}",
     CHAT_FAMILY_ZEPHYR},
    {"{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + "
     "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + "
     "message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}",
     CHAT_FAMILY_PHI3},
    {"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% "
     "set role = 'model' %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] "
     "| trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
     "{{'<start_of_turn>model\\n'}}{% endif %}",
     CHAT_FAMILY_GEMMA},
    {"{% for message in messages %}{{ message['role'] + ': ' + message['content'] }}"
     "{% endfor %}",
     CHAT_FAMILY_FALLBACK},
};

/* A vocabulary-only file with the template (NULL: no key) and BOS/EOS ids. */
static struct gguf *open_with(uint8_t **buf, const char *tmpl, const char *const *toks,
                              uint64_t n_toks, uint32_t bos, uint32_t eos)
{
    struct gguf_writer *w = gguf_writer_create(3);
    size_t len;
    char err[512];
    assert_non_null(w);
    if (tmpl)
        assert_int_equal(gguf_write_str(w, "tokenizer.chat_template", tmpl), 0);
    assert_int_equal(gguf_write_arr_str(w, "tokenizer.ggml.tokens", toks, n_toks), 0);
    assert_int_equal(gguf_write_u32(w, "tokenizer.ggml.bos_token_id", bos), 0);
    assert_int_equal(gguf_write_u32(w, "tokenizer.ggml.eos_token_id", eos), 0);
    assert_int_equal(gguf_writer_finish(w, buf, &len), 0);
    gguf_writer_destroy(w);
    struct gguf *g = gguf_open_mem(*buf, len, err, sizeof(err));
    if (!g)
        fail_msg("%s", err);
    return g;
}

static void test_chat_detects_family_from_real_templates(void **state)
{
    (void)state;
    static const char *const toks[] = {"<unk>", "<s>", "</s>"};
    for (size_t i = 0; i < sizeof(excerpts) / sizeof(excerpts[0]); i++) {
        uint8_t *buf = NULL;
        struct gguf *g = open_with(&buf, excerpts[i].tmpl, toks, 3, 1, 2);
        struct chat_template t;
        chat_template_from_gguf(&t, g);
        if (t.family != excerpts[i].want)
            fail_msg("excerpt %zu: got %s, want %s", i, chat_family_name(t.family),
                     chat_family_name(excerpts[i].want));
        assert_string_equal(t.bos, "<s>");
        assert_string_equal(t.eos, "</s>");
        gguf_close(g);
        free(buf);
    }
}

static void test_chat_bos_eos_texts_come_from_the_vocabulary(void **state)
{
    (void)state;
    static const char *const toks[] = {"<pad>", "<eos>", "<bos>", "<start_of_turn>"};
    uint8_t *buf = NULL;
    struct gguf *g = open_with(&buf, excerpts[6].tmpl, toks, 4, 2, 1);
    struct chat_template t;
    chat_template_from_gguf(&t, g);
    assert_int_equal(t.family, CHAT_FAMILY_GEMMA);
    assert_string_equal(t.bos, "<bos>");
    assert_string_equal(t.eos, "<eos>");
    gguf_close(g);
    free(buf);

    /* ids out of range: the family's usual texts */
    g = open_with(&buf, excerpts[1].tmpl, toks, 4, 900, 901);
    chat_template_from_gguf(&t, g);
    assert_int_equal(t.family, CHAT_FAMILY_LLAMA3);
    assert_string_equal(t.bos, "<|begin_of_text|>");
    assert_string_equal(t.eos, "<|eot_id|>");
    gguf_close(g);
    free(buf);

    /* no template at all: the fallback */
    g = open_with(&buf, NULL, toks, 4, 2, 1);
    chat_template_from_gguf(&t, g);
    assert_int_equal(t.family, CHAT_FAMILY_FALLBACK);
    gguf_close(g);
    free(buf);
    chat_template_from_gguf(&t, NULL);
    assert_int_equal(t.family, CHAT_FAMILY_FALLBACK);
}

static void test_chat_llama_spm_vocab_has_no_template(void **state)
{
    (void)state;
    char path[4096], err[512];
    const char *dir = getenv("KILN_SHARED");
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-llama-spm.gguf", dir && *dir ? dir : "../shared");
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g)
        fail_msg("%s", err);
    struct chat_template t;
    chat_template_from_gguf(&t, g);
    assert_int_equal(t.family, CHAT_FAMILY_FALLBACK);
    assert_string_equal(t.bos, "<s>");
    assert_string_equal(t.eos, "</s>");
    gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_chatml_renders_turns_and_generation_prompt),
        cmocka_unit_test(test_chat_llama2_folds_system_into_first_inst),
        cmocka_unit_test(test_chat_llama3_renders_headers_and_bos),
        cmocka_unit_test(test_chat_mistral_prepends_system_to_first_user),
        cmocka_unit_test(test_chat_zephyr_ends_turns_with_eos_newline),
        cmocka_unit_test(test_chat_phi3_ends_turns_with_end),
        cmocka_unit_test(test_chat_gemma_writes_model_role_and_merges_system),
        cmocka_unit_test(test_chat_fallback_writes_role_lines),
        cmocka_unit_test(test_chat_empty_conversation_and_null_content),
        cmocka_unit_test(test_chat_unknown_role_is_rejected),
        cmocka_unit_test(test_chat_family_names_round_trip),
        cmocka_unit_test(test_chat_json_renders_developer_tool_and_parts),
        cmocka_unit_test(test_chat_detects_family_from_real_templates),
        cmocka_unit_test(test_chat_bos_eos_texts_come_from_the_vocabulary),
        cmocka_unit_test(test_chat_llama_spm_vocab_has_no_template),
    };
    return cmocka_run_group_tests_name("chat", tests, NULL, NULL);
}
