/* Jinja lexer: template text to tokens, as @huggingface/jinja tokenises with Hugging Face's
 * settings. First the text is prepared: one trailing newline dropped, spaces and tabs before
 * a line's "{%" or "{#" removed (lstrip_blocks), the newline after "%}" or "#}" removed
 * (trim_blocks), {% generation %} markers dropped. Then text runs outside tags become TEXT
 * tokens, "-" on a tag strips the whitespace beside it, and inside tags come names, numbers
 * (a sign right after an operator belongs to the number), strings with escapes, operators. */
#include "jinja_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct lex {
    struct jarena *a;
    const char *src;
    size_t len, pos;
    struct jtok *toks;
    size_t n, cap;
    char *err;
    size_t errlen;
    bool failed;
};

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_word(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static unsigned line_at(const struct lex *l, size_t pos)
{
    unsigned line = 1;
    for (size_t i = 0; i < pos && i < l->len; i++)
        line += l->src[i] == '\n';
    return line;
}

__attribute__((format(printf, 2, 3))) static void lex_fail(struct lex *l, const char *fmt, ...)
{
    if (l->failed)
        return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(l->err, l->errlen, "line %u: %s", line_at(l, l->pos), msg);
    l->failed = true;
}

static char at(const struct lex *l, size_t i)
{
    return i < l->len ? l->src[i] : '\0';
}

static bool starts(const struct lex *l, const char *s)
{
    size_t n = strlen(s);
    return l->pos + n <= l->len && memcmp(l->src + l->pos, s, n) == 0;
}

static bool push(struct lex *l, enum jtok_type type, const char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        struct jtok *nt = jarena_alloc(l->a, cap * sizeof(*nt));
        if (!nt) {
            lex_fail(l, "out of memory");
            return false;
        }
        if (l->n)
            memcpy(nt, l->toks, l->n * sizeof(*nt));
        l->toks = nt;
        l->cap = cap;
    }
    char *copy = jarena_alloc(l->a, len + 1);
    if (!copy) {
        lex_fail(l, "out of memory");
        return false;
    }
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->toks[l->n++] = (struct jtok){type, copy, len, line_at(l, l->pos)};
    return true;
}

/* A growing scratch string in the arena. */
struct scratch {
    char *p;
    size_t len, cap;
};

static bool scratch_put(struct lex *l, struct scratch *s, const char *p, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (s->len + n + 1 > cap)
            cap *= 2;
        char *np = jarena_alloc(l->a, cap);
        if (!np) {
            lex_fail(l, "out of memory");
            return false;
        }
        if (s->len)
            memcpy(np, s->p, s->len);
        s->p = np;
        s->cap = cap;
    }
    memcpy(s->p + s->len, p, n);
    s->len += n;
    s->p[s->len] = '\0';
    return true;
}

static void put_cp(struct lex *l, struct scratch *s, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    }
    scratch_put(l, s, b, n);
}

enum pred { P_WS, P_DIGIT, P_WORD, P_NOT_QUOTE };

static bool pred_ok(enum pred p, char c, char quote, bool end)
{
    switch (p) {
    case P_WS: return !end && is_ws(c);
    case P_DIGIT: return !end && is_digit(c);
    case P_WORD: return !end && is_word(c);
    default: return end || c != quote; /* past the end: JavaScript reads "undefined" */
    }
}

static int hexval(char c)
{
    if (is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* consumeWhile of the reference lexer: backslash escapes decoded, and running into the end of
 * the input is an error. */
static bool consume(struct lex *l, enum pred p, char quote, struct scratch *out)
{
    while (pred_ok(p, at(l, l->pos), quote, l->pos >= l->len)) {
        if (l->pos >= l->len) {
            lex_fail(l, "unexpected end of input");
            return false;
        }
        char c = l->src[l->pos];
        if (c == '\\') {
            if (++l->pos >= l->len) {
                lex_fail(l, "unexpected end of input");
                return false;
            }
            char e = l->src[l->pos++];
            if (e == 'x' || e == 'u') {
                int nd = e == 'x' ? 2 : 4;
                uint32_t cp = 0;
                for (int i = 0; i < nd; i++) {
                    int h = hexval(at(l, l->pos + (size_t)i));
                    if (h < 0 || l->pos + (size_t)i >= l->len) {
                        lex_fail(l, "invalid hexadecimal escape sequence");
                        return false;
                    }
                    cp = cp * 16 + (uint32_t)h;
                }
                put_cp(l, out, cp);
                l->pos += (size_t)nd;
                continue;
            }
            const char *from = "ntrbfv'\"\\", *to = "\n\t\r\b\f\v'\"\\";
            const char *k = e ? strchr(from, e) : NULL;
            if (!k) {
                lex_fail(l, "unexpected escaped character: %c", e);
                return false;
            }
            scratch_put(l, out, to + (k - from), 1);
            continue;
        }
        scratch_put(l, out, &c, 1);
        if (++l->pos >= l->len) {
            lex_fail(l, "unexpected end of input");
            return false;
        }
    }
    return !l->failed;
}

/* The trailing whitespace (JavaScript's trimEnd) of the last TEXT token goes; an emptied token
 * is dropped. */
static void strip_last_text(struct lex *l)
{
    if (!l->n || l->toks[l->n - 1].type != JT_TEXT)
        return;
    struct jtok *t = &l->toks[l->n - 1];
    size_t n = t->len;
    while (n) {
        size_t k = n - 1;
        while (k && ((unsigned char)t->s[k] & 0xC0) == 0x80)
            k--;
        size_t adv;
        if (!ju_is_space(ju_decode(t->s + k, n - k, &adv)))
            break;
        n = k;
    }
    t->len = n;
    ((char *)t->s)[n] = '\0';
    if (n == 0)
        l->n--;
}

static void skip_ws(struct lex *l)
{
    while (l->pos < l->len && is_ws(l->src[l->pos]))
        l->pos++;
}

static const struct {
    const char *seq;
    enum jtok_type type;
} table[] = {
    {"{%", JT_OPEN_STMT}, {"%}", JT_CLOSE_STMT}, {"{{", JT_OPEN_EXPR}, {"}}", JT_CLOSE_EXPR},
    {"(", JT_LPAREN},     {")", JT_RPAREN},      {"{", JT_LBRACE},     {"}", JT_RBRACE},
    {"[", JT_LBRACKET},   {"]", JT_RBRACKET},    {",", JT_COMMA},      {".", JT_DOT},
    {":", JT_COLON},      {"|", JT_PIPE},        {"<=", JT_CMP},       {">=", JT_CMP},
    {"==", JT_CMP},       {"!=", JT_CMP},        {"<", JT_CMP},        {">", JT_CMP},
    {"+", JT_ADD},        {"-", JT_ADD},         {"~", JT_ADD},        {"**", JT_POW},
    {"*", JT_MUL},        {"//", JT_MUL},        {"/", JT_MUL},        {"%", JT_MUL},
    {"=", JT_EQUALS},
};

static int lex_one(struct lex *l, int *curly)
{
    int last = l->n ? (int)l->toks[l->n - 1].type : -1;
    if (last < 0 || last == JT_CLOSE_STMT || last == JT_CLOSE_EXPR || last == JT_COMMENT) {
        size_t start = l->pos;
        while (l->pos < l->len &&
               !(l->src[l->pos] == '{' &&
                 (at(l, l->pos + 1) == '%' || at(l, l->pos + 1) == '{' || at(l, l->pos + 1) == '#')))
            l->pos++;
        if (l->pos > start)
            return push(l, JT_TEXT, l->src + start, l->pos - start) ? 0 : -1;
    }
    if (starts(l, "{#")) {
        l->pos += 2;
        bool before = at(l, l->pos) == '-';
        if (before)
            l->pos++;
        size_t start = l->pos;
        while (!(at(l, l->pos) == '#' && at(l, l->pos + 1) == '}')) {
            if (l->pos + 2 >= l->len) {
                lex_fail(l, "missing end of comment tag");
                return -1;
            }
            l->pos++;
        }
        size_t clen = l->pos - start;
        bool after = clen && l->src[l->pos - 1] == '-';
        if (before)
            strip_last_text(l);
        if (!push(l, JT_COMMENT, l->src + start, clen - after))
            return -1;
        l->pos += 2;
        if (after)
            skip_ws(l);
        return 0;
    }
    if (starts(l, "{%-") || starts(l, "{{-")) {
        bool expr = l->src[l->pos + 1] == '{';
        strip_last_text(l);
        if (!push(l, expr ? JT_OPEN_EXPR : JT_OPEN_STMT, expr ? "{{" : "{%", 2))
            return -1;
        if (expr)
            *curly = 0;
        l->pos += 3;
        return 0;
    }
    struct scratch s = {0};
    if (!consume(l, P_WS, 0, &s))
        return -1;
    if (starts(l, "-%}") || starts(l, "-}}")) {
        bool expr = l->src[l->pos + 1] == '}';
        if (!push(l, expr ? JT_CLOSE_EXPR : JT_CLOSE_STMT, expr ? "}}" : "%}", 2))
            return -1;
        l->pos += 3;
        skip_ws(l);
        return 0;
    }
    char c = at(l, l->pos);
    if (c == '-' || c == '+') {
        if (last < 0 || last == JT_TEXT) {
            lex_fail(l, "unexpected character: %c", c);
            return -1;
        }
        if (last != JT_IDENT && last != JT_NUMBER && last != JT_STRING && last != JT_RPAREN &&
            last != JT_RBRACKET) {
            l->pos++;
            struct scratch num = {0};
            scratch_put(l, &num, &c, 1);
            if (!consume(l, P_DIGIT, 0, &num))
                return -1;
            if (num.len > 1 && at(l, l->pos) == '.' && is_digit(at(l, l->pos + 1))) {
                l->pos++;
                scratch_put(l, &num, ".", 1);
                if (!consume(l, P_DIGIT, 0, &num))
                    return -1;
            }
            if (l->failed)
                return -1;
            return push(l, num.len > 1 ? JT_NUMBER : JT_UNARY, num.p, num.len) ? 0 : -1;
        }
    }
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (table[i].type == JT_CLOSE_EXPR && *curly > 0)
            continue;
        if (starts(l, table[i].seq)) {
            size_t n = strlen(table[i].seq);
            if (!push(l, table[i].type, table[i].seq, n))
                return -1;
            if (table[i].type == JT_OPEN_EXPR)
                *curly = 0;
            else if (table[i].type == JT_LBRACE)
                ++*curly;
            else if (table[i].type == JT_RBRACE)
                --*curly;
            l->pos += n;
            return 0;
        }
    }
    if (c == '\'' || c == '"') {
        l->pos++;
        struct scratch str = {0};
        if (!consume(l, P_NOT_QUOTE, c, &str))
            return -1;
        l->pos++;
        return push(l, JT_STRING, str.p ? str.p : "", str.len) ? 0 : -1;
    }
    if (is_digit(c)) {
        struct scratch num = {0};
        if (!consume(l, P_DIGIT, 0, &num))
            return -1;
        if (last != JT_DOT && at(l, l->pos) == '.' && is_digit(at(l, l->pos + 1))) {
            l->pos++;
            scratch_put(l, &num, ".", 1);
            if (!consume(l, P_DIGIT, 0, &num))
                return -1;
        }
        if (l->failed)
            return -1;
        return push(l, JT_NUMBER, num.p, num.len) ? 0 : -1;
    }
    if (is_word(c)) {
        struct scratch w = {0};
        if (!consume(l, P_WORD, 0, &w))
            return -1;
        return push(l, JT_IDENT, w.p, w.len) ? 0 : -1;
    }
    if (l->pos >= l->len) {
        lex_fail(l, "unexpected end of input");
        return -1;
    }
    if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
        lex_fail(l, "unexpected character: %c", c);
    else
        lex_fail(l, "unexpected character: byte 0x%02x", (unsigned char)c);
    return -1;
}

/* The text as the reference prepares it (see the top of the file), in the arena. */
static char *preprocess(struct jarena *a, const char *src, size_t *len)
{
    size_t n = *len;
    if (n && src[n - 1] == '\n')
        n--;
    char *t = jarena_alloc(a, n + 1), *u;
    if (!t)
        return NULL;
    /* lstrip_blocks: ^[ \t]*({[#%-]) at every line start */
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i == 0 || src[i - 1] == '\n' || src[i - 1] == '\r') {
            size_t j = i;
            while (j < n && (src[j] == ' ' || src[j] == '\t'))
                j++;
            if (j > i && j + 1 < n && src[j] == '{' &&
                (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-'))
                i = j;
        }
        if (i < n)
            t[o++] = src[i++];
    }
    /* trim_blocks: ([#%-]})\n */
    n = o;
    if (!(u = jarena_alloc(a, n + 1)))
        return NULL;
    o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 2 < n && (t[i] == '#' || t[i] == '%' || t[i] == '-') && t[i + 1] == '}' &&
            t[i + 2] == '\n') {
            u[o++] = t[i];
            u[o++] = '}';
            i += 3;
            continue;
        }
        u[o++] = t[i++];
    }
    /* (\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*): the marker goes, with the whitespace
     * on a side that has "-" */
    n = o;
    o = 0;
    for (size_t i = 0; i < n;) {
        if (u[i] == '{' && i + 1 < n && u[i + 1] == '%') {
            size_t j = i + 2;
            bool l = j < n && u[j] == '-', r = false;
            j += l;
            while (j < n && is_ws(u[j]))
                j++;
            if (j + 3 <= n && !memcmp(u + j, "end", 3))
                j += 3;
            if (j + 10 <= n && !memcmp(u + j, "generation", 10)) {
                j += 10;
                while (j < n && is_ws(u[j]))
                    j++;
                if (j < n && u[j] == '-') {
                    r = true;
                    j++;
                }
                if (j + 2 <= n && u[j] == '%' && u[j + 1] == '}') {
                    j += 2;
                    if (l)
                        while (o && is_ws(u[o - 1]))
                            o--;
                    if (r)
                        while (j < n && is_ws(u[j]))
                            j++;
                    i = j;
                    continue;
                }
            }
        }
        u[o++] = u[i++];
    }
    u[o] = '\0';
    *len = o;
    return u;
}

long jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **toks, char *err,
               size_t errlen)
{
    struct lex l = {.a = a, .err = err, .errlen = errlen};
    int curly = 0;
    if (!(l.src = preprocess(a, src, &len))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    l.len = len;
    while (l.pos < l.len)
        if (lex_one(&l, &curly) < 0 || l.failed)
            return -1;
    *toks = l.toks;
    return (long)l.n;
}
