/* The Jinja engine's insides, shared by its files: the arena everything lives in, tokens,
 * the syntax tree, values, and the evaluator's state. */
#ifndef JINJA_IMPL_H
#define JINJA_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "jinja.h"

/* ---- arena: a template's tree, or one render's values, freed at once ---- */

struct jarena {
    struct jchunk *head;
    size_t used, cap; /* of head */
    size_t total, max; /* bytes taken, and the limit (0: none) */
};

/* NULL when out of memory or past the limit. */
void *jarena_alloc(struct jarena *a, size_t n);
void jarena_free(struct jarena *a);

/* ---- tokens (jinja_lex.c) ---- */

enum jtok_type {
    JT_TEXT, JT_NUMBER, JT_STRING, JT_IDENT, JT_EQUALS, JT_LPAREN, JT_RPAREN,
    JT_OPEN_STMT, JT_CLOSE_STMT, JT_OPEN_EXPR, JT_CLOSE_EXPR, JT_LBRACKET, JT_RBRACKET,
    JT_LBRACE, JT_RBRACE, JT_COMMA, JT_DOT, JT_COLON, JT_PIPE, JT_ADD, JT_MUL, JT_POW,
    JT_CMP, JT_UNARY, JT_COMMENT,
};

struct jtok {
    enum jtok_type type;
    const char *s; /* the value (decoded for strings), in the arena, NUL-terminated */
    size_t len;
    unsigned line;
};

/* Tokenise src the way @huggingface/jinja does with lstrip_blocks and trim_blocks. Returns
 * the token count with *toks in a, or -1 with err set. */
long jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **toks, char *err,
               size_t errlen);

/* ---- syntax tree (jinja_parse.c) ---- */

enum jn_kind {
    JN_PROGRAM, JN_TEXT, JN_STR, JN_INT, JN_FLOAT, JN_IDENT, JN_LIST, JN_TUPLE, JN_DICT,
    JN_MEMBER, JN_SLICE, JN_CALL, JN_UNARY, JN_BINARY, JN_FILTER, JN_TEST, JN_SELECT,
    JN_TERNARY, JN_KWARG, JN_SPREAD, JN_KWSPREAD, JN_IF, JN_FOR, JN_SET, JN_MACRO,
    JN_CALLBLOCK, JN_FILTERBLOCK, JN_BREAK, JN_CONTINUE, JN_COMMENT,
};

enum jop {
    JOP_NONE, JOP_OR, JOP_AND, JOP_NOT, JOP_IN, JOP_NOT_IN, JOP_EQ, JOP_NE, JOP_LT, JOP_LE,
    JOP_GT, JOP_GE, JOP_ADD, JOP_SUB, JOP_CONCAT, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD,
    JOP_POW, JOP_NEG, JOP_POS,
};

/* One node. Which fields a kind uses:
 *   TEXT/STR s; INT i; FLOAT f; IDENT s; LIST/TUPLE kids; DICT kids (keys) kids2 (values)
 *   MEMBER a[b] or a.b (flag: computed); SLICE a:b:c (each may be NULL); CALL a(kids)
 *   UNARY op a; BINARY a op b; FILTER a|b (b an IDENT or a CALL); TEST a is [not: flag] s
 *   SELECT a if b; TERNARY b if a else c; KWARG s=a; SPREAD *a; KWSPREAD **a
 *   IF a kids else kids2; FOR a in b kids else kids2; SET a = b, or a = block kids
 *   MACRO s(kids) kids2; CALLBLOCK call(kids: caller's parameters) a kids2
 *   FILTERBLOCK a kids; PROGRAM kids */
struct jn {
    enum jn_kind kind;
    enum jop op;
    bool flag;
    unsigned line;
    const char *s;
    size_t slen;
    int64_t i;
    double f;
    struct jn *a, *b, *c;
    struct jn **kids, **kids2;
    size_t n, n2;
    unsigned special; /* MACRO, CALLBLOCK: 1 reads kwargs, 2 reads varargs */
};

struct jinja_template {
    struct jarena arena;
    struct jn *root;
};

/* Parse tokens into a PROGRAM in a. NULL with err set. */
struct jn *jinja_parse_tokens(struct jarena *a, const struct jtok *toks, size_t n, char *err,
                              size_t errlen);

/* ---- values (jinja_value.c) ---- */

enum jv_kind {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC,
};

struct jspan {
    size_t off, len;
};

struct jstate;
struct jv;
typedef struct jv *(*jbuiltin_fn)(struct jstate *st, struct jv *self, struct jv **args,
                                  size_t n, struct jv *kwargs);

struct jv {
    enum jv_kind kind;
    bool tuple;   /* LIST: a tuple (not "iterable", no JSON) */
    bool kwargs;  /* DICT: keyword arguments of a call */
    bool tkeys;   /* DICT: its keys are client text */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p; /* NUL-terminated */
            size_t len;
            struct jspan *sp; /* tainted byte ranges */
            size_t nsp;
        } s;
        struct {
            struct jv **v;
            size_t n, cap;
        } l;
        struct {
            struct jv **k, **v; /* k: strings */
            size_t n, cap;
        } d;
        struct {
            jbuiltin_fn fn;    /* a builtin, or NULL: a macro / caller */
            struct jv *self;   /* the builtin's object */
            const struct jn *node; /* MACRO or CALLBLOCK */
            struct jenv *env;  /* CALLBLOCK: where the caller's body runs */
            const char *name;
        } fn;
    } u;
};

/* A string being built, with its tainted ranges. */
struct jbuf {
    char *p;
    size_t len, cap;
    struct jspan *sp;
    size_t nsp, capsp;
};

/* Scopes: a frame of variables and its parent. */
struct jenv {
    struct jenv *parent;
    const char **names;
    struct jv **vals;
    size_t n, cap;
};

struct jstate {
    struct jarena arena;
    jmp_buf fail;
    int rc;
    char *err;
    size_t errlen;
    unsigned long steps, max_steps;
    unsigned depth, max_depth;
    time_t now;
    struct jbuf *out; /* where text goes now */
};

/* Stop the render with rc and a message (never returns). */
_Noreturn void jinja_fail(struct jstate *st, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *jinja_alloc(struct jstate *st, size_t n); /* fails the render when out of memory */

extern struct jv jv_undef, jv_none, jv_true, jv_false;
struct jv *jv_bool(bool b);
struct jv *jv_int(struct jstate *st, int64_t i);
struct jv *jv_float(struct jstate *st, double f);
struct jv *jv_str(struct jstate *st, const char *p, size_t len, bool tainted);
struct jv *jv_str_buf(struct jstate *st, const struct jbuf *b); /* copies b */
struct jv *jv_list(struct jstate *st, size_t cap);
void jv_list_push(struct jstate *st, struct jv *l, struct jv *v);
struct jv *jv_dict(struct jstate *st, size_t cap);
void jv_dict_set(struct jstate *st, struct jv *d, struct jv *k, struct jv *v);
struct jv *jv_dict_get(const struct jv *d, const char *key, size_t len); /* NULL: absent */
struct jv *jv_func(struct jstate *st, jbuiltin_fn fn, struct jv *self, const char *name);
struct jv *jv_from_json(struct jstate *st, const json_t *j, bool tainted, unsigned depth);
const char *jv_type_name(const struct jv *v);

bool jv_truthy(const struct jv *v);
bool jv_is_number(const struct jv *v); /* INT or FLOAT */
double jv_num(const struct jv *v);     /* INT, FLOAT or BOOL */
bool jv_loose_eq(const struct jv *a, const struct jv *b);   /* JavaScript == on values */
bool jv_strict_eq(const struct jv *a, const struct jv *b);  /* JavaScript === on values */
int jv_compare(struct jstate *st, const struct jv *a, const struct jv *b, bool case_sensitive);
bool jv_tainted(const struct jv *v, unsigned depth); /* holds client text anywhere (true
                                                      * past a depth: cycles, deep nests) */
/* Count n units of work (bytes scanned, items compared) against the step limit. */
void jinja_work(struct jstate *st, size_t n);

/* Buffers. */
void jbuf_put(struct jstate *st, struct jbuf *b, const char *p, size_t n, bool tainted);
void jbuf_puts(struct jstate *st, struct jbuf *b, const char *s);
void jbuf_put_str(struct jstate *st, struct jbuf *b, const struct jv *s); /* keeps its taint */
void jbuf_put_substr(struct jstate *st, struct jbuf *b, const struct jv *s, size_t off,
                     size_t n);
void jbuf_taint(struct jstate *st, struct jbuf *b, size_t off, size_t n);

/* Text of a value as the output shows it (true, 1.0, JSON of lists), appended to b. */
void jv_write(struct jstate *st, struct jbuf *b, const struct jv *v);
/* JavaScript's String(value) (for ~ and + with strings): 2.0 is "2", lists "a,b". */
void jv_write_js(struct jstate *st, struct jbuf *b, const struct jv *v);
void jv_write_number(struct jbuf *b, struct jstate *st, double f, bool js);

struct jjson_opts {
    long indent; /* <= 0: none */
    const char *item_sep, *key_sep; /* NULL: the defaults */
    bool ensure_ascii, sort_keys, undef_null;
};
void jv_write_json(struct jstate *st, struct jbuf *b, const struct jv *v,
                   const struct jjson_opts *o, unsigned depth);

/* UTF-8: code points of s (count), and the byte offset of code point index i. */
size_t ju_count(const char *p, size_t len);
size_t ju_offset(const char *p, size_t len, size_t i);
bool ju_is_space(uint32_t cp);
uint32_t ju_decode(const char *p, size_t len, size_t *adv);

/* ---- evaluator and library (jinja_eval.c, jinja_filters.c) ---- */

struct jv *jinja_eval(struct jstate *st, struct jenv *env, const struct jn *n);
/* Evaluate a call's arguments: positional (with *spread) into *args, keywords (with **spread)
 * into *kwargs (NULL when none). Returns the positional count. */
size_t jinja_eval_args(struct jstate *st, struct jenv *env, struct jn **kids, size_t n,
                       struct jv ***args, struct jv **kwargs);
struct jv *jinja_call(struct jstate *st, struct jenv *env, struct jv *fn, struct jv **args,
                      size_t n, struct jv *kwargs);
struct jenv *jenv_new(struct jstate *st, struct jenv *parent);
void jenv_set(struct jstate *st, struct jenv *e, const char *name, struct jv *v);
struct jv *jenv_get(struct jenv *e, const char *name);

/* Filters, tests, methods, globals. */
struct jv *jinja_filter(struct jstate *st, struct jenv *env, struct jv *v, const struct jn *f);
bool jinja_test(struct jstate *st, struct jv *v, const char *name);
struct jv *jinja_member(struct jstate *st, struct jv *obj, struct jv *key);
void jinja_globals(struct jstate *st, struct jenv *e);
/* Strings. */
struct jv *jstr_strip(struct jstate *st, struct jv *s, bool left, bool right);

#endif
