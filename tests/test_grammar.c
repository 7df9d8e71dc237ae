/* The GBNF engine: per construct, a table of strings the matcher must accept and strings it
 * must reject; errors that name line and column; left recursion refused; byte-at-a-time
 * feeding with UTF-8 split across calls; state keys equal for equal states; and random
 * sentences generated from each grammar fed back and accepted. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "grammar.h"

struct gcase {
    const char *grammar;
    const char *accept[8];
    const char *reject[8];
};

static const struct gcase cases[] = {
    {"root ::= \"abc\"", {"abc"}, {"", "ab", "abcd", "abd"}},
    {"root ::= \"a\" | \"bc\" | \"\"", {"a", "bc", ""}, {"b", "abc", "c"}},
    {"root ::= [a-c]+", {"a", "abcabc", "cc"}, {"", "d", "ad"}},
    {"root ::= [^a-c\\n]*", {"", "xyz", "é"}, {"a", "x\n", "xb"}},
    {"root ::= \"x\"* \"y\"?", {"", "x", "xxxy", "y"}, {"yy", "yx"}},
    {"root ::= [0-9]{2,4}", {"12", "123", "1234"}, {"1", "12345", ""}},
    {"root ::= [0-9]{3}", {"123"}, {"12", "1234"}},
    {"root ::= \"a\"{2,}", {"aa", "aaaaaaa"}, {"a", ""}},
    {"root ::= (\"ab\" | \"c\")+ \"!\"", {"ab!", "cabc!"}, {"!", "ab", "a!"}},
    {"root ::= \"ab\"{2}", {"abab"}, {"ab", "ababab"}},
    {"root ::= item (\",\" item)*\nitem ::= [a-z]+ # a word\n", {"a", "ab,c,d"}, {"", "a,", ",a"}},
    {"root ::= \"(\" root \")\" | \"\"", {"", "()", "((()))"}, {"(", "())", ")("}},
    {"root ::= .", {"a", "é", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}, {"", "ab"}},
    {"root ::= [α-ω]+", {"αβγ"}, {"a", "Α"}},
    {"root ::= \"\\u00e9\\x41\\n\\t\\\\\\\"\"", {"éA\n\t\\\""}, {"éA"}},
    {"root ::= a b\na ::= \"x\"?\nb ::= a \"y\"", {"y", "xy", "xxy"}, {"x", "xxxy"}},
    {"root ::= ws \"{\" ws \"}\"\nws ::= [ \\t\\n]{0,3}", {"{}", " { }", "   {\n\n\n}"},
     {"    {}", "{    }"}},
    {"root ::= \"a\"\n   | \"b\"\n", {"a", "b"}, {"ab"}},
};

static void test_grammar_tables_accept_and_reject(void **state)
{
    char err[256];

    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct grammar *g = grammar_compile(cases[c].grammar, strlen(cases[c].grammar), err,
                                            sizeof(err));

        if (!g)
            fail_msg("grammar %zu: %s", c, err);
        for (int k = 0; k < 8 && cases[c].accept[k]; k++)
            if (!grammar_accepts(g, cases[c].accept[k], strlen(cases[c].accept[k])))
                fail_msg("grammar %zu rejects '%s'", c, cases[c].accept[k]);
        for (int k = 0; k < 8 && cases[c].reject[k]; k++)
            if (grammar_accepts(g, cases[c].reject[k], strlen(cases[c].reject[k])))
                fail_msg("grammar %zu accepts '%s'", c, cases[c].reject[k]);
        grammar_destroy(g);
    }
}

static void expect_error(const char *src, const char *want)
{
    char err[256];
    struct grammar *g = grammar_compile(src, strlen(src), err, sizeof(err));

    if (g)
        fail_msg("'%s' compiled", src);
    if (!strstr(err, want))
        fail_msg("'%s': error '%s' lacks '%s'", src, err, want);
}

static void test_grammar_errors_name_line_and_column(void **state)
{
    (void)state;
    expect_error("root ::= \"abc", "line 1, column 10");
    expect_error("root ::= x\n", "line 1, column 10: rule 'x' is not defined");
    expect_error("root ::= \"a\"\nfoo ::= [a-\n", "line 2, column 9");
    expect_error("a ::= \"x\"", "no 'root' rule");
    expect_error("root ::= (\"a\"", "a group without its ')'");
    expect_error("root ::= \"a\"{3,1}", "n < m");
    expect_error("root ::= \"a\" )", "line 1, column 14: unexpected ')'");
    expect_error("root ::= \"\\q\"", "unknown escape");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
    expect_error("root ::= root \"a\" | \"b\"", "line 1, column 1: rule 'root' is left-recursive");
    expect_error("root ::= x\nx ::= y? root \"a\"\ny ::= \"b\"", "left-recursive");
    expect_error("root ::= \"a\"{5000}", "above");
    expect_error("= \"a\"", "line 1, column 1: expected a rule definition");
}

static void test_grammar_feed_splits_utf8_across_calls(void **state)
{
    const char *src = "root ::= \"é\" [€-€] \"x\"";
    const char *text = "é€x";
    struct grammar *g = grammar_compile(src, strlen(src), NULL, 0);
    struct grammar_matcher *m = grammar_matcher_create(0);

    (void)state;
    assert_non_null(g);
    assert_non_null(m);
    assert_int_equal(grammar_matcher_start(m, g), 0);
    for (size_t i = 0; i < strlen(text); i++) {
        assert_false(grammar_state_can_end(grammar_matcher_state(m)));
        assert_int_equal(grammar_matcher_feed(m, text + i, 1), 0);
    }
    assert_true(grammar_state_can_end(grammar_matcher_state(m)));
    assert_true(grammar_state_must_end(grammar_matcher_state(m)));
    /* a wrong byte is refused and leaves the state as it was */
    assert_int_equal(grammar_matcher_start(m, g), 0);
    assert_int_equal(grammar_matcher_feed(m, "\xc3", 1), 0);
    assert_int_equal(grammar_matcher_feed(m, "\xaa", 1), -EILSEQ);
    assert_int_equal(grammar_matcher_feed(m, "\xa9", 1), 0);
    /* invalid UTF-8 never matches, even under '.' */
    grammar_matcher_destroy(m);
    grammar_destroy(g);
    src = "root ::= .*";
    g = grammar_compile(src, strlen(src), NULL, 0);
    assert_false(grammar_accepts(g, "\xc0\x80", 2));
    assert_false(grammar_accepts(g, "\xed\xa0\x80", 3)); /* a surrogate */
    assert_false(grammar_accepts(g, "\x80", 1));
    assert_true(grammar_accepts(g, "\xf4\x8f\xbf\xbf", 4));
    grammar_destroy(g);
}

static void test_grammar_state_key_repeats_inside_long_repetition(void **state)
{
    const char *src = "root ::= \"\\\"\" [a-z]* \"\\\"\"";
    struct grammar *g = grammar_compile(src, strlen(src), NULL, 0);
    struct grammar_matcher *m = grammar_matcher_create(256);
    uint64_t k1, k2;

    (void)state;
    assert_non_null(g);
    assert_int_equal(grammar_matcher_start(m, g), 0);
    assert_int_equal(grammar_matcher_feed(m, "\"a", 2), 0);
    k1 = grammar_state_key(m, grammar_matcher_state(m));
    /* thousands of characters in a small arena: tail calls keep the stack flat */
    for (int i = 0; i < 5000; i++)
        assert_int_equal(grammar_matcher_feed(m, "b", 1), 0);
    k2 = grammar_state_key(m, grammar_matcher_state(m));
    assert_true(k1 == k2);
    assert_int_equal(grammar_matcher_feed(m, "\"", 1), 0);
    assert_true(grammar_state_key(m, grammar_matcher_state(m)) != k2);
    grammar_matcher_destroy(m);
    grammar_destroy(g);
}

static void test_grammar_generated_sentences_are_accepted(void **state)
{
    char err[256], out[4096];
    uint64_t rng = 42;

    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct grammar *g = grammar_compile(cases[c].grammar, strlen(cases[c].grammar), err,
                                            sizeof(err));

        assert_non_null(g);
        for (int k = 0; k < 200; k++) {
            long n = grammar_generate(g, &rng, 8, out, sizeof(out));

            assert_true(n >= 0);
            if (!grammar_accepts(g, out, (size_t)n))
                fail_msg("grammar %zu rejects its own sentence '%s'", c, out);
        }
        grammar_destroy(g);
    }
}

/* Hostile grammars: a blow-up of empty alternatives gives up (no hang), deep nesting and
 * huge repetitions are refused, and random mutations of the table's grammars either compile
 * or are refused with a message, and what compiles matches random text without harm. */
static void test_grammar_hostile_input_is_refused_or_bounded(void **state)
{
    char src[8192], err[256], text[64];
    struct grammar *g;
    struct grammar_matcher *m = grammar_matcher_create(0);
    uint64_t rng = 99;
    size_t n = 0;

    (void)state;
    n += (size_t)snprintf(src + n, sizeof(src) - n, "root ::=");
    for (int i = 0; i < 60; i++)
        n += (size_t)snprintf(src + n, sizeof(src) - n, " e");
    snprintf(src + n, sizeof(src) - n, " \"x\"\ne ::= \"\" | \"\" | \"\"\n");
    g = grammar_compile(src, strlen(src), err, sizeof(err));
    assert_non_null(g);
    assert_int_equal(grammar_matcher_start(m, g), -E2BIG);
    grammar_destroy(g);
    memset(src, '(', 4000);
    snprintf(src, sizeof(src), "root ::= ");
    memset(src + 9, '(', 3000);
    src[3009] = '\0';
    assert_null(grammar_compile(src, strlen(src), err, sizeof(err)));
    assert_non_null(strstr(err, "nested"));
    snprintf(src, sizeof(src), "root ::= ((((\"\"{0,4000}){0,4000}){0,4000}){0,4000})");
    assert_null(grammar_compile(src, strlen(src), err, sizeof(err)));
    for (int k = 0; k < 3000; k++) {
        const char *base = cases[k % (sizeof(cases) / sizeof(cases[0]))].grammar;
        size_t len = strlen(base);

        memcpy(src, base, len + 1);
        for (int e = 0; e < 3; e++) {
            uint64_t x = rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(x >> 33) % (len + 1);

            if (at < len)
                src[at] = "()[]{}*+?|\"\\:=-^.# \nax09"[(x >> 20) % 24];
        }
        g = grammar_compile(src, len, err, sizeof(err));
        if (!g) {
            assert_true(strlen(err) > 0);
            continue;
        }
        for (int t = 0; t < 4; t++) {
            for (size_t i = 0; i < sizeof(text); i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                text[i] = "abc09(){}\n\"\xc3\xa9 "[(rng >> 40) % 14];
            }
            (void)grammar_accepts(g, text, (size_t)(rng >> 58));
        }
        grammar_destroy(g);
    }
    grammar_matcher_destroy(m);
}

#define T(f) cmocka_unit_test(f)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_grammar_tables_accept_and_reject),
        T(test_grammar_errors_name_line_and_column),
        T(test_grammar_feed_splits_utf8_across_calls),
        T(test_grammar_state_key_repeats_inside_long_repetition),
        T(test_grammar_generated_sentences_are_accepted),
        T(test_grammar_hostile_input_is_refused_or_bounded),
    };
    return cmocka_run_group_tests_name("grammar", tests, NULL, NULL);
}
