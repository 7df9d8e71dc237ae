/* kiln's strict HTTP/1.1 request parser (http_parse.h). */
#include "http_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

static enum http_parse_status fail(struct http_parser *p, int status, const char *why)
{
    p->state = HP_ERROR;
    p->status = status;
    p->why = why;
    return HTTP_PARSE_ERROR;
}

int http_parser_init(struct http_parser *p, uint64_t max_body, uint64_t max_header)
{
    memset(p, 0, sizeof(*p));
    p->max_body = max_body;
    p->max_header = max_header;
    p->head_cap = 256;
    if (!(p->head = malloc(p->head_cap)))
        return -ENOMEM;
    return 0;
}

void http_parser_free(struct http_parser *p)
{
    free(p->head);
    p->head = NULL;
}

void http_parser_next(struct http_parser *p)
{
    char *head = p->head;
    size_t cap = p->head_cap;
    uint64_t mb = p->max_body, mh = p->max_header;
    memset(p, 0, sizeof(*p));
    p->head = head;
    p->head_cap = cap;
    p->max_body = mb;
    p->max_header = mh;
}

bool http_parser_in_request(const struct http_parser *p)
{
    return p->state != HP_START && p->state != HP_DONE;
}

const char *http_parser_header(const struct http_parser *p, const char *name)
{
    for (unsigned i = 0; i < p->n_headers; i++)
        if (strcasecmp(p->headers[i].name, name) == 0)
            return p->headers[i].value;
    return NULL;
}

/* RFC 9110 tchar */
static bool tchar(unsigned char c)
{
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Cut a line ending at LF (CR before it dropped) at *pos into a string. NULL at the end. */
static char *next_line(char *buf, size_t len, size_t *pos)
{
    if (*pos >= len)
        return NULL;
    char *s = buf + *pos, *lf = memchr(s, '\n', len - *pos);
    if (!lf)
        return NULL;
    *pos = (size_t)(lf - buf) + 1;
    *lf = '\0';
    if (lf > s && lf[-1] == '\r')
        lf[-1] = '\0';
    return s;
}

/* Whether value holds only visible characters, spaces and tabs (no CR, LF, NUL, DEL). */
static bool clean_value(const char *v)
{
    for (const unsigned char *c = (const unsigned char *)v; *c; c++)
        if ((*c < 0x20 && *c != '\t') || *c == 0x7f)
            return false;
    return true;
}

/* Trim spaces and tabs at both ends, in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* Whether a comma-separated header value lists token (without case). */
static bool lists(const char *v, const char *token)
{
    size_t n = strlen(token);
    while (v && *v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *e = v;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > v && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - v) == n && strncasecmp(v, token, n) == 0)
            return true;
        v = e;
    }
    return false;
}

/* The whole header block is in p->head: cut it into the request line and headers, and read
 * the framing. */
static enum http_parse_status parse_head(struct http_parser *p)
{
    size_t pos = 0;
    char *line = next_line(p->head, p->head_len, &pos), *sp1, *sp2;
    bool has_cl = false;

    if (!line || !(sp1 = strchr(line, ' ')) || !(sp2 = strchr(sp1 + 1, ' ')) ||
        strchr(sp2 + 1, ' '))
        return fail(p, 400, "a malformed request line");
    *sp1 = *sp2 = '\0';
    p->method = line;
    p->target = sp1 + 1;
    for (const char *c = p->method; *c; c++)
        if (!tchar((unsigned char)*c))
            return fail(p, 400, "a malformed method");
    if (!*p->method || !*p->target)
        return fail(p, 400, "a malformed request line");
    for (const unsigned char *c = (const unsigned char *)p->target; *c; c++)
        if (*c <= 0x20 || *c == 0x7f)
            return fail(p, 400, "a malformed request target");
    const char *v = sp2 + 1;
    if (strncmp(v, "HTTP/", 5) != 0 || !isdigit((unsigned char)v[5]) || v[6] != '.' ||
        !isdigit((unsigned char)v[7]) || v[8])
        return fail(p, 400, "a malformed HTTP version");
    if (v[5] != '1')
        return fail(p, 505, "an HTTP version other than 1.x");
    p->minor = v[7] - '0';
    p->keep_alive = p->minor >= 1;

    while ((line = next_line(p->head, p->head_len, &pos)) && *line) {
        char *colon = strchr(line, ':');
        if (*line == ' ' || *line == '\t')
            return fail(p, 400, "a folded header line (obs-fold)");
        if (!colon || colon == line)
            return fail(p, 400, "a header line without a name");
        for (char *c = line; c < colon; c++)
            if (!tchar((unsigned char)*c))
                return fail(p, 400, "a malformed header name");
        *colon = '\0';
        char *value = trim(colon + 1);
        if (!clean_value(value))
            return fail(p, 400, "a control character in a header value");
        if (p->n_headers == HTTP_PARSE_MAX_HEADERS)
            return fail(p, 431, "too many header fields");
        p->headers[p->n_headers].name = line;
        p->headers[p->n_headers].value = value;
        p->n_headers++;
        if (strcasecmp(line, "Content-Length") == 0) {
            uint64_t n = 0;
            if (!*value)
                return fail(p, 400, "an empty Content-Length");
            for (const char *c = value; *c; c++) {
                if (!isdigit((unsigned char)*c) || n > (UINT64_MAX - 9) / 10)
                    return fail(p, 400, "a malformed Content-Length");
                n = n * 10 + (uint64_t)(*c - '0');
            }
            if (has_cl && n != p->content_length)
                return fail(p, 400, "two different Content-Lengths");
            has_cl = true;
            p->content_length = n;
        } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
            if (p->chunked || strcasecmp(value, "chunked") != 0)
                return fail(p, 501, "a transfer coding other than chunked");
            p->chunked = true;
        } else if (strcasecmp(line, "Connection") == 0) {
            if (lists(value, "close"))
                p->keep_alive = false;
            else if (lists(value, "keep-alive"))
                p->keep_alive = true;
        } else if (strcasecmp(line, "Expect") == 0) {
            if (strcasecmp(value, "100-continue") != 0)
                return fail(p, 417, "an expectation other than 100-continue");
            p->expect_continue = p->minor >= 1;
        }
    }
    if (p->chunked && has_cl)
        return fail(p, 400, "both Content-Length and Transfer-Encoding");
    if (p->chunked && p->minor < 1)
        return fail(p, 400, "chunked in an HTTP/1.0 request");
    if (!p->chunked && p->content_length > p->max_body)
        return fail(p, 413, "a body over the limit");
    p->remaining = p->content_length;
    p->state = p->chunked ? HP_CHUNK_LINE : p->content_length ? HP_BODY : HP_DONE;
    return HTTP_PARSE_HEAD;
}

/* Append c to the header block; false with the parser failed when it is over the limit. */
static bool head_add(struct http_parser *p, char c)
{
    if (p->head_len + 1 >= p->max_header + 1) {
        fail(p, 431, "a header block over the limit");
        return false;
    }
    if (p->head_len + 1 >= p->head_cap) {
        size_t cap = p->head_cap * 2;
        char *h = realloc(p->head, cap);
        if (!h) {
            fail(p, 503, "out of memory");
            return false;
        }
        p->head = h;
        p->head_cap = cap;
    }
    p->head[p->head_len++] = c;
    return true;
}

/* A whole chunk-size line in p->line: the size (hex digits, then nothing or extensions). */
static bool chunk_size(struct http_parser *p)
{
    uint64_t n = 0;
    const char *c = p->line;
    if (!isxdigit((unsigned char)*c))
        return false;
    for (; isxdigit((unsigned char)*c); c++) {
        if (n >> 60)
            return false;
        n = n * 16 + (uint64_t)(isdigit((unsigned char)*c) ? *c - '0' : (tolower(*c) - 'a' + 10));
    }
    while (*c == ' ' || *c == '\t')
        c++;
    if (*c && *c != ';')
        return false;
    p->remaining = n;
    return true;
}

/* One line of chunked framing (a size line or a trailer) byte by byte: true once whole (in
 * p->line, without CRLF). */
static bool line_byte(struct http_parser *p, char c, bool *bad)
{
    if (c == '\n') {
        if (p->line_len && p->line[p->line_len - 1] == '\r')
            p->line_len--;
        p->line[p->line_len] = '\0';
        return true;
    }
    if (p->line_len >= HTTP_PARSE_MAX_CHUNK_LINE) {
        *bad = true;
        return false;
    }
    p->line[p->line_len++] = c;
    return false;
}

/* Body bytes, of a Content-Length body or of one chunk: as many as are here and still due.
 * Once all are in, a whole body is done and a chunk waits for its CRLF. */
static bool body_bytes(struct http_parser *p, const char *data, size_t n, size_t *i,
                       struct evbuffer *body)
{
    size_t k = n - *i < p->remaining ? n - *i : (size_t)p->remaining;
    if (evbuffer_add(body, data + *i, k) < 0)
        return false;
    *i += k;
    p->remaining -= k;
    p->body_len += k;
    if (!p->remaining)
        p->state = p->state == HP_BODY ? HP_DONE : HP_CHUNK_END;
    return true;
}

enum http_parse_status http_parser_feed(struct http_parser *p, const char *data, size_t n,
                                        struct evbuffer *body, size_t *used)
{
    size_t i = 0;
    enum http_parse_status st = HTTP_PARSE_MORE;
    *used = 0;
    if (p->state == HP_ERROR)
        return HTTP_PARSE_ERROR;
    if (p->state == HP_DONE)
        return HTTP_PARSE_DONE;
    while (i < n && st == HTTP_PARSE_MORE) {
        char c = data[i];
        bool bad = false;
        switch (p->state) {
        case HP_START:
            i++;
            if (c == '\r' || c == '\n')
                break; /* empty lines before a request are ignored (RFC 9112 2.2) */
            p->state = HP_HEAD;
            if (!head_add(p, c))
                return *used = i, HTTP_PARSE_ERROR;
            break;
        case HP_HEAD:
            i++;
            if (!head_add(p, c))
                return *used = i, HTTP_PARSE_ERROR;
            if (c == '\n' && p->head_len >= 2 &&
                (p->head[p->head_len - 2] == '\n' ||
                 (p->head_len >= 3 && p->head[p->head_len - 2] == '\r' &&
                  p->head[p->head_len - 3] == '\n')))
                st = parse_head(p);
            break;
        case HP_BODY:
        case HP_CHUNK_DATA:
            if (!body_bytes(p, data, n, &i, body))
                return *used = i, fail(p, 503, "out of memory");
            break;
        case HP_CHUNK_LINE:
            i++;
            if (!line_byte(p, c, &bad)) {
                if (bad)
                    return *used = i, fail(p, 400, "a chunk-size line too long");
                break;
            }
            p->line_len = 0;
            if (!chunk_size(p))
                return *used = i, fail(p, 400, "a malformed chunk size");
            if (p->remaining > p->max_body - p->body_len)
                return *used = i, fail(p, 413, "a body over the limit");
            p->state = p->remaining ? HP_CHUNK_DATA : HP_TRAILER;
            break;
        case HP_CHUNK_END: /* the CRLF after a chunk's data */
            i++;
            if (!line_byte(p, c, &bad)) {
                if (bad)
                    return *used = i, fail(p, 400, "no CRLF after a chunk");
                break;
            }
            if (p->line_len)
                return *used = i, fail(p, 400, "no CRLF after a chunk");
            p->state = HP_CHUNK_LINE;
            break;
        case HP_TRAILER:
            i++;
            if (++p->trailer_len > p->max_header)
                return *used = i, fail(p, 431, "trailers over the limit");
            if (!line_byte(p, c, &bad)) {
                if (bad)
                    return *used = i, fail(p, 431, "a trailer line too long");
                break;
            }
            if (p->line_len == 0) { /* the empty line: the request is whole */
                p->state = HP_DONE;
                break;
            }
            if (p->line[0] == ' ' || p->line[0] == '\t' || !strchr(p->line, ':'))
                return *used = i, fail(p, 400, "a malformed trailer");
            p->line_len = 0; /* trailers are read and dropped */
            break;
        case HP_DONE:
        case HP_ERROR:
            break;
        }
        if (p->state == HP_DONE && st == HTTP_PARSE_MORE)
            st = HTTP_PARSE_DONE;
        if (p->state == HP_ERROR)
            return *used = i, HTTP_PARSE_ERROR;
    }
    *used = i;
    if (st == HTTP_PARSE_MORE && p->state == HP_DONE)
        st = HTTP_PARSE_DONE;
    return st;
}
