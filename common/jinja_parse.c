/* Jinja parser: tokens to a tree, with @huggingface/jinja's grammar and precedence (loosest
 * first): "a if b else c", or, and, not, comparisons and in / not in, + - ~, * / // %, **,
 * "is" tests, "|" filters, unary sign, calls and members, primaries. Statements: if / elif /
 * else, for (with "if" filter and else), set (also block set and tuples), macro, call, filter,
 * break, continue. Nesting deeper than PARSE_MAX_DEPTH is refused rather than recursed. */
#include "jinja_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARSE_MAX_DEPTH 200

struct parser {
    struct jarena *a;
    const struct jtok *t;
    size_t n, cur;
    unsigned depth;
    char *err;
    size_t errlen;
    jmp_buf fail;
};

__attribute__((format(printf, 2, 3))) _Noreturn static void perr(struct parser *p,
                                                                  const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    unsigned line = p->cur < p->n ? p->t[p->cur].line : (p->n ? p->t[p->n - 1].line : 1);
    snprintf(p->err, p->errlen, "line %u: %s", line, msg);
    longjmp(p->fail, 1);
}

static struct jn *node(struct parser *p, enum jn_kind k)
{
    struct jn *n = jarena_alloc(p->a, sizeof(*n));
    if (!n)
        perr(p, "out of memory");
    memset(n, 0, sizeof(*n));
    n->kind = k;
    n->line = p->cur < p->n ? p->t[p->cur].line : 0;
    return n;
}

/* A growing list of nodes. */
struct nlist {
    struct jn **v;
    size_t n, cap;
};

static void nl_push(struct parser *p, struct nlist *l, struct jn *x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        struct jn **nv = jarena_alloc(p->a, cap * sizeof(*nv));
        if (!nv)
            perr(p, "out of memory");
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(*nv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static const struct jtok *peek(struct parser *p, size_t k)
{
    return p->cur + k < p->n ? &p->t[p->cur + k] : NULL;
}

static bool is(struct parser *p, enum jtok_type t)
{
    const struct jtok *k = peek(p, 0);
    return k && k->type == t;
}

static bool is_ident(struct parser *p, size_t k, const char *name)
{
    const struct jtok *t = peek(p, k);
    return t && t->type == JT_IDENT && !strcmp(t->s, name);
}

static const struct jtok *next(struct parser *p)
{
    if (p->cur >= p->n)
        perr(p, "unexpected end of template");
    return &p->t[p->cur++];
}

static void expect(struct parser *p, enum jtok_type t, const char *what)
{
    const struct jtok *k = next(p);
    if (k->type != t)
        perr(p, "expected %s, got '%.40s'", what, k->s);
}

static void expect_ident(struct parser *p, const char *name)
{
    if (!is_ident(p, 0, name))
        perr(p, "expected '%s'", name);
    p->cur++;
}

/* {% name where name is one of names (NULL-terminated list) */
static bool is_stmt(struct parser *p, const char *const *names)
{
    const struct jtok *a = peek(p, 0), *b = peek(p, 1);
    if (!a || a->type != JT_OPEN_STMT || !b || b->type != JT_IDENT)
        return false;
    for (; *names; names++)
        if (!strcmp(b->s, *names))
            return true;
    return false;
}

static void enter(struct parser *p)
{
    if (++p->depth > PARSE_MAX_DEPTH)
        perr(p, "nested deeper than %d", PARSE_MAX_DEPTH);
}

static struct jn *parse_any(struct parser *p);
static struct jn *parse_expr(struct parser *p);
static struct jn *parse_primary(struct parser *p);
static struct jn *parse_call(struct parser *p, struct jn *callee);
static struct jn *parse_or(struct parser *p);

/* Statements up to one of names (not consumed); the end of the template is an error. */
static void parse_body(struct parser *p, struct nlist *body, const char *const *names)
{
    while (!is_stmt(p, names)) {
        if (p->cur >= p->n) {
            const char *end = names[0];
            for (const char *const *k = names; *k; k++)
                if (!strncmp(*k, "end", 3))
                    end = *k;
            perr(p, "missing {%% %s %%}", end);
        }
        nl_push(p, body, parse_any(p));
    }
}

static void end_tag(struct parser *p, const char *name)
{
    expect(p, JT_OPEN_STMT, "{%");
    expect_ident(p, name);
    expect(p, JT_CLOSE_STMT, "%}");
}

static struct jn *parse_seq(struct parser *p, bool primary)
{
    struct jn *first = primary ? parse_primary(p) : parse_expr(p);
    if (!is(p, JT_COMMA))
        return first;
    struct nlist l = {0};
    nl_push(p, &l, first);
    while (is(p, JT_COMMA)) {
        p->cur++;
        nl_push(p, &l, primary ? parse_primary(p) : parse_expr(p));
    }
    struct jn *t = node(p, JN_TUPLE);
    t->kids = l.v;
    t->n = l.n;
    return t;
}

/* Call arguments or macro parameters, "(" to ")". */
static void parse_args(struct parser *p, struct nlist *args, bool params)
{
    bool kw_seen = false, spread_seen = false;
    expect(p, JT_LPAREN, "(");
    while (!is(p, JT_RPAREN)) {
        if (p->cur >= p->n)
            perr(p, "missing )");
        bool kwspread = is(p, JT_POW), spread = is(p, JT_MUL) && !strcmp(p->t[p->cur].s, "*");
        if (params && (kwspread || spread))
            perr(p, "argument unpacking is not allowed in parameter declarations");
        if (kwspread) {
            p->cur++;
            struct jn *s = node(p, JN_KWSPREAD);
            s->a = parse_expr(p);
            nl_push(p, args, s);
            if (is(p, JT_COMMA))
                p->cur++;
            if (!is(p, JT_RPAREN))
                perr(p, "`**` must be applied to the final argument");
            break;
        }
        struct jn *arg;
        if (spread) {
            if (spread_seen)
                perr(p, "only one `*` argument unpacking is allowed");
            spread_seen = true;
            p->cur++;
            arg = node(p, JN_SPREAD);
            arg->a = parse_expr(p);
        } else {
            arg = parse_expr(p);
            if (is(p, JT_EQUALS)) {
                p->cur++;
                if (arg->kind != JN_IDENT)
                    perr(p, "expected an identifier for a keyword argument");
                struct jn *kw = node(p, JN_KWARG);
                kw->s = arg->s;
                kw->a = parse_expr(p);
                arg = kw;
            }
            if (params) {
                if (arg->kind != JN_IDENT && arg->kind != JN_KWARG)
                    perr(p, "expected an identifier for a parameter");
                for (size_t i = 0; i < args->n; i++)
                    if (!strcmp(args->v[i]->s, arg->s))
                        perr(p, "duplicate parameter name: %.40s", arg->s);
            }
            if (arg->kind == JN_KWARG)
                kw_seen = true;
            else if (kw_seen)
                perr(p, params ? "non-default argument follows default argument"
                               : "positional arguments must come before keyword arguments");
            else if (spread_seen)
                perr(p, "positional arguments must not follow `*` argument unpacking");
        }
        nl_push(p, args, arg);
        if (is(p, JT_COMMA))
            p->cur++;
    }
    p->cur++;
}

static struct jn *parse_subscript(struct parser *p)
{
    struct jn *parts[3] = {0};
    size_t n = 0;
    bool slice = false;
    while (!is(p, JT_RBRACKET)) {
        if (p->cur >= p->n)
            perr(p, "missing ]");
        if (n == 3)
            perr(p, "expected 0-3 arguments for a slice");
        if (is(p, JT_COLON)) {
            parts[n++] = NULL;
            p->cur++;
            slice = true;
        } else {
            parts[n++] = parse_expr(p);
            if (is(p, JT_COLON)) {
                p->cur++;
                slice = true;
            }
        }
    }
    if (n == 0)
        perr(p, "expected at least one argument for a member or slice expression");
    if (!slice)
        return parts[0];
    struct jn *s = node(p, JN_SLICE);
    s->a = parts[0];
    s->b = n > 1 ? parts[1] : NULL;
    s->c = n > 2 ? parts[2] : NULL;
    return s;
}

static struct jn *parse_member(struct parser *p, struct jn *obj)
{
    while (is(p, JT_DOT) || is(p, JT_LBRACKET)) {
        bool computed = is(p, JT_LBRACKET);
        p->cur++;
        struct jn *m = node(p, JN_MEMBER), *prop;
        if (computed) {
            prop = parse_subscript(p);
            expect(p, JT_RBRACKET, "]");
        } else {
            prop = parse_primary(p);
            if (prop->kind != JN_IDENT && prop->kind != JN_INT)
                perr(p, "expected an identifier or integer after '.'");
        }
        m->a = obj;
        m->b = prop;
        m->flag = computed;
        obj = m;
    }
    return obj;
}

static struct jn *parse_call(struct parser *p, struct jn *callee)
{
    struct nlist args = {0};
    enter(p);
    struct jn *c = node(p, JN_CALL);
    parse_args(p, &args, false);
    c->a = callee;
    c->kids = args.v;
    c->n = args.n;
    c = parse_member(p, c);
    if (is(p, JT_LPAREN))
        c = parse_call(p, c);
    p->depth--;
    return c;
}

static struct jn *parse_primary(struct parser *p)
{
    enter(p);
    const struct jtok *t = next(p);
    struct jn *n;
    switch (t->type) {
    case JT_NUMBER:
        if (strchr(t->s, '.')) {
            n = node(p, JN_FLOAT);
            n->f = strtod(t->s, NULL);
        } else {
            n = node(p, JN_INT);
            double d = strtod(t->s, NULL);
            if (d > 9007199254740992.0 || d < -9007199254740992.0)
                perr(p, "integer literal out of range: %.40s", t->s);
            n->i = (int64_t)d;
        }
        break;
    case JT_STRING: {
        size_t len = t->len, k = p->cur;
        while (k < p->n && p->t[k].type == JT_STRING)
            len += p->t[k++].len;
        char *s = jarena_alloc(p->a, len + 1);
        if (!s)
            perr(p, "out of memory");
        memcpy(s, t->s, t->len);
        size_t o = t->len;
        while (is(p, JT_STRING)) {
            memcpy(s + o, p->t[p->cur].s, p->t[p->cur].len);
            o += p->t[p->cur++].len;
        }
        s[o] = '\0';
        n = node(p, JN_STR);
        n->s = s;
        n->slen = o;
        break;
    }
    case JT_IDENT:
        n = node(p, JN_IDENT);
        n->s = t->s;
        n->slen = t->len;
        break;
    case JT_LPAREN:
        n = parse_seq(p, false);
        expect(p, JT_RPAREN, ")");
        break;
    case JT_LBRACKET: {
        struct nlist l = {0};
        while (!is(p, JT_RBRACKET)) {
            if (p->cur >= p->n)
                perr(p, "missing ]");
            nl_push(p, &l, parse_expr(p));
            if (is(p, JT_COMMA))
                p->cur++;
        }
        p->cur++;
        n = node(p, JN_LIST);
        n->kids = l.v;
        n->n = l.n;
        break;
    }
    case JT_LBRACE: {
        struct nlist k = {0}, v = {0};
        while (!is(p, JT_RBRACE)) {
            if (p->cur >= p->n)
                perr(p, "missing }");
            nl_push(p, &k, parse_expr(p));
            expect(p, JT_COLON, "':' between a key and its value");
            nl_push(p, &v, parse_expr(p));
            if (is(p, JT_COMMA))
                p->cur++;
        }
        p->cur++;
        n = node(p, JN_DICT);
        n->kids = k.v;
        n->kids2 = v.v;
        n->n = n->n2 = k.n;
        break;
    }
    default: p->cur--; perr(p, "unexpected '%.40s'", t->s);
    }
    p->depth--;
    return n;
}

static struct jn *parse_call_member(struct parser *p)
{
    struct jn *m = parse_member(p, parse_primary(p));
    return is(p, JT_LPAREN) ? parse_call(p, m) : m;
}

static struct jn *parse_unary_sign(struct parser *p)
{
    const struct jtok *t = peek(p, 0);
    if (t && (t->type == JT_UNARY || t->type == JT_ADD) &&
        (!strcmp(t->s, "-") || !strcmp(t->s, "+"))) {
        enter(p);
        p->cur++;
        struct jn *u = node(p, JN_UNARY);
        u->op = t->s[0] == '-' ? JOP_NEG : JOP_POS;
        u->a = parse_unary_sign(p);
        p->depth--;
        return u;
    }
    return parse_call_member(p);
}

static struct jn *parse_filter(struct parser *p)
{
    struct jn *x = parse_unary_sign(p);
    while (is(p, JT_PIPE)) {
        p->cur++;
        struct jn *f = parse_primary(p);
        if (f->kind != JN_IDENT)
            perr(p, "expected an identifier for the filter");
        if (is(p, JT_LPAREN))
            f = parse_call(p, f);
        struct jn *n = node(p, JN_FILTER);
        n->a = x;
        n->b = f;
        x = n;
    }
    return x;
}

static struct jn *parse_test(struct parser *p)
{
    struct jn *x = parse_filter(p);
    while (is_ident(p, 0, "is")) {
        p->cur++;
        bool neg = is_ident(p, 0, "not");
        if (neg)
            p->cur++;
        struct jn *t = parse_primary(p);
        if (t->kind != JN_IDENT)
            perr(p, "expected an identifier for the test");
        struct jn *n = node(p, JN_TEST);
        n->a = x;
        n->s = t->s;
        n->flag = neg;
        x = n;
    }
    return x;
}

static struct jn *binary(struct parser *p, enum jop op, struct jn *a, struct jn *b)
{
    struct jn *n = node(p, JN_BINARY);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jn *parse_pow(struct parser *p)
{
    struct jn *x = parse_test(p);
    while (is(p, JT_POW)) {
        p->cur++;
        x = binary(p, JOP_POW, x, parse_test(p));
    }
    return x;
}

static struct jn *parse_mul(struct parser *p)
{
    struct jn *x = parse_pow(p);
    while (is(p, JT_MUL)) {
        const char *s = next(p)->s;
        enum jop op = !strcmp(s, "*") ? JOP_MUL : !strcmp(s, "/") ? JOP_DIV
                    : !strcmp(s, "//") ? JOP_FLOORDIV : JOP_MOD;
        x = binary(p, op, x, parse_pow(p));
    }
    return x;
}

static struct jn *parse_add(struct parser *p)
{
    struct jn *x = parse_mul(p);
    while (is(p, JT_ADD)) {
        const char *s = next(p)->s;
        enum jop op = s[0] == '+' ? JOP_ADD : s[0] == '-' ? JOP_SUB : JOP_CONCAT;
        x = binary(p, op, x, parse_mul(p));
    }
    return x;
}

static struct jn *parse_compare(struct parser *p)
{
    struct jn *x = parse_add(p);
    for (;;) {
        enum jop op;
        if (is_ident(p, 0, "not") && is_ident(p, 1, "in")) {
            op = JOP_NOT_IN;
            p->cur += 2;
        } else if (is_ident(p, 0, "in")) {
            op = JOP_IN;
            p->cur++;
        } else if (is(p, JT_CMP)) {
            const char *s = next(p)->s;
            op = !strcmp(s, "==") ? JOP_EQ : !strcmp(s, "!=") ? JOP_NE : !strcmp(s, "<") ? JOP_LT
               : !strcmp(s, "<=") ? JOP_LE : !strcmp(s, ">") ? JOP_GT : JOP_GE;
        } else {
            return x;
        }
        x = binary(p, op, x, parse_add(p));
    }
}

static struct jn *parse_not(struct parser *p)
{
    if (is_ident(p, 0, "not")) {
        enter(p);
        p->cur++;
        struct jn *u = node(p, JN_UNARY);
        u->op = JOP_NOT;
        u->a = parse_not(p);
        p->depth--;
        return u;
    }
    return parse_compare(p);
}

static struct jn *parse_and(struct parser *p)
{
    struct jn *x = parse_not(p);
    while (is_ident(p, 0, "and")) {
        p->cur++;
        x = binary(p, JOP_AND, x, parse_not(p));
    }
    return x;
}

static struct jn *parse_or(struct parser *p)
{
    struct jn *x = parse_and(p);
    while (is_ident(p, 0, "or")) {
        p->cur++;
        x = binary(p, JOP_OR, x, parse_and(p));
    }
    return x;
}

static struct jn *parse_expr(struct parser *p)
{
    enter(p);
    struct jn *a = parse_or(p);
    if (is_ident(p, 0, "if")) {
        p->cur++;
        struct jn *test = parse_or(p);
        if (is_ident(p, 0, "else")) {
            p->cur++;
            struct jn *t = node(p, JN_TERNARY);
            t->a = test;
            t->b = a;
            t->c = parse_expr(p);
            a = t;
        } else {
            struct jn *s = node(p, JN_SELECT);
            s->a = a;
            s->b = test;
            a = s;
        }
    }
    p->depth--;
    return a;
}

static struct jn *parse_if(struct parser *p)
{
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    enter(p);
    struct jn *n = node(p, JN_IF);
    struct nlist body = {0}, alt = {0};
    n->a = parse_expr(p);
    expect(p, JT_CLOSE_STMT, "%}");
    parse_body(p, &body, stops);
    if (is_stmt(p, (const char *const[]){"elif", NULL})) {
        p->cur += 2;
        nl_push(p, &alt, parse_if(p));
    } else if (is_stmt(p, (const char *const[]){"else", NULL})) {
        p->cur += 2;
        expect(p, JT_CLOSE_STMT, "%}");
        parse_body(p, &alt, endif);
    }
    n->kids = body.v;
    n->n = body.n;
    n->kids2 = alt.v;
    n->n2 = alt.n;
    p->depth--;
    return n;
}

static void parse_block(struct parser *p, struct jn *n, const char *end)
{
    const char *const stops[] = {end, NULL};
    struct nlist body = {0};
    parse_body(p, &body, stops);
    n->kids2 = body.v;
    n->n2 = body.n;
}

static struct jn *parse_statement(struct parser *p)
{
    static const char *const endfor_else[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    static const char *const endset[] = {"endset", NULL};
    expect(p, JT_OPEN_STMT, "{%");
    const struct jtok *t = peek(p, 0);
    if (!t || t->type != JT_IDENT)
        perr(p, "unknown statement '%.40s'", t ? t->s : "");
    const char *name = t->s;
    struct jn *n;
    p->cur++;
    if (!strcmp(name, "set")) {
        n = node(p, JN_SET);
        n->a = parse_seq(p, false);
        if (is(p, JT_EQUALS)) {
            p->cur++;
            n->b = parse_seq(p, false);
        } else {
            struct nlist body = {0};
            expect(p, JT_CLOSE_STMT, "%}");
            parse_body(p, &body, endset);
            n->kids = body.v;
            n->n = body.n;
            expect(p, JT_OPEN_STMT, "{%");
            expect_ident(p, "endset");
        }
        expect(p, JT_CLOSE_STMT, "%}");
    } else if (!strcmp(name, "if")) {
        n = parse_if(p);
        end_tag(p, "endif");
    } else if (!strcmp(name, "macro")) {
        struct nlist params = {0};
        struct jn *id = parse_primary(p);
        if (id->kind != JN_IDENT)
            perr(p, "expected an identifier after macro");
        n = node(p, JN_MACRO);
        n->s = id->s;
        parse_args(p, &params, true);
        n->kids = params.v;
        n->n = params.n;
        expect(p, JT_CLOSE_STMT, "%}");
        parse_block(p, n, "endmacro");
        end_tag(p, "endmacro");
    } else if (!strcmp(name, "for")) {
        struct nlist body = {0}, alt = {0};
        n = node(p, JN_FOR);
        n->a = parse_seq(p, true);
        if (n->a->kind != JN_IDENT && n->a->kind != JN_TUPLE)
            perr(p, "expected an identifier or tuple for the loop variable");
        if (!is_ident(p, 0, "in"))
            perr(p, "expected 'in' after the loop variable");
        p->cur++;
        n->b = parse_expr(p);
        expect(p, JT_CLOSE_STMT, "%}");
        parse_body(p, &body, endfor_else);
        if (is_stmt(p, (const char *const[]){"else", NULL})) {
            p->cur += 2;
            expect(p, JT_CLOSE_STMT, "%}");
            parse_body(p, &alt, endfor);
        }
        n->kids = body.v;
        n->n = body.n;
        n->kids2 = alt.v;
        n->n2 = alt.n;
        end_tag(p, "endfor");
    } else if (!strcmp(name, "call")) {
        struct nlist params = {0};
        n = node(p, JN_CALLBLOCK);
        if (is(p, JT_LPAREN)) {
            parse_args(p, &params, true);
            n->flag = true;
        }
        struct jn *callee = parse_primary(p);
        if (callee->kind != JN_IDENT)
            perr(p, "expected an identifier after call");
        struct jn *c = node(p, JN_CALL);
        struct nlist args = {0};
        parse_args(p, &args, false);
        c->a = callee;
        c->kids = args.v;
        c->n = args.n;
        n->a = c;
        n->kids = params.v;
        n->n = params.n;
        expect(p, JT_CLOSE_STMT, "%}");
        parse_block(p, n, "endcall");
        end_tag(p, "endcall");
    } else if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        n = node(p, name[0] == 'b' ? JN_BREAK : JN_CONTINUE);
        expect(p, JT_CLOSE_STMT, "%}");
    } else if (!strcmp(name, "filter")) {
        n = node(p, JN_FILTERBLOCK);
        struct jn *f = parse_primary(p);
        if (f->kind == JN_IDENT && is(p, JT_LPAREN))
            f = parse_call(p, f);
        n->a = f;
        expect(p, JT_CLOSE_STMT, "%}");
        struct nlist body = {0};
        parse_body(p, &body, (const char *const[]){"endfilter", NULL});
        n->kids = body.v;
        n->n = body.n;
        end_tag(p, "endfilter");
    } else {
        p->cur--;
        perr(p, "unknown statement '%.40s'", name);
    }
    return n;
}

static struct jn *parse_any(struct parser *p)
{
    const struct jtok *t = peek(p, 0);
    struct jn *n;
    enter(p);
    switch (t->type) {
    case JT_COMMENT:
        p->cur++;
        n = node(p, JN_COMMENT);
        break;
    case JT_TEXT:
        p->cur++;
        n = node(p, JN_TEXT);
        n->s = t->s;
        n->slen = t->len;
        break;
    case JT_OPEN_STMT: n = parse_statement(p); break;
    case JT_OPEN_EXPR:
        p->cur++;
        n = parse_expr(p);
        expect(p, JT_CLOSE_EXPR, "}}");
        break;
    default: perr(p, "unexpected '%.40s'", t->s);
    }
    p->depth--;
    return n;
}

/* Which of kwargs (1) and varargs (2) a macro's body names (the reference passes them only
 * to macros that read them). */
static unsigned specials(const struct jn *n, unsigned depth)
{
    unsigned r = 0;
    if (!n || depth > PARSE_MAX_DEPTH * 4)
        return 0;
    if (n->kind == JN_IDENT && n->s) {
        if (!strcmp(n->s, "kwargs"))
            r |= 1;
        else if (!strcmp(n->s, "varargs"))
            r |= 2;
    }
    r |= specials(n->a, depth + 1) | specials(n->b, depth + 1) | specials(n->c, depth + 1);
    for (size_t i = 0; i < n->n; i++)
        r |= specials(n->kids[i], depth + 1);
    for (size_t i = 0; i < n->n2; i++)
        r |= specials(n->kids2[i], depth + 1);
    return r;
}

static void mark_specials(struct jn *n, unsigned depth)
{
    if (!n || depth > PARSE_MAX_DEPTH * 4)
        return;
    if (n->kind == JN_MACRO || n->kind == JN_CALLBLOCK) {
        unsigned r = 0;
        for (size_t i = 0; i < n->n2; i++)
            r |= specials(n->kids2[i], 0);
        n->special = r;
    }
    mark_specials(n->a, depth + 1);
    mark_specials(n->b, depth + 1);
    mark_specials(n->c, depth + 1);
    for (size_t i = 0; i < n->n; i++)
        mark_specials(n->kids[i], depth + 1);
    for (size_t i = 0; i < n->n2; i++)
        mark_specials(n->kids2[i], depth + 1);
}

struct jn *jinja_parse_tokens(struct jarena *a, const struct jtok *toks, size_t n, char *err,
                              size_t errlen)
{
    struct parser p = {.a = a, .t = toks, .n = n, .err = err, .errlen = errlen};
    struct nlist body = {0};
    if (setjmp(p.fail))
        return NULL;
    while (p.cur < p.n)
        nl_push(&p, &body, parse_any(&p));
    struct jn *root = node(&p, JN_PROGRAM);
    root->kids = body.v;
    root->n = body.n;
    mark_specials(root, 0);
    return root;
}

struct jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errlen)
{
    struct jinja_template *t = calloc(1, sizeof(*t));
    struct jtok *toks = NULL;
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    long n = jinja_lex(&t->arena, src, len, &toks, err, errlen);
    if (n < 0 || !(t->root = jinja_parse_tokens(&t->arena, toks, (size_t)n, err, errlen))) {
        jinja_free(t);
        return NULL;
    }
    return t;
}

void jinja_free(struct jinja_template *t)
{
    if (!t)
        return;
    jarena_free(&t->arena);
    free(t);
}
