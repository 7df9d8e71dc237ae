/* A JSON scanner for text still arriving (toolcall.h): says whether a value is complete,
 * incomplete so far, or cannot be JSON, and finds an object's member as the bytes the model
 * wrote (so arguments are passed on byte for byte). Syntax only; jansson decodes. */
#include "toolcall.h"

#include <errno.h>
#include <string.h>

#define MAX_DEPTH 64

enum { SCAN_OK = 0, SCAN_MORE = 1, SCAN_BAD = -1 };

static void skip_ws(const char *s, size_t n, size_t *p)
{
    while (*p < n && (s[*p] == ' ' || s[*p] == '\t' || s[*p] == '\n' || s[*p] == '\r'))
        (*p)++;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int scan_string(const char *s, size_t n, size_t *p)
{
    size_t i = *p + 1; /* past the quote */
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') {
            *p = i + 1;
            return SCAN_OK;
        }
        if (c < 0x20)
            return SCAN_BAD;
        if (c == '\\') {
            if (i + 1 >= n)
                return SCAN_MORE;
            char e = s[i + 1];
            if (e == 'u') {
                for (size_t k = 2; k < 6; k++) {
                    if (i + k >= n)
                        return SCAN_MORE;
                    if (!is_hex(s[i + k]))
                        return SCAN_BAD;
                }
                i += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == '\0')
                return SCAN_BAD;
            i += 2;
            continue;
        }
        i++;
    }
    return SCAN_MORE;
}

/* A number ends at the first byte that cannot continue it; at the end of the text it may go
 * on, so it is incomplete there. */
static int scan_number(const char *s, size_t n, size_t *p)
{
    size_t i = *p;
    if (s[i] == '-')
        i++;
    if (i >= n)
        return SCAN_MORE;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return SCAN_BAD;
    }
    if (i < n && s[i] == '.') {
        i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return i >= n ? SCAN_MORE : SCAN_BAD;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return i >= n ? SCAN_MORE : SCAN_BAD;
    }
    if (i >= n)
        return SCAN_MORE;
    *p = i;
    return SCAN_OK;
}

static int scan_word(const char *s, size_t n, size_t *p, const char *w)
{
    size_t len = strlen(w), have = n - *p < len ? n - *p : len;
    if (memcmp(s + *p, w, have) != 0)
        return SCAN_BAD;
    if (have < len)
        return SCAN_MORE;
    *p += len;
    return SCAN_OK;
}

static int scan_value(const char *s, size_t n, size_t *p, int depth);

/* An object or array: open at s[*p]. */
static int scan_container(const char *s, size_t n, size_t *p, int depth)
{
    char close = s[*p] == '{' ? '}' : ']';
    bool object = close == '}';
    int rc;
    if (depth >= MAX_DEPTH)
        return SCAN_BAD;
    (*p)++;
    skip_ws(s, n, p);
    if (*p >= n)
        return SCAN_MORE;
    if (s[*p] == close) {
        (*p)++;
        return SCAN_OK;
    }
    for (;;) {
        if (object) {
            if (s[*p] != '"')
                return SCAN_BAD;
            if ((rc = scan_string(s, n, p)) != SCAN_OK)
                return rc;
            skip_ws(s, n, p);
            if (*p >= n)
                return SCAN_MORE;
            if (s[*p] != ':')
                return SCAN_BAD;
            (*p)++;
        }
        if ((rc = scan_value(s, n, p, depth + 1)) != SCAN_OK)
            return rc;
        skip_ws(s, n, p);
        if (*p >= n)
            return SCAN_MORE;
        if (s[*p] == close) {
            (*p)++;
            return SCAN_OK;
        }
        if (s[*p] != ',')
            return SCAN_BAD;
        (*p)++;
        skip_ws(s, n, p);
        if (*p >= n)
            return SCAN_MORE;
    }
}

static int scan_value(const char *s, size_t n, size_t *p, int depth)
{
    skip_ws(s, n, p);
    if (*p >= n)
        return SCAN_MORE;
    switch (s[*p]) {
    case '{':
    case '[':
        return scan_container(s, n, p, depth);
    case '"':
        return scan_string(s, n, p);
    case 't':
        return scan_word(s, n, p, "true");
    case 'f':
        return scan_word(s, n, p, "false");
    case 'n':
        return scan_word(s, n, p, "null");
    default:
        return scan_number(s, n, p);
    }
}

long toolcall_json_span(const char *s, size_t n)
{
    size_t p = 0;
    int rc = scan_value(s, n, &p, 0);
    if (rc == SCAN_BAD)
        return -EINVAL;
    if (rc == SCAN_MORE)
        return 0;
    return (long)p;
}

int toolcall_json_member(const char *s, size_t n, const char *key, const char **v,
                         size_t *vlen)
{
    size_t p = 0, klen = strlen(key);
    skip_ws(s, n, &p);
    if (p >= n || s[p] != '{')
        return -ENOENT;
    p++;
    for (;;) {
        skip_ws(s, n, &p);
        if (p >= n || s[p] != '"')
            return -ENOENT;
        size_t k0 = p + 1;
        if (scan_string(s, n, &p) != SCAN_OK)
            return -ENOENT;
        bool hit = p - 1 - k0 == klen && memcmp(s + k0, key, klen) == 0;
        skip_ws(s, n, &p);
        if (p >= n || s[p] != ':')
            return -ENOENT;
        p++;
        skip_ws(s, n, &p);
        size_t v0 = p;
        if (scan_value(s, n, &p, 1) != SCAN_OK)
            return -ENOENT;
        if (hit) {
            *v = s + v0;
            *vlen = p - v0;
            return 0;
        }
        skip_ws(s, n, &p);
        if (p >= n || s[p] != ',')
            return -ENOENT;
        p++;
    }
}
