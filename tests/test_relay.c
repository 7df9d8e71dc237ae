/* The relay over the byte tokenizer: whole characters only, stop strings across tokens, DONE
 * releasing held text, every token reported for logprobs, a bad token as ERROR. (Where the
 * job is, and which records it takes, is the job's state: request.c.) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../server/relay.h"
#include "tokenizer.h"

struct fixture {
    struct tokenizer *tok;
    struct relay *r;
    /* what the client saw */
    char text[4096];
    size_t n_text;
    uint32_t n_text_events;
    uint32_t n_tokens; /* sum of TEXT n_tokens */
    float logprobs[256];
    bool finished;
    enum relay_finish reason;
    char error[256];
    uint32_t n_fed; /* tokens fed */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f || !(f->tok = tokenizer_create_bytes()))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    relay_destroy(f->r);
    tokenizer_destroy(f->tok);
    free(f);
    return 0;
}

static void create(struct fixture *f, const char *stop)
{
    size_t len = stop ? strlen(stop) : 0;
    assert_int_equal(relay_create(f->tok, &stop, &len, stop ? 1 : 0, &f->r), 0);
}

static bool utf8_whole(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        size_t need = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : 4;
        if ((*p & 0xC0) == 0x80 || p + need > end)
            return false;
        for (size_t k = 1; k < need; k++)
            if ((p[k] & 0xC0) != 0x80)
                return false;
        p += need;
    }
    return true;
}

/* Take one relay call's events as the client would see them; returns their number. */
static uint32_t take(struct fixture *f, const struct relay_out *out)
{
    assert_true(out->n <= RELAY_MAX_EVENTS);
    for (uint32_t i = 0; i < out->n; i++) {
        const struct relay_event *ev = &out->ev[i];
        assert_false(f->finished); /* nothing after the last event */
        switch (ev->type) {
        case RELAY_EVENT_TEXT:
            assert_true(utf8_whole(ev->text, ev->len));
            memcpy(f->text + f->n_text, ev->text, ev->len);
            f->n_text += ev->len;
            f->text[f->n_text] = '\0';
            for (uint32_t k = 0; k < ev->n_tokens; k++)
                f->logprobs[f->n_tokens + k] = ev->tokens[k].logprob;
            f->n_tokens += ev->n_tokens;
            f->n_text_events++;
            break;
        case RELAY_EVENT_FINISHED:
            f->finished = true;
            f->reason = ev->reason;
            break;
        case RELAY_EVENT_ERROR:
            f->finished = true;
            strncpy(f->error, ev->error, sizeof f->error - 1);
            break;
        }
    }
    return out->n;
}

static uint32_t token(struct fixture *f, uint32_t id, float logprob)
{
    struct proto_token t = {.token = id, .logprob = logprob};
    struct relay_out out;
    f->n_fed++;
    relay_token(f->r, &t, &out);
    return take(f, &out);
}

/* Every byte of text as one token; the k-th token fed has logprob -k. */
static void tokens(struct fixture *f, const char *text)
{
    for (size_t i = 0; text[i]; i++)
        token(f, (unsigned char)text[i], -(float)(f->n_fed + 1));
}

static uint32_t done(struct fixture *f, enum finish_reason reason)
{
    struct relay_out out;
    relay_done(f->r, reason, &out);
    return take(f, &out);
}

static void test_relay_multibyte_reply_never_yields_a_broken_character(void **state)
{
    struct fixture *f = *state;
    const char *reply = "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89!";
    create(f, NULL);
    uint32_t n = 0;
    for (size_t i = 0; reply[i]; i++, n++)
        token(f, (unsigned char)reply[i], 0); /* take() checks each TEXT is whole characters */
    assert_true(f->n_text_events < n);      /* bytes of a character waited for the rest */
    done(f, FINISH_REASON_STOP);
    assert_string_equal(f->text, reply);
    assert_true(f->finished);
    assert_int_equal(f->reason, RELAY_FINISH_STOP);
    assert_int_equal(f->n_tokens, n);
}

static void test_relay_stop_across_tokens_finishes_with_the_matching_token(void **state)
{
    struct fixture *f = *state;
    create(f, "END");
    tokens(f, "abc EN");
    assert_string_equal(f->text, "abc ");
    assert_false(f->finished);
    assert_int_equal(token(f, 'D', 0), 2); /* TEXT (the tokens) then FINISHED */
    assert_true(f->finished);
    assert_int_equal(f->reason, RELAY_FINISH_STOP);
    assert_string_equal(f->text, "abc ");
    assert_int_equal(f->n_tokens, 7);
}

static void test_relay_done_releases_held_text(void **state)
{
    struct fixture *f = *state;
    create(f, "END");
    tokens(f, "abc EN");
    assert_string_equal(f->text, "abc ");
    done(f, FINISH_REASON_LENGTH);
    assert_string_equal(f->text, "abc EN");
    assert_int_equal(f->reason, RELAY_FINISH_LENGTH);
    assert_int_equal(f->n_tokens, 6);
}

static void test_relay_done_turns_a_broken_tail_into_replacement(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    tokens(f, "ok\xE4\xB8");
    assert_string_equal(f->text, "ok");
    done(f, FINISH_REASON_LENGTH);
    assert_string_equal(f->text, "ok\xEF\xBF\xBD");
    assert_int_equal(f->n_tokens, 4);
}

static void test_relay_done_after_a_cancel_says_cancelled(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    tokens(f, "ab");
    done(f, FINISH_REASON_CANCELLED);
    assert_string_equal(f->text, "ab");
    assert_int_equal(f->reason, RELAY_FINISH_CANCELLED);
}

static void test_relay_usage_and_logprobs_count_every_token(void **state)
{
    struct fixture *f = *state;
    create(f, "zz");
    tokens(f, "a z\xC3\xA9z");
    token(f, TOKENIZER_BYTES_EOS, -9.0f); /* no text of its own: still counted */
    done(f, FINISH_REASON_STOP);
    assert_string_equal(f->text, "a z\xC3\xA9z");
    assert_int_equal(f->n_tokens, 7);
    for (uint32_t i = 0; i < 6; i++)
        assert_true(f->logprobs[i] == -(float)(i + 1)); /* in order, none lost */
    assert_true(f->logprobs[6] == -9.0f);
}

static void test_relay_many_tokens_without_text_are_still_reported(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    for (int i = 0; i < 3 * RELAY_MAX_PENDING + 5; i++)
        token(f, TOKENIZER_BYTES_EOS, 0);
    assert_int_equal(f->n_tokens, 3 * RELAY_MAX_PENDING);
    done(f, FINISH_REASON_LENGTH);
    assert_int_equal(f->n_tokens, 3 * RELAY_MAX_PENDING + 5);
}

static void test_relay_undecodable_token_is_an_error(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    tokens(f, "a");
    assert_int_equal(token(f, 99999, 0), 1);
    assert_true(f->finished);
    assert_non_null(strstr(f->error, "99999"));
    assert_string_equal(f->text, "a");
}

static void test_relay_bad_stop_string_is_refused(void **state)
{
    struct fixture *f = *state;
    const char *stop = "";
    size_t len = 0;
    struct relay *r;
    assert_int_equal(relay_create(f->tok, &stop, &len, 1, &r), -EINVAL);
    assert_null(r);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_relay_multibyte_reply_never_yields_a_broken_character),
        T(test_relay_stop_across_tokens_finishes_with_the_matching_token),
        T(test_relay_done_releases_held_text),
        T(test_relay_done_turns_a_broken_tail_into_replacement),
        T(test_relay_done_after_a_cancel_says_cancelled),
        T(test_relay_usage_and_logprobs_count_every_token),
        T(test_relay_many_tokens_without_text_are_still_reported),
        T(test_relay_undecodable_token_is_an_error),
        T(test_relay_bad_stop_string_is_refused),
    };
    return cmocka_run_group_tests_name("relay", tests, NULL, NULL);
}
