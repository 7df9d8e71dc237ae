/* shm_ring stressed by two threads (producer and consumer, variable record sizes, checksums),
 * so ThreadSanitizer can check the ring's orderings: TSan cannot see across processes. The
 * threads only count and record failures; cmocka asserts run in the main thread. */
#include "shm_ring.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hist.h"
#include "notify.h"

#define STRESS_RING  4096u
/* us without a record moving before a thread gives up, so that a bug fails instead of
 * hanging. It bounds a stall, not the run: on a loaded machine each sched_yield() can hand
 * the CPU away for a whole time slice, and a run that keeps moving may take minutes. */
#define STRESS_STALL (60 * UINT64_C(1000000))

struct stress {
    struct shm_ring_view *r;
    int efd;
    uint64_t n_records;
    uint32_t max_len;
    bool use_notify; /* consumer sleeps through notify (eventfd read) or spins */
    /* Results, each written by one thread and read by main after pthread_join. */
    int producer_err;
    int consumer_err;
    uint64_t producer_sum, consumer_sum, consumed, sleeps, lost_wakeups;
    /* Records whose notify_wake() has returned: written by the producer, read by the
     * consumer to tell a lost wake-up from a slow producer. */
    _Atomic uint64_t woken;
};

static uint32_t stress_len(uint64_t seq, uint32_t max_len)
{
    uint64_t x = seq * 0x9e3779b97f4a7c15u;

    return 8 + (uint32_t)((x >> 40) % (max_len - 7)); /* 8..max_len */
}

static uint64_t stress_mix(uint64_t h, const unsigned char *p, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3u;
    return h;
}

static void *stress_producer(void *arg)
{
    struct stress *s = arg;
    unsigned char buf[1024];
    uint64_t sum = 0xcbf29ce484222325u;
    uint64_t moved_us = hist_now_us(); /* when the last record went in */
    int ret, err;

    for (uint64_t seq = 0; seq < s->n_records; seq++) {
        uint32_t len = stress_len(seq, s->max_len);
        unsigned char *slot;

        memcpy(buf, &seq, 8);
        for (uint32_t i = 8; i < len; i++)
            buf[i] = (unsigned char)(seq + i);
        sum = stress_mix(sum, buf, len);
        /* Alternate push and reserve/commit, so both paths race with the consumer. */
        for (;;) {
            if (seq & 1) {
                ret = shm_ring_push(s->r, buf, len);
            } else if ((slot = shm_ring_reserve(s->r, len + 16, &err)) != NULL) {
                memcpy(slot, buf, len);
                shm_ring_commit(s->r, len);
                ret = 0;
            } else {
                ret = err;
            }
            if (ret != -EAGAIN)
                break;
            if (hist_now_us() - moved_us > STRESS_STALL) {
                s->producer_err = -ETIMEDOUT; /* the consumer freed nothing */
                return NULL;
            }
            sched_yield();
        }
        if (ret < 0) {
            s->producer_err = ret;
            return NULL;
        }
        moved_us = hist_now_us();
        if (s->use_notify && (ret = notify_wake(s->r, s->efd)) < 0) {
            s->producer_err = ret;
            return NULL;
        }
        atomic_store_explicit(&s->woken, seq + 1, memory_order_release);
    }
    s->producer_sum = sum;
    return NULL;
}

static void *stress_consumer(void *arg)
{
    struct stress *s = arg;
    uint64_t sum = 0xcbf29ce484222325u, seq = 0, got;
    uint64_t moved_us = hist_now_us(); /* when the last record came out */
    const void *msg;
    uint32_t len;
    int ret;

    while (seq < s->n_records) {
        ret = shm_ring_peek(s->r, &msg, &len);
        if (ret == -EAGAIN) {
            if (hist_now_us() - moved_us > STRESS_STALL) {
                s->consumer_err = -ETIMEDOUT; /* the producer sent nothing */
                return NULL;
            }
            if (s->use_notify && notify_prepare_sleep(s->r)) {
                /* A bounded poll on the eventfd: the thread flavour of the worker's wait
                 * (TSan cannot follow an io_uring read; poll it can). */
                struct pollfd pfd = {.fd = s->efd, .events = POLLIN};
                s->sleeps++;
                ret = poll(&pfd, 1, 2000);
                /* Nothing for 2 s is a lost wake-up only if the record we wait for was
                 * pushed and woken for, and still the eventfd was never written (only we
                 * read it); a producer that is merely slow (a loaded machine) is not. */
                if (ret == 0 &&
                    atomic_load_explicit(&s->woken, memory_order_acquire) > seq &&
                    poll(&pfd, 1, 0) == 0) {
                    s->lost_wakeups++; /* the producer stops at its stall bound */
                    return NULL;
                }
                ret = ret < 0 ? -errno : notify_consume(s->efd);
                notify_end_sleep(s->r);
                if (ret < 0) {
                    s->consumer_err = ret;
                    return NULL;
                }
                continue;
            }
            sched_yield();
            continue;
        }
        if (ret < 0) {
            s->consumer_err = ret;
            return NULL;
        }
        memcpy(&got, msg, 8);
        if (len != stress_len(seq, s->max_len) || got != seq) {
            s->consumer_err = -EBADMSG;
            return NULL;
        }
        sum = stress_mix(sum, msg, len);
        shm_ring_pop(s->r);
        seq++;
        moved_us = hist_now_us();
    }
    s->consumer_sum = sum;
    s->consumed = seq;
    return NULL;
}

static void run_stress(uint64_t n_records, uint32_t max_len, bool use_notify)
{
    struct stress s = {0};
    pthread_t prod, cons;

    struct shm_ring_view view;
    struct shm_ring *shared = aligned_alloc(64, shm_ring_footprint(STRESS_RING));

    assert_non_null(shared);
    assert_int_equal(shm_ring_init(&view, shared, STRESS_RING), 0);
    s.r = &view;
    s.efd = notify_eventfd();
    assert_true(s.efd >= 0);
    s.n_records = n_records;
    s.max_len = max_len;
    s.use_notify = use_notify;
    assert_int_equal(pthread_create(&cons, NULL, stress_consumer, &s), 0);
    assert_int_equal(pthread_create(&prod, NULL, stress_producer, &s), 0);
    assert_int_equal(pthread_join(prod, NULL), 0);
    assert_int_equal(pthread_join(cons, NULL), 0);
    assert_int_equal(s.lost_wakeups, 0);
    assert_int_equal(s.producer_err, 0);
    assert_int_equal(s.consumer_err, 0);
    assert_int_equal(s.consumed, n_records);
    assert_true(s.producer_sum == s.consumer_sum);
    assert_true(shm_ring_empty(s.r));
    if (use_notify)
        assert_true(s.sleeps > 0);
    close(s.efd);
    free(shared);
}

static void test_shm_ring_threads_small_records_in_order(void **state)
{
    (void)state;
    run_stress(200000, 40, false);
}

static void test_shm_ring_threads_large_records_wrap_often(void **state)
{
    (void)state;
    /* Records up to 1 KiB in a 4 KiB ring: a PAD every few records. */
    run_stress(50000, 1000, false);
}

static void test_shm_ring_threads_with_notify_flag(void **state)
{
    (void)state;
    run_stress(100000, 200, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_ring_threads_small_records_in_order),
        cmocka_unit_test(test_shm_ring_threads_large_records_wrap_often),
        cmocka_unit_test(test_shm_ring_threads_with_notify_flag),
    };
    return cmocka_run_group_tests_name("shm_ring_threads", tests, NULL, NULL);
}
