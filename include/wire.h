/* The records front and workers exchange: types, reasons and size limits. Shared by both
 * processes; the msgpack layout of each record is in proto.h. No code here. */
#ifndef WIRE_H
#define WIRE_H

#include <stdint.h>

/* Bumped whenever a record's layout changes; a record of another version is rejected. */
#define WIRE_VERSION 4

/* The largest encoded record either side sends or accepts. */
#define WIRE_MAX_MSG (1u << 20)
/* The longest prompt a JOB carries, in tokens (at most 5 msgpack bytes each). */
#define WIRE_MAX_PROMPT 131072u
/* The longest error message a FAILED record carries, in bytes, NUL excluded. */
#define WIRE_MAX_ERROR 512u
/* logit_bias entries in one JOB. */
#define WIRE_MAX_LOGIT_BIAS 300u
/* The longest grammar (GBNF text) a JOB carries, in bytes; grammar.h's GRAMMAR_MAX_SOURCE. */
#define WIRE_MAX_GRAMMAR (128u * 1024u)
/* The longest request id (the HTTP request's X-Request-Id) a JOB carries, in bytes; the
 * front's REQUEST_ID_MAX. Only [A-Za-z0-9._:-]. */
#define WIRE_MAX_REQUEST_ID 128u
/* Alternatives reported with each token when logprobs are asked for. */
#define WIRE_MAX_TOP_LOGPROBS 20u
/* KV-cache block events in one CACHE record. */
#define WIRE_MAX_CACHE_EVENTS 512u

/* front -> worker: JOB, CANCEL, PAUSE, RESUME.  worker -> front: STARTED, TOKEN, DONE, FAILED.
 * PAUSE keeps a running sequence in its slot without decoding it (its client reads slower
 * than it is generated); RESUME lets it go on. Neither is answered. */
enum msg_type {
    MSG_TYPE_JOB = 1,
    MSG_TYPE_CANCEL = 2,
    MSG_TYPE_STARTED = 3,
    MSG_TYPE_TOKEN = 4,
    MSG_TYPE_DONE = 5,
    MSG_TYPE_FAILED = 6,
    MSG_TYPE_PAUSE = 7,
    MSG_TYPE_RESUME = 8,
    MSG_TYPE_CACHE = 9, /* worker -> front, req_id 0: blocks its KV cache indexed or evicted */
};
#define MSG_TYPE_LAST MSG_TYPE_CACHE

/* Why a sequence ended without an error (DONE). */
enum finish_reason {
    FINISH_REASON_STOP = 0,      /* an end-of-sequence token (not sent) */
    FINISH_REASON_LENGTH = 1,    /* max_new_tokens reached */
    FINISH_REASON_CANCELLED = 2, /* the front sent CANCEL */
};

#endif
