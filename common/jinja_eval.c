/* Jinja evaluator: walks the tree, writing text to the current output buffer (a macro, a
 * block set or a filter block captures into its own), with @huggingface/jinja's scoping:
 * a for loop has one scope for all its iterations, if does not open one, and a macro runs in
 * a scope below its caller's. Errors unwind with longjmp to jinja_render(): every value and
 * buffer of a render lives in one arena, so unwinding frees everything at once. */
#include "jinja_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

static enum flow exec_block(struct jstate *st, struct jenv *env, struct jn **kids, size_t n);

/* ---- scopes ---- */

struct jenv *jenv_new(struct jstate *st, struct jenv *parent)
{
    struct jenv *e = jinja_alloc(st, sizeof(*e));
    memset(e, 0, sizeof(*e));
    e->parent = parent;
    return e;
}

void jenv_set(struct jstate *st, struct jenv *e, const char *name, struct jv *v)
{
    for (size_t i = 0; i < e->n; i++)
        if (!strcmp(e->names[i], name)) {
            e->vals[i] = v;
            return;
        }
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 8;
        const char **nn = jinja_alloc(st, cap * sizeof(*nn));
        struct jv **nv = jinja_alloc(st, cap * sizeof(*nv));
        if (e->n) {
            memcpy(nn, e->names, e->n * sizeof(*nn));
            memcpy(nv, e->vals, e->n * sizeof(*nv));
        }
        e->names = nn;
        e->vals = nv;
        e->cap = cap;
    }
    e->names[e->n] = name;
    e->vals[e->n++] = v;
}

struct jv *jenv_get(struct jenv *e, const char *name)
{
    for (; e; e = e->parent)
        for (size_t i = e->n; i-- > 0;)
            if (!strcmp(e->names[i], name))
                return e->vals[i];
    return &jv_undef;
}

/* ---- helpers ---- */

static void step(struct jstate *st)
{
    if (++st->steps > st->max_steps)
        jinja_fail(st, -ELOOP, "the template ran past %lu steps (a loop without end?)",
                   st->max_steps);
}

static void deeper(struct jstate *st)
{
    if (++st->depth > st->max_depth)
        jinja_fail(st, -ELOOP, "the template nested deeper than %u (recursion without end?)",
                   st->max_depth);
}

static struct jv *capture(struct jstate *st, struct jenv *env, struct jn **kids, size_t n,
                          bool *broke)
{
    struct jbuf *saved = st->out, buf = {0};
    st->out = &buf;
    enum flow f = exec_block(st, env, kids, n);
    st->out = saved;
    if (broke)
        *broke = f != FLOW_NEXT;
    return jv_str_buf(st, &buf);
}

/* ---- calls ---- */

/* Evaluated arguments: positional (with *spread) into *args, keywords (with **spread) into
 * *kwargs (NULL when none). */
size_t jinja_eval_args(struct jstate *st, struct jenv *env, struct jn **kids, size_t n,
                        struct jv ***args, struct jv **kwargs)
{
    struct jv *pos = jv_list(st, n ? n : 1);
    *kwargs = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct jn *a = kids[i];
        if (a->kind == JN_SPREAD) {
            struct jv *v = jinja_eval(st, env, a->a);
            if (v->kind != JV_LIST)
                jinja_fail(st, -EINVAL, "Cannot unpack non-iterable type: %s", jv_type_name(v));
            for (size_t k = 0; k < v->u.l.n; k++)
                jv_list_push(st, pos, v->u.l.v[k]);
        } else if (a->kind != JN_KWARG && a->kind != JN_KWSPREAD) {
            jv_list_push(st, pos, jinja_eval(st, env, a));
        }
    }
    for (size_t i = 0; i < n; i++) {
        const struct jn *a = kids[i];
        if (a->kind != JN_KWARG && a->kind != JN_KWSPREAD)
            continue;
        if (!*kwargs) {
            *kwargs = jv_dict(st, 4);
            (*kwargs)->kwargs = true;
        }
        if (a->kind == JN_KWARG) {
            if (jv_dict_get(*kwargs, a->s, strlen(a->s)))
                jinja_fail(st, -EINVAL, "Got multiple values for keyword argument '%s'", a->s);
            jv_dict_set(st, *kwargs, jv_str(st, a->s, strlen(a->s), false),
                        jinja_eval(st, env, a->a));
        } else {
            struct jv *v = jinja_eval(st, env, a->a);
            if (v->kind != JV_DICT)
                jinja_fail(st, -EINVAL, "Argument after ** must be a mapping, not %s",
                           jv_type_name(v));
            for (size_t k = 0; k < v->u.d.n; k++) {
                if (jv_dict_get(*kwargs, v->u.d.k[k]->u.s.p, v->u.d.k[k]->u.s.len))
                    jinja_fail(st, -EINVAL, "Got multiple values for keyword argument '%s'",
                               v->u.d.k[k]->u.s.p);
                jv_dict_set(st, *kwargs, v->u.d.k[k], v->u.d.v[k]);
            }
        }
    }
    *args = pos->u.l.v;
    return pos->u.l.n;
}

/* Bind a macro's (or a call block's) parameters in scope: positional, then keywords, then
 * defaults evaluated in the scope; kwargs and varargs for bodies that read them. */
static void bind_params(struct jstate *st, const char *name, struct jn **params, size_t np,
                        unsigned special, struct jv **args, size_t n, struct jv *kwargs,
                        struct jenv *scope)
{
    struct jv *kw = jv_dict(st, 4);
    kw->kwargs = false;
    for (size_t i = 0; kwargs && i < kwargs->u.d.n; i++)
        jv_dict_set(st, kw, kwargs->u.d.k[i], kwargs->u.d.v[i]);
    bool *pending = jinja_alloc(st, (np ? np : 1) * sizeof(bool));
    for (size_t i = 0; i < np; i++) {
        const struct jn *p = params[i];
        struct jv *v = i < n ? args[i] : NULL;
        pending[i] = false;
        if (!v) {
            for (size_t k = 0; k < kw->u.d.n; k++) {
                if (!strcmp(kw->u.d.k[k]->u.s.p, p->s)) {
                    v = kw->u.d.v[k];
                    memmove(kw->u.d.k + k, kw->u.d.k + k + 1, (kw->u.d.n - k - 1) * sizeof(struct jv *));
                    memmove(kw->u.d.v + k, kw->u.d.v + k + 1, (kw->u.d.n - k - 1) * sizeof(struct jv *));
                    kw->u.d.n--;
                    break;
                }
            }
        }
        if (!v && p->kind == JN_KWARG)
            pending[i] = true;
        jenv_set(st, scope, p->s, v ? v : &jv_undef);
    }
    if (special & 1)
        jenv_set(st, scope, "kwargs", kw);
    else if (kw->u.d.n)
        jinja_fail(st, -EINVAL, "macro %s takes no keyword argument '%s'", name,
                   kw->u.d.k[0]->u.s.p);
    if (special & 2) {
        struct jv *va = jv_list(st, 4);
        for (size_t i = np; i < n; i++)
            jv_list_push(st, va, args[i]);
        jenv_set(st, scope, "varargs", va);
    } else if (n > np) {
        jinja_fail(st, -EINVAL, "macro %s takes not more than %zu argument(s)", name, np);
    }
    for (size_t i = 0; i < np; i++)
        if (pending[i])
            jenv_set(st, scope, params[i]->s, jinja_eval(st, scope, params[i]->a));
}

struct jv *jinja_call(struct jstate *st, struct jenv *env, struct jv *fn, struct jv **args,
                      size_t n, struct jv *kwargs)
{
    if (fn->kind != JV_FUNC)
        jinja_fail(st, -EINVAL, "Cannot call something that is not a function: got %s",
                   jv_type_name(fn));
    if (fn->u.fn.fn)
        return fn->u.fn.fn(st, fn->u.fn.self, args, n, kwargs);
    const struct jn *m = fn->u.fn.node;
    deeper(st);
    struct jv *r;
    if (m->kind == JN_MACRO) {
        struct jenv *scope = jenv_new(st, env);
        char name[80];
        snprintf(name, sizeof(name), "'%s'", m->s);
        bind_params(st, name, m->kids, m->n, m->special, args, n, kwargs, scope);
        r = capture(st, scope, m->kids2, m->n2, NULL);
    } else { /* a call block's caller() */
        struct jenv *scope = jenv_new(st, fn->u.fn.env);
        bind_params(st, "None", m->kids, m->n, m->special, args, n, kwargs, scope);
        r = capture(st, scope, m->kids2, m->n2, NULL);
    }
    st->depth--;
    return r;
}

/* ---- expressions ---- */

static int64_t checked(struct jstate *st, bool overflow, int64_t r)
{
    if (overflow)
        jinja_fail(st, -EINVAL, "integer overflow");
    return r;
}

static struct jv *arith(struct jstate *st, enum jop op, struct jv *l, struct jv *r)
{
    bool isf = l->kind == JV_FLOAT || r->kind == JV_FLOAT;
    if (!isf) {
        int64_t a = l->u.i, b = r->u.i, o;
        switch (op) {
        case JOP_ADD: {
            bool ov = __builtin_add_overflow(a, b, &o);
            return jv_int(st, checked(st, ov, o));
        }
        case JOP_SUB: {
            bool ov = __builtin_sub_overflow(a, b, &o);
            return jv_int(st, checked(st, ov, o));
        }
        case JOP_MUL: {
            bool ov = __builtin_mul_overflow(a, b, &o);
            return jv_int(st, checked(st, ov, o));
        }
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (b == 0)
                jinja_fail(st, -EINVAL, "integer division or modulo by zero");
            if (a == INT64_MIN && b == -1)
                jinja_fail(st, -EINVAL, "integer overflow");
            if (op == JOP_MOD)
                return jv_int(st, a % b); /* JavaScript's %: the sign of a */
            return jv_int(st, a / b - ((a % b != 0) && ((a < 0) != (b < 0))));
        default: break;
        }
    }
    double a = jv_num(l), b = jv_num(r);
    switch (op) {
    case JOP_ADD: return jv_float(st, a + b);
    case JOP_SUB: return jv_float(st, a - b);
    case JOP_MUL: return jv_float(st, a * b);
    case JOP_DIV: return jv_float(st, a / b);
    case JOP_FLOORDIV: return jv_float(st, floor(a / b));
    case JOP_MOD: return jv_float(st, fmod(a, b));
    case JOP_LT: return jv_bool(a < b);
    case JOP_GT: return jv_bool(a > b);
    case JOP_LE: return jv_bool(a <= b);
    case JOP_GE: return jv_bool(a >= b);
    default: return NULL;
    }
}

static struct jv *concat(struct jstate *st, struct jv *l, struct jv *r)
{
    struct jbuf b = {0};
    jv_write_js(st, &b, l);
    jv_write_js(st, &b, r);
    return jv_str_buf(st, &b);
}

static bool str_contains(const struct jv *hay, const struct jv *needle)
{
    return needle->u.s.len == 0 ||
           memmem(hay->u.s.p, hay->u.s.len, needle->u.s.p, needle->u.s.len) != NULL;
}

static struct jv *eval_binary(struct jstate *st, struct jenv *env, const struct jn *n)
{
    struct jv *l = jinja_eval(st, env, n->a);
    if (n->op == JOP_AND)
        return jv_truthy(l) ? jinja_eval(st, env, n->b) : l;
    if (n->op == JOP_OR)
        return jv_truthy(l) ? l : jinja_eval(st, env, n->b);
    struct jv *r = jinja_eval(st, env, n->b);
    if (n->op == JOP_EQ)
        return jv_bool(jv_loose_eq(l, r));
    if (n->op == JOP_NE)
        return jv_bool(!jv_loose_eq(l, r));
    bool in = n->op == JOP_IN || n->op == JOP_NOT_IN;
    if (l->kind == JV_UNDEF || r->kind == JV_UNDEF) {
        if (r->kind == JV_UNDEF && in)
            return jv_bool(n->op == JOP_NOT_IN);
        jinja_fail(st, -EINVAL, "Cannot perform operation on undefined values");
    }
    if (l->kind == JV_NONE || r->kind == JV_NONE)
        jinja_fail(st, -EINVAL, "Cannot perform operation on null values");
    if (n->op == JOP_CONCAT)
        return concat(st, l, r);
    bool lnum = jv_is_number(l) || l->kind == JV_BOOL, rnum = jv_is_number(r) || r->kind == JV_BOOL;
    if (n->op == JOP_POW && lnum && rnum) {
        double a = jv_num(l), b = jv_num(r), res = pow(a, b);
        if (a == 0 && b < 0)
            jinja_fail(st, -EINVAL, "0.0 cannot be raised to a negative power");
        if (!isfinite(res))
            jinja_fail(st, -EINVAL, "Exponentiation result is not a finite real number");
        if (l->kind == JV_FLOAT || r->kind == JV_FLOAT || b < 0)
            return jv_float(st, res);
        if (fabs(res) > 9007199254740992.0)
            jinja_fail(st, -EINVAL, "integer overflow");
        return jv_int(st, (int64_t)res);
    }
    if (jv_is_number(l) && jv_is_number(r)) {
        struct jv *v = arith(st, n->op, l, r);
        if (v)
            return v;
    } else if (l->kind == JV_LIST && r->kind == JV_LIST) {
        if (n->op == JOP_ADD) {
            struct jv *c = jv_list(st, l->u.l.n + r->u.l.n);
            for (size_t i = 0; i < l->u.l.n; i++)
                jv_list_push(st, c, l->u.l.v[i]);
            for (size_t i = 0; i < r->u.l.n; i++)
                jv_list_push(st, c, r->u.l.v[i]);
            return c;
        }
    } else if (r->kind == JV_LIST && in) {
        bool member = false;
        jinja_work(st, 16 * r->u.l.n);
        for (size_t i = 0; i < r->u.l.n && !member; i++)
            member = jv_strict_eq(r->u.l.v[i], l);
        return jv_bool(member == (n->op == JOP_IN));
    }
    if ((l->kind == JV_STR || r->kind == JV_STR) && n->op == JOP_ADD)
        return concat(st, l, r);
    if (l->kind == JV_STR && r->kind == JV_STR && in) {
        jinja_work(st, r->u.s.len);
        return jv_bool(str_contains(r, l) == (n->op == JOP_IN));
    }
    if (l->kind == JV_STR && r->kind == JV_DICT && in) {
        jinja_work(st, 16 * r->u.d.n);
        return jv_bool((jv_dict_get(r, l->u.s.p, l->u.s.len) != NULL) == (n->op == JOP_IN));
    }
    jinja_fail(st, -EINVAL, "Unknown operator between %s and %s", jv_type_name(l),
               jv_type_name(r));
}

/* Python-style slicing of n items, as the reference's slice(). Fills idx, returns count. */
static size_t slice_indices(struct jstate *st, size_t len, struct jv *a, struct jv *b,
                            struct jv *c, size_t **idx)
{
    int64_t n = (int64_t)len, step = c->kind == JV_INT ? c->u.i : 1, start, stop;
    if (step == 0)
        jinja_fail(st, -EINVAL, "slice step cannot be zero");
    if (step > 0) {
        start = a->kind == JV_INT ? a->u.i : 0;
        stop = b->kind == JV_INT ? b->u.i : n;
        start = start < 0 ? (n + start > 0 ? n + start : 0) : (start < n ? start : n);
        stop = stop < 0 ? (n + stop > 0 ? n + stop : 0) : (stop < n ? stop : n);
    } else {
        start = a->kind == JV_INT ? a->u.i : n - 1;
        stop = b->kind == JV_INT ? b->u.i : -1;
        start = start < 0 ? (n + start > -1 ? n + start : -1) : (start < n - 1 ? start : n - 1);
        stop = stop < -1 ? (n + stop > -1 ? n + stop : -1) : (stop < n - 1 ? stop : n - 1);
    }
    size_t cnt = 0;
    *idx = jinja_alloc(st, (len ? len : 1) * sizeof(size_t));
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (cnt >= len)
            break;
        (*idx)[cnt++] = (size_t)i;
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step))
            break;
    }
    return cnt;
}

static struct jv *eval_slice(struct jstate *st, struct jenv *env, struct jv *obj,
                             const struct jn *s)
{
    if (obj->kind != JV_LIST && obj->kind != JV_STR)
        jinja_fail(st, -EINVAL, "Slice object must be an array or string");
    struct jv *a = s->a ? jinja_eval(st, env, s->a) : &jv_undef;
    struct jv *b = s->b ? jinja_eval(st, env, s->b) : &jv_undef;
    struct jv *c = s->c ? jinja_eval(st, env, s->c) : &jv_undef;
    if ((a->kind != JV_INT && a->kind != JV_UNDEF) || (b->kind != JV_INT && b->kind != JV_UNDEF) ||
        (c->kind != JV_INT && c->kind != JV_UNDEF))
        jinja_fail(st, -EINVAL, "Slice indices must be integers or undefined");
    size_t *idx;
    if (obj->kind == JV_LIST) {
        size_t k = slice_indices(st, obj->u.l.n, a, b, c, &idx);
        struct jv *r = jv_list(st, k);
        for (size_t i = 0; i < k; i++)
            jv_list_push(st, r, obj->u.l.v[idx[i]]);
        return r;
    }
    size_t ncp = ju_count(obj->u.s.p, obj->u.s.len);
    size_t *offs = jinja_alloc(st, (ncp + 1) * sizeof(size_t)), o = 0, adv;
    for (size_t i = 0; i < ncp; i++) {
        offs[i] = o;
        ju_decode(obj->u.s.p + o, obj->u.s.len - o, &adv);
        o += adv;
    }
    offs[ncp] = o;
    size_t k = slice_indices(st, ncp, a, b, c, &idx);
    struct jbuf buf = {0};
    jbuf_put(st, &buf, "", 0, false);
    for (size_t i = 0; i < k; i++)
        jbuf_put_substr(st, &buf, obj, offs[idx[i]], offs[idx[i] + 1] - offs[idx[i]]);
    return jv_str_buf(st, &buf);
}

struct jv *jinja_eval(struct jstate *st, struct jenv *env, const struct jn *n)
{
    struct jv *v = NULL;
    step(st);
    deeper(st);
    switch (n->kind) {
    case JN_TEXT:
    case JN_STR: v = jv_str(st, n->s, n->slen, false); break;
    case JN_INT: v = jv_int(st, n->i); break;
    case JN_FLOAT: v = jv_float(st, n->f); break;
    case JN_IDENT: v = jenv_get(env, n->s); break;
    case JN_LIST:
    case JN_TUPLE:
        v = jv_list(st, n->n);
        v->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->n; i++)
            jv_list_push(st, v, jinja_eval(st, env, n->kids[i]));
        break;
    case JN_DICT:
        v = jv_dict(st, n->n);
        for (size_t i = 0; i < n->n; i++) {
            struct jv *k = jinja_eval(st, env, n->kids[i]);
            if (k->kind != JV_STR)
                jinja_fail(st, -EINVAL, "Object keys must be strings: got %s", jv_type_name(k));
            jv_dict_set(st, v, k, jinja_eval(st, env, n->kids2[i]));
        }
        break;
    case JN_MEMBER: {
        struct jv *obj = jinja_eval(st, env, n->a), *key;
        if (n->flag && n->b->kind == JN_SLICE) {
            v = eval_slice(st, env, obj, n->b);
            break;
        }
        if (n->flag)
            key = jinja_eval(st, env, n->b);
        else if (n->b->kind == JN_INT)
            key = jv_int(st, n->b->i);
        else
            key = jv_str(st, n->b->s, n->b->slen, false);
        v = jinja_member(st, obj, key);
        break;
    }
    case JN_CALL: {
        struct jv **args, *kwargs;
        size_t na = jinja_eval_args(st, env, n->kids, n->n, &args, &kwargs);
        struct jv *fn = jinja_eval(st, env, n->a);
        v = jinja_call(st, env, fn, args, na, kwargs);
        break;
    }
    case JN_UNARY: {
        struct jv *a = jinja_eval(st, env, n->a);
        if (n->op == JOP_NOT) {
            v = jv_bool(!jv_truthy(a));
        } else if (a->kind == JV_FLOAT) {
            v = jv_float(st, n->op == JOP_NEG ? -a->u.f : a->u.f);
        } else if (a->kind == JV_INT || a->kind == JV_BOOL) {
            int64_t x = a->kind == JV_BOOL ? a->u.b : a->u.i;
            if (n->op == JOP_NEG && x == INT64_MIN)
                jinja_fail(st, -EINVAL, "integer overflow");
            v = jv_int(st, n->op == JOP_NEG ? -x : x);
        } else {
            jinja_fail(st, -EINVAL, "Unknown operator \"%c\" for %s",
                       n->op == JOP_NEG ? '-' : '+', jv_type_name(a));
        }
        break;
    }
    case JN_BINARY: v = eval_binary(st, env, n); break;
    case JN_FILTER: v = jinja_filter(st, env, jinja_eval(st, env, n->a), n->b); break;
    case JN_TEST: {
        bool r = jinja_test(st, jinja_eval(st, env, n->a), n->s);
        v = jv_bool(n->flag ? !r : r);
        break;
    }
    case JN_SELECT:
        v = jv_truthy(jinja_eval(st, env, n->b)) ? jinja_eval(st, env, n->a) : &jv_undef;
        break;
    case JN_TERNARY:
        v = jinja_eval(st, env, jv_truthy(jinja_eval(st, env, n->a)) ? n->b : n->c);
        break;
    default: jinja_fail(st, -EINVAL, "line %u: not an expression", n->line);
    }
    st->depth--;
    return v;
}

/* ---- statements ---- */

static void assign(struct jstate *st, struct jenv *env, const struct jn *target, struct jv *v)
{
    if (target->kind == JN_IDENT) {
        jenv_set(st, env, target->s, v);
    } else if (target->kind == JN_TUPLE) {
        if (v->kind != JV_LIST)
            jinja_fail(st, -EINVAL, "Cannot unpack non-iterable type in set: %s", jv_type_name(v));
        if (v->u.l.n != target->n)
            jinja_fail(st, -EINVAL, "Too %s items to unpack in set",
                       target->n > v->u.l.n ? "few" : "many");
        for (size_t i = 0; i < target->n; i++) {
            if (target->kids[i]->kind != JN_IDENT)
                jinja_fail(st, -EINVAL, "Cannot unpack to non-identifier in set");
            jenv_set(st, env, target->kids[i]->s, v->u.l.v[i]);
        }
    } else if (target->kind == JN_MEMBER) {
        struct jv *obj = jinja_eval(st, env, target->a);
        if (obj->kind != JV_NS)
            jinja_fail(st, -EINVAL, "cannot assign attribute on non-namespace object");
        if (target->b->kind != JN_IDENT || target->flag)
            jinja_fail(st, -EINVAL, "Cannot assign to member with non-identifier property");
        jv_dict_set(st, obj, jv_str(st, target->b->s, target->b->slen, false), v);
    } else {
        jinja_fail(st, -EINVAL, "line %u: invalid left-hand side of an assignment", target->line);
    }
}

static void bind_loop_var(struct jstate *st, struct jenv *scope, const struct jn *var,
                          struct jv *cur)
{
    if (var->kind == JN_IDENT) {
        jenv_set(st, scope, var->s, cur);
        return;
    }
    if (cur->kind != JV_LIST || cur->tuple)
        jinja_fail(st, -EINVAL, "Cannot unpack non-iterable type: %s", jv_type_name(cur));
    if (var->n != cur->u.l.n)
        jinja_fail(st, -EINVAL, "Too %s items to unpack", var->n > cur->u.l.n ? "few" : "many");
    for (size_t j = 0; j < var->n; j++) {
        if (var->kids[j]->kind != JN_IDENT)
            jinja_fail(st, -EINVAL, "Cannot unpack non-identifier type");
        jenv_set(st, scope, var->kids[j]->s, cur->u.l.v[j]);
    }
}

static struct jv *dict_keys(struct jstate *st, struct jv *d)
{
    struct jv *l = jv_list(st, d->u.d.n);
    for (size_t i = 0; i < d->u.d.n; i++) {
        struct jv *k = d->u.d.k[i];
        jv_list_push(st, l, d->tkeys && !k->u.s.nsp ? jv_str(st, k->u.s.p, k->u.s.len, true) : k);
    }
    return l;
}

static void exec_for(struct jstate *st, struct jenv *env, const struct jn *n)
{
    struct jenv *scope = jenv_new(st, env);
    const struct jn *test = NULL;
    struct jv *it;
    if (n->b->kind == JN_SELECT) {
        it = jinja_eval(st, scope, n->b->a);
        test = n->b->b;
    } else {
        it = jinja_eval(st, scope, n->b);
    }
    if (it->kind == JV_DICT)
        it = dict_keys(st, it);
    else if (it->kind != JV_LIST)
        jinja_fail(st, -EINVAL, "Expected iterable or object type in for loop: got %s",
                   jv_type_name(it));
    struct jv *items = jv_list(st, it->u.l.n);
    for (size_t i = 0; i < it->u.l.n; i++) {
        step(st);
        if (test) {
            struct jenv *ls = jenv_new(st, scope);
            bind_loop_var(st, ls, n->a, it->u.l.v[i]);
            if (!jv_truthy(jinja_eval(st, ls, test)))
                continue;
        }
        jv_list_push(st, items, it->u.l.v[i]);
    }
    size_t cnt = items->u.l.n;
    bool none = true;
    for (size_t i = 0; i < cnt; i++) {
        step(st);
        struct jv *loop = jv_dict(st, 10);
        struct {
            const char *k;
            struct jv *v;
        } f[] = {
            {"index", jv_int(st, (int64_t)i + 1)},
            {"index0", jv_int(st, (int64_t)i)},
            {"revindex", jv_int(st, (int64_t)(cnt - i))},
            {"revindex0", jv_int(st, (int64_t)(cnt - i - 1))},
            {"first", jv_bool(i == 0)},
            {"last", jv_bool(i == cnt - 1)},
            {"length", jv_int(st, (int64_t)cnt)},
            {"previtem", i > 0 ? items->u.l.v[i - 1] : &jv_undef},
            {"nextitem", i + 1 < cnt ? items->u.l.v[i + 1] : &jv_undef},
        };
        for (size_t k = 0; k < sizeof(f) / sizeof(f[0]); k++)
            jv_dict_set(st, loop, jv_str(st, f[k].k, strlen(f[k].k), false), f[k].v);
        jenv_set(st, scope, "loop", loop);
        bind_loop_var(st, scope, n->a, items->u.l.v[i]);
        /* the reference collects an iteration's text and drops it on break or continue */
        size_t len = st->out->len, nsp = st->out->nsp;
        enum flow fl = exec_block(st, scope, n->kids, n->n);
        if (fl != FLOW_NEXT) {
            st->out->len = len;
            if (st->out->p)
                st->out->p[len] = '\0';
            st->out->nsp = nsp;
            if (nsp && st->out->sp[nsp - 1].off + st->out->sp[nsp - 1].len > len)
                st->out->sp[nsp - 1].len = len - st->out->sp[nsp - 1].off;
            if (fl == FLOW_BREAK)
                break;
            continue;
        }
        none = false;
    }
    if (none && exec_block(st, scope, n->kids2, n->n2) != FLOW_NEXT)
        jinja_fail(st, -EINVAL, "break or continue outside a loop");
}

static void exec_callblock(struct jstate *st, struct jenv *env, const struct jn *n)
{
    struct jv *caller = jv_func(st, NULL, NULL, "caller");
    caller->u.fn.node = n;
    caller->u.fn.env = env;
    struct jv **args, *kwargs;
    const struct jn *call = n->a;
    size_t na = jinja_eval_args(st, env, call->kids, call->n, &args, &kwargs);
    struct jv *fn = jinja_eval(st, env, call->a);
    struct jenv *inner = jenv_new(st, env);
    jenv_set(st, inner, "caller", caller);
    jv_write(st, st->out, jinja_call(st, inner, fn, args, na, kwargs));
}

static enum flow exec_stmt(struct jstate *st, struct jenv *env, const struct jn *n)
{
    step(st);
    switch (n->kind) {
    case JN_TEXT: jbuf_put(st, st->out, n->s, n->slen, false); return FLOW_NEXT;
    case JN_COMMENT: return FLOW_NEXT;
    case JN_BREAK: return FLOW_BREAK;
    case JN_CONTINUE: return FLOW_CONTINUE;
    case JN_IF: {
        deeper(st);
        bool t = jv_truthy(jinja_eval(st, env, n->a));
        enum flow f = t ? exec_block(st, env, n->kids, n->n) : exec_block(st, env, n->kids2, n->n2);
        st->depth--;
        return f;
    }
    case JN_FOR:
        deeper(st);
        exec_for(st, env, n);
        st->depth--;
        return FLOW_NEXT;
    case JN_SET: {
        struct jv *v;
        if (n->b) {
            v = jinja_eval(st, env, n->b);
        } else {
            bool broke;
            v = capture(st, env, n->kids, n->n, &broke);
            if (broke)
                return FLOW_BREAK;
        }
        assign(st, env, n->a, v);
        return FLOW_NEXT;
    }
    case JN_MACRO: {
        struct jv *m = jv_func(st, NULL, NULL, n->s);
        m->u.fn.node = n;
        jenv_set(st, env, n->s, m);
        return FLOW_NEXT;
    }
    case JN_CALLBLOCK: exec_callblock(st, env, n); return FLOW_NEXT;
    case JN_FILTERBLOCK: {
        struct jv *body = capture(st, env, n->kids, n->n, NULL);
        jv_write(st, st->out, jinja_filter(st, env, body, n->a));
        return FLOW_NEXT;
    }
    default: jv_write(st, st->out, jinja_eval(st, env, n)); return FLOW_NEXT;
    }
}

static enum flow exec_block(struct jstate *st, struct jenv *env, struct jn **kids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        enum flow f = exec_stmt(st, env, kids[i]);
        if (f != FLOW_NEXT)
            return f;
    }
    return FLOW_NEXT;
}

/* ---- entry ---- */

int jinja_render(const struct jinja_template *t, const struct jinja_var *vars, size_t n,
                 const struct jinja_limits *limits, struct jinja_output *out, char *err,
                 size_t errlen)
{
    struct jstate *st = calloc(1, sizeof(*st));
    struct jbuf buf = {0};
    int rc;

    memset(out, 0, sizeof(*out));
    if (!st) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    st->err = err;
    st->errlen = errlen;
    st->max_steps = limits && limits->max_steps ? limits->max_steps : 10000000UL;
    st->max_depth = limits && limits->max_depth ? limits->max_depth : 256;
    st->arena.max = limits && limits->max_bytes ? limits->max_bytes : (size_t)256 << 20;
    st->now = limits ? limits->now : 0;
    if (setjmp(st->fail)) {
        rc = st->rc;
        goto out;
    }
    struct jenv *global = jenv_new(st, NULL);
    jinja_globals(st, global);
    for (size_t i = 0; i < n; i++)
        jenv_set(st, global, vars[i].name,
                 vars[i].value ? jv_from_json(st, vars[i].value, vars[i].tainted, 0) : &jv_undef);
    st->out = &buf;
    jbuf_put(st, &buf, "", 0, false);
    if (exec_block(st, jenv_new(st, global), t->root->kids, t->root->n) != FLOW_NEXT)
        jinja_fail(st, -EINVAL, "break or continue outside a loop");
    out->text = malloc(buf.len + 1);
    out->spans = buf.nsp ? malloc(buf.nsp * sizeof(*out->spans)) : NULL;
    if (!out->text || (buf.nsp && !out->spans)) {
        free(out->text);
        free(out->spans);
        memset(out, 0, sizeof(*out));
        snprintf(err, errlen, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    memcpy(out->text, buf.p, buf.len + 1);
    out->len = buf.len;
    for (size_t i = 0; i < buf.nsp; i++)
        out->spans[i] = (struct tokenizer_span){buf.sp[i].off, buf.sp[i].len};
    out->n_spans = buf.nsp;
    rc = 0;
out:
    jarena_free(&st->arena);
    free(st);
    return rc;
}
