/* The model's thread pool: every task runs exactly once, with fewer tasks than threads, over
 * many rounds, and an idle pool sleeps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../worker/threadpool.h"

#define MAX_TASKS 1000

struct counts {
    _Atomic int hits[MAX_TASKS];
    _Atomic int threads_seen[16];
    int n_threads;
    _Atomic int bad_thread;
};

static void count_task(void *ctx, int task, int thread)
{
    struct counts *c = ctx;
    atomic_fetch_add(&c->hits[task], 1);
    if (thread < 0 || thread >= c->n_threads)
        atomic_store(&c->bad_thread, 1);
    else
        atomic_fetch_add(&c->threads_seen[thread], 1);
}

static int setup_pool4(void **state)
{
    struct threadpool *p = threadpool_create(4);
    if (!p)
        return -1;
    *state = p;
    return 0;
}

static int teardown_pool(void **state)
{
    threadpool_destroy(*state);
    return 0;
}

static void run_and_check(struct threadpool *p, int n_tasks)
{
    struct counts *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->n_threads = threadpool_threads(p);
    threadpool_run(p, count_task, c, n_tasks);
    for (int i = 0; i < n_tasks; i++)
        assert_int_equal(atomic_load(&c->hits[i]), 1);
    for (int i = n_tasks; i < MAX_TASKS; i++)
        assert_int_equal(atomic_load(&c->hits[i]), 0);
    assert_int_equal(atomic_load(&c->bad_thread), 0);
    free(c);
}

static void test_threadpool_runs_every_task_once(void **state)
{
    assert_int_equal(threadpool_threads(*state), 4);
    run_and_check(*state, MAX_TASKS);
}

static void test_threadpool_fewer_tasks_than_threads(void **state)
{
    run_and_check(*state, 1);
    run_and_check(*state, 2);
    run_and_check(*state, 3);
    run_and_check(*state, 0);
}

static void test_threadpool_many_rounds(void **state)
{
    for (int r = 0; r < 3000; r++)
        run_and_check(*state, 1 + r % 37);
}

/* Rounds far apart, so the workers have gone to sleep on the futex between them. */
static void test_threadpool_wakes_sleeping_workers(void **state)
{
    for (int r = 0; r < 5; r++) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL); /* lets the workers reach their futex wait; not a sync */
        run_and_check(*state, 64);
    }
}

static void test_threadpool_idle_uses_no_cpu(void **state)
{
    struct timespec c0, c1, ts = {0, 200 * 1000 * 1000};
    run_and_check(*state, 8);
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL); /* past the spin phase */
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    nanosleep(&ts, NULL);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double used = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
    assert_true(used < 0.02); /* three spinning threads would use ~0.6 s */
}

static void test_threadpool_single_thread_and_null(void **state)
{
    (void)state;
    struct threadpool *p = threadpool_create(1);
    assert_non_null(p);
    run_and_check(p, 10);
    threadpool_destroy(p);
    run_and_check(NULL, 10);
    threadpool_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_threadpool_runs_every_task_once, setup_pool4,
                                        teardown_pool),
        cmocka_unit_test_setup_teardown(test_threadpool_fewer_tasks_than_threads, setup_pool4,
                                        teardown_pool),
        cmocka_unit_test_setup_teardown(test_threadpool_many_rounds, setup_pool4, teardown_pool),
        cmocka_unit_test_setup_teardown(test_threadpool_wakes_sleeping_workers, setup_pool4,
                                        teardown_pool),
        cmocka_unit_test_setup_teardown(test_threadpool_idle_uses_no_cpu, setup_pool4,
                                        teardown_pool),
        cmocka_unit_test(test_threadpool_single_thread_and_null),
    };
    return cmocka_run_group_tests_name("threadpool", tests, NULL, NULL);
}
