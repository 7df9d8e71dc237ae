/* Text <-> token ids for the front (and the tools): the byte tokenizer of the mock model,
 * and the GGUF tokenizers (SentencePiece-style "llama" and byte-level BPE "gpt2"), read from
 * a file's tokenizer.ggml.* keys. Streaming detokenization is detok.h. */
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf;
struct tokenizer;

/* Flags of tokenizer_encode(). */
#define TOKENIZER_ADD_SPECIAL   1u /* BOS/EOS as the model's add_bos/add_eos keys say */
#define TOKENIZER_PARSE_SPECIAL 2u /* special/control token texts in the input become their ids */
/* Special tokens are those of token_type CONTROL (3), USER_DEFINED (4) or UNKNOWN (2). Each
 * occurrence of their text becomes that one token (the longest text matching at a position
 * wins) and the ordinary text between them is encoded as usual (a SentencePiece space prefix
 * goes before text at the start or after a special token). User-defined tokens (MPT's runs
 * of spaces, Gemma's HTML tags) are matched so always, as llama.cpp and the Hugging Face
 * tokenizers do; control and unknown ones only with TOKENIZER_PARSE_SPECIAL: without it user
 * text "<|im_end|>" is encoded as ordinary characters, so clients cannot forge control
 * tokens. A user-defined token that reads like a turn marker ("<|...|>", an end-of-generation
 * text, the BOS/EOS/EOT/EOM ids) counts as control. Whitespace next to a special token is
 * dropped where the model implies it (llama.cpp's lstrip/rstrip attributes, which GGUF does
 * not carry: a model named Phi-3 drops it after its special tokens but <unk>, <s> and
 * <|endoftext|>). */

/* The mock's tokenizer: token b (0..255) is the byte b, 256 is EOS; no BOS. */
#define TOKENIZER_BYTES_EOS 256u
struct tokenizer *tokenizer_create_bytes(void);

/* The tokenizer a GGUF file describes. Returns NULL with a one-line message in err (an
 * unknown tokenizer.ggml.model or .pre is named). */
struct tokenizer *tokenizer_create_gguf(const struct gguf *g, char *err, size_t errlen);

void tokenizer_destroy(struct tokenizer *t);

uint32_t tokenizer_n_vocab(const struct tokenizer *t);

/* Encode len bytes of UTF-8 text (invalid bytes are kept: byte fallback or byte-level). Returns
 * the number of tokens the text needs (only the first cap are written to out when it is more)
 * or -errno. t is only read: several threads may encode with one tokenizer at once. */
long tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                      uint32_t *out, size_t cap);

/* A byte range [off, off + len) of an input text. */
struct tokenizer_span {
    size_t off, len;
};

/* tokenizer_encode() where, with TOKENIZER_PARSE_SPECIAL, special texts are recognised only
 * outside the n_plain ranges plain (sorted, disjoint; NULL when n_plain is 0): a special text
 * that overlaps one of them is ordinary characters. This is how a chat prompt keeps the
 * template's role markers as control tokens while the messages' content ("<|im_end|>" typed
 * by a user) cannot forge one (chat_render_spans() gives the ranges). The text between two
 * special tokens is still encoded as one run across the ranges' edges, so a prompt whose
 * content holds no special text encodes exactly as tokenizer_encode() would. */
long tokenizer_encode_masked(const struct tokenizer *t, const char *text, size_t len,
                             unsigned flags, const struct tokenizer_span *plain, size_t n_plain,
                             uint32_t *out, size_t cap);

/* The tokens tokenizer_encode_masked() gives for text from byte from on, when from is a
 * point where that encoding starts afresh, so that any ids whose pieces are exactly
 * text[0, from) followed by these stand for the whole text (a chat's next turn puts the
 * model's own ids for its previous answer there, server/gen_memo.h). Such points: 0; the
 * start of a special token the encoding takes as one (no blanks dropped before it); the end
 * of one; any byte of the byte tokenizer; and inside a byte-level BPE run, a token boundary
 * of the run's encoding (its first tokens' pieces are exactly the bytes before the point;
 * the run is encoded once, as the whole text's encoding does). SentencePiece runs have no
 * such point inside (their space prefix and merges span the run). No BOS unless from is 0.
 * Returns the count as tokenizer_encode_masked() does, -ESRCH when from is no such point,
 * or -errno. */
long tokenizer_encode_masked_from(const struct tokenizer *t, const char *text, size_t len,
                                  unsigned flags, const struct tokenizer_span *plain,
                                  size_t n_plain, size_t from, uint32_t *out, size_t cap);

/* The bytes token id stands for in decoded text (byte-fallback and byte-level pieces are
 * raw bytes, possibly part of a UTF-8 character; SentencePiece's U+2581 is a space; control
 * tokens are empty unless render_special (the byte tokenizer's EOS then reads "<eos>");
 * user-defined tokens are their text; the unknown token is U+2585). Returns the length (only cap bytes are written
 * when it is more) or -EINVAL for an id out of range. */
int tokenizer_piece(const struct tokenizer *t, uint32_t id, bool render_special, char *buf,
                    size_t cap);

/* The longest piece tokenizer_piece() can return, in bytes (GGUF allows user-defined tokens
 * of any length). */
size_t tokenizer_piece_max(const struct tokenizer *t);

/* Whether decoding drops the space a SentencePiece tokenizer put before the first word. */
bool tokenizer_strips_leading_space(const struct tokenizer *t);

/* Every id that ends generation, for the worker: the file's eos, eot and eom ids, and the
 * control or user-defined tokens whose text is <|eot_id|>, <|end_of_text|>, <|im_end|>,
 * <|endoftext|>, </s>, <end_of_turn>, <|end|> or <|eom_id|>. Valid while t lives. */
size_t tokenizer_eog_ids(const struct tokenizer *t, const uint32_t **ids);

/* BOS id, or -1 when the model has none. */
long tokenizer_bos_id(const struct tokenizer *t);

/* The id of a special token given its text ("<|im_end|>"), or -1. */
long tokenizer_find_special(const struct tokenizer *t, const char *text);

#endif
