/* libFuzzer target for the reply parser (server/toolcall*.c): any bytes, fed in pieces of a
 * size the input chooses, in every format, with and without reasoning. Checks that every call
 * it releases has a name and arguments that are one JSON object, and that it never releases
 * more text than it was given. Built by `make fuzz` (clang), never by `make test`. */
#include "../server/toolcall.h"

#include <stdint.h>
#include <string.h>

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
    size_t text; /* content and reasoning bytes released */
};

static int check(void *arg, const struct toolcall_piece *p)
{
    struct seen *s = arg;
    if (p->kind != TOOLCALL_CALL) {
        s->text += p->len;
        return 0;
    }
    if (p->name_len == 0)
        __builtin_trap();
    json_t *a = json_loadb(p->text, p->len, JSON_DECODE_ANY, NULL);
    if (!json_is_object(a))
        __builtin_trap();
    json_decref(a);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    struct toolcall_config c = {
        .format = (enum toolcall_format)(data[0] % TOOLCALL_FORMAT_COUNT),
        .reasoning = data[0] & 0x10,
        .in_think = data[0] & 0x20,
        .parallel = data[0] & 0x40,
    };
    size_t step = (size_t)(data[1] % 16) + 1, n = size - 2;
    const char *text = (const char *)data + 2;
    struct seen s = {0};
    struct toolcall *t = toolcall_create(&c);
    if (!t)
        return 0;
    for (size_t i = 0; i < n; i += step)
        if (toolcall_push(t, text + i, i + step <= n ? step : n - i, check, &s) < 0)
            __builtin_trap();
    if (toolcall_finish(t, check, &s) < 0)
        __builtin_trap();
    if (s.text > n)
        __builtin_trap();
    toolcall_destroy(t);
    return 0;
}
