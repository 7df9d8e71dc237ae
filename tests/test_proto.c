/* proto: every record type round-trips; every malformed variant (version, type, count, field
 * types, limits, truncation, trailing bytes, not an array) is rejected with -EPROTO; encode
 * gives -ENOSPC when the buffer is short and -EINVAL past wire.h's limits; random byte
 * mutations of valid records never crash the decoder (fixed seed, bounded). Malformed
 * records are built with msgpack-c's own packer, independently of proto.c's encoder. */
#include "proto.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <msgpack.h>
#include <pthread.h>
#include <stdatomic.h>

/* Outside ASan (which owns malloc), count the mallocs of this process and the largest one:
 * the decoder's contract is "nothing allocated per record" and "no size from unchecked
 * bytes". glibc's __libc_malloc is the allocator underneath; free() pairs with it. */
#if !defined(__SANITIZE_ADDRESS__)
#define TEST_COUNTS_MALLOC 1
extern void *__libc_malloc(size_t n);
static _Atomic size_t g_n_mallocs, g_max_malloc;

void *malloc(size_t n)
{
    size_t m = atomic_load_explicit(&g_max_malloc, memory_order_relaxed);

    atomic_fetch_add_explicit(&g_n_mallocs, 1, memory_order_relaxed);
    while (n > m && !atomic_compare_exchange_weak(&g_max_malloc, &m, n))
        ;
    return __libc_malloc(n);
}
#endif

#define BUF_CAP (WIRE_MAX_MSG + 64)

struct fixture {
    unsigned char *buf;   /* BUF_CAP bytes */
    uint32_t *prompt_in;  /* WIRE_MAX_PROMPT + 1 tokens to encode */
    uint32_t *prompt_out; /* WIRE_MAX_PROMPT + 1 tokens to decode into */
    struct proto_msg in, out;
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

static int setup_proto(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return -1;
    f->buf = malloc(BUF_CAP);
    f->prompt_in = calloc(WIRE_MAX_PROMPT + 1, sizeof(uint32_t));
    f->prompt_out = calloc(WIRE_MAX_PROMPT + 1, sizeof(uint32_t));
    if (f->buf == NULL || f->prompt_in == NULL || f->prompt_out == NULL)
        return -1;
    msgpack_sbuffer_init(&f->sb);
    msgpack_packer_init(&f->pk, &f->sb, msgpack_sbuffer_write);
    *state = f;
    return 0;
}

static int teardown_proto(void **state)
{
    struct fixture *f = *state;

    msgpack_sbuffer_destroy(&f->sb);
    free(f->buf);
    free(f->prompt_in);
    free(f->prompt_out);
    free(f);
    return 0;
}

/* Decode into f->out with the prompt buffer set up, with cap tokens of room. */
static int decode_cap(struct fixture *f, const void *buf, size_t len, uint32_t cap)
{
    memset(&f->out, 0xee, sizeof(f->out)); /* stale garbage must not leak through */
    return proto_decode(buf, len, &f->out, f->prompt_out, cap);
}

static int decode(struct fixture *f, const void *buf, size_t len)
{
    return decode_cap(f, buf, len, WIRE_MAX_PROMPT);
}

/* A JOB with a prompt and every sampling field set away from its default. */
static void make_job(struct fixture *f, uint32_t n_prompt)
{
    struct proto_job *j = &f->in.u.job;

    memset(&f->in, 0, sizeof(f->in));
    f->in.type = MSG_TYPE_JOB;
    f->in.req_id = UINT64_C(0x123456789abcdef0);
    for (uint32_t i = 0; i < n_prompt; i++)
        f->prompt_in[i] = i * 2654435761u;
    j->prompt = f->prompt_in;
    j->n_prompt = n_prompt;
    j->max_new_tokens = 4096;
    proto_sampling_init(&j->sampling);
    j->sampling.temperature = 0.75f;
    j->sampling.top_p = 0.9f;
    j->sampling.min_p = 0.05f;
    j->sampling.presence_penalty = 0.5f;
    j->sampling.frequency_penalty = -0.25f;
    j->sampling.repetition_penalty = 1.1f;
    j->sampling.top_k = 40;
    j->sampling.seed = UINT64_MAX - 7;
    j->sampling.top_logprobs = WIRE_MAX_TOP_LOGPROBS;
    j->sampling.logprobs = true;
    j->sampling.ignore_eos = true;
    j->sampling.no_cache = true;
    j->sampling.n_logit_bias = WIRE_MAX_LOGIT_BIAS;
    for (uint32_t i = 0; i < WIRE_MAX_LOGIT_BIAS; i++) {
        j->sampling.logit_bias[i].token = UINT32_MAX - i;
        j->sampling.logit_bias[i].bias = (float)i - 100.0f;
    }
}

static int encode(struct fixture *f)
{
    return proto_encode(&f->in, f->buf, BUF_CAP);
}

/* ---- round trips ---------------------------------------------------------------------- */

static void assert_sampling_equal(const struct proto_sampling *a, const struct proto_sampling *b)
{
    assert_true(a->temperature == b->temperature);
    assert_true(a->top_p == b->top_p);
    assert_true(a->min_p == b->min_p);
    assert_true(a->presence_penalty == b->presence_penalty);
    assert_true(a->frequency_penalty == b->frequency_penalty);
    assert_true(a->repetition_penalty == b->repetition_penalty);
    assert_int_equal(a->top_k, b->top_k);
    assert_true(a->seed == b->seed);
    assert_int_equal(a->top_logprobs, b->top_logprobs);
    assert_int_equal(a->logprobs, b->logprobs);
    assert_int_equal(a->ignore_eos, b->ignore_eos);
    assert_int_equal(a->no_cache, b->no_cache);
    assert_int_equal(a->n_logit_bias, b->n_logit_bias);
    for (uint32_t i = 0; i < a->n_logit_bias; i++) {
        assert_int_equal(a->logit_bias[i].token, b->logit_bias[i].token);
        assert_true(a->logit_bias[i].bias == b->logit_bias[i].bias);
    }
}

static void test_proto_job_round_trips(void **state)
{
    struct fixture *f = *state;
    uint32_t sizes[] = {0, 1, 3, 1000, WIRE_MAX_PROMPT};

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        make_job(f, sizes[k]);
        int len = encode(f);
        assert_true(len > 0);
        assert_int_equal(decode(f, f->buf, (size_t)len), 0);
        assert_int_equal(f->out.type, MSG_TYPE_JOB);
        assert_true(f->out.req_id == f->in.req_id);
        assert_int_equal(f->out.u.job.n_prompt, sizes[k]);
        assert_ptr_equal(f->out.u.job.prompt, f->prompt_out);
        if (sizes[k] > 0)
            assert_memory_equal(f->prompt_out, f->prompt_in, sizes[k] * sizeof(uint32_t));
        assert_int_equal(f->out.u.job.max_new_tokens, 4096);
        assert_sampling_equal(&f->out.u.job.sampling, &f->in.u.job.sampling);
    }
}

static void test_proto_job_request_id_round_trips_and_a_bad_one_is_refused(void **state)
{
    struct fixture *f = *state;
    static const char *bad[] = {"has space", "quote\"", "nl\n", "tab\t", "semi;colon", "\x7f"};
    const size_t n_bad = sizeof(bad) / sizeof(bad[0]);
    int len;

    make_job(f, 3);
    snprintf(f->in.u.job.request_id, sizeof(f->in.u.job.request_id), "nginx-3f2a.77:b_c");
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_string_equal(f->out.u.job.request_id, "nginx-3f2a.77:b_c");
    /* none: "" */
    f->in.u.job.request_id[0] = '\0';
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_string_equal(f->out.u.job.request_id, "");
    /* the longest */
    memset(f->in.u.job.request_id, 'a', WIRE_MAX_REQUEST_ID);
    f->in.u.job.request_id[WIRE_MAX_REQUEST_ID] = '\0';
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_int_equal(strlen(f->out.u.job.request_id), WIRE_MAX_REQUEST_ID);
    /* refused at the source: characters outside the set, or no NUL within the bound */
    for (size_t i = 0; i < n_bad; i++) {
        snprintf(f->in.u.job.request_id, sizeof(f->in.u.job.request_id), "%s", bad[i]);
        assert_int_equal(encode(f), -EINVAL);
    }
    memset(f->in.u.job.request_id, 'a', sizeof(f->in.u.job.request_id));
    assert_int_equal(encode(f), -EINVAL);

    /* and at the receiver: a record made by hand with each bad id, and one a byte too long */
    for (size_t i = 0; i <= n_bad; i++) {
        char longid[WIRE_MAX_REQUEST_ID + 1];
        const char *id = longid;
        size_t n = sizeof(longid);
        memset(longid, 'a', sizeof(longid));
        if (i < n_bad) {
            id = bad[i];
            n = strlen(bad[i]);
        }
        f->in.u.job.request_id[0] = '\0';
        assert_true((len = encode(f)) > 0);
        /* the empty id is the record's last byte (0xa0): the bad one goes in its place */
        assert_int_equal(f->buf[len - 1], 0xa0);
        msgpack_sbuffer_clear(&f->sb);
        msgpack_sbuffer_write(&f->sb, (const char *)f->buf, (size_t)len - 1);
        msgpack_pack_str_with_body(&f->pk, id, n);
        assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
        assert_int_equal(f->out.type, MSG_TYPE_JOB); /* the header still names the job */
    }
}

static void test_proto_job_grammar_round_trips_and_is_checked(void **state)
{
    struct fixture *f = *state;
    static char big[WIRE_MAX_GRAMMAR + 1];
    const char *g = "root ::= \"{\" [a-z]* \"}\"";
    int len;

    make_job(f, 3);
    f->in.u.job.grammar = g;
    f->in.u.job.grammar_len = (uint32_t)strlen(g);
    len = encode(f);
    assert_true(len > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_int_equal(f->out.u.job.grammar_len, strlen(g));
    assert_memory_equal(f->out.u.job.grammar, g, strlen(g));
    /* none: length 0 */
    f->in.u.job.grammar_len = 0;
    len = encode(f);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_int_equal(f->out.u.job.grammar_len, 0);
    /* a NUL inside, or over the limit: refused at the source */
    f->in.u.job.grammar = "a\0b";
    f->in.u.job.grammar_len = 3;
    assert_int_equal(encode(f), -EINVAL);
    memset(big, 'x', sizeof(big));
    f->in.u.job.grammar = big;
    f->in.u.job.grammar_len = WIRE_MAX_GRAMMAR + 1;
    assert_int_equal(encode(f), -EINVAL);
    f->in.u.job.grammar_len = 0;
}

static void test_proto_job_default_sampling_round_trips(void **state)
{
    struct fixture *f = *state;

    make_job(f, 5);
    proto_sampling_init(&f->in.u.job.sampling);
    assert_true(f->in.u.job.sampling.temperature == 0.0f);
    assert_true(f->in.u.job.sampling.top_p == 1.0f);
    assert_true(f->in.u.job.sampling.repetition_penalty == 1.0f);
    assert_int_equal(f->in.u.job.sampling.n_logit_bias, 0);
    int len = encode(f);
    assert_true(len > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_sampling_equal(&f->out.u.job.sampling, &f->in.u.job.sampling);
}

static void test_proto_pause_and_resume_round_trip(void **state)
{
    struct fixture *f = *state;
    int len;

    for (int t = MSG_TYPE_PAUSE; t <= MSG_TYPE_RESUME; t++) {
        memset(&f->in, 0, sizeof(f->in));
        f->in.type = (enum msg_type)t;
        f->in.req_id = 42;
        assert_true((len = encode(f)) > 0);
        assert_int_equal(decode(f, f->buf, (size_t)len), 0);
        assert_int_equal(f->out.type, t);
        assert_int_equal(f->out.req_id, 42);
    }
}

static void test_proto_cancel_and_started_round_trip(void **state)
{
    struct fixture *f = *state;
    int len;

    memset(&f->in, 0, sizeof(f->in));
    f->in.type = MSG_TYPE_CANCEL;
    f->in.req_id = 7;
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_int_equal(f->out.type, MSG_TYPE_CANCEL);
    assert_int_equal(f->out.req_id, 7);

    f->in.type = MSG_TYPE_STARTED;
    f->in.req_id = 0;
    f->in.u.prompt_tokens = UINT32_MAX;
    f->in.cached_tokens = 4096;
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_int_equal(f->out.type, MSG_TYPE_STARTED);
    assert_int_equal(f->out.req_id, 0);
    assert_int_equal(f->out.u.prompt_tokens, UINT32_MAX);
    assert_int_equal(f->out.cached_tokens, 4096);
    /* CACHE: events in order, a reset; a key of 0 or a request id is refused */
    f->in.type = MSG_TYPE_CACHE;
    f->in.req_id = 0;
    f->in.u.cache.reset = true;
    f->in.u.cache.n = 3;
    f->in.u.cache.ev[0] = 0x1235;
    f->in.u.cache.ev[1] = 0x1234;
    f->in.u.cache.ev[2] = UINT64_MAX;
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    assert_int_equal(f->out.type, MSG_TYPE_CACHE);
    assert_true(f->out.u.cache.reset);
    assert_int_equal(f->out.u.cache.n, 3);
    assert_true(f->out.u.cache.ev[1] == 0x1234 && f->out.u.cache.ev[2] == UINT64_MAX);
    f->in.u.cache.ev[1] = 0;
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
    f->in.u.cache.ev[1] = 8;
    f->in.req_id = 9;
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
    f->in.req_id = 0;
    f->in.u.cache.n = WIRE_MAX_CACHE_EVENTS + 1;
    assert_true(encode(f) < 0);

    f->in.type = MSG_TYPE_STARTED;
    /* more reused than the prompt holds: refused */
    f->in.u.prompt_tokens = 10;
    f->in.cached_tokens = 11;
    assert_true((len = encode(f)) > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
}

static void test_proto_token_round_trips_with_and_without_top(void **state)
{
    struct fixture *f = *state;
    uint32_t tops[] = {0, 1, WIRE_MAX_TOP_LOGPROBS};

    for (size_t k = 0; k < 3; k++) {
        memset(&f->in, 0, sizeof(f->in));
        f->in.type = MSG_TYPE_TOKEN;
        f->in.req_id = 99 + k;
        f->in.u.token.token = 31999;
        f->in.u.token.logprob = k == 0 ? 0.0f : -1.25f;
        f->in.u.token.n_top = tops[k];
        for (uint32_t i = 0; i < tops[k]; i++) {
            f->in.u.token.top[i].token = i * 7;
            f->in.u.token.top[i].logprob = i == 0 ? -INFINITY : -0.5f * (float)i;
        }
        int len = encode(f);
        assert_true(len > 0);
        if (k == 0)
            assert_true(len <= 16); /* the hot record stays small */
        assert_int_equal(decode(f, f->buf, (size_t)len), 0);
        assert_int_equal(f->out.type, MSG_TYPE_TOKEN);
        assert_int_equal(f->out.req_id, 99 + k);
        assert_int_equal(f->out.u.token.token, 31999);
        assert_true(f->out.u.token.logprob == f->in.u.token.logprob);
        assert_int_equal(f->out.u.token.n_top, tops[k]);
        for (uint32_t i = 0; i < tops[k]; i++) {
            assert_int_equal(f->out.u.token.top[i].token, i * 7);
            assert_true(f->out.u.token.top[i].logprob == f->in.u.token.top[i].logprob);
        }
    }
}

static void test_proto_done_round_trips_each_reason(void **state)
{
    struct fixture *f = *state;
    enum finish_reason reasons[] = {FINISH_REASON_STOP, FINISH_REASON_LENGTH,
                                    FINISH_REASON_CANCELLED};

    for (size_t k = 0; k < 3; k++) {
        memset(&f->in, 0, sizeof(f->in));
        f->in.type = MSG_TYPE_DONE;
        f->in.req_id = k;
        f->in.u.done.reason = reasons[k];
        f->in.u.done.completion_tokens = 1000 + (uint32_t)k;
        int len = encode(f);
        assert_true(len > 0);
        assert_int_equal(decode(f, f->buf, (size_t)len), 0);
        assert_int_equal(f->out.type, MSG_TYPE_DONE);
        assert_int_equal(f->out.u.done.reason, reasons[k]);
        assert_int_equal(f->out.u.done.completion_tokens, 1000 + k);
    }
}

static void test_proto_failed_round_trips(void **state)
{
    struct fixture *f = *state;
    size_t lens[] = {0, 1, 40, WIRE_MAX_ERROR};

    for (size_t k = 0; k < 4; k++) {
        memset(&f->in, 0, sizeof(f->in));
        f->in.type = MSG_TYPE_FAILED;
        f->in.req_id = 5;
        for (size_t i = 0; i < lens[k]; i++)
            f->in.u.error[i] = (char)('a' + i % 26);
        int len = encode(f);
        assert_true(len > 0);
        assert_int_equal(decode(f, f->buf, (size_t)len), 0);
        assert_int_equal(f->out.type, MSG_TYPE_FAILED);
        assert_string_equal(f->out.u.error, f->in.u.error);
    }
}

/* ---- hand-built records --------------------------------------------------------------- */

#define NO_FIELD (-1)

/* The valid field count of each type, header included. */
static uint32_t count_of(int type)
{
    static const uint32_t counts[] = {0, 8, 3, 5, 6, 5, 4};
    return counts[type];
}

/* Pack something of a type no field has: a string (or, for FAILED's string, an int). */
static void pack_wrong(msgpack_packer *pk, bool field_is_str)
{
    if (field_is_str)
        msgpack_pack_int(pk, 5);
    else
        msgpack_pack_str_with_body(pk, "x", 1);
}

/* The sampling block: [0.7 as float64, float32, integer 0, ...]; field bad_s replaced. */
static void pack_sampling(msgpack_packer *pk, int bad_s)
{
    msgpack_pack_array(pk, 13);
    for (int i = 0; i < 13; i++) {
        if (i == bad_s) {
            pack_wrong(pk, false);
            continue;
        }
        switch (i) {
        case 0: msgpack_pack_double(pk, 0.7); break;
        case 1: msgpack_pack_float(pk, 0.9f); break;
        case 2: msgpack_pack_int(pk, 0); break;
        case 3: msgpack_pack_double(pk, 0.5); break;
        case 4: msgpack_pack_int(pk, -1); break;
        case 5: msgpack_pack_float(pk, 1.1f); break;
        case 6: msgpack_pack_int(pk, -1); break; /* top_k: any int32 */
        case 7: msgpack_pack_uint64(pk, UINT64_MAX); break;
        case 8: msgpack_pack_uint32(pk, 3); break;
        case 9: msgpack_pack_true(pk); break;
        case 10: msgpack_pack_false(pk); break;
        case 11:
            msgpack_pack_array(pk, 2);
            msgpack_pack_array(pk, 2);
            msgpack_pack_uint32(pk, 17);
            msgpack_pack_double(pk, -100.0);
            msgpack_pack_array(pk, 2);
            msgpack_pack_uint32(pk, 18);
            msgpack_pack_int(pk, 3);
            break;
        case 12: msgpack_pack_true(pk); break;
        }
    }
}

/* A record of type with count_delta fields more (extra nils) or fewer (the last ones
 * dropped) than it should have, field bad replaced by a wrongly typed value, and sampling
 * field bad_s likewise. Returns the packed bytes in f->sb. */
static void pack_record(struct fixture *f, int type, int count_delta, int bad, int bad_s)
{
    msgpack_packer *pk = &f->pk;
    uint32_t n = (uint32_t)((int)count_of(type) + count_delta);

    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n; i++) {
        if ((int)i == bad) {
            pack_wrong(pk, (type == MSG_TYPE_FAILED && i == 3) ||
                               (type == MSG_TYPE_JOB && (i == 6 || i == 7)));
            continue;
        }
        if (i >= count_of(type)) {
            msgpack_pack_nil(pk);
            continue;
        }
        switch (i) {
        case 0: msgpack_pack_uint32(pk, WIRE_VERSION); continue;
        case 1: msgpack_pack_uint32(pk, (uint32_t)type); continue;
        case 2: msgpack_pack_uint64(pk, 42); continue;
        }
        switch (type * 16 + (int)i) {
        case MSG_TYPE_JOB * 16 + 3:
            msgpack_pack_array(pk, 3);
            msgpack_pack_uint32(pk, 1);
            msgpack_pack_uint32(pk, UINT32_MAX);
            msgpack_pack_uint32(pk, 0);
            break;
        case MSG_TYPE_JOB * 16 + 4: msgpack_pack_uint32(pk, 16); break;
        case MSG_TYPE_JOB * 16 + 5: pack_sampling(pk, bad_s); break;
        case MSG_TYPE_JOB * 16 + 6: msgpack_pack_str_with_body(pk, "root ::= \"a\"", 12); break;
        case MSG_TYPE_JOB * 16 + 7: msgpack_pack_str_with_body(pk, "req-1", 5); break;
        case MSG_TYPE_STARTED * 16 + 3: msgpack_pack_uint32(pk, 3); break;
        case MSG_TYPE_STARTED * 16 + 4: msgpack_pack_uint32(pk, 2); break;
        case MSG_TYPE_TOKEN * 16 + 3: msgpack_pack_uint32(pk, 65); break;
        case MSG_TYPE_TOKEN * 16 + 4: msgpack_pack_double(pk, -0.5); break;
        case MSG_TYPE_TOKEN * 16 + 5:
            msgpack_pack_array(pk, 1);
            msgpack_pack_array(pk, 2);
            msgpack_pack_uint32(pk, 66);
            msgpack_pack_float(pk, -2.0f);
            break;
        case MSG_TYPE_DONE * 16 + 3: msgpack_pack_uint32(pk, FINISH_REASON_LENGTH); break;
        case MSG_TYPE_DONE * 16 + 4: msgpack_pack_uint32(pk, 16); break;
        case MSG_TYPE_FAILED * 16 + 3: msgpack_pack_str_with_body(pk, "boom", 4); break;
        }
    }
}

static void test_proto_hand_built_records_decode(void **state)
{
    struct fixture *f = *state;

    /* The builder itself makes valid records (float64 and integers accepted as floats). */
    for (int type = MSG_TYPE_JOB; type <= MSG_TYPE_FAILED; type++) {
        pack_record(f, type, 0, NO_FIELD, NO_FIELD);
        assert_int_equal(decode(f, f->sb.data, f->sb.size), 0);
        assert_int_equal(f->out.type, type);
        assert_int_equal(f->out.req_id, 42);
    }
    pack_record(f, MSG_TYPE_JOB, 0, NO_FIELD, NO_FIELD);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), 0);
    assert_true(fabsf(f->out.u.job.sampling.temperature - 0.7f) < 1e-6f);
    assert_true(f->out.u.job.sampling.min_p == 0.0f);
    assert_true(f->out.u.job.sampling.frequency_penalty == -1.0f);
    assert_int_equal(f->out.u.job.sampling.top_k, -1);
    assert_int_equal(f->out.u.job.sampling.n_logit_bias, 2);
    assert_true(f->out.u.job.sampling.logit_bias[1].bias == 3.0f);
    assert_int_equal(f->out.u.job.n_prompt, 3);
    assert_int_equal(f->prompt_out[1], UINT32_MAX);
}

static void test_proto_wrong_count_for_each_type_rejected(void **state)
{
    struct fixture *f = *state;

    for (int type = MSG_TYPE_JOB; type <= MSG_TYPE_FAILED; type++) {
        for (int delta = -2; delta <= 2; delta++) {
            if (delta == 0)
                continue;
            pack_record(f, type, delta, NO_FIELD, NO_FIELD);
            assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
        }
    }
}

static void test_proto_wrong_field_types_rejected(void **state)
{
    struct fixture *f = *state;

    for (int type = MSG_TYPE_JOB; type <= MSG_TYPE_FAILED; type++) {
        for (int bad = 0; bad < (int)count_of(type); bad++) {
            pack_record(f, type, 0, bad, NO_FIELD);
            assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
        }
    }
    for (int bad_s = 0; bad_s < 13; bad_s++) {
        pack_record(f, MSG_TYPE_JOB, 0, NO_FIELD, bad_s);
        assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    }
}

/* [v, type, 42, value] for a STARTED-shaped record with one custom field, or a TOKEN. */
static void pack_started_with(struct fixture *f, void (*pack_value)(msgpack_packer *))
{
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 5);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_STARTED);
    msgpack_pack_uint32(&f->pk, 42);
    pack_value(&f->pk);
    msgpack_pack_uint32(&f->pk, 0);
}

static void pack_u32_max_plus_one(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, UINT64_C(1) << 32);
}
static void pack_negative(msgpack_packer *pk)
{
    msgpack_pack_int(pk, -1);
}
static void pack_float_int(msgpack_packer *pk)
{
    msgpack_pack_double(pk, 3.0);
}
static void pack_bool(msgpack_packer *pk)
{
    msgpack_pack_true(pk);
}
static void pack_nil(msgpack_packer *pk)
{
    msgpack_pack_nil(pk);
}

static void test_proto_integer_types_and_ranges_checked(void **state)
{
    struct fixture *f = *state;
    void (*bad[])(msgpack_packer *) = {pack_u32_max_plus_one, pack_negative, pack_float_int,
                                       pack_bool, pack_nil};

    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        pack_started_with(f, bad[k]);
        assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    }
}

static void test_proto_wrong_version_rejected(void **state)
{
    struct fixture *f = *state;
    uint32_t versions[] = {0, WIRE_VERSION + 1, 0xffffffffu};

    for (size_t k = 0; k < 3; k++) {
        msgpack_sbuffer_clear(&f->sb);
        msgpack_pack_array(&f->pk, 3);
        msgpack_pack_uint32(&f->pk, versions[k]);
        msgpack_pack_uint32(&f->pk, MSG_TYPE_CANCEL);
        msgpack_pack_uint32(&f->pk, 1);
        assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    }
    /* A version of the right value but the wrong type. */
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 3);
    msgpack_pack_double(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_CANCEL);
    msgpack_pack_uint32(&f->pk, 1);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
}

static void test_proto_wrong_type_rejected(void **state)
{
    struct fixture *f = *state;
    uint32_t types[] = {0, MSG_TYPE_LAST + 1, 255, 0x80000001u};

    for (size_t k = 0; k < 4; k++) {
        for (uint32_t n = 3; n <= 6; n++) {
            msgpack_sbuffer_clear(&f->sb);
            msgpack_pack_array(&f->pk, n);
            msgpack_pack_uint32(&f->pk, WIRE_VERSION);
            msgpack_pack_uint32(&f->pk, types[k]);
            for (uint32_t i = 2; i < n; i++)
                msgpack_pack_uint32(&f->pk, 1);
            assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
        }
    }
}

static void test_proto_not_an_array_rejected(void **state)
{
    struct fixture *f = *state;

    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_map(&f->pk, 1);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_CANCEL);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_str_with_body(&f->pk, "[1,2,3]", 7);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 0);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    assert_int_equal(decode(f, "", 0), -EPROTO);
    assert_int_equal(decode(f, NULL, 0), -EPROTO);
    assert_int_equal(decode(f, "\xc1", 1), -EPROTO); /* never used in msgpack */
}

static void test_proto_huge_declared_counts_rejected_without_allocating(void **state)
{
    struct fixture *f = *state;
    /* [1, 1, array32 of 4 billion ...]: msgpack-c would size its storage from the count. */
    static const unsigned char huge_array[] = {0x96, 0x01, 0x01, 0x01, 0xdd,
                                               0xff, 0xff, 0xff, 0xff};
    static const unsigned char huge_map[] = {0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01};
    static const unsigned char huge_str[] = {0x94, 0x01, 0x06, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xf0};
    static const unsigned char huge_ext[] = {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01};

    assert_int_equal(decode(f, huge_array, sizeof(huge_array)), -EPROTO);
    assert_int_equal(decode(f, huge_map, sizeof(huge_map)), -EPROTO);
    assert_int_equal(decode(f, huge_str, sizeof(huge_str)), -EPROTO);
    assert_int_equal(decode(f, huge_ext, sizeof(huge_ext)), -EPROTO);

    /* 200000 nils fill the bytes they declare but are more objects than any record holds. */
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 200000);
    for (int i = 0; i < 200000; i++)
        msgpack_pack_nil(&f->pk);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
}

static void test_proto_oversize_prompt_rejected(void **state)
{
    struct fixture *f = *state;

    /* Encoding refuses it... */
    make_job(f, WIRE_MAX_PROMPT + 1);
    assert_int_equal(encode(f), -EINVAL);
    /* ...and a hand-built one is refused on decode, even with room to spare. */
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 6);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_JOB);
    msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_array(&f->pk, WIRE_MAX_PROMPT + 1);
    for (uint32_t i = 0; i <= WIRE_MAX_PROMPT; i++)
        msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_uint32(&f->pk, 1);
    pack_sampling(&f->pk, NO_FIELD);
    assert_int_equal(decode_cap(f, f->sb.data, f->sb.size, WIRE_MAX_PROMPT + 1), -EPROTO);
}

static void test_proto_prompt_larger_than_cap_rejected(void **state)
{
    struct fixture *f = *state;

    make_job(f, 10);
    int len = encode(f);
    assert_true(len > 0);
    assert_int_equal(decode_cap(f, f->buf, (size_t)len, 9), -EPROTO);
    assert_int_equal(decode_cap(f, f->buf, (size_t)len, 0), -EPROTO);
    assert_int_equal(decode_cap(f, f->buf, (size_t)len, 10), 0);
    /* No buffer at all, whatever the caller's struct holds. */
    memset(&f->out, 0, sizeof(f->out));
    f->out.u.job.prompt = f->prompt_out;
    f->out.u.job.prompt_cap = 10;
    assert_int_equal(proto_decode(f->buf, (size_t)len, &f->out, NULL, 10), -EPROTO);
}

static void test_proto_bad_reason_rejected(void **state)
{
    struct fixture *f = *state;
    int len;

    memset(&f->in, 0, sizeof(f->in));
    f->in.type = MSG_TYPE_DONE;
    f->in.u.done.reason = (enum finish_reason)3;
    assert_int_equal(encode(f), -EINVAL);
    f->in.u.done.reason = FINISH_REASON_CANCELLED;
    assert_true((len = encode(f)) > 0);
    /* [v, 5, id, reason, n]: the reason is the byte after the header's three fixints. */
    assert_int_equal(f->buf[4], FINISH_REASON_CANCELLED);
    f->buf[4] = 3;
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
    f->buf[4] = 0x7f;
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
}

static void test_proto_error_string_too_long_rejected(void **state)
{
    struct fixture *f = *state;
    char big[WIRE_MAX_ERROR + 1];

    memset(big, 'e', sizeof(big));
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 4);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_FAILED);
    msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_str_with_body(&f->pk, big, WIRE_MAX_ERROR + 1);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    /* An embedded NUL would cut the message silently. */
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 4);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_FAILED);
    msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_str_with_body(&f->pk, "a\0b", 3);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    /* Encoding an unterminated error is refused. */
    memset(&f->in, 0, sizeof(f->in));
    f->in.type = MSG_TYPE_FAILED;
    memset(f->in.u.error, 'e', sizeof(f->in.u.error));
    assert_int_equal(encode(f), -EINVAL);
}

static void test_proto_limits_of_lists_rejected(void **state)
{
    struct fixture *f = *state;

    make_job(f, 2);
    f->in.u.job.sampling.n_logit_bias = WIRE_MAX_LOGIT_BIAS + 1;
    assert_int_equal(encode(f), -EINVAL);
    make_job(f, 2);
    f->in.u.job.sampling.top_logprobs = WIRE_MAX_TOP_LOGPROBS + 1;
    assert_int_equal(encode(f), -EINVAL);
    make_job(f, 2);
    f->in.u.job.sampling.temperature = NAN;
    assert_int_equal(encode(f), -EINVAL);
    make_job(f, 2);
    f->in.u.job.sampling.top_p = 1.5f;
    assert_int_equal(encode(f), -EINVAL);
    memset(&f->in, 0, sizeof(f->in));
    f->in.type = MSG_TYPE_TOKEN;
    f->in.u.token.n_top = WIRE_MAX_TOP_LOGPROBS + 1;
    assert_int_equal(encode(f), -EINVAL);
    f->in.u.token.n_top = 1;
    f->in.u.token.top[0].logprob = NAN;
    assert_int_equal(encode(f), -EINVAL);

    /* Decoding: 21 alternatives, 301 biases, 21 top_logprobs, a NaN, a temperature < 0. */
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 6);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_TOKEN);
    msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_float(&f->pk, -1.0f);
    msgpack_pack_array(&f->pk, WIRE_MAX_TOP_LOGPROBS + 1);
    for (uint32_t i = 0; i <= WIRE_MAX_TOP_LOGPROBS; i++) {
        msgpack_pack_array(&f->pk, 2);
        msgpack_pack_uint32(&f->pk, i);
        msgpack_pack_float(&f->pk, -1.0f);
    }
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);

    make_job(f, 1);
    f->in.u.job.sampling.top_logprobs = 1;
    int len = encode(f);
    assert_true(len > 0);
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);
    /* Find the encoded top_logprobs (a fixint 1 followed by true, true) and raise it. */
    int pos = -1;
    for (int i = 0; i + 2 < len; i++)
        if (f->buf[i] == 0x01 && f->buf[i + 1] == 0xc3 && f->buf[i + 2] == 0xc3)
            pos = i;
    assert_true(pos > 0);
    f->buf[pos] = WIRE_MAX_TOP_LOGPROBS + 1;
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
    f->buf[pos] = WIRE_MAX_TOP_LOGPROBS;
    assert_int_equal(decode(f, f->buf, (size_t)len), 0);

    make_job(f, 1);
    f->in.u.job.sampling.n_logit_bias = 0;
    f->in.u.job.sampling.temperature = 2.0f; /* float32 0x40000000 */
    assert_true((len = encode(f)) > 0);
    pos = -1;
    for (int i = 0; i + 4 < len; i++)
        if (f->buf[i] == 0xca && f->buf[i + 1] == 0x40 && f->buf[i + 2] == 0 &&
            f->buf[i + 3] == 0 && f->buf[i + 4] == 0)
            pos = i;
    assert_true(pos > 0);
    f->buf[pos + 1] = 0xc0; /* -2.0 */
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
    f->buf[pos + 1] = 0x7f;
    f->buf[pos + 2] = 0xc0; /* NaN */
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);
    f->buf[pos + 2] = 0x80; /* +Inf */
    assert_int_equal(decode(f, f->buf, (size_t)len), -EPROTO);

    /* 301 logit biases. */
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 8);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_JOB);
    msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_array(&f->pk, 0);
    msgpack_pack_uint32(&f->pk, 1);
    msgpack_pack_array(&f->pk, 13);
    for (int i = 0; i < 6; i++)
        msgpack_pack_float(&f->pk, 1.0f);
    msgpack_pack_int(&f->pk, 0);
    msgpack_pack_int(&f->pk, 0);
    msgpack_pack_int(&f->pk, 0);
    msgpack_pack_false(&f->pk);
    msgpack_pack_false(&f->pk);
    size_t before_bias = f->sb.size;
    msgpack_pack_array(&f->pk, WIRE_MAX_LOGIT_BIAS + 1);
    for (uint32_t i = 0; i <= WIRE_MAX_LOGIT_BIAS; i++) {
        msgpack_pack_array(&f->pk, 2);
        msgpack_pack_uint32(&f->pk, i);
        msgpack_pack_float(&f->pk, 1.0f);
    }
    msgpack_pack_false(&f->pk); /* no_cache */
    msgpack_pack_str(&f->pk, 0);
    msgpack_pack_str(&f->pk, 0);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), -EPROTO);
    /* The same with 300 (drop the last pair, fix the count) is fine. */
    f->sb.size = before_bias;
    msgpack_pack_array(&f->pk, WIRE_MAX_LOGIT_BIAS);
    for (uint32_t i = 0; i < WIRE_MAX_LOGIT_BIAS; i++) {
        msgpack_pack_array(&f->pk, 2);
        msgpack_pack_uint32(&f->pk, i);
        msgpack_pack_float(&f->pk, 1.0f);
    }
    msgpack_pack_false(&f->pk); /* no_cache */
    msgpack_pack_str(&f->pk, 0);
    msgpack_pack_str(&f->pk, 0);
    assert_int_equal(decode(f, f->sb.data, f->sb.size), 0);
    assert_int_equal(f->out.u.job.sampling.n_logit_bias, WIRE_MAX_LOGIT_BIAS);
}

/* Every valid record of the round-trip tests, for truncation and mutation. */
static size_t make_corpus(struct fixture *f, unsigned char **recs, size_t *lens, size_t max)
{
    size_t n = 0;

    for (int kind = 0; kind < 9 && n < max; kind++) {
        memset(&f->in, 0, sizeof(f->in));
        f->in.req_id = (uint64_t)kind * 1000003;
        switch (kind) {
        case 0: make_job(f, 7); f->in.u.job.sampling.n_logit_bias = 3; break;
        case 1: f->in.type = MSG_TYPE_CANCEL; break;
        case 2: f->in.type = MSG_TYPE_STARTED; f->in.u.prompt_tokens = 300; break;
        case 3: f->in.type = MSG_TYPE_TOKEN; f->in.u.token.token = 70000; break;
        case 4:
            f->in.type = MSG_TYPE_TOKEN;
            f->in.u.token.n_top = 3;
            f->in.u.token.top[1].token = 5;
            f->in.u.token.top[2].logprob = -3.5f;
            break;
        case 5: f->in.type = MSG_TYPE_DONE; break;
        case 6: f->in.type = MSG_TYPE_DONE; f->in.u.done.reason = FINISH_REASON_CANCELLED; break;
        case 7: f->in.type = MSG_TYPE_FAILED; strcpy(f->in.u.error, "model exploded"); break;
        case 8: make_job(f, 0); break;
        }
        int len = encode(f);
        assert_true(len > 0);
        recs[n] = malloc((size_t)len);
        assert_non_null(recs[n]);
        memcpy(recs[n], f->buf, (size_t)len);
        lens[n++] = (size_t)len;
    }
    return n;
}

static void test_proto_truncated_at_every_length_rejected(void **state)
{
    struct fixture *f = *state;
    unsigned char *recs[16];
    size_t lens[16], n = make_corpus(f, recs, lens, 16);

    for (size_t k = 0; k < n; k++) {
        for (size_t cut = 0; cut < lens[k]; cut++) {
            /* A heap copy of exactly cut bytes, so ASan sees any read past the end. */
            unsigned char *p = malloc(cut + 1);
            assert_non_null(p);
            memcpy(p, recs[k], cut);
            assert_int_equal(decode(f, cut ? p : NULL, cut), -EPROTO);
            free(p);
        }
        assert_int_equal(decode(f, recs[k], lens[k]), 0);
        free(recs[k]);
    }
}

static void test_proto_trailing_bytes_rejected(void **state)
{
    struct fixture *f = *state;
    unsigned char *recs[16];
    size_t lens[16], n = make_corpus(f, recs, lens, 16);

    for (size_t k = 0; k < n; k++) {
        memcpy(f->buf, recs[k], lens[k]);
        f->buf[lens[k]] = 0x00; /* a fixint */
        assert_int_equal(decode(f, f->buf, lens[k] + 1), -EPROTO);
        memcpy(f->buf + lens[k], recs[k], lens[k]); /* two records back to back */
        assert_int_equal(decode(f, f->buf, 2 * lens[k]), -EPROTO);
        free(recs[k]);
    }
}

static void test_proto_encode_short_buffer_returns_enospc(void **state)
{
    struct fixture *f = *state;
    unsigned char *recs[16];
    size_t lens[16], n = make_corpus(f, recs, lens, 16);

    for (size_t k = 0; k < n; k++) {
        /* Re-make the k-th record by decoding it, then encode into every shorter buffer. */
        assert_int_equal(decode(f, recs[k], lens[k]), 0);
        if (f->out.type == MSG_TYPE_JOB) {
            memcpy(f->prompt_in, f->prompt_out, f->out.u.job.n_prompt * sizeof(uint32_t));
            f->out.u.job.prompt = f->prompt_in;
        }
        f->in = f->out;
        for (size_t cap = 0; cap < lens[k]; cap++) {
            unsigned char *p = malloc(cap + 1);
            assert_non_null(p);
            assert_int_equal(proto_encode(&f->in, p, cap), -ENOSPC);
            free(p);
        }
        assert_int_equal(proto_encode(&f->in, f->buf, lens[k]), (int)lens[k]);
        assert_memory_equal(f->buf, recs[k], lens[k]);
        free(recs[k]);
    }
}

static void test_proto_random_mutations_never_crash(void **state)
{
    struct fixture *f = *state;
    unsigned char *recs[16], *p;
    size_t lens[16], n = make_corpus(f, recs, lens, 16);
    uint64_t rng = 0x2545f4914f6cdd1du; /* fixed seed: failures reproduce */
    unsigned accepted = 0, rejected = 0;

    for (int iter = 0; iter < 40000; iter++) {
        size_t k = (size_t)iter % n, len = lens[k];
        p = malloc(len + 8);
        assert_non_null(p);
        memcpy(p, recs[k], len);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        int n_mut = 1 + (int)(rng % 4);
        for (int m = 0; m < n_mut; m++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            size_t at = (size_t)(rng >> 8) % len;
            switch (rng % 4) {
            case 0: p[at] = (unsigned char)(rng >> 40); break;      /* random byte */
            case 1: p[at] ^= (unsigned char)(1u << (rng >> 32) % 8); break; /* bit flip */
            case 2: p[at] = 0xff; break;                            /* extremes */
            case 3: len = at + 1; break;                            /* truncate */
            }
        }
        int ret = decode(f, p, len);
        assert_true(ret == 0 || ret == -EPROTO);
        if (ret == 0) {
            /* Whatever is accepted is within the limits and encodes again. */
            accepted++;
            if (f->out.type == MSG_TYPE_JOB)
                assert_true(f->out.u.job.n_prompt <= WIRE_MAX_PROMPT);
            if (f->out.type == MSG_TYPE_TOKEN)
                assert_true(f->out.u.token.n_top <= WIRE_MAX_TOP_LOGPROBS);
            if (f->out.type == MSG_TYPE_FAILED)
                assert_true(strlen(f->out.u.error) <= WIRE_MAX_ERROR);
            assert_true(proto_encode(&f->out, f->buf, BUF_CAP) > 0);
        } else {
            rejected++;
        }
        free(p);
    }
    for (size_t k = 0; k < n; k++)
        free(recs[k]);
    assert_true(rejected > 0);
    assert_true(accepted > 0); /* e.g. a flipped payload bit in a token id */
}

/* ---- the decoder's contract --------------------------------------------------------- */

static void test_proto_job_after_token_never_writes_through_the_union(void **state)
{
    struct fixture *f = *state;
    int len;

    /* A TOKEN leaves token ids and logprobs in the union, where a JOB's prompt pointer and
     * capacity would sit. */
    memset(&f->in, 0, sizeof(f->in));
    f->in.type = MSG_TYPE_TOKEN;
    f->in.req_id = 5;
    f->in.u.token.token = 0x41414141u;
    f->in.u.token.logprob = -1.0f;
    f->in.u.token.n_top = WIRE_MAX_TOP_LOGPROBS;
    for (uint32_t i = 0; i < WIRE_MAX_TOP_LOGPROBS; i++)
        f->in.u.token.top[i].token = 0x41414141u;
    len = encode(f);
    assert_true(len > 0);
    assert_int_equal(proto_decode(f->buf, (size_t)len, &f->out, NULL, 0), 0);
    /* Then a JOB for a caller that expects none (the front): refused, nothing written. */
    make_job(f, 4);
    len = encode(f);
    assert_true(len > 0);
    assert_int_equal(proto_decode(f->buf, (size_t)len, &f->out, NULL, 0), -EPROTO);
    assert_int_equal(f->out.type, MSG_TYPE_JOB);
    assert_true(f->out.req_id == f->in.req_id);
}

static void test_proto_malformed_body_still_names_the_record(void **state)
{
    struct fixture *f = *state;
    int len;

    make_job(f, 3);
    len = encode(f);
    assert_true(len > 0);
    /* Cut inside the last bias: the body is malformed, the header intact. */
    assert_int_equal(decode(f, f->buf, (size_t)len - 1), -EPROTO);
    assert_int_equal(f->out.type, MSG_TYPE_JOB);
    assert_true(f->out.req_id == f->in.req_id);
    /* No header to name: type 0. */
    assert_int_equal(decode(f, "\x93\x7f\x01\x07", 4), -EPROTO); /* version 127 */
    assert_int_equal(f->out.type, 0);
    assert_int_equal(decode(f, "\xc1", 1), -EPROTO);
    assert_int_equal(f->out.type, 0);
}

static void test_proto_encode_refuses_non_finite_logit_bias(void **state)
{
    struct fixture *f = *state;

    make_job(f, 3);
    f->in.u.job.sampling.logit_bias[7].bias = NAN;
    assert_int_equal(encode(f), -EINVAL);
    f->in.u.job.sampling.logit_bias[7].bias = INFINITY;
    assert_int_equal(encode(f), -EINVAL);
    f->in.u.job.sampling.logit_bias[7].bias = -INFINITY;
    assert_int_equal(encode(f), -EINVAL);
    f->in.u.job.sampling.logit_bias[7].bias = -100.0f;
    assert_true(encode(f) > 0);
}

static void test_proto_decoder_allocates_nothing_per_record(void **state)
{
#ifdef TEST_COUNTS_MALLOC
    struct fixture *f = *state;
    struct proto_decoder *d = proto_decoder_create();
    size_t before;
    int len;

    assert_non_null(d);
    make_job(f, WIRE_MAX_PROMPT); /* the most objects a record holds */
    len = encode(f);
    assert_true(len > 0);
    before = atomic_load(&g_n_mallocs);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(proto_decoder_decode(d, f->buf, (size_t)len, &f->out, f->prompt_out,
                                              WIRE_MAX_PROMPT),
                         0);
        assert_int_equal(f->out.u.job.n_prompt, WIRE_MAX_PROMPT);
        assert_int_equal(proto_decoder_decode(d, "\xc1", 1, &f->out, NULL, 0), -EPROTO);
    }
    assert_int_equal(atomic_load(&g_n_mallocs), before);
    assert_int_equal(memcmp(f->prompt_out, f->prompt_in, WIRE_MAX_PROMPT * sizeof(uint32_t)),
                     0);
    proto_decoder_destroy(d);
#else
    (void)state;
    skip(); /* ASan owns malloc */
#endif
}

#ifdef TEST_COUNTS_MALLOC
/* A peer flipping an array count between a small and a huge value while we decode. */
struct flipper {
    volatile unsigned char *count; /* the 4 count bytes of an array32 */
    atomic_bool stop;
};

static void *flip_count(void *arg)
{
    struct flipper *fl = arg;

    while (!atomic_load_explicit(&fl->stop, memory_order_relaxed)) {
        for (int i = 0; i < 4; i++)
            fl->count[i] = 0xff;
        fl->count[0] = fl->count[1] = fl->count[2] = 0;
        fl->count[3] = 3;
    }
    return NULL;
}
#endif

static void test_proto_decoder_reads_a_changing_record_once(void **state)
{
#ifdef TEST_COUNTS_MALLOC
    struct fixture *f = *state;
    struct proto_decoder *d = proto_decoder_create();
    struct flipper fl = {0};
    pthread_t th;
    size_t len;

    assert_non_null(d);
    /* [1, JOB, 9, array32 [1, 2, 3], 16, sampling] built by hand around an array32 count. */
    msgpack_sbuffer_clear(&f->sb);
    msgpack_pack_array(&f->pk, 8);
    msgpack_pack_uint32(&f->pk, WIRE_VERSION);
    msgpack_pack_uint32(&f->pk, MSG_TYPE_JOB);
    msgpack_pack_uint64(&f->pk, 9);
    size_t at = f->sb.size;
    msgpack_sbuffer_write(&f->sb, "\xdd\x00\x00\x00\x03\x01\x02\x03", 8);
    msgpack_pack_uint32(&f->pk, 16);
    pack_sampling(&f->pk, NO_FIELD);
    msgpack_pack_str(&f->pk, 0);
    msgpack_pack_str(&f->pk, 0);
    memcpy(f->buf, f->sb.data, f->sb.size);
    len = f->sb.size;
    assert_int_equal(proto_decoder_decode(d, f->buf, len, &f->out, f->prompt_out, 8), 0);
    assert_int_equal(f->out.u.job.n_prompt, 3);

    atomic_store(&g_max_malloc, 0);
    fl.count = f->buf + at + 1;
    assert_int_equal(pthread_create(&th, NULL, flip_count, &fl), 0);
    for (int i = 0; i < 20000; i++) {
        int rc = proto_decoder_decode(d, f->buf, len, &f->out, f->prompt_out, 8);

        assert_true(rc == 0 || rc == -EPROTO);
        if (rc == 0)
            assert_int_equal(f->out.u.job.n_prompt, 3);
    }
    atomic_store(&fl.stop, true);
    pthread_join(th, NULL);
    /* Had the check and the unpack read the bytes apart, msgpack-c would have been asked for
     * ~100 GB at some point; one consistent copy is rejected or decoded whole. */
    assert_true(atomic_load(&g_max_malloc) < ((size_t)1 << 24));
    proto_decoder_destroy(d);
#else
    (void)state;
    skip(); /* ASan owns malloc */
#endif
}

#define PROTO_TEST(f) cmocka_unit_test_setup_teardown(f, setup_proto, teardown_proto)

int main(void)
{
    const struct CMUnitTest tests[] = {
        PROTO_TEST(test_proto_job_round_trips),
        PROTO_TEST(test_proto_job_default_sampling_round_trips),
        PROTO_TEST(test_proto_pause_and_resume_round_trip),
        PROTO_TEST(test_proto_job_request_id_round_trips_and_a_bad_one_is_refused),
        PROTO_TEST(test_proto_job_grammar_round_trips_and_is_checked),
        PROTO_TEST(test_proto_cancel_and_started_round_trip),
        PROTO_TEST(test_proto_token_round_trips_with_and_without_top),
        PROTO_TEST(test_proto_done_round_trips_each_reason),
        PROTO_TEST(test_proto_failed_round_trips),
        PROTO_TEST(test_proto_hand_built_records_decode),
        PROTO_TEST(test_proto_wrong_count_for_each_type_rejected),
        PROTO_TEST(test_proto_wrong_field_types_rejected),
        PROTO_TEST(test_proto_integer_types_and_ranges_checked),
        PROTO_TEST(test_proto_wrong_version_rejected),
        PROTO_TEST(test_proto_wrong_type_rejected),
        PROTO_TEST(test_proto_not_an_array_rejected),
        PROTO_TEST(test_proto_huge_declared_counts_rejected_without_allocating),
        PROTO_TEST(test_proto_oversize_prompt_rejected),
        PROTO_TEST(test_proto_prompt_larger_than_cap_rejected),
        PROTO_TEST(test_proto_bad_reason_rejected),
        PROTO_TEST(test_proto_error_string_too_long_rejected),
        PROTO_TEST(test_proto_limits_of_lists_rejected),
        PROTO_TEST(test_proto_truncated_at_every_length_rejected),
        PROTO_TEST(test_proto_trailing_bytes_rejected),
        PROTO_TEST(test_proto_encode_short_buffer_returns_enospc),
        PROTO_TEST(test_proto_random_mutations_never_crash),
        PROTO_TEST(test_proto_job_after_token_never_writes_through_the_union),
        PROTO_TEST(test_proto_malformed_body_still_names_the_record),
        PROTO_TEST(test_proto_encode_refuses_non_finite_logit_bias),
        PROTO_TEST(test_proto_decoder_allocates_nothing_per_record),
        PROTO_TEST(test_proto_decoder_reads_a_changing_record_once),
    };
    return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
