/* A persistent pool of threads for the model's matrix products: created at load, reused for
 * every layer of every step. The calling thread works too. Idle workers spin briefly, then
 * sleep on a futex, so an idle pool uses no CPU. Not for nested or concurrent runs. */
#ifndef THREADPOOL_H
#define THREADPOOL_H

struct threadpool;

/* One task: task in [0, n_tasks), thread in [0, threadpool_threads()) names the thread that
 * runs it (for per-thread scratch). Tasks of one run may run in any order, in parallel. */
typedef void (*threadpool_fn)(void *ctx, int task, int thread);

/* A pool of n_threads threads in all, the caller included (n_threads - 1 are started).
 * n_threads < 1 counts as 1. Returns NULL with errno set on failure. */
struct threadpool *threadpool_create(int n_threads);

/* Stops and joins the threads. NULL is a no-op. */
void threadpool_destroy(struct threadpool *p);

int threadpool_threads(const struct threadpool *p);

/* Runs fn(ctx, i, thread) once for each i in [0, n_tasks) and returns when all have
 * finished. Allocates nothing, makes no syscall when every worker is still spinning. p may
 * be NULL (everything runs on the caller). One caller at a time. */
void threadpool_run(struct threadpool *p, threadpool_fn fn, void *ctx, int n_tasks);

#endif
