/* shm_ring: the record edges (wrap and its PAD marker, full, largest, empty record), corrupt
 * producer data rejected with -EPROTO, reserve/commit, and two processes moving 10 million
 * checksummed records in order through a memfd region with notify's sleep/wake path. */
#include "shm_ring.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hist.h"
#include "notify.h"
#include "shm_region.h"

#define RING_SIZE 256u
#define PAD       0xffffffffu

static const unsigned char zeros[RING_SIZE];

static int setup_ring(void **state)
{
    struct shm_ring_view *r = calloc(1, sizeof(*r));
    struct shm_ring *shared = aligned_alloc(64, shm_ring_footprint(RING_SIZE));

    if (r == NULL || shared == NULL || shm_ring_init(r, shared, RING_SIZE) != 0)
        return -1;
    memset(r->shared->data, 0xa5, RING_SIZE); /* stale bytes must never be mistaken for records */
    *state = r;
    return 0;
}

static int teardown_ring(void **state)
{
    struct shm_ring_view *r = *state;

    free(r->shared);
    free(r);
    return 0;
}

/* Peek one record, compare it with want, pop it. */
static void expect_record(struct shm_ring_view *r, const void *want, uint32_t want_len)
{
    const void *msg;
    uint32_t len;

    assert_int_equal(shm_ring_peek(r, &msg, &len), 0);
    assert_int_equal(len, want_len);
    if (want_len > 0)
        assert_memory_equal(msg, want, want_len);
    shm_ring_pop(r);
}

static void test_shm_ring_init_rejects_bad_sizes(void **state)
{
    (void)state;
    struct shm_ring_view v, other;
    struct shm_ring *r = aligned_alloc(64, shm_ring_footprint(1024));

    assert_non_null(r);
    assert_int_equal(shm_ring_init(&v, r, 0), -EINVAL);
    assert_int_equal(shm_ring_init(&v, r, 32), -EINVAL);
    assert_int_equal(shm_ring_init(&v, r, 100), -EINVAL);
    assert_int_equal(shm_ring_init(&v, r, 1024), 0);
    assert_int_equal(shm_ring_check(&other, r, 1024), 0);
    assert_int_equal(shm_ring_check(&other, r, 512), -EPROTO);
    r->magic ^= 1;
    assert_int_equal(shm_ring_check(&other, r, 1024), -EPROTO);
    free(r);
}

static void test_shm_ring_empty_peek_returns_eagain(void **state)
{
    struct shm_ring_view *r = *state;
    const void *msg;
    uint32_t len;

    assert_true(shm_ring_empty(r));
    assert_int_equal(shm_ring_peek(r, &msg, &len), -EAGAIN);
}

static void test_shm_ring_push_peek_pop_keeps_order(void **state)
{
    struct shm_ring_view *r = *state;

    assert_int_equal(shm_ring_push(r, "hello", 5), 0);
    assert_int_equal(shm_ring_push(r, "kiln!!!!x", 9), 0);
    assert_false(shm_ring_empty(r));
    expect_record(r, "hello", 5);
    expect_record(r, "kiln!!!!x", 9);
    assert_true(shm_ring_empty(r));
}

static void test_shm_ring_full_returns_eagain(void **state)
{
    struct shm_ring_view *r = *state;
    int n = 0;

    while (shm_ring_push(r, "x", 1) == 0)
        n++;
    assert_int_equal(n, RING_SIZE / 16); /* each 1-byte record takes 8 + 8 bytes */
    assert_int_equal(shm_ring_push(r, "x", 1), -EAGAIN);
    expect_record(r, "x", 1);
    assert_int_equal(shm_ring_push(r, "y", 1), 0); /* room again after one pop */
}

static void test_shm_ring_wrap_leaves_pad_marker(void **state)
{
    struct shm_ring_view *r = *state;
    unsigned char a[100], b[100], c[100];
    uint32_t word;

    memset(a, 'a', sizeof(a));
    memset(b, 'b', sizeof(b));
    memset(c, 'c', sizeof(c));
    /* Two 112-byte records fill [0, 224); the third does not fit in the 32 bytes left. */
    assert_int_equal(shm_ring_push(r, a, 100), 0);
    assert_int_equal(shm_ring_push(r, b, 100), 0);
    assert_int_equal(shm_ring_push(r, c, 100), -EAGAIN); /* needs 32 (pad) + 112 */
    expect_record(r, a, 100);
    assert_int_equal(shm_ring_push(r, c, 100), 0);
    memcpy(&word, r->shared->data + 224, sizeof(word));
    assert_int_equal(word, PAD);
    expect_record(r, b, 100);
    /* The payload after the PAD starts at offset 0 and is contiguous. */
    const void *msg;
    uint32_t len;
    assert_int_equal(shm_ring_peek(r, &msg, &len), 0);
    assert_ptr_equal(msg, r->shared->data + 8);
    expect_record(r, c, 100);
    assert_true(shm_ring_empty(r));
    assert_int_equal(atomic_load(&r->shared->head), 256 + 112);
    assert_int_equal(atomic_load(&r->shared->tail), 256 + 112);
}

static void test_shm_ring_wraps_many_laps_with_varied_sizes(void **state)
{
    struct shm_ring_view *r = *state;
    unsigned char buf[120];
    uint32_t next_in = 0, next_out = 0;

    /* Sizes cycle through 0..120 so every offset meets every record length; the ring is
     * kept partly full so wraps happen with records on both sides of the end. */
    while (next_out < 5000) {
        uint32_t len = next_in % 121;

        memset(buf, (int)(next_in & 0xff), len);
        int ret = shm_ring_push(r, buf, len);
        if (ret == 0) {
            next_in++;
            continue;
        }
        assert_int_equal(ret, -EAGAIN);
        const void *msg;
        uint32_t got;
        assert_int_equal(shm_ring_peek(r, &msg, &got), 0);
        assert_int_equal(got, next_out % 121);
        for (uint32_t i = 0; i < got; i++)
            assert_int_equal(((const unsigned char *)msg)[i], next_out & 0xff);
        shm_ring_pop(r);
        next_out++;
    }
}

static void test_shm_ring_largest_record_fits_at_every_offset(void **state)
{
    struct shm_ring_view *r = *state;
    uint32_t max = shm_ring_max_record(r);
    unsigned char big[RING_SIZE];

    assert_int_equal(max, RING_SIZE / 2 - 8);
    memset(big, 'M', sizeof(big));
    assert_int_equal(shm_ring_push(r, big, max + 1), -EMSGSIZE);
    assert_int_equal(shm_ring_push(r, big, UINT32_MAX), -EMSGSIZE);
    for (uint32_t start = 0; start < RING_SIZE; start += 8) {
        /* Move the (empty) ring's indices to `start` with a zero-length record... */
        while ((atomic_load(&r->shared->head) & (RING_SIZE - 1)) != start) {
            uint64_t gap = (start - (atomic_load(&r->shared->head) & (RING_SIZE - 1))) & (RING_SIZE - 1);
            uint32_t len = gap >= 16 ? 8 : 0; /* records of 16 or 8 bytes */
            assert_int_equal(shm_ring_push(r, big, len), 0);
            expect_record(r, big, len);
        }
        /* ...then the largest record goes in at once. */
        assert_int_equal(shm_ring_push(r, big, max), 0);
        expect_record(r, big, max);
        assert_true(shm_ring_empty(r));
    }
}

static void test_shm_ring_zero_length_record(void **state)
{
    struct shm_ring_view *r = *state;

    assert_int_equal(shm_ring_push(r, NULL, 0), 0);
    assert_int_equal(shm_ring_push(r, "z", 1), 0);
    expect_record(r, NULL, 0);
    expect_record(r, "z", 1);
    assert_true(shm_ring_empty(r));
    assert_int_equal(atomic_load(&r->shared->tail), 8 + 16);
}

static void test_shm_ring_corrupt_length_returns_eproto(void **state)
{
    struct shm_ring_view *r = *state;
    const void *msg;
    uint32_t len, bad;

    assert_int_equal(shm_ring_push(r, "abcdefgh", 8), 0);
    /* A length larger than what head covers. */
    bad = 1000;
    memcpy(r->shared->data, &bad, sizeof(bad));
    assert_int_equal(shm_ring_peek(r, &msg, &len), -EPROTO);
    /* The largest u32 that is not PAD, and a length past the ring's own size. */
    bad = 0xfffffffeu;
    memcpy(r->shared->data, &bad, sizeof(bad));
    assert_int_equal(shm_ring_peek(r, &msg, &len), -EPROTO);
    /* Pop after a corrupt header leaves the record where it is. */
    shm_ring_pop(r);
    assert_int_equal(atomic_load(&r->shared->tail), 0);
    /* A PAD at offset 0 cannot be. */
    bad = PAD;
    memcpy(r->shared->data, &bad, sizeof(bad));
    assert_int_equal(shm_ring_peek(r, &msg, &len), -EPROTO);
    /* Restored, the record reads again. */
    bad = 8;
    memcpy(r->shared->data, &bad, sizeof(bad));
    expect_record(r, "abcdefgh", 8);
}

static void test_shm_ring_corrupt_head_returns_eproto(void **state)
{
    struct shm_ring_view *r = *state;
    const void *msg;
    uint32_t len, pad = PAD;

    atomic_store(&r->shared->head, 3); /* not a multiple of 8 */
    assert_int_equal(shm_ring_peek(r, &msg, &len), -EPROTO);
    atomic_store(&r->shared->head, RING_SIZE + 8); /* more than the ring holds */
    assert_int_equal(shm_ring_peek(r, &msg, &len), -EPROTO);
    /* A PAD at 240 whose 16 bytes head does not cover. */
    atomic_store(&r->shared->tail, 240);
    atomic_store(&r->shared->head, 248);
    memcpy(r->shared->data + 240, &pad, sizeof(pad));
    assert_int_equal(shm_ring_peek(r, &msg, &len), -EPROTO);
}

static void test_shm_ring_reserve_commit_publishes_only_on_commit(void **state)
{
    struct shm_ring_view *r = *state;
    int err = 1;
    char *slot = shm_ring_reserve(r, 64, &err);

    assert_non_null(slot);
    assert_int_equal(err, 0);
    assert_true(shm_ring_empty(r)); /* invisible until committed */
    memcpy(slot, "encoded", 7);
    shm_ring_commit(r, 7);
    assert_false(shm_ring_empty(r));
    expect_record(r, "encoded", 7);
    assert_null(shm_ring_reserve(r, shm_ring_max_record(r) + 1, &err));
    assert_int_equal(err, -EMSGSIZE);
}

static void test_shm_ring_reserve_full_returns_eagain(void **state)
{
    struct shm_ring_view *r = *state;
    int err;

    assert_int_equal(shm_ring_push(r, zeros, 120), 0); /* 128 */
    assert_int_equal(shm_ring_push(r, zeros, 104), 0); /* 112: 16 bytes left */
    assert_null(shm_ring_reserve(r, 9, &err));
    assert_int_equal(err, -EAGAIN);
    assert_non_null(shm_ring_reserve(r, 8, &err));
    shm_ring_commit(r, 8);
}

static void test_shm_ring_reserve_across_wrap_commit_smaller(void **state)
{
    struct shm_ring_view *r = *state;
    int err;

    assert_int_equal(shm_ring_push(r, zeros, 100), 0); /* [0, 112) */
    assert_int_equal(shm_ring_push(r, zeros, 100), 0); /* [112, 224) */
    expect_record(r, zeros, 100);
    /* 100 does not fit in the 32 bytes before the end: PAD, slot at 0... */
    char *slot = shm_ring_reserve(r, 100, &err);
    assert_ptr_equal(slot, (char *)r->shared->data + 8);
    /* ...and committing only 4 bytes (which would have fitted) still lands there. */
    memcpy(slot, "tiny", 4);
    shm_ring_commit(r, 4);
    shm_ring_pop(r);
    expect_record(r, "tiny", 4);
    assert_true(shm_ring_empty(r));
}

static void test_shm_ring_enlarged_shared_size_is_ignored(void **state)
{
    struct shm_ring_view *r = *state;
    int err;

    /* The peer rewrites size: the view's own stays, so nothing goes past the data area. */
    r->shared->size = UINT64_C(1) << 32;
    assert_int_equal(shm_ring_max_record(r), RING_SIZE / 2 - 8);
    assert_int_equal(shm_ring_push(r, zeros, RING_SIZE), -EMSGSIZE);
    assert_null(shm_ring_reserve(r, 100000, &err));
    assert_int_equal(err, -EMSGSIZE);
    for (int i = 0; i < 10; i++) { /* wraps with the real size */
        assert_int_equal(shm_ring_push(r, zeros, 100), 0);
        expect_record(r, zeros, 100);
    }
}

static void test_shm_ring_commit_ignores_a_rewritten_header(void **state)
{
    struct shm_ring_view *r = *state;
    uint32_t word = 0;
    int err;
    char *slot = shm_ring_reserve(r, 64, &err);

    assert_non_null(slot);
    memcpy(slot, "abcd", 4);
    /* The consumer scribbles on the reserved slot's header (once a PAD, once a small len):
     * commit uses what reserve kept, and asserts on nothing the peer wrote. */
    memcpy(r->shared->data, &(uint32_t){PAD}, sizeof(word));
    shm_ring_commit(r, 4);
    expect_record(r, "abcd", 4);
    slot = shm_ring_reserve(r, 64, &err);
    assert_non_null(slot);
    memcpy(r->shared->data + 16, &word, sizeof(word));
    memcpy(slot, "efgh", 4);
    shm_ring_commit(r, 4);
    expect_record(r, "efgh", 4);
}

static void test_shm_ring_reserve_rejects_a_tail_past_head(void **state)
{
    struct shm_ring_view *r = *state;

    atomic_store(&r->shared->tail, 64); /* ahead of head 0: head - tail wraps */
    assert_int_equal(shm_ring_push(r, "x", 1), -EPROTO);
    atomic_store(&r->shared->tail, 0);
    assert_int_equal(shm_ring_push(r, "x", 1), 0);
}

/* ---- two processes, 10 million records ------------------------------------------------ */

#define XPROC_RECORDS  10000000u
#define XPROC_RING     (64u * 1024)
#define XPROC_PAUSE    65536u   /* the producer waits for the consumer to sleep this often */
#define XPROC_DEADLINE 60       /* seconds; a bug fails the test instead of hanging it */

/* Counters the child reports back (a MAP_SHARED page mapped before fork). */
struct xproc_stats {
    _Atomic uint64_t sleeps, wakes, timeouts, records;
};

static uint32_t xproc_len(uint64_t seq)
{
    return 8 + (uint32_t)(seq * 7 % 57); /* 8..64 bytes */
}

static void xproc_fill(unsigned char *p, uint64_t seq, uint32_t len)
{
    memcpy(p, &seq, 8);
    for (uint32_t i = 8; i < len; i++)
        p[i] = (unsigned char)(seq * 31 + i);
}

static uint64_t xproc_mix(uint64_t h, const unsigned char *p, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3u; /* FNV-1a */
    return h;
}

/* The child: consume XPROC_RECORDS records plus a final checksum record. Exit codes: 0 ok,
 * 2 setup, 3 protocol error, 4 out of order or wrong bytes, 5 checksum mismatch. */
static int xproc_consumer(struct shm_ring_view *r, int efd, struct xproc_stats *st)
{
    struct notify_waiter *w;
    uint64_t expect = 0, sum = 0xcbf29ce484222325u;
    unsigned char want[64];
    const void *msg;
    uint32_t len;
    int err, ret;

    alarm(XPROC_DEADLINE);
    if ((w = notify_waiter_create(efd, &err)) == NULL)
        return 2;
    for (;;) {
        ret = shm_ring_peek(r, &msg, &len);
        if (ret == -EAGAIN) {
            if (!notify_prepare_sleep(r))
                continue;
            atomic_fetch_add(&st->sleeps, 1);
            ret = notify_waiter_wait(w, 5000);
            notify_end_sleep(r);
            if (ret == 0)
                atomic_fetch_add(&st->timeouts, 1); /* a lost wake-up would end up here */
            else if (ret == 1)
                atomic_fetch_add(&st->wakes, 1);
            else
                return 2;
            continue;
        }
        if (ret < 0)
            return 3;
        if (expect == XPROC_RECORDS) {
            int ok = len == 8 && memcmp(msg, &sum, 8) == 0;
            shm_ring_pop(r);
            notify_waiter_destroy(w);
            atomic_store(&st->records, expect);
            return ok ? 0 : 5;
        }
        xproc_fill(want, expect, xproc_len(expect));
        if (len != xproc_len(expect) || memcmp(msg, want, len) != 0)
            return 4;
        sum = xproc_mix(sum, msg, len);
        shm_ring_pop(r);
        expect++;
    }
}

static void test_shm_ring_two_processes_ten_million_records(void **state)
{
    (void)state;
    struct shm_region reg;
    struct xproc_stats *st;
    uint64_t sum = 0xcbf29ce484222325u, t0, deadline;
    unsigned char buf[64];
    int efd, status = 0, ret;
    pid_t pid;

    assert_int_equal(shm_region_create(&reg, 4096, XPROC_RING), 0);
    struct shm_ring_view *r = &reg.to_front;
    assert_true((efd = notify_eventfd()) >= 0);
    st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(st != MAP_FAILED);
    memset(st, 0, sizeof(*st));

    t0 = hist_now_us();
    deadline = t0 + XPROC_DEADLINE * UINT64_C(1000000);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(xproc_consumer(r, efd, st));

    int failed = 0;
    for (uint64_t seq = 0; seq <= XPROC_RECORDS && !failed; seq++) {
        uint32_t len = seq == XPROC_RECORDS ? 8 : xproc_len(seq);

        if (seq < XPROC_RECORDS) {
            xproc_fill(buf, seq, len);
            sum = xproc_mix(sum, buf, len);
        } else {
            memcpy(buf, &sum, 8);
        }
        /* Now and then wait until the consumer has gone to sleep, so that the sleep/wake
         * path is taken many times whatever the scheduler does. */
        if (seq % XPROC_PAUSE == 0 && seq > 0) {
            while (atomic_load(&r->shared->consumer_waiting) == 0 && !failed) {
                failed = hist_now_us() > deadline;
                sched_yield();
            }
        }
        while ((ret = shm_ring_push(r, buf, len)) == -EAGAIN && !failed) {
            /* Full: the consumer is awake (it only sleeps on an empty ring); let it run.
             * Still wake it, in case it went to sleep right before our last push. */
            assert_int_equal(notify_wake(r, efd), 0);
            failed = hist_now_us() > deadline;
            sched_yield();
        }
        if (!failed) {
            assert_int_equal(ret, 0);
            assert_int_equal(notify_wake(r, efd), 0);
        }
    }
    if (failed)
        kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    double secs = (double)(hist_now_us() - t0) / 1e6;
    printf("# 10M records in %.2f s (%.1f M/s); consumer slept %llu times, woken %llu, "
           "timed out %llu\n",
           secs, XPROC_RECORDS / secs / 1e6, (unsigned long long)atomic_load(&st->sleeps),
           (unsigned long long)atomic_load(&st->wakes),
           (unsigned long long)atomic_load(&st->timeouts));
    assert_false(failed);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 2)
        skip(); /* io_uring unavailable in this environment (or out of memory) */
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(atomic_load(&st->records), XPROC_RECORDS);
    assert_int_equal(atomic_load(&st->timeouts), 0);
    assert_true(atomic_load(&st->wakes) >= XPROC_RECORDS / XPROC_PAUSE);
    munmap(st, sizeof(*st));
    close(efd);
    shm_region_destroy(&reg);
}

#define RING_TEST(f) cmocka_unit_test_setup_teardown(f, setup_ring, teardown_ring)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_ring_init_rejects_bad_sizes),
        RING_TEST(test_shm_ring_empty_peek_returns_eagain),
        RING_TEST(test_shm_ring_push_peek_pop_keeps_order),
        RING_TEST(test_shm_ring_full_returns_eagain),
        RING_TEST(test_shm_ring_wrap_leaves_pad_marker),
        RING_TEST(test_shm_ring_wraps_many_laps_with_varied_sizes),
        RING_TEST(test_shm_ring_largest_record_fits_at_every_offset),
        RING_TEST(test_shm_ring_zero_length_record),
        RING_TEST(test_shm_ring_corrupt_length_returns_eproto),
        RING_TEST(test_shm_ring_corrupt_head_returns_eproto),
        RING_TEST(test_shm_ring_reserve_commit_publishes_only_on_commit),
        RING_TEST(test_shm_ring_reserve_full_returns_eagain),
        RING_TEST(test_shm_ring_reserve_across_wrap_commit_smaller),
        RING_TEST(test_shm_ring_enlarged_shared_size_is_ignored),
        RING_TEST(test_shm_ring_commit_ignores_a_rewritten_header),
        RING_TEST(test_shm_ring_reserve_rejects_a_tail_past_head),
        cmocka_unit_test(test_shm_ring_two_processes_ten_million_records),
    };
    return cmocka_run_group_tests_name("shm_ring", tests, NULL, NULL);
}
