/* The model's thread pool: a ticket holds the run's tasks, a generation counter wakes the
 * workers, a done counter tells the caller when the run is over. Both waits spin a
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

/* A run's tasks are claimed through one 64-bit ticket: run id (28 bits), task count (18),
 * next task (18). A thread claims task i of whatever run the ticket holds by CAS, so a
 * worker that wakes late (descheduled on a busy machine) can never run a stale or future
 * run's task, and the caller never waits for a worker that found nothing to do: a run ends
 * when its done count reaches its task count.
 *
 * Synchronization:
 *  fn, ctx, base: written by the caller before it publishes the run's ticket (release), read
 *                 by a thread only after a successful claim (acq_rel CAS) of that run, and not
 *                 rewritten until every claimed task is done (done, acquire by the caller).
 *  done: tasks finished in the current run; incremented (release) after each task.
 *  gen: bumped after each ticket is published; only for sleeping and waking.
 *  sleepers / caller_waiting: intents to sleep on gen / done (seq_cst with the re-check). */
#define TICKET_BITS 18
#define TICKET_MAX  ((1u << TICKET_BITS) - 1)

struct threadpool {
    int n_threads;
    threadpool_fn fn;
    void *ctx;
    int base;
    _Atomic uint64_t ticket;
    _Atomic uint32_t done;
    _Atomic uint32_t gen;
    _Atomic int sleepers;
    _Atomic int caller_waiting;
    _Atomic int stop;
    uint32_t run_id;
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

/* Claims and runs tasks of the current run until none is left. */
static void run_tasks(struct threadpool *p, int thread)
{
    for (;;) {
        uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
        uint32_t n = (uint32_t)(t >> TICKET_BITS) & TICKET_MAX, i = (uint32_t)t & TICKET_MAX;
        if (i >= n)
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue;
        p->fn(p->ctx, p->base + (int)i, thread);
        /* seq_cst: pairs with the caller's caller_waiting store and re-check */
        if (atomic_fetch_add(&p->done, 1) + 1 == n && atomic_load(&p->caller_waiting))
            (void)futex(&p->done, FUTEX_WAKE_PRIVATE, 1);
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

/* One run of n_tasks (<= TICKET_MAX) tasks, numbered from base. */
static void run_chunk(struct threadpool *p, threadpool_fn fn, void *ctx, int base,
                      uint32_t n_tasks)
{
    p->fn = fn;
    p->ctx = ctx;
    p->base = base;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    p->run_id = (p->run_id + 1) & ((1u << (64 - 2 * TICKET_BITS)) - 1);
    atomic_store_explicit(&p->ticket,
                          (uint64_t)p->run_id << (2 * TICKET_BITS) |
                              (uint64_t)n_tasks << TICKET_BITS,
                          memory_order_release);
    announce(p);
    run_tasks(p, 0);

    uint32_t d;
    for (int i = 0; i < THREADPOOL_SPIN; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == n_tasks)
            return;
        cpu_relax();
    }
    for (;;) {
        atomic_store(&p->caller_waiting, 1);
        d = atomic_load(&p->done); /* re-check after publishing the intent */
        if (d != n_tasks)
            (void)futex(&p->done, FUTEX_WAIT_PRIVATE, d);
        atomic_store(&p->caller_waiting, 0);
        if (atomic_load_explicit(&p->done, memory_order_acquire) == n_tasks)
            return;
    }
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
    for (int base = 0; base < n_tasks; base += (int)TICKET_MAX) {
        uint32_t n = (uint32_t)(n_tasks - base) < TICKET_MAX ? (uint32_t)(n_tasks - base)
                                                             : TICKET_MAX;
        run_chunk(p, fn, ctx, base, n);
    }
}
