/* The chat route's memo of recent generations (server/gen_memo.c), with the byte tokenizer
 * (a token per byte, EOS's piece empty): the longest remembered prompt and answer a text
 * starts with and the ids that spell it, a text that departs inside the answer (a stop
 * string's cut) or in the prompt, control tokens ending what is kept, and the bounds (least
 * recently used first out, by entries and by bytes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "../server/gen_memo.h"
#include "tokenizer.h"

/* The prompt text s with flags and plain spans. */
#define TXT(s, flags, plain, n) (&(struct gen_memo_text){(s), strlen(s), (flags), (plain), (n)})

static void ids_of(const char *s, uint32_t *out)
{
    for (size_t i = 0; s[i]; i++)
        out[i] = (unsigned char)s[i];
}

/* Remember prompt (its ids: its bytes) then answer (its bytes) as generated ids. */
static void add(struct gen_memo *m, const struct tokenizer *t, const char *prompt,
                const char *answer)
{
    uint32_t p[256], g[256];
    ids_of(prompt, p);
    ids_of(answer, g);
    assert_int_equal(gen_memo_add(m, t, TXT(prompt, 0, NULL, 0), p,
                                  strlen(prompt), g, strlen(answer)),
                     0);
}

static size_t find(struct gen_memo *m, const char *text, struct gen_memo_cut *cuts)
{
    return gen_memo_find(m, TXT(text, 0, NULL, 0), cuts, 4);
}

static void test_gen_memo_finds_the_longest_remembered_prompt_and_answer(void **state)
{
    struct tokenizer *t = tokenizer_create_bytes();
    struct gen_memo *m = gen_memo_create(8, 1 << 20);
    struct gen_memo_cut c[4];
    (void)state;

    add(m, t, "sys\nuser: hi\nassistant:", " hello");
    add(m, t, "sys\nuser: yo\nassistant:", " hey");
    /* the next turn re-sends the answer: the whole entry, then shorter points */
    size_t n = find(m, "sys\nuser: hi\nassistant: hello\nuser: more\nassistant:", c);
    assert_int_equal(n, 4);
    assert_int_equal(c[0].bytes, strlen("sys\nuser: hi\nassistant: hello"));
    assert_int_equal(c[0].n_ids, c[0].bytes); /* a byte a token */
    static const uint32_t he[] = {' ', 'h', 'e'};
    assert_memory_equal(c[0].ids + 23, he, sizeof(he));
    assert_int_equal(c[1].bytes, c[0].bytes - 1);
    /* the last point is the prompt alone, tried when the others are no place to cut at */
    assert_int_equal(c[3].bytes, strlen("sys\nuser: hi\nassistant:"));
    assert_int_equal(c[3].n_ids, c[3].bytes);
    /* a client sent less of the answer (a stop string cut it): the points within it */
    n = find(m, "sys\nuser: hi\nassistant: helXo", c);
    assert_int_equal(n, 4);
    assert_int_equal(c[0].bytes, strlen("sys\nuser: hi\nassistant: hel"));
    /* the answer not re-sent at all: the prompt alone */
    n = find(m, "sys\nuser: hi\nassistant:", c);
    assert_int_equal(n, 1);
    assert_int_equal(c[0].n_ids, 23);
    /* a text that departs in the prompt finds nothing */
    assert_int_equal(find(m, "sys\nuser: ho\nassistant: hello", c), 0);
    assert_int_equal(find(m, "sys", c), 0);
    gen_memo_destroy(m);
    tokenizer_destroy(t);
}

static void test_gen_memo_keeps_generated_ids_up_to_a_control_token(void **state)
{
    struct tokenizer *t = tokenizer_create_bytes();
    struct gen_memo *m = gen_memo_create(8, 1 << 20);
    struct gen_memo_cut c[4];
    uint32_t p[] = {'q', ':'}, g[] = {'o', 'k', TOKENIZER_BYTES_EOS, 'x'};
    (void)state;

    assert_int_equal(gen_memo_add(m, t, TXT("q:", 0, NULL, 0), p, 2, g, 4), 0);
    /* EOS's piece is empty: the text re-sent has nothing for it, so it ends the entry */
    assert_int_equal(find(m, "q:okx", c), 3);
    assert_int_equal(c[0].bytes, 4);
    assert_int_equal(c[0].n_ids, 4);
    gen_memo_destroy(m);
    tokenizer_destroy(t);
}

static void test_gen_memo_drops_the_least_recently_used_first(void **state)
{
    struct tokenizer *t = tokenizer_create_bytes();
    struct gen_memo *m = gen_memo_create(2, 1 << 20);
    struct gen_memo_cut c[4];
    struct gen_memo_stats s;
    (void)state;

    add(m, t, "a:", "1");
    add(m, t, "b:", "2");
    assert_int_equal(find(m, "a:1", c), 2); /* a is now the most recently used */
    add(m, t, "c:", "3");                   /* the third entry pushes b out */
    assert_int_equal(find(m, "b:2", c), 0);
    assert_int_equal(find(m, "a:1", c), 2);
    assert_int_equal(find(m, "c:3", c), 2);
    gen_memo_stats(m, &s);
    assert_int_equal(s.entries, 2);
    assert_int_equal(s.evictions, 1);
    gen_memo_destroy(m);

    /* by bytes: room for two entries of this size; one larger than all is not kept */
    char big[200];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    add(m = gen_memo_create(100, 0), t, "a:", "1"); /* max_bytes 0: nothing fits */
    gen_memo_stats(m, &s);
    assert_int_equal(s.entries, 0);
    gen_memo_destroy(m);
    m = gen_memo_create(100, 6000); /* an entry here is about 2.7 kB */
    add(m, t, "a:", big);
    add(m, t, "b:", big);
    add(m, t, "c:", big);
    gen_memo_stats(m, &s);
    assert_int_equal(s.entries, 2);
    assert_true(s.bytes <= 6000);
    assert_int_equal(find(m, "a:x", c), 0);
    assert_true(find(m, "c:x", c) > 0);
    gen_memo_destroy(m);
    tokenizer_destroy(t);
}

/* With special texts parsed, a text is only half of what its ids are: a message whose
 * content holds a template's markers renders as the same text as those messages, but its
 * markers are ordinary characters. An entry is found only by a prompt with its plain spans
 * over the entry's prompt, and past it only within the span the answer starts in. */
static void test_gen_memo_finds_an_entry_only_with_its_plain_spans(void **state)
{
    struct tokenizer *t = tokenizer_create_bytes();
    struct gen_memo *m = gen_memo_create(8, 1 << 20);
    struct gen_memo_cut c[4];
    const unsigned parse = TOKENIZER_PARSE_SPECIAL;
    /* system: S<E>user: U<E>assistant: -- S and U are content */
    const char *prompt = "system: S<E>user: U<E>assistant:";
    const struct tokenizer_span two[] = {{8, 1}, {18, 1}}, one[] = {{8, 11}};
    uint32_t p[64], g[8];
    (void)state;

    ids_of(prompt, p);
    ids_of(" hi", g);
    assert_int_equal(gen_memo_add(m, t, TXT(prompt, parse, two, 2), p, strlen(prompt), g, 3), 0);
    /* the next turn: the answer is content (a span from the end of the prompt) */
    const char *next = "system: S<E>user: U<E>assistant: hi<E>user: V<E>assistant:";
    const struct tokenizer_span turn[] = {{8, 1}, {18, 1}, {32, 3}, {44, 1}};
    assert_int_equal(gen_memo_find(m, TXT(next, parse, turn, 4), c, 4), 4);
    assert_int_equal(c[0].bytes, 35);
    /* the same text with the markers in one system message's content: not this entry */
    const struct tokenizer_span inj[] = {{8, 11}, {32, 3}, {44, 1}};
    assert_int_equal(gen_memo_find(m, TXT(next, parse, inj, 3), c, 4), 0);
    assert_int_equal(gen_memo_find(m, TXT(prompt, parse, one, 1), c, 4), 0);
    /* other flags: not this entry */
    assert_int_equal(gen_memo_find(m, TXT(next, 0, turn, 4), c, 4), 0);
    /* the answer's text outside the client's text (it could parse as special there): the
     * prompt alone */
    const struct tokenizer_span bare[] = {{8, 1}, {18, 1}};
    assert_int_equal(gen_memo_find(m, TXT(next, parse, bare, 2), c, 4), 1);
    assert_int_equal(c[0].bytes, strlen(prompt));
    /* ... and only as far as the span the answer starts in */
    const struct tokenizer_span part[] = {{8, 1}, {18, 1}, {32, 2}};
    assert_int_equal(gen_memo_find(m, TXT(next, parse, part, 3), c, 4), 3);
    assert_int_equal(c[0].bytes, 34);
    /* an entry remembered with the markers as content is not found by the messages */
    gen_memo_destroy(m);
    m = gen_memo_create(8, 1 << 20);
    assert_int_equal(gen_memo_add(m, t, TXT(prompt, parse, one, 1), p, strlen(prompt), g, 3), 0);
    assert_int_equal(gen_memo_find(m, TXT(prompt, parse, two, 2), c, 4), 0);
    assert_int_equal(gen_memo_find(m, TXT(prompt, parse, one, 1), c, 4), 1);
    gen_memo_destroy(m);
    tokenizer_destroy(t);
}

static void test_gen_memo_of_no_entries_is_off(void **state)
{
    (void)state;
    assert_null(gen_memo_create(0, 1 << 20));
    assert_int_equal(gen_memo_add(NULL, NULL, TXT("a", 0, NULL, 0), NULL, 0, NULL, 0), 0);
    assert_int_equal(gen_memo_find(NULL, TXT("a", 0, NULL, 0), NULL, 4), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_memo_finds_the_longest_remembered_prompt_and_answer),
        cmocka_unit_test(test_gen_memo_keeps_generated_ids_up_to_a_control_token),
        cmocka_unit_test(test_gen_memo_drops_the_least_recently_used_first),
        cmocka_unit_test(test_gen_memo_finds_an_entry_only_with_its_plain_spans),
        cmocka_unit_test(test_gen_memo_of_no_entries_is_off),
    };
    return cmocka_run_group_tests_name("gen_memo", tests, NULL, NULL);
}
