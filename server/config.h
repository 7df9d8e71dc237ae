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

/* The most --workers: a dispatch pass marks the workers it skips in a 64-bit mask. */
#define CONFIG_MAX_WORKERS 64

/* A flag that may be given several times (--api-key). */
#define CONFIG_MAX_REPEAT 64
struct config_strs {
    const char *v[CONFIG_MAX_REPEAT];
    uint32_t n;
};

struct kiln_config {
    const char *model;          /* "mock", a GGUF path or hf:OWNER/REPO[:QUANT]; required */
    const char *models_dir;     /* where hf: models are cached; NULL: the XDG cache */
    const char *host;
    uint32_t port;              /* 0: an ephemeral port */
    uint32_t workers;
    uint32_t max_sequences;     /* per worker */
    uint32_t max_waiting;
    uint32_t max_prefill_tokens;
    uint32_t ctx;               /* 0: the model's own */
    uint32_t kv_cache_tokens;   /* per worker; 0: max_sequences x ctx */
    uint32_t kv_cache_mib;      /* per worker, instead of kv_cache_tokens; 0: not given */
    uint32_t chat_memo_entries; /* chat generations remembered for reuse; 0: none */
    uint32_t threads;           /* 0: the worker's default */
    uint64_t max_body_bytes;
    const char *mock_reply;     /* NULL: the worker's default */
    const char *mock_tool_reply; /* NULL: mock_reply */
    uint32_t mock_delay_ms;
    uint32_t mock_load_ms;
    bool mock_faults;
    uint32_t watchdog_ms;       /* a worker without progress this long is killed; 0: off */
    uint32_t drain_ms;          /* on SIGTERM, running requests get this long to finish */
    uint32_t restart_backoff_ms; /* first respawn delay; doubles per death in a row */
    const char *chat_template;  /* a family name; NULL: the model's own template */
    const char *chat_template_file; /* a Jinja template file; NULL: none */
    const char *tool_call_format; /* NULL: detect from the model's template */
    enum log_level log_level;
    const char *log_format;     /* "text" or "json" */
    const char *access_log;     /* "stderr", "off" or a file path */
    /* the API's keys and limits */
    struct config_strs api_keys;   /* --api-key, repeatable */
    const char *api_key_file;      /* NULL: none */
    const char *metrics_key;       /* NULL: /metrics is open */
    uint32_t rate_limit;           /* requests per second per client; 0: off */
    uint32_t rate_burst;           /* 0: as rate_limit (at least 1) */
    uint32_t max_concurrent;       /* generation requests admitted at once; 0: no limit */
    uint32_t request_timeout_ms;   /* 0: none */
    uint64_t max_prompt_bytes;     /* longest prompt text (or messages) before tokenizing */
    uint32_t max_header_bytes;     /* the request line and headers together */
    /* abusive clients */
    uint64_t max_client_buffer;    /* unsent output per connection before its streams pause */
    uint32_t client_timeout_ms;    /* a paused stream whose client reads nothing this long */
    uint32_t max_connections;      /* 0: derived from the fd limit (config_max_connections) */
    uint32_t header_timeout_ms;    /* request line and headers */
    uint32_t body_timeout_ms;      /* the body, once the headers came */
    uint32_t keepalive_timeout_ms; /* an idle connection between requests */
    /* the chat page at / (webui.c) */
    bool no_webui;
    const char *webui_dir;         /* NULL: only the embedded files */
    const char *tls_cert;          /* PEM chain: serve HTTPS (with tls_key); NULL: plain HTTP */
    const char *tls_key;           /* PEM private key of tls_cert */
    const char *config_file;       /* --config: key = value lines read before the flags */
    char *config_text;             /* owned: the file's text, which its strings point into */
    bool help;                  /* --help was given */
};

/* Fill c with every default (the flag table's). */
void config_init(struct kiln_config *c);

/* Parse argv into c (already config_init'd). Strings point into argv. Returns 0, or -EINVAL
 * with a one-line message in err (an unknown flag, a missing or bad value, no --model). With
 * --help, sets c->help and returns 0 without checking the rest. */
int config_parse(struct kiln_config *c, int argc, char **argv, char *err, size_t errlen);

/* Set the flag named key (its name without the dashes; '_' may stand for '-') to val, as
 * if given on the command line; a flag without a value takes true/false (yes/no, on/off,
 * 1/0). Strings are not copied. Returns 0, or -ENOENT for an unknown key and -EINVAL for a
 * bad value, with a message in err. */
int config_set(struct kiln_config *c, const char *key, const char *val, char *err,
               size_t errlen);

/* Read the --config file path into c: one "key = value" a line, '#' starts a comment, blank
 * lines ignored, a value may be quoted ("..." or '...'). Keys repeat only where the flag
 * does. Returns 0 or -errno with "FILE:LINE: message" in err (config_file.c). */
int config_file_load(struct kiln_config *c, const char *path, char *err, size_t errlen);

/* Free what config_parse() allocated (the config file's text). */
void config_free(struct kiln_config *c);

/* Print the usage: every flag with its default. */
void config_usage(FILE *f, const char *prog);

/* One row of the flag table, as --help and README's flag table show it. */
struct config_flag_doc {
    const char *name;   /* without the leading "--" */
    const char *arg;    /* "N", "TEXT", "LEVEL", or "" for a flag without a value */
    const char *defval; /* the default ("(...)": a note, not a value; "" for --help) */
    const char *help;
};

/* The i-th row of the flag table into d. Returns false past the last. */
bool config_flag_doc(size_t i, struct config_flag_doc *d);

/* fds kept for the workers (each: a region memfd, eventfds, a stderr pipe) and their
 * restarts, and for the front's own files, below the fd limit. */
#define CONFIG_FDS_PER_WORKER 8
#define CONFIG_FDS_RESERVED 32

/* The --max-connections to use: c's, or when 0 the fd limit less the fds workers, restarts
 * and the front need (at least 1). */
uint32_t config_max_connections(const struct kiln_config *c, uint64_t fd_limit);

/* "debug", "info", "warn", "error" -> level; -1 for anything else. */
int config_log_level(const char *s);

#endif
