/* msgpack records <-> the structs of proto.h, with no I/O. The encoder writes into the
 * caller's buffer (a packer whose write callback refuses to overflow: -ENOSPC); the decoder
 * unpacks into a zone (per call, or a proto_decoder's, kept across records) and checks every field's count, type and range before
 * copying it out (-EPROTO), so nothing decoded points into the input.
 *
 * Layouts (every record starts [WIRE_VERSION, type, req_id]):
 *   JOB      [v, 1, id, [tok...], max_new_tokens, sampling, "grammar" (may be empty),
 *            "request id" (may be empty)]
 *            sampling = [temperature, top_p, min_p, presence_penalty, frequency_penalty,
 *                        repetition_penalty, top_k, seed, top_logprobs, logprobs, ignore_eos,
 *                        [[token, bias]...], no_cache]
 *   CANCEL   [v, 2, id]
 *   STARTED  [v, 3, id, prompt_tokens, cached_tokens (of them, reused from the KV cache)]
 *   TOKEN    [v, 4, id, token, logprob, [[token, logprob]...]]
 *   DONE     [v, 5, id, reason, completion_tokens]
 *   FAILED   [v, 6, id, "error"]
 *   PAUSE    [v, 7, id]
 *   RESUME   [v, 8, id]
 *   CACHE    [v, 9, 0, reset, [event...]]  (event: a block key indexed, or the key - 1 evicted)
 * Floats go out as float32 and come in as float32, float64 or integers. */
#include "proto.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#define PROTO_N_SAMPLING 13

/* Fields of each record type, header included. */
static uint32_t proto_count(enum msg_type type)
{
    switch (type) {
    case MSG_TYPE_JOB:
        return 8;
    case MSG_TYPE_CANCEL:
    case MSG_TYPE_PAUSE:
    case MSG_TYPE_RESUME:
        return 3;
    case MSG_TYPE_STARTED:
        return 5;
    case MSG_TYPE_TOKEN:
        return 6;
    case MSG_TYPE_DONE:
        return 5;
    case MSG_TYPE_FAILED:
        return 4;
    case MSG_TYPE_CACHE:
        return 5;
    }
    return 0;
}

bool proto_request_id_valid(const char *s, size_t len)
{
    if (len > WIRE_MAX_REQUEST_ID || (len && !s))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':'))
            return false;
    }
    return true;
}

void proto_sampling_init(struct proto_sampling *s)
{
    memset(s, 0, sizeof(*s));
    s->temperature = 0.0f;
    s->top_p = 1.0f;
    s->min_p = 0.0f;
    s->repetition_penalty = 1.0f;
}

/* Limits both sides hold a sampling block to; the decoder's view of what a sampler may be
 * handed. Penalties are only required to be finite: their ranges are the front's call. */
static bool proto_sampling_valid(const struct proto_sampling *s)
{
    return isfinite(s->temperature) && s->temperature >= 0.0f && isfinite(s->top_p) &&
           s->top_p >= 0.0f && s->top_p <= 1.0f && isfinite(s->min_p) && s->min_p >= 0.0f &&
           s->min_p <= 1.0f && isfinite(s->presence_penalty) && isfinite(s->frequency_penalty) &&
           isfinite(s->repetition_penalty) && s->repetition_penalty > 0.0f &&
           s->top_logprobs <= WIRE_MAX_TOP_LOGPROBS && s->n_logit_bias <= WIRE_MAX_LOGIT_BIAS;
}

/* ---- encoding ------------------------------------------------------------------------- */

struct proto_wbuf {
    unsigned char *p;
    size_t len, cap;
};

/* The packer's sink: refuses (and so fails the whole encode) rather than overflow. */
static int proto_wbuf_write(void *data, const char *buf, size_t len)
{
    struct proto_wbuf *w = data;

    if (len > w->cap - w->len)
        return -1;
    memcpy(w->p + w->len, buf, len);
    w->len += len;
    return 0;
}

/* Each pack call returns the sink's result; `ret |=` collects a failure across a sequence
 * (the sink keeps refusing once full, so nothing after a failure lands in the buffer). */
static int proto_pack_sampling(msgpack_packer *pk, const struct proto_sampling *s)
{
    int ret = 0;

    ret |= msgpack_pack_array(pk, PROTO_N_SAMPLING);
    ret |= msgpack_pack_float(pk, s->temperature);
    ret |= msgpack_pack_float(pk, s->top_p);
    ret |= msgpack_pack_float(pk, s->min_p);
    ret |= msgpack_pack_float(pk, s->presence_penalty);
    ret |= msgpack_pack_float(pk, s->frequency_penalty);
    ret |= msgpack_pack_float(pk, s->repetition_penalty);
    ret |= msgpack_pack_int32(pk, s->top_k);
    ret |= msgpack_pack_uint64(pk, s->seed);
    ret |= msgpack_pack_uint32(pk, s->top_logprobs);
    ret |= s->logprobs ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    ret |= s->ignore_eos ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    ret |= msgpack_pack_array(pk, s->n_logit_bias);
    for (uint32_t i = 0; i < s->n_logit_bias && ret == 0; i++) {
        ret |= msgpack_pack_array(pk, 2);
        ret |= msgpack_pack_uint32(pk, s->logit_bias[i].token);
        ret |= msgpack_pack_float(pk, s->logit_bias[i].bias);
    }
    ret |= s->no_cache ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    return ret;
}

static int proto_pack_body(msgpack_packer *pk, const struct proto_msg *msg)
{
    int ret = 0;

    switch (msg->type) {
    case MSG_TYPE_JOB: {
        const struct proto_job *j = &msg->u.job;
        ret |= msgpack_pack_array(pk, j->n_prompt);
        for (uint32_t i = 0; i < j->n_prompt && ret == 0; i++)
            ret |= msgpack_pack_uint32(pk, j->prompt[i]);
        ret |= msgpack_pack_uint32(pk, j->max_new_tokens);
        ret |= proto_pack_sampling(pk, &j->sampling);
        ret |= msgpack_pack_str(pk, j->grammar_len);
        if (j->grammar_len)
            ret |= msgpack_pack_str_body(pk, j->grammar, j->grammar_len);
        size_t idl = strlen(j->request_id); /* bounded: checked by proto_encode_valid() */
        ret |= msgpack_pack_str(pk, idl);
        if (idl)
            ret |= msgpack_pack_str_body(pk, j->request_id, idl);
        break;
    }
    case MSG_TYPE_CANCEL:
    case MSG_TYPE_PAUSE:
    case MSG_TYPE_RESUME:
        break;
    case MSG_TYPE_STARTED:
        ret |= msgpack_pack_uint32(pk, msg->u.prompt_tokens);
        ret |= msgpack_pack_uint32(pk, msg->cached_tokens);
        break;
    case MSG_TYPE_TOKEN: {
        const struct proto_token *t = &msg->u.token;
        ret |= msgpack_pack_uint32(pk, t->token);
        ret |= msgpack_pack_float(pk, t->logprob);
        ret |= msgpack_pack_array(pk, t->n_top);
        for (uint32_t i = 0; i < t->n_top && ret == 0; i++) {
            ret |= msgpack_pack_array(pk, 2);
            ret |= msgpack_pack_uint32(pk, t->top[i].token);
            ret |= msgpack_pack_float(pk, t->top[i].logprob);
        }
        break;
    }
    case MSG_TYPE_DONE:
        ret |= msgpack_pack_uint32(pk, (uint32_t)msg->u.done.reason);
        ret |= msgpack_pack_uint32(pk, msg->u.done.completion_tokens);
        break;
    case MSG_TYPE_FAILED: {
        size_t n = strlen(msg->u.error); /* bounded: checked by proto_encode_valid() */
        ret |= msgpack_pack_str(pk, n);
        ret |= msgpack_pack_str_body(pk, msg->u.error, n);
        break;
    }
    case MSG_TYPE_CACHE:
        ret |= msg->u.cache.reset ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
        ret |= msgpack_pack_array(pk, msg->u.cache.n);
        for (uint32_t i = 0; i < msg->u.cache.n && ret == 0; i++)
            ret |= msgpack_pack_uint64(pk, msg->u.cache.ev[i]);
        break;
    }
    return ret;
}

/* What the decoder would reject is refused at the source, where the bug is. */
static bool proto_encode_valid(const struct proto_msg *msg)
{
    switch (msg->type) {
    case MSG_TYPE_JOB:
        if (msg->u.job.sampling.n_logit_bias > WIRE_MAX_LOGIT_BIAS)
            return false;
        /* The decoder refuses a non-finite bias, so the worker would drop the whole JOB:
         * refuse it here, where the request can still get a 400. */
        for (uint32_t i = 0; i < msg->u.job.sampling.n_logit_bias; i++)
            if (!isfinite(msg->u.job.sampling.logit_bias[i].bias))
                return false;
        if (msg->u.job.grammar_len > WIRE_MAX_GRAMMAR ||
            (msg->u.job.grammar_len && (!msg->u.job.grammar ||
                                        memchr(msg->u.job.grammar, '\0', msg->u.job.grammar_len))))
            return false;
        if (!proto_request_id_valid(msg->u.job.request_id,
                                    strnlen(msg->u.job.request_id, WIRE_MAX_REQUEST_ID + 1)))
            return false;
        return msg->u.job.n_prompt <= WIRE_MAX_PROMPT &&
               (msg->u.job.n_prompt == 0 || msg->u.job.prompt != NULL) &&
               proto_sampling_valid(&msg->u.job.sampling);
    case MSG_TYPE_CANCEL:
    case MSG_TYPE_PAUSE:
    case MSG_TYPE_RESUME:
    case MSG_TYPE_STARTED:
        return true;
    case MSG_TYPE_TOKEN:
        return msg->u.token.n_top <= WIRE_MAX_TOP_LOGPROBS && !isnan(msg->u.token.logprob);
    case MSG_TYPE_DONE:
        return msg->u.done.reason == FINISH_REASON_STOP ||
               msg->u.done.reason == FINISH_REASON_LENGTH ||
               msg->u.done.reason == FINISH_REASON_CANCELLED;
    case MSG_TYPE_FAILED:
        return memchr(msg->u.error, '\0', WIRE_MAX_ERROR + 1) != NULL;
    case MSG_TYPE_CACHE:
        return msg->u.cache.n <= WIRE_MAX_CACHE_EVENTS;
    }
    return false;
}

int proto_encode(const struct proto_msg *msg, void *buf, size_t cap)
{
    struct proto_wbuf w = {.p = buf, .len = 0, .cap = cap};
    msgpack_packer pk;
    int ret = 0;

    if (!proto_encode_valid(msg))
        return -EINVAL;
    if (msg->type == MSG_TYPE_TOKEN) {
        for (uint32_t i = 0; i < msg->u.token.n_top; i++)
            if (isnan(msg->u.token.top[i].logprob))
                return -EINVAL;
    }
    msgpack_packer_init(&pk, &w, proto_wbuf_write);
    ret |= msgpack_pack_array(&pk, proto_count(msg->type));
    ret |= msgpack_pack_uint32(&pk, WIRE_VERSION);
    ret |= msgpack_pack_uint32(&pk, (uint32_t)msg->type);
    ret |= msgpack_pack_uint64(&pk, msg->req_id);
    if (ret == 0)
        ret = proto_pack_body(&pk, msg);
    if (ret != 0)
        return -ENOSPC;
    if (w.len > WIRE_MAX_MSG)
        return -EINVAL; /* cannot happen within wire.h's limits; the decoder would refuse it */
    return (int)w.len;
}

/* ---- decoding ------------------------------------------------------------------------- */

static bool proto_get_u64(const msgpack_object *o, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *v = o->via.u64;
    return true;
}

static bool proto_get_u32(const msgpack_object *o, uint32_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > UINT32_MAX)
        return false;
    *v = (uint32_t)o->via.u64;
    return true;
}

static bool proto_get_i32(const msgpack_object *o, int32_t *v)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT32_MAX) {
        *v = (int32_t)o->via.u64;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= INT32_MIN) {
        *v = (int32_t)o->via.i64;
        return true;
    }
    return false;
}

/* A float32 or float64 (or, for convenience, an integer), never NaN; -inf only where
 * allow_neg_inf (a log-probability of an impossible token); no other infinity. */
static bool proto_get_float(const msgpack_object *o, float *v, bool allow_neg_inf)
{
    double d;

    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        d = o->via.f64;
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        d = (double)o->via.u64;
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        d = (double)o->via.i64;
        break;
    default:
        return false;
    }
    *v = (float)d; /* out of float's range becomes an infinity, refused below */
    if (isnan(*v))
        return false;
    if (isinf(*v) && !(allow_neg_inf && *v < 0))
        return false;
    return true;
}

static bool proto_get_bool(const msgpack_object *o, bool *v)
{
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return false;
    *v = o->via.boolean;
    return true;
}

/* The elements of an array of exactly n elements, or NULL. */
static const msgpack_object *proto_get_array(const msgpack_object *o, uint32_t n)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
        return NULL;
    return o->via.array.ptr;
}

/* An array of [u32, float] pairs, at most max of them. */
static bool proto_get_pairs(const msgpack_object *o, uint32_t max, uint32_t *n, uint32_t *tokens,
                            size_t tok_stride, float *values, size_t val_stride,
                            bool allow_neg_inf)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > max)
        return false;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *p = proto_get_array(&o->via.array.ptr[i], 2);
        uint32_t *tok = (uint32_t *)(void *)((char *)tokens + i * tok_stride);
        float *val = (float *)(void *)((char *)values + i * val_stride);
        if (p == NULL || !proto_get_u32(&p[0], tok) || !proto_get_float(&p[1], val, allow_neg_inf))
            return false;
    }
    *n = o->via.array.size;
    return true;
}

static bool proto_get_sampling(const msgpack_object *o, struct proto_sampling *s)
{
    const msgpack_object *f = proto_get_array(o, PROTO_N_SAMPLING);

    if (f == NULL)
        return false;
    if (!proto_get_float(&f[0], &s->temperature, false) ||
        !proto_get_float(&f[1], &s->top_p, false) || !proto_get_float(&f[2], &s->min_p, false) ||
        !proto_get_float(&f[3], &s->presence_penalty, false) ||
        !proto_get_float(&f[4], &s->frequency_penalty, false) ||
        !proto_get_float(&f[5], &s->repetition_penalty, false) ||
        !proto_get_i32(&f[6], &s->top_k) || !proto_get_u64(&f[7], &s->seed) ||
        !proto_get_u32(&f[8], &s->top_logprobs) || !proto_get_bool(&f[9], &s->logprobs) ||
        !proto_get_bool(&f[10], &s->ignore_eos))
        return false;
    if (!proto_get_pairs(&f[11], WIRE_MAX_LOGIT_BIAS, &s->n_logit_bias, &s->logit_bias[0].token,
                         sizeof(s->logit_bias[0]), &s->logit_bias[0].bias,
                         sizeof(s->logit_bias[0]), false))
        return false;
    if (!proto_get_bool(&f[12], &s->no_cache))
        return false;
    return proto_sampling_valid(s);
}

/* f: the fields after [v, type, id]. prompt/cap: the caller's buffer, read before out's union
 * is written. */
static bool proto_get_job(const msgpack_object *f, uint32_t *prompt, uint32_t cap,
                          struct proto_job *j)
{
    const msgpack_object *toks = &f[0];
    uint32_t n;

    if (toks->type != MSGPACK_OBJECT_ARRAY)
        return false;
    n = toks->via.array.size;
    if (n > WIRE_MAX_PROMPT || n > cap || (n > 0 && prompt == NULL))
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (!proto_get_u32(&toks->via.array.ptr[i], &prompt[i]))
            return false;
    j->prompt = prompt;
    j->prompt_cap = cap;
    j->n_prompt = n;
    if (!proto_get_u32(&f[1], &j->max_new_tokens))
        return false;
    if (f[3].type != MSGPACK_OBJECT_STR || f[3].via.str.size > WIRE_MAX_GRAMMAR)
        return false;
    j->grammar_len = f[3].via.str.size;
    j->grammar = j->grammar_len ? f[3].via.str.ptr : "";
    if (j->grammar_len && memchr(j->grammar, '\0', j->grammar_len))
        return false;
    if (f[4].type != MSGPACK_OBJECT_STR ||
        !proto_request_id_valid(f[4].via.str.ptr, f[4].via.str.size))
        return false;
    if (f[4].via.str.size) /* msgpack-c gives ptr NULL for "" */
        memcpy(j->request_id, f[4].via.str.ptr, f[4].via.str.size);
    j->request_id[f[4].via.str.size] = '\0';
    return proto_get_sampling(&f[2], &j->sampling);
}

static bool proto_get_error(const msgpack_object *o, char *out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size > WIRE_MAX_ERROR)
        return false;
    out[o->via.str.size] = '\0';
    if (o->via.str.size == 0)
        return true; /* msgpack-c gives ptr NULL for "" */
    /* An embedded NUL would silently cut the message short: refuse it. */
    if (memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL)
        return false;
    memcpy(out, o->via.str.ptr, o->via.str.size);
    return true;
}

static bool proto_get_msg(const msgpack_object *root, struct proto_msg *out, uint32_t *prompt,
                          uint32_t cap)
{
    const msgpack_object *f;
    uint32_t version, type;

    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size < 3)
        return false;
    f = root->via.array.ptr;
    if (!proto_get_u32(&f[0], &version) || version != WIRE_VERSION)
        return false;
    if (!proto_get_u32(&f[1], &type) || type < MSG_TYPE_JOB || type > MSG_TYPE_LAST)
        return false;
    if (root->via.array.size != proto_count((enum msg_type)type))
        return false;
    if (!proto_get_u64(&f[2], &out->req_id))
        return false;
    out->type = (enum msg_type)type;
    out->cached_tokens = 0;
    f += 3;
    switch (out->type) {
    case MSG_TYPE_JOB:
        return proto_get_job(f, prompt, cap, &out->u.job);
    case MSG_TYPE_CANCEL:
    case MSG_TYPE_PAUSE:
    case MSG_TYPE_RESUME:
        return true;
    case MSG_TYPE_STARTED:
        return proto_get_u32(&f[0], &out->u.prompt_tokens) &&
               proto_get_u32(&f[1], &out->cached_tokens) &&
               out->cached_tokens <= out->u.prompt_tokens;
    case MSG_TYPE_TOKEN: {
        struct proto_token *t = &out->u.token;
        return proto_get_u32(&f[0], &t->token) && proto_get_float(&f[1], &t->logprob, true) &&
               proto_get_pairs(&f[2], WIRE_MAX_TOP_LOGPROBS, &t->n_top, &t->top[0].token,
                               sizeof(t->top[0]), &t->top[0].logprob, sizeof(t->top[0]), true);
    }
    case MSG_TYPE_DONE: {
        uint32_t reason;
        if (!proto_get_u32(&f[0], &reason) || reason > FINISH_REASON_CANCELLED)
            return false;
        out->u.done.reason = (enum finish_reason)reason;
        return proto_get_u32(&f[1], &out->u.done.completion_tokens);
    }
    case MSG_TYPE_FAILED:
        return proto_get_error(&f[0], out->u.error);
    case MSG_TYPE_CACHE:
        if (out->req_id != 0 || !proto_get_bool(&f[0], &out->u.cache.reset) ||
            f[1].type != MSGPACK_OBJECT_ARRAY || f[1].via.array.size > WIRE_MAX_CACHE_EVENTS)
            return false;
        out->u.cache.n = f[1].via.array.size;
        for (uint32_t i = 0; i < out->u.cache.n; i++)
            if (!proto_get_u64(&f[1].via.array.ptr[i], &out->u.cache.ev[i]) ||
                out->u.cache.ev[i] == 0)
                return false;
        return true;
    }
    return false;
}

/* The most objects a valid record holds: a JOB's header and fields, its prompt tokens and
 * its logit_bias pairs (each an array of two). */
#define PROTO_MAX_OBJECTS (WIRE_MAX_PROMPT + 3 * WIRE_MAX_LOGIT_BIAS + 64)

/* Read a big-endian length of n bytes at p. */
static uint64_t proto_be(const unsigned char *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* Walk the msgpack headers before msgpack_unpack() sees the bytes: msgpack-c allocates an
 * array's storage from the count it declares, so a 5-byte "array of 4 billion" would ask the
 * zone for ~100 GB. Every declared element needs at least one byte, so the objects still owed
 * may never exceed the bytes left, and a whole record may not hold more objects than the
 * largest valid one. Also rejects truncation and trailing bytes early. Returns true when the
 * bytes are one well-framed msgpack object within those bounds. */
static bool proto_prescan(const unsigned char *p, size_t len)
{
    uint64_t owed = 1, total = 1, n;
    size_t i = 0;

    while (owed > 0) {
        size_t left = len - i;
        unsigned c;
        int hdr;  /* header bytes after the type byte */
        int kind; /* 0 scalar of hdr bytes; 1 str/bin (n bytes follow); 2 array; 3 map; 4 ext */

        if (left == 0 || owed > left)
            return false;
        c = p[i++];
        owed--;
        left--;
        if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)
            continue; /* fixint, nil, bool */
        hdr = 0;
        kind = 0;
        n = 0;
        if ((c & 0xf0) == 0x90) {
            kind = 2, n = c & 0x0f;
        } else if ((c & 0xf0) == 0x80) {
            kind = 3, n = c & 0x0f;
        } else if ((c & 0xe0) == 0xa0) {
            kind = 1, n = c & 0x1f;
        } else {
            switch (c) {
            case 0xcc: case 0xd0: hdr = 1; break;
            case 0xcd: case 0xd1: hdr = 2; break;
            case 0xca: case 0xce: case 0xd2: hdr = 4; break;
            case 0xcb: case 0xcf: case 0xd3: hdr = 8; break;
            case 0xd4: hdr = 2; break;  /* fixext 1: type + 1 */
            case 0xd5: hdr = 3; break;
            case 0xd6: hdr = 5; break;
            case 0xd7: hdr = 9; break;
            case 0xd8: hdr = 17; break;
            case 0xc4: case 0xd9: kind = 1, hdr = 1; break;
            case 0xc5: case 0xda: kind = 1, hdr = 2; break;
            case 0xc6: case 0xdb: kind = 1, hdr = 4; break;
            case 0xc7: kind = 4, hdr = 1; break;
            case 0xc8: kind = 4, hdr = 2; break;
            case 0xc9: kind = 4, hdr = 4; break;
            case 0xdc: kind = 2, hdr = 2; break;
            case 0xdd: kind = 2, hdr = 4; break;
            case 0xde: kind = 3, hdr = 2; break;
            case 0xdf: kind = 3, hdr = 4; break;
            default: return false; /* 0xc1: never used */
            }
        }
        if ((size_t)hdr > left)
            return false;
        if (kind != 0 && hdr > 0) {
            n = proto_be(p + i, hdr);
            if (kind == 4)
                n += 1; /* the ext type byte */
        }
        i += (size_t)hdr;
        left -= (size_t)hdr;
        switch (kind) {
        case 1:
        case 4:
            if (n > left)
                return false;
            i += (size_t)n;
            break;
        case 2:
        case 3:
            if (kind == 3)
                n *= 2;
            owed += n;
            total += n;
            if (owed > left || total > PROTO_MAX_OBJECTS)
                return false;
            break;
        }
    }
    return i == len;
}

/* A msgpack unsigned integer at p[*i]: positive fixint or uint 8/16/32/64. */
static bool proto_raw_uint(const unsigned char *p, size_t len, size_t *i, uint64_t *v)
{
    static const int widths[4] = {1, 2, 4, 8};
    unsigned c;
    int n;

    if (*i >= len)
        return false;
    c = p[(*i)++];
    if (c <= 0x7f) {
        *v = c;
        return true;
    }
    if (c < 0xcc || c > 0xcf)
        return false;
    n = widths[c - 0xcc];
    if ((size_t)n > len - *i)
        return false;
    *v = proto_be(p + *i, n);
    *i += (size_t)n;
    return true;
}

/* The [v, type, req_id] header read straight from the bytes, so that a record whose body is
 * malformed can still be answered (the worker fails that job rather than losing it). */
static bool proto_raw_header(const unsigned char *p, size_t len, enum msg_type *type,
                             uint64_t *req_id)
{
    uint64_t count, version, t;
    size_t i = 1;

    if (len == 0)
        return false;
    if ((p[0] & 0xf0) == 0x90) {
        count = p[0] & 0x0f;
    } else if (p[0] == 0xdc || p[0] == 0xdd) {
        int n = p[0] == 0xdc ? 2 : 4;

        if ((size_t)n > len - 1)
            return false;
        count = proto_be(p + 1, n);
        i += (size_t)n;
    } else {
        return false;
    }
    if (count < 3 || !proto_raw_uint(p, len, &i, &version) || version != WIRE_VERSION ||
        !proto_raw_uint(p, len, &i, &t) || t < MSG_TYPE_JOB || t > MSG_TYPE_LAST ||
        !proto_raw_uint(p, len, &i, req_id))
        return false;
    *type = (enum msg_type)t;
    return true;
}

/* Decode buf with zone (empty on entry; the caller clears or destroys it). */
static int proto_decode_in(msgpack_zone *zone, const unsigned char *buf, size_t len,
                           struct proto_msg *out, uint32_t *prompt, uint32_t prompt_cap)
{
    msgpack_object root;
    enum msg_type type = (enum msg_type)0;
    uint64_t req_id = 0;
    size_t off = 0;

    if (buf == NULL || len == 0 || len > WIRE_MAX_MSG)
        goto fail;
    /* Read first, so that a record whose body is malformed can still be answered. */
    if (!proto_raw_header(buf, len, &type, &req_id)) {
        type = (enum msg_type)0;
        req_id = 0;
    }
    /* SUCCESS only: EXTRA_BYTES (trailing bytes), CONTINUE (truncated) and the errors are all
     * malformed records. */
    if (proto_prescan(buf, len) &&
        msgpack_unpack((const char *)buf, len, &off, zone, &root) == MSGPACK_UNPACK_SUCCESS &&
        off == len && proto_get_msg(&root, out, prompt, prompt_cap))
        return 0;
fail:
    out->type = type;
    out->req_id = req_id;
    return -EPROTO;
}

int proto_decode(const void *buf, size_t len, struct proto_msg *out, uint32_t *prompt,
                 uint32_t prompt_cap)
{
    msgpack_zone zone;
    int ret;

    /* A zone per call: freed below on every path, so a decode leaks nothing and shares no
     * state. proto_prescan() bounds what the zone can grow to. */
    if (!msgpack_zone_init(&zone, 4096))
        return -ENOMEM;
    ret = proto_decode_in(&zone, buf, len, out, prompt, prompt_cap);
    msgpack_zone_destroy(&zone);
    return ret;
}

/* The zone's first chunk holds the largest valid record's objects (msgpack_object each, plus
 * alignment per array), so msgpack_zone_clear(), which keeps that chunk, leaves nothing to
 * allocate for the next record. */
#define PROTO_ZONE_CHUNK ((size_t)PROTO_MAX_OBJECTS * (sizeof(msgpack_object) + 8))

struct proto_decoder {
    msgpack_zone zone;
    unsigned char *copy; /* (WIRE_MAX_MSG) the record being decoded, private */
};

struct proto_decoder *proto_decoder_create(void)
{
    struct proto_decoder *d = calloc(1, sizeof(*d));

    if (d == NULL)
        return NULL;
    if ((d->copy = malloc(WIRE_MAX_MSG)) == NULL)
        goto fail;
    if (!msgpack_zone_init(&d->zone, PROTO_ZONE_CHUNK))
        goto fail;
    return d;
fail:
    free(d->copy);
    free(d);
    return NULL;
}

void proto_decoder_destroy(struct proto_decoder *d)
{
    if (d == NULL)
        return;
    msgpack_zone_destroy(&d->zone);
    free(d->copy);
    free(d);
}

int proto_decoder_decode(struct proto_decoder *d, const void *rec, size_t len,
                         struct proto_msg *out, uint32_t *prompt, uint32_t prompt_cap)
{
    int ret;

    out->type = (enum msg_type)0;
    out->req_id = 0;
    if (rec == NULL || len == 0 || len > WIRE_MAX_MSG)
        return -EPROTO;
    /* One read of the shared bytes: the prescan and msgpack_unpack() below then see the same
     * record, so the peer cannot grow an array count between the check and the allocation. */
    memcpy(d->copy, rec, len);
    ret = proto_decode_in(&d->zone, d->copy, len, out, prompt, prompt_cap);
    msgpack_zone_clear(&d->zone);
    return ret;
}
