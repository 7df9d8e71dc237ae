/* UTF-8 lead-byte table and character length (utf8.h). No decoding to code points: the
 * ranges alone decide well-formedness. */
#include "utf8.h"

int utf8_lead(unsigned char b, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b < 0x80)
        return 0;
    if (b >= 0xC2 && b <= 0xDF)
        return 1;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0)
            *lo = 0xA0; /* no overlong 3-byte form */
        else if (b == 0xED)
            *hi = 0x9F; /* no surrogates */
        return 2;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0)
            *lo = 0x90; /* no overlong 4-byte form */
        else if (b == 0xF4)
            *hi = 0x8F; /* nothing past U+10FFFF */
        return 3;
    }
    return -1;
}

size_t utf8_char_len(const unsigned char *s, size_t n)
{
    unsigned char lo, hi;
    int need = utf8_lead(s[0], &lo, &hi);
    if (need < 0 || (size_t)need + 1 > n)
        return 0;
    for (int k = 1; k <= need; k++) {
        if (s[k] < lo || s[k] > hi)
            return 0;
        lo = 0x80;
        hi = 0xBF;
    }
    return (size_t)need + 1;
}
