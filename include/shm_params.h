/* A worker's parameters, passed once: the front encodes them into its region's params area
 * (shm_region_params) before fork, and the worker decodes them at start instead of parsing a
 * command line. The area is a fixed, versioned block followed by its strings:
 *
 *   +------------------+ 0
 *   | shm_params_block |  version, size, numbers, flags, (off, len) of each string
 *   +------------------+
 *   | strings          |  each NUL-terminated, at its off from the block's start
 *   +------------------+ params_size
 *
 * The decoder copies the area out of shared memory first, then checks everything (version,
 * block size, each string inside the area and NUL-terminated, every number in its range):
 * what the front wrote is never trusted. */
#ifndef SHM_PARAMS_H
#define SHM_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_PARAMS_VERSION 1u
/* The longest string (a model path, a mock reply) in bytes, NUL excluded. */
#define SHM_PARAMS_MAX_STR (1u << 20)

/* flags */
#define SHM_PARAMS_MOCK_FAULTS 1u

/* The numbers' ranges, checked by the decoder (the front's flags are checked tighter). */
#define SHM_PARAMS_MAX_SEQUENCES 4096u
#define SHM_PARAMS_MAX_THREADS   1024u
#define SHM_PARAMS_MAX_MOCK_MS   3600000u
#define SHM_PARAMS_MAX_HEARTBEAT 60000u

/* A worker's parameters, plain. */
struct shm_params {
    uint32_t id;                  /* the worker's number (its log lines say "worker N") */
    uint32_t parent_pid;          /* the front: the worker exits if it is gone; 0: unchecked */
    uint32_t wake_fd, notify_fd;  /* the eventfds it inherits (front -> worker, worker -> front) */
    uint32_t max_sequences;       /* [1, SHM_PARAMS_MAX_SEQUENCES] */
    uint32_t max_prefill_tokens;  /* [1, INT32_MAX] */
    uint32_t ctx;                 /* [2, WIRE_MAX_PROMPT] */
    uint32_t kv_cache_tokens;     /* [0, INT32_MAX]; 0: max_sequences x ctx */
    uint32_t threads;             /* [0, SHM_PARAMS_MAX_THREADS]; 0: every core */
    uint32_t mock_delay_ms, mock_load_ms; /* [0, SHM_PARAMS_MAX_MOCK_MS] */
    uint32_t heartbeat_ms;        /* [0, SHM_PARAMS_MAX_HEARTBEAT]; 0: the loop's default */
    bool mock_faults;
    const char *model;            /* "mock" or a GGUF path; required, not empty */
    const char *mock_reply;       /* NULL: the mock's default */
    const char *mock_tool_reply;  /* NULL: the reply */
};

/* Bytes p's area needs, or 0 when a string is longer than SHM_PARAMS_MAX_STR or the model is
 * missing. */
size_t shm_params_size(const struct shm_params *p);

/* Encode p into buf (cap bytes, at least shm_params_size(p)). Returns 0 or -EINVAL. */
int shm_params_encode(const struct shm_params *p, void *buf, size_t cap);

/* Copy len bytes at buf (shared memory) into a private buffer and check them; on success p's
 * strings point into *store (malloc'd: free it after p). Returns 0, -EPROTO with a one-line
 * reason in err, or -ENOMEM. */
int shm_params_decode(const void *buf, size_t len, struct shm_params *p, char **store,
                      char *err, size_t errlen);

#endif
