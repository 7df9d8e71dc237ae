/* libFuzzer target for the Jinja engine: the input is a template, a NUL byte, and a JSON object
 * whose keys become the template's variables (the client's text, tainted). Any template and
 * any context must give a result or an error, never a crash, a leak or a hang: the step,
 * depth and memory limits are set low so a runaway template ends quickly.
 * Built and run by `make fuzz-jinja` (clang, -fsanitize=fuzzer,address,undefined). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

static const char default_ctx[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi "
    "<|im_end|>\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\","
    "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},{\"role\":"
    "\"tool\",\"content\":\"2\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"parameters\":{}}}],\"add_generation_prompt\":true,\"bos_token\":\"<s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char err[256];
    json_t *ctx = NULL;

    if (nul)
        ctx = json_loadb((const char *)nul + 1, size - tlen - 1, JSON_DECODE_ANY, NULL);
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        ctx = json_loads(default_ctx, 0, NULL);
    }
    struct jinja_template *t = jinja_parse(src, tlen, err, sizeof(err));
    if (t && ctx) {
        struct jinja_var vars[32];
        size_t n = 0;
        const char *k;
        json_t *v;
        json_object_foreach(ctx, k, v) {
            if (n < 32)
                vars[n++] = (struct jinja_var){k, v, n % 2 == 0};
        }
        struct jinja_limits lim = {.max_steps = 200000, .max_depth = 100,
                                   .max_bytes = 64 << 20, .now = 1768469400};
        struct jinja_output out;
        if (jinja_render(t, vars, n, &lim, &out, err, sizeof(err)) == 0) {
            /* the spans must lie in the text, sorted and disjoint */
            size_t end = 0;
            for (size_t i = 0; i < out.n_spans; i++) {
                if (out.spans[i].off < end || out.spans[i].len == 0 ||
                    out.spans[i].off + out.spans[i].len > out.len)
                    abort();
                end = out.spans[i].off + out.spans[i].len;
            }
            if (strlen(out.text) > out.len)
                abort();
            free(out.text);
            free(out.spans);
        }
    }
    jinja_free(t);
    json_decref(ctx);
    return 0;
}
