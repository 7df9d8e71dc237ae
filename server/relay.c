/* The text of one job (relay.h): tokens -> detok -> stop strings -> events. It keeps the
 * tokens not yet reported and the text buffers; it does no I/O and allocates only in
 * relay_create(). */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detok.h"
#include "tokenizer.h"

struct relay {
    struct detok detok;
    struct stop stop;
    uint32_t n_pending;
    struct relay_token pending[RELAY_MAX_PENDING];
    /* sized for the tokenizer's longest piece (detok_out_max()); text adds what the stop
     * strings may hold back */
    char *piece;
    size_t piece_cap;
    char *text;
    size_t text_cap;
    char error[128]; /* an ERROR event's message */
};

int relay_create(const struct tokenizer *tok, const char *const *stops, const size_t *stop_len,
                 size_t n_stop, struct relay **out)
{
    int err;
    struct relay *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r)
        return -ENOMEM;
    detok_init(&r->detok, tok);
    stop_init(&r->stop);
    r->piece_cap = detok_out_max(tok);
    r->text_cap = r->piece_cap + 2 * STOP_HOLD_MAX;
    err = -ENOMEM;
    if (!(r->piece = malloc(r->piece_cap)) || !(r->text = malloc(r->text_cap)))
        goto fail;
    for (size_t i = 0; i < n_stop; i++)
        if ((err = stop_add(&r->stop, stops[i], stop_len[i])) < 0)
            goto fail;
    *out = r;
    return 0;
fail:
    relay_destroy(r);
    return err;
}

void relay_destroy(struct relay *r)
{
    if (!r)
        return;
    free(r->piece);
    free(r->text);
    free(r);
}

void relay_render_special(struct relay *r)
{
    r->detok.special = true;
}

static struct relay_event *event_add(struct relay_out *out, enum relay_event_type type)
{
    struct relay_event *ev = &out->ev[out->n++];
    memset(ev, 0, sizeof *ev);
    ev->type = type;
    return ev;
}

/* A TEXT event for len bytes of r->text and the pending tokens, when there is either. */
static void emit_text(struct relay *r, size_t len, struct relay_out *out)
{
    if (len == 0 && r->n_pending == 0)
        return;
    struct relay_event *ev = event_add(out, RELAY_EVENT_TEXT);
    ev->text = r->text;
    ev->len = len;
    ev->n_tokens = r->n_pending;
    ev->tokens = r->pending;
    /* The array is reused after the caller's next call; the event stays valid until then. */
    r->n_pending = 0;
}

static void emit_finished(enum relay_finish reason, struct relay_out *out)
{
    event_add(out, RELAY_EVENT_FINISHED)->reason = reason;
}

/* Run detok output through the stop strings into r->text. Returns the released length or
 * -errno; *matched says a stop string ended the reply. */
static int relay_text(struct relay *r, size_t len, bool *matched)
{
    return stop_push(&r->stop, r->piece, len, r->text, r->text_cap, matched);
}

void relay_token(struct relay *r, const struct proto_token *t, struct relay_out *out)
{
    out->n = 0;
    struct relay_token *rt = &r->pending[r->n_pending++];
    rt->id = t->token;
    rt->logprob = t->logprob;
    rt->n_top = t->n_top <= WIRE_MAX_TOP_LOGPROBS ? t->n_top : WIRE_MAX_TOP_LOGPROBS;
    memcpy(rt->top, t->top, rt->n_top * sizeof rt->top[0]);

    int n = detok_push(&r->detok, t->token, r->piece, r->piece_cap);
    bool matched = false;
    if (n >= 0)
        n = relay_text(r, (size_t)n, &matched);
    if (n < 0) {
        snprintf(r->error, sizeof r->error, "worker sent token %u, which cannot be decoded (%s)",
                 t->token, strerror(-n));
        event_add(out, RELAY_EVENT_ERROR)->error = r->error;
        return;
    }
    if (n > 0 || matched || r->n_pending == RELAY_MAX_PENDING)
        emit_text(r, (size_t)n, out);
    if (matched)
        emit_finished(RELAY_FINISH_STOP, out);
}

static enum relay_finish finish_reason(enum finish_reason reason)
{
    switch (reason) {
    case FINISH_REASON_LENGTH:
        return RELAY_FINISH_LENGTH;
    case FINISH_REASON_CANCELLED:
        return RELAY_FINISH_CANCELLED;
    case FINISH_REASON_STOP:
    default:
        return RELAY_FINISH_STOP;
    }
}

void relay_done(struct relay *r, enum finish_reason reason, struct relay_out *out)
{
    out->n = 0;
    /* Release what detok and the stop strings hold; the tail may still complete a stop. The
     * buffers are sized for the flush, so neither step can fail. */
    bool matched = false;
    int n = detok_flush(&r->detok, r->piece, r->piece_cap);
    if (n >= 0)
        n = relay_text(r, (size_t)n, &matched);
    size_t len = n > 0 ? (size_t)n : 0;
    if (!matched)
        len += stop_finish(&r->stop, r->text + len);
    emit_text(r, len, out);
    emit_finished(matched ? RELAY_FINISH_STOP : finish_reason(reason), out);
}
