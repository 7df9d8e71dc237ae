/* A call's text into calls (toolcall_impl.h): inside <tool_call>, Qwen3-Coder's
 * <function=...> and GLM's <arg_key>/<arg_value> forms too; the JSON call objects of Hermes, Llama 3,
 * Mistral and Granite ({"name", "arguments" or "parameters"}, alone or in an array), Llama
 * 3.1's name.call(key="value"), DeepSeek R1's call blocks and functionary's name line. The
 * whole body is checked before any call is emitted, so a bad body emits nothing. Arguments
 * are passed on as the model wrote them (only a JSON string holding JSON is unwrapped). */
#include "toolcall_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define MAX_CALLS 64

struct call_ref {
    const char *name, *args;
    size_t name_len, args_len;
    char *owned_name, *owned_args;
};

struct calls {
    uint32_t n;
    struct call_ref c[MAX_CALLS];
};

static void calls_free(struct calls *cs)
{
    for (uint32_t i = 0; i < cs->n; i++) {
        free(cs->c[i].owned_name);
        free(cs->c[i].owned_args);
    }
    cs->n = 0;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && is_ws(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && is_ws((*s)[*n - 1]))
        (*n)--;
}

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || n > 256)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '"' || c == '\\' || c == 0x7f)
            return false;
    }
    return true;
}

/* Whether s[0, n) is exactly one JSON object (jansson's word on it). */
static bool is_object(const char *s, size_t n)
{
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    bool ok = json_is_object(v);
    json_decref(v);
    return ok;
}

static struct call_ref *add(struct calls *cs)
{
    if (cs->n >= MAX_CALLS)
        return NULL;
    struct call_ref *c = &cs->c[cs->n++];
    memset(c, 0, sizeof(*c));
    return c;
}

/* A call whose arguments kiln built as an object (from Python-style or XML-style markup):
 * added with the object written as compact JSON. Returns 0, -EINVAL when the reply already
 * holds MAX_CALLS, or -ENOMEM. */
static int add_built(struct calls *cs, const char *name, size_t name_len, const json_t *args)
{
    struct call_ref *c = add(cs);
    if (!c)
        return -EINVAL;
    c->name = name;
    c->name_len = name_len;
    if (!(c->owned_args = json_dumps(args, JSON_COMPACT)))
        return -ENOMEM;
    c->args = c->owned_args;
    c->args_len = strlen(c->owned_args);
    return 0;
}

/* The arguments value raw: an object as written, or a string holding one (unwrapped). */
static int set_args(struct call_ref *c, const char *v, size_t n)
{
    if (n > 0 && v[0] == '{') {
        if (!is_object(v, n))
            return -EINVAL;
        c->args = v;
        c->args_len = n;
        return 0;
    }
    if (n > 0 && v[0] == '"') {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        const char *s = json_string_value(j);
        size_t len = json_string_length(j);
        int rc = -EINVAL;
        if (s && is_object(s, len) && (c->owned_args = malloc(len ? len : 1))) {
            memcpy(c->owned_args, s, len);
            c->args = c->owned_args;
            c->args_len = len;
            rc = 0;
        }
        json_decref(j);
        return rc;
    }
    return -EINVAL;
}

/* {"name": "...", "arguments"|"parameters": {...}} */
static int call_object(const char *s, size_t n, struct calls *cs)
{
    json_t *o = json_loadb(s, n, 0, NULL), *name;
    const char *v;
    size_t vlen;
    int rc = -EINVAL;
    struct call_ref *c;

    if (!json_is_object(o) || !json_is_string(name = json_object_get(o, "name")) ||
        !valid_name(json_string_value(name), json_string_length(name)) || !(c = add(cs)))
        goto out;
    if (!(c->owned_name = strndup(json_string_value(name), json_string_length(name)))) {
        rc = -ENOMEM;
        goto out;
    }
    c->name = c->owned_name;
    c->name_len = json_string_length(name);
    if (toolcall_json_member(s, n, "arguments", &v, &vlen) == 0 ||
        toolcall_json_member(s, n, "parameters", &v, &vlen) == 0) {
        rc = set_args(c, v, vlen);
    } else {
        c->args = "{}";
        c->args_len = 2;
        rc = 0;
    }
out:
    json_decref(o);
    return rc;
}

/* One call object, or an array of them, and nothing else. */
static int calls_json(const char *s, size_t n, struct calls *cs)
{
    trim(&s, &n);
    long span = toolcall_json_span(s, n);
    if (span <= 0 || (size_t)span != n)
        return -EINVAL;
    if (s[0] == '{')
        return call_object(s, n, cs);
    if (s[0] != '[')
        return -EINVAL;
    size_t p = 1;
    int rc;
    for (;;) {
        long e = toolcall_json_span(s + p, n - p);
        if (e <= 0)
            return -EINVAL; /* an empty array is no call */
        const char *el = s + p;
        size_t elen = (size_t)e;
        trim(&el, &elen);
        if ((rc = call_object(el, elen, cs)) < 0)
            return rc;
        p += (size_t)e;
        while (p < n && is_ws(s[p]))
            p++;
        if (p < n && s[p] == ']')
            return 0;
        if (p >= n || s[p] != ',')
            return -EINVAL;
        p++;
    }
}

/* Llama 3.1's built-in tools: name.call(key="value", key=1) */
static int calls_python(const char *s, size_t n, struct calls *cs)
{
    size_t p = 0;
    trim(&s, &n);
    while (p < n && (s[p] == '_' || s[p] == '-' || (s[p] >= 'a' && s[p] <= 'z') ||
                     (s[p] >= 'A' && s[p] <= 'Z') || (s[p] >= '0' && s[p] <= '9')))
        p++;
    if (p == 0 || n - p < 7 || memcmp(s + p, ".call(", 6) != 0 || s[n - 1] != ')')
        return -EINVAL;
    size_t name_len = p, end = n - 1;
    json_t *args = json_object();
    int rc = -EINVAL;
    if (!args)
        return -ENOMEM;
    p += 6;
    while (p < end) {
        while (p < end && (is_ws(s[p]) || s[p] == ','))
            p++;
        size_t k0 = p;
        while (p < end && s[p] != '=' && !is_ws(s[p]))
            p++;
        if (p >= end || s[p] != '=' || p == k0)
            goto out;
        size_t k1 = p++;
        long v = toolcall_json_span(s + p, end - p);
        if (v == 0) /* a number running to the closing parenthesis */
            v = (long)(end - p);
        json_t *val = v > 0 ? json_loadb(s + p, (size_t)v, JSON_DECODE_ANY, NULL) : NULL;
        if (!val)
            goto out;
        char key[128];
        if (k1 - k0 >= sizeof(key)) {
            json_decref(val);
            goto out;
        }
        memcpy(key, s + k0, k1 - k0);
        key[k1 - k0] = '\0';
        json_object_set_new(args, key, val);
        p += (size_t)v;
    }
    rc = add_built(cs, s, name_len, args);
out:
    json_decref(args);
    return rc;
}

static bool eat(const char *s, size_t n, size_t *p, const char *lit)
{
    size_t l = strlen(lit);
    if (n - *p < l || memcmp(s + *p, lit, l) != 0)
        return false;
    *p += l;
    return true;
}

static void skip_ws(const char *s, size_t n, size_t *p)
{
    while (*p < n && is_ws(s[*p]))
        (*p)++;
}

/* name, a newline, then the arguments object, maybe fenced as ```json ... ``` */
static int call_named(const char *s, size_t n, size_t *p, struct calls *cs)
{
    const char *nl = memchr(s + *p, '\n', n - *p);
    if (!nl)
        return -EINVAL;
    const char *name = s + *p;
    size_t name_len = (size_t)(nl - name);
    trim(&name, &name_len);
    if (!valid_name(name, name_len))
        return -EINVAL;
    *p = (size_t)(nl - s) + 1;
    skip_ws(s, n, p);
    bool fenced = eat(s, n, p, "```json") || eat(s, n, p, "```");
    skip_ws(s, n, p);
    long span = toolcall_json_span(s + *p, n - *p);
    if (span <= 0)
        return -EINVAL;
    struct call_ref *c = add(cs);
    if (!c)
        return -EINVAL;
    c->name = name;
    c->name_len = name_len;
    int rc = set_args(c, s + *p, (size_t)span);
    if (rc < 0)
        return rc;
    *p += (size_t)span;
    skip_ws(s, n, p);
    if (fenced && !eat(s, n, p, "```"))
        return -EINVAL;
    skip_ws(s, n, p);
    return 0;
}

/* <｜tool▁call▁begin｜>function<｜tool▁sep｜>name\n```json\n{...}\n```<｜tool▁call▁end｜>, ... */
static int calls_deepseek(const char *s, size_t n, struct calls *cs)
{
    size_t p = 0;
    int rc;
    skip_ws(s, n, &p);
    if (p >= n)
        return -EINVAL;
    while (p < n) {
        if (!eat(s, n, &p, TC_DS_CALL_BEGIN))
            return -EINVAL;
        const char *sep = memmem(s + p, n - p, TC_DS_SEP, strlen(TC_DS_SEP));
        if (!sep)
            return -EINVAL;
        p = (size_t)(sep - s) + strlen(TC_DS_SEP);
        if ((rc = call_named(s, n, &p, cs)) < 0)
            return rc;
        if (!eat(s, n, &p, TC_DS_CALL_END))
            return -EINVAL;
        skip_ws(s, n, &p);
    }
    return 0;
}

/* A parameter's text as JSON: a number, true/false/null, an object or an array as written,
 * anything else a string (Qwen3-Coder's values are bare text). */
static json_t *xml_value(const char *s, size_t n)
{
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    if (v && !json_is_string(v))
        return v;
    json_decref(v);
    return json_stringn(s, n);
}

/* Qwen3-Coder / Qwen3.5 inside <tool_call>: <function=NAME><parameter=KEY>\nVALUE\n
 * </parameter>...</function> */
static int calls_xml(const char *s, size_t n, struct calls *cs)
{
    size_t p = 0;
    int rc = -EINVAL;
    skip_ws(s, n, &p);
    if (!eat(s, n, &p, "<function="))
        return -EINVAL;
    const char *gt = memchr(s + p, '>', n - p);
    if (!gt || !valid_name(s + p, (size_t)(gt - s) - p))
        return -EINVAL;
    const char *name = s + p;
    size_t name_len = (size_t)(gt - s) - p;
    json_t *args = json_object();
    if (!args)
        return -ENOMEM;
    p = (size_t)(gt - s) + 1;
    for (;;) {
        skip_ws(s, n, &p);
        if (eat(s, n, &p, "</function>"))
            break;
        if (!eat(s, n, &p, "<parameter="))
            goto out;
        const char *kgt = memchr(s + p, '>', n - p);
        const char *end = kgt ? memmem(kgt, n - (size_t)(kgt - s), "</parameter>", 12) : NULL;
        if (!kgt || !end || kgt == s + p || (size_t)(kgt - s) - p >= 128)
            goto out;
        char key[128];
        memcpy(key, s + p, (size_t)(kgt - s) - p);
        key[(size_t)(kgt - s) - p] = '\0';
        const char *v = kgt + 1;
        size_t vlen = (size_t)(end - v);
        if (vlen && v[0] == '\n')
            v++, vlen--;
        if (vlen && v[vlen - 1] == '\n')
            vlen--;
        json_t *val = xml_value(v, vlen);
        if (!val || json_object_set_new(args, key, val) < 0)
            goto out;
        p = (size_t)(end - s) + 12;
    }
    skip_ws(s, n, &p);
    if (p == n)
        rc = add_built(cs, name, name_len, args);
out:
    json_decref(args);
    return rc;
}

/* GLM 4.5/4.6 inside <tool_call>: NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>... */
static int calls_glm(const char *s, size_t n, struct calls *cs)
{
    size_t p = 0, name_len = 0;
    int rc = -EINVAL;
    trim(&s, &n);
    while (name_len < n && s[name_len] != '\n' && s[name_len] != '<')
        name_len++;
    const char *name = s;
    size_t nl = name_len;
    trim(&name, &nl);
    if (!valid_name(name, nl))
        return -EINVAL;
    for (size_t i = 0; i < nl; i++) /* an identifier, not any text between the tags */
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
              (name[i] >= '0' && name[i] <= '9') || strchr("_.:-", name[i])))
            return -EINVAL;
    json_t *args = json_object();
    if (!args)
        return -ENOMEM;
    p = name_len;
    for (;;) {
        skip_ws(s, n, &p);
        if (p >= n)
            break;
        if (!eat(s, n, &p, "<arg_key>"))
            goto out;
        const char *kend = memmem(s + p, n - p, "</arg_key>", 10);
        if (!kend || (size_t)(kend - s) - p >= 128 || kend == s + p)
            goto out;
        char key[128];
        memcpy(key, s + p, (size_t)(kend - s) - p);
        key[(size_t)(kend - s) - p] = '\0';
        p = (size_t)(kend - s) + 10;
        skip_ws(s, n, &p);
        if (!eat(s, n, &p, "<arg_value>"))
            goto out;
        const char *vend = memmem(s + p, n - p, "</arg_value>", 12);
        if (!vend)
            goto out;
        json_t *val = xml_value(s + p, (size_t)(vend - s) - p);
        if (!val || json_object_set_new(args, key, val) < 0)
            goto out;
        p = (size_t)(vend - s) + 12;
    }
    rc = add_built(cs, name, nl, args);
out:
    json_decref(args);
    return rc;
}

/* [TOOL_CALLS] then a JSON list, or name[ARGS]{...} */
static int calls_mistral(const char *s, size_t n, struct calls *cs)
{
    const char *a = memmem(s, n, "[ARGS]", 6);
    if (n == 0 || s[0] == '[' || s[0] == '{' || is_ws(s[0]) || !a)
        return calls_json(s, n, cs);
    size_t name_len = (size_t)(a - s), p = name_len + 6;
    if (!valid_name(s, name_len))
        return -EINVAL;
    long span = toolcall_json_span(s + p, n - p);
    if (span <= 0 || p + (size_t)span != n)
        return -EINVAL;
    struct call_ref *c = add(cs);
    if (!c)
        return -EINVAL;
    c->name = s;
    c->name_len = name_len;
    return set_args(c, s + p, (size_t)span);
}

static int calls_functionary(const char *s, size_t n, struct calls *cs)
{
    size_t p = 0;
    int rc = call_named(s, n, &p, cs);
    if (rc < 0)
        return rc;
    return p == n ? 0 : -EINVAL;
}

int tc_parse_body(struct toolcall *t, const struct tc_marker *m, const char *s, size_t n,
                  toolcall_cb cb, void *arg)
{
    struct calls *cs = calloc(1, sizeof(*cs));
    int rc;
    if (!cs)
        return -ENOMEM;
    switch (m->body) {
    case TC_BODY_JSON: {
        const char *b = s;
        size_t bn = n;
        trim(&b, &bn);
        if (bn > 10 && memcmp(b, "<function=", 10) == 0)
            rc = calls_xml(s, n, cs);
        else if (bn && b[0] != '{' && b[0] != '[')
            rc = calls_glm(s, n, cs);
        else
            rc = calls_json(s, n, cs);
        break;
    }
    case TC_BODY_BARE:
        rc = calls_json(s, n, cs);
        break;
    case TC_BODY_PYTHON_TAG: {
        const char *b = s;
        size_t bn = n;
        trim(&b, &bn);
        rc = bn && (b[0] == '{' || b[0] == '[') ? calls_json(s, n, cs) : calls_python(s, n, cs);
        break;
    }
    case TC_BODY_DEEPSEEK:
        rc = calls_deepseek(s, n, cs);
        break;
    case TC_BODY_FUNCTIONARY:
        rc = calls_functionary(s, n, cs);
        break;
    case TC_BODY_MISTRAL:
        rc = calls_mistral(s, n, cs);
        break;
    default:
        rc = -EINVAL;
    }
    if (rc == 0 && cs->n == 0)
        rc = -EINVAL;
    for (uint32_t i = 0; rc == 0 && i < cs->n; i++)
        rc = tc_emit_call(t, cs->c[i].name, cs->c[i].name_len, cs->c[i].args,
                          cs->c[i].args_len, cb, arg);
    calls_free(cs);
    free(cs);
    return rc;
}
