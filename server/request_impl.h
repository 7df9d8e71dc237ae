/* What the three parts of a request share (request.h says what a request is):
 * request.c its life (jobs, records, ending, freeing), request_reply.c its answer (the
 * relay's events turned into SSE frames or a whole reply), request_client.c its connection
 * (backpressure; http.c watches whether the client is there). */
#ifndef REQUEST_IMPL_H
#define REQUEST_IMPL_H

#include "relay.h"
#include "request.h"

/* ---- request.c ---- */

/* r is over (r->http NULL: its answer went or its client left): stop its timers, drop its
 * queued jobs and cancel its running ones; it is freed once every job is DONE. */
void request_end(struct request *r);

/* ---- request_reply.c ---- */

/* Hand r's gathered stream frames to its connection (r->ev_flush, once the loop is back). */
void request_flush(struct request *r);

/* Job j's STARTED record, and its relay's events, while j runs for its request's client. */
void reply_started(struct job *j, uint32_t prompt_tokens, uint32_t cached_tokens);
void reply_text(struct job *j, const struct relay_event *ev);
/* j's choice is answered; when it was the last, the whole answer goes and r is over. */
void reply_finished(struct job *j, enum relay_finish reason, uint32_t completion);
/* The error answer of request_fail (r not over; it is over after). */
void reply_error(struct request *r, int status, const char *type, const char *message,
                 const char *param, const char *code);

/* ---- request_client.c ---- */

/* Stop following the connection: the answer is complete or the client left. */
void client_release(struct request *r);
/* After output was added for r's client (backpressure). */
void client_flow_check(struct request *r);

#endif
