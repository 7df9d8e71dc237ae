/* Ring benchmark between two processes (fork, the ring in a memfd region): records/s for
 * small TOKEN-sized records streamed, and the wake-up latency of a consumer sleeping in its
 * io_uring when the producer pushes (producer timestamps the record after the consumer said
 * it sleeps; the consumer measures its arrival). Prints one line per figure. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "notify.h"
#include "shm_region.h"
#include "shm_ring.h"

#define STREAM_RECORDS 20000000u
#define STREAM_LEN     16u
#define WAKE_ROUNDS    3000u
#define WAKE_SETTLE_NS 50000u /* let the consumer reach its sleep before we push */
#define DEADLINE_S     60

/* What the child reports back (MAP_SHARED, mapped before fork). */
struct bench_shared {
    _Atomic uint64_t consumed;
    _Atomic uint64_t sleeps;
    uint64_t lat_ns[WAKE_ROUNDS];
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Consumer: take n records; when the ring is empty, sleep through notify. With lat, the
 * first 8 bytes of each record are the producer's timestamp and the delay is recorded. */
static int consumer(struct shm_ring_view *r, int efd, uint64_t n, struct bench_shared *sh, bool lat)
{
    struct notify_waiter *w;
    const void *msg;
    uint32_t len;
    uint64_t got = 0;
    int err, ret;

    alarm(DEADLINE_S);
    if ((w = notify_waiter_create(efd, &err)) == NULL)
        return 2;
    while (got < n) {
        ret = shm_ring_peek(r, &msg, &len);
        if (ret == -EAGAIN) {
            if (notify_prepare_sleep(r)) {
                atomic_fetch_add_explicit(&sh->sleeps, 1, memory_order_relaxed);
                ret = notify_waiter_wait(w, 1000);
                notify_end_sleep(r);
                if (ret < 0)
                    return 3;
            }
            continue;
        }
        if (ret < 0 || len != STREAM_LEN)
            return 4;
        uint64_t v;
        memcpy(&v, msg, sizeof(v));
        if (lat)
            sh->lat_ns[got] = now_ns() - v;
        else if (v != got)
            return 5; /* out of order */
        shm_ring_pop(r);
        got++;
    }
    atomic_store(&sh->consumed, got);
    notify_waiter_destroy(w);
    return 0;
}

static pid_t spawn_consumer(struct shm_ring_view *r, int efd, uint64_t n, struct bench_shared *sh,
                            bool lat)
{
    pid_t pid = fork();

    if (pid == 0)
        _exit(consumer(r, efd, n, sh, lat));
    return pid;
}

static int reap(pid_t pid)
{
    int status;

    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int bench_stream(struct shm_region *reg, int efd, struct bench_shared *sh)
{
    struct shm_ring_view *r = &reg->to_front;
    unsigned char rec[STREAM_LEN] = {0};
    uint64_t t0, deadline;
    pid_t pid;
    int rc;

    if ((pid = spawn_consumer(r, efd, STREAM_RECORDS, sh, false)) < 0)
        return -1;
    t0 = now_ns();
    deadline = t0 + DEADLINE_S * UINT64_C(1000000000);
    for (uint64_t i = 0; i < STREAM_RECORDS; i++) {
        memcpy(rec, &i, sizeof(i));
        while (shm_ring_push(r, rec, STREAM_LEN) == -EAGAIN) {
            (void)notify_wake(r, efd);
            if (now_ns() > deadline) {
                kill(pid, SIGKILL);
                (void)reap(pid);
                fprintf(stderr, "bench_ring: stream timed out\n");
                return -1;
            }
            sched_yield();
        }
        (void)notify_wake(r, efd);
    }
    rc = reap(pid);
    double secs = (double)(now_ns() - t0) / 1e9;
    if (rc != 0 || atomic_load(&sh->consumed) != STREAM_RECORDS) {
        fprintf(stderr, "bench_ring: stream consumer failed (%d)\n", rc);
        return -1;
    }
    printf("ring: %.1f M records/s (%u-byte records, 2 processes; %u records in %.2f s, "
           "consumer slept %llu times)\n",
           STREAM_RECORDS / secs / 1e6, STREAM_LEN, STREAM_RECORDS, secs,
           (unsigned long long)atomic_load(&sh->sleeps));
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static int bench_wake(struct shm_region *reg, int efd, struct bench_shared *sh)
{
    struct shm_ring_view *r = &reg->to_front;
    unsigned char rec[STREAM_LEN] = {0};
    uint64_t deadline, t;
    pid_t pid;
    int rc;

    atomic_store(&sh->consumed, 0);
    atomic_store(&sh->sleeps, 0);
    if ((pid = spawn_consumer(r, efd, WAKE_ROUNDS, sh, true)) < 0)
        return -1;
    deadline = now_ns() + DEADLINE_S * UINT64_C(1000000000);
    for (uint32_t i = 0; i < WAKE_ROUNDS; i++) {
        /* Wait until the consumer says it sleeps, give it time to get into the kernel... */
        while (atomic_load(&r->shared->consumer_waiting) == 0) {
            if (now_ns() > deadline) {
                kill(pid, SIGKILL);
                (void)reap(pid);
                fprintf(stderr, "bench_ring: the consumer never slept\n");
                return -1;
            }
            sched_yield();
        }
        for (t = now_ns() + WAKE_SETTLE_NS; now_ns() < t;)
            ;
        /* ...then timestamp, push and wake. */
        t = now_ns();
        memcpy(rec, &t, sizeof(t));
        if (shm_ring_push(r, rec, STREAM_LEN) != 0 || notify_wake(r, efd) != 0) {
            kill(pid, SIGKILL);
            (void)reap(pid);
            return -1;
        }
    }
    rc = reap(pid);
    if (rc != 0) {
        fprintf(stderr, "bench_ring: wake consumer failed (%d)\n", rc);
        return -1;
    }
    qsort(sh->lat_ns, WAKE_ROUNDS, sizeof(sh->lat_ns[0]), cmp_u64);
    printf("ring wake-up latency: p50 %.0f us, p99 %.0f us (%u rounds, consumer asleep in "
           "io_uring, max %.0f us)\n",
           sh->lat_ns[WAKE_ROUNDS / 2] / 1e3, sh->lat_ns[WAKE_ROUNDS * 99 / 100] / 1e3,
           WAKE_ROUNDS, sh->lat_ns[WAKE_ROUNDS - 1] / 1e3);
    return 0;
}

int main(void)
{
    struct shm_region reg;
    struct bench_shared *sh;
    int efd, err;

    if ((err = shm_region_create(&reg, 4096, 1u << 20)) < 0) {
        fprintf(stderr, "bench_ring: shm_region_create: %s\n", strerror(-err));
        return 1;
    }
    if ((efd = notify_eventfd()) < 0) {
        fprintf(stderr, "bench_ring: eventfd: %s\n", strerror(-efd));
        return 1;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("bench_ring: mmap");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    if (bench_stream(&reg, efd, sh) < 0 || bench_wake(&reg, efd, sh) < 0)
        return 1;
    munmap(sh, sizeof(*sh));
    close(efd);
    shm_region_destroy(&reg);
    return 0;
}
