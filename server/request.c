/* A generation request's life in the front: created by the API, queued, run on a worker,
 * answered (whole or as SSE), and freed once both the answer is done and the worker gave
 * the job's final record back. Every path that ends a request goes through request_end(). */
#include "request.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/bufferevent.h>
#include <event2/http.h>

#include "api.h"
#include "log.h"
#include "queue.h"
#include "relay.h"
#include "workers.h"

static void on_close(struct evhttp_connection *evcon, void *arg);

static void unwatch_peer(struct request *r)
{
    if (r->ev_peer) {
        event_free(r->ev_peer);
        r->ev_peer = NULL;
    }
}

/* The client's socket as libevent has it, or -1. */
static evutil_socket_t client_fd(struct request *r)
{
    struct evhttp_connection *evcon;
    struct bufferevent *bev;
    if (!r->http || !(evcon = evhttp_request_get_connection(r->http)) ||
        !(bev = evhttp_connection_get_bufferevent(evcon)))
        return -1;
    return bufferevent_getfd(bev);
}

/* 1: the client closed or reset its side; 0: it is there (or sent more bytes); -1: unknown. */
static int peer_state(evutil_socket_t fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return 1;
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : 1;
    return 0;
}

/* libevent does not read a connection while its request is being answered, so a client that
 * leaves before any byte is written would go unnoticed: watch its socket ourselves. */
static void on_peer(evutil_socket_t fd, short what, void *arg)
{
    struct request *r = arg;
    (void)what;
    int st = peer_state(fd);
    if (st < 0) {
        event_add(r->ev_peer, NULL);
        return;
    }
    unwatch_peer(r);
    if (st == 1 && r->http) {
        /* frees the connection and its request; on_close (its close callback) runs first */
        evhttp_connection_free(evhttp_request_get_connection(r->http));
    }
    /* st 0: a pipelined request; stop watching, the reply's writes will tell */
}

static void watch_peer(struct request *r)
{
    evutil_socket_t fd = client_fd(r);
    if (fd < 0)
        return;
    r->ev_peer = event_new(r->f->base, fd, EV_READ, on_peer, r);
    if (r->ev_peer)
        event_add(r->ev_peer, NULL);
}

static void request_maybe_free(struct request *r)
{
    struct front *f = r->f;
    if (!r->finished || r->worker || r->queued || r->hold)
        return;
    TAILQ_REMOVE(&f->requests, r, link_all);
    f->n_requests--;
    unwatch_peer(r);
    for (uint32_t i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->prompt);
    relay_destroy(r->relay);
    if (r->text)
        evbuffer_free(r->text);
    free(r);
}

struct request *request_create(struct front *f, struct evhttp_request *http,
                               enum request_kind kind)
{
    struct request *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->text = evbuffer_new();
    if (!r->text) {
        free(r);
        return NULL;
    }
    r->f = f;
    r->http = http;
    r->kind = kind;
    r->req_id = ++f->next_req_id;
    r->created = (int64_t)time(NULL);
    snprintf(r->id, sizeof(r->id), "%s-%016llx%08llx",
             kind == REQUEST_KIND_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)f->id_salt,
             (unsigned long long)r->req_id);
    proto_sampling_init(&r->sampling);
    TAILQ_INSERT_TAIL(&f->requests, r, link_all);
    f->n_requests++;
    struct evhttp_connection *evcon = evhttp_request_get_connection(http);
    if (evcon)
        evhttp_connection_set_closecb(evcon, on_close, r);
    watch_peer(r);
    return r;
}

/* Stop watching the connection: the answer is complete or the client left. */
static void release_http(struct request *r)
{
    struct evhttp_connection *evcon;
    unwatch_peer(r);
    if (!r->http)
        return;
    evcon = evhttp_request_get_connection(r->http);
    if (evcon)
        evhttp_connection_set_closecb(evcon, NULL, NULL);
}

/* The generation is over for the client (answered, failed or gone): leave the queue, cancel
 * a running job, free what nothing refers to any more. */
static void request_end(struct request *r)
{
    r->finished = true;
    if (r->queued)
        queue_remove(&r->f->queue, r);
    if (r->worker && !r->cancel_sent && (!r->relay || relay_cancel(r->relay))) {
        r->cancel_sent = true;
        (void)worker_cancel(r->worker, r->req_id);
    }
    request_maybe_free(r);
}

static void send_sse(struct request *r, const char *json)
{
    if (!r->http || !json)
        return;
    evbuffer_add(r->text, "data: ", 6);
    evbuffer_add(r->text, json, strlen(json));
    evbuffer_add(r->text, "\n\n", 2);
    evhttp_send_reply_chunk(r->http, r->text);
}

static void stream_begin(struct request *r)
{
    if (r->reply_started || !r->http)
        return;
    struct evkeyvalq *h = evhttp_request_get_output_headers(r->http);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_send_reply_start(r->http, 200, "OK");
    r->reply_started = true;
    if (r->kind == REQUEST_KIND_CHAT) {
        char *j = api_json_chunk(r, "", 0, true, NULL);
        send_sse(r, j);
        free(j);
    }
}

static void emit_started(struct request *r, uint32_t prompt_tokens)
{
    r->prompt_tokens = prompt_tokens;
    if (r->stream)
        stream_begin(r);
}

static void emit_text(struct request *r, const char *s, size_t n)
{
    if (n == 0 || !r->http)
        return;
    if (r->stream) {
        stream_begin(r);
        char *j = api_json_chunk(r, s, n, false, NULL);
        send_sse(r, j);
        free(j);
    } else {
        evbuffer_add(r->text, s, n);
    }
}

static void emit_finished(struct request *r, enum finish_reason reason, uint32_t completion)
{
    const char *finish = api_finish_name(reason);
    r->completion_tokens = completion;
    if (r->http) {
        release_http(r);
        if (r->stream) {
            stream_begin(r);
            char *j = api_json_chunk(r, NULL, 0, false, finish);
            send_sse(r, j);
            free(j);
            if (r->include_usage) {
                j = api_json_usage_chunk(r);
                send_sse(r, j);
                free(j);
            }
            evbuffer_add(r->text, "data: [DONE]\n\n", 14);
            evhttp_send_reply_chunk(r->http, r->text);
            evhttp_send_reply_end(r->http);
        } else {
            size_t len = evbuffer_get_length(r->text);
            char *text = (char *)evbuffer_pullup(r->text, -1);
            char *j = api_json_reply(r, text ? text : "", len, finish);
            struct evbuffer *body = evbuffer_new();
            if (j && body) {
                evhttp_add_header(evhttp_request_get_output_headers(r->http), "Content-Type",
                                  "application/json");
                evbuffer_add(body, j, strlen(j));
                evhttp_send_reply(r->http, 200, "OK", body);
            } else {
                api_send_error(r->http, 500, "server_error", "out of memory", NULL, NULL);
            }
            free(j);
            if (body)
                evbuffer_free(body);
        }
        r->http = NULL;
    }
    request_end(r);
}

void request_fail(struct request *r, int status, const char *type, const char *message,
                  const char *param, const char *code)
{
    if (r->http) {
        release_http(r);
        if (r->reply_started) {
            char *j = api_json_error(type, message, param, code);
            send_sse(r, j);
            free(j);
            evhttp_send_reply_end(r->http);
        } else {
            api_send_error(r->http, status, type, message, param, code);
        }
        r->http = NULL;
    }
    request_end(r);
}

static void on_close(struct evhttp_connection *evcon, void *arg)
{
    struct request *r = arg;
    evhttp_connection_set_closecb(evcon, NULL, NULL);
    unwatch_peer(r);
    if (r->http) {
        /* libevent detaches an unanswered request from a failed connection and leaves its
         * freeing to us; one still attached is freed with the connection right after. */
        if (!evhttp_request_get_connection(r->http))
            evhttp_request_free(r->http);
        r->http = NULL;
    }
    if (!r->finished) {
        r->client_gone = true;
        log_debug("request %llu: client left", (unsigned long long)r->req_id);
        request_end(r);
    }
}

bool request_client_alive(struct request *r)
{
    evutil_socket_t fd = client_fd(r);
    return fd >= 0 && peer_state(fd) != 1;
}

static void send_cancel(struct request *r)
{
    if (r->worker && !r->cancel_sent) {
        r->cancel_sent = true;
        (void)worker_cancel(r->worker, r->req_id);
    }
}

static void handle_event(struct request *r, const struct relay_event *ev)
{
    if (r->finished)
        return;
    switch (ev->type) {
    case RELAY_EVENT_STARTED:
        r->started = true;
        emit_started(r, ev->prompt_tokens);
        break;
    case RELAY_EVENT_TEXT:
        emit_text(r, ev->text, ev->len);
        break;
    case RELAY_EVENT_FINISHED:
        emit_finished(r,
                      ev->reason == RELAY_FINISH_LENGTH ? FINISH_REASON_LENGTH
                                                        : FINISH_REASON_STOP,
                      ev->completion_tokens);
        break;
    case RELAY_EVENT_ERROR:
        request_fail(r, 500, "server_error", ev->error ? ev->error : "generation failed", NULL,
                     NULL);
        break;
    }
}

void request_on_record(struct request *r, const struct proto_msg *m)
{
    struct relay_out out;

    r->hold++;
    if (m->type == MSG_TYPE_STARTED)
        r->started = true;
    if (m->type == MSG_TYPE_DONE || m->type == MSG_TYPE_FAILED)
        r->worker = NULL; /* the worker layer released the slot */
    if (!r->relay || relay_feed(r->relay, m, &out) < 0) {
        log_warn("request %llu: worker record of type %d out of order",
                 (unsigned long long)r->req_id, (int)m->type);
        send_cancel(r);
        if (!r->finished)
            request_fail(r, 500, "server_error", "the worker broke the protocol", NULL, NULL);
    } else {
        if (out.send_cancel)
            send_cancel(r);
        for (uint32_t i = 0; i < out.n; i++)
            handle_event(r, &out.ev[i]);
    }
    r->hold--;
    request_maybe_free(r);
}

void request_on_job_lost(struct request *r, const char *cause)
{
    r->worker = NULL;
    if (r->finished) {
        request_maybe_free(r);
        return;
    }
    if (!r->started) {
        queue_push_head(&r->f->queue, r);
        return;
    }
    request_fail(r, 500, "server_error", cause, NULL, NULL);
}

int request_start(struct request *r)
{
    size_t lens[REQUEST_MAX_STOPS];
    for (uint32_t i = 0; i < r->n_stops; i++)
        lens[i] = strlen(r->stops[i]);
    int rc = relay_create(r->f->model.tok, (const char *const *)r->stops, lens, r->n_stops,
                          &r->relay);
    if (rc == -ENOMEM) {
        request_fail(r, 500, "server_error", "out of memory", NULL, NULL);
        return rc;
    }
    if (rc < 0) {
        request_fail(r, 400, "invalid_request_error", "invalid stop string", "stop", NULL);
        return rc;
    }
    rc = queue_admit(&r->f->queue, r);
    if (rc == -ENODEV) {
        request_fail(r, 503, "server_error", "no worker is available (see /health)", NULL,
                     "no_worker");
        return rc;
    }
    if (rc == -EBUSY) {
        request_fail(r, 503, "server_error", "the server is busy; retry later", NULL,
                     "server_busy");
        return rc;
    }
    return 0;
}

void request_abort(struct request *r)
{
    if (r->queued)
        queue_remove(&r->f->queue, r);
    r->worker = NULL; /* the workers are going away */
    if (r->http)
        request_fail(r, 503, "server_error", "the server is shutting down", NULL, NULL);
    else
        request_end(r);
}
