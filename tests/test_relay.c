/* The relay over the byte tokenizer: whole characters only, stop strings across tokens with a
 * CANCEL, DONE releasing held text, FAILED as ERROR, usage counts, protocol order. */
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
    int prompt_tokens; /* -1 until STARTED */
    bool finished;
    enum relay_finish reason;
    uint32_t completion_tokens;
    char error[WIRE_MAX_ERROR + 1];
    uint32_t n_cancel;
    bool job_over;
    uint32_t n_fed; /* TOKEN records fed */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    if (!f || !(f->tok = tokenizer_create_bytes()))
        return -1;
    f->prompt_tokens = -1;
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

/* Feed one record and record what the client would see; returns the number of events. */
static uint32_t feed(struct fixture *f, const struct proto_msg *m)
{
    struct relay_out out;
    assert_int_equal(relay_feed(f->r, m, &out), 0);
    assert_false(f->finished && out.n > 0); /* nothing after the last event */
    for (uint32_t i = 0; i < out.n; i++) {
        const struct relay_event *ev = &out.ev[i];
        switch (ev->type) {
        case RELAY_EVENT_STARTED:
            assert_int_equal(f->prompt_tokens, -1);
            f->prompt_tokens = (int)ev->prompt_tokens;
            break;
        case RELAY_EVENT_TEXT:
            assert_true(f->prompt_tokens >= 0);
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
            assert_false(f->finished);
            f->finished = true;
            f->reason = ev->reason;
            f->completion_tokens = ev->completion_tokens;
            break;
        case RELAY_EVENT_ERROR:
            assert_false(f->finished);
            f->finished = true;
            strncpy(f->error, ev->error, sizeof f->error - 1);
            break;
        }
    }
    f->n_cancel += out.send_cancel;
    assert_false(f->job_over);
    f->job_over = out.job_over;
    return out.n;
}

static uint32_t started(struct fixture *f, uint32_t prompt_tokens)
{
    struct proto_msg m = {.type = MSG_TYPE_STARTED, .req_id = 1};
    m.u.prompt_tokens = prompt_tokens;
    return feed(f, &m);
}

static uint32_t token(struct fixture *f, uint32_t id, float logprob)
{
    struct proto_msg m = {.type = MSG_TYPE_TOKEN, .req_id = 1};
    f->n_fed++;
    m.u.token.token = id;
    m.u.token.logprob = logprob;
    return feed(f, &m);
}

/* Every byte of text as one token; the k-th token fed has logprob -k. */
static void tokens(struct fixture *f, const char *text)
{
    for (size_t i = 0; text[i]; i++)
        token(f, (unsigned char)text[i], -(float)(f->n_fed + 1));
}

static uint32_t done(struct fixture *f, enum finish_reason reason, uint32_t count)
{
    struct proto_msg m = {.type = MSG_TYPE_DONE, .req_id = 1};
    m.u.done.reason = reason;
    m.u.done.completion_tokens = count;
    return feed(f, &m);
}

static uint32_t failed(struct fixture *f, const char *msg)
{
    struct proto_msg m = {.type = MSG_TYPE_FAILED, .req_id = 1};
    strncpy(m.u.error, msg, WIRE_MAX_ERROR);
    return feed(f, &m);
}

static void test_relay_multibyte_reply_never_yields_a_broken_character(void **state)
{
    struct fixture *f = *state;
    const char *reply = "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89!";
    create(f, NULL);
    started(f, 9);
    uint32_t n = 0;
    for (size_t i = 0; reply[i]; i++, n++)
        token(f, (unsigned char)reply[i], 0); /* feed() checks each TEXT is whole characters */
    assert_true(f->n_text_events < n);      /* bytes of a character waited for the rest */
    done(f, FINISH_REASON_STOP, n);
    assert_string_equal(f->text, reply);
    assert_true(f->finished);
    assert_int_equal(f->reason, RELAY_FINISH_STOP);
    assert_int_equal(f->prompt_tokens, 9);
    assert_int_equal(f->completion_tokens, n);
    assert_int_equal(f->n_tokens, n);
    assert_true(f->job_over);
    assert_int_equal(f->n_cancel, 0);
}

static void test_relay_stop_across_tokens_finishes_and_cancels_once(void **state)
{
    struct fixture *f = *state;
    create(f, "END");
    started(f, 3);
    tokens(f, "abc EN");
    assert_string_equal(f->text, "abc ");
    assert_false(f->finished);
    token(f, 'D', 0);
    assert_true(f->finished);
    assert_int_equal(f->reason, RELAY_FINISH_STOP);
    assert_int_equal(f->completion_tokens, 7);
    assert_int_equal(f->n_cancel, 1);
    /* tokens already in flight are ignored; the final record frees the slot silently */
    assert_int_equal(token(f, 'x', 0), 0);
    assert_int_equal(token(f, 'y', 0), 0);
    assert_int_equal(done(f, FINISH_REASON_CANCELLED, 9), 0);
    assert_true(f->job_over);
    assert_string_equal(f->text, "abc ");
    assert_int_equal(f->n_cancel, 1);
    assert_int_equal(relay_tokens(f->r), 9);
}

static void test_relay_done_releases_held_text(void **state)
{
    struct fixture *f = *state;
    create(f, "END");
    started(f, 1);
    tokens(f, "abc EN");
    assert_string_equal(f->text, "abc ");
    done(f, FINISH_REASON_LENGTH, 6);
    assert_string_equal(f->text, "abc EN");
    assert_int_equal(f->reason, RELAY_FINISH_LENGTH);
    assert_int_equal(f->completion_tokens, 6);
    assert_int_equal(f->n_tokens, 6);
    assert_true(f->job_over);
    assert_int_equal(f->n_cancel, 0);
}

static void test_relay_done_turns_a_broken_tail_into_replacement(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    started(f, 1);
    tokens(f, "ok\xE4\xB8");
    assert_string_equal(f->text, "ok");
    done(f, FINISH_REASON_LENGTH, 4);
    assert_string_equal(f->text, "ok\xEF\xBF\xBD");
    assert_int_equal(f->n_tokens, 4);
}

static void test_relay_failed_becomes_error(void **state)
{
    struct fixture *f = *state;
    create(f, "END");
    started(f, 2);
    tokens(f, "hi E");
    assert_int_equal(failed(f, "decode failed: out of memory"), 1);
    assert_string_equal(f->error, "decode failed: out of memory");
    assert_string_equal(f->text, "hi "); /* held text is not sent after an error */
    assert_true(f->job_over);
    assert_int_equal(f->n_cancel, 0);
}

static void test_relay_failed_before_started_becomes_error(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    failed(f, "prompt too long");
    assert_string_equal(f->error, "prompt too long");
    assert_int_equal(f->prompt_tokens, -1);
    assert_true(f->job_over);
}

static void test_relay_usage_and_logprobs_count_every_token(void **state)
{
    struct fixture *f = *state;
    create(f, "zz");
    started(f, 7);
    tokens(f, "a z\xC3\xA9z");
    token(f, TOKENIZER_BYTES_EOS, -9.0f); /* no text of its own: still counted */
    done(f, FINISH_REASON_STOP, 7);
    assert_string_equal(f->text, "a z\xC3\xA9z");
    assert_int_equal(f->prompt_tokens, 7);
    assert_int_equal(f->completion_tokens, 7);
    assert_int_equal(f->n_tokens, 7);
    for (uint32_t i = 0; i < 6; i++)
        assert_true(f->logprobs[i] == -(float)(i + 1)); /* in order, none lost */
    assert_true(f->logprobs[6] == -9.0f);
}

static void test_relay_many_tokens_without_text_are_still_reported(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    started(f, 1);
    for (int i = 0; i < 3 * RELAY_MAX_PENDING + 5; i++)
        token(f, TOKENIZER_BYTES_EOS, 0);
    assert_int_equal(f->n_tokens, 3 * RELAY_MAX_PENDING);
    done(f, FINISH_REASON_LENGTH, 3 * RELAY_MAX_PENDING + 5);
    assert_int_equal(f->n_tokens, 3 * RELAY_MAX_PENDING + 5);
}

static void test_relay_client_cancel_sends_cancel_once_and_goes_quiet(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    started(f, 1);
    tokens(f, "ab");
    assert_true(relay_cancel(f->r));
    assert_false(relay_cancel(f->r));
    assert_true(relay_finished(f->r));
    assert_int_equal(token(f, 'c', 0), 0);
    assert_int_equal(done(f, FINISH_REASON_CANCELLED, 3), 0);
    assert_true(f->job_over);
    assert_false(relay_cancel(f->r)); /* the job is over: nothing to cancel */
}

static void test_relay_rejects_records_out_of_order(void **state)
{
    struct fixture *f = *state;
    struct relay_out out;
    struct proto_msg m = {.type = MSG_TYPE_TOKEN, .req_id = 1};
    create(f, NULL);
    assert_int_equal(relay_feed(f->r, &m, &out), -EPROTO); /* TOKEN before STARTED */
    started(f, 1);
    m.type = MSG_TYPE_STARTED;
    assert_int_equal(relay_feed(f->r, &m, &out), -EPROTO); /* STARTED twice */
    m.type = MSG_TYPE_JOB;
    assert_int_equal(relay_feed(f->r, &m, &out), -EPROTO);
    done(f, FINISH_REASON_STOP, 0);
    m.type = MSG_TYPE_TOKEN;
    assert_int_equal(relay_feed(f->r, &m, &out), -EPROTO); /* after the final record */
}

static void test_relay_undecodable_token_is_an_error_and_cancels(void **state)
{
    struct fixture *f = *state;
    create(f, NULL);
    started(f, 1);
    token(f, 99999, 0);
    assert_true(f->finished);
    assert_non_null(strstr(f->error, "99999"));
    assert_int_equal(f->n_cancel, 1);
    done(f, FINISH_REASON_CANCELLED, 1);
    assert_true(f->job_over);
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
        T(test_relay_stop_across_tokens_finishes_and_cancels_once),
        T(test_relay_done_releases_held_text),
        T(test_relay_done_turns_a_broken_tail_into_replacement),
        T(test_relay_failed_becomes_error),
        T(test_relay_failed_before_started_becomes_error),
        T(test_relay_usage_and_logprobs_count_every_token),
        T(test_relay_many_tokens_without_text_are_still_reported),
        T(test_relay_client_cancel_sends_cancel_once_and_goes_quiet),
        T(test_relay_rejects_records_out_of_order),
        T(test_relay_undecodable_token_is_an_error_and_cancels),
        T(test_relay_bad_stop_string_is_refused),
    };
    return cmocka_run_group_tests_name("relay", tests, NULL, NULL);
}
