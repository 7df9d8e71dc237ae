/* The chat route's memory of recent generations, so that a conversation's next turn feeds
 * the model the ids it generated for its previous answer instead of the answer's text
 * tokenized again (which often gives other ids, so the worker's KV cache of the answer would
 * go unused). An entry is a prompt's text with the ids sent for it, then the generated ids
 * with the text each one's piece adds; it stands for the text its ids spell, whatever the
 * client was sent (a stop string's cut, tool calls): a next prompt that starts with part of
 * that text finds it. Where the rest of the prompt can be tokenized on its own is the
 * tokenizer's to say (tokenizer_encode_masked_from()); this module only remembers and finds.
 * Bounded: at most max_entries entries and max_bytes of text and ids, the least recently
 * used going first. Not thread-safe (the front's loop owns it). */
#ifndef GEN_MEMO_H
#define GEN_MEMO_H

#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct tokenizer_span;
struct gen_memo;

/* A chat prompt as it is tokenized: its text, the flags and the plain spans (the client's
 * text, where special-token texts are ordinary characters) of tokenizer_encode_masked().
 * Two prompts of one text can have other ids when their spans differ (a message whose
 * content holds a template's markers renders as the same text as those messages), so an
 * entry is found only by a prompt with its flags and, over the entry's prompt, its spans. */
struct gen_memo_text {
    const char *text;
    size_t len;
    unsigned flags;
    const struct tokenizer_span *plain; /* sorted, disjoint; NULL when n_plain is 0 */
    size_t n_plain;
};

/* The bytes one model's memo holds at most (the front's; entries: --chat-memo-entries). */
#define GEN_MEMO_MAX_BYTES ((size_t)64 << 20)

/* A point of an entry: text[0, bytes) is spelled by ids[0, n_ids). */
struct gen_memo_cut {
    size_t bytes;
    const uint32_t *ids;
    size_t n_ids;
};

struct gen_memo_stats {
    uint32_t entries;
    size_t bytes;
    uint64_t evictions;
};

/* NULL when out of memory or max_entries is 0 (no memory: nothing is remembered). */
struct gen_memo *gen_memo_create(uint32_t max_entries, size_t max_bytes);
void gen_memo_destroy(struct gen_memo *m);

/* Remember the prompt p, which the n_prompt ids prompt were sent for, followed by the
 * generated ids gen. The generated ids are kept up to the first whose piece
 * is empty (a control token: its text, if the client re-sent it, would be ordinary
 * characters) or cannot be read. Returns 0 (also when nothing is kept: an entry larger
 * than max_bytes) or -ENOMEM. m may be NULL (nothing is done). */
int gen_memo_add(struct gen_memo *m, const struct tokenizer *tok, const struct gen_memo_text *p,
                 const uint32_t *prompt, size_t n_prompt, const uint32_t *gen, size_t n_gen);

/* The points where the prompt t could take over a remembered entry's ids: of the entries
 * whose whole prompt t starts with, with t's flags and t's plain spans over it, the one whose
 * text shares the longest prefix with t's, the points within that shared prefix, longest
 * first, at most max of them, the last always the entry's prompt alone (a point the rest
 * cannot be tokenized from, mid-word, still leaves that one to try; the entry becomes the
 * most recently used). A point past the
 * entry's prompt must lie in the plain span of t that the answer starts in (the answer's ids
 * hold no special token but user-defined ones, which plain text matches too; elsewhere t's
 * text could parse as special tokens the answer's ids spell as ordinary characters).
 * Returns how many; the pointers are valid until the next add or destroy. m may be NULL
 * (0). */
size_t gen_memo_find(struct gen_memo *m, const struct gen_memo_text *t, struct gen_memo_cut *out,
                     size_t max);

void gen_memo_stats(const struct gen_memo *m, struct gen_memo_stats *s);

#endif
