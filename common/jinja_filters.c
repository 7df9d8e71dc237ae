/* Jinja's library as @huggingface/jinja has it: filters (chosen by the operand's type, as the
 * reference does), tests, attribute lookup with the string and dict methods, and the globals
 * (raise_exception, range, strftime_now, namespace, true/false/none). String operations keep
 * track of which bytes are client text: a strip or a slice keeps the taint of what it keeps,
 * anything that rewrites text marks all of its result tainted when any input was. */
#include "jinja_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings ---- */

static bool str_eq(const struct jv *v, const char *s)
{
    return v->kind == JV_STR && v->u.s.len == strlen(s) && !memcmp(v->u.s.p, s, v->u.s.len);
}

struct jv *jstr_strip(struct jstate *st, struct jv *s, bool left, bool right)
{
    const char *p = s->u.s.p;
    size_t lo = 0, hi = s->u.s.len, adv;
    while (left && lo < hi) {
        uint32_t cp = ju_decode(p + lo, hi - lo, &adv);
        if (!ju_is_space(cp))
            break;
        lo += adv;
    }
    while (right && hi > lo) {
        size_t k = hi - 1;
        while (k > lo && ((unsigned char)p[k] & 0xC0) == 0x80)
            k--;
        if (!ju_is_space(ju_decode(p + k, hi - k, &adv)) || k + adv != hi)
            break;
        hi = k;
    }
    struct jbuf b = {0};
    jbuf_put(st, &b, "", 0, false);
    jbuf_put_substr(st, &b, s, lo, hi - lo);
    return jv_str_buf(st, &b);
}

/* A rewritten string: tainted whole when its source was. */
static struct jv *derived(struct jstate *st, const char *p, size_t n, bool tainted)
{
    return jv_str(st, p, n, tainted);
}

static struct jv *str_case(struct jstate *st, struct jv *s, int mode)
{
    char *t = jinja_alloc(st, s->u.s.len + 1);
    bool word_start = true;
    for (size_t i = 0; i < s->u.s.len; i++) {
        char c = s->u.s.p[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        if (mode == 0 && c >= 'a' && c <= 'z')
            c = (char)(c - 32);
        else if (mode == 1 && c >= 'A' && c <= 'Z')
            c = (char)(c + 32);
        else if (mode == 2 && word_start && c >= 'a' && c <= 'z') /* title: \b\w */
            c = (char)(c - 32);
        else if (mode == 3 && i == 0 && c >= 'a' && c <= 'z') /* capitalize */
            c = (char)(c - 32);
        word_start = !alnum;
        t[i] = c;
    }
    return derived(st, t, s->u.s.len, s->u.s.nsp > 0);
}

static struct jv *substr(struct jstate *st, struct jv *s, size_t off, size_t n)
{
    struct jbuf b = {0};
    jbuf_put(st, &b, "", 0, false);
    jbuf_put_substr(st, &b, s, off, n);
    return jv_str_buf(st, &b);
}

static struct jv *str_split(struct jstate *st, struct jv *s, struct jv *sep, struct jv *max)
{
    jinja_work(st, s->u.s.len);
    struct jv *out = jv_list(st, 4);
    int64_t maxsplit = max ? max->u.i : -1;
    const char *p = s->u.s.p;
    size_t len = s->u.s.len, adv;
    if (!sep || sep->kind == JV_NONE) {
        size_t i = 0;
        while (i < len && ju_is_space(ju_decode(p + i, len - i, &adv)))
            i += adv;
        while (i < len) {
            size_t start = i;
            if (maxsplit != -1 && (int64_t)out->u.l.n >= maxsplit) {
                jv_list_push(st, out, substr(st, s, start, len - start));
                return out;
            }
            while (i < len && !ju_is_space(ju_decode(p + i, len - i, &adv)))
                i += adv;
            jv_list_push(st, out, substr(st, s, start, i - start));
            while (i < len && ju_is_space(ju_decode(p + i, len - i, &adv)))
                i += adv;
        }
        return out;
    }
    if (sep->u.s.len == 0)
        jinja_fail(st, -EINVAL, "empty separator");
    size_t start = 0, n = sep->u.s.len;
    for (;;) {
        const char *hit = NULL;
        if (maxsplit == -1 || (int64_t)out->u.l.n < maxsplit)
            hit = memmem(p + start, len - start, sep->u.s.p, n);
        if (!hit) {
            jv_list_push(st, out, substr(st, s, start, len - start));
            return out;
        }
        jv_list_push(st, out, substr(st, s, start, (size_t)(hit - p) - start));
        start = (size_t)(hit - p) + n;
    }
}

static struct jv *str_replace(struct jstate *st, struct jv *s, struct jv *from, struct jv *to,
                              int64_t count)
{
    struct jbuf b = {0};
    bool t = s->u.s.nsp || to->u.s.nsp;
    jinja_work(st, s->u.s.len);
    jbuf_put(st, &b, "", 0, false);
    if (count == 0)
        return s;
    int64_t left = count < 0 ? INT64_MAX : count;
    const char *p = s->u.s.p;
    size_t len = s->u.s.len, i = 0, adv;
    if (from->u.s.len == 0) { /* between every character, and at both ends */
        for (;;) {
            if (left > 0) {
                jbuf_put(st, &b, to->u.s.p, to->u.s.len, t);
                left--;
            }
            if (i >= len)
                break;
            ju_decode(p + i, len - i, &adv);
            jbuf_put(st, &b, p + i, adv, t);
            i += adv;
        }
        return jv_str_buf(st, &b);
    }
    while (i < len) {
        const char *hit = left > 0 ? memmem(p + i, len - i, from->u.s.p, from->u.s.len) : NULL;
        if (!hit)
            break;
        jbuf_put(st, &b, p + i, (size_t)(hit - p) - i, t);
        jbuf_put(st, &b, to->u.s.p, to->u.s.len, t);
        i = (size_t)(hit - p) + from->u.s.len;
        left--;
    }
    jbuf_put(st, &b, p + i, len - i, t);
    return jv_str_buf(st, &b);
}

static bool affix(struct jstate *st, struct jv *s, struct jv *pat, bool end, const char *what)
{
    jinja_work(st, 16);
    if (pat->kind == JV_STR) {
        size_t n = pat->u.s.len;
        return n <= s->u.s.len && !memcmp(s->u.s.p + (end ? s->u.s.len - n : 0), pat->u.s.p, n);
    }
    if (pat->kind == JV_LIST) {
        for (size_t i = 0; i < pat->u.l.n; i++) {
            if (pat->u.l.v[i]->kind != JV_STR)
                jinja_fail(st, -EINVAL, "%s() tuple elements must be strings", what);
            if (affix(st, s, pat->u.l.v[i], end, what))
                return true;
        }
        return false;
    }
    jinja_fail(st, -EINVAL, "%s() argument must be a string or tuple of strings", what);
}

static struct jv *m_str(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                        struct jv *kw, const char *name)
{
    if (!strcmp(name, "upper"))
        return str_case(st, self, 0);
    if (!strcmp(name, "lower"))
        return str_case(st, self, 1);
    if (!strcmp(name, "title"))
        return str_case(st, self, 2);
    if (!strcmp(name, "capitalize"))
        return str_case(st, self, 3);
    if (!strcmp(name, "strip"))
        return jstr_strip(st, self, true, true);
    if (!strcmp(name, "lstrip"))
        return jstr_strip(st, self, true, false);
    if (!strcmp(name, "rstrip"))
        return jstr_strip(st, self, false, true);
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (n == 0)
            jinja_fail(st, -EINVAL, "%s() requires at least one argument", name);
        return jv_bool(affix(st, self, a[0], name[0] == 'e', name));
    }
    if (!strcmp(name, "split")) {
        struct jv *sep = n > 0 ? a[0] : NULL, *max = n > 1 ? a[1] : NULL;
        if (sep && sep->kind != JV_STR && sep->kind != JV_NONE)
            jinja_fail(st, -EINVAL, "sep argument must be a string or null");
        if (max && max->kind != JV_INT)
            jinja_fail(st, -EINVAL, "maxsplit argument must be a number");
        return str_split(st, self, sep, max);
    }
    /* replace */
    if (n < 2)
        jinja_fail(st, -EINVAL, "replace() requires at least two arguments");
    if (a[0]->kind != JV_STR || a[1]->kind != JV_STR)
        jinja_fail(st, -EINVAL, "replace() arguments must be strings");
    struct jv *count = n > 2 ? a[2] : kw ? jv_dict_get(kw, "count", 5) : NULL;
    if (!count)
        count = &jv_none;
    if (count->kind != JV_INT && count->kind != JV_NONE)
        jinja_fail(st, -EINVAL, "replace() count argument must be a number or null");
    return str_replace(st, self, a[0], a[1], count->kind == JV_INT ? count->u.i : -1);
}

#define STR_METHOD(m)                                                                        \
    static struct jv *sm_##m(struct jstate *st, struct jv *self, struct jv **a, size_t n,    \
                             struct jv *kw)                                                  \
    {                                                                                        \
        return m_str(st, self, a, n, kw, #m);                                                \
    }
STR_METHOD(upper)
STR_METHOD(lower)
STR_METHOD(title)
STR_METHOD(capitalize)
STR_METHOD(strip)
STR_METHOD(lstrip)
STR_METHOD(rstrip)
STR_METHOD(startswith)
STR_METHOD(endswith)
STR_METHOD(split)
STR_METHOD(replace)

static const struct {
    const char *name;
    jbuiltin_fn fn;
} str_methods[] = {
    {"upper", sm_upper},   {"lower", sm_lower},           {"strip", sm_strip},
    {"title", sm_title},   {"capitalize", sm_capitalize}, {"rstrip", sm_rstrip},
    {"lstrip", sm_lstrip}, {"startswith", sm_startswith}, {"endswith", sm_endswith},
    {"split", sm_split},   {"replace", sm_replace},
};

/* ---- dicts ---- */

static struct jv *key_value(struct jstate *st, const struct jv *d, size_t i)
{
    struct jv *k = d->u.d.k[i];
    return d->tkeys && !k->u.s.nsp ? jv_str(st, k->u.s.p, k->u.s.len, true) : k;
}

static struct jv *dict_items(struct jstate *st, struct jv *d)
{
    struct jv *l = jv_list(st, d->u.d.n);
    for (size_t i = 0; i < d->u.d.n; i++) {
        struct jv *pair = jv_list(st, 2);
        jv_list_push(st, pair, key_value(st, d, i));
        jv_list_push(st, pair, d->u.d.v[i]);
        jv_list_push(st, l, pair);
    }
    return l;
}

static struct jv *dm_get(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                         struct jv *kw)
{
    (void)st;
    (void)kw;
    if (n == 0 || a[0]->kind != JV_STR)
        jinja_fail(st, -EINVAL, "Object key must be a string: got %s",
                   n ? jv_type_name(a[0]) : "UndefinedValue");
    jinja_work(st, 16 * self->u.d.n);
    struct jv *v = jv_dict_get(self, a[0]->u.s.p, a[0]->u.s.len);
    return v ? v : n > 1 ? a[1] : &jv_none;
}

static struct jv *dm_items(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                           struct jv *kw)
{
    (void)a, (void)n, (void)kw;
    return dict_items(st, self);
}

static struct jv *dm_keys(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                          struct jv *kw)
{
    (void)a, (void)n, (void)kw;
    struct jv *l = jv_list(st, self->u.d.n);
    for (size_t i = 0; i < self->u.d.n; i++)
        jv_list_push(st, l, key_value(st, self, i));
    return l;
}

static struct jv *dm_values(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                            struct jv *kw)
{
    (void)a, (void)n, (void)kw;
    struct jv *l = jv_list(st, self->u.d.n);
    for (size_t i = 0; i < self->u.d.n; i++)
        jv_list_push(st, l, self->u.d.v[i]);
    return l;
}

static struct jv *arg_or(struct jv **a, size_t n, size_t i, struct jv *kw, const char *k,
                         struct jv *def)
{
    struct jv *v = i < n ? a[i] : kw ? jv_dict_get(kw, k, strlen(k)) : NULL;
    return v ? v : def;
}

/* Stable merge-free sort (insertion) of l's items by cmp on keys; n is small in templates,
 * and every comparison counts as a step. */
static void sort_values(struct jstate *st, struct jv **items, struct jv **keys, size_t n,
                        bool reverse, bool cs)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            if (++st->steps > st->max_steps)
                jinja_fail(st, -ELOOP, "the template ran past %lu steps", st->max_steps);
            int c = jv_compare(st, keys[j - 1], keys[j], cs);
            if (reverse)
                c = -c;
            if (c <= 0)
                break;
            struct jv *t = items[j];
            items[j] = items[j - 1];
            items[j - 1] = t;
            t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
        }
}

static struct jv *dm_dictsort(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                              struct jv *kw)
{
    struct jv *cs = arg_or(a, n, 0, kw, "case_sensitive", &jv_false);
    struct jv *by = arg_or(a, n, 1, kw, "by", NULL);
    struct jv *rev = arg_or(a, n, 2, kw, "reverse", &jv_false);
    if (cs->kind != JV_BOOL)
        jinja_fail(st, -EINVAL, "case_sensitive must be a boolean");
    if (by && by->kind != JV_STR)
        jinja_fail(st, -EINVAL, "by must be a string");
    bool by_value = by && str_eq(by, "value");
    if (by && !by_value && !str_eq(by, "key"))
        jinja_fail(st, -EINVAL, "by must be either 'key' or 'value'");
    if (rev->kind != JV_BOOL)
        jinja_fail(st, -EINVAL, "reverse must be a boolean");
    struct jv *items = dict_items(st, self);
    size_t cnt = items->u.l.n;
    struct jv **keys = jinja_alloc(st, (cnt ? cnt : 1) * sizeof(*keys));
    for (size_t i = 0; i < cnt; i++)
        keys[i] = items->u.l.v[i]->u.l.v[by_value];
    sort_values(st, items->u.l.v, keys, cnt, rev->u.b, cs->u.b);
    return items;
}

static const struct {
    const char *name;
    jbuiltin_fn fn;
} dict_methods[] = {
    {"get", dm_get}, {"items", dm_items}, {"keys", dm_keys}, {"values", dm_values},
    {"dictsort", dm_dictsort},
};

static struct jv *dict_method(struct jstate *st, struct jv *d, const char *name)
{
    for (size_t i = 0; i < sizeof(dict_methods) / sizeof(dict_methods[0]); i++)
        if (!strcmp(name, dict_methods[i].name))
            return jv_func(st, dict_methods[i].fn, d, dict_methods[i].name);
    return NULL;
}

/* ---- attribute lookup ---- */

struct jv *jinja_member(struct jstate *st, struct jv *obj, struct jv *key)
{
    if (obj->kind == JV_DICT || obj->kind == JV_NS) {
        if (key->kind != JV_STR)
            jinja_fail(st, -EINVAL, "Cannot access property with non-string: got %s",
                       jv_type_name(key));
        jinja_work(st, 16 * obj->u.d.n);
        struct jv *v = jv_dict_get(obj, key->u.s.p, key->u.s.len);
        if (!v && obj->kind == JV_DICT)
            v = dict_method(st, obj, key->u.s.p);
        return v ? v : &jv_undef;
    }
    if (obj->kind == JV_LIST || obj->kind == JV_STR) {
        if (key->kind == JV_INT) {
            int64_t n = obj->kind == JV_LIST ? (int64_t)obj->u.l.n
                                             : (int64_t)ju_count(obj->u.s.p, obj->u.s.len);
            int64_t i = key->u.i < 0 ? n + key->u.i : key->u.i;
            if (i < 0 || i >= n)
                return &jv_undef;
            if (obj->kind == JV_LIST)
                return obj->u.l.v[i];
            size_t off = ju_offset(obj->u.s.p, obj->u.s.len, (size_t)i), adv;
            ju_decode(obj->u.s.p + off, obj->u.s.len - off, &adv);
            return substr(st, obj, off, adv);
        }
        if (key->kind != JV_STR)
            jinja_fail(st, -EINVAL, "Cannot access property with non-string/non-number: got %s",
                       jv_type_name(key));
        if (str_eq(key, "length"))
            return jv_int(st, obj->kind == JV_LIST ? (int64_t)obj->u.l.n
                                                  : (int64_t)ju_count(obj->u.s.p, obj->u.s.len));
        if (obj->kind == JV_STR)
            for (size_t i = 0; i < sizeof(str_methods) / sizeof(str_methods[0]); i++)
                if (str_eq(key, str_methods[i].name))
                    return jv_func(st, str_methods[i].fn, obj, str_methods[i].name);
        return &jv_undef;
    }
    if (key->kind != JV_STR)
        jinja_fail(st, -EINVAL, "Cannot access property with non-string: got %s",
                   jv_type_name(key));
    return &jv_undef;
}

/* ---- tests ---- */

bool jinja_test(struct jstate *st, struct jv *v, const char *name)
{
    bool str = v->kind == JV_STR;
    if (!strcmp(name, "boolean"))
        return v->kind == JV_BOOL;
    if (!strcmp(name, "callable"))
        return v->kind == JV_FUNC;
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (v->kind != JV_INT)
            jinja_fail(st, -EINVAL, "cannot %s on %s", name, jv_type_name(v));
        return (v->u.i % 2 != 0) == (name[0] == 'o');
    }
    if (!strcmp(name, "false"))
        return v->kind == JV_BOOL && !v->u.b;
    if (!strcmp(name, "true"))
        return v->kind == JV_BOOL && v->u.b;
    if (!strcmp(name, "none"))
        return v->kind == JV_NONE;
    if (!strcmp(name, "string"))
        return str;
    if (!strcmp(name, "number"))
        return jv_is_number(v);
    if (!strcmp(name, "integer"))
        return v->kind == JV_INT;
    if (!strcmp(name, "iterable"))
        return (v->kind == JV_LIST && !v->tuple) || str;
    if (!strcmp(name, "mapping"))
        return v->kind == JV_DICT;
    if (!strcmp(name, "sequence"))
        return v->kind == JV_LIST || v->kind == JV_DICT || str;
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (!str)
            return false;
        for (size_t i = 0; i < v->u.s.len; i++) {
            char c = v->u.s.p[i];
            if (name[0] == 'l' ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z'))
                return false;
        }
        return true;
    }
    if (!strcmp(name, "defined"))
        return v->kind != JV_UNDEF;
    if (!strcmp(name, "undefined"))
        return v->kind == JV_UNDEF;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq"))
        jinja_fail(st, -EINVAL, "the '%s' test needs an argument", name);
    jinja_fail(st, -EINVAL, "Unknown test: %s", name);
}

/* ---- filters ---- */

static struct jv *to_json(struct jstate *st, struct jv *v, const struct jjson_opts *o)
{
    struct jbuf b = {0};
    jbuf_put(st, &b, "", 0, false);
    jv_write_json(st, &b, v, o, 0);
    if (jv_tainted(v, 0)) /* JSON of client data is client text, punctuation and all */
        jbuf_taint(st, &b, 0, b.len);
    return jv_str_buf(st, &b);
}

static struct jv *join(struct jstate *st, struct jv *v, struct jv *sep)
{
    struct jbuf b = {0};
    jbuf_put(st, &b, "", 0, false);
    if (v->kind == JV_STR) {
        size_t adv;
        for (size_t i = 0; i < v->u.s.len; i += adv) {
            if (i)
                jbuf_put_str(st, &b, sep);
            ju_decode(v->u.s.p + i, v->u.s.len - i, &adv);
            jbuf_put_substr(st, &b, v, i, adv);
        }
    } else {
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i && sep)
                jbuf_put_str(st, &b, sep);
            struct jv *x = v->u.l.v[i];
            if (x->kind != JV_NONE && x->kind != JV_UNDEF)
                jv_write_js(st, &b, x);
        }
    }
    return jv_str_buf(st, &b);
}

/* parseInt / parseFloat of JavaScript: leading whitespace, a sign, the longest number. */
static bool parse_number(const struct jv *s, bool integer, double *out)
{
    const char *p = s->u.s.p, *e = p + s->u.s.len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13)))
        p++;
    char buf[128];
    size_t n = 0;
    if (p < e && (*p == '+' || *p == '-'))
        buf[n++] = *p++;
    size_t digits = 0;
    while (p < e && *p >= '0' && *p <= '9' && n < sizeof(buf) - 8) {
        buf[n++] = *p++;
        digits++;
    }
    if (!integer && p < e && *p == '.') {
        buf[n++] = *p++;
        while (p < e && *p >= '0' && *p <= '9' && n < sizeof(buf) - 8) {
            buf[n++] = *p++;
            digits++;
        }
    }
    buf[n] = '\0';
    if (!digits)
        return false;
    *out = strtod(buf, NULL);
    return true;
}

static struct jv *number_filter(struct jstate *st, struct jv *v, bool integer, struct jv *def)
{
    if (v->kind == JV_STR) {
        double d;
        if (!parse_number(v, integer, &d) || !isfinite(d))
            return def;
        if (integer) {
            if (fabs(d) > 9007199254740992.0)
                jinja_fail(st, -EINVAL, "integer out of range");
            return jv_int(st, (int64_t)d);
        }
        return jv_float(st, d);
    }
    if (v->kind == JV_BOOL)
        return integer ? jv_int(st, v->u.b) : jv_float(st, v->u.b);
    jinja_fail(st, -EINVAL, "Cannot apply filter \"%s\" to type: %s", integer ? "int" : "float",
               jv_type_name(v));
}

static struct jv *indent(struct jstate *st, struct jv *s, int64_t width, bool first, bool blank)
{
    struct jbuf b = {0};
    jbuf_put(st, &b, "", 0, false);
    size_t start = 0, line = 0;
    if (width < 0)
        width = 0;
    if (width > 1000)
        jinja_fail(st, -EINVAL, "indent width too large");
    for (;;) {
        const char *nl = memchr(s->u.s.p + start, '\n', s->u.s.len - start);
        size_t end = nl ? (size_t)(nl - s->u.s.p) : s->u.s.len;
        bool skip = (!first && line == 0) || (!blank && end == start);
        if (!skip)
            for (int64_t i = 0; i < width; i++)
                jbuf_put(st, &b, " ", 1, false);
        jbuf_put_substr(st, &b, s, start, end - start);
        if (!nl)
            break;
        jbuf_put_substr(st, &b, s, end, 1);
        start = end + 1;
        line++;
    }
    return jv_str_buf(st, &b);
}

/* The value at a dotted attribute path (map and sort's attribute=). */
static struct jv *attr_path(struct jstate *st, struct jv *item, const char *path)
{
    struct jv *v = item;
    const char *p = path;
    while (1) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (v->kind == JV_DICT || v->kind == JV_NS) {
            jinja_work(st, 16 * v->u.d.n);
            struct jv *x = jv_dict_get(v, p, n);
            v = x ? x : &jv_undef;
        } else if (v->kind == JV_LIST) {
            char num[24];
            if (n == 0 || n >= sizeof(num))
                return &jv_undef;
            memcpy(num, p, n);
            num[n] = '\0';
            char *end;
            long idx = strtol(num, &end, 10);
            if (end == num || idx < 0 || (size_t)idx >= v->u.l.n)
                return &jv_undef;
            v = v->u.l.v[idx];
        } else {
            return &jv_undef;
        }
        if (!dot)
            return v;
        p = dot + 1;
    }
}

static struct jv *filter_plain(struct jstate *st, struct jv *v, const char *f)
{
    if (!strcmp(f, "safe"))
        return v;
    if (!strcmp(f, "tojson"))
        return to_json(st, v, &(struct jjson_opts){.undef_null = true});
    if (v->kind == JV_LIST) {
        if (!strcmp(f, "list"))
            return v;
        if (!strcmp(f, "first"))
            return v->u.l.n ? v->u.l.v[0] : &jv_undef;
        if (!strcmp(f, "last"))
            return v->u.l.n ? v->u.l.v[v->u.l.n - 1] : &jv_undef;
        if (!strcmp(f, "length"))
            return jv_int(st, (int64_t)v->u.l.n);
        if (!strcmp(f, "reverse")) {
            struct jv *r = jv_list(st, v->u.l.n);
            for (size_t i = v->u.l.n; i-- > 0;)
                jv_list_push(st, r, v->u.l.v[i]);
            return r;
        }
        if (!strcmp(f, "sort")) {
            struct jv *r = jv_list(st, v->u.l.n);
            for (size_t i = 0; i < v->u.l.n; i++)
                jv_list_push(st, r, v->u.l.v[i]);
            struct jv **keys = jinja_alloc(st, (r->u.l.n ? r->u.l.n : 1) * sizeof(*keys));
            memcpy(keys, r->u.l.v, r->u.l.n * sizeof(*keys));
            sort_values(st, r->u.l.v, keys, r->u.l.n, false, false);
            return r;
        }
        if (!strcmp(f, "join"))
            return join(st, v, NULL);
        if (!strcmp(f, "string"))
            return to_json(st, v, &(struct jjson_opts){0});
        if (!strcmp(f, "unique")) {
            struct jv *r = jv_list(st, v->u.l.n);
            for (size_t i = 0; i < v->u.l.n; i++) {
                bool seen = false;
                jinja_work(st, 16 * r->u.l.n);
                for (size_t k = 0; k < r->u.l.n && !seen; k++)
                    seen = jv_strict_eq(r->u.l.v[k], v->u.l.v[i]);
                if (!seen)
                    jv_list_push(st, r, v->u.l.v[i]);
            }
            return r;
        }
        jinja_fail(st, -EINVAL, "Unknown ArrayValue filter: %s", f);
    }
    if (v->kind == JV_STR) {
        if (!strcmp(f, "length"))
            return jv_int(st, (int64_t)ju_count(v->u.s.p, v->u.s.len));
        if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "title") ||
            !strcmp(f, "capitalize"))
            return m_str(st, v, NULL, 0, NULL, f);
        if (!strcmp(f, "trim"))
            return jstr_strip(st, v, true, true);
        if (!strcmp(f, "indent"))
            return indent(st, v, 4, false, false);
        if (!strcmp(f, "join") || !strcmp(f, "string"))
            return v;
        if (!strcmp(f, "int") || !strcmp(f, "float"))
            return number_filter(st, v, f[0] == 'i', f[0] == 'i' ? jv_int(st, 0) : jv_float(st, 0));
        jinja_fail(st, -EINVAL, "Unknown StringValue filter: %s", f);
    }
    if (jv_is_number(v)) {
        if (!strcmp(f, "abs"))
            return v->kind == JV_INT ? jv_int(st, v->u.i < 0 && v->u.i != INT64_MIN ? -v->u.i : v->u.i)
                                     : jv_float(st, fabs(v->u.f));
        if (!strcmp(f, "int")) {
            if (v->kind == JV_INT)
                return v;
            if (!isfinite(v->u.f) || fabs(v->u.f) > 9007199254740992.0)
                jinja_fail(st, -EINVAL, "integer out of range");
            return jv_int(st, (int64_t)floor(v->u.f));
        }
        if (!strcmp(f, "float"))
            return jv_float(st, jv_num(v));
        if (!strcmp(f, "string")) {
            struct jbuf b = {0};
            jbuf_put(st, &b, "", 0, false);
            jv_write(st, &b, v);
            return jv_str_buf(st, &b);
        }
        jinja_fail(st, -EINVAL, "Unknown NumericValue filter: %s", f);
    }
    if (v->kind == JV_DICT) {
        if (!strcmp(f, "items"))
            return dict_items(st, v);
        if (!strcmp(f, "length"))
            return jv_int(st, (int64_t)v->u.d.n);
        struct jv *m = dict_method(st, v, f);
        if (m)
            return jinja_call(st, NULL, m, NULL, 0, NULL);
        jinja_fail(st, -EINVAL, "Unknown ObjectValue filter: %s", f);
    }
    if (v->kind == JV_BOOL) {
        if (!strcmp(f, "bool"))
            return v;
        if (!strcmp(f, "int"))
            return jv_int(st, v->u.b);
        if (!strcmp(f, "float"))
            return jv_float(st, v->u.b);
        if (!strcmp(f, "string"))
            return jv_str(st, v->u.b ? "true" : "false", v->u.b ? 4 : 5, false);
        jinja_fail(st, -EINVAL, "Unknown BooleanValue filter: %s", f);
    }
    jinja_fail(st, -EINVAL, "Cannot apply filter \"%s\" to type: %s", f, jv_type_name(v));
}

static bool all_string_literals(const struct jn *call)
{
    for (size_t i = 0; i < call->n; i++)
        if (call->kids[i]->kind != JN_STR)
            return false;
    return true;
}

static struct jv *select_attr(struct jstate *st, struct jenv *env, struct jv *v,
                              const struct jn *call, bool select, const char *f)
{
    for (size_t i = 0; i < v->u.l.n; i++)
        if (v->u.l.v[i]->kind != JV_DICT && v->u.l.v[i]->kind != JV_NS)
            jinja_fail(st, -EINVAL, "`%s` can only be applied to array of objects", f);
    if (!all_string_literals(call))
        jinja_fail(st, -EINVAL, "arguments of `%s` must be strings", f);
    struct jv *attr = call->n > 0 ? jinja_eval(st, env, call->kids[0]) : &jv_undef;
    struct jv *test = call->n > 1 ? jinja_eval(st, env, call->kids[1]) : NULL;
    struct jv *value = call->n > 2 ? jinja_eval(st, env, call->kids[2]) : NULL;
    if (attr->kind != JV_STR)
        jinja_fail(st, -EINVAL, "`%s` needs an attribute name", f);
    struct jv *r = jv_list(st, v->u.l.n);
    for (size_t i = 0; i < v->u.l.n; i++) {
        jinja_work(st, 16 * v->u.l.v[i]->u.d.n);
        struct jv *a = jv_dict_get(v->u.l.v[i], attr->u.s.p, attr->u.s.len);
        bool ok = false;
        if (a) {
            if (!test)
                ok = jv_truthy(a);
            else if (str_eq(test, "equalto") || str_eq(test, "eq"))
                ok = value && jv_strict_eq(a, value);
            else
                ok = jinja_test(st, a, test->u.s.p);
        }
        if (ok == select)
            jv_list_push(st, r, v->u.l.v[i]);
    }
    return r;
}

struct jv *jinja_filter(struct jstate *st, struct jenv *env, struct jv *v, const struct jn *fnode)
{
    if (fnode->kind == JN_IDENT)
        return filter_plain(st, v, fnode->s);
    if (fnode->kind != JN_CALL || fnode->a->kind != JN_IDENT)
        jinja_fail(st, -EINVAL, "Unknown filter");
    const char *f = fnode->a->s;
    struct jv **a, *kw;
    size_t n = jinja_eval_args(st, env, fnode->kids, fnode->n, &a, &kw);
    if (!strcmp(f, "tojson")) {
        struct jv *ind = arg_or(NULL, 0, 0, kw, "indent", &jv_none);
        struct jv *asc = arg_or(NULL, 0, 0, kw, "ensure_ascii", &jv_false);
        struct jv *sk = arg_or(NULL, 0, 0, kw, "sort_keys", &jv_false);
        struct jv *sep = arg_or(NULL, 0, 0, kw, "separators", &jv_none);
        struct jjson_opts o = {.undef_null = true};
        if (ind->kind != JV_INT && ind->kind != JV_NONE)
            jinja_fail(st, -EINVAL, "If set, indent must be a number");
        if (asc->kind != JV_BOOL)
            jinja_fail(st, -EINVAL, "If set, ensure_ascii must be a boolean");
        if (sk->kind != JV_BOOL)
            jinja_fail(st, -EINVAL, "If set, sort_keys must be a boolean");
        if (sep->kind == JV_LIST) {
            if (sep->u.l.n != 2 || sep->u.l.v[0]->kind != JV_STR || sep->u.l.v[1]->kind != JV_STR)
                jinja_fail(st, -EINVAL, "separators must be a tuple of two strings");
            o.item_sep = sep->u.l.v[0]->u.s.p;
            o.key_sep = sep->u.l.v[1]->u.s.p;
        } else if (sep->kind != JV_NONE) {
            jinja_fail(st, -EINVAL, "If set, separators must be a tuple of two strings");
        }
        if (ind->kind == JV_INT) {
            if (ind->u.i > 100)
                jinja_fail(st, -EINVAL, "indent too large");
            o.indent = (long)ind->u.i;
        }
        o.ensure_ascii = asc->u.b;
        o.sort_keys = sk->u.b;
        return to_json(st, v, &o);
    }
    if (!strcmp(f, "join")) {
        if (v->kind != JV_STR && v->kind != JV_LIST)
            jinja_fail(st, -EINVAL, "Cannot apply filter \"join\" to type: %s", jv_type_name(v));
        struct jv *sep = arg_or(a, n, 0, kw, "separator", NULL);
        if (sep && sep->kind != JV_STR)
            jinja_fail(st, -EINVAL, "separator must be a string");
        return join(st, v, sep ? sep : jv_str(st, "", 0, false));
    }
    if (!strcmp(f, "int") || !strcmp(f, "float")) {
        bool integer = f[0] == 'i';
        struct jv *def = arg_or(a, n, 0, kw, "default", NULL);
        if (!def)
            def = integer ? jv_int(st, 0) : jv_float(st, 0);
        if (jv_is_number(v))
            return v;
        return number_filter(st, v, integer, def);
    }
    if (!strcmp(f, "default")) {
        struct jv *def = n > 0 ? a[0] : jv_str(st, "", 0, false);
        struct jv *boolean = arg_or(a, n, 1, kw, "boolean", &jv_false);
        if (boolean->kind != JV_BOOL)
            jinja_fail(st, -EINVAL, "`default` filter flag must be a boolean");
        if (v->kind == JV_UNDEF || (boolean->u.b && !jv_truthy(v)))
            return def;
        return v;
    }
    if (v->kind == JV_LIST) {
        if (!strcmp(f, "sort")) {
            struct jv *rev = arg_or(a, n, 0, kw, "reverse", &jv_false);
            struct jv *cs = arg_or(a, n, 1, kw, "case_sensitive", &jv_false);
            struct jv *attr = arg_or(a, n, 2, kw, "attribute", &jv_none);
            if (rev->kind != JV_BOOL)
                jinja_fail(st, -EINVAL, "reverse must be a boolean");
            if (cs->kind != JV_BOOL)
                jinja_fail(st, -EINVAL, "case_sensitive must be a boolean");
            if (attr->kind != JV_STR && attr->kind != JV_INT && attr->kind != JV_NONE)
                jinja_fail(st, -EINVAL, "attribute must be a string, integer, or null");
            char num[24];
            const char *path = attr->kind == JV_STR ? attr->u.s.p : NULL;
            if (attr->kind == JV_INT) {
                snprintf(num, sizeof(num), "%lld", (long long)attr->u.i);
                path = num;
            }
            struct jv *r = jv_list(st, v->u.l.n);
            struct jv **keys = jinja_alloc(st, (v->u.l.n ? v->u.l.n : 1) * sizeof(*keys));
            for (size_t i = 0; i < v->u.l.n; i++) {
                jv_list_push(st, r, v->u.l.v[i]);
                keys[i] = path ? attr_path(st, v->u.l.v[i], path) : v->u.l.v[i];
            }
            sort_values(st, r->u.l.v, keys, r->u.l.n, rev->u.b, cs->u.b);
            return r;
        }
        if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
            return select_attr(st, env, v, fnode, f[0] == 's', f);
        if (!strcmp(f, "map")) {
            struct jv *attr = kw ? jv_dict_get(kw, "attribute", 9) : NULL;
            if (!attr)
                jinja_fail(st, -EINVAL, "`map` expressions without `attribute` set are not "
                                        "currently supported.");
            if (attr->kind != JV_STR)
                jinja_fail(st, -EINVAL, "attribute must be a string");
            struct jv *def = jv_dict_get(kw, "default", 7);
            struct jv *r = jv_list(st, v->u.l.n);
            for (size_t i = 0; i < v->u.l.n; i++) {
                struct jv *it = v->u.l.v[i];
                if (it->kind != JV_DICT && it->kind != JV_NS)
                    jinja_fail(st, -EINVAL, "items in map must be an object");
                struct jv *x = attr_path(st, it, attr->u.s.p);
                jv_list_push(st, r, x->kind == JV_UNDEF && def ? def : x);
            }
            return r;
        }
        jinja_fail(st, -EINVAL, "Unknown ArrayValue filter: %s", f);
    }
    if (v->kind == JV_STR) {
        if (!strcmp(f, "indent")) {
            struct jv *w = arg_or(a, n, 0, kw, "width", NULL);
            struct jv *first = arg_or(a, n, 1, kw, "first", &jv_false);
            struct jv *blank = arg_or(a, n, 2, kw, "blank", &jv_false);
            if (w && w->kind != JV_INT)
                jinja_fail(st, -EINVAL, "width must be a number");
            return indent(st, v, w ? w->u.i : 4, jv_truthy(first), jv_truthy(blank));
        }
        if (!strcmp(f, "replace"))
            return m_str(st, v, a, n, kw, "replace");
        jinja_fail(st, -EINVAL, "Unknown StringValue filter: %s", f);
    }
    if (v->kind == JV_DICT) {
        struct jv *m = dict_method(st, v, f);
        if (m)
            return jinja_call(st, env, m, a, n, kw);
        jinja_fail(st, -EINVAL, "Unknown ObjectValue filter: %s", f);
    }
    jinja_fail(st, -EINVAL, "Cannot apply filter \"%s\" to type: %s", f, jv_type_name(v));
}

/* ---- globals ---- */

static struct jv *g_raise(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                          struct jv *kw)
{
    (void)self, (void)kw;
    struct jbuf b = {0};
    jbuf_put(st, &b, "", 0, false);
    if (n)
        jv_write_js(st, &b, a[0]);
    jinja_fail(st, -EINVAL, "%s", b.p);
}

static struct jv *g_range(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                          struct jv *kw)
{
    (void)self, (void)kw;
    for (size_t i = 0; i < n && i < 3; i++)
        if (a[i]->kind != JV_INT)
            jinja_fail(st, -EINVAL, "range() takes integers");
    if (n == 0)
        jinja_fail(st, -EINVAL, "range() needs an argument");
    int64_t start = 0, stop, stp = 1;
    if (n == 1) {
        stop = a[0]->u.i;
    } else {
        start = a[0]->u.i;
        stop = a[1]->u.i;
        if (n > 2)
            stp = a[2]->u.i;
    }
    if (stp == 0)
        jinja_fail(st, -EINVAL, "range() step must not be zero");
    struct jv *l = jv_list(st, 8);
    for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp) {
        if (++st->steps > st->max_steps)
            jinja_fail(st, -ELOOP, "the template ran past %lu steps", st->max_steps);
        jv_list_push(st, l, jv_int(st, i));
        if ((stp > 0 && i > INT64_MAX - stp) || (stp < 0 && i < INT64_MIN - stp))
            break;
    }
    return l;
}

static struct jv *g_strftime_now(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                                 struct jv *kw)
{
    static const char *const months[] = {"January", "February", "March",     "April",
                                         "May",     "June",     "July",      "August",
                                         "September", "October", "November", "December"};
    (void)self, (void)kw;
    if (n == 0 || a[0]->kind != JV_STR)
        jinja_fail(st, -EINVAL, "strftime_now() takes a format string");
    time_t now = st->now ? st->now : time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    struct jbuf b = {0};
    jbuf_put(st, &b, "", 0, false);
    const char *f = a[0]->u.s.p;
    size_t len = a[0]->u.s.len;
    char tmp[32];
    for (size_t i = 0; i < len; i++) {
        if (f[i] != '%' || i + 1 >= len || !strchr("YmdbBHM%", f[i + 1]) || !f[i + 1]) {
            jbuf_put(st, &b, f + i, 1, false);
            continue;
        }
        switch (f[++i]) {
        case 'Y': snprintf(tmp, sizeof(tmp), "%d", tm.tm_year + 1900); break;
        case 'm': snprintf(tmp, sizeof(tmp), "%02d", tm.tm_mon + 1); break;
        case 'd': snprintf(tmp, sizeof(tmp), "%02d", tm.tm_mday); break;
        case 'b': snprintf(tmp, sizeof(tmp), "%.3s", months[tm.tm_mon]); break;
        case 'B': snprintf(tmp, sizeof(tmp), "%s", months[tm.tm_mon]); break;
        case 'H': snprintf(tmp, sizeof(tmp), "%02d", tm.tm_hour); break;
        case 'M': snprintf(tmp, sizeof(tmp), "%02d", tm.tm_min); break;
        default: snprintf(tmp, sizeof(tmp), "%%"); break;
        }
        jbuf_puts(st, &b, tmp);
    }
    return jv_str_buf(st, &b);
}

static struct jv *g_namespace(struct jstate *st, struct jv *self, struct jv **a, size_t n,
                              struct jv *kw)
{
    (void)self;
    if (n > 1)
        jinja_fail(st, -EINVAL, "namespace expected at most 1 argument, got %zu", n);
    struct jv *ns = jv_dict(st, 4);
    ns->kind = JV_NS;
    if (n == 1) {
        struct jv *src = a[0];
        if (src->kind == JV_DICT) {
            for (size_t i = 0; i < src->u.d.n; i++)
                jv_dict_set(st, ns, src->u.d.k[i], src->u.d.v[i]);
            ns->tkeys = src->tkeys;
        } else if (src->kind == JV_LIST) {
            for (size_t i = 0; i < src->u.l.n; i++) {
                struct jv *pair = src->u.l.v[i];
                if (pair->kind != JV_LIST || pair->u.l.n != 2)
                    jinja_fail(st, -EINVAL, "namespace expected an object or an iterable of "
                                            "[key, value] pairs");
                if (pair->u.l.v[0]->kind != JV_STR)
                    jinja_fail(st, -EINVAL, "namespace keys must be strings");
                jv_dict_set(st, ns, pair->u.l.v[0], pair->u.l.v[1]);
            }
        } else {
            jinja_fail(st, -EINVAL, "'%s' object is not iterable", jv_type_name(src));
        }
    }
    for (size_t i = 0; kw && i < kw->u.d.n; i++)
        jv_dict_set(st, ns, kw->u.d.k[i], kw->u.d.v[i]);
    return ns;
}

void jinja_globals(struct jstate *st, struct jenv *e)
{
    jenv_set(st, e, "false", &jv_false);
    jenv_set(st, e, "true", &jv_true);
    jenv_set(st, e, "none", &jv_none);
    jenv_set(st, e, "False", &jv_false);
    jenv_set(st, e, "True", &jv_true);
    jenv_set(st, e, "None", &jv_none);
    jenv_set(st, e, "raise_exception", jv_func(st, g_raise, NULL, "raise_exception"));
    jenv_set(st, e, "range", jv_func(st, g_range, NULL, "range"));
    jenv_set(st, e, "strftime_now", jv_func(st, g_strftime_now, NULL, "strftime_now"));
    jenv_set(st, e, "namespace", jv_func(st, g_namespace, NULL, "namespace"));
}
