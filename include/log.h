/* Logging to stderr with a level and the process's role. One line per call. */
#ifndef LOG_H
#define LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_LEVEL_DEBUG, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

/* role: "kiln" or "worker 1"; copied. level: lines below it are dropped. */
void log_init(const char *role, enum log_level level);

/* One JSON object a line ({"time", "pid", "role", "level", "msg"}) instead of text, for
 * journald, Loki or Elastic. log_init() turns it on when $KILN_LOG_FORMAT is "json", which
 * the front sets for --log-format json before its workers start, so theirs match. */
void log_set_json(int on);
/* "debug", "info", "warn", "error"; and back (dflt for NULL or anything else). The front
 * passes its --log-level to its workers as $KILN_LOG_LEVEL. */
const char *log_level_name(enum log_level level);
enum log_level log_level_parse(const char *name, enum log_level dflt);

/* Whether lines are JSON (log_set_json or $KILN_LOG_FORMAT). */
bool log_is_json(void);

/* The time now as the lines have it, "2026-12-02T09:00:00.123Z" (UTC), into out (cap >= 25). */
void log_time_stamp(char *out, size_t cap);

/* Append s to out (at *off, cap bytes in all) as the inside of a JSON string: quotes,
 * backslashes and control characters escaped; stops short of cap - 7 (s is cut there). */
void log_json_escape(char *out, size_t cap, size_t *off, const char *s);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
