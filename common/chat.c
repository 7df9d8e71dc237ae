/* Chat templates: recognise a model's template family from distinctive substrings of its
 * Jinja source and render messages the way that family's official template does. No Jinja
 * interpreter: each family is written out by hand. The choices, where the official templates
 * leave something open (a system message in a family without a system role, roles out of
 * order), are noted at each family. */
#include "chat.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

static const char *const family_names[CHAT_FAMILY_COUNT] = {
    [CHAT_FAMILY_FALLBACK] = "fallback", [CHAT_FAMILY_CHATML] = "chatml",
    [CHAT_FAMILY_LLAMA2] = "llama2",     [CHAT_FAMILY_LLAMA3] = "llama3",
    [CHAT_FAMILY_MISTRAL] = "mistral",   [CHAT_FAMILY_ZEPHYR] = "zephyr",
    [CHAT_FAMILY_PHI3] = "phi3",         [CHAT_FAMILY_GEMMA] = "gemma",
};

const char *chat_family_name(enum chat_family f)
{
    return (unsigned)f < CHAT_FAMILY_COUNT ? family_names[f] : NULL;
}

int chat_family_from_name(const char *name)
{
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
        if (name && !strcmp(name, family_names[f]))
            return f;
    return -1;
}

/* ---- detection ---- */

static bool has(struct gguf_str s, const char *needle)
{
    size_t n = strlen(needle);
    return s.len >= n && memmem(s.ptr, (size_t)s.len, needle, n) != NULL;
}

/* Order matters: Llama 2 templates also contain [INST], and Phi-3's and Zephyr's both use
 * <|user|> (Zephyr ends turns with eos_token, usually not a literal </s>; Phi-3 with a
 * literal <|end|>), so Phi-3 is tested first and any other <|user|> template is Zephyr. */
enum chat_family chat_family_detect(const char *text, size_t len)
{
    struct gguf_str tmpl = {text, len};
    if (has(tmpl, "<|im_start|>"))
        return CHAT_FAMILY_CHATML;
    if (has(tmpl, "<|start_header_id|>"))
        return CHAT_FAMILY_LLAMA3;
    if (has(tmpl, "<<SYS>>"))
        return CHAT_FAMILY_LLAMA2;
    if (has(tmpl, "[INST]"))
        return CHAT_FAMILY_MISTRAL;
    if (has(tmpl, "<start_of_turn>"))
        return CHAT_FAMILY_GEMMA;
    if (has(tmpl, "<|user|>") && has(tmpl, "<|end|>"))
        return CHAT_FAMILY_PHI3;
    if (has(tmpl, "<|user|>"))
        return CHAT_FAMILY_ZEPHYR;
    return CHAT_FAMILY_FALLBACK;
}

/* The text of special token key (an id) from tokenizer.ggml.tokens, if it fits. */
static bool token_text(const struct gguf *g, const char *key, char *out, size_t cap)
{
    uint32_t id;
    const struct gguf_kv *toks = gguf_find(g, "tokenizer.ggml.tokens");
    if (gguf_get_u32(g, key, &id) < 0 || !toks || toks->type != GGUF_TYPE_ARRAY ||
        toks->arr_type != GGUF_TYPE_STRING || id >= toks->arr_n)
        return false;
    struct gguf_str s = gguf_arr_str(toks, id);
    if (s.len == 0 || s.len >= cap || memchr(s.ptr, '\0', (size_t)s.len))
        return false;
    memcpy(out, s.ptr, (size_t)s.len);
    out[s.len] = '\0';
    return true;
}

/* What each family's vocabulary calls BOS and EOS, for files that do not say. */
static void family_defaults(struct chat_template *t)
{
    static const char *const d[CHAT_FAMILY_COUNT][2] = {
        [CHAT_FAMILY_FALLBACK] = {"", ""},
        [CHAT_FAMILY_CHATML] = {"", "<|im_end|>"},
        [CHAT_FAMILY_LLAMA2] = {"<s>", "</s>"},
        [CHAT_FAMILY_LLAMA3] = {"<|begin_of_text|>", "<|eot_id|>"},
        [CHAT_FAMILY_MISTRAL] = {"<s>", "</s>"},
        [CHAT_FAMILY_ZEPHYR] = {"<s>", "</s>"},
        [CHAT_FAMILY_PHI3] = {"<s>", "<|endoftext|>"},
        [CHAT_FAMILY_GEMMA] = {"<bos>", "<eos>"},
    };
    snprintf(t->bos, sizeof(t->bos), "%s", d[t->family][0]);
    snprintf(t->eos, sizeof(t->eos), "%s", d[t->family][1]);
}

void chat_template_from_gguf(struct chat_template *t, const struct gguf *g)
{
    struct gguf_str tmpl = {"", 0};

    memset(t, 0, sizeof(*t));
    if (g)
        (void)gguf_get_str(g, "tokenizer.chat_template", &tmpl); /* absent: fallback */
    t->family = chat_family_detect(tmpl.ptr, (size_t)tmpl.len);
    family_defaults(t);
    if (g) {
        char buf[sizeof(t->bos)];
        if (token_text(g, "tokenizer.ggml.bos_token_id", buf, sizeof(buf)))
            memcpy(t->bos, buf, sizeof(buf));
        if (token_text(g, "tokenizer.ggml.eos_token_id", buf, sizeof(buf)))
            memcpy(t->eos, buf, sizeof(buf));
    }
}

/* ---- rendering ---- */

struct sb {
    char *p;
    size_t len, cap;
    bool oom;
    struct tokenizer_span *spans; /* where message content was written */
    size_t n_spans, cap_spans;
};

static void sb_putn(struct sb *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (n + 1 > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (n + 1 > cap - b->len)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_put(struct sb *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Message content: written like any text, and its range recorded (joined with the previous
 * range when they touch) so the tokenizer reads it as ordinary characters. */
static void sb_content_n(struct sb *b, const char *s, size_t n)
{
    size_t off = b->len;
    sb_putn(b, s, n);
    if (b->oom || n == 0)
        return;
    if (b->n_spans && b->spans[b->n_spans - 1].off + b->spans[b->n_spans - 1].len == off) {
        b->spans[b->n_spans - 1].len += n;
        return;
    }
    if (b->n_spans == b->cap_spans) {
        size_t cap = b->cap_spans ? 2 * b->cap_spans : 16;
        struct tokenizer_span *ns = realloc(b->spans, cap * sizeof(*ns));
        if (!ns) {
            b->oom = true;
            return;
        }
        b->spans = ns;
        b->cap_spans = cap;
    }
    b->spans[b->n_spans++] = (struct tokenizer_span){.off = off, .len = n};
}

static void sb_content(struct sb *b, const char *s)
{
    sb_content_n(b, s, strlen(s));
}

/* The length of s without its trailing whitespace. */
static size_t rtrim_len(const char *s, size_t n)
{
    while (n && is_space(s[n - 1]))
        n--;
    return n;
}

/* Content with leading and trailing whitespace removed (Jinja's trim, Python's strip). */
static void sb_content_trimmed(struct sb *b, const char *s)
{
    while (is_space(*s))
        s++;
    sb_content_n(b, s, rtrim_len(s, strlen(s)));
}

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

static int parse_role(const char *r)
{
    if (!r)
        return -1;
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        return ROLE_SYSTEM;
    if (!strcmp(r, "tool"))
        return ROLE_TOOL;
    if (!strcmp(r, "user"))
        return ROLE_USER;
    if (!strcmp(r, "assistant"))
        return ROLE_ASSISTANT;
    return -1;
}



/* Families without a system role (Llama 2, Mistral, Gemma) hold a system message and fold it
 * into the next user turn; the official templates handle only a leading one, and this is the
 * same there. A system message with no user turn after it becomes a user turn of its own. */
/* Llama 2: every user turn is "<s>[INST] {content} [/INST]" with content stripped, the first
 * carrying "<<SYS>>\n{system}\n<</SYS>>\n\n"; an assistant turn is " {content} </s>". The
 * prompt already ends at [/INST], so there is no generation prompt to add. */
static void llama2_user(struct sb *b, const struct chat_template *t, const char *sys,
                        const char *content)
{
    sb_put(b, t->bos);
    sb_put(b, "[INST] ");
    if (sys) {
        /* strip("<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + content): the block starts with text,
         * so only the end is stripped: content's tail, or the block's blank line if content
         * is all whitespace */
        size_t n = rtrim_len(content, strlen(content));
        sb_put(b, "<<SYS>>\n");
        sb_content(b, sys);
        sb_put(b, n ? "\n<</SYS>>\n\n" : "\n<</SYS>>");
        sb_content_n(b, content, n);
    } else {
        sb_content_trimmed(b, content);
    }
    sb_put(b, " [/INST]");
}

/* The families that frame each message as an opening marker, the role, a closing marker,
 * the content and an end marker, and prompt the assistant with its opening:
 *   chatml  "<|im_start|>{role}\n{content}<|im_end|>\n" (Qwen, SmolLM; no default system
 *           message is added: Qwen 2's template adds one, that is Qwen's choice)
 *   llama3  BOS, "<|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>"
 *   zephyr  "<|{role}|>\n{content}{EOS}\n"
 *   phi3    "<|{role}|>\n{content}<|end|>\n", ending with EOS when there is no generation
 *           prompt, as its official template does */
struct headed_markup {
    bool bos;             /* write the template's BOS text first */
    const char *open;     /* before the role */
    const char *after;    /* after the role */
    bool trim;            /* content trimmed of surrounding white space */
    bool eos_end;         /* the template's EOS text ends each message, before end */
    const char *end;      /* after the content */
    const char *gen;      /* the generation prompt */
    bool eos_without_gen; /* no generation prompt: the EOS text ends the prompt */
};

static const struct headed_markup headed_chatml = {
    false, "<|im_start|>", "\n", false, false, "<|im_end|>\n", "<|im_start|>assistant\n", false};
static const struct headed_markup headed_llama3 = {
    true,  "<|start_header_id|>", "<|end_header_id|>\n\n", true, false, "<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n", false};
static const struct headed_markup headed_zephyr = {
    false, "<|", "|>\n", false, true, "\n", "<|assistant|>\n", false};
static const struct headed_markup headed_phi3 = {
    false, "<|", "|>\n", false, false, "<|end|>\n", "<|assistant|>\n", true};

static void render_headed(struct sb *b, const struct chat_template *t,
                          const struct headed_markup *k, const struct chat_msg *m, size_t n,
                          bool gen)
{
    if (k->bos)
        sb_put(b, t->bos);
    for (size_t i = 0; i < n; i++) {
        sb_put(b, k->open);
        sb_put(b, m[i].role);
        sb_put(b, k->after);
        if (k->trim)
            sb_content_trimmed(b, m[i].content);
        else
            sb_content(b, m[i].content);
        if (k->eos_end)
            sb_put(b, t->eos);
        sb_put(b, k->end);
    }
    if (gen)
        sb_put(b, k->gen);
    else if (k->eos_without_gen)
        sb_put(b, t->eos);
}

static void render_llama2(struct sb *b, const struct chat_template *t, const struct chat_msg *m,
                          size_t n)
{
    const char *sys = NULL;
    for (size_t i = 0; i < n; i++) {
        switch (parse_role(m[i].role)) {
        case ROLE_SYSTEM: sys = m[i].content; break;
        case ROLE_USER:
        case ROLE_TOOL:
            llama2_user(b, t, sys, m[i].content);
            sys = NULL;
            break;
        default:
            sb_put(b, " ");
            sb_content_trimmed(b, m[i].content);
            sb_put(b, " ");
            sb_put(b, t->eos);
        }
    }
    if (sys)
        llama2_user(b, t, sys, "");
}

/* The markup of a template with no system role (Mistral v0.1, Gemma 1/2): BOS once, then
 * user and assistant turns. Their later versions put a system message before the next user
 * message's content with a blank line, and so does kiln for these rather than refuse it. */
struct folded_markup {
    const char *user_open, *user_close;
    const char *asst_open, *asst_close; /* asst_close NULL: the template's EOS text */
    const char *gen;                    /* the generation prompt */
    bool trim;                          /* contents are trimmed */
};

/* Mistral Instruct v0.1: "[INST] {user} [/INST]" and "{assistant}</s>" with no spaces
 * between turns, and no generation prompt. */
static const struct folded_markup mistral_markup = {
    .user_open = "[INST] ", .user_close = " [/INST]", .asst_open = "", .gen = ""};

/* Gemma: "<start_of_turn>{user|model}\n{content trimmed}<end_of_turn>\n", then
 * "<start_of_turn>model\n". */
static const struct folded_markup gemma_markup = {.user_open = "<start_of_turn>user\n",
                                                  .user_close = "<end_of_turn>\n",
                                                  .asst_open = "<start_of_turn>model\n",
                                                  .asst_close = "<end_of_turn>\n",
                                                  .gen = "<start_of_turn>model\n",
                                                  .trim = true};

static void folded_content(struct sb *b, const struct folded_markup *f, const char *content)
{
    if (f->trim)
        sb_content_trimmed(b, content);
    else
        sb_content(b, content);
}

static void folded_user(struct sb *b, const struct folded_markup *f, const char *sys,
                        const char *content)
{
    sb_put(b, f->user_open);
    if (sys) {
        sb_content(b, sys);
        sb_put(b, "\n\n");
    }
    folded_content(b, f, content);
    sb_put(b, f->user_close);
}

static void render_folded(struct sb *b, const struct chat_template *t,
                          const struct folded_markup *f, const struct chat_msg *m, size_t n,
                          bool gen)
{
    const char *sys = NULL;
    sb_put(b, t->bos);
    for (size_t i = 0; i < n; i++) {
        switch (parse_role(m[i].role)) {
        case ROLE_SYSTEM: sys = m[i].content; break;
        case ROLE_USER:
        case ROLE_TOOL:
            folded_user(b, f, sys, m[i].content);
            sys = NULL;
            break;
        default:
            sb_put(b, f->asst_open);
            folded_content(b, f, m[i].content);
            sb_put(b, f->asst_close ? f->asst_close : t->eos);
        }
    }
    if (sys)
        folded_user(b, f, sys, "");
    if (gen)
        sb_put(b, f->gen);
}



/* Fallback: "{role}: {content}\n" per message, then "assistant:" as the generation prompt. */
static void render_fallback(struct sb *b, const struct chat_msg *m, size_t n, bool gen)
{
    for (size_t i = 0; i < n; i++) {
        sb_put(b, m[i].role);
        sb_put(b, ": ");
        sb_content(b, m[i].content);
        sb_put(b, "\n");
    }
    if (gen)
        sb_put(b, "assistant:");
}

bool chat_writes_bos(const struct chat_template *t)
{
    switch (t->family) {
    case CHAT_FAMILY_LLAMA2:
    case CHAT_FAMILY_LLAMA3:
    case CHAT_FAMILY_MISTRAL:
    case CHAT_FAMILY_GEMMA: return t->bos[0] != '\0';
    default: return false;
    }
}

unsigned chat_encode_flags_text(const struct chat_template *t, const struct tokenizer *tok,
                                const char *text)
{
    if (!t->jinja)
        return chat_encode_flags(t, tok);
    bool own_bos = t->bos[0] && !strncmp(text, t->bos, strlen(t->bos)) &&
                   tokenizer_find_special(tok, t->bos) >= 0;
    return TOKENIZER_PARSE_SPECIAL | (own_bos ? 0 : TOKENIZER_ADD_SPECIAL);
}

unsigned chat_encode_flags(const struct chat_template *t, const struct tokenizer *tok)
{
    /* a BOS text that is no special token of this vocabulary would not become BOS */
    bool own_bos = chat_writes_bos(t) && tokenizer_find_special(tok, t->bos) >= 0;
    return TOKENIZER_PARSE_SPECIAL | (own_bos ? 0 : TOKENIZER_ADD_SPECIAL);
}

long chat_encode(const struct chat_template *t, const struct tokenizer *tok,
                 const struct chat_msg *msgs, size_t n, bool add_generation_prompt,
                 uint32_t *out, size_t cap, char *err, size_t errlen)
{
    struct tokenizer_span *spans = NULL;
    size_t n_spans = 0;
    char *text = chat_render_spans(t, msgs, n, add_generation_prompt, &spans, &n_spans, err,
                                   errlen);
    if (!text)
        return -EINVAL;
    long r = tokenizer_encode_masked(tok, text, strlen(text), chat_encode_flags(t, tok), spans,
                                     n_spans, out, cap);
    if (r < 0)
        snprintf(err, errlen, "the prompt cannot be encoded");
    free(spans);
    free(text);
    return r;
}

char *chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                  bool add_generation_prompt, char *err, size_t errlen)
{
    return chat_render_spans(t, msgs, n, add_generation_prompt, NULL, NULL, err, errlen);
}

char *chat_render_spans(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                        bool add_generation_prompt, struct tokenizer_span **spans,
                        size_t *n_spans, char *err, size_t errlen)
{
    struct sb b = {0};
    struct chat_msg *m = NULL;

    if (n) {
        /* a NULL content renders as empty; roles are checked before anything is written */
        if (!(m = calloc(n, sizeof(*m)))) {
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        for (size_t i = 0; i < n; i++) {
            if (parse_role(msgs[i].role) < 0) {
                snprintf(err, errlen, "message %zu: unknown role '%.64s' (want system, developer, "
                                      "user, assistant or tool)",
                         i, msgs[i].role ? msgs[i].role : "(null)");
                free(m);
                return NULL;
            }
            /* developer is the system role of the families, which have no other */
            m[i].role = parse_role(msgs[i].role) == ROLE_SYSTEM ? "system" : msgs[i].role;
            m[i].content = msgs[i].content ? msgs[i].content : "";
        }
    }
    sb_put(&b, ""); /* an empty conversation still gives a string */
    switch (t->family) {
    case CHAT_FAMILY_CHATML:
        render_headed(&b, t, &headed_chatml, m, n, add_generation_prompt);
        break;
    case CHAT_FAMILY_LLAMA2: render_llama2(&b, t, m, n); break;
    case CHAT_FAMILY_LLAMA3:
        render_headed(&b, t, &headed_llama3, m, n, add_generation_prompt);
        break;
    case CHAT_FAMILY_MISTRAL: render_folded(&b, t, &mistral_markup, m, n, false); break;
    case CHAT_FAMILY_ZEPHYR:
        render_headed(&b, t, &headed_zephyr, m, n, add_generation_prompt);
        break;
    case CHAT_FAMILY_PHI3:
        render_headed(&b, t, &headed_phi3, m, n, add_generation_prompt);
        break;
    case CHAT_FAMILY_GEMMA:
        render_folded(&b, t, &gemma_markup, m, n, add_generation_prompt);
        break;
    default: render_fallback(&b, m, n, add_generation_prompt); break;
    }
    free(m);
    if (b.oom) {
        free(b.p);
        free(b.spans);
        snprintf(err, errlen, "out of memory rendering the prompt");
        return NULL;
    }
    if (spans) {
        *spans = b.spans;
        *n_spans = b.n_spans;
    } else {
        free(b.spans);
    }
    return b.p;
}
