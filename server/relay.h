/* The text of one job: its worker's tokens in, the events the client sees out. It
 * detokenizes (detok.h), applies the stop strings (stop.h) and gathers the tokens a TEXT event
 * reports. A pure text pipeline: no I/O, no libevent, and no protocol state; where the job is
 * (started, cancelling, done) is the job's state alone (request.h), and the front's request
 * code feeds a relay only the records of a job whose output is still wanted. */
#ifndef RELAY_H
#define RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "stop.h"

struct tokenizer;

/* Tokens one TEXT event carries at most; more (tokens with no text of their own, held text)
 * are sent as a TEXT event with no text. */
#define RELAY_MAX_PENDING 64
/* Events one relay call gives at most: TEXT then FINISHED; or ERROR. */
#define RELAY_MAX_EVENTS 2

enum relay_event_type {
    RELAY_EVENT_TEXT,     /* text to send (maybe empty when only tokens are reported) */
    RELAY_EVENT_FINISHED, /* the reply is complete: finish_reason */
    RELAY_EVENT_ERROR,    /* a token could not be decoded; nothing more follows */
};

enum relay_finish {
    RELAY_FINISH_STOP,      /* EOS, or a stop string matched */
    RELAY_FINISH_LENGTH,    /* max_tokens or the context ran out */
    RELAY_FINISH_CANCELLED, /* the job was cancelled (not by a stop string) */
};

/* One generated token, for logprobs. */
struct relay_token {
    uint32_t id;
    float logprob;
    uint32_t n_top;
    struct proto_top top[WIRE_MAX_TOP_LOGPROBS];
};

/* Pointers are borrowed from the relay: valid until the next relay call. */
struct relay_event {
    enum relay_event_type type;
    const char *text;                 /* TEXT: whole UTF-8 characters (not NUL-terminated) */
    size_t len;                       /* TEXT */
    uint32_t n_tokens;                /* TEXT: tokens accounted for by this event */
    const struct relay_token *tokens; /* TEXT: those n_tokens tokens, in order */
    enum relay_finish reason;         /* FINISHED */
    const char *error;                /* ERROR: NUL-terminated */
};

struct relay_out {
    uint32_t n;
    struct relay_event ev[RELAY_MAX_EVENTS];
};

struct relay;

/* A relay for one job. stops: n_stop strings of stop_len[i] bytes (n_stop may be 0).
 * Returns 0 with *out, or -ENOMEM, or stop_add()'s -EINVAL/-E2BIG/-ENOSPC for a stop string
 * the request should be refused for (HTTP 400). tok must outlive the relay. */
int relay_create(const struct tokenizer *tok, const char *const *stops, const size_t *stop_len,
                 size_t n_stop, struct relay **out);

void relay_destroy(struct relay *r);

/* Write control tokens' text too (before the first token): a reply read for tool calls
 * and reasoning needs the markers some models have as control tokens (<|python_tag|>,
 * [TOOL_CALLS], ...). End-of-generation tokens end the job before they reach the relay. */
void relay_render_special(struct relay *r);

/* One generated token. Fills out with a TEXT event when there is text (or RELAY_MAX_PENDING
 * tokens wait), then FINISHED (reason STOP) when a stop string matched; or with ERROR when the
 * token cannot be decoded. After FINISHED or ERROR the job is to be cancelled and the relay
 * is fed no more. */
void relay_token(struct relay *r, const struct proto_token *t, struct relay_out *out);

/* The job's DONE record: what detok and the stop strings held is released (TEXT; the tail
 * may still complete a stop string), then FINISHED. */
void relay_done(struct relay *r, enum finish_reason reason, struct relay_out *out);

#endif
