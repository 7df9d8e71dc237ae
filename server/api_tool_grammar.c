/* tool_choice "required" or a named function, enforced: a grammar (grammar.h) whose
 * sentences are one call, in the markup of the model's format, to one of the tools (or the
 * named one), with arguments valid against its parameters (json_schema.h). The worker then
 * samples only such replies, and the reply parser reads the call back as for any reply.
 * With tool_choice "auto" and a tool marked "strict": true, the reply is either text that
 * never contains the format's call marker, or such text then one call whose arguments, for a
 * strict tool, are valid against its parameters (another tool's are any JSON object). */
#include "api_chat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "api_impl.h"
#include "grammar.h"
#include "json_schema.h"
#include "tokenizer.h"

/* {"type": "object", "properties": {"name": {"const": NAME}, ARGS: PARAMETERS},
 *  "required": ["name", ARGS], "additionalProperties": false} */
static json_t *call_schema(json_t *tool, const char *args_key, bool loose)
{
    json_t *fn = json_object_get(tool, "function");
    json_t *params = loose ? NULL : json_object_get(fn, "parameters");
    json_t *props = json_object(), *s;
    if (!props)
        return NULL;
    json_object_set_new(props, "name", json_pack("{s:O}", "const", json_object_get(fn, "name")));
    json_object_set_new(props, args_key,
                        json_is_object(params) ? json_incref(params)
                                               : json_pack("{s:s}", "type", "object"));
    s = json_pack("{s:s, s:o, s:[s,s], s:b}", "type", "object", "properties", props, "required",
                  "name", args_key, "additionalProperties", 0);
    return s;
}

static bool word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* g with its rule "root" renamed to to (outside literals and classes); malloc'd. */
static char *rename_root(const char *g, size_t len, const char *to, size_t *out_len)
{
    size_t tl = strlen(to), o = 0;
    char *out = malloc(len * (tl > 4 ? tl : 4) / 4 + len + 1);
    bool str = false, cls = false;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len;) {
        char c = g[i];
        if ((str || cls) && c == '\\' && i + 1 < len) {
            out[o++] = g[i++];
            out[o++] = g[i++];
            continue;
        }
        if (str) {
            str = c != '"';
        } else if (cls) {
            cls = c != ']';
        } else if (c == '"') {
            str = true;
        } else if (c == '[') {
            cls = true;
        } else if (c == 'r' && len - i >= 4 && memcmp(g + i, "root", 4) == 0 &&
                   (i == 0 || !word_char(g[i - 1])) && (i + 4 == len || !word_char(g[i + 4]))) {
            memcpy(out + o, to, tl);
            o += tl;
            i += 4;
            continue;
        }
        out[o++] = g[i++];
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

/* A GBNF character for a literal or a class, escaped where it would mean something. */
static void gbnf_char(char *out, size_t cap, char ch)
{
    if (strchr("\"\\[]-^", ch) || (unsigned char)ch < 0x20 || (unsigned char)ch >= 0x7f)
        snprintf(out, cap, "\\x%02X", (unsigned char)ch);
    else
        snprintf(out, cap, "%c", ch);
}

/* Rules free-0 .. free-(m-1): any text that does not contain w (ASCII, m bytes): the states
 * of a Knuth-Morris-Pratt matcher of w, each rule the text after matching i bytes of w. */
static char *not_containing(const char *w)
{
    size_t m = strlen(w), cap = 256 + m * m * 64, o = 0;
    char *g = malloc(cap), ch[8];

    if (!g || m == 0 || m > 32) {
        free(g);
        return NULL;
    }
    for (size_t i = 0; i < m; i++) {
        o += (size_t)snprintf(g + o, cap - o, "free-%zu ::= \"\"", i);
        for (size_t k = 0; k < m; k++) {
            size_t next = 0;
            bool dup = false;

            for (size_t j = 0; j < k; j++)
                dup |= w[j] == w[k];
            if (dup)
                continue;
            /* the longest prefix of w that ends the text w[0..i) + w[k] */
            for (size_t len = i + 1; len > 0; len--) {
                if (len <= m && w[len - 1] == w[k] &&
                    (len == 1 || memcmp(w, w + i - (len - 1), len - 1) == 0)) {
                    next = len;
                    break;
                }
            }
            if (next == m)
                continue; /* w complete: not allowed */
            gbnf_char(ch, sizeof(ch), w[k]);
            o += (size_t)snprintf(g + o, cap - o, " | \"%s\" free-%zu", ch, next);
        }
        o += (size_t)snprintf(g + o, cap - o, " | [^");
        for (size_t k = 0; k < m; k++) {
            gbnf_char(ch, sizeof(ch), w[k]);
            o += (size_t)snprintf(g + o, cap - o, "%s", ch);
        }
        o += (size_t)snprintf(g + o, cap - o, "] free-0\n");
    }
    return g;
}

int api_tool_grammar(struct request *r, const struct api_chat *c, enum toolcall_format fmt,
                     struct perr *e)
{
    const char *marker = NULL;
    bool strict_auto = false;
    char *free_rules = NULL;
    const char *pre, *post, *args_key = "arguments";
    json_t *schema = NULL, *alts, *t;
    char err[200] = "", *g = NULL, *renamed = NULL;
    size_t len = 0, rlen = 0, i;
    int rc = -ENOMEM;

    if (c->choice == API_TOOL_CHOICE_AUTO) {
        json_array_foreach(c->tools, i, t)
            strict_auto |= json_is_true(json_object_get(json_object_get(t, "function"), "strict"));
        if (!strict_auto || r->grammar)
            return 0; /* nothing strict, or the client's own grammar shapes the reply */
    } else if (c->choice != API_TOOL_CHOICE_REQUIRED && c->choice != API_TOOL_CHOICE_NAMED) {
        return 0;
    }
    switch (fmt) {
    case TOOLCALL_FORMAT_HERMES:
    case TOOLCALL_FORMAT_ANY:
        pre = "\"<tool_call>\\n\" ";
        post = " \"\\n</tool_call>\"";
        marker = "<tool_call>";
        break;
    case TOOLCALL_FORMAT_LLAMA3:
        pre = post = "";
        args_key = "parameters";
        marker = "<|python_tag|>";
        break;
    case TOOLCALL_FORMAT_MISTRAL:
        pre = "\"[TOOL_CALLS][\" ";
        post = " \"]\"";
        marker = "[TOOL_CALLS]";
        break;
    case TOOLCALL_FORMAT_GRANITE:
        pre = "\"<|tool_call|>[\" ";
        post = " \"]\"";
        marker = "<|tool_call|>";
        break;
    default:
        return 0; /* no grammar form for this markup: the choice is the model's */
    }
    if (strict_auto && r->f && r->model->tok) {
        /* A marker the model writes as a control token (Mistral's [TOOL_CALLS]) has no text
         * a grammar can allow, so under one the model could only spell it out: leave the
         * reply to the model rather than push it off its own format. */
        const struct tokenizer *tk = r->model->tok;
        long id = tokenizer_find_special(tk, marker);
        char piece[64];

        if (id >= 0 && tokenizer_piece(tk, (uint32_t)id, false, piece, sizeof(piece)) == 0)
            return 0;
    }
    if (r->grammar)
        return api_bad(e, "tool_choice", "'tool_choice' '%s' cannot be combined with "
                       "'response_format', 'grammar' or 'json_schema'",
                       c->choice == API_TOOL_CHOICE_REQUIRED ? "required" : "function");
    if (!(alts = json_array()))
        return -ENOMEM;
    json_array_foreach(c->tools, i, t) {
        json_t *n = json_object_get(json_object_get(t, "function"), "name");
        if (c->choice == API_TOOL_CHOICE_NAMED && strcmp(json_string_value(n), c->choice_name))
            continue;
        json_t *s = call_schema(
            t, args_key,
            strict_auto && !json_is_true(json_object_get(json_object_get(t, "function"), "strict")));
        if (!s || json_array_append_new(alts, s) < 0)
            goto out;
    }
    schema = json_array_size(alts) == 1 ? json_incref(json_array_get(alts, 0))
                                        : json_pack("{s:O}", "anyOf", alts);
    if (!schema)
        goto out;
    if (!(g = json_schema_to_grammar(schema, &len, err, sizeof(err)))) {
        rc = strstr(err, "memory") ? -ENOMEM
                                   : api_bad(e, "tools", "a tool's parameters cannot be "
                                             "enforced for tool_choice: %s", err);
        goto out;
    }
    if (!(renamed = rename_root(g, len, "tool-call", &rlen)))
        goto out;
    if (strict_auto && !(free_rules = not_containing(marker)))
        goto out;
    size_t cap = rlen + strlen(pre) + strlen(post) + (free_rules ? strlen(free_rules) : 0) + 160;
    if (!(r->grammar = malloc(cap)))
        goto out;
    int n;
    if (!strict_auto)
        n = snprintf(r->grammar, cap, "root ::= %stool-call%s\n%s", pre, post, renamed);
    else if (fmt == TOOLCALL_FORMAT_LLAMA3) /* a reply that opens with '{' is a call */
        n = snprintf(r->grammar, cap,
                     "root ::= tool-call | \"\" | [ \\t\\n]{0,8} [^{< \\t\\n] free-0\n%s%s",
                     free_rules, renamed);
    else
        n = snprintf(r->grammar, cap, "root ::= free-0 (%stool-call%s)?\n%s%s", pre, post,
                     free_rules, renamed);
    r->grammar_len = (uint32_t)n;
    if ((size_t)n > WIRE_MAX_GRAMMAR) {
        rc = api_bad(e, "tools", "the tools make a grammar longer than %u bytes",
                     WIRE_MAX_GRAMMAR);
        goto drop;
    }
    struct grammar *cg = grammar_compile(r->grammar, r->grammar_len, err, sizeof(err));
    if (!cg) {
        rc = api_bad(e, "tools", "the tools cannot be enforced for tool_choice: %s", err);
        goto drop;
    }
    grammar_destroy(cg);
    rc = 0;
    goto out;
drop:
    free(r->grammar);
    r->grammar = NULL;
    r->grammar_len = 0;
out:
    free(free_rules);
    free(renamed);
    free(g);
    json_decref(schema);
    json_decref(alts);
    return rc;
}
