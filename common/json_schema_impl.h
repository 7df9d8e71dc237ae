/* Private to json_schema.c and json_schema_regex.c: a growable text buffer and the GBNF
 * spelling of JSON string content. */
#ifndef JSON_SCHEMA_IMPL_H
#define JSON_SCHEMA_IMPL_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
};

static inline void sb_addn(struct sbuf *b, const char *p, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *s;

        while (b->n + n + 1 > cap)
            cap *= 2;
        if (!(s = realloc(b->s, cap))) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static inline void sb_add(struct sbuf *b, const char *p)
{
    sb_addn(b, p, strlen(p));
}

__attribute__((format(printf, 2, 3))) static inline void sb_printf(struct sbuf *b,
                                                                   const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        b->oom = true;
        return;
    }
    sb_addn(b, tmp, (size_t)n);
}

/* Code point cp inside a GBNF "literal" or [class] (escaped as needed). */
static inline void sb_gbnf_char(struct sbuf *b, uint32_t cp)
{
    if (cp == '"' || cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' ||
        cp < 0x20 || cp == 0x7f)
        sb_printf(b, "\\x%02X", cp);
    else if (cp < 0x80) {
        char c = (char)cp;

        sb_addn(b, &c, 1);
    } else if (cp <= 0xFFFF)
        sb_printf(b, "\\u%04X", cp);
    else
        sb_printf(b, "\\U%08X", cp);
}

#endif
