/* Pre-tokenizers of byte-level BPE vocabularies, by tokenizer.ggml.pre: the split regexes
 * the models' tokenizers publish, run with PCRE2 (UTF, UCP, JIT). Several regexes apply in
 * sequence, each splitting every piece the previous one left into its matches and the text
 * between them (as the tokenizers' Split pre-tokenizers with "isolated" behaviour do). */
#include "tokenizer_impl.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRE_MAX_RE 6

/* GPT-2's split, also the one of most byte-level tokenizers that keep the default. */
#define RE_GPT2                                                                                \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* Llama 3's, with the case-insensitive contractions spelled out. */
#define RE_LLAMA3                                                                              \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2's: Llama 3's with single digits. */
#define RE_QWEN2                                                                               \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
/* The o200k split (GPT-4o; Phi-4-mini, Llama 4): case runs of letters with an optional
 * contraction, digits in threes. PCRE2 has the Unicode classes, so it is the published
 * pattern itself. */
#define RE_LETTERS_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LETTERS_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_GPT4O                                                                               \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_LETTERS_UPPER "*" RE_LETTERS_LOWER "+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_LETTERS_UPPER "+" RE_LETTERS_LOWER "*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Mistral's Tekken (Mistral Nemo, Pixtral): as above without contractions, single digits. */
#define RE_TEKKEN                                                                              \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_LETTERS_UPPER "*" RE_LETTERS_LOWER "+|"                      \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_LETTERS_UPPER "+" RE_LETTERS_LOWER "*|"                      \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* The case-insensitive contractions as llama.cpp spells them (PCRE2's (?i) with UCP would
 * also fold characters such as U+017F into them). */
#define RE_CONTR "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* Qwen3.5's: Qwen2's with combining marks kept in words. */
#define RE_QWEN35                                                                              \
    RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"      \
             "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek V3's last stage: ASCII punctuation glued to a Latin word, letter runs with marks. */
#define RE_DEEPSEEK3                                                                           \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|" \
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* BLOOM's and Poro's: anything but blanks and a few punctuation marks. */
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    bool ignore_merges; /* a word that is a whole token is taken as it is */
    const char *re[PRE_MAX_RE];
};

/* The names are those llama.cpp's converter writes (its list of tokenizer hashes) and its
 * loader accepts; each maps to the split its tokenizer.json publishes. Families that use
 * SentencePiece (Llama 2, Mistral 7B, Gemma, Phi-3) have no pre-tokenizer at all. */
static const struct pre_def pre_defs[] = {
    /* llama.cpp's own default, also what a file without tokenizer.ggml.pre gets */
    {"default", false, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"gpt2|gpt-2|phi-2|mpt|olmo|jais|exaone4|trillion|granite-docling|gigachat|"
     "a.x-4.0|mellum|modern-bert",
     false, {RE_GPT2}},
    {"llama-bpe|llama3|llama-v3|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", true,
     {RE_LLAMA3}},
    {"dbrx|smaug-bpe|glm4|chatglm-bpe", false, {RE_LLAMA3}},
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2|hunyuan|kormo|f2llmv2|grok-2|solar-open", false,
     {RE_QWEN2}},
    {"qwen35", false, {RE_QWEN35}},
    {"gpt-4o|llama4|minimax-m2|kanana2|talkie", false, {RE_GPT4O}},
    {"tiny_aya|cohere2moe", false, {"\\d{1,3}(?=(?:\\d{3})*\\b)", RE_GPT4O}},
    {"deepseek-v3|hunyuan-dense|joyai-llm",
     false,
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", RE_DEEPSEEK3}},
    {"seed-coder",
     false,
     {RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|"
               "\\s+(?!\\S)|\\s+"}},
    /* Ling's: its published pattern has possessive quantifiers; llama.cpp runs them greedy */
    {"bailingmoe|bailingmoe2|llada-moe",
     false,
     {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
      " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    {"exaone-moe",
     false,
     {RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    {"minicpm5",
     true,
     {"\\p{N}{1,3}", RE_CONTR "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                             "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {"tekken", true, {RE_TEKKEN}},
    {"poro-chat|bloom|gpt3-finnish", false, {RE_BLOOM}},
    {"viking", false, {RE_BLOOM, "\\p{N}"}},
    {"smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b|mellum2", false,
     {"\\p{N}", RE_GPT2}},
    {"falcon", false, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    /* DeepSeek LLM's letter class is the cased letters (Lu, Ll, Lt) of its Unicode version,
     * spelled out as its tokenizer publishes it. */
    {"deepseek-llm",
     false,
     {"[\\r\\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
      "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
      "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
      "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
      "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
      "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
      "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
      "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}"
      "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
      "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
      "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"
      "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
      "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
      "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}"
      "\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
      "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
      "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}"
      "\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$", RE_CJK, "\\p{N}+"}},
    {"deepseek-coder", false, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}},
};

struct tok_pre {
    size_t n;
    bool ignore_merges;
    pcre2_code *re[PRE_MAX_RE];
};

static bool name_in(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names; *p;) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        p += len + (end != NULL);
    }
    return false;
}

struct tok_pre *tok_pre_create(const char *name, char *err, size_t errlen)
{
    const struct pre_def *def = NULL;
    for (size_t i = 0; i < sizeof(pre_defs) / sizeof(pre_defs[0]); i++)
        if (name_in(pre_defs[i].names, name))
            def = &pre_defs[i];
    if (!def) {
        snprintf(err, errlen, "tokenizer.ggml.pre '%s' is not supported", name);
        return NULL;
    }
    struct tok_pre *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->ignore_merges = def->ignore_merges;
    for (; p->n < PRE_MAX_RE && def->re[p->n]; p->n++) {
        int code;
        PCRE2_SIZE at;
        p->re[p->n] = pcre2_compile((PCRE2_SPTR)def->re[p->n], PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
        if (!p->re[p->n]) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof(msg));
            snprintf(err, errlen, "tokenizer.ggml.pre '%s': regex %zu at %zu: %s", name, p->n,
                     (size_t)at, (const char *)msg);
            tok_pre_destroy(p);
            return NULL;
        }
        (void)pcre2_jit_compile(p->re[p->n], PCRE2_JIT_COMPLETE); /* else interpreted */
    }
    return p;
}

bool tok_pre_ignores_merges(const struct tok_pre *p)
{
    return p->ignore_merges;
}

void tok_pre_destroy(struct tok_pre *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        pcre2_code_free(p->re[i]);
    free(p);
}

struct span {
    size_t off, len;
};

struct spans {
    struct span *v;
    size_t n, cap;
};

/* Where the pieces of one stage go: into the next stage's list, or to the caller. */
struct sink {
    struct spans *next; /* NULL: the last stage */
    int (*word)(void *arg, size_t off, size_t len);
    void *arg;
};

static int sink_put(struct sink *s, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (!s->next)
        return s->word(s->arg, off, len);
    struct spans *l = s->next;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        struct span *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (struct span){off, len};
    return 0;
}

/* Split text[off, off+len) (valid UTF-8) by re into matches and gaps. */
static int split_one(const pcre2_code *re, pcre2_match_data *md, pcre2_match_context *mc,
                     const char *text, size_t off, size_t len, struct sink *s)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + off);
    size_t pos = 0, gap = 0;
    int err;
    while (pos < len) {
        int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return -ENOMEM; /* resource limits: the only failure on valid input */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) { /* empty match: step over one character */
            size_t cl = utf8_char_len(subj + ov[0], len - ov[0]);
            pos = ov[0] + (cl ? cl : 1);
            continue;
        }
        if ((err = sink_put(s, off + gap, ov[0] - gap)) < 0 ||
            (err = sink_put(s, off + ov[0], ov[1] - ov[0])) < 0)
            return err;
        pos = gap = ov[1];
    }
    return sink_put(s, off + gap, len - gap);
}

/* Run the regex cascade over one valid UTF-8 run. */
static int split_run(const struct tok_pre *p, pcre2_match_data *md, pcre2_match_context *mc,
                     const char *text, size_t off, size_t len, struct spans lists[2],
                     int (*word)(void *, size_t, size_t), void *arg)
{
    struct span whole = {off, len};
    const struct span *in = &whole;
    size_t n_in = 1;
    int err;
    for (size_t r = 0; r < p->n; r++) {
        struct sink s = {.next = r + 1 < p->n ? &lists[r & 1] : NULL, .word = word, .arg = arg};
        if (s.next)
            s.next->n = 0;
        for (size_t i = 0; i < n_in; i++)
            if ((err = split_one(p->re[r], md, mc, text, in[i].off, in[i].len, &s)) < 0)
                return err;
        if (s.next) {
            in = s.next->v;
            n_in = s.next->n;
        }
    }
    return 0;
}

int tok_pre_split(const struct tok_pre *p, const char *text, size_t len,
                  int (*word)(void *arg, size_t off, size_t len), void *arg)
{
    struct spans lists[2] = {{0}};
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    /* Long runs of one class (\s+ over a big blank) may need more than the default 32 KiB. */
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    int err = -ENOMEM;
    if (!md || !mc || !js)
        goto out;
    pcre2_jit_stack_assign(mc, NULL, js);

    size_t run = 0, i = 0;
    while (i < len) {
        size_t cl = utf8_char_len((const unsigned char *)text + i, len - i);
        if (cl > 0) {
            i += cl;
            continue;
        }
        /* An invalid byte: what came before is a run, the byte a word of its own. */
        if (i > run && (err = split_run(p, md, mc, text, run, i - run, lists, word, arg)) < 0)
            goto out;
        if ((err = word(arg, i, 1)) < 0)
            goto out;
        run = ++i;
    }
    err = len > run ? split_run(p, md, mc, text, run, len - run, lists, word, arg) : 0;
out:
    free(lists[0].v);
    free(lists[1].v);
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    return err;
}
