/* The JSON of a parsed chat reply (toolcall.h): stream chunks carrying reasoning_content or
 * a tool call's delta, and a tool call of a whole reply. Builds text only. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api_impl.h"

static json_t *chunk(const struct request *r, uint32_t index, json_t *delta)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:n}]}", "id", r->id, "object",
                     "chat.completion.chunk", "created", (json_int_t)r->created, "model",
                     r->f->model.name, "choices", "index", (int)index, "delta", delta,
                     "logprobs", "finish_reason");
}

char *api_json_delta_chunk(const struct request *r, uint32_t index, const char *field,
                           const char *text, size_t len)
{
    json_t *delta = json_object();
    if (!delta)
        return NULL;
    json_object_set_new(delta, field, api_json_text(text, len));
    return api_json_finish(chunk(r, index, delta));
}

char *api_json_tool_chunk(const struct request *r, uint32_t index, uint32_t call_index,
                          const char *id, const char *name, size_t name_len, const char *args,
                          size_t args_len)
{
    json_t *fn = json_object(), *call = json_object();
    if (!fn || !call) {
        json_decref(fn);
        json_decref(call);
        return NULL;
    }
    json_object_set_new(call, "index", json_integer(call_index));
    if (id) {
        json_object_set_new(call, "id", json_string(id));
        json_object_set_new(call, "type", json_string("function"));
    }
    if (name)
        json_object_set_new(fn, "name", api_json_text(name, name_len));
    json_object_set_new(fn, "arguments", api_json_text(args, args_len));
    json_object_set_new(call, "function", fn);
    return api_json_finish(chunk(r, index, json_pack("{s:[o]}", "tool_calls", call)));
}

json_t *api_json_tool_call(const char *id, const char *name, size_t name_len, const char *args,
                           size_t args_len)
{
    return json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", id, "type", "function", "function",
                     "name", api_json_text(name, name_len), "arguments",
                     api_json_text(args, args_len));
}
