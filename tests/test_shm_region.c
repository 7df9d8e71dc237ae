/* shm_region: create, then attach from a forked child through the inherited fd; attach
 * rejects a wrong magic or version, a file too small for its header, and offsets or sizes
 * that reach beyond the file or overlap. */
#include "shm_region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#define TW_SIZE 4096u
#define TF_SIZE 8192u

static int setup_region(void **state)
{
    static struct shm_region reg; /* reset by every setup */

    if (shm_region_create(&reg, TW_SIZE, TF_SIZE) != 0)
        return -1;
    *state = &reg;
    return 0;
}

static int teardown_region(void **state)
{
    shm_region_destroy(*state);
    return 0;
}

/* Attach a duplicate of the region's fd (attach takes ownership of the one it gets). */
static int attach_dup(const struct shm_region *reg, struct shm_region *out)
{
    int fd = fcntl(reg->fd, F_DUPFD_CLOEXEC, 0);

    assert_true(fd >= 0);
    return shm_region_attach(out, fd);
}

static void test_shm_region_create_lays_out_header_and_rings(void **state)
{
    struct shm_region *reg = *state;
    struct shm_ring_view v;
    struct stat st;

    assert_int_equal(reg->hdr->magic, SHM_REGION_MAGIC);
    assert_int_equal(reg->hdr->to_worker_off % 64, 0);
    assert_int_equal(reg->hdr->to_front_off % 64, 0);
    assert_true(reg->hdr->to_worker_off >= sizeof(struct shm_region_hdr));
    assert_int_equal(shm_ring_check(&v, reg->to_worker.shared, TW_SIZE), 0);
    assert_int_equal(shm_ring_check(&v, reg->to_front.shared, TF_SIZE), 0);
    assert_int_equal(fstat(reg->fd, &st), 0);
    assert_int_equal((uint64_t)st.st_size, reg->size);
    assert_int_equal(reg->hdr->size, reg->size);
    assert_true(fcntl(reg->fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(atomic_load(&reg->hdr->state), WORKER_STATE_STARTING);
}

static void test_shm_region_create_rejects_bad_sizes(void **state)
{
    (void)state;
    struct shm_region reg;

    assert_int_equal(shm_region_create(&reg, 1000, 4096), -EINVAL);
    assert_int_equal(shm_region_create(&reg, 4096, 0), -EINVAL);
    assert_int_equal(shm_region_create(&reg, 32, 4096), -EINVAL);
    shm_region_destroy(&reg); /* safe on a failed create */
}

/* The child attaches the inherited fd, reads what the parent pushed, answers on the other
 * ring and bumps the heartbeat. Exit codes: 0 ok, 1 attach, 2 read, 3 reply. */
static int region_child(int fd)
{
    struct shm_region reg;
    const void *msg;
    uint32_t len;

    if (shm_region_attach(&reg, fd) != 0)
        return 1;
    if (shm_ring_peek(&reg.to_worker, &msg, &len) != 0 || len != 4 || memcmp(msg, "ping", 4))
        return 2;
    shm_ring_pop(&reg.to_worker);
    if (shm_ring_push(&reg.to_front, "pong", 4) != 0)
        return 3;
    atomic_store(&reg.hdr->heartbeat, 42);
    atomic_store(&reg.hdr->state, WORKER_STATE_READY);
    shm_region_destroy(&reg);
    return 0;
}

static void test_shm_region_attach_in_forked_child_round_trip(void **state)
{
    struct shm_region *reg = *state;
    const void *msg;
    uint32_t len;
    int status;
    pid_t pid;

    assert_int_equal(shm_ring_push(&reg->to_worker, "ping", 4), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20); /* bounded, whatever happens */
        _exit(region_child(reg->fd));
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(shm_ring_peek(&reg->to_front, &msg, &len), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(msg, "pong", 4);
    assert_int_equal(atomic_load(&reg->hdr->heartbeat), 42);
    assert_int_equal(atomic_load(&reg->hdr->state), WORKER_STATE_READY);
}

static void test_shm_region_attach_rejects_wrong_magic(void **state)
{
    struct shm_region *reg = *state, other;

    reg->hdr->magic ^= 0x1;
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->magic ^= 0x1;
    reg->hdr->version = SHM_REGION_VERSION + 1;
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->version = SHM_REGION_VERSION;
    reg->to_front.shared->magic = 0;
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    assert_null(other.hdr);
}

static void test_shm_region_attach_rejects_too_small_file(void **state)
{
    (void)state;
    struct shm_region other;
    int fd = memfd_create("kiln-test", MFD_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 16), 0);
    assert_int_equal(shm_region_attach(&other, fd), -EPROTO); /* closes fd */
    fd = memfd_create("kiln-test", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(shm_region_attach(&other, fd), -EPROTO); /* empty */
}

static void test_shm_region_attach_rejects_truncated_file(void **state)
{
    struct shm_region *reg = *state, other;
    int fd = memfd_create("kiln-test", MFD_CLOEXEC);

    /* A copy of the region missing its last page: the header claims more than exists. */
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)reg->size - 4096), 0);
    assert_int_equal(pwrite(fd, reg->hdr, sizeof(*reg->hdr), 0), (ssize_t)sizeof(*reg->hdr));
    assert_int_equal(shm_region_attach(&other, fd), -EPROTO);
}

static void test_shm_region_attach_rejects_offsets_beyond_file(void **state)
{
    struct shm_region *reg = *state, other;
    struct shm_ring_view v;
    uint64_t tf_off = reg->hdr->to_front_off, tw_off = reg->hdr->to_worker_off;
    uint64_t tf_size = reg->hdr->to_front_size;

    reg->hdr->to_front_off = reg->size; /* starts at the end */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_front_off = UINT64_MAX - 63; /* 64-aligned, would overflow a sum */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_front_off = tf_off + 64; /* its data would run past the end */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_front_off = tf_off + 8; /* not 64-aligned */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_front_off = tf_off;
    reg->hdr->to_front_size = tf_size * 2; /* larger than the file holds */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_front_size = tf_size + 8; /* not a power of two */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_front_size = tf_size;
    reg->hdr->to_worker_off = 0; /* over the header */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_worker_off = tf_off; /* both rings in one place */
    assert_int_equal(attach_dup(reg, &other), -EPROTO);
    reg->hdr->to_worker_off = tw_off;
    /* Restored, it attaches. */
    assert_int_equal(attach_dup(reg, &other), 0);
    assert_int_equal(shm_ring_check(&v, other.to_front.shared, tf_size), 0);
    shm_region_destroy(&other);
}

/* The worker's parameters area: carried to the attaching side, and refused when it reaches
 * past the file or over a ring. */
static void test_shm_region_params_area_attaches_and_is_checked(void **state)
{
    (void)state;
    struct shm_region reg, other;
    size_t n, m;
    unsigned char *area;
    uint64_t p_off, p_size;

    assert_int_equal(shm_region_create_params(&reg, TW_SIZE, TF_SIZE, 1000), 0);
    area = shm_region_params(&reg, &n);
    assert_non_null(area);
    assert_int_equal(n, 1000);
    memset(area, 0xab, n);
    assert_int_equal(attach_dup(&reg, &other), 0);
    area = shm_region_params(&other, &m);
    assert_int_equal(m, 1000);
    assert_int_equal(area[0], 0xab);
    assert_int_equal(area[999], 0xab);
    shm_region_destroy(&other);

    p_off = reg.hdr->params_off;
    p_size = reg.hdr->params_size;
    reg.hdr->params_size = reg.hdr->to_worker_off - p_off + 64; /* over the first ring */
    assert_int_equal(attach_dup(&reg, &other), -EPROTO);
    reg.hdr->params_size = reg.size; /* past the end */
    assert_int_equal(attach_dup(&reg, &other), -EPROTO);
    reg.hdr->params_size = p_size;
    reg.hdr->params_off = 0; /* over the header */
    assert_int_equal(attach_dup(&reg, &other), -EPROTO);
    reg.hdr->params_off = p_off + 8; /* not 64-aligned */
    assert_int_equal(attach_dup(&reg, &other), -EPROTO);
    reg.hdr->params_off = UINT64_MAX - 63;
    assert_int_equal(attach_dup(&reg, &other), -EPROTO);
    reg.hdr->params_off = p_off;
    assert_int_equal(attach_dup(&reg, &other), 0);
    shm_region_destroy(&other);
    shm_region_destroy(&reg);

    /* a region without parameters has none */
    assert_int_equal(shm_region_create(&reg, TW_SIZE, TF_SIZE), 0);
    assert_null(shm_region_params(&reg, &n));
    assert_int_equal(n, 0);
    shm_region_destroy(&reg);
}

#define REGION_TEST(f) cmocka_unit_test_setup_teardown(f, setup_region, teardown_region)

int main(void)
{
    const struct CMUnitTest tests[] = {
        REGION_TEST(test_shm_region_create_lays_out_header_and_rings),
        cmocka_unit_test(test_shm_region_create_rejects_bad_sizes),
        REGION_TEST(test_shm_region_attach_in_forked_child_round_trip),
        REGION_TEST(test_shm_region_attach_rejects_wrong_magic),
        cmocka_unit_test(test_shm_region_attach_rejects_too_small_file),
        REGION_TEST(test_shm_region_attach_rejects_truncated_file),
        REGION_TEST(test_shm_region_attach_rejects_offsets_beyond_file),
        cmocka_unit_test(test_shm_region_params_area_attaches_and_is_checked),
    };
    return cmocka_run_group_tests_name("shm_region", tests, NULL, NULL);
}
