/* The relay of one request: the worker's records for its job in, the events the client
 * sees out. It detokenizes (detok.h), applies the stop strings (stop.h), counts tokens and
 * says when to cancel the job. A pure state machine: no I/O, no libevent; the front's
 * request code feeds it and turns its events into HTTP. */
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
/* Events one relay_feed() gives at most: STARTED; TEXT then FINISHED; or ERROR. */
#define RELAY_MAX_EVENTS 3

enum relay_event_type {
    RELAY_EVENT_STARTED,  /* the worker began the job: usage's prompt_tokens */
    RELAY_EVENT_TEXT,     /* text to send (maybe empty when only tokens are reported) */
    RELAY_EVENT_FINISHED, /* the reply is complete: finish_reason and usage */
    RELAY_EVENT_ERROR,    /* the job failed; nothing more follows */
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
    uint32_t prompt_tokens;           /* STARTED */
    uint32_t cached_tokens;           /* STARTED: of prompt_tokens, reused from the KV cache */
    const char *text;                 /* TEXT: whole UTF-8 characters (not NUL-terminated) */
    size_t len;                       /* TEXT */
    uint32_t n_tokens;                /* TEXT: tokens accounted for by this event */
    const struct relay_token *tokens; /* TEXT: those n_tokens tokens, in order */
    enum relay_finish reason;         /* FINISHED */
    uint32_t completion_tokens;       /* FINISHED */
    const char *error;                /* ERROR: NUL-terminated */
};

struct relay_out {
    uint32_t n;
    struct relay_event ev[RELAY_MAX_EVENTS];
    bool send_cancel; /* send CANCEL for this job now (a stop string matched, or bad data) */
    bool job_over;    /* this was the job's final record: its worker slot is free */
};

struct relay;

/* A relay for one request. stops: n_stop strings of stop_len[i] bytes (n_stop may be 0).
 * Returns 0 with *out, or -ENOMEM, or stop_add()'s -EINVAL/-E2BIG/-ENOSPC for a stop string
 * the request should be refused for (HTTP 400). tok must outlive the relay. */
int relay_create(const struct tokenizer *tok, const char *const *stops, const size_t *stop_len,
                 size_t n_stop, struct relay **out);

void relay_destroy(struct relay *r);

/* Write control tokens' text too (before the first record): a reply read for tool calls
 * and reasoning needs the markers some models have as control tokens (<|python_tag|>,
 * [TOOL_CALLS], ...). End-of-generation tokens end the job before they reach the relay. */
void relay_render_special(struct relay *r);

/* Feed one worker record of this relay's job. Fills out with the events to send, in order,
 * and what to tell the worker. After a stop-string match the job's further TOKEN records are
 * ignored until its final record (DONE or FAILED), which gives job_over and no events.
 * Returns 0, or -EPROTO for a record that breaks the protocol's order (a TOKEN before
 * STARTED, anything after the final record, a type the worker never sends).
 *
 * Buffering: the events of one request carry at most as many tokens as the worker sends
 * (max_new_tokens), so a front that queues events for a slow client holds at most max_tokens
 * tokens' worth of text per request and never needs to stop reading the ring. */
int relay_feed(struct relay *r, const struct proto_msg *m, struct relay_out *out);

/* The client left: no more events will be wanted. Returns whether the front should send
 * CANCEL now (the job is still running and was not told to stop before). The job's final
 * record must still be fed (for job_over). */
bool relay_cancel(struct relay *r);

/* Whether the client has had its last event (FINISHED or ERROR), or was cancelled. */
bool relay_finished(const struct relay *r);

/* Tokens received so far (the completion_tokens of a stop-string finish). */
uint32_t relay_tokens(const struct relay *r);

#endif
