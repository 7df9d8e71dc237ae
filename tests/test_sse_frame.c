/* A stream's frames are written without a JSON tree (api_json_sse.c): byte for byte what
 * jansson's compact dump of the tree they replace gives, for text with every control
 * character, quotes, backslashes, UTF-8 and invalid UTF-8, for chat and completions, role
 * and finish, logprobs of random tokens (byte pieces: NULs, invalid UTF-8, pieces that repair
 * to the same key) with random reals, reasoning deltas and tool-call deltas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "../server/api.h"
#include "../server/api_impl.h"
#include "../server/relay.h"
#include "../server/request.h"
#include "tokenizer.h"

/* The frame as a tree, as api_json_chunk built it before (logprobs: the route's shape from
 * api_json_logprobs, taken over; NULL: none). */
static char *tree_frame(const struct request *r, uint32_t index, const char *text, size_t len,
                        bool role, const char *finish, json_t *logprobs)
{
    bool chat = r->kind == REQUEST_KIND_CHAT;
    json_t *root = json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object",
                             chat ? "chat.completion.chunk" : "text_completion", "created",
                             (json_int_t)r->created, "model", r->model->name);
    json_t *lp = logprobs ? (chat ? json_pack("{s:o}", "content", logprobs) : logprobs)
                          : json_null();
    json_t *choice = json_pack("{s:i, s:o, s:o}", "index", (int)index, "logprobs", lp,
                               "finish_reason", finish ? json_string(finish) : json_null());
    if (chat) {
        json_t *delta = json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (text)
            json_object_set_new(delta, "content", api_json_text(text, len));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", text ? api_json_text(text, len) : json_string(""));
    }
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    return api_json_finish(root);
}

static void test_sse_frame_matches_the_tree(void **state)
{
    static struct front f;
    static struct front_model m;
    struct request r;
    char text[300];
    (void)state;
    snprintf(m.name, sizeof(m.name), "model \"q\" é");
    memset(&r, 0, sizeof(r));
    r.f = &f;
    f.model = &m;
    r.model = &m;
    snprintf(r.id, sizeof(r.id), "cmpl-0123456789abcdef00000001");
    r.created = 1796228808;
    size_t n = 0;
    for (int c = 1; c < 128; c++)
        text[n++] = (char)c;
    memcpy(text + n, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9);
    n += 9;
    for (int kind = 0; kind < 4; kind++) {
        r.kind = kind & 1 ? REQUEST_KIND_CHAT : REQUEST_KIND_COMPLETION;
        if (kind & 2) { /* the head written once, as a stream does */
            assert_int_equal(api_json_chunk_head(&r), 0);
            assert_non_null(r.chunk_head);
        }
        for (int v = 0; v < 6; v++) {
            const char *t = v == 0 ? NULL : text;
            size_t len = v == 0 ? 0 : v == 1 ? 0 : v == 2 ? 1 : n;
            bool role = v & 1;
            const char *finish = v == 5 ? "length" : NULL;
            char *a = api_json_chunk(&r, (uint32_t)v, t, len, role, finish);
            char *b = tree_frame(&r, (uint32_t)v, t, len, role, finish, NULL);
            assert_non_null(a);
            assert_non_null(b);
            assert_string_equal(a, b);
            free(a);
            free(b);
        }
        free(r.chunk_head);
        r.chunk_head = NULL;
    }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Reals jansson prints in every form: ordinary logprobs, -0, exponents both ways, and
 * non-finite ones (which a tree drops). */
static float some_real(void)
{
    static const float odd[] = {0.0f, -0.0f, -1e-7f, -1e-30f, -123456789.0f, -1e30f, -1.0f,
                                -100.0f, -0.5f, INFINITY, -INFINITY, NAN};
    uint32_t k = next() % 16;
    if (k < sizeof(odd) / sizeof(odd[0]))
        return odd[k];
    return -(float)(next() % 100000) / (float)(1 + next() % 1000);
}

/* Random bytes: ASCII, controls, quotes, UTF-8 and broken UTF-8, NULs. */
static size_t some_text(char *t, size_t cap)
{
    static const char *const bits[] = {"a", "\"", "\\", "\n", "\x01", "\x7f", "\xc3\xa9",
                                       "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\x80", "\xc0\x80",
                                       "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\xff", "/"};
    size_t n = 0, want = next() % 40;
    for (size_t i = 0; i < want; i++) {
        const char *b = bits[next() % (sizeof(bits) / sizeof(bits[0]))];
        size_t l = strlen(b);
        if (next() % 9 == 0) { /* a NUL */
            b = "";
            l = 1;
        }
        if (n + l > cap)
            break;
        memcpy(t + n, b, l);
        n += l;
    }
    return n;
}

static void random_tokens(struct relay_token *toks, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        toks[i].id = next() % 260;
        toks[i].logprob = some_real();
        toks[i].n_top = next() % (WIRE_MAX_TOP_LOGPROBS + 1);
        for (uint32_t k = 0; k < toks[i].n_top; k++) {
            /* bytes 0x80..0x83 all repair to U+FFFD: one key, first place, last value */
            toks[i].top[k].token = next() % 3 == 0 ? 0x80 + next() % 4 : next() % 260;
            toks[i].top[k].logprob = some_real();
        }
    }
}

static void test_sse_frame_with_logprobs_matches_the_tree(void **state)
{
    static struct front f;
    static struct front_model m;
    static struct relay_token toks[12];
    struct request r;
    char text[512];
    (void)state;
    snprintf(m.name, sizeof(m.name), "mock");
    m.tok = tokenizer_create_bytes();
    assert_non_null(m.tok);
    memset(&r, 0, sizeof(r));
    r.f = &f;
    f.model = &m;
    r.model = &m;
    snprintf(r.id, sizeof(r.id), "chatcmpl-0123456789abcdef00000002");
    r.created = 1796228808;
    for (int round = 0; round < 3000; round++) {
        r.kind = round & 1 ? REQUEST_KIND_CHAT : REQUEST_KIND_COMPLETION;
        r.sampling.top_logprobs = next() % (WIRE_MAX_TOP_LOGPROBS + 1);
        uint32_t n = next() % 12;
        random_tokens(toks, n);
        size_t len = some_text(text, sizeof(text));
        const char *t = next() % 4 == 0 ? NULL : text;
        uint32_t off0 = next() % 100000, off_a = off0, off_b = off0;
        char *a = api_json_chunk_logprobs(&r, round % 8, t, t ? len : 0, toks, n, &off_a);
        json_t *lp = api_json_logprobs(&r, toks, n, NULL, &off_b);
        assert_non_null(lp);
        char *b = tree_frame(&r, round % 8, t, t ? len : 0, false, NULL, lp);
        assert_non_null(a);
        assert_non_null(b);
        assert_string_equal(a, b);
        assert_int_equal(off_a, off_b);
        free(a);
        free(b);
        /* and plain frames over the same random (maybe broken) text */
        a = api_json_chunk(&r, 1, t, t ? len : 0, round & 2, round % 5 ? NULL : "stop");
        b = tree_frame(&r, 1, t, t ? len : 0, round & 2, round % 5 ? NULL : "stop", NULL);
        assert_string_equal(a, b);
        free(a);
        free(b);
    }
    tokenizer_destroy(m.tok);
}

/* The tool and reasoning chunks as trees, as api_json_tools.c built them before. */
static json_t *tree_delta_chunk(const struct request *r, uint32_t index, json_t *delta)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:n}]}", "id", r->id, "object",
                     "chat.completion.chunk", "created", (json_int_t)r->created, "model",
                     r->model->name, "choices", "index", (int)index, "delta", delta,
                     "logprobs", "finish_reason");
}

static char *tree_tool_chunk(const struct request *r, uint32_t index, uint32_t call_index,
                             const char *id, const char *name, size_t name_len,
                             const char *args, size_t args_len)
{
    json_t *fn = json_object(), *call = json_object();
    json_object_set_new(call, "index", json_integer(call_index));
    if (id) {
        json_object_set_new(call, "id", json_string(id));
        json_object_set_new(call, "type", json_string("function"));
    }
    if (name)
        json_object_set_new(fn, "name", api_json_text(name, name_len));
    json_object_set_new(fn, "arguments", api_json_text(args, args_len));
    json_object_set_new(call, "function", fn);
    return api_json_finish(tree_delta_chunk(r, index, json_pack("{s:[o]}", "tool_calls", call)));
}

static void test_sse_tool_and_reasoning_frames_match_the_tree(void **state)
{
    static struct front f;
    static struct front_model m;
    struct request r;
    char a_text[512], b_text[512];
    (void)state;
    snprintf(m.name, sizeof(m.name), "model \"q\" \xc3\xa9");
    memset(&r, 0, sizeof(r));
    r.f = &f;
    f.model = &m;
    r.model = &m;
    r.kind = REQUEST_KIND_CHAT;
    snprintf(r.id, sizeof(r.id), "chatcmpl-0123456789abcdef00000003");
    r.created = 1796228808;
    for (int round = 0; round < 2000; round++) {
        size_t la = some_text(a_text, sizeof(a_text)), lb = some_text(b_text, sizeof(b_text));
        const char *id = round % 3 == 0 ? NULL : round % 3 == 1 ? "call_abcDEF0123456789xyzXYZ" : "a1B2c3D4e";
        const char *name = id ? a_text : NULL;
        if (round == 1000) /* the second half with the head written once */
            assert_int_equal(api_json_chunk_head(&r), 0);
        char *x = api_json_tool_chunk(&r, round % 8, (uint32_t)round % 5, id, name, la, b_text, lb);
        char *y = tree_tool_chunk(&r, round % 8, (uint32_t)round % 5, id, name, la, b_text, lb);
        assert_non_null(x);
        assert_non_null(y);
        assert_string_equal(x, y);
        free(x);
        free(y);
        json_t *delta = json_object();
        json_object_set_new(delta, "reasoning_content", api_json_text(b_text, lb));
        x = api_json_delta_chunk(&r, round % 8, "reasoning_content", b_text, lb);
        y = api_json_finish(tree_delta_chunk(&r, round % 8, delta));
        assert_non_null(x);
        assert_string_equal(x, y);
        free(x);
        free(y);
    }
    free(r.chunk_head);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_frame_matches_the_tree),
        cmocka_unit_test(test_sse_frame_with_logprobs_matches_the_tree),
        cmocka_unit_test(test_sse_tool_and_reasoning_frames_match_the_tree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
