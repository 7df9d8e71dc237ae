/* Wake-ups between the two ends of a ring without lost wake-ups and without a syscall per
 * record: the consumer announces it is about to sleep, the producer writes the eventfd only
 * then. The worker sleeps through an io_uring (eventfd read + timeout); the front watches
 * the eventfd from its libevent loop and calls notify_consume(). */
#ifndef NOTIFY_H
#define NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "shm_ring.h"

/* A new eventfd, non-blocking and close-on-exec. Returns the fd or -errno. */
int notify_eventfd(void);

/* Producer, after pushing: write efd if the consumer said it sleeps. Returns 0 or -errno. */
int notify_wake(struct shm_ring_view *v, int efd);

/* Consumer, before sleeping: sets consumer_waiting, fences, and re-checks the ring.
 * Returns true when the ring is still empty and the caller may sleep; false (waiting
 * cleared again) when a record arrived meanwhile. */
bool notify_prepare_sleep(struct shm_ring_view *v);

/* Consumer, after waking: clears consumer_waiting. */
void notify_end_sleep(struct shm_ring_view *v);

/* The same handshake the other way, for a producer that found the ring full.
 * Producer: notify_prepare_wait_room() (sets producer_waiting, fences), retry the push, and
 * only if it still fails sleep on its eventfd; notify_end_wait_room() after.
 * Consumer, after popping: notify_wake_producer() writes efd if the producer said it waits
 * (and clears the flag, merging wake-ups). Returns 0 or -errno. */
void notify_prepare_wait_room(struct shm_ring_view *v);
void notify_end_wait_room(struct shm_ring_view *v);
int notify_wake_producer(struct shm_ring_view *v, int efd);

/* Drain an eventfd's counter (non-blocking). Returns 0 or -errno other than -EAGAIN. */
int notify_consume(int efd);

/* The worker's sleeping place: an io_uring reading one eventfd, with a timeout. Made after
 * fork, in the process that sleeps. */
struct notify_waiter;

/* Returns a waiter on efd, or NULL with *err = -errno (-ENOSYS/-EPERM where the kernel has
 * no io_uring). */
struct notify_waiter *notify_waiter_create(int efd, int *err);
void notify_waiter_destroy(struct notify_waiter *w);

/* Sleep until efd is written or timeout_ms passes (-1: no timeout). Returns 1 when woken,
 * 0 on timeout or a signal, or -errno for an error that will recur (a failed submit, a read
 * that completes with an error): the caller then stops using the waiter (destroy it and
 * poll() efd instead) rather than call again and spin. */
int notify_waiter_wait(struct notify_waiter *w, int timeout_ms);

#endif
