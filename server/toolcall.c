/* The reply parser (toolcall.h): a state machine over a buffer of text not yet decided.
 * Content and reasoning are released as soon as no marker can start in them (their trailing
 * blanks wait, so the blanks around a call or a think block never become content); a call is
 * released once its end is seen (its closing marker, or the end of its JSON where the format
 * has no closing marker) and it parsed. toolcall_body.c turns a call's text into calls. */
#include "toolcall.h"
#include "toolcall_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const char *const format_names[TOOLCALL_FORMAT_COUNT] = {
    [TOOLCALL_FORMAT_NONE] = "none",
    [TOOLCALL_FORMAT_HERMES] = "hermes",
    [TOOLCALL_FORMAT_LLAMA3] = "llama3",
    [TOOLCALL_FORMAT_MISTRAL] = "mistral",
    [TOOLCALL_FORMAT_GRANITE] = "granite",
    [TOOLCALL_FORMAT_DEEPSEEK_R1] = "deepseek-r1",
    [TOOLCALL_FORMAT_FUNCTIONARY] = "functionary",
    [TOOLCALL_FORMAT_ANY] = "any",
};

const char *toolcall_format_name(enum toolcall_format f)
{
    return (unsigned)f < TOOLCALL_FORMAT_COUNT ? format_names[f] : NULL;
}

int toolcall_format_from_name(const char *name)
{
    for (int f = 0; f < TOOLCALL_FORMAT_COUNT; f++)
        if (name && strcmp(name, format_names[f]) == 0)
            return f;
    return -1;
}

static bool has(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle)) != NULL;
}

enum toolcall_format toolcall_format_detect(const char *tmpl, size_t len)
{
    if (!tmpl)
        return TOOLCALL_FORMAT_NONE;
    if (has(tmpl, len, TC_DS_CALLS_BEGIN))
        return TOOLCALL_FORMAT_DEEPSEEK_R1;
    if (has(tmpl, len, ">>>all") || has(tmpl, len, ">>>${recipient}"))
        return TOOLCALL_FORMAT_FUNCTIONARY;
    if (has(tmpl, len, "[TOOL_CALLS]"))
        return TOOLCALL_FORMAT_MISTRAL;
    if (has(tmpl, len, "<|tool_call|>"))
        return TOOLCALL_FORMAT_GRANITE;
    if (has(tmpl, len, "<tool_call>"))
        return TOOLCALL_FORMAT_HERMES;
    if (has(tmpl, len, "<|python_tag|>") ||
        (has(tmpl, len, "<|start_header_id|>") && has(tmpl, len, "\"parameters\"")))
        return TOOLCALL_FORMAT_LLAMA3;
    return TOOLCALL_FORMAT_NONE;
}

bool toolcall_template_thinks(const char *tmpl, size_t len)
{
    return tmpl && has(tmpl, len, "<think>") && has(tmpl, len, "</think>");
}

bool toolcall_prompt_in_think(const char *prompt, size_t len)
{
    while (len > 0 && strchr(" \t\r\n", prompt[len - 1]))
        len--;
    return len >= 7 && memcmp(prompt + len - 7, "<think>", 7) == 0;
}

/* ---- markers ---- */

static const struct tc_marker m_hermes = {"<tool_call>", "</tool_call>", NULL, TC_BODY_JSON};
static const struct tc_marker m_python = {"<|python_tag|>", NULL, NULL, TC_BODY_PYTHON_TAG};
static const struct tc_marker m_mistral = {"[TOOL_CALLS]", NULL, NULL, TC_BODY_MISTRAL};
static const struct tc_marker m_granite = {"<|tool_call|>", NULL, "<|/tool_call|>",
                                           TC_BODY_JSON};
static const struct tc_marker m_deepseek = {TC_DS_CALLS_BEGIN, TC_DS_CALLS_END, NULL,
                                            TC_BODY_DEEPSEEK};
static const struct tc_marker m_functionary = {">>>", NULL, NULL, TC_BODY_FUNCTIONARY};
/* a Llama 3 reply that is a JSON object, as the whole reply */
static const struct tc_marker m_bare = {"", NULL, NULL, TC_BODY_BARE};

#define THINK_OPEN  "<think>"
#define THINK_CLOSE "</think>"
/* Granite 3.3 thinking: <think>...</think><response>answer</response> */
#define RESP_OPEN  "<response>"
#define RESP_CLOSE "</response>"

static void set_markers(struct toolcall *t)
{
    const struct tc_marker **m = t->markers;
    switch (t->cfg.format) {
    case TOOLCALL_FORMAT_HERMES: *m++ = &m_hermes; break;
    case TOOLCALL_FORMAT_LLAMA3: *m++ = &m_python; break;
    case TOOLCALL_FORMAT_MISTRAL: *m++ = &m_mistral; break;
    case TOOLCALL_FORMAT_GRANITE: *m++ = &m_granite; break;
    case TOOLCALL_FORMAT_DEEPSEEK_R1: *m++ = &m_deepseek; break;
    case TOOLCALL_FORMAT_FUNCTIONARY: *m++ = &m_functionary; break;
    case TOOLCALL_FORMAT_ANY:
        *m++ = &m_hermes;
        *m++ = &m_python;
        *m++ = &m_mistral;
        *m++ = &m_granite;
        *m++ = &m_deepseek;
        break;
    default: break;
    }
    t->n_markers = (uint32_t)(m - t->markers);
    t->bare_json = t->cfg.format == TOOLCALL_FORMAT_LLAMA3 || t->cfg.format == TOOLCALL_FORMAT_ANY;
}

struct toolcall *toolcall_create(const struct toolcall_config *c)
{
    struct toolcall *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->cfg = *c;
    set_markers(t);
    t->state = TC_STATE_START;
    t->strip_lead = true;
    return t;
}

void toolcall_destroy(struct toolcall *t)
{
    if (!t)
        return;
    free(t->buf);
    free(t);
}

uint32_t toolcall_count(const struct toolcall *t)
{
    return t->n_calls;
}

/* ---- the buffer ---- */

static int buf_add(struct toolcall *t, const char *s, size_t n)
{
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n)
            cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b)
            return -ENOMEM;
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    return 0;
}

static void buf_drop(struct toolcall *t, size_t n)
{
    memmove(t->buf, t->buf + n, t->len - n);
    t->len -= n;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t rtrim(const char *s, size_t n)
{
    while (n > 0 && is_ws(s[n - 1]))
        n--;
    return n;
}

/* The longest suffix of s[0, n) that is a proper prefix of m. */
static size_t partial(const char *s, size_t n, const char *m)
{
    size_t ml = strlen(m), k = ml - 1 < n ? ml - 1 : n;
    for (; k > 0; k--)
        if (memcmp(s + n - k, m, k) == 0)
            return k;
    return 0;
}

/* Whether s[0, n) is a proper prefix of m (n > 0). */
static bool is_prefix(const char *s, size_t n, const char *m)
{
    size_t ml = strlen(m);
    return n < ml && memcmp(s, m, n) == 0;
}

static int emit_text(struct toolcall *t, enum toolcall_kind kind, const char *s, size_t n,
                     toolcall_cb cb, void *arg)
{
    if (n == 0)
        return 0;
    struct toolcall_piece p = {.kind = kind, .text = s, .len = n};
    if (kind == TOOLCALL_CONTENT)
        t->n_content += n;
    return cb(arg, &p);
}

int tc_emit_call(struct toolcall *t, const char *name, size_t name_len, const char *args,
                 size_t args_len, toolcall_cb cb, void *arg)
{
    if (!t->cfg.parallel && t->n_calls > 0) {
        log_info("request %llu: a call to '%.*s' after the first dropped "
                 "(parallel_tool_calls is false)",
                 (unsigned long long)t->cfg.req_id, (int)(name_len > 64 ? 64 : name_len), name);
        return 0;
    }
    struct toolcall_piece p = {.kind = TOOLCALL_CALL, .text = args, .len = args_len,
                               .index = t->n_calls++, .name = name, .name_len = name_len};
    return cb(arg, &p);
}

/* The raw text of a call that did not parse, as content. */
static int emit_raw(struct toolcall *t, const struct tc_marker *m, const char *body, size_t n,
                    bool closed, toolcall_cb cb, void *arg)
{
    int rc;
    if (m->body != TC_BODY_BARE)
        log_warn("request %llu: the model's tool call is not valid (%zu bytes after '%s'); "
                 "sent as content",
                 (unsigned long long)t->cfg.req_id, n, m->open);
    if ((rc = emit_text(t, TOOLCALL_CONTENT, t->pre_ws, t->n_pre_ws, cb, arg)) < 0 ||
        (!t->implicit_open &&
         (rc = emit_text(t, TOOLCALL_CONTENT, m->open, strlen(m->open), cb, arg)) < 0) ||
        (rc = emit_text(t, TOOLCALL_CONTENT, body, n, cb, arg)) < 0)
        return rc;
    if (closed && m->close)
        rc = emit_text(t, TOOLCALL_CONTENT, m->close, strlen(m->close), cb, arg);
    return rc;
}

/* ---- the states ---- */

enum { STEP_MORE = 0, STEP_AGAIN = 1 };

static int step_start(struct toolcall *t, bool final)
{
    size_t i = 0, tl = strlen(THINK_OPEN);
    while (i < t->len && is_ws(t->buf[i]))
        i++;
    if (i == t->len && !final)
        return STEP_MORE;
    if (t->cfg.reasoning && i < t->len) {
        if (!final && is_prefix(t->buf + i, t->len - i, THINK_OPEN))
            return STEP_MORE;
        if (t->len - i >= tl && memcmp(t->buf + i, THINK_OPEN, tl) == 0) {
            buf_drop(t, i + tl);
            t->state = TC_STATE_REASONING;
            t->strip_lead = true;
            return STEP_AGAIN;
        }
    }
    if (t->bare_json && i < t->len && t->buf[i] == '{') {
        buf_drop(t, i);
        t->state = TC_STATE_CALL;
        t->cur = &m_bare;
        return STEP_AGAIN;
    }
    /* plain content: its leading blanks are the reply's */
    t->state = TC_STATE_CONTENT;
    t->strip_lead = false;
    return STEP_AGAIN;
}

static int step_reasoning(struct toolcall *t, bool final, toolcall_cb cb, void *arg)
{
    int rc;
    if (t->strip_lead) {
        size_t i = 0;
        while (i < t->len && is_ws(t->buf[i]))
            i++;
        buf_drop(t, i);
        if (t->len == 0)
            return STEP_MORE;
        t->strip_lead = false;
    }
    char *end = memmem(t->buf, t->len, THINK_CLOSE, strlen(THINK_CLOSE));
    if (end) {
        size_t at = (size_t)(end - t->buf);
        if ((rc = emit_text(t, TOOLCALL_REASONING, t->buf, rtrim(t->buf, at), cb, arg)) < 0)
            return rc;
        buf_drop(t, at + strlen(THINK_CLOSE));
        t->state = TC_STATE_CONTENT;
        t->strip_lead = true;
        t->after_think = true;
        return STEP_AGAIN;
    }
    size_t safe = rtrim(t->buf, final ? t->len : t->len - partial(t->buf, t->len, THINK_CLOSE));
    if ((rc = emit_text(t, TOOLCALL_REASONING, t->buf, safe, cb, arg)) < 0)
        return rc;
    buf_drop(t, final ? t->len : safe);
    return STEP_MORE;
}

static int step_content(struct toolcall *t, bool final, toolcall_cb cb, void *arg)
{
    int rc;
    if (t->strip_lead) {
        size_t i = 0;
        while (i < t->len && is_ws(t->buf[i]))
            i++;
        buf_drop(t, i);
        if (t->len == 0)
            return STEP_MORE;
        if (t->after_think) {
            size_t rl = strlen(RESP_OPEN);
            if (!final && is_prefix(t->buf, t->len, RESP_OPEN))
                return STEP_MORE;
            t->after_think = false;
            if (t->len >= rl && memcmp(t->buf, RESP_OPEN, rl) == 0) {
                buf_drop(t, rl);
                t->in_response = true;
                return STEP_AGAIN;
            }
        }
        if (t->after_close) {
            /* the optional closing marker of the call just ended */
            size_t cl = strlen(t->after_close);
            if (!final && is_prefix(t->buf, t->len, t->after_close))
                return STEP_MORE;
            if (t->len >= cl && memcmp(t->buf, t->after_close, cl) == 0) {
                buf_drop(t, cl);
                t->after_close = NULL;
                return STEP_AGAIN;
            }
            t->after_close = NULL;
        }
        t->strip_lead = false;
    }
    const struct tc_marker *first = NULL;
    size_t at = t->len;
    for (uint32_t k = 0; k < t->n_markers; k++) {
        const char *m = t->markers[k]->open;
        char *p = memmem(t->buf, at, m, strlen(m));
        if (p && (size_t)(p - t->buf) < at) {
            at = (size_t)(p - t->buf);
            first = t->markers[k];
        }
    }
    if (t->in_response) {
        char *p = memmem(t->buf, at, RESP_CLOSE, strlen(RESP_CLOSE));
        if (p) {
            size_t rat = (size_t)(p - t->buf);
            if ((rc = emit_text(t, TOOLCALL_CONTENT, t->buf, rtrim(t->buf, rat), cb, arg)) < 0)
                return rc;
            buf_drop(t, rat + strlen(RESP_CLOSE));
            t->in_response = false;
            t->strip_lead = true;
            return STEP_AGAIN;
        }
    }
    if (first) {
        size_t keep = rtrim(t->buf, at);
        if ((rc = emit_text(t, TOOLCALL_CONTENT, t->buf, keep, cb, arg)) < 0)
            return rc;
        t->n_pre_ws = (uint32_t)(at - keep < sizeof(t->pre_ws) ? at - keep : sizeof(t->pre_ws));
        memcpy(t->pre_ws, t->buf + keep, t->n_pre_ws);
        buf_drop(t, at + strlen(first->open));
        t->state = first->body == TC_BODY_FUNCTIONARY ? TC_STATE_FUNC_NAME : TC_STATE_CALL;
        t->cur = first;
        return STEP_AGAIN;
    }
    size_t hold = 0;
    for (uint32_t k = 0; k < t->n_markers && !final; k++) {
        size_t h = partial(t->buf, t->len, t->markers[k]->open);
        hold = h > hold ? h : hold;
    }
    if (t->in_response && !final) {
        size_t h = partial(t->buf, t->len, RESP_CLOSE);
        hold = h > hold ? h : hold;
    }
    /* trailing blanks wait: they are dropped if a call follows, or end the reply */
    size_t safe = rtrim(t->buf, t->len - hold);
    if (final && t->n_calls == 0)
        safe = t->len;
    if ((rc = emit_text(t, TOOLCALL_CONTENT, t->buf, safe, cb, arg)) < 0)
        return rc;
    buf_drop(t, final ? t->len : safe);
    return STEP_MORE;
}

/* Functionary v3.2: ">>>" then the recipient's name and a newline; "all" is text. */
static int step_func_name(struct toolcall *t, bool final, toolcall_cb cb, void *arg)
{
    char *nl = memchr(t->buf, '\n', t->len);
    if (!nl) {
        if (!final && t->len <= 128)
            return STEP_MORE;
        int rc = emit_raw(t, &m_functionary, t->buf, t->len, false, cb, arg);
        buf_drop(t, t->len);
        t->implicit_open = false;
        t->state = TC_STATE_CONTENT;
        return rc < 0 ? rc : STEP_AGAIN;
    }
    size_t n = (size_t)(nl - t->buf);
    if (n == 3 && memcmp(t->buf, "all", 3) == 0) {
        buf_drop(t, 4);
        t->implicit_open = false;
        t->state = TC_STATE_CONTENT;
        t->strip_lead = false;
        return STEP_AGAIN;
    }
    t->state = TC_STATE_CALL;
    t->cur = &m_functionary;
    return STEP_AGAIN;
}

/* Inside a call: wait for its end, then parse it. */
static int step_call(struct toolcall *t, bool final, toolcall_cb cb, void *arg)
{
    const struct tc_marker *m = t->cur;
    size_t body_len = 0, consumed = 0;
    bool closed = false, have = false;
    int rc;

    if (m->close) {
        char *p = memmem(t->buf, t->len, m->close, strlen(m->close));
        if (p) {
            body_len = (size_t)(p - t->buf);
            consumed = body_len + strlen(m->close);
            closed = have = true;
        }
    } else {
        size_t off = 0;
        if (m->body == TC_BODY_FUNCTIONARY) {
            char *nl = memchr(t->buf, '\n', t->len);
            off = nl ? (size_t)(nl - t->buf) + 1 : t->len;
        } else if (m->body == TC_BODY_MISTRAL && t->len > 0 && t->buf[0] != '[' &&
                   t->buf[0] != '{' && t->buf[0] != ' ' && t->buf[0] != '\n') {
            /* name[ARGS]{...}: the JSON starts after [ARGS] */
            char *a = memmem(t->buf, t->len, "[ARGS]", 6);
            off = a ? (size_t)(a - t->buf) + 6 : t->len;
            if (!a && t->len > 256) /* no name is that long: not a call */
                off = 0;
        }
        size_t ws = off;
        while (ws < t->len && is_ws(t->buf[ws]))
            ws++;
        bool json = ws < t->len && (t->buf[ws] == '{' || t->buf[ws] == '[');
        if (m->body == TC_BODY_PYTHON_TAG && ws < t->len && !json) {
            have = false; /* name.call(...): runs to the end of the reply */
        } else if (ws < t->len) {
            long span = toolcall_json_span(t->buf + off, t->len - off);
            if (span < 0) {
                body_len = consumed = t->len; /* cannot be a call: what came is content */
                have = true;
            } else if (span > 0) {
                body_len = consumed = off + (size_t)span;
                have = true;
            }
        }
    }
    if (!have && !final) {
        if (t->len <= TOOLCALL_MAX_CALL)
            return STEP_MORE;
        body_len = consumed = t->len; /* too long to be a call */
    } else if (!have) {
        body_len = consumed = t->len;
    }
    rc = tc_parse_body(t, m, t->buf, body_len, cb, arg);
    if (rc == -EINVAL)
        rc = emit_raw(t, m, t->buf, body_len, closed, cb, arg);
    if (rc < 0)
        return rc;
    buf_drop(t, consumed);
    t->n_pre_ws = 0;
    t->implicit_open = false;
    t->state = TC_STATE_CONTENT;
    t->strip_lead = true;
    t->after_close = m->opt_close;
    return STEP_AGAIN;
}

static int run(struct toolcall *t, bool final, toolcall_cb cb, void *arg)
{
    for (;;) {
        int rc;
        switch (t->state) {
        case TC_STATE_START: rc = step_start(t, final); break;
        case TC_STATE_REASONING: rc = step_reasoning(t, final, cb, arg); break;
        case TC_STATE_CONTENT: rc = step_content(t, final, cb, arg); break;
        case TC_STATE_FUNC_NAME: rc = step_func_name(t, final, cb, arg); break;
        case TC_STATE_CALL: rc = step_call(t, final, cb, arg); break;
        default: return -EINVAL;
        }
        if (rc != STEP_AGAIN)
            return rc;
        if (final && t->len == 0 && t->state != TC_STATE_CALL)
            return 0;
    }
}

int toolcall_push(struct toolcall *t, const char *text, size_t len, toolcall_cb cb, void *arg)
{
    int rc = buf_add(t, text, len);
    if (rc < 0)
        return rc;
    if (t->state == TC_STATE_START && t->cfg.format == TOOLCALL_FORMAT_FUNCTIONARY) {
        t->state = TC_STATE_FUNC_NAME; /* the prompt ended in ">>>" */
        t->implicit_open = true;
    }
    else if (t->state == TC_STATE_START && t->cfg.reasoning && t->cfg.in_think)
        t->state = TC_STATE_REASONING;
    return run(t, false, cb, arg);
}

int toolcall_finish(struct toolcall *t, toolcall_cb cb, void *arg)
{
    if (t->state == TC_STATE_START && t->len == 0)
        return 0;
    return run(t, true, cb, arg);
}
