/* shm_params: the worker's parameters block round-trips, and the decoder refuses what it
 * must not trust (a wrong version or block size, a string outside its area or without its
 * NUL, a number out of range, unknown flags, a missing model) with a clear reason. */
#include "shm_params.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "wire.h"

static const struct shm_params example = {
    .id = 3,
    .parent_pid = 1234,
    .wake_fd = 4,
    .notify_fd = 5,
    .max_sequences = 8,
    .max_prefill_tokens = 512,
    .ctx = 4096,
    .kv_cache_tokens = 0,
    .threads = 2,
    .mock_delay_ms = 20,
    .mock_load_ms = 0,
    .heartbeat_ms = 250,
    .mock_faults = true,
    .model = "mock",
    .mock_reply = "Hello there",
    .mock_tool_reply = NULL,
};

/* Encode p into a fresh buffer; *len its size. */
static unsigned char *encode(const struct shm_params *p, size_t *len)
{
    unsigned char *buf;
    *len = shm_params_size(p);
    assert_true(*len > 0);
    buf = calloc(1, *len);
    assert_non_null(buf);
    assert_int_equal(shm_params_encode(p, buf, *len), 0);
    return buf;
}

static int decode(const unsigned char *buf, size_t len, struct shm_params *p, char *err)
{
    char *store = NULL;
    int rc = shm_params_decode(buf, len, p, &store, err, 256);
    if (rc == 0)
        free(store);
    else
        assert_null(store);
    return rc;
}

static void test_shm_params_round_trip(void **state)
{
    (void)state;
    struct shm_params p;
    char err[256], *store;
    size_t len;
    unsigned char *buf = encode(&example, &len);

    assert_int_equal(shm_params_decode(buf, len, &p, &store, err, sizeof(err)), 0);
    free(buf); /* the decoded strings live in store, not in the area */
    assert_int_equal(p.id, 3);
    assert_int_equal(p.parent_pid, 1234);
    assert_int_equal(p.wake_fd, 4);
    assert_int_equal(p.notify_fd, 5);
    assert_int_equal(p.max_sequences, 8);
    assert_int_equal(p.max_prefill_tokens, 512);
    assert_int_equal(p.ctx, 4096);
    assert_int_equal(p.threads, 2);
    assert_int_equal(p.mock_delay_ms, 20);
    assert_int_equal(p.heartbeat_ms, 250);
    assert_true(p.mock_faults);
    assert_string_equal(p.model, "mock");
    assert_string_equal(p.mock_reply, "Hello there");
    assert_null(p.mock_tool_reply);
    free(store);
}

static void test_shm_params_long_strings_fit_and_too_long_refused(void **state)
{
    (void)state;
    struct shm_params p = example, q;
    char err[256];
    size_t len;
    char *big = malloc(SHM_PARAMS_MAX_STR + 2);
    unsigned char *buf;

    assert_non_null(big);
    memset(big, 'x', SHM_PARAMS_MAX_STR);
    big[SHM_PARAMS_MAX_STR] = '\0';
    p.mock_reply = big; /* the longest allowed, far beyond what argv would take in one arg */
    buf = encode(&p, &len);
    assert_int_equal(decode(buf, len, &q, err), 0);
    free(buf);
    big[SHM_PARAMS_MAX_STR] = 'x';
    big[SHM_PARAMS_MAX_STR + 1] = '\0';
    assert_int_equal(shm_params_size(&p), 0);
    free(big);
    p = example;
    p.model = "";
    assert_int_equal(shm_params_size(&p), 0);
}

static void test_shm_params_wrong_version_or_size_refused(void **state)
{
    (void)state;
    struct shm_params p;
    char err[256];
    size_t len;
    unsigned char *buf = encode(&example, &len);
    uint32_t v;

    memcpy(&v, buf, 4);
    v++;
    memcpy(buf, &v, 4);
    assert_int_equal(decode(buf, len, &p, err), -EPROTO);
    assert_non_null(strstr(err, "version"));
    v--;
    memcpy(buf, &v, 4);
    memcpy(&v, buf + 4, 4);
    v += 4;
    memcpy(buf + 4, &v, 4);
    assert_int_equal(decode(buf, len, &p, err), -EPROTO);
    v -= 4;
    memcpy(buf + 4, &v, 4);
    assert_int_equal(decode(buf, len, &p, err), 0);
    assert_int_equal(decode(buf, 8, &p, err), -EPROTO); /* shorter than a block */
    free(buf);
}

static void test_shm_params_string_outside_area_or_unterminated_refused(void **state)
{
    (void)state;
    struct shm_params p;
    char err[256];
    size_t len;
    unsigned char *buf = encode(&example, &len);

    /* the last byte is the reply's NUL: a cut area leaves it unterminated */
    assert_int_equal(decode(buf, len - 1, &p, err), -EPROTO);
    assert_non_null(strstr(err, "NUL"));
    buf[len - 1] = 'x';
    assert_int_equal(decode(buf, len, &p, err), -EPROTO);
    buf[len - 1] = '\0';
    buf[len - 3] = '\0'; /* a NUL inside the reply: its length lies */
    assert_int_equal(decode(buf, len, &p, err), -EPROTO);
    free(buf);
}

/* The offsets of the block's fields, as shm_params.c lays them out (all uint32). */
enum { F_VERSION, F_SIZE, F_ID, F_PPID, F_WAKE, F_NOTIFY, F_SEQ, F_PREFILL, F_CTX, F_KV,
       F_THREADS, F_DELAY, F_LOAD, F_HB, F_FLAGS, F_MODEL_OFF, F_MODEL_LEN };

static int decode_with(unsigned field, uint32_t value, char *err)
{
    struct shm_params p;
    size_t len;
    unsigned char *buf = encode(&example, &len);
    int rc;
    memcpy(buf + 4 * field, &value, 4);
    rc = decode(buf, len, &p, err);
    free(buf);
    return rc;
}

static void test_shm_params_numbers_out_of_range_refused(void **state)
{
    (void)state;
    char err[256];

    assert_int_equal(decode_with(F_SEQ, 0, err), -EPROTO);
    assert_non_null(strstr(err, "max_sequences"));
    assert_int_equal(decode_with(F_SEQ, SHM_PARAMS_MAX_SEQUENCES + 1, err), -EPROTO);
    assert_int_equal(decode_with(F_CTX, 1, err), -EPROTO);
    assert_int_equal(decode_with(F_CTX, WIRE_MAX_PROMPT + 1, err), -EPROTO);
    assert_non_null(strstr(err, "ctx"));
    assert_int_equal(decode_with(F_PREFILL, 0, err), -EPROTO);
    assert_int_equal(decode_with(F_PREFILL, UINT32_MAX, err), -EPROTO);
    assert_int_equal(decode_with(F_THREADS, SHM_PARAMS_MAX_THREADS + 1, err), -EPROTO);
    assert_int_equal(decode_with(F_DELAY, SHM_PARAMS_MAX_MOCK_MS + 1, err), -EPROTO);
    assert_int_equal(decode_with(F_HB, SHM_PARAMS_MAX_HEARTBEAT + 1, err), -EPROTO);
    assert_int_equal(decode_with(F_WAKE, UINT32_MAX, err), -EPROTO);
    assert_int_equal(decode_with(F_FLAGS, 2, err), -EPROTO);
    assert_non_null(strstr(err, "flags"));
    /* the model's string pointing into the block itself, or nowhere */
    assert_int_equal(decode_with(F_MODEL_OFF, 4, err), -EPROTO);
    assert_int_equal(decode_with(F_MODEL_LEN, UINT32_MAX, err), -EPROTO);
    assert_int_equal(decode_with(F_MODEL_OFF, 0, err), -EPROTO); /* off 0, len 4: none */
    /* in range, it decodes */
    assert_int_equal(decode_with(F_SEQ, SHM_PARAMS_MAX_SEQUENCES, err), 0);
    assert_int_equal(decode_with(F_CTX, WIRE_MAX_PROMPT, err), 0);
}

static void test_shm_params_missing_model_refused(void **state)
{
    (void)state;
    char err[256];
    struct shm_params p;
    size_t len;
    unsigned char *buf = encode(&example, &len);
    uint32_t zero = 0;

    memcpy(buf + 4 * F_MODEL_OFF, &zero, 4);
    memcpy(buf + 4 * F_MODEL_LEN, &zero, 4);
    assert_int_equal(decode(buf, len, &p, err), -EPROTO);
    assert_non_null(strstr(err, "model"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_params_round_trip),
        cmocka_unit_test(test_shm_params_long_strings_fit_and_too_long_refused),
        cmocka_unit_test(test_shm_params_wrong_version_or_size_refused),
        cmocka_unit_test(test_shm_params_string_outside_area_or_unterminated_refused),
        cmocka_unit_test(test_shm_params_numbers_out_of_range_refused),
        cmocka_unit_test(test_shm_params_missing_model_refused),
    };
    return cmocka_run_group_tests_name("shm_params", tests, NULL, NULL);
}
