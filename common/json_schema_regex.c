/* JSON Schema `pattern` -> GBNF: the subset of ECMAScript regular expressions listed in
 * json_schema.h, translated to a GBNF expression over the JSON-encoded string (a `"` or `\`
 * in the value is written escaped; control characters are left out of classes). Recursive
 * descent, no backtracking. */
#include "json_schema.h"

#include "json_schema_impl.h"

#define RE_MAX_RANGES 256
#define RE_MAX_DEPTH  64

struct re {
    const char *s;
    size_t n, i;
    struct sbuf *b;
    char *err;
    size_t errlen;
    int depth;
};

struct rset {
    uint32_t r[2 * RE_MAX_RANGES];
    uint32_t n;
    bool neg;
};

__attribute__((format(printf, 2, 3))) static int re_fail(struct re *r, const char *fmt, ...)
{
    va_list ap;
    int k = snprintf(r->err, r->errlen, "'pattern' at offset %zu: ", r->i);

    if (k >= 0 && (size_t)k < r->errlen) {
        va_start(ap, fmt);
        vsnprintf(r->err + k, r->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int rset_add(struct re *r, struct rset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == RE_MAX_RANGES)
        return re_fail(r, "a character class with more than %d ranges", RE_MAX_RANGES);
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
    return 0;
}

static bool rset_has(const struct rset *s, uint32_t cp)
{
    for (uint32_t k = 0; k < s->n; k++)
        if (cp >= s->r[2 * k] && cp <= s->r[2 * k + 1])
            return !s->neg;
    return s->neg;
}

/* A literal character of the value, as the GBNF literal of its JSON spelling. */
static void emit_json_char(struct sbuf *b, uint32_t cp)
{
    if (cp == '"')
        sb_add(b, "\"\\x5C\\x22\"");
    else if (cp == '\\')
        sb_add(b, "\"\\x5C\\x5C\"");
    else if (cp < 0x20)
        sb_printf(b, "\"\\x5Cu00%02X\"", cp);
    else {
        sb_add(b, "\"");
        sb_gbnf_char(b, cp);
        sb_add(b, "\"");
    }
}

/* The excluded code points of a class: controls, '"' and '\' (written as alternatives). */
static const uint32_t excl[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};

static int emit_set(struct re *r, const struct rset *s)
{
    struct sbuf *b = r->b;
    bool q = rset_has(s, '"'), bs = rset_has(s, '\\'), any = false;

    sb_add(b, "(");
    if (s->neg) {
        sb_add(b, "[^");
        for (uint32_t k = 0; k < s->n; k++) {
            sb_gbnf_char(b, s->r[2 * k]);
            if (s->r[2 * k + 1] != s->r[2 * k]) {
                sb_add(b, "-");
                sb_gbnf_char(b, s->r[2 * k + 1]);
            }
        }
        sb_add(b, "\\x00-\\x1F\\x22\\x5C\\u2028\\u2029]");
        any = true;
    } else {
        struct sbuf cls = {0};

        for (uint32_t k = 0; k < s->n; k++) {
            uint32_t lo = s->r[2 * k], hi = s->r[2 * k + 1];

            /* cut the excluded points out of [lo, hi] */
            for (size_t e = 0; e < sizeof(excl) / sizeof(excl[0]) && lo <= hi; e++) {
                if (hi < excl[e][0] || lo > excl[e][1])
                    continue;
                if (lo < excl[e][0]) {
                    sb_gbnf_char(&cls, lo);
                    sb_add(&cls, "-");
                    sb_gbnf_char(&cls, excl[e][0] - 1);
                }
                lo = excl[e][1] + 1;
            }
            if (lo <= hi) {
                sb_gbnf_char(&cls, lo);
                if (hi != lo) {
                    sb_add(&cls, "-");
                    sb_gbnf_char(&cls, hi);
                }
            }
        }
        if (cls.n) {
            sb_add(b, "[");
            sb_addn(b, cls.s, cls.n);
            sb_add(b, "]");
            any = true;
        }
        if (cls.oom)
            b->oom = true;
        free(cls.s);
    }
    if (q) {
        sb_add(b, any ? " | " : "");
        sb_add(b, "\"\\x5C\\x22\"");
        any = true;
    }
    if (bs) {
        sb_add(b, any ? " | " : "");
        sb_add(b, "\"\\x5C\\x5C\"");
        any = true;
    }
    sb_add(b, ")");
    if (!any)
        return re_fail(r, "a character class with no character kiln can write in JSON");
    return 0;
}

static int hexn(struct re *r, int n, uint32_t *cp)
{
    *cp = 0;
    for (int k = 0; k < n; k++, r->i++) {
        char c = r->i < r->n ? r->s[r->i] : 0;

        if (c >= '0' && c <= '9')
            *cp = *cp << 4 | (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            *cp = *cp << 4 | (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            *cp = *cp << 4 | (uint32_t)(c - 'A' + 10);
        else
            return re_fail(r, "expected %d hex digits", n);
    }
    return 0;
}

/* The UTF-8 character at r->i. */
static int utf8_at(struct re *r, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i, len = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;

    if (len > left)
        return re_fail(r, "invalid UTF-8");
    *cp = len == 1 ? u[0] : len == 2 ? u[0] & 0x1Fu : len == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
    for (size_t k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80)
            return re_fail(r, "invalid UTF-8");
        *cp = *cp << 6 | (u[k] & 0x3Fu);
    }
    r->i += len;
    return 0;
}

/* An escape after '\' (r->i past it): a class shorthand into s (returns 1), or one
 * character into *cp (returns 0). */
static int escape(struct re *r, struct rset *s, uint32_t *cp)
{
    char c;
    int rc;

    if (r->i >= r->n)
        return re_fail(r, "a '\\' at the end");
    c = r->s[r->i++];
    switch (c) {
    case 'd': case 'D':
        s->neg = c == 'D';
        return (rc = rset_add(r, s, '0', '9')) < 0 ? rc : 1;
    case 'w': case 'W':
        s->neg = c == 'W';
        if ((rc = rset_add(r, s, 'a', 'z')) < 0 || (rc = rset_add(r, s, 'A', 'Z')) < 0 ||
            (rc = rset_add(r, s, '0', '9')) < 0 || (rc = rset_add(r, s, '_', '_')) < 0)
            return rc;
        return 1;
    case 's': case 'S':
        s->neg = c == 'S';
        if ((rc = rset_add(r, s, ' ', ' ')) < 0 || (rc = rset_add(r, s, '\t', '\r')) < 0)
            return rc;
        return 1;
    case 'n': *cp = '\n'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return hexn(r, 2, cp);
    case 'u': return hexn(r, 4, cp);
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9'))
            return re_fail(r, "the escape '\\%c' is not supported", c);
        *cp = (unsigned char)c;
        return 0;
    }
}

static int parse_class(struct re *r)
{
    struct rset s = {0};
    int rc;

    r->i++; /* [ */
    if (r->i < r->n && r->s[r->i] == '^') {
        s.neg = true;
        r->i++;
    }
    while (r->i < r->n && r->s[r->i] != ']') {
        uint32_t lo, hi;

        if (r->s[r->i] == '\\') {
            struct rset sh = {0};

            r->i++;
            if ((rc = escape(r, &sh, &lo)) < 0)
                return rc;
            if (rc == 1) {
                if (sh.neg)
                    return re_fail(r, "a negated shorthand (\\D \\W \\S) inside a class");
                for (uint32_t k = 0; k < sh.n; k++)
                    if ((rc = rset_add(r, &s, sh.r[2 * k], sh.r[2 * k + 1])) < 0)
                        return rc;
                continue;
            }
        } else if ((rc = utf8_at(r, &lo)) < 0) {
            return rc;
        }
        hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                struct rset sh = {0};

                r->i++;
                if ((rc = escape(r, &sh, &hi)) < 0)
                    return rc;
                if (rc == 1)
                    return re_fail(r, "a range ending in a class shorthand");
            } else if ((rc = utf8_at(r, &hi)) < 0) {
                return rc;
            }
            if (hi < lo)
                return re_fail(r, "a range out of order");
        }
        if ((rc = rset_add(r, &s, lo, hi)) < 0)
            return rc;
    }
    if (r->i >= r->n)
        return re_fail(r, "a class without its ']'");
    r->i++;
    return emit_set(r, &s);
}

static int parse_alt(struct re *r);

static int read_num(struct re *r, uint32_t *v)
{
    size_t at = r->i;

    *v = 0;
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
        *v = *v * 10 + (uint32_t)(r->s[r->i++] - '0');
        if (*v > 4096)
            return re_fail(r, "a repetition count above 4096");
    }
    return r->i > at ? 0 : re_fail(r, "a malformed {m,n}");
}

static int parse_quant(struct re *r)
{
    uint32_t m, n;
    int rc;

    if (r->i >= r->n)
        return 0;
    switch (r->s[r->i]) {
    case '*': case '+': case '?':
        sb_addn(r->b, &r->s[r->i], 1);
        r->i++;
        break;
    case '{':
        r->i++;
        if ((rc = read_num(r, &m)) < 0)
            return rc;
        n = m;
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            n = UINT32_MAX;
            if (r->i < r->n && r->s[r->i] != '}' && (rc = read_num(r, &n)) < 0)
                return rc;
        }
        if (r->i >= r->n || r->s[r->i] != '}' || n < m)
            return re_fail(r, "a malformed {m,n}");
        r->i++;
        if (n == UINT32_MAX)
            sb_printf(r->b, "{%u,}", m);
        else
            sb_printf(r->b, "{%u,%u}", m, n);
        break;
    default:
        return 0;
    }
    if (r->i < r->n && r->s[r->i] == '?')
        r->i++; /* lazy: the same language */
    if (r->i < r->n && strchr("*+?{", r->s[r->i]))
        return re_fail(r, "a quantifier after a quantifier");
    return 0;
}

static int parse_seq(struct re *r)
{
    bool empty = true;
    int rc;

    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        char c = r->s[r->i];
        uint32_t cp;

        if (c == '^') {
            if (!empty)
                return re_fail(r, "'^' is supported only at the start");
            r->i++;
            continue;
        }
        if (c == '$') {
            r->i++;
            if (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')')
                return re_fail(r, "'$' is supported only at the end");
            continue;
        }
        if (!empty)
            sb_add(r->b, " ");
        empty = false;
        if (c == '(') {
            if (++r->depth > RE_MAX_DEPTH)
                return re_fail(r, "groups nested too deep");
            r->i++;
            if (r->i + 1 < r->n && r->s[r->i] == '?') {
                if (r->s[r->i + 1] == ':') {
                    r->i += 2;
                } else if (r->s[r->i + 1] == '<' && r->i + 2 < r->n && r->s[r->i + 2] != '=' &&
                           r->s[r->i + 2] != '!') {
                    const char *e = memchr(r->s + r->i, '>', r->n - r->i);

                    if (!e)
                        return re_fail(r, "a named group without its '>'");
                    r->i = (size_t)(e - r->s) + 1;
                } else {
                    return re_fail(r, "lookaround '(?%c' is not supported", r->s[r->i + 1]);
                }
            }
            if ((rc = parse_alt(r)) < 0)
                return rc;
            if (r->i >= r->n || r->s[r->i] != ')')
                return re_fail(r, "a group without its ')'");
            r->i++;
            r->depth--;
        } else if (c == '[') {
            if ((rc = parse_class(r)) < 0)
                return rc;
        } else if (c == '.') {
            struct rset s = {.neg = true};

            r->i++;
            rset_add(r, &s, '\n', '\n');
            rset_add(r, &s, '\r', '\r');
            if ((rc = emit_set(r, &s)) < 0)
                return rc;
        } else if (c == '\\') {
            struct rset s = {0};

            r->i++;
            if ((rc = escape(r, &s, &cp)) < 0)
                return rc;
            if (rc == 1) {
                if ((rc = emit_set(r, &s)) < 0)
                    return rc;
            } else {
                emit_json_char(r->b, cp);
            }
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            return re_fail(r, "'%c' with nothing to repeat", c);
        } else {
            if ((rc = utf8_at(r, &cp)) < 0)
                return rc;
            emit_json_char(r->b, cp);
        }
        if ((rc = parse_quant(r)) < 0)
            return rc;
    }
    if (empty)
        sb_add(r->b, "\"\"");
    return 0;
}

static int parse_alt(struct re *r)
{
    int rc;

    sb_add(r->b, "(");
    for (;;) {
        if ((rc = parse_seq(r)) < 0)
            return rc;
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            sb_add(r->b, " | ");
            continue;
        }
        break;
    }
    sb_add(r->b, ")");
    return 0;
}

int json_schema_regex(const char *re, size_t re_len, char **out, size_t *n, size_t *cap,
                      char *err, size_t errlen)
{
    struct sbuf b = {.s = *out, .n = *n, .cap = *cap};
    struct re r = {.s = re, .n = re_len, .b = &b, .err = err, .errlen = errlen};
    int rc;

    sb_add(&b, "\"\\\"\" ");
    rc = parse_alt(&r);
    if (rc == 0 && r.i < r.n)
        rc = re_fail(&r, "an unmatched ')'");
    sb_add(&b, " \"\\\"\"");
    *out = b.s;
    *n = b.n;
    *cap = b.cap;
    if (rc == 0 && b.oom) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return rc;
}
