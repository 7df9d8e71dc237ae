/* msgpack records <-> C structs, with no I/O. Every record is a msgpack array
 * [WIRE_VERSION, type, req_id, ...fields]. The decoder checks the count, the type and range
 * of every field and each length, and returns -EPROTO for anything that does not fit. */
#ifndef PROTO_H
#define PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "wire.h"

struct proto_logit_bias {
    uint32_t token;
    float bias;
};

/* A request's sampling parameters; the worker's sampler reads them. */
struct proto_sampling {
    float temperature;        /* 0: greedy */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    float repetition_penalty; /* 1: off */
    int32_t top_k;            /* 0: off */
    uint64_t seed;
    uint32_t top_logprobs;    /* alternatives per token, <= WIRE_MAX_TOP_LOGPROBS */
    bool logprobs;            /* send the chosen token's logprob with each TOKEN */
    bool ignore_eos;          /* for benchmarks: EOS is sampled like any token */
    bool no_cache;            /* cache_prompt: false: compute the whole prompt, reuse nothing */
    uint32_t n_logit_bias;    /* <= WIRE_MAX_LOGIT_BIAS */
    struct proto_logit_bias logit_bias[WIRE_MAX_LOGIT_BIAS];
};

/* [v, JOB, req_id, prompt[u32...], max_new_tokens, sampling[...], grammar, request_id] */
struct proto_job {
    uint32_t n_prompt;
    uint32_t max_new_tokens;
    uint32_t *prompt; /* decode: the buffer passed to the decoder; encode: n_prompt ids */
    uint32_t prompt_cap; /* decode: set from the decoder's argument; encode: unused */
    struct proto_sampling sampling;
    /* GBNF text constraining the output (grammar.h), grammar_len <= WIRE_MAX_GRAMMAR bytes,
     * no NUL; grammar_len 0: none. Decoded, it points into the record's bytes: proto_decode's
     * buf, or a proto_decoder's private copy (valid until its next decode). The receiver
     * compiles it, and so validates it, before use. */
    const char *grammar;
    uint32_t grammar_len;
    /* The HTTP request's id (X-Request-Id), for the worker's log lines about the job: at most
     * WIRE_MAX_REQUEST_ID bytes of [A-Za-z0-9._:-], "" for none; anything else is a malformed
     * record. Decoded, a copy. */
    char request_id[WIRE_MAX_REQUEST_ID + 1];
};

struct proto_top {
    uint32_t token;
    float logprob;
};

/* [v, TOKEN, req_id, token, logprob, [[id, logprob]...]] */
struct proto_token {
    uint32_t token;
    float logprob;  /* of the chosen token; 0 when not asked for */
    uint32_t n_top; /* <= WIRE_MAX_TOP_LOGPROBS */
    struct proto_top top[WIRE_MAX_TOP_LOGPROBS];
};

/* One decoded or to-be-encoded record. */
struct proto_msg {
    enum msg_type type;
    uint64_t req_id;
    union {
        struct proto_job job;        /* MSG_TYPE_JOB */
        uint32_t prompt_tokens;      /* MSG_TYPE_STARTED */
        struct proto_token token;    /* MSG_TYPE_TOKEN */
        struct {                     /* MSG_TYPE_DONE */
            enum finish_reason reason;
            uint32_t completion_tokens;
        } done;
        char error[WIRE_MAX_ERROR + 1]; /* MSG_TYPE_FAILED, NUL-terminated */
        struct {                        /* MSG_TYPE_CACHE */
            bool reset; /* events were lost: forget every key first */
            uint32_t n; /* <= WIRE_MAX_CACHE_EVENTS */
            /* block keys (kv_hash.h, odd) in order: k itself indexed, k - 1 evicted */
            uint64_t ev[WIRE_MAX_CACHE_EVENTS];
        } cache;
        /* MSG_TYPE_CANCEL has no fields */
    } u;
    uint32_t cached_tokens; /* MSG_TYPE_STARTED: of prompt_tokens, reused from the KV cache */
};

/* Encode msg into buf. Returns the encoded length, -ENOSPC if it does not fit in cap, or
 * -EINVAL for a msg that breaks the limits of wire.h. */
int proto_encode(const struct proto_msg *msg, void *buf, size_t cap);

/* Decode one record of len bytes. A JOB's prompt is copied into prompt, which holds
 * prompt_cap tokens (a caller that expects no JOB passes NULL, 0, and a JOB is rejected):
 * nothing is read from out before the call, so a stale union cannot steer the write.
 * Returns 0, or -EPROTO for a record that is malformed, of another version, oversize or with
 * trailing bytes; then out->type and out->req_id are the record's when its [v, type, req_id]
 * header is well-formed, else out->type is 0. Nothing in out points into buf afterwards but
 * a JOB's grammar (see struct proto_job).
 * Reads buf more than once and allocates a zone per call: for bytes no other process can
 * write, off the hot path. Consumers of a ring use a proto_decoder. */
int proto_decode(const void *buf, size_t len, struct proto_msg *out, uint32_t *prompt,
                 uint32_t prompt_cap);

/* One consumer's decoding state, allocated once: a private WIRE_MAX_MSG copy of the record
 * and a msgpack zone big enough for the largest valid record, cleared per record. */
struct proto_decoder;

/* Returns a decoder, or NULL when out of memory. */
struct proto_decoder *proto_decoder_create(void);
void proto_decoder_destroy(struct proto_decoder *d);

/* As proto_decode(), but rec may be in shared memory that the peer can rewrite meanwhile:
 * its len bytes are copied once into d's private buffer and only the copy is read (no double
 * fetch). Allocates nothing after the first call. One thread at a time per decoder. */
int proto_decoder_decode(struct proto_decoder *d, const void *rec, size_t len,
                         struct proto_msg *out, uint32_t *prompt, uint32_t prompt_cap);

/* Whether s (len bytes) is a request id a JOB may carry (see struct proto_job). */
bool proto_request_id_valid(const char *s, size_t len);

/* Default sampling: greedy, every filter off. */
void proto_sampling_init(struct proto_sampling *s);

#endif
