/* notify: the eventfd is written only when the consumer said it sleeps; a sleeping consumer
 * (io_uring waiter) is woken by a producer in another process, over many rounds with no lost
 * wake-up; a wait with nothing written times out with 0. Skips where io_uring is missing. */
#include "notify.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hist.h"
#include "shm_region.h"

struct fixture {
    struct shm_region reg;
    struct shm_ring_view *r; /* &reg.to_worker */
    int efd;
};

static int setup_notify(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));

    if (f == NULL || shm_region_create(&f->reg, 4096, 4096) != 0)
        return -1;
    f->r = &f->reg.to_worker;
    if ((f->efd = notify_eventfd()) < 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown_notify(void **state)
{
    struct fixture *f = *state;

    close(f->efd);
    shm_region_destroy(&f->reg);
    free(f);
    return 0;
}

/* A waiter, or skip() where the kernel has no io_uring for us. */
static struct notify_waiter *waiter_or_skip(int efd)
{
    int err;
    struct notify_waiter *w = notify_waiter_create(efd, &err);

    if (w == NULL && (err == -ENOSYS || err == -EPERM))
        skip();
    assert_non_null(w);
    return w;
}

/* The eventfd's counter without blocking: 0 when unset. */
static uint64_t efd_take(int efd)
{
    uint64_t v = 0;

    if (read(efd, &v, sizeof(v)) != (ssize_t)sizeof(v)) {
        assert_int_equal(errno, EAGAIN);
        return 0;
    }
    return v;
}

static void test_notify_eventfd_is_nonblocking_and_cloexec(void **state)
{
    struct fixture *f = *state;

    assert_true(fcntl(f->efd, F_GETFL) & O_NONBLOCK);
    assert_true(fcntl(f->efd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(efd_take(f->efd), 0);
}

static void test_notify_wake_writes_only_when_consumer_waits(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(shm_ring_push(f->r, "a", 1), 0);
    assert_int_equal(notify_wake(f->r, f->efd), 0);
    assert_int_equal(efd_take(f->efd), 0); /* nobody sleeps: no syscall, no count */

    shm_ring_pop(f->r);
    assert_true(notify_prepare_sleep(f->r));
    assert_int_equal(atomic_load(&f->r->shared->consumer_waiting), 1);
    assert_int_equal(shm_ring_push(f->r, "b", 1), 0);
    assert_int_equal(notify_wake(f->r, f->efd), 0);
    assert_int_equal(notify_wake(f->r, f->efd), 0); /* merged into the first */
    assert_int_equal(efd_take(f->efd), 1);
    notify_end_sleep(f->r);
    assert_int_equal(atomic_load(&f->r->shared->consumer_waiting), 0);
}

static void test_notify_wake_producer_writes_only_when_producer_waits(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(notify_wake_producer(f->r, f->efd), 0);
    assert_int_equal(efd_take(f->efd), 0); /* nobody waits for room: no write */
    notify_prepare_wait_room(f->r);
    assert_int_equal(atomic_load(&f->r->shared->producer_waiting), 1);
    assert_int_equal(notify_wake_producer(f->r, f->efd), 0);
    assert_int_equal(notify_wake_producer(f->r, f->efd), 0); /* merged into the first */
    assert_int_equal(efd_take(f->efd), 1);
    assert_int_equal(atomic_load(&f->r->shared->producer_waiting), 0);
    notify_prepare_wait_room(f->r);
    notify_end_wait_room(f->r);
    assert_int_equal(atomic_load(&f->r->shared->producer_waiting), 0);
}

static void test_notify_prepare_sleep_refuses_when_ring_not_empty(void **state)
{
    struct fixture *f = *state;

    assert_int_equal(shm_ring_push(f->r, "a", 1), 0);
    assert_false(notify_prepare_sleep(f->r));
    assert_int_equal(atomic_load(&f->r->shared->consumer_waiting), 0);
}

static void test_notify_consume_drains_counter(void **state)
{
    struct fixture *f = *state;
    uint64_t three = 3;

    assert_int_equal(write(f->efd, &three, sizeof(three)), (ssize_t)sizeof(three));
    assert_int_equal(notify_consume(f->efd), 0);
    assert_int_equal(efd_take(f->efd), 0);
    assert_int_equal(notify_consume(f->efd), 0); /* empty is not an error */
}

static void test_notify_waiter_timeout_returns_zero(void **state)
{
    struct fixture *f = *state;
    struct notify_waiter *w = waiter_or_skip(f->efd);
    uint64_t t0 = hist_now_us();

    assert_int_equal(notify_waiter_wait(w, 30), 0);
    uint64_t waited = hist_now_us() - t0;
    assert_true(waited >= 25000);   /* it did sleep... */
    assert_true(waited < 5000000);  /* ...and the timeout bounded it */
    assert_int_equal(notify_waiter_wait(w, 0), 0); /* the armed read survives timeouts */
    notify_waiter_destroy(w);
}

static void test_notify_waiter_returns_one_when_written(void **state)
{
    struct fixture *f = *state;
    struct notify_waiter *w = waiter_or_skip(f->efd);
    uint64_t one = 1;

    assert_int_equal(write(f->efd, &one, sizeof(one)), (ssize_t)sizeof(one));
    assert_int_equal(notify_waiter_wait(w, 5000), 1);
    assert_int_equal(efd_take(f->efd), 0); /* the wait consumed the count */
    assert_int_equal(notify_waiter_wait(w, 10), 0);
    /* Written while a read is armed from the earlier timeout. */
    assert_int_equal(write(f->efd, &one, sizeof(one)), (ssize_t)sizeof(one));
    assert_int_equal(notify_waiter_wait(w, -1), 1);
    notify_waiter_destroy(w);
}

#define ROUNDS 3000

/* The producer child: ROUNDS records, each pushed either right after the consumer announced
 * its sleep (the wake path) or at a random moment (the race between announcing and pushing).
 * Exit codes: 0 ok, 1 push failed, 2 the consumer never slept, 3 wake failed. */
static int producer_child(struct shm_ring_view *r, int efd)
{
    uint64_t deadline = hist_now_us() + 30000000;
    uint32_t seed = 12345;

    alarm(40);
    for (uint32_t i = 0; i < ROUNDS; i++) {
        seed = seed * 1103515245u + 12345u;
        if (i % 2 == 0) {
            while (atomic_load(&r->shared->consumer_waiting) == 0) {
                if (hist_now_us() > deadline)
                    return 2;
                sched_yield();
            }
        } else {
            for (volatile uint32_t spin = (seed >> 16) % 20000; spin > 0; spin--)
                ;
        }
        while (shm_ring_push(r, &i, sizeof(i)) == -EAGAIN) {
            if (hist_now_us() > deadline)
                return 1;
            sched_yield();
        }
        if (notify_wake(r, efd) != 0)
            return 3;
    }
    return 0;
}

static void test_notify_sleeping_consumer_woken_by_other_process_no_lost_wakeup(void **state)
{
    struct fixture *f = *state;
    struct notify_waiter *w = waiter_or_skip(f->efd);
    uint32_t next = 0, timeouts = 0, sleeps = 0;
    const void *msg;
    uint32_t len;
    int status, ret;
    pid_t pid;

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(producer_child(f->r, f->efd));
    uint64_t deadline = hist_now_us() + 40000000;
    while (next < ROUNDS && hist_now_us() < deadline) {
        ret = shm_ring_peek(f->r, &msg, &len);
        if (ret == -EAGAIN) {
            if (!notify_prepare_sleep(f->r))
                continue;
            sleeps++;
            /* Nothing but a lost wake-up can make this 2-second wait time out: the
             * producer pushes within microseconds of seeing the flag. */
            ret = notify_waiter_wait(w, 2000);
            notify_end_sleep(f->r);
            assert_true(ret >= 0);
            if (ret == 0)
                timeouts++;
            continue;
        }
        assert_int_equal(ret, 0);
        uint32_t got;
        assert_int_equal(len, sizeof(got));
        memcpy(&got, msg, sizeof(got));
        assert_int_equal(got, next);
        shm_ring_pop(f->r);
        next++;
    }
    if (next < ROUNDS)
        kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(next, ROUNDS);
    assert_int_equal(timeouts, 0);
    assert_true(sleeps >= ROUNDS / 2);
    notify_waiter_destroy(w);
}

#define NOTIFY_TEST(f) cmocka_unit_test_setup_teardown(f, setup_notify, teardown_notify)

int main(void)
{
    const struct CMUnitTest tests[] = {
        NOTIFY_TEST(test_notify_eventfd_is_nonblocking_and_cloexec),
        NOTIFY_TEST(test_notify_wake_writes_only_when_consumer_waits),
        NOTIFY_TEST(test_notify_prepare_sleep_refuses_when_ring_not_empty),
        NOTIFY_TEST(test_notify_wake_producer_writes_only_when_producer_waits),
        NOTIFY_TEST(test_notify_consume_drains_counter),
        NOTIFY_TEST(test_notify_waiter_timeout_returns_zero),
        NOTIFY_TEST(test_notify_waiter_returns_one_when_written),
        NOTIFY_TEST(test_notify_sleeping_consumer_woken_by_other_process_no_lost_wakeup),
    };
    return cmocka_run_group_tests_name("notify", tests, NULL, NULL);
}
