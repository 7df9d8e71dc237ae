/* Private to toolcall.c and toolcall_body.c: the parser's state and the call markers. */
#ifndef TOOLCALL_IMPL_H
#define TOOLCALL_IMPL_H

#include "toolcall.h"

#define TC_DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define TC_DS_CALLS_END   "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define TC_DS_CALL_BEGIN  "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define TC_DS_CALL_END    "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define TC_DS_SEP         "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

enum tc_body {
    TC_BODY_JSON,        /* a call object, or an array of them */
    TC_BODY_PYTHON_TAG,  /* JSON as above, or name.call(key="value", ...) */
    TC_BODY_BARE,        /* a Llama 3 reply that may be a call object; else plain content */
    TC_BODY_DEEPSEEK,    /* <｜tool▁call▁begin｜>type<｜tool▁sep｜>name\n```json\n{...}\n```... */
    TC_BODY_FUNCTIONARY, /* name\n{args} */
    TC_BODY_MISTRAL,     /* JSON as TC_BODY_JSON, or name[ARGS]{args} (Devstral, Magistral) */
};

/* A call's markup: what opens it, what closes it (NULL: the end of its JSON does), an
 * optional closing marker after that end, and how its body is read. */
struct tc_marker {
    const char *open;
    const char *close;
    const char *opt_close;
    enum tc_body body;
};

enum tc_state {
    TC_STATE_START,     /* nothing decided: a think block or a bare call may come */
    TC_STATE_CONTENT,
    TC_STATE_REASONING,
    TC_STATE_FUNC_NAME, /* functionary: the recipient line */
    TC_STATE_CALL,      /* after cur->open, until the call ends */
};

#define TC_MAX_MARKERS 6

struct toolcall {
    struct toolcall_config cfg;
    const struct tc_marker *markers[TC_MAX_MARKERS];
    uint32_t n_markers;
    bool bare_json;
    enum tc_state state;
    bool strip_lead;            /* blanks at the start of this part are dropped */
    const char *after_close;    /* an optional closing marker that may come next */
    const struct tc_marker *cur; /* TC_STATE_CALL */
    char *buf;                  /* text not yet decided */
    size_t len, cap;
    char pre_ws[64];            /* the blanks before the call being read (for a bad one) */
    uint32_t n_pre_ws;
    bool implicit_open;         /* the prompt wrote cur's opening marker (functionary) */
    bool after_think;           /* a think block just closed: <response> may open the answer */
    bool in_response;           /* inside Granite's <response>...</response>: drop the close */
    uint32_t n_calls;
    size_t n_content;
};

/* Parse a call's body s[0, n) (as marker m reads it) and emit its calls. Returns 0, -EINVAL
 * when it is not a valid call (nothing was emitted), or the callback's error. */
int tc_parse_body(struct toolcall *t, const struct tc_marker *m, const char *s, size_t n,
                  toolcall_cb cb, void *arg);

/* Emit one call (dropped when a call was made and parallel calls are off). */
int tc_emit_call(struct toolcall *t, const char *name, size_t name_len, const char *args,
                 size_t args_len, toolcall_cb cb, void *arg);

#endif
