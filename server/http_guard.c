/* The request-framing tracker (see http_guard.h): a byte-at-a-time state machine over lines
 * and counted bodies. It mirrors libevent 2.1's framing: lines end in LF with an optional CR
 * before it; only POST, PUT and PATCH carry a body; "Transfer-Encoding: chunked" wins over
 * Content-Length; a chunk-size line is hex digits, optionally a space and anything; the empty
 * lines between chunks are skipped; trailers end at an empty line. What libevent would read
 * some other way (a duplicate framing header, a folded line, a name with blanks, a Content-
 * Length that is not plain digits, another transfer coding) is refused as malformed. */
#include "http_guard.h"

#include <string.h>
#include <strings.h>

void http_guard_init(struct http_guard *g, uint64_t max_body, uint64_t max_header)
{
    memset(g, 0, sizeof(*g));
    g->max_body = max_body;
    g->max_header = max_header;
    g->state = HTTP_GUARD_ST_HEAD;
}

uint64_t http_guard_held(const struct http_guard *g)
{
    bool head = g->state == HTTP_GUARD_ST_HEAD ||
                (g->state == HTTP_GUARD_ST_STOPPED && g->stopped_in_head);
    return head ? g->head_len : 0;
}

int http_guard_status(enum http_guard_verdict v)
{
    switch (v) {
    case HTTP_GUARD_BODY_TOO_LARGE:
        return 413;
    case HTTP_GUARD_HEADERS_TOO_LARGE:
        return 431;
    case HTTP_GUARD_MALFORMED:
        return 400;
    case HTTP_GUARD_TIMEOUT:
        return 408;
    case HTTP_GUARD_OK:
    default:
        return 0;
    }
}

static void stop(struct http_guard *g, enum http_guard_verdict v, const char *why)
{
    g->stopped_in_head = g->state == HTTP_GUARD_ST_HEAD;
    g->state = HTTP_GUARD_ST_STOPPED;
    g->verdict = v;
    g->why = why;
}

void http_guard_timeout(struct http_guard *g, const char *why)
{
    if (g->state != HTTP_GUARD_ST_STOPPED)
        stop(g, HTTP_GUARD_TIMEOUT, why);
}

bool http_guard_in_request(const struct http_guard *g)
{
    return g->state != HTTP_GUARD_ST_STOPPED &&
           (g->state != HTTP_GUARD_ST_HEAD || g->head_len > 0);
}

bool http_guard_in_body(const struct http_guard *g)
{
    return g->state == HTTP_GUARD_ST_BODY || g->state == HTTP_GUARD_ST_CHUNK_LINE ||
           g->state == HTTP_GUARD_ST_CHUNK_DATA || g->state == HTTP_GUARD_ST_TRAILER;
}

static void request_begin(struct http_guard *g)
{
    g->state = HTTP_GUARD_ST_HEAD;
    g->head_len = 0;
    g->line_no = 0;
    g->has_body = g->has_cl = g->has_te = g->chunked = false;
    g->has_conn = g->conn_close = false;
    g->content_length = 0;
    g->remaining = 0;
    g->body_total = 0;
}

static void request_end(struct http_guard *g)
{
    g->requests++;
    request_begin(g);
}

/* The kept part of the current line (the CR before the LF removed), as [*s, *s + *n). */
static void line_view(const struct http_guard *g, const char **s, size_t *n)
{
    size_t len = g->line_len;
    if (len > 0 && len <= HTTP_GUARD_LINE_KEEP && g->line[len - 1] == '\r')
        len--;
    *s = g->line;
    *n = len < HTTP_GUARD_LINE_KEEP ? len : HTTP_GUARD_LINE_KEEP;
}

/* Whether the line was longer than what is kept (its value may be cut). */
static bool line_cut(const struct http_guard *g)
{
    return g->line_len > HTTP_GUARD_LINE_KEEP;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* [s, s+n) with blanks trimmed on both sides equals word, ignoring case. */
static bool value_is(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    while (n > 0 && is_blank(*s)) {
        s++;
        n--;
    }
    while (n > 0 && is_blank(s[n - 1]))
        n--;
    return n == w && strncasecmp(s, word, w) == 0;
}

/* Plain decimal digits with blanks around, no overflow. Returns 0 or -1. */
static int parse_length(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0, digits = 0;
    while (i < n && is_blank(s[i]))
        i++;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    while (i < n && is_blank(s[i]))
        i++;
    if (digits == 0 || i != n || v > INT64_MAX)
        return -1; /* libevent reads it as a signed 64-bit number */
    *out = v;
    return 0;
}

static void request_line(struct http_guard *g, const char *s, size_t n)
{
    const char *sp = memchr(s, ' ', n);
    size_t m = sp ? (size_t)(sp - s) : n;
    /* libevent compares the method exactly (case matters) */
    g->has_body = (m == 4 && memcmp(s, "POST", 4) == 0) || (m == 3 && memcmp(s, "PUT", 3) == 0) ||
                  (m == 5 && memcmp(s, "PATCH", 5) == 0);
}

static void header_line(struct http_guard *g, const char *s, size_t n)
{
    const char *colon;
    size_t name_len, i;

    if (is_blank(s[0]))
        return stop(g, HTTP_GUARD_MALFORMED, "a folded header line");
    if (!(colon = memchr(s, ':', n))) {
        /* a name longer than what is kept is none of the framing headers */
        if (line_cut(g))
            return;
        return stop(g, HTTP_GUARD_MALFORMED, "a header line without a colon");
    }
    name_len = (size_t)(colon - s);
    for (i = 0; i < name_len; i++)
        if (is_blank(s[i]))
            return stop(g, HTTP_GUARD_MALFORMED, "blanks in a header name");
    const char *v = colon + 1;
    size_t vn = n - name_len - 1;
    bool cut = line_cut(g);

    if (name_len == 14 && strncasecmp(s, "Content-Length", 14) == 0) {
        if (g->has_cl)
            return stop(g, HTTP_GUARD_MALFORMED, "more than one Content-Length");
        if (cut || parse_length(v, vn, &g->content_length) < 0)
            return stop(g, HTTP_GUARD_MALFORMED, "a bad Content-Length");
        g->has_cl = true;
    } else if (name_len == 17 && strncasecmp(s, "Transfer-Encoding", 17) == 0) {
        if (g->has_te)
            return stop(g, HTTP_GUARD_MALFORMED, "more than one Transfer-Encoding");
        g->has_te = true;
        g->chunked = !cut && value_is(v, vn, "chunked");
    } else if (name_len == 10 && strncasecmp(s, "Connection", 10) == 0) {
        if (!g->has_conn)
            g->conn_close = !cut && value_is(v, vn, "close");
        g->has_conn = true;
    }
}

/* The header block ended: decide how the body is framed. */
static void head_end(struct http_guard *g)
{
    if (!g->has_body)
        return request_end(g); /* libevent reads no body for other methods */
    if (g->has_te) {
        if (!g->chunked)
            return stop(g, HTTP_GUARD_MALFORMED, "a transfer coding other than chunked");
        g->state = HTTP_GUARD_ST_CHUNK_LINE;
        return;
    }
    if (!g->has_cl) {
        /* libevent refuses a body-less request that wants the connection kept open */
        if (g->has_conn && !g->conn_close)
            return stop(g, HTTP_GUARD_MALFORMED, "no Content-Length on a kept-alive request");
        return request_end(g);
    }
    if (g->content_length > g->max_body)
        return stop(g, HTTP_GUARD_BODY_TOO_LARGE, "the declared Content-Length");
    if (g->content_length == 0)
        return request_end(g);
    g->remaining = g->content_length;
    g->state = HTTP_GUARD_ST_BODY;
}

/* A whole line of the header block (LF excluded). */
static void head_line(struct http_guard *g)
{
    const char *s;
    size_t n;
    line_view(g, &s, &n);
    if (g->line_len == 0 || (g->line_len == 1 && g->line[0] == '\r')) {
        if (g->line_no == 0) {
            g->head_len = 0; /* an empty line before a request line: skipped */
            return;
        }
        return head_end(g);
    }
    if (g->line_no++ == 0)
        request_line(g, s, n);
    else
        header_line(g, s, n);
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static void chunk_line(struct http_guard *g)
{
    const char *s;
    size_t n, i;
    uint64_t size = 0;
    line_view(g, &s, &n);
    if (n == 0 && !line_cut(g))
        return; /* the CRLF after a chunk's data */
    for (i = 0; i < n && hex_digit(s[i]) >= 0; i++) {
        if (size > (UINT64_MAX >> 4))
            return stop(g, HTTP_GUARD_MALFORMED, "a chunk size out of range");
        size = size * 16 + (uint64_t)hex_digit(s[i]);
    }
    /* libevent accepts digits, then nothing or a space (and anything after it) */
    if (i == 0 || (i < n && s[i] != ' ') || (i == n && line_cut(g)) || size > INT64_MAX)
        return stop(g, HTTP_GUARD_MALFORMED, "a bad chunk-size line");
    if (size > g->max_body - g->body_total)
        return stop(g, HTTP_GUARD_BODY_TOO_LARGE, "the chunked body");
    g->body_total += size;
    if (size == 0) {
        g->state = HTTP_GUARD_ST_TRAILER;
        g->head_len = 0;
        return;
    }
    g->remaining = size;
    g->state = HTTP_GUARD_ST_CHUNK_DATA;
}

static void trailer_line(struct http_guard *g)
{
    if (g->line_len == 0 || (g->line_len == 1 && g->line[0] == '\r'))
        request_end(g);
}

/* One byte of a line-oriented state. */
static void line_byte(struct http_guard *g, char c)
{
    if (c != '\n') {
        if (g->line_len < HTTP_GUARD_LINE_KEEP)
            g->line[g->line_len] = c;
        g->line_len++;
        if (g->state == HTTP_GUARD_ST_CHUNK_LINE && g->line_len > HTTP_GUARD_MAX_CHUNK_LINE)
            stop(g, HTTP_GUARD_MALFORMED, "a chunk-size line too long");
        return;
    }
    /* a kept line ending in a CR was trimmed by line_view; a long one keeps its CR in the
     * length only, which matters to no decision */
    switch (g->state) {
    case HTTP_GUARD_ST_HEAD:
        head_line(g);
        break;
    case HTTP_GUARD_ST_CHUNK_LINE:
        chunk_line(g);
        break;
    case HTTP_GUARD_ST_TRAILER:
        trailer_line(g);
        break;
    default:
        break;
    }
    g->line_len = 0;
}

size_t http_guard_feed(struct http_guard *g, const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        switch (g->state) {
        case HTTP_GUARD_ST_STOPPED:
            return i;
        case HTTP_GUARD_ST_BODY:
        case HTTP_GUARD_ST_CHUNK_DATA: {
            /* counted bytes: skip them in one step */
            uint64_t take = g->remaining < n - i ? g->remaining : n - i;
            i += (size_t)take;
            g->remaining -= take;
            if (g->remaining == 0) {
                if (g->state == HTTP_GUARD_ST_BODY)
                    request_end(g);
                else
                    g->state = HTTP_GUARD_ST_CHUNK_LINE;
            }
            break;
        }
        case HTTP_GUARD_ST_HEAD:
        case HTTP_GUARD_ST_TRAILER:
            if (g->head_len + 1 > g->max_header) {
                stop(g, HTTP_GUARD_HEADERS_TOO_LARGE,
                     g->state == HTTP_GUARD_ST_HEAD ? "the header block" : "the trailers");
                return i;
            }
            g->head_len++;
            line_byte(g, p[i]);
            if (g->state == HTTP_GUARD_ST_STOPPED) {
                g->head_len--; /* this byte decided it: it is not consumed */
                return i;
            }
            i++;
            break;
        case HTTP_GUARD_ST_CHUNK_LINE:
            line_byte(g, p[i]);
            if (g->state == HTTP_GUARD_ST_STOPPED)
                return i;
            i++;
            break;
        }
    }
    return i;
}
