/* Jinja values: the arena they live in, construction from JSON, strings that remember which
 * of their bytes are client text, how values print (as @huggingface/jinja prints them: true,
 * 1.0, lists and dicts as JSON), tojson as Python's json.dumps writes it, and JavaScript's
 * equality and ordering, which the reference applies. */
#include "jinja_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */

struct jchunk {
    struct jchunk *next;
    max_align_t data[];
};

void *jarena_alloc(struct jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || n > a->cap - a->used) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->max && a->total + cap > a->max)
            return NULL;
        struct jchunk *c = malloc(sizeof(*c) + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        a->head = c;
        a->used = 0;
        a->cap = cap;
        a->total += cap;
    }
    void *p = (char *)a->head->data + a->used;
    a->used += n;
    return p;
}

void jarena_free(struct jarena *a)
{
    struct jchunk *c = a->head;
    while (c) {
        struct jchunk *next = c->next;
        free(c);
        c = next;
    }
    memset(a, 0, sizeof(*a));
}

void jinja_fail(struct jstate *st, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err, st->errlen, fmt, ap);
    va_end(ap);
    st->rc = rc;
    longjmp(st->fail, 1);
}

void *jinja_alloc(struct jstate *st, size_t n)
{
    void *p = jarena_alloc(&st->arena, n);
    if (!p)
        jinja_fail(st, -ENOMEM, "the template used more than %zu bytes of memory", st->arena.max);
    return p;
}

/* ---- UTF-8 ---- */

uint32_t ju_decode(const char *p, size_t len, size_t *adv)
{
    const unsigned char *s = (const unsigned char *)p;
    if (len == 0) {
        *adv = 0;
        return 0;
    }
    unsigned n = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3
               : (s[0] >> 3) == 30 ? 4 : 1;
    if (n > len)
        n = 1;
    for (unsigned i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            n = 1;
    *adv = n;
    switch (n) {
    case 2: return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3: return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    case 4:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
               (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    default: return s[0];
    }
}

size_t ju_count(const char *p, size_t len)
{
    size_t n = 0, adv;
    for (size_t i = 0; i < len; i += adv, n++)
        ju_decode(p + i, len - i, &adv);
    return n;
}

size_t ju_offset(const char *p, size_t len, size_t idx)
{
    size_t i = 0, adv;
    while (idx-- && i < len) {
        ju_decode(p + i, len - i, &adv);
        i += adv;
    }
    return i;
}

/* JavaScript's whitespace (\s, trim()) */
bool ju_is_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == ' ' || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

/* ---- values ---- */

struct jv jv_undef = {.kind = JV_UNDEF}, jv_none = {.kind = JV_NONE};
struct jv jv_true = {.kind = JV_BOOL, .u.b = true}, jv_false = {.kind = JV_BOOL, .u.b = false};

struct jv *jv_bool(bool b)
{
    return b ? &jv_true : &jv_false;
}

static struct jv *jv_new(struct jstate *st, enum jv_kind k)
{
    struct jv *v = jinja_alloc(st, sizeof(*v));
    memset(v, 0, sizeof(*v));
    v->kind = k;
    return v;
}

struct jv *jv_int(struct jstate *st, int64_t i)
{
    struct jv *v = jv_new(st, JV_INT);
    v->u.i = i;
    return v;
}

struct jv *jv_float(struct jstate *st, double f)
{
    struct jv *v = jv_new(st, JV_FLOAT);
    v->u.f = f;
    return v;
}

struct jv *jv_str(struct jstate *st, const char *p, size_t len, bool tainted)
{
    struct jv *v = jv_new(st, JV_STR);
    char *s = jinja_alloc(st, len + 1);
    if (len)
        memcpy(s, p, len);
    s[len] = '\0';
    v->u.s.p = s;
    v->u.s.len = len;
    if (tainted && len) {
        v->u.s.sp = jinja_alloc(st, sizeof(struct jspan));
        v->u.s.sp[0] = (struct jspan){0, len};
        v->u.s.nsp = 1;
    }
    return v;
}

struct jv *jv_str_buf(struct jstate *st, const struct jbuf *b)
{
    struct jv *v = jv_str(st, b->p ? b->p : "", b->len, false);
    if (b->nsp) {
        v->u.s.sp = jinja_alloc(st, b->nsp * sizeof(struct jspan));
        memcpy(v->u.s.sp, b->sp, b->nsp * sizeof(struct jspan));
        v->u.s.nsp = b->nsp;
    }
    return v;
}

struct jv *jv_list(struct jstate *st, size_t cap)
{
    struct jv *v = jv_new(st, JV_LIST);
    if (cap) {
        v->u.l.v = jinja_alloc(st, cap * sizeof(struct jv *));
        v->u.l.cap = cap;
    }
    return v;
}

void jv_list_push(struct jstate *st, struct jv *l, struct jv *x)
{
    if (l->u.l.n == l->u.l.cap) {
        size_t cap = l->u.l.cap ? 2 * l->u.l.cap : 4;
        struct jv **nv = jinja_alloc(st, cap * sizeof(*nv));
        if (l->u.l.n)
            memcpy(nv, l->u.l.v, l->u.l.n * sizeof(*nv));
        l->u.l.v = nv;
        l->u.l.cap = cap;
    }
    l->u.l.v[l->u.l.n++] = x;
}

struct jv *jv_dict(struct jstate *st, size_t cap)
{
    struct jv *v = jv_new(st, JV_DICT);
    if (cap) {
        v->u.d.k = jinja_alloc(st, cap * sizeof(struct jv *));
        v->u.d.v = jinja_alloc(st, cap * sizeof(struct jv *));
        v->u.d.cap = cap;
    }
    return v;
}

struct jv *jv_dict_get(const struct jv *d, const char *key, size_t len)
{
    for (size_t i = 0; i < d->u.d.n; i++) {
        const struct jv *k = d->u.d.k[i];
        if (k->u.s.len == len && !memcmp(k->u.s.p, key, len))
            return d->u.d.v[i];
    }
    return NULL;
}

void jv_dict_set(struct jstate *st, struct jv *d, struct jv *k, struct jv *x)
{
    jinja_work(st, 16 * d->u.d.n);
    for (size_t i = 0; i < d->u.d.n; i++) {
        const struct jv *ki = d->u.d.k[i];
        if (ki->u.s.len == k->u.s.len && !memcmp(ki->u.s.p, k->u.s.p, k->u.s.len)) {
            d->u.d.v[i] = x;
            return;
        }
    }
    if (d->u.d.n == d->u.d.cap) {
        size_t cap = d->u.d.cap ? 2 * d->u.d.cap : 4;
        struct jv **nk = jinja_alloc(st, cap * sizeof(*nk)), **nv = jinja_alloc(st, cap * sizeof(*nv));
        if (d->u.d.n) {
            memcpy(nk, d->u.d.k, d->u.d.n * sizeof(*nk));
            memcpy(nv, d->u.d.v, d->u.d.n * sizeof(*nv));
        }
        d->u.d.k = nk;
        d->u.d.v = nv;
        d->u.d.cap = cap;
    }
    d->u.d.k[d->u.d.n] = k;
    d->u.d.v[d->u.d.n++] = x;
}

struct jv *jv_func(struct jstate *st, jbuiltin_fn fn, struct jv *self, const char *name)
{
    struct jv *v = jv_new(st, JV_FUNC);
    v->u.fn.fn = fn;
    v->u.fn.self = self;
    v->u.fn.name = name;
    return v;
}

struct jv *jv_from_json(struct jstate *st, const json_t *j, bool tainted, unsigned depth)
{
    if (depth > st->max_depth)
        jinja_fail(st, -EINVAL, "the template's input is nested deeper than %u", st->max_depth);
    switch (json_typeof(j)) {
    case JSON_NULL: return &jv_none;
    case JSON_TRUE: return &jv_true;
    case JSON_FALSE: return &jv_false;
    case JSON_INTEGER: return jv_int(st, json_integer_value(j));
    case JSON_REAL: {
        double f = json_real_value(j); /* JavaScript has one number: 2.0 is the integer 2 */
        if (f == floor(f) && fabs(f) < 9007199254740992.0)
            return jv_int(st, (int64_t)f);
        return jv_float(st, f);
    }
    case JSON_STRING: return jv_str(st, json_string_value(j), json_string_length(j), tainted);
    case JSON_ARRAY: {
        struct jv *l = jv_list(st, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++)
            jv_list_push(st, l, jv_from_json(st, json_array_get(j, i), tainted, depth + 1));
        return l;
    }
    case JSON_OBJECT: {
        struct jv *d = jv_dict(st, json_object_size(j));
        const char *k;
        json_t *x;
        d->tkeys = tainted;
        json_object_foreach((json_t *)j, k, x) {
            d->u.d.k[d->u.d.n] = jv_str(st, k, strlen(k), tainted);
            d->u.d.v[d->u.d.n++] = jv_from_json(st, x, tainted, depth + 1);
        }
        return d;
    }
    }
    return &jv_undef;
}

const char *jv_type_name(const struct jv *v)
{
    static const char *const names[] = {"UndefinedValue", "NullValue",   "BooleanValue",
                                        "IntegerValue",   "FloatValue",  "StringValue",
                                        "ArrayValue",     "ObjectValue", "NamespaceValue",
                                        "FunctionValue"};
    if (v->kind == JV_LIST && v->tuple)
        return "TupleValue";
    if (v->kind == JV_DICT && v->kwargs)
        return "KeywordArgumentsValue";
    return names[v->kind];
}

bool jv_truthy(const struct jv *v)
{
    switch (v->kind) {
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0 && !isnan(v->u.f);
    case JV_STR: return v->u.s.len > 0;
    case JV_LIST: return v->u.l.n > 0;
    case JV_DICT: return v->u.d.n > 0;
    case JV_NS:
    case JV_FUNC: return true;
    default: return false;
    }
}

bool jv_is_number(const struct jv *v)
{
    return v->kind == JV_INT || v->kind == JV_FLOAT;
}

double jv_num(const struct jv *v)
{
    return v->kind == JV_INT ? (double)v->u.i : v->kind == JV_FLOAT ? v->u.f : v->u.b;
}

/* Number(string) of JavaScript: blank is 0, otherwise the whole trimmed text or NaN. */
static double js_number(const struct jv *s)
{
    const char *p = s->u.s.p, *e = p + s->u.s.len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13)))
        p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13)))
        e--;
    if (p == e)
        return 0;
    char buf[64];
    if ((size_t)(e - p) >= sizeof(buf))
        return NAN;
    memcpy(buf, p, (size_t)(e - p));
    buf[e - p] = '\0';
    char *end;
    double d = strtod(buf, &end);
    return *end || strpbrk(buf, "xXpP(nN") ? NAN : d;
}

bool jv_loose_eq(const struct jv *a, const struct jv *b)
{
    bool an = a->kind == JV_NONE || a->kind == JV_UNDEF, bn = b->kind == JV_NONE || b->kind == JV_UNDEF;
    if (an || bn)
        return an && bn;
    bool anum = a->kind == JV_INT || a->kind == JV_FLOAT || a->kind == JV_BOOL;
    bool bnum = b->kind == JV_INT || b->kind == JV_FLOAT || b->kind == JV_BOOL;
    if (anum && bnum)
        return jv_num(a) == jv_num(b);
    if (a->kind == JV_STR && b->kind == JV_STR)
        return a->u.s.len == b->u.s.len && !memcmp(a->u.s.p, b->u.s.p, a->u.s.len);
    if (a->kind == JV_STR && bnum)
        return js_number(a) == jv_num(b);
    if (b->kind == JV_STR && anum)
        return js_number(b) == jv_num(a);
    return a == b; /* lists, dicts, namespaces, functions: the same object */
}

bool jv_strict_eq(const struct jv *a, const struct jv *b)
{
    if (jv_is_number(a) && jv_is_number(b))
        return jv_num(a) == jv_num(b);
    if (a->kind != b->kind)
        return (a->kind == JV_NONE || a->kind == JV_UNDEF) && a->kind == b->kind;
    switch (a->kind) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_BOOL: return a->u.b == b->u.b;
    case JV_STR: return a->u.s.len == b->u.s.len && !memcmp(a->u.s.p, b->u.s.p, a->u.s.len);
    default: return a == b;
    }
}

static int cmp_lower(const struct jv *a, const struct jv *b)
{
    size_t n = a->u.s.len < b->u.s.len ? a->u.s.len : b->u.s.len;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a->u.s.p[i], y = (unsigned char)b->u.s.p[i];
        if (x >= 'A' && x <= 'Z')
            x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z')
            y = (unsigned char)(y + 32);
        if (x != y)
            return x < y ? -1 : 1;
    }
    return a->u.s.len < b->u.s.len ? -1 : a->u.s.len > b->u.s.len;
}

int jv_compare(struct jstate *st, const struct jv *a, const struct jv *b, bool case_sensitive)
{
    if (a->kind == JV_NONE && b->kind == JV_NONE)
        return 0;
    if (a->kind == JV_UNDEF && b->kind == JV_UNDEF)
        return 0;
    if (a->kind == JV_NONE || b->kind == JV_NONE || a->kind == JV_UNDEF || b->kind == JV_UNDEF)
        jinja_fail(st, -EINVAL, "Cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
    bool anum = a->kind == JV_INT || a->kind == JV_FLOAT || a->kind == JV_BOOL;
    bool bnum = b->kind == JV_INT || b->kind == JV_FLOAT || b->kind == JV_BOOL;
    if (anum && bnum) {
        double x = jv_num(a), y = jv_num(b);
        return x < y ? -1 : x > y;
    }
    if (a->kind != b->kind || a->tuple != b->tuple)
        jinja_fail(st, -EINVAL, "Cannot compare different types: %s and %s", jv_type_name(a),
                   jv_type_name(b));
    if (a->kind != JV_STR)
        jinja_fail(st, -EINVAL, "Cannot compare type: %s", jv_type_name(a));
    if (!case_sensitive)
        return cmp_lower(a, b);
    size_t n = a->u.s.len < b->u.s.len ? a->u.s.len : b->u.s.len;
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    return c ? (c < 0 ? -1 : 1) : (a->u.s.len < b->u.s.len ? -1 : a->u.s.len > b->u.s.len);
}

bool jv_tainted(const struct jv *v, unsigned depth)
{
    if (depth > 64)
        return true;
    switch (v->kind) {
    case JV_STR: return v->u.s.nsp > 0;
    case JV_LIST:
        for (size_t i = 0; i < v->u.l.n; i++)
            if (jv_tainted(v->u.l.v[i], depth + 1))
                return true;
        return false;
    case JV_DICT:
    case JV_NS:
        if (v->tkeys)
            return true;
        for (size_t i = 0; i < v->u.d.n; i++)
            if (jv_tainted(v->u.d.v[i], depth + 1) || jv_tainted(v->u.d.k[i], depth + 1))
                return true;
        return false;
    default: return false;
    }
}

void jinja_work(struct jstate *st, size_t n)
{
    st->steps += n / 16;
    if (st->steps > st->max_steps)
        jinja_fail(st, -ELOOP, "the template ran past %lu steps (a loop without end?)",
                   st->max_steps);
}

/* ---- buffers ---- */

void jbuf_taint(struct jstate *st, struct jbuf *b, size_t off, size_t n)
{
    size_t end = off + n;
    if (!n)
        return;
    /* spans it covers go; one it touches grows */
    while (b->nsp && b->sp[b->nsp - 1].off >= off) {
        struct jspan *l = &b->sp[--b->nsp];
        if (l->off + l->len > end)
            end = l->off + l->len;
    }
    if (b->nsp && b->sp[b->nsp - 1].off + b->sp[b->nsp - 1].len >= off) {
        struct jspan *l = &b->sp[b->nsp - 1];
        if (end > l->off + l->len)
            l->len = end - l->off;
        return;
    }
    n = end - off;
    if (b->nsp == b->capsp) {
        size_t cap = b->capsp ? 2 * b->capsp : 8;
        struct jspan *ns = jinja_alloc(st, cap * sizeof(*ns));
        if (b->nsp)
            memcpy(ns, b->sp, b->nsp * sizeof(*ns));
        b->sp = ns;
        b->capsp = cap;
    }
    b->sp[b->nsp++] = (struct jspan){off, n};
}

void jbuf_put(struct jstate *st, struct jbuf *b, const char *p, size_t n, bool tainted)
{
    if (n + 1 > b->cap - b->len || !b->p) {
        size_t cap = b->cap ? b->cap : 64;
        while (n + 1 > cap - b->len) {
            if (cap > ((size_t)1 << 40))
                jinja_fail(st, -ENOMEM, "the template's output is too large");
            cap *= 2;
        }
        char *np = jinja_alloc(st, cap);
        if (b->len)
            memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    if (tainted)
        jbuf_taint(st, b, b->len, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void jbuf_puts(struct jstate *st, struct jbuf *b, const char *s)
{
    jbuf_put(st, b, s, strlen(s), false);
}

void jbuf_put_substr(struct jstate *st, struct jbuf *b, const struct jv *s, size_t off, size_t n)
{
    size_t base = b->len;
    jbuf_put(st, b, s->u.s.p + off, n, false);
    for (size_t i = 0; i < s->u.s.nsp; i++) {
        size_t lo = s->u.s.sp[i].off, hi = lo + s->u.s.sp[i].len;
        if (lo < off)
            lo = off;
        if (hi > off + n)
            hi = off + n;
        if (lo < hi)
            jbuf_taint(st, b, base + lo - off, hi - lo);
    }
}

void jbuf_put_str(struct jstate *st, struct jbuf *b, const struct jv *s)
{
    jbuf_put_substr(st, b, s, 0, s->u.s.len);
}

/* ---- printing ---- */

/* JavaScript's Number.prototype.toString: the shortest text that reads back to f. */
void jv_write_number(struct jbuf *b, struct jstate *st, double f, bool js)
{
    char buf[64];
    if (isnan(f)) {
        jbuf_puts(st, b, "NaN");
        return;
    }
    if (isinf(f)) {
        jbuf_puts(st, b, f < 0 ? "-Infinity" : "Infinity");
        return;
    }
    if (!js && f == floor(f) && fabs(f) < 1e21) { /* FloatValue: 2.0 */
        if (f == 0 && signbit(f)) {
            jbuf_puts(st, b, "-0.0");
            return;
        }
        snprintf(buf, sizeof(buf), "%.1f", f);
        jbuf_puts(st, b, buf);
        return;
    }
    if (f == 0) {
        jbuf_puts(st, b, "0");
        return;
    }
    int prec;
    for (prec = 1; prec < 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f)
            break;
    }
    snprintf(buf, sizeof(buf), "%.*e", prec - 1, f);
    /* buf: [-]d[.ddd]e[+-]xx; digits and exponent as JavaScript lays them out */
    char digits[32] = {0};
    size_t nd = 0;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int e = atoi(p + 1);
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (e >= 21 || e < -7) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%d", e < 0 ? '-' : '+', abs(e));
    } else if (e >= 0) {
        for (int i = 0; i <= e || (size_t)i < nd; i++) {
            if (i == e + 1)
                out[o++] = '.';
            out[o++] = (size_t)i < nd ? digits[i] : '0';
        }
    } else {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -e - 1; i++)
            out[o++] = '0';
        memcpy(out + o, digits, nd);
        o += nd;
    }
    jbuf_put(st, b, out, o, false);
}

static void write_int(struct jstate *st, struct jbuf *b, int64_t i)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", (long long)i);
    jbuf_puts(st, b, buf);
}

static void jv_json_string(struct jstate *st, struct jbuf *b, const char *p, size_t len,
                        bool tainted, bool ascii)
{
    size_t start = b->len;
    jbuf_put(st, b, "\"", 1, false);
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)p[i];
        char esc[16];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            jbuf_put(st, b, esc, 2, false);
        } else if (c < 0x20) {
            const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                              : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (named) {
                jbuf_puts(st, b, named);
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                jbuf_puts(st, b, esc);
            }
        } else if (c >= 0x7f && ascii) {
            size_t adv;
            uint32_t cp = ju_decode(p + i, len - i, &adv);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                         0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", cp);
            }
            jbuf_puts(st, b, esc);
            i += adv;
            continue;
        } else {
            jbuf_put(st, b, p + i, 1, false);
        }
        i++;
    }
    jbuf_put(st, b, "\"", 1, false);
    if (tainted)
        jbuf_taint(st, b, start, b->len - start);
}

static void indent_to(struct jstate *st, struct jbuf *b, long indent, unsigned depth)
{
    jbuf_put(st, b, "\n", 1, false);
    for (unsigned d = 0; d < depth; d++)
        for (long i = 0; i < indent; i++)
            jbuf_put(st, b, " ", 1, false);
}

void jv_write_json(struct jstate *st, struct jbuf *b, const struct jv *v,
                   const struct jjson_opts *o, unsigned depth)
{
    const char *isep = o->item_sep ? o->item_sep : o->indent > 0 ? "," : ", ";
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    if (++st->steps > st->max_steps)
        jinja_fail(st, -ELOOP, "the template ran past %lu steps", st->max_steps);
    if (depth > st->max_depth)
        jinja_fail(st, -ELOOP, "the template nested deeper than %u", st->max_depth);
    switch (v->kind) {
    case JV_NONE: jbuf_puts(st, b, "null"); return;
    case JV_UNDEF: jbuf_puts(st, b, o->undef_null ? "null" : "undefined"); return;
    case JV_BOOL: jbuf_puts(st, b, v->u.b ? "true" : "false"); return;
    case JV_INT: write_int(st, b, v->u.i); return;
    case JV_FLOAT:
        if (isnan(v->u.f) || isinf(v->u.f))
            jbuf_puts(st, b, "null");
        else
            jv_write_number(b, st, v->u.f, true);
        return;
    case JV_STR: jv_json_string(st, b, v->u.s.p, v->u.s.len, v->u.s.nsp > 0, o->ensure_ascii); return;
    case JV_LIST:
        if (v->tuple)
            jinja_fail(st, -EINVAL, "Cannot convert to JSON: TupleValue");
        jbuf_puts(st, b, "[");
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i)
                jbuf_puts(st, b, isep);
            if (o->indent > 0)
                indent_to(st, b, o->indent, depth + 1);
            jv_write_json(st, b, v->u.l.v[i], o, depth + 1);
        }
        if (o->indent > 0 && v->u.l.n)
            indent_to(st, b, o->indent, depth);
        jbuf_puts(st, b, "]");
        return;
    case JV_DICT:
    case JV_NS: {
        size_t n = v->u.d.n, *order = jinja_alloc(st, (n ? n : 1) * sizeof(size_t));
        for (size_t i = 0; i < n; i++)
            order[i] = i;
        if (o->sort_keys) /* insertion sort: stable, as Array.prototype.sort */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && cmp_lower(v->u.d.k[order[j - 1]], v->u.d.k[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        jbuf_puts(st, b, "{");
        for (size_t i = 0; i < n; i++) {
            const struct jv *k = v->u.d.k[order[i]];
            if (i)
                jbuf_puts(st, b, isep);
            if (o->indent > 0)
                indent_to(st, b, o->indent, depth + 1);
            jv_json_string(st, b, k->u.s.p, k->u.s.len, k->u.s.nsp > 0 || v->tkeys, o->ensure_ascii);
            jbuf_puts(st, b, ksep);
            jv_write_json(st, b, v->u.d.v[order[i]], o, depth + 1);
        }
        if (o->indent > 0 && n)
            indent_to(st, b, o->indent, depth);
        jbuf_puts(st, b, "}");
        return;
    }
    default: jinja_fail(st, -EINVAL, "Cannot convert to JSON: %s", jv_type_name(v));
    }
}

void jv_write(struct jstate *st, struct jbuf *b, const struct jv *v)
{
    static const struct jjson_opts plain = {0};
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE: return;
    case JV_BOOL: jbuf_puts(st, b, v->u.b ? "true" : "false"); return;
    case JV_INT: write_int(st, b, v->u.i); return;
    case JV_FLOAT: jv_write_number(b, st, v->u.f, false); return;
    case JV_STR: jbuf_put_str(st, b, v); return;
    case JV_FUNC: jbuf_puts(st, b, "[function]"); return;
    default: jv_write_json(st, b, v, &plain, 0);
    }
}

void jv_write_js(struct jstate *st, struct jbuf *b, const struct jv *v)
{
    switch (v->kind) {
    case JV_UNDEF: jbuf_puts(st, b, "undefined"); return;
    case JV_NONE: jbuf_puts(st, b, "null"); return;
    case JV_FLOAT: jv_write_number(b, st, v->u.f, true); return;
    case JV_LIST: /* Array.prototype.toString: each item's RuntimeValue.toString() */
        for (size_t i = 0; i < v->u.l.n; i++) {
            const struct jv *x = v->u.l.v[i];
            if (i)
                jbuf_puts(st, b, ",");
            if (x->kind == JV_NONE || x->kind == JV_UNDEF)
                jbuf_puts(st, b, x->kind == JV_NONE ? "null" : "undefined");
            else
                jv_write(st, b, x);
        }
        return;
    case JV_DICT:
    case JV_NS: jbuf_puts(st, b, "[object Map]"); return;
    default: jv_write(st, b, v);
    }
}
