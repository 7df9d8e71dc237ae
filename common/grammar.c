/* The GBNF compiler: text -> struct grammar (grammar_impl.h). One pass of recursive descent
 * builds the rules (groups and repetitions become unnamed rules), then checks that every
 * referenced rule is defined, that `root` exists and that no rule is left-recursive. Errors
 * name the line and column. Matching is grammar_match.c. */
#include "grammar.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_impl.h"
#include "hash.h"

#define GRAMMAR_MAX_REPEAT 4096u  /* the largest m or n of x{m,n} */
#define GRAMMAR_MAX_SYMS   (1u << 20)
#define GRAMMAR_MAX_RULES  (1u << 16)
#define GRAMMAR_MAX_CHAIN  4096   /* rules that start one another, nested */
#define GRAMMAR_MAX_DEPTH  256    /* nested groups */

/* A growable array of uint32_t (also used for symbol pairs) */
struct vec {
    uint32_t *v;
    uint32_t n, cap;
};

static int vec_push(struct vec *a, uint32_t x)
{
    if (a->n == a->cap) {
        uint32_t cap = a->cap ? 2 * a->cap : 16;
        uint32_t *v = realloc(a->v, (size_t)cap * sizeof(*v));

        if (!v)
            return -ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

struct name {
    char *s;
    uint32_t len, rule;
    bool defined;
    size_t ref_at; /* the first reference, for "undefined rule" */
};

struct parser {
    const char *s;
    size_t len, i;
    char *err;
    size_t errlen;
    bool failed;
    int depth;
    struct vec syms;   /* pairs (kind, arg) */
    struct vec ranges; /* pairs (lo, hi) */
    struct gset *sets;
    uint32_t n_sets, cap_sets;
    struct grule *rules;
    uint32_t n_rules, cap_rules;
    struct vec alts;
    struct name *names;
    uint32_t n_names, cap_names;
    uint32_t char_set[128]; /* set index + 1 of each single ASCII character, 0: none yet */
};

static void where(const struct parser *p, size_t at, uint32_t *line, uint32_t *col)
{
    *line = 1;
    *col = 1;
    for (size_t k = 0; k < at && k < p->len; k++) {
        if (p->s[k] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)p->s[k] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

__attribute__((format(printf, 3, 4))) static int fail_at(struct parser *p, size_t at,
                                                         const char *fmt, ...)
{
    uint32_t line, col;
    va_list ap;
    int n;

    if (p->failed)
        return -EINVAL;
    p->failed = true;
    where(p, at, &line, &col);
    n = snprintf(p->err, p->errlen, "line %u, column %u: ", line, col);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int oom(struct parser *p)
{
    if (!p->failed) {
        p->failed = true;
        snprintf(p->err, p->errlen, "out of memory compiling the grammar");
    }
    return -ENOMEM;
}

static int new_rule(struct parser *p, size_t at)
{
    uint32_t line, col;

    if (p->n_rules >= GRAMMAR_MAX_RULES)
        return fail_at(p, at, "the grammar needs more than %u rules", GRAMMAR_MAX_RULES);
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? 2 * p->cap_rules : 32;
        struct grule *r = realloc(p->rules, (size_t)cap * sizeof(*r));

        if (!r)
            return oom(p);
        p->rules = r;
        p->cap_rules = cap;
    }
    where(p, at, &line, &col);
    p->rules[p->n_rules] = (struct grule){.line = line, .col = col, .n = UINT32_MAX};
    return (int)p->n_rules++;
}

/* The rule a name stands for, made (undefined) on first sight. */
static int name_rule(struct parser *p, const char *s, uint32_t len, size_t at)
{
    int r;

    for (uint32_t k = 0; k < p->n_names; k++)
        if (p->names[k].len == len && memcmp(p->names[k].s, s, len) == 0)
            return (int)p->names[k].rule;
    if (p->n_names == p->cap_names) {
        uint32_t cap = p->cap_names ? 2 * p->cap_names : 16;
        struct name *nm = realloc(p->names, (size_t)cap * sizeof(*nm));

        if (!nm)
            return oom(p);
        p->names = nm;
        p->cap_names = cap;
    }
    if ((r = new_rule(p, at)) < 0)
        return r;
    if (!(p->names[p->n_names].s = strndup(s, len)))
        return oom(p);
    p->names[p->n_names].len = len;
    p->names[p->n_names].rule = (uint32_t)r;
    p->names[p->n_names].defined = false;
    p->names[p->n_names].ref_at = at;
    p->n_names++;
    return r;
}

/* A new set from ranges (pairs, sorted and merged here). Returns its index or -errno. */
static int new_set(struct parser *p, uint32_t *rg, uint32_t n, bool neg)
{
    struct gset *s;
    uint32_t m = 0;

    /* insertion sort by lo: classes are short */
    for (uint32_t i = 1; i < n; i++) {
        uint32_t lo = rg[2 * i], hi = rg[2 * i + 1], j = i;

        while (j > 0 && rg[2 * (j - 1)] > lo) {
            rg[2 * j] = rg[2 * (j - 1)];
            rg[2 * j + 1] = rg[2 * (j - 1) + 1];
            j--;
        }
        rg[2 * j] = lo;
        rg[2 * j + 1] = hi;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (m > 0 && rg[2 * i] <= rg[2 * (m - 1) + 1] + 1) {
            if (rg[2 * i + 1] > rg[2 * (m - 1) + 1])
                rg[2 * (m - 1) + 1] = rg[2 * i + 1];
        } else {
            rg[2 * m] = rg[2 * i];
            rg[2 * m + 1] = rg[2 * i + 1];
            m++;
        }
    }
    if (p->n_sets == p->cap_sets) {
        uint32_t cap = p->cap_sets ? 2 * p->cap_sets : 32;
        struct gset *v = realloc(p->sets, (size_t)cap * sizeof(*v));

        if (!v)
            return oom(p);
        p->sets = v;
        p->cap_sets = cap;
    }
    s = &p->sets[p->n_sets];
    memset(s, 0, sizeof(*s));
    s->first = p->ranges.n / 2;
    s->n = m;
    s->neg = neg;
    for (uint32_t i = 0; i < m; i++) {
        if (vec_push(&p->ranges, rg[2 * i]) < 0 || vec_push(&p->ranges, rg[2 * i + 1]) < 0)
            return oom(p);
        for (uint32_t c = rg[2 * i]; c <= rg[2 * i + 1] && c < 128; c++)
            s->ascii[c >> 6] |= 1ull << (c & 63);
    }
    if (neg) {
        s->ascii[0] = ~s->ascii[0];
        s->ascii[1] = ~s->ascii[1];
    }
    return (int)p->n_sets++;
}

static int char_set(struct parser *p, uint32_t cp)
{
    uint32_t rg[2] = {cp, cp};
    int s;

    if (cp < 128 && p->char_set[cp])
        return (int)p->char_set[cp] - 1;
    if ((s = new_set(p, rg, 1, false)) >= 0 && cp < 128)
        p->char_set[cp] = (uint32_t)s + 1;
    return s;
}

/* --- lexing ----------------------------------------------------------------------------- */

static void skip_space(struct parser *p)
{
    while (p->i < p->len) {
        char c = p->s[p->i];

        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->len && p->s[p->i] != '\n')
                p->i++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static uint32_t name_len(const struct parser *p, size_t at)
{
    size_t k = at;

    while (k < p->len && is_name_char(p->s[k]))
        k++;
    return (uint32_t)(k - at);
}

/* Whether a rule definition (`name ::=`) starts at p->i */
static bool at_definition(const struct parser *p)
{
    uint32_t n = name_len(p, p->i);
    size_t k = p->i + n;

    if (n == 0)
        return false;
    while (k < p->len && (p->s[k] == ' ' || p->s[k] == '\t'))
        k++;
    return k + 3 <= p->len && memcmp(p->s + k, "::=", 3) == 0;
}

/* One UTF-8 character at p->i (validated). */
static int read_utf8(struct parser *p, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    size_t left = p->len - p->i;
    int n;

    if (u[0] < 0x80) {
        *cp = u[0];
        n = 1;
    } else if ((u[0] & 0xE0) == 0xC0 && left >= 2) {
        *cp = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
        n = 2;
    } else if ((u[0] & 0xF0) == 0xE0 && left >= 3) {
        *cp = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
        n = 3;
    } else if ((u[0] & 0xF8) == 0xF0 && left >= 4) {
        *cp = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
              (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
        n = 4;
    } else {
        return fail_at(p, p->i, "invalid UTF-8");
    }
    for (int k = 1; k < n; k++)
        if ((u[k] & 0xC0) != 0x80)
            return fail_at(p, p->i, "invalid UTF-8");
    if (*cp > 0x10FFFF)
        return fail_at(p, p->i, "a character beyond U+10FFFF");
    p->i += (size_t)n;
    return 0;
}

static int hex_digits(struct parser *p, int n, uint32_t *cp)
{
    size_t at = p->i;

    *cp = 0;
    for (int k = 0; k < n; k++) {
        char c = p->i < p->len ? p->s[p->i] : 0;
        uint32_t d;

        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return fail_at(p, at, "expected %d hex digits", n);
        *cp = *cp << 4 | d;
        p->i++;
    }
    if (*cp > 0x10FFFF)
        return fail_at(p, at, "a character beyond U+10FFFF");
    return 0;
}

/* One character of a literal or class, escapes decoded. */
static int read_char(struct parser *p, uint32_t *cp)
{
    size_t at = p->i;

    if (p->i >= p->len)
        return fail_at(p, at, "unexpected end of grammar");
    if (p->s[p->i] != '\\')
        return read_utf8(p, cp);
    if (++p->i >= p->len)
        return fail_at(p, at, "unexpected end of grammar after '\\'");
    switch (p->s[p->i++]) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case '0': *cp = 0; return 0;
    case '\\': *cp = '\\'; return 0;
    case '"': *cp = '"'; return 0;
    case '\'': *cp = '\''; return 0;
    case '[': *cp = '['; return 0;
    case ']': *cp = ']'; return 0;
    case '-': *cp = '-'; return 0;
    case '^': *cp = '^'; return 0;
    case '/': *cp = '/'; return 0;
    case 'x': return hex_digits(p, 2, cp);
    case 'u': return hex_digits(p, 4, cp);
    case 'U': return hex_digits(p, 8, cp);
    default:
        return fail_at(p, at, "unknown escape '\\%c'", p->s[p->i - 1]);
    }
}

/* --- rules ------------------------------------------------------------------------------ */

/* Append an alternative (its symbols, then END) and return its first position. */
static int commit_alt(struct parser *p, const struct vec *seq, uint32_t *pos)
{
    *pos = p->syms.n / 2;
    if (*pos + seq->n / 2 + 1 > GRAMMAR_MAX_SYMS)
        return fail_at(p, p->i, "the grammar is too large");
    for (uint32_t k = 0; k < seq->n; k++)
        if (vec_push(&p->syms, seq->v[k]) < 0)
            return oom(p);
    if (vec_push(&p->syms, GSYM_END) < 0 || vec_push(&p->syms, 0) < 0)
        return oom(p);
    return 0;
}

/* Give rule r the alternatives whose positions are in starts. */
static int commit_rule(struct parser *p, uint32_t r, const struct vec *starts)
{
    p->rules[r].first = p->alts.n;
    p->rules[r].n = starts->n;
    for (uint32_t k = 0; k < starts->n; k++)
        if (vec_push(&p->alts, starts->v[k]) < 0)
            return oom(p);
    return 0;
}

/* A rule with alternatives given as symbol sequences (each a vec of pairs); NULL seq: empty */
static int make_rule(struct parser *p, size_t at, const struct vec *a, const struct vec *b,
                     uint32_t *out)
{
    struct vec starts = {0};
    const struct vec empty = {0};
    uint32_t pos;
    int r, rc;

    if ((r = new_rule(p, at)) < 0)
        return r;
    if ((rc = commit_alt(p, a ? a : &empty, &pos)) < 0 || (rc = vec_push(&starts, pos)) < 0 ||
        (rc = commit_alt(p, b ? b : &empty, &pos)) < 0 || (rc = vec_push(&starts, pos)) < 0 ||
        (rc = commit_rule(p, (uint32_t)r, &starts)) < 0) {
        free(starts.v);
        return rc == -ENOMEM ? oom(p) : rc;
    }
    free(starts.v);
    *out = (uint32_t)r;
    return 0;
}

/* x* as a rule S ::= x S | (empty) */
static int star_rule(struct parser *p, size_t at, uint32_t kind, uint32_t arg, uint32_t *out)
{
    struct vec a = {0};
    int r, rc;

    if ((r = new_rule(p, at)) < 0)
        return r;
    rc = vec_push(&a, kind);
    rc |= vec_push(&a, arg);
    rc |= vec_push(&a, GSYM_RULE);
    rc |= vec_push(&a, (uint32_t)r);
    if (rc < 0) {
        free(a.v);
        return oom(p);
    }
    struct vec starts = {0};
    const struct vec empty = {0};
    uint32_t pos;

    if ((rc = commit_alt(p, &a, &pos)) < 0 || (rc = vec_push(&starts, pos)) < 0 ||
        (rc = commit_alt(p, &empty, &pos)) < 0 || (rc = vec_push(&starts, pos)) < 0 ||
        (rc = commit_rule(p, (uint32_t)r, &starts)) < 0)
        rc = rc == -ENOMEM ? oom(p) : rc;
    free(a.v);
    free(starts.v);
    *out = (uint32_t)r;
    return rc;
}

/* Replace the last symbol of seq (at index last) by its repetition {min, max}; max
 * UINT32_MAX: unbounded. */
static int repeat(struct parser *p, size_t at, struct vec *seq, uint32_t last, uint32_t min,
                  uint32_t max)
{
    uint32_t kind = seq->v[last], arg = seq->v[last + 1], r = 0;
    int rc;

    seq->n = last;
    for (uint32_t k = 0; k < min; k++)
        if (vec_push(seq, kind) < 0 || vec_push(seq, arg) < 0)
            return oom(p);
    if (max == UINT32_MAX) {
        if ((rc = star_rule(p, at, kind, arg, &r)) < 0)
            return rc;
    } else if (max > min) {
        /* x{0,k}: O1 ::= x O2 | ; ... ; Ok ::= x | , built from the inside out */
        struct vec a = {0};
        bool have = false;

        for (uint32_t k = 0; k < max - min; k++) {
            a.n = 0;
            if (vec_push(&a, kind) < 0 || vec_push(&a, arg) < 0 ||
                (have && (vec_push(&a, GSYM_RULE) < 0 || vec_push(&a, r) < 0))) {
                free(a.v);
                return oom(p);
            }
            if ((rc = make_rule(p, at, &a, NULL, &r)) < 0) {
                free(a.v);
                return rc;
            }
            have = true;
        }
        free(a.v);
    } else {
        return 0;
    }
    if (vec_push(seq, GSYM_RULE) < 0 || vec_push(seq, r) < 0)
        return oom(p);
    return 0;
}

static int read_count(struct parser *p, uint32_t *out)
{
    size_t at = p->i;
    uint64_t v = 0;

    if (p->i >= p->len || p->s[p->i] < '0' || p->s[p->i] > '9')
        return fail_at(p, at, "expected a number");
    while (p->i < p->len && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (uint64_t)(p->s[p->i++] - '0');
        if (v > GRAMMAR_MAX_REPEAT)
            return fail_at(p, at, "a repetition count above %u", GRAMMAR_MAX_REPEAT);
    }
    *out = (uint32_t)v;
    return 0;
}

static int parse_alternates(struct parser *p, uint32_t rule, size_t at);

static int parse_class(struct parser *p, struct vec *seq)
{
    size_t at = p->i;
    struct vec rg = {0};
    bool neg = false;
    int rc = 0, s;

    p->i++; /* [ */
    if (p->i < p->len && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    while (p->i < p->len && p->s[p->i] != ']') {
        uint32_t lo, hi;

        if ((rc = read_char(p, &lo)) < 0)
            goto out;
        hi = lo;
        if (p->i + 1 < p->len && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if ((rc = read_char(p, &hi)) < 0)
                goto out;
            if (hi < lo) {
                rc = fail_at(p, at, "a character range whose end is before its start");
                goto out;
            }
        }
        if (vec_push(&rg, lo) < 0 || vec_push(&rg, hi) < 0) {
            rc = oom(p);
            goto out;
        }
    }
    if (p->i >= p->len) {
        rc = fail_at(p, at, "a character class without its ']'");
        goto out;
    }
    p->i++;
    if ((s = new_set(p, rg.v, rg.n / 2, neg)) < 0) {
        rc = s;
        goto out;
    }
    if (vec_push(seq, GSYM_CHARS) < 0 || vec_push(seq, (uint32_t)s) < 0)
        rc = oom(p);
out:
    free(rg.v);
    return rc;
}

/* Symbols until '|', ')', the next definition or the end. */
static int parse_sequence(struct parser *p, struct vec *seq)
{
    for (;;) {
        size_t at;
        uint32_t last = seq->n;
        int rc, s;
        char c;

        skip_space(p);
        if (p->i >= p->len || at_definition(p))
            return 0;
        at = p->i;
        c = p->s[p->i];
        if (c == '|' || c == ')')
            return 0;
        if (c == '"') {
            p->i++;
            while (p->i < p->len && p->s[p->i] != '"') {
                uint32_t cp;

                if ((rc = read_char(p, &cp)) < 0)
                    return rc;
                if ((s = char_set(p, cp)) < 0)
                    return s;
                if (vec_push(seq, GSYM_CHARS) < 0 || vec_push(seq, (uint32_t)s) < 0)
                    return oom(p);
            }
            if (p->i >= p->len)
                return fail_at(p, at, "a string without its closing '\"'");
            p->i++;
            if (seq->n == last) /* "" matches the empty string: nothing to repeat */
                continue;
            if (seq->n > last + 2) { /* a postfix applies to the whole literal: group it */
                struct vec lit = {0};
                uint32_t r;

                for (uint32_t k = last; k < seq->n; k++)
                    if (vec_push(&lit, seq->v[k]) < 0)
                        return oom(p);
                skip_space(p);
                if (p->i < p->len && strchr("*+?{", p->s[p->i])) {
                    struct vec starts = {0};
                    uint32_t pos;
                    int r2 = new_rule(p, at);

                    if (r2 < 0 || commit_alt(p, &lit, &pos) < 0 || vec_push(&starts, pos) < 0 ||
                        commit_rule(p, (uint32_t)r2, &starts) < 0) {
                        free(lit.v);
                        free(starts.v);
                        return p->failed ? -EINVAL : oom(p);
                    }
                    free(starts.v);
                    r = (uint32_t)r2;
                    seq->n = last;
                    if (vec_push(seq, GSYM_RULE) < 0 || vec_push(seq, r) < 0) {
                        free(lit.v);
                        return oom(p);
                    }
                } else {
                    last = seq->n - 2; /* not used: no postfix follows */
                }
                free(lit.v);
            }
        } else if (c == '[') {
            if ((rc = parse_class(p, seq)) < 0)
                return rc;
        } else if (c == '.') {
            uint32_t rg[2] = {0, 0x10FFFF};

            p->i++;
            if ((s = new_set(p, rg, 1, false)) < 0)
                return s;
            if (vec_push(seq, GSYM_CHARS) < 0 || vec_push(seq, (uint32_t)s) < 0)
                return oom(p);
        } else if (c == '(') {
            int r;

            if (++p->depth > GRAMMAR_MAX_DEPTH)
                return fail_at(p, at, "groups nested more than %d deep", GRAMMAR_MAX_DEPTH);
            p->i++;
            if ((r = new_rule(p, at)) < 0)
                return r;
            if ((rc = parse_alternates(p, (uint32_t)r, at)) < 0)
                return rc;
            skip_space(p);
            if (p->i >= p->len || p->s[p->i] != ')')
                return fail_at(p, at, "a group without its ')'");
            p->i++;
            p->depth--;
            if (vec_push(seq, GSYM_RULE) < 0 || vec_push(seq, (uint32_t)r) < 0)
                return oom(p);
        } else if (is_name_char(c)) {
            uint32_t n = name_len(p, p->i);
            int r = name_rule(p, p->s + p->i, n, at);

            if (r < 0)
                return r;
            p->i += n;
            if (vec_push(seq, GSYM_RULE) < 0 || vec_push(seq, (uint32_t)r) < 0)
                return oom(p);
        } else {
            return fail_at(p, at, "unexpected '%c'", c);
        }
        /* postfix operators on the symbol just added */
        for (;;) {
            uint32_t min, max;

            if (p->i >= p->len)
                return 0;
            c = p->s[p->i];
            at = p->i;
            if (c == '*') {
                min = 0, max = UINT32_MAX;
                p->i++;
            } else if (c == '+') {
                min = 1, max = UINT32_MAX;
                p->i++;
            } else if (c == '?') {
                min = 0, max = 1;
                p->i++;
            } else if (c == '{') {
                p->i++;
                skip_space(p);
                if ((rc = read_count(p, &min)) < 0)
                    return rc;
                skip_space(p);
                max = min;
                if (p->i < p->len && p->s[p->i] == ',') {
                    p->i++;
                    skip_space(p);
                    max = UINT32_MAX;
                    if (p->i < p->len && p->s[p->i] != '}' && (rc = read_count(p, &max)) < 0)
                        return rc;
                    skip_space(p);
                }
                if (p->i >= p->len || p->s[p->i] != '}')
                    return fail_at(p, at, "a repetition without its '}'");
                p->i++;
                if (max < min)
                    return fail_at(p, at, "a repetition {m,n} with n < m");
            } else {
                break;
            }
            if (seq->n == last)
                return fail_at(p, at, "'%c' with nothing to repeat", c);
            last = seq->n - 2;
            if ((rc = repeat(p, at, seq, last, min, max)) < 0)
                return rc;
            /* a further postfix applies to the result: treat it as one symbol when it is */
            if (seq->n != last + 2)
                break;
        }
    }
}

static int parse_alternates(struct parser *p, uint32_t rule, size_t at)
{
    struct vec starts = {0}, seq = {0};
    uint32_t pos;
    int rc;

    (void)at;
    for (;;) {
        seq.n = 0;
        if ((rc = parse_sequence(p, &seq)) < 0)
            goto out;
        if ((rc = commit_alt(p, &seq, &pos)) < 0)
            goto out;
        if (vec_push(&starts, pos) < 0) {
            rc = oom(p);
            goto out;
        }
        skip_space(p);
        if (p->i < p->len && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    rc = commit_rule(p, rule, &starts);
out:
    free(starts.v);
    free(seq.v);
    return rc;
}

/* --- checks ----------------------------------------------------------------------------- */

static uint32_t sat_add(uint32_t a, uint32_t b)
{
    return a > UINT32_MAX - b ? UINT32_MAX : a + b;
}

/* Fixpoint of each rule's shortest sentence; 0 means nullable. */
static void min_lengths(struct grammar *g)
{
    bool changed = true;

    for (uint32_t r = 0; r < g->n_rules; r++)
        g->rules[r].min_len = UINT32_MAX;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            for (uint32_t a = 0; a < g->rules[r].n; a++) {
                uint32_t len = 0;

                for (uint32_t pos = g->alts[g->rules[r].first + a]; g->syms[pos].kind != GSYM_END;
                     pos++)
                    len = sat_add(len, g->syms[pos].kind == GSYM_CHARS
                                           ? 1
                                           : g->rules[g->syms[pos].arg].min_len);
                if (len < g->rules[r].min_len) {
                    g->rules[r].min_len = len;
                    changed = true;
                }
            }
        }
    }
}

/* DFS over "A can start with B" edges; colour 1 on the path, 2 done. Returns the rule
 * found on a cycle, or -1. */
static int left_cycle(const struct grammar *g, uint32_t r, uint8_t *colour, uint32_t depth)
{
    if (colour[r] == 1)
        return (int)r;
    if (colour[r] == 2)
        return -1;
    if (depth > GRAMMAR_MAX_CHAIN)
        return -2; /* too deep to check on the stack: refused */
    colour[r] = 1;
    for (uint32_t a = 0; a < g->rules[r].n; a++) {
        for (uint32_t pos = g->alts[g->rules[r].first + a]; g->syms[pos].kind == GSYM_RULE;
             pos++) {
            int c = left_cycle(g, g->syms[pos].arg, colour, depth + 1);

            if (c >= 0 || c == -2)
                return c;
            if (g->rules[g->syms[pos].arg].min_len != 0)
                break;
        }
    }
    colour[r] = 2;
    return -1;
}

static const char *rule_name(const struct parser *p, uint32_t r)
{
    for (uint32_t k = 0; k < p->n_names; k++)
        if (p->names[k].rule == r)
            return p->names[k].s;
    return NULL;
}

static int check(struct parser *p, struct grammar *g)
{
    uint8_t *colour;
    int root = -1, c = -1;

    for (uint32_t k = 0; k < p->n_names; k++) {
        if (!p->names[k].defined)
            return fail_at(p, p->names[k].ref_at, "rule '%s' is not defined", p->names[k].s);
        if (strcmp(p->names[k].s, "root") == 0)
            root = (int)p->names[k].rule;
    }
    if (root < 0) {
        snprintf(p->err, p->errlen, "line 1, column 1: the grammar has no 'root' rule");
        p->failed = true;
        return -EINVAL;
    }
    g->root = (uint32_t)root;
    min_lengths(g);
    if (!(colour = calloc(g->n_rules, 1)))
        return oom(p);
    for (uint32_t r = 0; r < g->n_rules && c == -1; r++)
        c = left_cycle(g, r, colour, 0);
    free(colour);
    if (c == -2) {
        p->failed = true;
        snprintf(p->err, p->errlen, "line 1, column 1: rules start one another more than %d "
                 "deep", GRAMMAR_MAX_CHAIN);
        return -EINVAL;
    }
    if (c >= 0) {
        const char *n = rule_name(p, (uint32_t)c);

        p->failed = true;
        snprintf(p->err, p->errlen, "line %u, column %u: %s%s%s is left-recursive",
                 g->rules[c].line, g->rules[c].col, n ? "rule '" : "the group",
                 n ? n : "", n ? "'" : "");
        return -EINVAL;
    }
    return 0;
}

struct grammar *grammar_compile(const char *src, size_t len, char *err, size_t errlen)
{
    struct parser p = {.s = src, .len = len, .err = err, .errlen = errlen};
    struct grammar *g = NULL;
    int rc = 0;

    if (errlen)
        err[0] = '\0';
    if (len > GRAMMAR_MAX_SOURCE) {
        snprintf(err, errlen, "line 1, column 1: the grammar is longer than %u bytes",
                 GRAMMAR_MAX_SOURCE);
        return NULL;
    }
    if (memchr(src, '\0', len)) {
        fail_at(&p, (size_t)((const char *)memchr(src, '\0', len) - src), "a NUL byte");
        return NULL;
    }
    skip_space(&p);
    while (p.i < p.len && rc == 0) {
        size_t at = p.i;
        uint32_t n = name_len(&p, p.i);
        int r;

        if (n == 0 || !at_definition(&p)) {
            rc = fail_at(&p, at, "expected a rule definition 'name ::= ...'");
            break;
        }
        if ((r = name_rule(&p, p.s + p.i, n, at)) < 0) {
            rc = r;
            break;
        }
        for (uint32_t k = 0; k < p.n_names; k++) {
            if (p.names[k].rule != (uint32_t)r)
                continue;
            if (p.names[k].defined) {
                rc = fail_at(&p, at, "rule '%s' is defined twice", p.names[k].s);
                break;
            }
            p.names[k].defined = true;
            where(&p, at, &p.rules[r].line, &p.rules[r].col);
        }
        if (rc < 0)
            break;
        p.i += n;
        skip_space(&p);
        p.i += 3; /* ::= (at_definition saw it) */
        rc = parse_alternates(&p, (uint32_t)r, at);
        skip_space(&p);
        if (rc == 0 && p.i < p.len && !at_definition(&p))
            rc = fail_at(&p, p.i, "unexpected '%c'", p.s[p.i]);
    }
    if (rc < 0 || p.failed)
        goto out;
    if (!(g = calloc(1, sizeof(*g)))) {
        oom(&p);
        goto out;
    }
    g->n_syms = p.syms.n / 2;
    g->syms = (struct gsym *)(void *)p.syms.v; /* pairs of uint32_t: the same layout */
    p.syms.v = NULL;
    g->ranges = p.ranges.v;
    g->n_ranges = p.ranges.n / 2;
    p.ranges.v = NULL;
    g->sets = p.sets;
    g->n_sets = p.n_sets;
    p.sets = NULL;
    g->rules = p.rules;
    g->n_rules = p.n_rules;
    p.rules = NULL;
    g->alts = p.alts.v;
    g->n_alts = p.alts.n;
    p.alts.v = NULL;
    g->hash = hash_fnv1a(src, len);
    if (check(&p, g) < 0) {
        grammar_destroy(g);
        g = NULL;
    }
out:
    for (uint32_t k = 0; k < p.n_names; k++)
        free(p.names[k].s);
    free(p.names);
    free(p.syms.v);
    free(p.ranges.v);
    free(p.sets);
    free(p.rules);
    free(p.alts.v);
    return g;
}

void grammar_destroy(struct grammar *g)
{
    if (!g)
        return;
    free(g->syms);
    free(g->ranges);
    free(g->sets);
    free(g->rules);
    free(g->alts);
    free(g);
}

uint64_t grammar_hash(const struct grammar *g)
{
    return g->hash;
}
