/* The model's thread pool: a generation counter announces a run, tasks are claimed from an
 * atomic counter, a pending counter tells the caller when the run is over. Both waits spin a
 * little, then sleep on a futex (Dekker-style: a sleeper publishes its intent, re-checks,
 * and only then sleeps; the other side wakes only when someone said it sleeps). */
#include "threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spins before sleeping: long enough to cover the serial work between two matrix products
 * of one forward pass, short enough that a pool between requests goes quiet at once. */
#define THREADPOOL_SPIN 4096

struct threadpool_worker {
    struct threadpool *pool;
    int index; /* 1..n_threads-1; the caller is 0 */
    pthread_t tid;
};

/* Synchronization:
 *  fn, ctx, n_tasks: written by the caller before gen is bumped (release), read by workers
 *                    after they see the new gen (acquire); constant during a run.
 *  next: claimed by everyone during a run (relaxed fetch_add; results land in disjoint rows).
 *  pending: workers still in the run; set by the caller before the bump, decremented by each
 *           worker when it is done (release); the caller reads it (acquire).
 *  sleepers / caller_waiting: intents to sleep on gen / pending (seq_cst with the re-check). */
struct threadpool {
    int n_threads;
    threadpool_fn fn;
    void *ctx;
    int n_tasks;
    _Atomic uint32_t gen;
    _Atomic int next;
    _Atomic uint32_t pending;
    _Atomic int sleepers;
    _Atomic int caller_waiting;
    _Atomic int stop;
    struct threadpool_worker *workers;
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_tasks(struct threadpool *p, int thread)
{
    for (;;) {
        int i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_tasks)
            break;
        p->fn(p->ctx, i, thread);
    }
}

/* Waits until gen differs from seen; returns the new value. */
static uint32_t wait_gen(struct threadpool *p, uint32_t seen)
{
    uint32_t g;
    for (int i = 0; i < THREADPOOL_SPIN; i++) {
        if ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) != seen)
            return g;
        cpu_relax();
    }
    for (;;) {
        atomic_fetch_add(&p->sleepers, 1);
        g = atomic_load(&p->gen); /* re-check after publishing the intent */
        if (g == seen)
            (void)futex(&p->gen, FUTEX_WAIT_PRIVATE, seen); /* EAGAIN/EINTR: re-check */
        atomic_fetch_sub(&p->sleepers, 1);
        if ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) != seen)
            return g;
    }
}

static void *worker_main(void *arg)
{
    struct threadpool_worker *w = arg;
    struct threadpool *p = w->pool;
    uint32_t seen = 0; /* gen at create: a run announced before this thread got here counts */

    for (;;) {
        seen = wait_gen(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_tasks(p, w->index);
        /* seq_cst: pairs with the caller's caller_waiting store and re-check */
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting))
            (void)futex(&p->pending, FUTEX_WAKE_PRIVATE, 1);
    }
}

static void announce(struct threadpool *p)
{
    atomic_fetch_add(&p->gen, 1); /* seq_cst: orders the setup before, pairs with sleepers */
    if (atomic_load(&p->sleepers) > 0)
        (void)futex(&p->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

struct threadpool *threadpool_create(int n_threads)
{
    struct threadpool *p = calloc(1, sizeof(*p));
    int started = 0, err = 0;

    if (!p)
        return NULL;
    p->n_threads = n_threads < 1 ? 1 : n_threads;
    if (p->n_threads > 1) {
        p->workers = calloc((size_t)p->n_threads - 1, sizeof(*p->workers));
        if (!p->workers) {
            err = ENOMEM;
            goto fail;
        }
    }
    for (; started < p->n_threads - 1; started++) {
        struct threadpool_worker *w = &p->workers[started];
        w->pool = p;
        w->index = started + 1;
        if ((err = pthread_create(&w->tid, NULL, worker_main, w)) != 0)
            goto fail;
    }
    return p;
fail:
    atomic_store(&p->stop, 1);
    announce(p);
    for (int i = 0; i < started; i++)
        pthread_join(p->workers[i].tid, NULL);
    free(p->workers);
    free(p);
    errno = err;
    return NULL;
}

void threadpool_destroy(struct threadpool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    announce(p);
    for (int i = 0; i < p->n_threads - 1; i++)
        pthread_join(p->workers[i].tid, NULL);
    free(p->workers);
    free(p);
}

int threadpool_threads(const struct threadpool *p)
{
    return p ? p->n_threads : 1;
}

void threadpool_run(struct threadpool *p, threadpool_fn fn, void *ctx, int n_tasks)
{
    if (n_tasks <= 0)
        return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, (uint32_t)p->n_threads - 1, memory_order_relaxed);
    announce(p);
    run_tasks(p, 0);

    uint32_t left;
    for (int i = 0; i < THREADPOOL_SPIN; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    for (;;) {
        atomic_store(&p->caller_waiting, 1);
        left = atomic_load(&p->pending); /* re-check after publishing the intent */
        if (left != 0)
            (void)futex(&p->pending, FUTEX_WAIT_PRIVATE, left);
        atomic_store(&p->caller_waiting, 0);
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0)
            return;
    }
}
