/* Stop strings: matches across pushes, held partial matches, several stop strings, a match
 * at the very start, and multibyte text that is held whole. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../server/stop.h"

struct fixture {
    struct stop s;
    char out[4096 + STOP_HOLD_MAX];
    char all[8192]; /* everything released so far */
    size_t n_all;
    bool matched;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    stop_init(&f->s);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    free(*state);
    return 0;
}

static void add(struct fixture *f, const char *str)
{
    assert_int_equal(stop_add(&f->s, str, strlen(str)), 0);
}

/* Push text; returns what was released by this push, NUL-terminated (in f->out). */
static const char *push(struct fixture *f, const char *text)
{
    int n = stop_push(&f->s, text, strlen(text), f->out, sizeof f->out - 1, &f->matched);
    assert_true(n >= 0);
    f->out[n] = '\0';
    memcpy(f->all + f->n_all, f->out, (size_t)n);
    f->n_all += (size_t)n;
    f->all[f->n_all] = '\0';
    return f->out;
}

static const char *finish(struct fixture *f)
{
    size_t n = stop_finish(&f->s, f->out);
    f->out[n] = '\0';
    return f->out;
}

static bool utf8_whole(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t need = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : 4;
        for (size_t k = 1; k < need; k++)
            if ((p[k] & 0xC0) != 0x80)
                return false;
        p += need;
    }
    return true;
}

static void test_stop_without_stop_strings_releases_everything(void **state)
{
    struct fixture *f = *state;
    assert_string_equal(push(f, "hello"), "hello");
    assert_false(f->matched);
    assert_string_equal(finish(f), "");
}

static void test_stop_split_across_pushes_matches(void **state)
{
    struct fixture *f = *state;
    add(f, "END");
    assert_string_equal(push(f, "hello E"), "hello ");
    assert_false(f->matched);
    assert_string_equal(push(f, "N"), "");
    assert_false(f->matched);
    assert_string_equal(push(f, "D and more"), "");
    assert_true(f->matched);
    /* after a match nothing more comes out */
    assert_string_equal(push(f, "tail"), "");
    assert_true(f->matched);
    assert_string_equal(finish(f), "");
    assert_string_equal(f->all, "hello ");
}

static void test_stop_partial_that_never_completes_is_released_at_finish(void **state)
{
    struct fixture *f = *state;
    add(f, "END");
    assert_string_equal(push(f, "abc EN"), "abc ");
    assert_string_equal(finish(f), "EN");
    assert_false(f->matched);
}

static void test_stop_partial_that_diverges_is_released_at_once(void **state)
{
    struct fixture *f = *state;
    add(f, "END");
    assert_string_equal(push(f, "E"), "");
    assert_string_equal(push(f, "Ex"), "EEx");
    /* "EEN" then "D": the second E starts the match */
    assert_string_equal(push(f, "EEN"), "E");
    assert_string_equal(push(f, "D"), "");
    assert_true(f->matched);
    assert_string_equal(f->all, "EExE");
}

static void test_stop_several_strings_earliest_match_wins(void **state)
{
    struct fixture *f = *state;
    add(f, "cd");
    add(f, "ab");
    add(f, "zzzz");
    assert_string_equal(push(f, "x abcd"), "x ");
    assert_true(f->matched);
}

static void test_stop_several_strings_each_holds_its_prefix(void **state)
{
    struct fixture *f = *state;
    add(f, "<|end|>");
    add(f, "\n\n");
    assert_string_equal(push(f, "one\n"), "one");
    assert_string_equal(push(f, "two <|e"), "\ntwo ");
    assert_string_equal(push(f, "nd"), "");
    assert_string_equal(push(f, "|>"), "");
    assert_true(f->matched);
    assert_string_equal(f->all, "one\ntwo ");
}

static void test_stop_at_the_very_start(void **state)
{
    struct fixture *f = *state;
    add(f, "STOP");
    assert_string_equal(push(f, "ST"), "");
    assert_string_equal(push(f, "OPxyz"), "");
    assert_true(f->matched);
    assert_int_equal(f->n_all, 0);
}

static void test_stop_holds_multibyte_text_whole(void **state)
{
    struct fixture *f = *state;
    add(f, "\xC3\xA9!"); /* "é!" */
    assert_string_equal(push(f, "caf\xC3\xA9"), "caf");
    assert_string_equal(push(f, "?"), "\xC3\xA9?");
    assert_false(f->matched);
}

static void test_stop_never_splits_a_character_to_hold_a_prefix(void **state)
{
    struct fixture *f = *state;
    /* a stop string that begins with a continuation byte: its prefix matches the middle of
     * "é", so all of "é" is held, never half of it */
    add(f, "\xA9!");
    assert_string_equal(push(f, "x\xC3\xA9"), "x");
    assert_string_equal(push(f, "y"), "\xC3\xA9y");
    /* and text that ends inside a character keeps that character's bytes */
    assert_string_equal(push(f, "a\xE2\x82"), "a");
    assert_string_equal(push(f, "\xAC"), "\xE2\x82\xAC");
}

static void test_stop_single_string_matches_like_a_search_for_any_split(void **state)
{
    struct fixture *f = *state;
    static const char *const chars[] = {"a", "b", " ", "\xC3\xA9", "\xE4\xB8\x96",
                                        "\xF0\x9F\x8E\x89"};
    static const char *const stops[] = {"ab", "b\xC3\xA9", "\xE4\xB8\x96\xE4\xB8\x96 a",
                                        "\xF0\x9F\x8E\x89\xF0\x9F\x8E\x89", "a a a"};
    unsigned seed = 7;
    for (int iter = 0; iter < 2000; iter++) {
        char text[256] = "";
        size_t n = 0;
        int n_chars = rand_r(&seed) % 30;
        for (int i = 0; i < n_chars; i++) {
            const char *c = chars[(unsigned)rand_r(&seed) % 6];
            memcpy(text + n, c, strlen(c));
            n += strlen(c);
        }
        text[n] = '\0';
        const char *stopstr = stops[(unsigned)rand_r(&seed) % 5];
        stop_init(&f->s);
        f->n_all = 0;
        f->all[0] = '\0';
        f->matched = false;
        add(f, stopstr);
        /* split at character boundaries, as detok delivers text */
        size_t i = 0;
        while (i < n && !f->matched) {
            size_t j = i;
            int k = 1 + rand_r(&seed) % 3;
            while (k-- > 0 && j < n) {
                j++;
                while (j < n && ((unsigned char)text[j] & 0xC0) == 0x80)
                    j++;
            }
            char piece[64];
            memcpy(piece, text + i, j - i);
            piece[j - i] = '\0';
            assert_true(utf8_whole(push(f, piece)));
            i = j;
        }
        const char *end = finish(f);
        assert_true(utf8_whole(end));
        memcpy(f->all + f->n_all, end, strlen(end) + 1);
        const char *m = strstr(text, stopstr);
        size_t want = m ? (size_t)(m - text) : n;
        assert_int_equal(f->matched, m != NULL);
        assert_int_equal(strlen(f->all), want);
        assert_memory_equal(f->all, text, want);
    }
}

static void test_stop_add_rejects_bad_strings(void **state)
{
    struct fixture *f = *state;
    char big[STOP_MAX_LEN + 1];
    memset(big, 'x', sizeof big);
    assert_int_equal(stop_add(&f->s, "", 0), -EINVAL);
    assert_int_equal(stop_add(&f->s, big, sizeof big), -E2BIG);
    assert_int_equal(stop_add(&f->s, big, STOP_MAX_LEN), 0);
    for (int i = 1; i < STOP_MAX; i++)
        assert_int_equal(stop_add(&f->s, "a", 1), 0);
    assert_int_equal(stop_add(&f->s, "a", 1), -ENOSPC);
}

static void test_stop_longest_stop_string_holds_at_most_hold_max(void **state)
{
    struct fixture *f = *state;
    char big[STOP_MAX_LEN + 1];
    memset(big, 'x', STOP_MAX_LEN);
    big[STOP_MAX_LEN] = '\0';
    add(f, big);
    big[STOP_MAX_LEN - 1] = '\0';
    assert_string_equal(push(f, "a"), "a");
    assert_string_equal(push(f, big), ""); /* all of it could still become the stop */
    assert_string_equal(push(f, "x"), "");
    assert_true(f->matched);
    bool matched;
    assert_int_equal(stop_push(&f->s, "abc", 3, f->out, 2, &matched), 0);
}

static void test_stop_small_output_buffer_is_enospc(void **state)
{
    struct fixture *f = *state;
    bool matched;
    add(f, "END");
    assert_string_equal(push(f, "E"), "");
    assert_int_equal(stop_push(&f->s, "abc", 3, f->out, 3, &matched), -ENOSPC);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_stop_without_stop_strings_releases_everything),
        T(test_stop_split_across_pushes_matches),
        T(test_stop_partial_that_never_completes_is_released_at_finish),
        T(test_stop_partial_that_diverges_is_released_at_once),
        T(test_stop_several_strings_earliest_match_wins),
        T(test_stop_several_strings_each_holds_its_prefix),
        T(test_stop_at_the_very_start),
        T(test_stop_holds_multibyte_text_whole),
        T(test_stop_never_splits_a_character_to_hold_a_prefix),
        T(test_stop_single_string_matches_like_a_search_for_any_split),
        T(test_stop_add_rejects_bad_strings),
        T(test_stop_longest_stop_string_holds_at_most_hold_max),
        T(test_stop_small_output_buffer_is_enospc),
    };
    return cmocka_run_group_tests_name("stop", tests, NULL, NULL);
}
