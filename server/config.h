/* The front's command line: one table of flags with their defaults and help, parsed into a
 * read-only struct kiln_config that main() passes to every module. New flags (watchdog,
 * drain, API keys, rate limits) are one field and one table row each. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

struct kiln_config {
    const char *model;          /* "mock" or a GGUF path; required */
    const char *host;
    uint32_t port;              /* 0: an ephemeral port */
    uint32_t workers;
    uint32_t max_sequences;     /* per worker */
    uint32_t max_waiting;
    uint32_t max_prefill_tokens;
    uint32_t ctx;               /* 0: the model's own */
    uint32_t threads;           /* 0: the worker's default */
    uint64_t max_body_bytes;
    const char *mock_reply;     /* NULL: the worker's default */
    uint32_t mock_delay_ms;
    bool mock_faults;
    const char *chat_template;  /* NULL: detect from the model */
    enum log_level log_level;
    bool help;                  /* --help was given */
};

/* Fill c with every default. */
void config_init(struct kiln_config *c);

/* Parse argv into c (already config_init'd). Strings point into argv. Returns 0, or -EINVAL
 * with a one-line message in err (an unknown flag, a missing or bad value, no --model). With
 * --help, sets c->help and returns 0 without checking the rest. */
int config_parse(struct kiln_config *c, int argc, char **argv, char *err, size_t errlen);

/* Print the usage: every flag with its default. */
void config_usage(FILE *f, const char *prog);

/* "debug", "info", "warn", "error" -> level; -1 for anything else. */
int config_log_level(const char *s);

#endif
