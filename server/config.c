/* Command-line flags of the front: a table of flags (name, kind, field, default, help) drives
 * parsing, the defaults and --help alike. Does not validate the model itself. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model_info.h"

enum opt_kind { OPT_STR, OPT_U32, OPT_U64, OPT_BOOL, OPT_LEVEL, OPT_STRS };

struct opt {
    const char *name; /* without the leading "--" */
    enum opt_kind kind;
    size_t off;       /* of the field in struct kiln_config */
    uint64_t min, max;
    const char *defval; /* shown in --help; the real default is config_init's */
    const char *help;
};

#define F(field) offsetof(struct kiln_config, field)

static const struct opt opts[] = {
    {"model", OPT_STR, F(model), 0, 0, "(required)",
     "mock, a GGUF model file, or hf:OWNER/REPO[:QUANT] (downloaded from Hugging Face once, "
     "then served from the cache)"},
    {"models-dir", OPT_STR, F(models_dir), 0, 0, "($XDG_CACHE_HOME/kiln/models)",
     "where hf: models are downloaded and cached (~/.cache/kiln/models without XDG)"},
    {"host", OPT_STR, F(host), 0, 0, "127.0.0.1", "address to listen on"},
    {"port", OPT_U32, F(port), 0, 65535, "8080", "TCP port (0: any free port)"},
    {"workers", OPT_U32, F(workers), 1, CONFIG_MAX_WORKERS, "1",
     "worker processes (at most 64: dispatch keeps one bit per worker)"},
    {"max-sequences", OPT_U32, F(max_sequences), 1, 4096, "8",
     "sequences each worker runs at once (its slots)"},
    {"max-waiting", OPT_U32, F(max_waiting), 0, 1000000, "256",
     "requests waiting for a slot before new ones get 503"},
    {"max-prefill-tokens", OPT_U32, F(max_prefill_tokens), 1, UINT32_MAX, "512",
     "prompt tokens a worker prefills between two decode steps"},
    {"ctx", OPT_U32, F(ctx), 0, UINT32_MAX, "0",
     "context length in tokens (0: the model's context_length, capped so every worker's "
     "max-sequences x ctx of F16 KV cache fits a quarter of RAM, at most 8 GiB; the mock's "
     "is 4096)"},
    {"kv-cache-tokens", OPT_U32, F(kv_cache_tokens), 0, UINT32_MAX, "0",
     "positions of each worker's paged KV cache, shared by its sequences and kept for "
     "prompt reuse (0: max-sequences x ctx, the same memory as slots of ctx each)"},
    {"kv-cache-mib", OPT_U32, F(kv_cache_mib), 0, UINT32_MAX, "0",
     "each worker's paged KV cache in MiB instead (positions: MiB / the model's F16 K and V "
     "bytes per position); 0: by kv-cache-tokens; not both"},
    {"chat-memo-entries", OPT_U32, F(chat_memo_entries), 0, 1000000, "256",
     "chat answers remembered with their generated ids, so the next turn of a chat reuses "
     "the KV cache of the answer (least recently used go first; at most 64 MiB per model; "
     "0: none, an answer re-sent as text is tokenized again)"},
    {"threads", OPT_U32, F(threads), 0, 1024, "0",
     "threads per worker (0: the online cores divided among the workers, at least 1)"},
    {"max-body-bytes", OPT_U64, F(max_body_bytes), 1, UINT64_C(1) << 40, "1048576",
     "largest request body accepted (413 above)"},
    {"mock-reply", OPT_STR, F(mock_reply), 0, 0, "(worker default)",
     "the mock model's reply text"},
    {"mock-tool-reply", OPT_STR, F(mock_tool_reply), 0, 0, "(the reply)",
     "the mock model's reply to a prompt holding a tool result (<tool_response>)"},
    {"mock-delay-ms", OPT_U32, F(mock_delay_ms), 0, 3600000, "0",
     "the mock model's delay per token"},
    {"mock-load-ms", OPT_U32, F(mock_load_ms), 0, 3600000, "0",
     "the mock model's simulated load time (tests)"},
    {"mock-faults", OPT_BOOL, F(mock_faults), 0, 0, "off",
     "let prompts inject faults into the mock (tests only)"},
    {"chat-template", OPT_STR, F(chat_template), 0, 0, "(from the model)",
     "render chats with a built-in family instead of the model's Jinja template: fallback, "
     "chatml, llama2, llama3, mistral, zephyr, phi3, gemma"},
    {"chat-template-file", OPT_STR, F(chat_template_file), 0, 0, "(none)",
     "render chats with the Jinja chat template in this file instead of the model's"},
    {"tool-call-format", OPT_STR, F(tool_call_format), 0, 0, "(from the template)",
     "the markup the model writes tool calls in: hermes, llama3, mistral, granite, "
     "deepseek-r1, functionary, any (every one but functionary's) or none"},
    {"log-level", OPT_LEVEL, F(log_level), 0, 0, "info", "debug, info, warn or error"},
    {"log-format", OPT_STR, F(log_format), 0, 0, "text",
     "text, or json: one JSON object a line (time, pid, role, level, msg), the workers' too"},
    {"access-log", OPT_STR, F(access_log), 0, 0, "stderr",
     "where the access log (a line per request, in the log format) goes: stderr, off, or a "
     "file (appended; opened again on SIGHUP, for logrotate)"},
    {"watchdog-ms", OPT_U32, F(watchdog_ms), 0, 86400000, "10000",
     "kill a worker, busy or idle, that makes no progress for this long (0: never)"},
    {"drain-ms", OPT_U32, F(drain_ms), 0, 86400000, "30000",
     "on SIGTERM/SIGINT, how long running requests may finish before they are cancelled"},
    {"restart-backoff-ms", OPT_U32, F(restart_backoff_ms), 1, 10000, "100",
     "first delay before a dead worker is restarted; doubles per death in a row, up to 10 s"},
    {"api-key", OPT_STRS, F(api_keys), 0, 0, "(none)",
     "an API key clients must send as Bearer (repeatable; also KILN_API_KEYS=k1,k2)"},
    {"api-key-file", OPT_STR, F(api_key_file), 0, 0, "(none)", "a file of API keys, one a line"},
    {"metrics-key", OPT_STR, F(metrics_key), 0, 0, "(open)", "the Bearer key /metrics needs"},
    {"rate-limit", OPT_U32, F(rate_limit), 0, 1000000, "0",
     "requests per second per API key (or client address); 0: off; 429 above"},
    {"rate-burst", OPT_U32, F(rate_burst), 0, 1000000, "0",
     "requests a client may make at once above its rate (0: the rate, at least 1)"},
    {"max-concurrent-requests", OPT_U32, F(max_concurrent), 0, 1000000, "0",
     "generation requests admitted at once, running or waiting (0: no limit); 429 above"},
    {"request-timeout-ms", OPT_U32, F(request_timeout_ms), 0, UINT32_MAX, "0",
     "a generation not finished in time is cancelled: 504, or an error event in a stream"},
    {"max-prompt-bytes", OPT_U64, F(max_prompt_bytes), 1, UINT64_C(1) << 40, "1048576",
     "longest prompt (or rendered messages) in bytes, checked before tokenizing (413)"},
    {"max-header-bytes", OPT_U32, F(max_header_bytes), 256, 1u << 24, "16384",
     "the request line and headers together (431 above)"},
    {"max-client-buffer-bytes", OPT_U64, F(max_client_buffer), 4096, UINT64_C(1) << 32,
     "262144",
     "unsent output a connection may hold; above it its streams pause on the worker until "
     "the client reads"},
    {"client-timeout-ms", OPT_U32, F(client_timeout_ms), 1, UINT32_MAX, "30000",
     "a paused stream whose client reads nothing this long is dropped and its jobs cancelled"},
    {"max-connections", OPT_U32, F(max_connections), 0, 1000000, "0",
     "client connections open at once; at the limit new ones wait in the kernel's backlog "
     "(0: the fd limit less 8 per worker and 32 for the front)"},
    {"header-timeout-ms", OPT_U32, F(header_timeout_ms), 1, UINT32_MAX, "10000",
     "the request line and headers must come within this (408 and close)"},
    {"body-timeout-ms", OPT_U32, F(body_timeout_ms), 1, UINT32_MAX, "30000",
     "the body must come within this once the headers did (408 and close)"},
    {"keepalive-timeout-ms", OPT_U32, F(keepalive_timeout_ms), 1, UINT32_MAX, "5000",
     "an idle keep-alive connection is closed after this"},
    {"tls-cert", OPT_STR, F(tls_cert), 0, 0, "(plain HTTP)",
     "serve HTTPS (TLS 1.2 and 1.3) with this PEM certificate chain, leaf first; read again "
     "on SIGHUP"},
    {"tls-key", OPT_STR, F(tls_key), 0, 0, "(none)",
     "the PEM private key of --tls-cert; read again on SIGHUP"},
    {"no-webui", OPT_BOOL, F(no_webui), 0, 0, "off", "do not serve the chat page at /"},
    {"webui-dir", OPT_STR, F(webui_dir), 0, 0, "(embedded)",
     "serve the chat page's files from this folder first (development)"},
    {"config", OPT_STR, F(config_file), 0, 0, "(none)",
     "read flags from this file first: one 'key = value' a line (the flag's name without "
     "dashes); the command line wins; SIGHUP reads it again"},
    {"help", OPT_BOOL, F(help), 0, 0, "", "print this help and exit"},
};

#define N_OPTS (sizeof(opts) / sizeof(opts[0]))

int config_log_level(const char *s)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    if (*s == '\0' || *s == '-' || *s == '+')
        return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

static const struct opt *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
            return &opts[i];
    return NULL;
}

static int set_opt(struct kiln_config *c, const struct opt *o, const char *val, char *err,
                   size_t errlen)
{
    char *field = (char *)c + o->off;
    uint64_t v;
    int lvl;

    switch (o->kind) {
    case OPT_STR:
        memcpy(field, &val, sizeof(val));
        return 0;
    case OPT_U32:
    case OPT_U64:
        if (parse_u64(val, o->min, o->max, &v) < 0) {
            snprintf(err, errlen, "--%s: '%s' is not an integer in [%llu, %llu]", o->name, val,
                     (unsigned long long)o->min, (unsigned long long)o->max);
            return -EINVAL;
        }
        if (o->kind == OPT_U32) {
            uint32_t v32 = (uint32_t)v;
            memcpy(field, &v32, sizeof(v32));
        } else {
            memcpy(field, &v, sizeof(v));
        }
        return 0;
    case OPT_LEVEL:
        if ((lvl = config_log_level(val)) < 0) {
            snprintf(err, errlen, "--%s: '%s' is not debug, info, warn or error", o->name, val);
            return -EINVAL;
        }
        {
            enum log_level l = (enum log_level)lvl;
            memcpy(field, &l, sizeof(l));
        }
        return 0;
    case OPT_STRS: {
        struct config_strs *l = (struct config_strs *)(void *)field;
        if (l->n >= CONFIG_MAX_REPEAT) {
            snprintf(err, errlen, "--%s: more than %d given", o->name, CONFIG_MAX_REPEAT);
            return -EINVAL;
        }
        l->v[l->n++] = val;
        return 0;
    }
    case OPT_BOOL:
        break;
    }
    return -EINVAL;
}

/* The defaults are the table's: every default shown in --help that is a value (not a
 * "(...)" note) is parsed into its field, so the two cannot disagree. */
void config_init(struct kiln_config *c)
{
    char err[160];
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < N_OPTS; i++) {
        const struct opt *o = &opts[i];
        if (o->kind == OPT_BOOL || o->kind == OPT_STRS || !o->defval[0] || o->defval[0] == '(')
            continue;
        if (set_opt(c, o, o->defval, err, sizeof(err)) < 0)
            abort(); /* a table row whose default breaks its own range */
    }
}

uint32_t config_max_connections(const struct kiln_config *c, uint64_t fd_limit)
{
    uint64_t reserved = (uint64_t)c->workers * CONFIG_FDS_PER_WORKER + CONFIG_FDS_RESERVED;
    if (c->max_connections)
        return c->max_connections;
    if (fd_limit <= reserved + 1)
        return 1;
    return fd_limit - reserved > 1000000 ? 1000000 : (uint32_t)(fd_limit - reserved);
}

static int parse_bool(const char *s)
{
    static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return 1;
        if (strcasecmp(s, no[i]) == 0)
            return 0;
    }
    return -1;
}

int config_set(struct kiln_config *c, const char *key, const char *val, char *err,
               size_t errlen)
{
    char name[64];
    size_t len = strlen(key);
    if (len >= sizeof(name)) {
        snprintf(err, errlen, "unknown key '%.40s...'", key);
        return -ENOENT;
    }
    for (size_t i = 0; i <= len; i++)
        name[i] = key[i] == '_' ? '-' : key[i];
    const struct opt *o = find_opt(name, len);
    if (!o || strcmp(o->name, "help") == 0 || strcmp(o->name, "config") == 0) {
        snprintf(err, errlen, "unknown key '%s'", key);
        return -ENOENT;
    }
    if (o->kind == OPT_BOOL) {
        int b = parse_bool(val);
        if (b < 0) {
            snprintf(err, errlen, "%s: '%s' is not true or false", o->name, val);
            return -EINVAL;
        }
        bool t = b;
        memcpy((char *)c + o->off, &t, sizeof(t));
        return 0;
    }
    return set_opt(c, o, val, err, errlen);
}

void config_free(struct kiln_config *c)
{
    free(c->config_text);
    c->config_text = NULL;
}

/* The value of the last --config in argv, or NULL. */
static const char *find_config_flag(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
    }
    return path;
}

int config_parse(struct kiln_config *c, int argc, char **argv, char *err, size_t errlen)
{
    const char *cfile = find_config_flag(argc, argv);
    if (cfile) { /* the file first, so that the command line wins */
        int rc = config_file_load(c, cfile, err, errlen);
        if (rc < 0)
            return rc;
        c->config_file = cfile;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument '%s'", a);
            return -EINVAL;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const struct opt *o = find_opt(a, len);
        if (!o) {
            snprintf(err, errlen, "unknown flag '%s'", argv[i]);
            return -EINVAL;
        }
        if (o->kind == OPT_BOOL) {
            if (eq) {
                snprintf(err, errlen, "--%s takes no value", o->name);
                return -EINVAL;
            }
            bool t = true;
            memcpy((char *)c + o->off, &t, sizeof(t));
            if (c->help)
                return 0;
            continue;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s needs a value", o->name);
                return -EINVAL;
            }
            val = argv[++i];
        }
        int rc = set_opt(c, o, val, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (!c->model || !*c->model) {
        snprintf(err, errlen, "--model is required");
        return -EINVAL;
    }
    if (c->kv_cache_tokens && c->kv_cache_mib) {
        snprintf(err, errlen, "--kv-cache-tokens and --kv-cache-mib: give one of them");
        return -EINVAL;
    }
    if (strcmp(c->log_format, "text") != 0 && strcmp(c->log_format, "json") != 0) {
        snprintf(err, errlen, "--log-format: '%s' is not text or json", c->log_format);
        return -EINVAL;
    }
    if (!*c->host) {
        snprintf(err, errlen, "--host must not be empty");
        return -EINVAL;
    }
    if (!c->threads)
        c->threads = model_info_default_threads(c->workers);
    return 0;
}

bool config_flag_doc(size_t i, struct config_flag_doc *d)
{
    const struct opt *o;
    if (i >= N_OPTS)
        return false;
    o = &opts[i];
    d->name = o->name;
    d->arg = o->kind == OPT_BOOL    ? ""
             : o->kind == OPT_LEVEL ? "LEVEL"
             : o->kind == OPT_U32 || o->kind == OPT_U64 ? "N"
                                                        : "TEXT";
    d->defval = o->defval;
    d->help = o->help;
    return true;
}

void config_usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s --model mock|FILE.gguf|hf:OWNER/REPO[:QUANT] [flags]\n"
            "       %s pull hf:OWNER/REPO[:QUANT] [--models-dir DIR]   (download only)\n\n"
            "flags (default in brackets):\n",
            prog, prog);
    struct config_flag_doc d;
    for (size_t i = 0; config_flag_doc(i, &d); i++) {
        char left[64];
        snprintf(left, sizeof(left), "--%s%s%s", d.name, d.arg[0] ? " " : "", d.arg);
        if (d.defval[0])
            fprintf(f, "  %-26s %s [%s]\n", left, d.help, d.defval);
        else
            fprintf(f, "  %-26s %s\n", left, d.help);
    }
}
