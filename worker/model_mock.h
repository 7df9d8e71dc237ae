/* The mock model: a byte tokenizer's vocabulary (token b is byte b, TOKENIZER_BYTES_EOS is
 * EOS, 257 ids) and a fixed reply that greedy sampling reproduces exactly, then EOS. It
 * exercises everything but the arithmetic. With faults on, markers in a prompt inject
 * failures (below); without, markers are ordinary text. */
#ifndef MODEL_MOCK_H
#define MODEL_MOCK_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define MODEL_MOCK_DEFAULT_REPLY "Hello! I am kiln's mock model."

/* Fault markers, honoured only with faults on:
 *   [[kiln:abort]]  decode calls abort()
 *   [[kiln:segv]]   prefill raises SIGSEGV
 *   [[kiln:hang]]   decode sleeps forever (the heartbeat stops)
 *   [[kiln:error]]  decode fails that one sequence with "injected fault"
 *   [[kiln:hold]]   prefill blocks until the process receives SIGUSR1 (one SIGUSR1 releases
 *                   one hold; one sent early stays pending and releases the next hold), or
 *                   until *stop is set (a SIGTERM or SIGINT handler sets it), so a held
 *                   worker still stops when told to */
struct model_mock_opts {
    const char *reply;      /* NULL: MODEL_MOCK_DEFAULT_REPLY; copied */
    /* the reply to a prompt holding "<tool_response>" (a tool loop's second turn); NULL:
     * reply; copied */
    const char *tool_reply;
    uint32_t delay_ms;      /* simulated compute per prefill and per decode step */
    uint32_t max_context;   /* 0: 4096 */
    uint32_t max_sequences; /* 0: 1 */
    bool faults;
    /* The worker's stop flag, set by its SIGTERM/SIGINT handler; NULL: only SIGUSR1 ends a
     * hold. Must outlive the model. */
    volatile sig_atomic_t *stop;
};

/* A mock model. With faults on it blocks SIGUSR1 in the calling thread and installs a
 * handler for it, process-wide (the hold gate): call it before starting other threads.
 * Returns NULL with a message in err. Free it with model_destroy(). */
struct model *model_mock_create(const struct model_mock_opts *o, char *err, size_t errlen);

#endif
