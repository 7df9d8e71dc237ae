/* Private to the tokenizer files: the vocabulary, its hash maps, and the entry points of the
 * SentencePiece (tokenizer_spm.c), byte-level BPE (tokenizer_bpe.c) and pre-tokenizer
 * (tokenizer_pre.c) parts. Not a contract for anyone else: include tokenizer.h. */
#ifndef TOKENIZER_IMPL_H
#define TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "utf8.h" /* utf8_char_len(): 0 means the caller takes the byte alone */

#define TOK_NONE UINT32_MAX

/* token_type values of tokenizer.ggml.token_type (llama.cpp's numbering). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

enum tokenizer_kind {
    TOKENIZER_KIND_BYTES,
    TOKENIZER_KIND_SPM,
    TOKENIZER_KIND_BPE,
};

/* Open-addressing map from token text to id; slots hold ids (TOK_NONE = empty), the text is
 * the vocabulary's own. */
struct tok_text_map {
    uint32_t *slots;
    uint32_t mask;
};

/* Open-addressing map from a pair of token ids to the merge's rank and result. */
struct tok_pair_map {
    uint64_t *keys; /* (left << 32 | right) + 1; 0 = empty */
    uint32_t *rank;
    uint32_t *result;
    uint32_t mask;
};

struct tok_pre; /* compiled pre-tokenizer regexes (tokenizer_pre.c) */

/* A byte trie over the special tokens' texts, so the splitter finds the longest special text
 * at a position in one walk, however many specials share a first byte (Gemma's thousands of
 * <unusedN> and HTML tokens). Children are a singly linked list of siblings. */
struct tok_trie_node {
    uint32_t child;   /* first child, 0: none */
    uint32_t sibling; /* next sibling, 0: none */
    uint32_t special; /* 1 + index in specials of the token ending here, 0: none */
    unsigned char byte;
};

/* How a special token treats the whitespace around it in the input (llama.cpp's token
 * attributes): LSTRIP eats the whitespace before it, RSTRIP the whitespace after it. */
#define TOK_STRIP_L 1u
#define TOK_STRIP_R 2u

/* A special token for the input splitter: texts are matched longest first. always: a
 * user-defined token, matched in raw text even when special tokens are not parsed (as the
 * Hugging Face tokenizers and llama.cpp do); control and unknown tokens are matched only with
 * TOKENIZER_PARSE_SPECIAL. */
struct tok_special {
    uint32_t id;
    uint32_t len;
    uint8_t strip; /* TOK_STRIP_* */
    bool always;
};

struct tokenizer {
    enum tokenizer_kind kind;
    uint32_t n_vocab;

    /* The vocabulary, copied out of the GGUF so the tokenizer outlives the file. */
    char *text_pool;
    uint64_t *text_off; /* n_vocab + 1 offsets into text_pool */
    float *scores;      /* SPM only */
    uint8_t *types;     /* enum tok_type */
    uint32_t max_token_len;
    struct tok_text_map by_text;

    /* SPM */
    uint32_t byte_ids[256]; /* <0xNN> tokens, TOK_NONE when absent */
    bool add_space_prefix;
    bool spm_word_split; /* no token has U+2581 after another character (tok_spm_prepare) */

    /* BPE */
    struct tok_pair_map merges;
    struct tok_pre *pre;
    bool ignore_merges; /* a word that is a token is that token (tok_pre_ignores_merges) */
    uint32_t char_ids[256]; /* the token of each byte's GPT-2 unicode char */

    /* Special tokens, grouped by first byte; each group longest first. */
    struct tok_special *specials;
    struct tok_trie_node *trie; /* the specials' texts; node 0 is the root */
    uint32_t trie_root[256];    /* the root's child for each first byte, 0: none */
    size_t n_always;            /* how many specials are matched without PARSE_SPECIAL */

    long bos, eos, unk;
    bool add_bos, add_eos;
    uint32_t *eog;
    size_t n_eog;
};

/* Growable output of an encode: counts every token, stores the first cap. */
struct tok_out {
    uint32_t *ids;
    size_t cap;
    size_t n;
};

static inline void tok_out_push(struct tok_out *o, uint32_t id)
{
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

static inline const char *tok_text(const struct tokenizer *t, uint32_t id, uint32_t *len)
{
    *len = (uint32_t)(t->text_off[id + 1] - t->text_off[id]);
    return t->text_pool + t->text_off[id];
}


/* Text map: build over the whole vocabulary (later ids win on equal texts, as llama.cpp). */
int tok_text_map_build(struct tok_text_map *m, const struct tokenizer *t);
void tok_text_map_free(struct tok_text_map *m);
uint32_t tok_text_map_get(const struct tok_text_map *m, const struct tokenizer *t, const char *s,
                          size_t len);

/* Pair map: n entries at most; put keeps the first (lowest) rank of a duplicate pair. */
int tok_pair_map_init(struct tok_pair_map *m, size_t n);
void tok_pair_map_free(struct tok_pair_map *m);
void tok_pair_map_put(struct tok_pair_map *m, uint32_t left, uint32_t right, uint32_t rank,
                      uint32_t result);
bool tok_pair_map_get(const struct tok_pair_map *m, uint32_t left, uint32_t right,
                      uint32_t *rank, uint32_t *result);

/* Whether SentencePiece text can be cut before each word's U+2581: true when no mergeable
 * token holds U+2581 after another character, so no merge crosses such a cut. */
void tok_spm_prepare(struct tokenizer *t);

/* SentencePiece BPE over scores: encode len bytes (no special texts inside), prefixing a
 * space when prefix_space. Returns 0 or -ENOMEM. */
int tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, bool prefix_space,
                   struct tok_out *o);

/* Byte-level BPE: load the merges of a GGUF's tokenizer.ggml.merges strings (via the callback
 * view below), and encode len bytes (no special texts inside). */
struct gguf_kv;
int tok_bpe_load(struct tokenizer *t, const struct gguf_kv *merges, char *err, size_t errlen);
int tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_out *o);
/* The bytes of a byte-level token text (its unicode chars mapped back through GPT-2's
 * table); chars outside the table are copied as they are. Returns the length (writes at most
 * cap). */
size_t tok_bpe_decode_text(const char *s, size_t len, char *buf, size_t cap);

/* Pre-tokenizer of tokenizer.ggml.pre: NULL with a message naming an unknown name. */
struct tok_pre *tok_pre_create(const char *name, char *err, size_t errlen);
void tok_pre_destroy(struct tok_pre *p);
/* Whether words that are whole tokens skip the merges (Llama 3's and Tekken's tokenizers). */
bool tok_pre_ignores_merges(const struct tok_pre *p);
/* Split text into words; calls word(arg, off, len) for each in order, covering every byte.
 * Returns 0, the first non-zero return of word, or -ENOMEM. Invalid UTF-8 bytes become
 * words of their own. */
int tok_pre_split(const struct tok_pre *p, const char *text, size_t len,
                  int (*word)(void *arg, size_t off, size_t len), void *arg);

#endif
