/* Wake-ups across a ring without lost wake-ups and without a syscall per record. The consumer
 * announces it is about to sleep (consumer_waiting), fences, re-checks the ring; the producer
 * publishes head, fences, and writes the eventfd only if the consumer announced. The worker
 * sleeps in its own io_uring (an eventfd read kept armed across waits, plus a timeout). */
#include "notify.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <liburing.h>

int notify_eventfd(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    return fd < 0 ? -errno : fd;
}

static int notify_take_flag(_Atomic uint32_t *flag, int efd);

/* Why this cannot lose a wake-up (Dekker's pattern, two seq_cst fences):
 *   consumer: waiting = 1; fence; if ring empty -> sleep
 *   producer: head = h'; fence; if waiting -> write efd
 * The fences order the two stores before the two loads, so at least one side sees the
 * other's store: either the consumer sees the record and does not sleep, or the producer sees
 * waiting and writes the eventfd (whose counter stays set until the consumer reads it). */
int notify_wake(struct shm_ring_view *v, int efd)
{
    struct shm_ring *r = v->shared;
    /* seq_cst fence: orders our release of head (in commit) before the load of
     * consumer_waiting below; pairs with the fence in notify_prepare_sleep(). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&r->consumer_waiting, memory_order_relaxed) == 0)
        return 0;
    /* Merge wake-ups: the first producer to see the flag clears it and writes. */
    return notify_take_flag(&r->consumer_waiting, efd);
}

/* Clear a waiting flag seen set and write efd: the first waker to clear it writes, later ones
 * find it clear and skip the syscall. Relaxed is enough: the eventfd write is the signal, the
 * flag only saves syscalls. */
static int notify_take_flag(_Atomic uint32_t *flag, int efd)
{
    uint64_t one = 1;
    uint32_t expected = 1;

    if (!atomic_compare_exchange_strong_explicit(flag, &expected, 0, memory_order_relaxed,
                                                 memory_order_relaxed))
        return 0;
    for (;;) {
        if (write(efd, &one, sizeof(one)) == (ssize_t)sizeof(one))
            return 0;
        if (errno == EINTR)
            continue;
        /* EAGAIN: the counter is at its maximum, so the consumer will wake anyway. */
        return errno == EAGAIN ? 0 : -errno;
    }
}

bool notify_prepare_sleep(struct shm_ring_view *v)
{
    struct shm_ring *r = v->shared;

    atomic_store_explicit(&r->consumer_waiting, 1, memory_order_relaxed);
    /* seq_cst fence: orders the store of consumer_waiting before the load of head in
     * shm_ring_empty(); pairs with the fence in notify_wake(). */
    atomic_thread_fence(memory_order_seq_cst);
    if (!shm_ring_empty(v)) {
        atomic_store_explicit(&r->consumer_waiting, 0, memory_order_relaxed);
        return false;
    }
    return true;
}

void notify_end_sleep(struct shm_ring_view *v)
{
    /* Relaxed: a stale 1 seen by the producer costs one spare eventfd write, nothing more. */
    atomic_store_explicit(&v->shared->consumer_waiting, 0, memory_order_relaxed);
}

/* The same Dekker pattern with the roles swapped:
 *   producer: producer_waiting = 1; fence; retry the push (loads tail) -> sleep if still full
 *   consumer: tail = t'; fence; if producer_waiting -> write efd */
void notify_prepare_wait_room(struct shm_ring_view *v)
{
    atomic_store_explicit(&v->shared->producer_waiting, 1, memory_order_relaxed);
    /* seq_cst fence: orders the store above before the load of tail in the retried reserve;
     * pairs with the fence in notify_wake_producer(). */
    atomic_thread_fence(memory_order_seq_cst);
}

void notify_end_wait_room(struct shm_ring_view *v)
{
    atomic_store_explicit(&v->shared->producer_waiting, 0, memory_order_relaxed);
}

int notify_wake_producer(struct shm_ring_view *v, int efd)
{
    /* seq_cst fence: orders our release of tail (in pop) before the load below; pairs with
     * the fence in notify_prepare_wait_room(). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&v->shared->producer_waiting, memory_order_relaxed) == 0)
        return 0;
    return notify_take_flag(&v->shared->producer_waiting, efd);
}

int notify_consume(int efd)
{
    uint64_t v;

    for (;;) {
        /* One read resets a (non-semaphore) eventfd's counter to zero. */
        if (read(efd, &v, sizeof(v)) == (ssize_t)sizeof(v))
            return 0;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN ? 0 : -errno;
    }
}

#define NOTIFY_UD_WAIT 1u /* user_data of the armed read (or poll) */

/* The ring and the read's buffer must live as long as the read is armed: one waiter per
 * sleeping process, made after fork (an io_uring must not be shared across fork). */
struct notify_waiter {
    struct io_uring ring;
    int efd;
    bool armed;    /* a read (or poll) on efd is in flight */
    bool use_poll; /* the kernel returned -EAGAIN for a read of the non-blocking eventfd */
    uint64_t buf;
};

struct notify_waiter *notify_waiter_create(int efd, int *err)
{
    struct notify_waiter *w = calloc(1, sizeof(*w));
    int ret;

    if (w == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    if ((ret = io_uring_queue_init(4, &w->ring, 0)) < 0) {
        free(w);
        *err = ret;
        return NULL;
    }
    w->efd = efd;
    *err = 0;
    return w;
}

void notify_waiter_destroy(struct notify_waiter *w)
{
    if (w == NULL)
        return;
    /* Tearing the ring down cancels an armed read before its buffer is freed. */
    io_uring_queue_exit(&w->ring);
    free(w);
}

/* Put a read of efd (or, on kernels that honour O_NONBLOCK for io_uring reads, a poll) in
 * flight. It stays armed across timeouts, so a wait is one syscall in the common case. */
static int waiter_arm(struct notify_waiter *w)
{
    struct io_uring_sqe *sqe;
    int ret;

    if (w->armed)
        return 0;
    if ((sqe = io_uring_get_sqe(&w->ring)) == NULL)
        return -EBUSY; /* cannot happen: at most one SQE is ever queued */
    if (w->use_poll)
        io_uring_prep_poll_add(sqe, w->efd, POLLIN);
    else
        io_uring_prep_read(sqe, w->efd, &w->buf, sizeof(w->buf), 0);
    io_uring_sqe_set_data64(sqe, NOTIFY_UD_WAIT);
    if ((ret = io_uring_submit(&w->ring)) < 0)
        return ret;
    w->armed = true;
    return 0;
}

int notify_waiter_wait(struct notify_waiter *w, int timeout_ms)
{
    struct __kernel_timespec ts;
    struct io_uring_cqe *cqe;
    int ret, res;

    for (;;) {
        if ((ret = waiter_arm(w)) < 0)
            return ret;
        if (timeout_ms < 0) {
            ret = io_uring_wait_cqe(&w->ring, &cqe);
        } else {
            ts.tv_sec = timeout_ms / 1000;
            ts.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
            /* liburing implements this timeout with IORING_OP_TIMEOUT, or with the enter
             * call's own timeout argument where the kernel has IORING_FEAT_EXT_ARG. */
            ret = io_uring_wait_cqe_timeout(&w->ring, &cqe, &ts);
        }
        if (ret == -ETIME)
            return 0; /* the read stays armed for the next wait */
        if (ret == -EINTR)
            return 0; /* a signal: like a timeout, the caller checks its flags and waits again */
        if (ret < 0)
            return ret;
        res = cqe->res;
        io_uring_cqe_seen(&w->ring, cqe);
        w->armed = false;
        if (res == -EAGAIN && !w->use_poll) {
            /* This kernel does not arm a poll for a read of an O_NONBLOCK file. */
            w->use_poll = true;
            continue;
        }
        if (res == -EINTR || res == -ECANCELED)
            return 0;
        if (res < 0)
            return res;
        if (w->use_poll && (ret = notify_consume(w->efd)) < 0)
            return ret;
        return 1;
    }
}
