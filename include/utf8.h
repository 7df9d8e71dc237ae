/* UTF-8 well-formedness by the Unicode table of lead and first-continuation byte ranges
 * (no overlongs, surrogates or code points past U+10FFFF): the one rule the tokenizer's
 * splitting and the detokenizer's repair share. */
#ifndef UTF8_H
#define UTF8_H

#include <stddef.h>

/* The number of continuation bytes after lead byte b and the range [*lo, *hi] its first
 * continuation byte must be in (later ones are 0x80..0xBF), or -1 when b cannot start a
 * character. */
int utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi);

/* Length of the UTF-8 character at s (at most n bytes, n >= 1): 1..4 for a well-formed one,
 * 0 for an invalid or truncated sequence. */
size_t utf8_char_len(const unsigned char *s, size_t n);

#endif
