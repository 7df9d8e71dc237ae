/* JSON Schema -> GBNF (coverage in json_schema.h). Each subschema becomes a rule sN; $refs
 * are memoised by their pointer, so recursive schemas become recursive rules. The JSON
 * scaffolding (ws, string, number, value, ...) is one fixed block of rules appended to
 * every grammar. Objects keep the schema's property order: for properties p1..pn, rule
 * first(i) is "p_i after(i+1)" (or "first(i+1)" when p_i is optional) and after(i) the same
 * with a leading comma, so any subset of the optional ones is written, in order, with
 * commas only between members. */
#include "json_schema.h"

#include <math.h>

#include "json_schema_impl.h"

#define JS_MAX_DEPTH 64
#define JS_MAX_REFS  512
#define JS_MAX_COUNT 4096 /* the largest minItems/maxItems/minLength/maxLength written out */
#define JS_INT_MAX   999999999999999LL /* 15 digits: an unbounded integer side stops here */

static const char js_base[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,4}\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n"
    "jkchar ::= [^\"\\\\\\x00-\\x1F]\n"
    "string ::= \"\\\"\" jchar* \"\\\"\"\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws (string ws \":\" ws value (ws \",\" ws string ws \":\" ws value)*)? ws "
    "\"}\"\n"
    "array ::= \"[\" ws (value (ws \",\" ws value)*)? ws \"]\"\n"
    "d2 ::= [0-9] [0-9]\n"
    "date ::= [0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | "
    "\"3\" [01]) | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" "
    "(\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))\n"
    "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,3})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
    "[0-9a-f]{12}\n"
    "eatom ::= [a-zA-Z0-9_+-]{1,16}\n"
    "elabel ::= [a-zA-Z0-9] ([a-zA-Z0-9-]{0,14} [a-zA-Z0-9])?\n"
    "email ::= eatom (\".\" eatom){0,3} \"@\" elabel (\".\" elabel){0,2} \".\" [a-zA-Z]{2,6}\n";

struct js_ref {
    char *path;
    unsigned rule;
};

struct conv {
    json_t *root;
    struct sbuf out;
    unsigned n_rules;
    char *err;
    size_t errlen;
    bool failed;
    int depth;
    struct js_ref refs[JS_MAX_REFS];
    unsigned n_refs;
};

__attribute__((format(printf, 2, 3))) static int js_fail(struct conv *c, const char *fmt, ...)
{
    va_list ap;

    if (c->failed)
        return -EINVAL;
    c->failed = true;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* A GBNF literal for the JSON text of v (compact). */
static int lit_json(struct conv *c, struct sbuf *b, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    const unsigned char *u = (const unsigned char *)s;

    if (!s)
        return js_fail(c, "out of memory");
    sb_add(b, "\"");
    while (*u) {
        uint32_t cp = *u;
        int len = *u < 0x80 ? 1 : *u < 0xE0 ? 2 : *u < 0xF0 ? 3 : 4;

        if (len > 1) {
            cp = *u & (0x3Fu >> (len - 1));
            for (int k = 1; k < len && u[k]; k++)
                cp = cp << 6 | (u[k] & 0x3Fu);
        }
        sb_gbnf_char(b, cp);
        u += len;
    }
    sb_add(b, "\"");
    free(s);
    return 0;
}

static int gen(struct conv *c, json_t *s, unsigned *rule);

/* "name ::= body\n" into the output */
static void emit_rule(struct conv *c, unsigned r, const struct sbuf *body)
{
    sb_printf(&c->out, "s%u ::= ", r);
    sb_addn(&c->out, body->s ? body->s : "\"\"", body->s ? body->n : 2);
    sb_add(&c->out, "\n");
    if (body->oom)
        c->out.oom = true;
}

/* Append a reference to the rule for s ("value" for true or {}). */
static int ref_schema(struct conv *c, struct sbuf *b, json_t *s)
{
    unsigned r = 0;
    int rc;

    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        sb_add(b, "value");
        return 0;
    }
    if ((rc = gen(c, s, &r)) < 0)
        return rc;
    sb_printf(b, "s%u", r);
    return 0;
}

static json_t *resolve(struct conv *c, const char *ref)
{
    json_t *v = c->root;
    const char *p;

    if (ref[0] != '#')
        return NULL;
    p = ref + 1;
    while (*p == '/') {
        char key[256];
        size_t k = 0;

        p++;
        while (*p && *p != '/' && k + 1 < sizeof(key)) {
            if (p[0] == '~' && p[1] == '1')
                key[k++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0')
                key[k++] = '~', p += 2;
            else
                key[k++] = *p++;
        }
        key[k] = '\0';
        if (json_is_object(v))
            v = json_object_get(v, key);
        else if (json_is_array(v))
            v = json_array_get(v, strtoul(key, NULL, 10));
        else
            return NULL;
        if (!v)
            return NULL;
    }
    return *p ? NULL : v;
}

/* A rule for the schema a $ref names, made once per ref. */
static int gen_ref(struct conv *c, const char *ref, unsigned *rule)
{
    json_t *t;
    unsigned r = 0;
    int rc;

    for (unsigned k = 0; k < c->n_refs; k++) {
        if (strcmp(c->refs[k].path, ref) == 0) {
            *rule = c->refs[k].rule;
            return 0;
        }
    }
    if (!(t = resolve(c, ref)))
        return js_fail(c, "'$ref' '%.200s' does not resolve (only '#/...' pointers into the schema)",
                       ref);
    if (c->n_refs == JS_MAX_REFS)
        return js_fail(c, "more than %d different '$ref's", JS_MAX_REFS);
    r = ++c->n_rules;
    if (!(c->refs[c->n_refs].path = strdup(ref)))
        return js_fail(c, "out of memory");
    c->refs[c->n_refs++].rule = r;
    /* s<r> ::= <the target's rule>: the target may refer back to r, which now exists */
    struct sbuf body = {0};

    if ((rc = ref_schema(c, &body, t)) == 0)
        emit_rule(c, r, &body);
    free(body.s);
    *rule = r;
    return rc;
}

/* --- numbers ------------------------------------------------------------------------------ */

/* Same-length decimal strings lo..hi (digit by digit). */
static void fixed_range(struct sbuf *b, const char *lo, const char *hi, size_t n)
{
    if (n == 0) {
        sb_add(b, "\"\"");
        return;
    }
    if (lo[0] == hi[0]) {
        sb_printf(b, "\"%c\" ", lo[0]);
        fixed_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    if (strspn(lo + 1, "0") == n - 1 && strspn(hi + 1, "9") == n - 1) {
        sb_printf(b, "[%c-%c]", lo[0], hi[0]);
        if (n > 1)
            sb_printf(b, " [0-9]{%zu}", n - 1);
        return;
    }
    char nines[24], zeros[24];

    memset(nines, '9', n - 1);
    nines[n - 1] = '\0';
    memset(zeros, '0', n - 1);
    zeros[n - 1] = '\0';
    sb_printf(b, "(\"%c\" (", lo[0]);
    fixed_range(b, lo + 1, nines, n - 1);
    sb_add(b, ")");
    if (lo[0] + 1 <= hi[0] - 1) {
        sb_printf(b, " | [%c-%c]", lo[0] + 1, hi[0] - 1);
        if (n > 1)
            sb_printf(b, " [0-9]{%zu}", n - 1);
    }
    sb_printf(b, " | \"%c\" (", hi[0]);
    fixed_range(b, zeros, hi + 1, n - 1);
    sb_add(b, "))");
}

/* Decimal integers a..b (0 <= a <= b), no leading zeros, as "(alt | alt ...)". */
static void uint_range(struct sbuf *b, long long a, long long bb)
{
    char lo[24], hi[24];
    long long p = 1;
    bool first = true;

    sb_add(b, "(");
    for (int len = 1; len <= 16; len++, p *= 10) {
        long long l = len == 1 ? 0 : p, h = p * 10 - 1;

        if (l < a)
            l = a;
        if (h > bb)
            h = bb;
        if (l > h)
            continue;
        snprintf(lo, sizeof(lo), "%lld", l);
        snprintf(hi, sizeof(hi), "%lld", h);
        sb_add(b, first ? "(" : " | (");
        fixed_range(b, lo, hi, strlen(lo));
        sb_add(b, ")");
        first = false;
    }
    sb_add(b, ")");
}

/* Integers lo..hi, either side possibly unbounded (clamped to 15 digits). */
static void int_range(struct sbuf *b, long long lo, long long hi)
{
    bool any = false;

    sb_add(b, "(");
    if (lo < 0) {
        sb_add(b, "\"-\" ");
        uint_range(b, hi < 0 ? -hi : 1, -lo);
        any = true;
    }
    if (hi >= 0) {
        sb_add(b, any ? " | " : "");
        uint_range(b, lo > 0 ? lo : 0, hi);
    }
    sb_add(b, ")");
}

/* The bounds of a number or integer schema as integers L..H (conservative for fractional
 * bounds). Returns 1 when any bound is given. */
static int num_bounds(struct conv *c, json_t *s, bool integer, long long *L, long long *H)
{
    json_t *v;
    int any = 0;

    *L = -JS_INT_MAX;
    *H = JS_INT_MAX;
    if ((v = json_object_get(s, "minimum")) && json_is_number(v)) {
        double d = ceil(json_number_value(v));

        if (d > *L)
            *L = d > (double)JS_INT_MAX ? JS_INT_MAX + 1 : (long long)d;
        any = 1;
    }
    if ((v = json_object_get(s, "exclusiveMinimum")) && json_is_number(v)) {
        double d = floor(json_number_value(v)) + 1;

        if (d > *L)
            *L = d > (double)JS_INT_MAX ? JS_INT_MAX + 1 : (long long)d;
        any = 1;
    }
    if ((v = json_object_get(s, "maximum")) && json_is_number(v)) {
        double d = floor(json_number_value(v));

        if (d < *H)
            *H = d < -(double)JS_INT_MAX ? -JS_INT_MAX - 1 : (long long)d;
        any = 1;
    }
    if ((v = json_object_get(s, "exclusiveMaximum")) && json_is_number(v)) {
        double d = ceil(json_number_value(v)) - 1;

        if (d < *H)
            *H = d < -(double)JS_INT_MAX ? -JS_INT_MAX - 1 : (long long)d;
        any = 1;
    }
    if (any && (*L > *H || *L > JS_INT_MAX || *H < -JS_INT_MAX))
        return js_fail(c, "'minimum'/'maximum' leave no %s kiln can write (bounds are met "
                          "with whole numbers of at most 15 digits)",
                       integer ? "integer" : "number");
    return any;
}

static int gen_number(struct conv *c, json_t *s, bool integer, struct sbuf *b)
{
    long long L, H;
    int rc = num_bounds(c, s, integer, &L, &H);

    if (json_object_get(s, "multipleOf"))
        return js_fail(c, "unsupported JSON Schema keyword 'multipleOf'");
    if (rc < 0)
        return rc;
    if (rc == 0) {
        sb_add(b, integer ? "integer" : "number");
        return 0;
    }
    int_range(b, L, H);
    if (integer)
        return 0;
    /* k.f with 0 <= k <= H - 1 and k >= L; -(m.f) with m <= -L - 1 and m >= -H when H < 0 */
    if (H - 1 >= (L > 0 ? L : 0)) {
        sb_add(b, " | ");
        uint_range(b, L > 0 ? L : 0, H - 1);
        sb_add(b, " \".\" [0-9]{1,15}");
    }
    if (-L - 1 >= (H < 0 ? -H : 0)) {
        sb_add(b, " | \"-\" ");
        uint_range(b, H < 0 ? -H : 0, -L - 1);
        sb_add(b, " \".\" [0-9]{1,15}");
    }
    return 0;
}

/* --- strings ------------------------------------------------------------------------------ */

static int get_count(struct conv *c, json_t *s, const char *key, long long *out)
{
    json_t *v = json_object_get(s, key);

    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return js_fail(c, "'%s' must be a non-negative integer", key);
    if (json_integer_value(v) > JS_MAX_COUNT && strncmp(key, "max", 3) != 0)
        return js_fail(c, "'%s' above %d is not supported", key, JS_MAX_COUNT);
    *out = json_integer_value(v) > JS_MAX_COUNT ? -1 : json_integer_value(v);
    return 1;
}

static int gen_string(struct conv *c, json_t *s, struct sbuf *b)
{
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    long long min = 0, max = -1;
    int rc;

    if ((rc = get_count(c, s, "minLength", &min)) < 0 ||
        (rc = get_count(c, s, "maxLength", &max)) < 0)
        return rc;
    if ((fmt || pat) && (json_object_get(s, "minLength") || json_object_get(s, "maxLength")))
        return js_fail(c, "'minLength'/'maxLength' together with '%s' are not supported",
                       fmt ? "format" : "pattern");
    if (fmt && pat)
        return js_fail(c, "'format' together with 'pattern' is not supported");
    if (fmt) {
        static const char *const known[] = {"date", "time", "date-time", "uuid", "email"};
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";

        for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++) {
            if (strcmp(f, known[k]) != 0)
                continue;
            if (k == 2)
                sb_add(b, "\"\\\"\" date \"T\" time \"\\\"\"");
            else
                sb_printf(b, "\"\\\"\" %s \"\\\"\"", f);
            return 0;
        }
        return js_fail(c, "unsupported 'format' '%.64s' (supported: date, time, date-time, "
                          "uuid, email)",
                       f);
    }
    if (pat) {
        if (!json_is_string(pat))
            return js_fail(c, "'pattern' must be a string");
        rc = json_schema_regex(json_string_value(pat), json_string_length(pat), &b->s, &b->n,
                               &b->cap, c->err, c->errlen);
        if (rc < 0)
            c->failed = true;
        return rc;
    }
    if (max >= 0 && max < min)
        return js_fail(c, "'maxLength' is below 'minLength'");
    if (max < 0)
        sb_printf(b, "\"\\\"\" jchar{%lld,} \"\\\"\"", min);
    else
        sb_printf(b, "\"\\\"\" jchar{%lld,%lld} \"\\\"\"", min, max);
    return 0;
}

/* --- arrays ------------------------------------------------------------------------------- */

static int gen_array(struct conv *c, json_t *s, struct sbuf *b)
{
    json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    long long min = 0, max = -1, k = 0, emin, emax;
    int rc;

    if ((rc = get_count(c, s, "minItems", &min)) < 0 || (rc = get_count(c, s, "maxItems", &max)) < 0)
        return rc;
    if (json_object_get(s, "uniqueItems") && !json_is_false(json_object_get(s, "uniqueItems")))
        return js_fail(c, "unsupported JSON Schema keyword 'uniqueItems'");
    if (json_is_array(items)) { /* the older tuple form */
        prefix = items;
        items = json_object_get(s, "additionalItems");
    }
    if (max >= 0 && max < min)
        return js_fail(c, "'maxItems' is below 'minItems'");
    sb_add(b, "\"[\" ws ");
    if (prefix) {
        size_t i;
        json_t *p;

        if (!json_is_array(prefix))
            return js_fail(c, "'prefixItems' must be an array");
        k = (long long)json_array_size(prefix);
        if (max >= 0 && k > max)
            return js_fail(c, "'maxItems' is below the number of 'prefixItems'");
        json_array_foreach(prefix, i, p) {
            if (i)
                sb_add(b, " ws \",\" ws ");
            if ((rc = ref_schema(c, b, p)) < 0)
                return rc;
        }
    }
    emin = min > k ? min - k : 0;
    emax = max < 0 ? -1 : max - k;
    if (items && json_is_false(items))
        emax = 0;
    if (emax >= 0 && emin > emax)
        return js_fail(c, "'minItems' cannot be met with 'items': false");
    if (emax != 0) {
        struct sbuf item = {0};

        if ((rc = ref_schema(c, &item, items ? items : json_true())) < 0) {
            free(item.s);
            return rc;
        }
        if (k > 0) {
            /* more items, each after a comma */
            if (emax < 0)
                sb_printf(b, " (ws \",\" ws %s){%lld,}", item.s, emin);
            else
                sb_printf(b, " (ws \",\" ws %s){%lld,%lld}", item.s, emin, emax);
        } else if (emin == 0) {
            if (emax < 0)
                sb_printf(b, "(%s (ws \",\" ws %s)*)?", item.s, item.s);
            else
                sb_printf(b, "(%s (ws \",\" ws %s){0,%lld})?", item.s, item.s, emax - 1);
        } else {
            if (emax < 0)
                sb_printf(b, "%s (ws \",\" ws %s){%lld,}", item.s, item.s, emin - 1);
            else
                sb_printf(b, "%s (ws \",\" ws %s){%lld,%lld}", item.s, item.s, emin - 1,
                          emax - 1);
        }
        free(item.s);
    }
    sb_add(b, " ws \"]\"");
    return 0;
}

/* --- objects ------------------------------------------------------------------------------ */

/* A key that is none of names (n of them, escape-free JSON string content): by a trie walk,
 * each level either follows a name's next character or leaves them all. */
static void not_names(struct sbuf *b, const char **names, size_t n, size_t depth)
{
    bool terminal = false, any = false;

    sb_add(b, "(");
    for (size_t i = 0; i < n; i++)
        if (strlen(names[i]) == depth)
            terminal = true;
    if (!terminal) {
        sb_add(b, "\"\"");
        any = true;
    }
    /* each distinct next byte (names are compared bytewise; a multibyte character's bytes
     * each get a level, and the class below then works per byte only for ASCII: non-ASCII
     * next bytes are followed but never left) */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch;
        bool seen = false;
        const char *sub[256];
        size_t ns = 0;

        if (strlen(names[i]) <= depth)
            continue;
        ch = (unsigned char)names[i][depth];
        for (size_t j = 0; j < i; j++)
            if (strlen(names[j]) > depth && (unsigned char)names[j][depth] == ch)
                seen = true;
        if (seen || ch >= 0x80)
            continue;
        for (size_t j = 0; j < n && ns < 256; j++)
            if (strlen(names[j]) > depth && (unsigned char)names[j][depth] == ch)
                sub[ns++] = names[j];
        sb_add(b, any ? " | " : "");
        sb_add(b, "\"");
        sb_gbnf_char(b, ch);
        sb_add(b, "\" ");
        not_names(b, sub, ns, depth + 1);
        any = true;
    }
    sb_add(b, any ? " | " : "");
    sb_add(b, "[^\"\\\\\\x00-\\x1F\\x80-\\U0010FFFF");
    for (size_t i = 0; i < n; i++)
        if (strlen(names[i]) > depth && (unsigned char)names[i][depth] < 0x80)
            sb_gbnf_char(b, (unsigned char)names[i][depth]);
    sb_add(b, "] jkchar*)");
}

#define JS_MAX_PROPS 256

static int gen_object(struct conv *c, json_t *s, struct sbuf *b)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    const char *names[JS_MAX_PROPS];
    bool required[JS_MAX_PROPS];
    struct sbuf kv[JS_MAX_PROPS + 1];
    size_t n = 0, i;
    unsigned base;
    const char *key;
    json_t *v;
    int rc = 0;

    if (json_object_get(s, "minProperties") || json_object_get(s, "maxProperties"))
        return js_fail(c, "unsupported JSON Schema keyword '%s'",
                       json_object_get(s, "minProperties") ? "minProperties" : "maxProperties");
    if (props && !json_is_object(props))
        return js_fail(c, "'properties' must be an object");
    if (req && !json_is_array(req))
        return js_fail(c, "'required' must be an array");
    if (!props && (!addl || json_is_true(addl)) && !req) {
        sb_add(b, "object");
        return 0;
    }
    memset(kv, 0, sizeof(kv));
    json_object_foreach(props, key, v) {
        if (n == JS_MAX_PROPS)
            return js_fail(c, "more than %d properties in one object", JS_MAX_PROPS);
        names[n] = key;
        required[n] = false;
        json_t *rv;

        json_array_foreach(req, i, rv) if (json_is_string(rv) && strcmp(json_string_value(rv), key) == 0)
            required[n] = true;
        n++;
    }
    json_array_foreach(req, i, v) {
        bool found = false;

        if (!json_is_string(v))
            return js_fail(c, "'required' must list strings");
        for (size_t k = 0; k < n; k++)
            found |= strcmp(names[k], json_string_value(v)) == 0;
        if (!found)
            return js_fail(c, "required property '%.100s' is not in 'properties'",
                           json_string_value(v));
    }
    /* the key-value rule of each property */
    for (i = 0; i < n && rc == 0; i++) {
        json_t *name = json_string(names[i]);

        if (!name)
            return js_fail(c, "out of memory");
        rc = lit_json(c, &kv[i], name);
        json_decref(name);
        sb_add(&kv[i], " ws \":\" ws ");
        if (rc == 0)
            rc = ref_schema(c, &kv[i], json_object_get(props, names[i]));
    }
    bool extra = addl && !json_is_false(addl);

    if (rc == 0 && extra) {
        sb_add(&kv[n], "\"\\\"\" ");
        not_names(&kv[n], names, n, 0);
        sb_add(&kv[n], " \"\\\"\" ws \":\" ws ");
        rc = ref_schema(c, &kv[n], addl);
    }
    if (rc < 0)
        goto out;
    /* first(i) = s<base + 2i>, after(i) = s<base + 2i + 1>, for i in 0..n */
    base = c->n_rules + 1;
    c->n_rules += 2 * ((unsigned)n + 1);
    for (i = 0; i <= n; i++) {
        struct sbuf f = {0}, a = {0};
        unsigned nf = base + 2 * (unsigned)(i + 1), na = nf + 1;

        if (i == n) {
            if (extra) {
                sb_printf(&f, "(kv%u (ws \",\" ws kv%u)*)?", base, base);
                sb_printf(&a, "(ws \",\" ws kv%u)*", base);
            }
        } else {
            sb_printf(&f, "kv%u_%zu s%u", base, i, na);
            sb_printf(&a, "ws \",\" ws kv%u_%zu s%u", base, i, na);
            if (!required[i]) {
                sb_printf(&f, " | s%u", nf);
                sb_printf(&a, " | s%u", na);
            }
        }
        emit_rule(c, base + 2 * (unsigned)i, &f);
        emit_rule(c, base + 2 * (unsigned)i + 1, &a);
        free(f.s);
        free(a.s);
        if (i < n)
            sb_printf(&c->out, "kv%u_%zu ::= %s\n", base, i, kv[i].s);
        else if (extra)
            sb_printf(&c->out, "kv%u ::= %s\n", base, kv[n].s);
    }
    sb_printf(b, "\"{\" ws s%u ws \"}\"", base);
out:
    for (i = 0; i <= n; i++)
        free(kv[i].s);
    return rc;
}

/* --- dispatch ----------------------------------------------------------------------------- */

static const char *const js_known[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf",
    "$ref", "$defs", "definitions", "minLength", "maxLength", "pattern", "format", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable", "uniqueItems",
    /* annotations */
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$anchor", "contentMediaType", "contentEncoding", "strict",
};

static int check_keywords(struct conv *c, json_t *s)
{
    const char *key;
    json_t *v;

    json_object_foreach(s, key, v) {
        bool ok = false;

        for (size_t k = 0; k < sizeof(js_known) / sizeof(js_known[0]) && !ok; k++)
            ok = strcmp(key, js_known[k]) == 0;
        if (!ok)
            return js_fail(c, "unsupported JSON Schema keyword '%.100s'", key);
    }
    return 0;
}

/* allOf of object schemas: one object with every member's properties and required. */
static int gen_all_of(struct conv *c, json_t *s, struct sbuf *b)
{
    json_t *all = json_object_get(s, "allOf"), *m, *merged, *props, *req;
    size_t i;
    int rc;

    if (!json_is_array(all))
        return js_fail(c, "'allOf' must be an array");
    merged = json_object();
    props = json_object();
    req = json_array();
    if (!merged || !props || !req) {
        json_decref(merged);
        json_decref(props);
        json_decref(req);
        return js_fail(c, "out of memory");
    }
    json_object_set_new(merged, "type", json_string("object"));
    json_object_set_new(merged, "properties", props);
    json_object_set_new(merged, "required", req);
    json_object_set(merged, "additionalProperties", json_false());
    json_array_foreach(all, i, m) {
        const char *key;
        json_t *v;

        const char *t;

        for (int hops = 0; json_is_object(m) && json_object_get(m, "$ref") && hops < 16; hops++) {
            const char *ref = json_string_value(json_object_get(m, "$ref"));

            m = ref ? resolve(c, ref) : NULL;
        }
        t = json_is_object(m) ? json_string_value(json_object_get(m, "type")) : NULL;
        if (!json_is_object(m) || (json_object_get(m, "type") && (!t || strcmp(t, "object")))) {
            json_decref(merged);
            return js_fail(c, "'allOf' is supported for object schemas only");
        }
        json_object_foreach(json_object_get(m, "properties"), key, v)
            json_object_set(props, key, v);
        json_array_extend(req, json_is_array(json_object_get(m, "required"))
                                   ? json_object_get(m, "required")
                                   : json_array());
        if (json_object_get(m, "additionalProperties"))
            json_object_set(merged, "additionalProperties",
                            json_object_get(m, "additionalProperties"));
    }
    rc = ref_schema(c, b, merged);
    json_decref(merged);
    return rc;
}

static int gen_type(struct conv *c, json_t *s, const char *t, struct sbuf *b)
{
    if (strcmp(t, "string") == 0)
        return gen_string(c, s, b);
    if (strcmp(t, "integer") == 0)
        return gen_number(c, s, true, b);
    if (strcmp(t, "number") == 0)
        return gen_number(c, s, false, b);
    if (strcmp(t, "object") == 0)
        return gen_object(c, s, b);
    if (strcmp(t, "array") == 0)
        return gen_array(c, s, b);
    if (strcmp(t, "boolean") == 0) {
        sb_add(b, "boolean");
        return 0;
    }
    if (strcmp(t, "null") == 0) {
        sb_add(b, "null");
        return 0;
    }
    return js_fail(c, "unknown type '%.64s'", t);
}

static int gen_body(struct conv *c, json_t *s, struct sbuf *b)
{
    json_t *v, *e;
    size_t i;
    int rc;

    if (json_is_false(s))
        return js_fail(c, "the schema false allows no value");
    if (json_is_true(s)) {
        sb_add(b, "value");
        return 0;
    }
    if (!json_is_object(s))
        return js_fail(c, "a schema must be an object or a boolean");
    if ((rc = check_keywords(c, s)) < 0)
        return rc;
    if (json_is_true(json_object_get(s, "nullable"))) {
        json_t *copy = json_copy(s);

        if (!copy)
            return js_fail(c, "out of memory");
        json_object_del(copy, "nullable");
        sb_add(b, "null | ");
        rc = ref_schema(c, b, copy);
        json_decref(copy);
        return rc;
    }
    if ((v = json_object_get(s, "$ref"))) {
        unsigned r = 0;

        if (!json_is_string(v))
            return js_fail(c, "'$ref' must be a string");
        if ((rc = gen_ref(c, json_string_value(v), &r)) < 0)
            return rc;
        sb_printf(b, "s%u", r);
        return 0;
    }
    if ((v = json_object_get(s, "const")))
        return lit_json(c, b, v);
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return js_fail(c, "'enum' must be a non-empty array");
        json_array_foreach(v, i, e) {
            sb_add(b, i ? " | " : "");
            if ((rc = lit_json(c, b, e)) < 0)
                return rc;
        }
        return 0;
    }
    if ((v = json_object_get(s, "anyOf")) || (v = json_object_get(s, "oneOf"))) {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return js_fail(c, "'anyOf'/'oneOf' must be a non-empty array");
        json_array_foreach(v, i, e) {
            sb_add(b, i ? " | " : "");
            if ((rc = ref_schema(c, b, e)) < 0)
                return rc;
        }
        return 0;
    }
    if (json_object_get(s, "allOf"))
        return gen_all_of(c, s, b);
    v = json_object_get(s, "type");
    if (json_is_string(v))
        return gen_type(c, s, json_string_value(v), b);
    if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            return js_fail(c, "'type' must not be an empty list");
        json_array_foreach(v, i, e) {
            if (!json_is_string(e))
                return js_fail(c, "'type' must list strings");
            sb_add(b, i ? " | (" : "(");
            if ((rc = gen_type(c, s, json_string_value(e), b)) < 0)
                return rc;
            sb_add(b, ")");
        }
        return 0;
    }
    if (v)
        return js_fail(c, "'type' must be a string or a list of strings");
    if (json_object_get(s, "properties") || json_object_get(s, "required") ||
        json_object_get(s, "additionalProperties"))
        return gen_object(c, s, b);
    if (json_object_get(s, "items") || json_object_get(s, "prefixItems"))
        return gen_array(c, s, b);
    if (json_object_get(s, "pattern") || json_object_get(s, "format") ||
        json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
        return gen_string(c, s, b);
    sb_add(b, "value");
    return 0;
}

static int gen(struct conv *c, json_t *s, unsigned *rule)
{
    struct sbuf body = {0};
    unsigned r = 0;
    int rc;

    if (++c->depth > JS_MAX_DEPTH) {
        c->depth--;
        return js_fail(c, "the schema is nested more than %d deep", JS_MAX_DEPTH);
    }
    r = ++c->n_rules;
    rc = gen_body(c, s, &body);
    if (rc == 0)
        emit_rule(c, r, &body);
    free(body.s);
    c->depth--;
    *rule = r;
    return rc;
}

char *json_schema_to_grammar(json_t *schema, size_t *len, char *err, size_t errlen)
{
    struct conv c = {.root = schema, .err = err, .errlen = errlen};
    unsigned r = 0;
    char *out = NULL;

    if (gen(&c, schema, &r) == 0 && !c.failed) {
        sb_printf(&c.out, "root ::= s%u\n", r);
        sb_add(&c.out, js_base);
        if (c.out.oom) {
            snprintf(err, errlen, "out of memory");
        } else {
            out = c.out.s;
            *len = c.out.n;
            c.out.s = NULL;
        }
    }
    for (unsigned k = 0; k < c.n_refs; k++)
        free(c.refs[k].path);
    free(c.out.s);
    return out;
}

char *json_schema_object_grammar(size_t *len)
{
    struct sbuf b = {0};

    sb_add(&b, "root ::= object\n");
    sb_add(&b, js_base);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.n;
    return b.s;
}
