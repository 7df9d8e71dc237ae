/* The structured-output fields of both routes: response_format {"type": "json_object"} and
 * {"type": "json_schema", "json_schema": {"schema": ...}}, and llama.cpp's top-level
 * "grammar" (GBNF) and "json_schema". Each becomes one GBNF text on the request, compiled
 * here once to refuse a bad one with a 400 (naming the JSON Schema keyword, or the grammar's
 * line and column) before any generation; the worker compiles it again from the job, as it
 * must check what another process sends. Both the conversion and the check are cached by
 * the hash of the field's text, so a client repeating one schema pays for it once. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api_impl.h"
#include "grammar.h"
#include "hash.h"
#include "json_schema.h"

#define API_GRAMMAR_CACHE 64

struct gcache_entry {
    uint64_t hash;
    char *key;     /* the field's canonical text */
    char *grammar; /* NULL: refused, with error */
    size_t len;
    char error[200];
    uint64_t used;
};

static struct gcache_entry gcache[API_GRAMMAR_CACHE];
static uint64_t gcache_clock;
static pthread_mutex_t gcache_lock = PTHREAD_MUTEX_INITIALIZER;

/* The GBNF for key (kind + text): cached, or made by conv and checked by compiling. On
 * success *out is a malloc'd copy; else err holds the message. Returns 0, -EINVAL, -ENOMEM. */
static int grammar_for(const char *key, json_t *schema, const char *gbnf, char **out, size_t *len,
                       char *err, size_t errlen)
{
    uint64_t h = hash_fnv1a(key, strlen(key));
    struct gcache_entry *e = NULL, *victim = &gcache[0];
    char *text = NULL;
    size_t n = 0;
    int rc = 0;

    pthread_mutex_lock(&gcache_lock);
    for (int i = 0; i < API_GRAMMAR_CACHE; i++) {
        if (gcache[i].key && gcache[i].hash == h && strcmp(gcache[i].key, key) == 0)
            e = &gcache[i];
        if (!gcache[i].key || (victim->key && gcache[i].used < victim->used))
            victim = &gcache[i];
    }
    if (!e) {
        char msg[200] = "";

        if (schema) {
            text = json_schema_to_grammar(schema, &n, msg, sizeof(msg));
        } else if (gbnf) {
            n = strlen(gbnf);
            text = strdup(gbnf);
        } else {
            text = json_schema_object_grammar(&n);
        }
        if (text) {
            struct grammar *g = grammar_compile(text, n, msg, sizeof(msg));
            struct grammar_matcher *m = g ? grammar_matcher_create(0) : NULL;

            /* the start is where an explosion of empty alternatives shows first */
            if (g && m && grammar_matcher_start(m, g) == -E2BIG) {
                snprintf(msg, sizeof(msg), "the grammar is too ambiguous to follow (its empty "
                                           "alternatives multiply)");
                grammar_destroy(g);
                g = NULL;
            }
            grammar_matcher_destroy(m);
            if (!g) {
                free(text);
                text = NULL;
            }
            grammar_destroy(g);
        } else if (!msg[0]) {
            snprintf(msg, sizeof(msg), "out of memory");
        }
        free(victim->key);
        free(victim->grammar);
        memset(victim, 0, sizeof(*victim));
        if (!(victim->key = strdup(key))) {
            free(text);
            pthread_mutex_unlock(&gcache_lock);
            return -ENOMEM;
        }
        victim->hash = h;
        victim->grammar = text;
        victim->len = n;
        snprintf(victim->error, sizeof(victim->error), "%s", msg);
        e = victim;
    }
    e->used = ++gcache_clock;
    if (!e->grammar) {
        snprintf(err, errlen, "%s", e->error);
        rc = -EINVAL;
    } else if ((*out = malloc(e->len + 1))) {
        memcpy(*out, e->grammar, e->len + 1);
        *len = e->len;
    } else {
        rc = -ENOMEM;
    }
    pthread_mutex_unlock(&gcache_lock);
    return rc;
}

static int set_grammar(struct request *r, const char *param, const char *kind, json_t *schema,
                       const char *gbnf, struct perr *e)
{
    char *key, err[200];
    size_t len = 0;
    int rc;

    if (schema) {
        char *dump = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);

        if (!dump)
            return -ENOMEM;
        rc = asprintf(&key, "%s:%s", kind, dump);
        free(dump);
    } else {
        rc = asprintf(&key, "%s:%s", kind, gbnf ? gbnf : "");
    }
    if (rc < 0)
        return -ENOMEM;
    rc = grammar_for(key, schema, gbnf, &r->grammar, &len, err, sizeof(err));
    free(key);
    if (rc == -EINVAL)
        return api_bad(e, param, "'%s': %s", param, err);
    if (rc < 0)
        return rc;
    if (len > WIRE_MAX_GRAMMAR) {
        free(r->grammar);
        r->grammar = NULL;
        return api_bad(e, param, "'%s' makes a grammar longer than %u bytes", param,
                       WIRE_MAX_GRAMMAR);
    }
    r->grammar_len = (uint32_t)len;
    return 0;
}

int api_parse_grammar(struct request *r, json_t *o, struct perr *e)
{
    json_t *rf = json_object_get(o, "response_format"), *g = json_object_get(o, "grammar");
    json_t *js = json_object_get(o, "json_schema");
    int given = 0;
    const char *t;

    if (rf && json_is_null(rf))
        rf = NULL;
    if (g && json_is_null(g))
        g = NULL;
    if (js && json_is_null(js))
        js = NULL;
    if (rf) {
        if (!json_is_object(rf) || !json_is_string(json_object_get(rf, "type")))
            return api_bad(e, "response_format",
                           "'response_format' must be an object with a string 'type'");
        t = json_string_value(json_object_get(rf, "type"));
        if (strcmp(t, "text") == 0)
            rf = NULL;
        else if (strcmp(t, "json_object") != 0 && strcmp(t, "json_schema") != 0)
            return api_bad(e, "response_format",
                           "'response_format' type must be 'text', 'json_object' or 'json_schema'");
    }
    given = (rf != NULL) + (g != NULL) + (js != NULL);
    if (given > 1)
        return api_bad(e, rf ? "response_format" : "grammar",
                       "give only one of 'response_format', 'grammar' and 'json_schema'");
    if (g) {
        if (!json_is_string(g))
            return api_bad(e, "grammar", "'%s' must be a string", "grammar");
        if (json_string_length(g) > GRAMMAR_MAX_SOURCE ||
            strlen(json_string_value(g)) != json_string_length(g))
            return api_bad(e, "grammar", "'grammar' must be at most %u bytes, without NUL",
                           GRAMMAR_MAX_SOURCE);
        return set_grammar(r, "grammar", "g", NULL, json_string_value(g), e);
    }
    if (js) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return api_bad(e, "json_schema", "'%s' must be a JSON Schema object", "json_schema");
        return set_grammar(r, "json_schema", "s", js, NULL, e);
    }
    if (!rf)
        return 0;
    if (strcmp(json_string_value(json_object_get(rf, "type")), "json_object") == 0)
        return set_grammar(r, "response_format", "o", NULL, NULL, e);
    json_t *w = json_object_get(rf, "json_schema"), *s;

    if (!json_is_object(w))
        return api_bad(e, "response_format",
                       "'response_format' of type 'json_schema' needs a 'json_schema' object");
    s = json_object_get(w, "schema");
    if (!s)
        return api_bad(e, "response_format", "'response_format.json_schema.schema' is required");
    if (!json_is_object(s) && !json_is_boolean(s))
        return api_bad(e, "response_format",
                       "'response_format.json_schema.schema' must be a JSON Schema object");
    return set_grammar(r, "response_format", "s", s, NULL, e);
}
