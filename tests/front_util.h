/* Helpers shared by the front's integration tests (test_api, test_stream, test_dispatch,
 * bench_http): JSON requests, SSE collection and /health queries against a running kiln.
 * Header-only (static inline) so every test binary stays one file. */
#ifndef FRONT_UTIL_H
#define FRONT_UTIL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "lib/harness.h"
#include "lib/http_client.h"

#define MOCK_REPLY "Hello, world! This is kiln."

/* POST (or GET with body NULL) and parse the JSON answer. Returns the status (*out the parsed
 * body or NULL) or -errno. resp, when given, keeps the raw response (caller frees). */
static inline int front_call(int port, const char *method, const char *path, const char *body,
                             json_t **out, struct http_response *resp)
{
    struct http_response local;
    struct http_response *r = resp ? resp : &local;
    int st = http_request(port, method, path, NULL, body, r);
    *out = NULL;
    if (st < 0)
        return st;
    *out = json_loads(r->body, 0, NULL);
    if (!resp)
        http_response_free(r);
    return st;
}

/* A whole stream, gathered. */
struct front_stream {
    int status;
    char text[8192];       /* every chunk's text / delta.content, joined */
    char finish[32];       /* the finish_reason of the chunk that carried one */
    char object[48];
    char id[96];
    bool first_has_role;   /* chat: the first chunk's delta.role was "assistant" */
    bool done;             /* data: [DONE] came last */
    bool usage;            /* a usage chunk came */
    long long prompt_tokens, completion_tokens, total_tokens;
    int n_chunks;
    bool error_event;
};

static inline const char *front_chunk_text(json_t *choice, bool chat)
{
    json_t *t = chat ? json_object_get(json_object_get(choice, "delta"), "content")
                     : json_object_get(choice, "text");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

/* Run a streaming request and gather it (bounded by timeout_ms per event). Returns 0 or
 * -errno. */
static inline int front_stream_collect(int port, const char *path, const char *body,
                                       struct front_stream *out, int timeout_ms)
{
    struct http_stream *s = NULL;
    struct sse_event ev;
    bool chat = strstr(path, "chat") != NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    out->status = http_stream_open(port, "POST", path, NULL, body, timeout_ms, &s);
    if (out->status < 0)
        return out->status;
    if (out->status != 200) {
        http_stream_close(s);
        return 0;
    }
    while ((rc = sse_next(s, &ev, timeout_ms)) == 1) {
        if (ev.done) {
            out->done = true;
            continue;
        }
        if (out->done) {
            rc = -EPROTO; /* nothing after [DONE] */
            break;
        }
        json_t *j = json_loads(ev.data, 0, NULL);
        if (!j) {
            rc = -EPROTO;
            break;
        }
        if (json_object_get(j, "error"))
            out->error_event = true;
        json_t *choices = json_object_get(j, "choices");
        json_t *usage = json_object_get(j, "usage");
        if (json_is_object(usage)) {
            out->usage = true;
            out->prompt_tokens = json_integer_value(json_object_get(usage, "prompt_tokens"));
            out->completion_tokens =
                json_integer_value(json_object_get(usage, "completion_tokens"));
            out->total_tokens = json_integer_value(json_object_get(usage, "total_tokens"));
        }
        if (json_is_string(json_object_get(j, "object")))
            snprintf(out->object, sizeof(out->object), "%s",
                     json_string_value(json_object_get(j, "object")));
        if (json_is_string(json_object_get(j, "id")))
            snprintf(out->id, sizeof(out->id), "%s", json_string_value(json_object_get(j, "id")));
        json_t *c = json_array_get(choices, 0);
        if (c) {
            if (out->n_chunks == 0 && chat) {
                json_t *role = json_object_get(json_object_get(c, "delta"), "role");
                out->first_has_role =
                    json_is_string(role) && strcmp(json_string_value(role), "assistant") == 0;
            }
            const char *t = front_chunk_text(c, chat);
            if (t)
                strncat(out->text, t, sizeof(out->text) - strlen(out->text) - 1);
            json_t *fr = json_object_get(c, "finish_reason");
            if (json_is_string(fr))
                snprintf(out->finish, sizeof(out->finish), "%s", json_string_value(fr));
            out->n_chunks++;
        }
        json_decref(j);
    }
    http_stream_close(s);
    return rc < 0 ? rc : 0;
}

/* GET /health parsed, or NULL. */
static inline json_t *front_health(int port)
{
    json_t *j = NULL;
    (void)front_call(port, "GET", "/health", NULL, &j, NULL);
    return j;
}

/* Slots taken over all workers per /health, or -1. */
static inline long long front_running(int port)
{
    json_t *h = front_health(port);
    long long n = h ? json_integer_value(json_object_get(h, "running")) : -1;
    json_decref(h);
    return n;
}

/* Requests in the front's waiting queue per /health, or -1. */
static inline long long front_waiting(int port)
{
    json_t *h = front_health(port);
    long long n = h ? json_integer_value(json_object_get(h, "waiting")) : -1;
    json_decref(h);
    return n;
}

static inline bool front_ready_cond(void *arg)
{
    int port = *(int *)arg;
    json_t *h = NULL;
    int st = front_call(port, "GET", "/health", NULL, &h, NULL);
    bool ok = false;
    if (st == 200 && h) {
        /* every worker ready, not only one */
        json_t *w;
        size_t i;
        ok = true;
        json_array_foreach(json_object_get(h, "workers"), i, w) {
            const char *s = json_string_value(json_object_get(w, "state"));
            if (!s || strcmp(s, "ready") != 0)
                ok = false;
        }
    }
    json_decref(h);
    return ok;
}

/* A series' value from /metrics (the first line "name value"), or -1. */
static inline double front_metric(int port, const char *name)
{
    struct http_response r;
    double v = -1;
    size_t n = strlen(name);
    if (http_request_ex(port, "GET", "/metrics", NULL, NULL, 0, 5000, &r) != 200)
        return -1;
    for (const char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    }
    http_response_free(&r);
    return v;
}

/* The pid of worker i per /health, or -1. */
static inline long long front_worker_pid(int port, int i)
{
    json_t *h = front_health(port);
    json_t *w = json_array_get(json_object_get(h, "workers"), (size_t)i);
    long long pid = w && json_is_integer(json_object_get(w, "pid"))
                        ? json_integer_value(json_object_get(w, "pid"))
                        : -1;
    json_decref(h);
    return pid;
}

/* For wait_until(): worker 0 has a pid other than old_pid and every worker is ready. */
struct front_respawn {
    int port;
    long long old_pid;
};

static inline bool front_respawned(void *arg)
{
    struct front_respawn *r = arg;
    long long pid = front_worker_pid(r->port, 0);
    return pid > 0 && pid != r->old_pid && front_ready_cond(&r->port);
}

/* Start kiln with args and wait until all its workers are ready. NULL on failure. */
static inline struct kiln_proc *front_start(const char *const *args)
{
    struct kiln_proc *p = kiln_start(args);
    if (!p)
        return NULL;
    int port = kiln_port(p);
    if (!wait_until(front_ready_cond, &port, 20000)) {
        fprintf(stderr, "kiln never became ready:\n%s\n", kiln_output(p));
        kiln_destroy(p);
        return NULL;
    }
    return p;
}

/* Stop kiln (SIGTERM) and free it. Returns 0 when it exited with status 0 (a clean shutdown,
 * and under ASan no leak or error report), -1 otherwise (its output is printed). */
static inline int front_stop(struct kiln_proc *p)
{
    int st = kiln_stop(p);
    int rc = (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 0 : -1;
    if (rc < 0)
        fprintf(stderr, "kiln did not exit cleanly (status %d):\n%s\n", st, kiln_output(p));
    kiln_destroy(p);
    return rc;
}

#endif
