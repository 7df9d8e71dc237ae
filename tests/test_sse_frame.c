/* api_json_chunk's frames without logprobs are written without a JSON tree: byte for byte
 * what jansson's compact dump of the same object gives, for text with every control
 * character, quotes, backslashes, UTF-8, and for chat and completions, role and finish. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "../server/api.h"
#include "../server/api_impl.h"
#include "../server/request.h"

/* The frame as a tree, as api_json_chunk built it before. */
static char *tree_frame(const struct request *r, uint32_t index, const char *text, size_t len,
                        bool role, const char *finish)
{
    bool chat = r->kind == REQUEST_KIND_CHAT;
    json_t *root = json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object",
                             chat ? "chat.completion.chunk" : "text_completion", "created",
                             (json_int_t)r->created, "model", r->f->model.name);
    json_t *choice = json_pack("{s:i, s:o, s:o}", "index", (int)index, "logprobs", json_null(),
                               "finish_reason", finish ? json_string(finish) : json_null());
    if (chat) {
        json_t *delta = json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (text)
            json_object_set_new(delta, "content", json_stringn(text, len));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", json_stringn(text ? text : "", text ? len : 0));
    }
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    return api_json_finish(root);
}

static void test_sse_frame_matches_the_tree(void **state)
{
    static struct front f;
    struct request r;
    char text[300];
    (void)state;
    snprintf(f.model.name, sizeof(f.model.name), "model \"q\" é");
    memset(&r, 0, sizeof(r));
    r.f = &f;
    snprintf(r.id, sizeof(r.id), "cmpl-0123456789abcdef00000001");
    r.created = 1796228808;
    size_t n = 0;
    for (int c = 1; c < 128; c++)
        text[n++] = (char)c;
    memcpy(text + n, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    n += 9;
    for (int kind = 0; kind < 2; kind++) {
        r.kind = kind ? REQUEST_KIND_CHAT : REQUEST_KIND_COMPLETION;
        for (int v = 0; v < 6; v++) {
            const char *t = v == 0 ? NULL : text;
            size_t len = v == 0 ? 0 : v == 1 ? 0 : v == 2 ? 1 : n;
            bool role = v & 1;
            const char *finish = v == 5 ? "length" : NULL;
            char *a = api_json_chunk(&r, (uint32_t)v, t, len, role, finish, NULL);
            char *b = tree_frame(&r, (uint32_t)v, t, len, role, finish);
            assert_non_null(a);
            assert_non_null(b);
            assert_string_equal(a, b);
            free(a);
            free(b);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_frame_matches_the_tree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
