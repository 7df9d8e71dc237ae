/* A stream's frames, written without a JSON tree: each frame is appended into one buffer
 * with a JSON string escaper, byte for byte what jansson's compact dump of the same tree
 * gives (insertion order, UTF-8 kept, only '"', '\\' and control characters escaped, reals
 * as jansson prints them, invalid UTF-8 repaired to U+FFFD as api_json_text does). A tree
 * per token cost an allocation per value and a serialisation pass on the event loop:
 * tests/test_sse_frame.c holds every frame here to the tree it replaces. */
#include "api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"
#include "relay.h"
#include "tokenizer.h"

/* Longest token piece reported in logprobs, as api_json.c cuts it. */
#define PIECE_MAX 256

struct sbuf {
    char *p;
    size_t len, cap;
    bool err;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->err = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_uint(struct sbuf *b, unsigned long long v)
{
    char num[24];
    sb_put(b, num, (size_t)snprintf(num, sizeof(num), "%llu", v));
}

/* A real as jansson dumps it: %.17g, ".0" when it has neither '.' nor 'e', and the exponent
 * without '+' or leading zeros. */
static void sb_real(struct sbuf *b, double v)
{
    char s[64];
    int n = snprintf(s, sizeof(s), "%.17g", v);
    if (n < 0 || (size_t)n >= sizeof(s) - 3) {
        b->err = true;
        return;
    }
    if (!strchr(s, '.') && !strchr(s, 'e')) {
        memcpy(s + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(s, 'e');
    if (e) {
        char *start = e + 1, *end = start + 1;
        if (*start == '-')
            start++;
        while (*end == '0')
            end++;
        if (end != start) {
            memmove(start, end, (size_t)(s + n - end) + 1);
            n -= (int)(end - start);
        }
    }
    sb_put(b, s, (size_t)n);
}

/* The length of the character at s[0..len) if it is valid UTF-8 as jansson takes it (no
 * overlongs, surrogates or > U+10FFFF), else 0. */
static size_t utf8_char(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    uint32_t cp;
    size_t n;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n > len)
        return 0;
    for (size_t k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[k] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* A JSON string literal of s as jansson's compact dump writes api_json_text(s, len): a byte
 * that does not start a valid character becomes U+FFFD. cut_at_nul: stop at the first NUL
 * (an object key, which jansson takes as a C string). */
static void sb_text(struct sbuf *b, const char *str, size_t len, bool cut_at_nul)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t run = 0, i = 0;
    sb_put(b, "\"", 1);
    while (i < len) {
        unsigned char c = s[i];
        const char *esc = NULL;
        char u[8];
        size_t n = utf8_char(s + i, len - i);
        if (c == 0 && cut_at_nul)
            break;
        if (n > 1) {
            i += n;
            continue;
        }
        if (n == 0)
            esc = "\xef\xbf\xbd";
        else if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20) {
            snprintf(u, sizeof(u), "\\u%04X", c);
            esc = u;
        }
        i++;
        if (!esc)
            continue;
        sb_put(b, str + run, i - 1 - run);
        sb_puts(b, esc);
        run = i;
    }
    sb_put(b, str + run, i - run);
    sb_put(b, "\"", 1);
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_text(b, s, strlen(s), false);
}

static char *sb_done(struct sbuf *b)
{
    if (b->err) {
        free(b->p);
        return NULL;
    }
    return b->p;
}

/* Whether s is valid UTF-8 throughout (the model's name: jansson refuses it otherwise). */
static bool utf8_valid(const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0, n; i < len; i += n)
        if (!(n = utf8_char((const unsigned char *)s + i, len - i)))
            return false;
    return true;
}

/* {"id":...,"object":...,"created":...,"model":...,"choices":[{"index": */
static void sb_head_fields(struct sbuf *b, const struct request *r)
{
    sb_puts(b, "{\"id\":");
    sb_str(b, r->id);
    sb_puts(b, r->kind == REQUEST_KIND_CHAT ? ",\"object\":\"chat.completion.chunk\",\"created\":"
                                            : ",\"object\":\"text_completion\",\"created\":");
    char num[24];
    sb_put(b, num, (size_t)snprintf(num, sizeof(num), "%lld", (long long)r->created));
    sb_puts(b, ",\"model\":");
    sb_str(b, r->model->name);
    sb_puts(b, ",\"choices\":[{\"index\":");
}

/* The same for every frame of r: written once by api_json_chunk_head(), else each time. */
static void sb_head(struct sbuf *b, const struct request *r, uint32_t index)
{
    if (r->chunk_head)
        sb_put(b, r->chunk_head, r->chunk_head_len);
    else
        sb_head_fields(b, r);
    sb_uint(b, index);
}

int api_json_chunk_head(struct request *r)
{
    struct sbuf b = {0};
    if (r->chunk_head || !utf8_valid(r->model->name))
        return 0; /* a name jansson refuses: every frame says so (NULL) */
    sb_head_fields(&b, r);
    if (!(r->chunk_head = sb_done(&b)))
        return -1;
    r->chunk_head_len = b.len;
    return 0;
}

/* Whether r's frames can be written: its model's name is valid UTF-8. */
static bool head_valid(const struct request *r)
{
    return r->chunk_head || utf8_valid(r->model->name);
}

/* ---- logprobs, in the shape api_json_logprobs() builds ---- */

static int piece(const struct request *r, uint32_t id, char *buf)
{
    int n = tokenizer_piece(r->model->tok, id, true, buf, PIECE_MAX);
    return n < 0 ? 0 : n > PIECE_MAX ? PIECE_MAX : n;
}

static void sb_bytes(struct sbuf *b, const char *s, int n)
{
    sb_put(b, "[", 1);
    for (int i = 0; i < n; i++) {
        if (i)
            sb_put(b, ",", 1);
        sb_uint(b, (unsigned char)s[i]);
    }
    sb_put(b, "]", 1);
}

/* jansson has no non-finite reals: the tree drops an item or value holding one. */
static bool is_real(float v)
{
    return isfinite(v);
}

/* {"content":[{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]} */
static void sb_chat_logprobs(struct sbuf *b, const struct request *r,
                             const struct relay_token *toks, uint32_t n)
{
    bool first = true;
    sb_puts(b, "{\"content\":[");
    for (uint32_t i = 0; i < n; i++) {
        const struct relay_token *t = &toks[i];
        char buf[PIECE_MAX];
        if (!is_real(t->logprob))
            continue;
        int len = piece(r, t->id, buf);
        sb_puts(b, first ? "{\"token\":" : ",{\"token\":");
        first = false;
        sb_text(b, buf, (size_t)len, false);
        sb_puts(b, ",\"logprob\":");
        sb_real(b, t->logprob);
        sb_puts(b, ",\"bytes\":");
        sb_bytes(b, buf, len);
        sb_puts(b, ",\"top_logprobs\":[");
        bool first_top = true;
        for (uint32_t k = 0; k < t->n_top && k < r->sampling.top_logprobs; k++) {
            char b2[PIECE_MAX];
            if (!is_real(t->top[k].logprob))
                continue;
            int n2 = piece(r, t->top[k].token, b2);
            sb_puts(b, first_top ? "{\"token\":" : ",{\"token\":");
            first_top = false;
            sb_text(b, b2, (size_t)n2, false);
            sb_puts(b, ",\"logprob\":");
            sb_real(b, t->top[k].logprob);
            sb_puts(b, ",\"bytes\":");
            sb_bytes(b, b2, n2);
            sb_put(b, "}", 1);
        }
        sb_puts(b, "]}");
    }
    sb_puts(b, "]}");
}

/* The key jansson would keep for a piece: its repaired text up to the first NUL. Written
 * into a scratch buffer to compare keys (an object keeps a key's first place, last value). */
static void top_key(struct sbuf *k, const char *piece_text, int n)
{
    k->len = 0;
    sb_text(k, piece_text, (size_t)n, true);
}

/* {"tokens":[...],"token_logprobs":[...],"top_logprobs":[{piece: lp}],"text_offset":[...]} */
static void sb_completion_logprobs(struct sbuf *b, const struct request *r,
                                   const struct relay_token *toks, uint32_t n,
                                   uint32_t *text_offset)
{
    uint32_t off = *text_offset;
    bool first = true;
    sb_puts(b, "{\"tokens\":[");
    for (uint32_t i = 0; i < n; i++) {
        char buf[PIECE_MAX];
        int len = piece(r, toks[i].id, buf);
        if (i)
            sb_put(b, ",", 1);
        sb_text(b, buf, (size_t)len, false);
    }
    sb_puts(b, "],\"token_logprobs\":[");
    for (uint32_t i = 0; i < n; i++) {
        if (!is_real(toks[i].logprob))
            continue;
        if (!first)
            sb_put(b, ",", 1);
        first = false;
        sb_real(b, toks[i].logprob);
    }
    sb_puts(b, "],\"top_logprobs\":[");
    for (uint32_t i = 0; i < n; i++) {
        struct sbuf keys[WIRE_MAX_TOP_LOGPROBS] = {{0}};
        float vals[WIRE_MAX_TOP_LOGPROBS];
        uint32_t n_keys = 0;
        for (uint32_t k = 0; k < toks[i].n_top && k < r->sampling.top_logprobs; k++) {
            char b2[PIECE_MAX];
            struct sbuf key = {0};
            uint32_t at;
            if (!is_real(toks[i].top[k].logprob))
                continue;
            top_key(&key, b2, piece(r, toks[i].top[k].token, b2));
            for (at = 0; at < n_keys; at++)
                if (keys[at].len == key.len && !key.err &&
                    memcmp(keys[at].p, key.p, key.len) == 0)
                    break;
            if (at < n_keys) {
                free(key.p);
            } else {
                keys[n_keys++] = key;
                b->err |= key.err;
            }
            vals[at] = toks[i].top[k].logprob;
        }
        sb_puts(b, i ? ",{" : "{");
        for (uint32_t k = 0; k < n_keys; k++) {
            if (k)
                sb_put(b, ",", 1);
            if (keys[k].p)
                sb_put(b, keys[k].p, keys[k].len);
            sb_put(b, ":", 1);
            sb_real(b, vals[k]);
            free(keys[k].p);
        }
        sb_put(b, "}", 1);
    }
    sb_puts(b, "],\"text_offset\":[");
    for (uint32_t i = 0; i < n; i++) {
        char buf[PIECE_MAX];
        if (i)
            sb_put(b, ",", 1);
        sb_uint(b, off);
        off += (uint32_t)piece(r, toks[i].id, buf);
    }
    sb_puts(b, "]}");
    *text_offset = off;
}

/* ---- frames ---- */

static char *chunk(const struct request *r, uint32_t index, const char *text, size_t len,
                   bool role, const char *finish, const struct relay_token *toks, uint32_t n,
                   uint32_t *text_offset)
{
    struct sbuf b = {0};
    if (!head_valid(r))
        return NULL;
    sb_head(&b, r, index);
    sb_puts(&b, ",\"logprobs\":");
    if (!text_offset)
        sb_puts(&b, "null");
    else if (r->kind == REQUEST_KIND_CHAT)
        sb_chat_logprobs(&b, r, toks, n);
    else
        sb_completion_logprobs(&b, r, toks, n, text_offset);
    sb_puts(&b, ",\"finish_reason\":");
    if (finish)
        sb_str(&b, finish);
    else
        sb_puts(&b, "null");
    if (r->kind == REQUEST_KIND_CHAT) {
        sb_puts(&b, ",\"delta\":{");
        if (role)
            sb_puts(&b, text ? "\"role\":\"assistant\"," : "\"role\":\"assistant\"");
        if (text) {
            sb_puts(&b, "\"content\":");
            sb_text(&b, text, len, false);
        }
        sb_puts(&b, "}}]}");
    } else {
        sb_puts(&b, ",\"text\":");
        sb_text(&b, text ? text : "", text ? len : 0, false);
        sb_puts(&b, "}]}");
    }
    return sb_done(&b);
}

char *api_json_chunk(const struct request *r, uint32_t index, const char *text, size_t len,
                     bool role, const char *finish)
{
    return chunk(r, index, text, len, role, finish, NULL, 0, NULL);
}

char *api_json_chunk_logprobs(const struct request *r, uint32_t index, const char *text,
                              size_t len, const struct relay_token *toks, uint32_t n,
                              uint32_t *text_offset)
{
    return chunk(r, index, text, len, false, NULL, toks, n, text_offset);
}

/* A chat chunk whose delta the caller writes: {..., "choices":[{"index":i,"delta":{ */
static bool delta_head(struct sbuf *b, const struct request *r, uint32_t index)
{
    if (!head_valid(r))
        return false;
    sb_head(b, r, index);
    sb_puts(b, ",\"delta\":{");
    return true;
}

static char *delta_tail(struct sbuf *b)
{
    sb_puts(b, "},\"logprobs\":null,\"finish_reason\":null}]}");
    return sb_done(b);
}

char *api_json_delta_chunk(const struct request *r, uint32_t index, const char *field,
                           const char *text, size_t len)
{
    struct sbuf b = {0};
    if (!delta_head(&b, r, index))
        return NULL;
    sb_str(&b, field);
    sb_put(&b, ":", 1);
    sb_text(&b, text, len, false);
    return delta_tail(&b);
}

char *api_json_tool_chunk(const struct request *r, uint32_t index, uint32_t call_index,
                          const char *id, const char *name, size_t name_len, const char *args,
                          size_t args_len)
{
    struct sbuf b = {0};
    if ((id && !utf8_valid(id)) || !delta_head(&b, r, index))
        return NULL;
    sb_puts(&b, "\"tool_calls\":[{\"index\":");
    sb_uint(&b, call_index);
    if (id) {
        sb_puts(&b, ",\"id\":");
        sb_str(&b, id);
        sb_puts(&b, ",\"type\":\"function\"");
    }
    sb_puts(&b, ",\"function\":{");
    if (name) {
        sb_puts(&b, "\"name\":");
        sb_text(&b, name, name_len, false);
        sb_put(&b, ",", 1);
    }
    sb_puts(&b, "\"arguments\":");
    sb_text(&b, args, args_len, false);
    sb_puts(&b, "}}]");
    return delta_tail(&b);
}
