/* libFuzzer target for what a client sends the front: kiln's request parser
 * (server/http_parse.c, the front's only HTTP framing) fed any bytes in pieces of a size the
 * input chooses, and the JSON body handling of the generation routes (api_parse_common and
 * api_parse_prompt over any bytes parsed as JSON, against the mock's model facts). Checks the
 * parser's contract (it never takes more than it is given, a refusal names one of its
 * statuses, a body stays within the limit, it always moves on) and that body parsing either
 * succeeds or names a 4xx; ASan/UBSan and LeakSanitizer catch the rest. Built by `make fuzz` (clang), never by `make test`. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "../server/api.h"
#include "../server/api_impl.h"
#include "../server/config.h"
#include "../server/http_parse.h"
#include "../server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* kiln's own request parser over any bytes in pieces: it takes no more than it is given, a
 * refusal stays and names one of its statuses, a body stays within the limit, and it always
 * moves on (a call that takes nothing returns DONE or ERROR). */
static void fuzz_parse(const uint8_t *data, size_t size)
{
    struct http_parser p;
    struct evbuffer *body = evbuffer_new();
    size_t step = (size_t)(data[0] % 64) + 1, off = 1;
    enum http_parse_status st = HTTP_PARSE_MORE;
    if (!body || http_parser_init(&p, 1u << 16, 1024) < 0)
        __builtin_trap();
    while (off < size || st == HTTP_PARSE_HEAD) {
        size_t n = size - off < step ? size - off : step, used = 0;
        st = http_parser_feed(&p, (const char *)data + off, n, body, &used);
        if (used > n)
            __builtin_trap();
        off += used;
        if (evbuffer_get_length(body) > p.max_body)
            __builtin_trap();
        if (st == HTTP_PARSE_ERROR) {
            int s = p.status;
            if (s != 400 && s != 413 && s != 417 && s != 431 && s != 501 && s != 505 &&
                s != 503)
                __builtin_trap();
            break;
        }
        if (st == HTTP_PARSE_DONE) {
            if (p.method && !*p.method)
                __builtin_trap();
            evbuffer_drain(body, evbuffer_get_length(body));
            http_parser_next(&p);
        } else if (st == HTTP_PARSE_MORE && used != n) {
            __builtin_trap(); /* MORE means every byte was taken */
        }
    }
    http_parser_free(&p);
    evbuffer_free(body);
}

static struct front fuzz_front;

static void fuzz_body(const uint8_t *data, size_t size, enum request_kind kind)
{
    json_t *o = json_loadb((const char *)data, size, 0, NULL);
    struct request *r;
    struct api_params p;
    struct perr e = {0};
    const char *text = NULL;
    size_t len = 0;
    uint32_t *ids = NULL, n_ids = 0;

    if (!json_is_object(o)) {
        json_decref(o);
        return;
    }
    if (!(r = calloc(1, sizeof(*r)))) {
        json_decref(o);
        return;
    }
    r->f = &fuzz_front;
    r->model = front_model_ref(fuzz_front.model);
    r->kind = kind;
    proto_sampling_init(&r->sampling);
    int rc = api_parse_common(r, o, &p, &e);
    if (rc == -EINVAL && (e.status ? e.status : 400) / 100 != 4)
        __builtin_trap();
    if (rc == 0 && kind == REQUEST_KIND_COMPLETION) {
        memset(&e, 0, sizeof(e));
        rc = api_parse_prompt(r, o, &text, &len, &ids, &n_ids, &e);
        if (rc == 0 && !text && n_ids && !ids)
            __builtin_trap();
    }
    for (uint32_t i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->grammar);
    front_model_put(r->model);
    free(ids);
    free(r);
    json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        static struct kiln_config cfg;
        char err[256];
        config_init(&cfg);
        cfg.model = "mock";
        if (!(fuzz_front.model = front_model_load(&cfg, "mock", 1, err, sizeof(err))))
            __builtin_trap();
        fuzz_front.cfg = &cfg;
        ready = 1;
    }
    if (size < 2)
        return 0;
    switch (data[0] % 4) {
    case 0:
    case 3:
        fuzz_parse(data + 1, size - 1);
        break;
    case 1:
        fuzz_body(data + 1, size - 1, REQUEST_KIND_COMPLETION);
        break;
    default:
        fuzz_body(data + 1, size - 1, REQUEST_KIND_CHAT);
        break;
    }
    return 0;
}
