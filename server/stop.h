/* Stop strings over streamed text: text that could be the start of a stop string is held
 * back until the next text decides it; on a match the text before it is released and the
 * stream ends. Works on bytes, but never splits a UTF-8 character between what it releases
 * and what it holds. No allocation. */
#ifndef STOP_H
#define STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STOP_MAX     4   /* stop strings per request (OpenAI's limit) */
#define STOP_MAX_LEN 256 /* bytes per stop string */
/* The most stop_push() can hold back: a stop string's proper prefix, plus an incomplete
 * character's bytes. */
#define STOP_HOLD_MAX (STOP_MAX_LEN - 1 + 3)

struct stop {
    uint32_t n;
    uint32_t len[STOP_MAX];
    char str[STOP_MAX][STOP_MAX_LEN];
    uint32_t n_held;
    char held[STOP_HOLD_MAX];
    bool matched; /* a stop string matched: everything after it is dropped */
};

void stop_init(struct stop *s);

/* Add a stop string of len bytes (copied). Returns 0, -EINVAL for an empty one, -E2BIG when
 * longer than STOP_MAX_LEN, or -ENOSPC past STOP_MAX. Before the first stop_push(). */
int stop_add(struct stop *s, const char *str, size_t len);

/* Feed len bytes of text. Writes the text that is now safe to send to out, which must hold
 * len + STOP_HOLD_MAX bytes, and returns its length, or -ENOSPC when cap is smaller. On a
 * match, out gets the text before the earliest match and *matched is set; from then on every
 * push returns 0. *matched is also set on pushes after a match. */
int stop_push(struct stop *s, const char *text, size_t len, char *out, size_t cap,
              bool *matched);

/* At the end of the stream: the text still held (none after a match). out holds
 * STOP_HOLD_MAX bytes. Returns its length. */
size_t stop_finish(struct stop *s, char *out);

#endif
