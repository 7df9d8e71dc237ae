/* API keys: loading (flags, file, environment), the Bearer check and the route policy. The
 * check compares the presented token against every key over AUTH_KEY_MAX zero-padded bytes
 * and folds the result without branches, so neither a key's content, its length nor which
 * key matched changes the time taken. Answering 401 is the caller's. */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void auth_init(struct auth *a)
{
    memset(a, 0, sizeof(*a));
}

void auth_free(struct auth *a)
{
    if (a->keys)
        explicit_bzero(a->keys, a->cap * sizeof(*a->keys));
    free(a->keys);
    explicit_bzero(a, sizeof(*a));
}

bool auth_enabled(const struct auth *a)
{
    return a->n_keys > 0;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* Narrow [*s, *s + *len) to its non-blank middle. */
static void trim(const char **s, size_t *len)
{
    while (*len && is_blank(**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && is_blank((*s)[*len - 1]))
        (*len)--;
}

/* 1 when k equals tok (zero-padded to AUTH_KEY_MAX, len bytes long), else 0. Always reads
 * every byte of both; the final fold has no branch. */
static uint32_t key_equal(const struct auth_key *k, const unsigned char *tok, uint32_t len)
{
    uint32_t d = k->len ^ len;

    for (size_t i = 0; i < AUTH_KEY_MAX; i++)
        d |= (uint32_t)(k->bytes[i] ^ tok[i]);
    /* d != 0 exactly when d | -d has its top bit set */
    return ((d | (0u - d)) >> 31) ^ 1u;
}

/* Validate and copy a trimmed key into out. */
static int key_make(struct auth_key *out, const char *key, size_t len)
{
    trim(&key, &len);
    if (len == 0 || len > AUTH_KEY_MAX)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];

        if (c <= 0x20 || c == 0x7f)
            return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    out->len = (uint32_t)len;
    memcpy(out->bytes, key, len);
    return 0;
}

int auth_add_key(struct auth *a, const char *key, size_t len)
{
    struct auth_key k;
    int err;

    if ((err = key_make(&k, key, len)) < 0)
        return err;
    for (size_t i = 0; i < a->n_keys; i++) {
        if (key_equal(&a->keys[i], k.bytes, k.len)) {
            explicit_bzero(&k, sizeof(k));
            return (int)i;
        }
    }
    if (a->n_keys == (size_t)AUTH_OPEN - 1) {
        explicit_bzero(&k, sizeof(k));
        return -ENOMEM;
    }
    if (a->n_keys == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 8;
        struct auth_key *keys = calloc(cap, sizeof(*keys));

        if (!keys) {
            explicit_bzero(&k, sizeof(k));
            return -ENOMEM;
        }
        /* Copy by hand rather than realloc, so the old array can be wiped before it is freed. */
        if (a->keys) {
            memcpy(keys, a->keys, a->n_keys * sizeof(*keys));
            explicit_bzero(a->keys, a->cap * sizeof(*keys));
            free(a->keys);
        }
        a->keys = keys;
        a->cap = cap;
    }
    a->keys[a->n_keys] = k;
    explicit_bzero(&k, sizeof(k));
    return (int)a->n_keys++;
}

int auth_load_file(struct auth *a, const char *path, char *err, size_t errlen)
{
    FILE *f;
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    int added = 0, rc;

    if (!(f = fopen(path, "re"))) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(-rc));
        return rc;
    }
    while ((n = getline(&line, &cap, f)) >= 0) {
        const char *s = line;
        size_t len = (size_t)n;

        lineno++;
        trim(&s, &len);
        if (len == 0 || s[0] == '#')
            continue;
        if ((rc = auth_add_key(a, s, len)) < 0) {
            snprintf(err, errlen, "%s:%zu: %s", path, lineno,
                     rc == -EINVAL ? "a key must be 1-128 characters without blanks"
                                   : strerror(-rc));
            goto fail;
        }
        added++;
    }
    if (ferror(f)) {
        rc = -EIO;
        snprintf(err, errlen, "%s: read error", path);
        goto fail;
    }
    rc = added;
fail:
    if (line)
        explicit_bzero(line, cap);
    free(line);
    (void)fclose(f); /* read-only */
    return rc;
}

int auth_load_list(struct auth *a, const char *value)
{
    int added = 0, rc;

    if (!value)
        return 0;
    for (const char *s = value;;) {
        size_t len = strcspn(s, ",");
        const char *item = s;
        size_t ilen = len;

        trim(&item, &ilen);
        if (ilen) {
            if ((rc = auth_add_key(a, item, ilen)) < 0)
                return rc;
            added++;
        }
        if (!s[len])
            break;
        s += len + 1;
    }
    return added;
}

int auth_set_metrics_key(struct auth *a, const char *key)
{
    int err = key_make(&a->metrics_key, key, strlen(key));

    a->has_metrics_key = err == 0;
    return err;
}

/* The token of "Bearer TOKEN" into tok (zero-padded); its length, or -EACCES when the
 * header is missing, of another scheme, or the token is empty or too long. */
static int parse_bearer(const char *h, unsigned char tok[AUTH_KEY_MAX])
{
    size_t len;

    if (!h)
        return -EACCES;
    while (is_blank(*h))
        h++;
    if (strncasecmp(h, "bearer", 6) != 0 || !is_blank(h[6]))
        return -EACCES;
    h += 6;
    while (is_blank(*h))
        h++;
    len = 0;
    while (h[len] && !is_blank(h[len]))
        len++;
    for (const char *rest = h + len; *rest; rest++)
        if (!is_blank(*rest))
            return -EACCES; /* a second word: not one token */
    if (len == 0 || len > AUTH_KEY_MAX)
        return -EACCES;
    memset(tok, 0, AUTH_KEY_MAX);
    memcpy(tok, h, len);
    return (int)len;
}

int auth_check(const struct auth *a, const char *authorization)
{
    unsigned char tok[AUTH_KEY_MAX];
    uint32_t any = 0, index = 0;
    int len;

    if (a->n_keys == 0)
        return AUTH_OPEN;
    if ((len = parse_bearer(authorization, tok)) < 0)
        return len;
    /* Every key is compared and the matching index is folded in with a mask, so the time
     * does not depend on which key (if any) matched. Keys are unique: at most one match. */
    for (size_t i = 0; i < a->n_keys; i++) {
        uint32_t eq = key_equal(&a->keys[i], tok, (uint32_t)len);

        index |= (0u - eq) & (uint32_t)i;
        any |= eq;
    }
    explicit_bzero(tok, sizeof(tok));
    return any ? (int)index : -EACCES;
}

/* Whether the path part of path (before any '?') is exactly want. */
static bool path_is(const char *path, const char *want)
{
    size_t n = strcspn(path, "?");

    return n == strlen(want) && strncmp(path, want, n) == 0;
}

bool auth_route_needs_key(const struct auth *a, const char *path)
{
    if (path_is(path, "/health"))
        return false;
    if (path_is(path, "/metrics"))
        return a->has_metrics_key;
    /* the API's routes, and everything under /v1/ (an unknown /v1/ path answers 401 before
     * 404, so it says nothing of the routes); any other path is not served: it stays 404 */
    return auth_enabled(a) && (strncmp(path, "/v1/", 4) == 0 || path_is(path, "/tokenize") ||
                               path_is(path, "/detokenize") || path_is(path, "/apply-template"));
}

int auth_check_request(const struct auth *a, const char *path, const char *authorization)
{
    unsigned char tok[AUTH_KEY_MAX];
    int len;
    uint32_t eq;

    if (!auth_route_needs_key(a, path))
        return AUTH_OPEN;
    if (!path_is(path, "/metrics"))
        return auth_check(a, authorization);
    if ((len = parse_bearer(authorization, tok)) < 0)
        return len;
    eq = key_equal(&a->metrics_key, tok, (uint32_t)len);
    explicit_bzero(tok, sizeof(tok));
    return eq ? AUTH_OPEN : -EACCES;
}

bool auth_may_see_details(const struct auth *a, const char *authorization)
{
    if (a->has_metrics_key)
        return auth_check_request(a, "/metrics", authorization) >= 0;
    return auth_check(a, authorization) >= 0; /* AUTH_OPEN without keys */
}
