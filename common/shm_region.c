/* One worker's shared memory: a memfd holding a header, the worker's parameters and two
 * rings, created and mapped by
 * the front before fork, attached by the worker from the inherited fd. The attaching side
 * checks the layout against the file's real size before it trusts a single offset. */
#include "shm_region.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t region_align64(uint64_t n)
{
    return (n + 63) & ~UINT64_C(63);
}

static int region_is_pow2(uint64_t n)
{
    return n != 0 && (n & (n - 1)) == 0;
}

/* The largest parameters area (a model path and two mock replies fit many times over). */
#define REGION_MAX_PARAMS (UINT64_C(16) << 20)

/* Offsets of the parameters, the two rings and the total size, for these sizes. */
static void region_layout(uint64_t p_size, uint64_t tw_size, uint64_t tf_size,
                          uint64_t *p_off, uint64_t *tw_off, uint64_t *tf_off, uint64_t *total)
{
    *p_off = region_align64(sizeof(struct shm_region_hdr));
    *tw_off = region_align64(*p_off + p_size);
    *tf_off = region_align64(*tw_off + shm_ring_footprint(tw_size));
    *total = region_align64(*tf_off + shm_ring_footprint(tf_size));
}

int shm_region_create(struct shm_region *reg, uint64_t to_worker_size, uint64_t to_front_size)
{
    return shm_region_create_params(reg, to_worker_size, to_front_size, 0);
}

void *shm_region_params(const struct shm_region *reg, size_t *size)
{
    *size = reg->hdr ? (size_t)reg->params_size : 0;
    return *size ? (unsigned char *)reg->hdr + reg->params_off : NULL;
}

int shm_region_create_params(struct shm_region *reg, uint64_t to_worker_size,
                             uint64_t to_front_size, uint64_t params_size)
{
    uint64_t p_off, tw_off, tf_off, total;
    struct shm_region_hdr *hdr;
    void *base;
    int fd, err;

    memset(reg, 0, sizeof(*reg));
    reg->fd = -1;
    /* Ring sizes are checked here too so that a bad size fails before any syscall. */
    if (!region_is_pow2(to_worker_size) || !region_is_pow2(to_front_size) ||
        to_worker_size < 64 || to_front_size < 64 || to_worker_size > (UINT64_C(1) << 32) ||
        to_front_size > (UINT64_C(1) << 32) || params_size > REGION_MAX_PARAMS)
        return -EINVAL;
    region_layout(params_size, to_worker_size, to_front_size, &p_off, &tw_off, &tf_off, &total);

    if ((fd = memfd_create("kiln-shm", MFD_CLOEXEC)) < 0)
        return -errno;
    if (ftruncate(fd, (off_t)total) < 0) {
        err = -errno;
        goto fail;
    }
    base = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        err = -errno;
        goto fail;
    }
    /* A fresh memfd reads as zeros, so only the non-zero fields need setting. */
    hdr = base;
    hdr->magic = SHM_REGION_MAGIC;
    hdr->version = SHM_REGION_VERSION;
    hdr->size = total;
    hdr->to_worker_off = tw_off;
    hdr->to_worker_size = to_worker_size;
    hdr->to_front_off = tf_off;
    hdr->to_front_size = to_front_size;
    hdr->params_off = p_off;
    hdr->params_size = params_size;
    atomic_init(&hdr->state, WORKER_STATE_STARTING);
    atomic_init(&hdr->heartbeat, 0);
    atomic_init(&hdr->running, 0);
    atomic_init(&hdr->waiting, 0);
    atomic_init(&hdr->n_prefills, 0);
    atomic_init(&hdr->n_prefill_tokens, 0);
    atomic_init(&hdr->n_decode_steps, 0);
    atomic_init(&hdr->n_decoded_tokens, 0);
    hist_init(&hdr->prefill);
    hist_init(&hdr->decode_step);
    if (shm_ring_init(&reg->to_worker,
                      (struct shm_ring *)(void *)((unsigned char *)base + tw_off),
                      to_worker_size) < 0 ||
        shm_ring_init(&reg->to_front, (struct shm_ring *)(void *)((unsigned char *)base + tf_off),
                      to_front_size) < 0) {
        err = -EINVAL; /* unreachable: sizes were checked above */
        (void)munmap(base, (size_t)total);
        goto fail;
    }
    reg->fd = fd;
    reg->size = (size_t)total;
    reg->hdr = hdr;
    reg->params_off = p_off;
    reg->params_size = params_size;
    return 0;
fail:
    (void)close(fd); /* already failing */
    memset(reg, 0, sizeof(*reg));
    reg->fd = -1;
    return err;
}

/* Whether a ring of ring_size bytes at off lies inside a file of file_size bytes, after the
 * header, 64-aligned. Written so that no sum can overflow. */
static int region_ring_fits(uint64_t off, uint64_t ring_size, uint64_t file_size)
{
    uint64_t hdr_end = region_align64(sizeof(struct shm_region_hdr));

    if (!region_is_pow2(ring_size) || ring_size < 64 || ring_size > (UINT64_C(1) << 32))
        return 0;
    if ((off & 63) != 0 || off < hdr_end || off > file_size)
        return 0;
    return shm_ring_footprint(ring_size) <= file_size - off;
}

/* Whether [a, a + an) and [b, b + bn), both inside the file, overlap. */
static int region_overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
    return an && bn && (a < b ? an > b - a : bn > a - b);
}

int shm_region_attach(struct shm_region *reg, int fd)
{
    struct shm_region_hdr *hdr;
    uint64_t file_size, tw_off, tw_size, tf_off, tf_size, p_off, p_size;
    struct stat st;
    void *base = MAP_FAILED;
    int err;

    memset(reg, 0, sizeof(*reg));
    reg->fd = -1;
    if (fstat(fd, &st) < 0) {
        err = -errno;
        goto fail;
    }
    /* The file's real size bounds everything; the header's own claims come second. */
    if (st.st_size < (off_t)sizeof(struct shm_region_hdr)) {
        err = -EPROTO;
        goto fail;
    }
    file_size = (uint64_t)st.st_size;
    base = mmap(NULL, (size_t)file_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        err = -errno;
        goto fail;
    }
    hdr = base;
    /* Copy the layout out once: the checks and the pointers below use the same values even if
     * the other process scribbles on the header meanwhile. */
    tw_off = hdr->to_worker_off;
    tw_size = hdr->to_worker_size;
    tf_off = hdr->to_front_off;
    tf_size = hdr->to_front_size;
    p_off = hdr->params_off;
    p_size = hdr->params_size;
    err = -EPROTO;
    if (hdr->magic != SHM_REGION_MAGIC || hdr->version != SHM_REGION_VERSION ||
        hdr->size != file_size)
        goto fail;
    if (!region_ring_fits(tw_off, tw_size, file_size) ||
        !region_ring_fits(tf_off, tf_size, file_size))
        goto fail;
    /* The rings must not overlap each other. */
    if (region_overlap(tw_off, shm_ring_footprint(tw_size), tf_off, shm_ring_footprint(tf_size)))
        goto fail;
    /* The parameters lie after the header, inside the file, beside the rings. */
    if (p_size > REGION_MAX_PARAMS ||
        (p_size && ((p_off & 63) != 0 || p_off < region_align64(sizeof(struct shm_region_hdr)) ||
                    p_off > file_size || p_size > file_size - p_off ||
                    region_overlap(p_off, p_size, tw_off, shm_ring_footprint(tw_size)) ||
                    region_overlap(p_off, p_size, tf_off, shm_ring_footprint(tf_size)))))
        goto fail;
    if (shm_ring_check(&reg->to_worker,
                       (struct shm_ring *)(void *)((unsigned char *)base + tw_off), tw_size) < 0 ||
        shm_ring_check(&reg->to_front, (struct shm_ring *)(void *)((unsigned char *)base + tf_off),
                       tf_size) < 0)
        goto fail;
    reg->fd = fd;
    reg->size = (size_t)file_size;
    reg->hdr = hdr;
    reg->params_off = p_size ? p_off : 0;
    reg->params_size = p_size;
    return 0;
fail:
    if (base != MAP_FAILED)
        (void)munmap(base, (size_t)file_size); /* already failing */
    (void)close(fd);                           /* we own it, even on failure */
    memset(reg, 0, sizeof(*reg));
    reg->fd = -1;
    return err;
}

void shm_region_destroy(struct shm_region *reg)
{
    if (reg->hdr != NULL)
        (void)munmap(reg->hdr, reg->size);
    /* A zeroed region has fd 0, which is not ours: only a region with a mapping owns its fd. */
    if (reg->hdr != NULL && reg->fd >= 0)
        (void)close(reg->fd);
    memset(reg, 0, sizeof(*reg));
    reg->fd = -1;
}
