/* What the front knows of a model (name, context, tokenizer, chat template), one per model
 * generation: the model kiln started with is generation 1, and each reload to another model
 * file (or a changed file at the same path) loads the next. A request is tokenized with one
 * generation's tokenizer and runs only on that generation's workers, so a reload to a model
 * with another vocabulary never mixes the two. Reference counted: the front's current
 * generation, each worker and each request hold one. */
#ifndef FRONT_MODEL_H
#define FRONT_MODEL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "chat.h"
#include "toolcall.h"

struct kiln_config;
struct tokenizer;
struct gguf;

/* Which file a path named when it was opened: a new file moved into place (another inode)
 * or one rewritten in place (size or time) reads as changed. */
struct front_model_file {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct front_model {
    char name[128];
    uint32_t max_context;
    uint32_t kv_cache_tokens; /* each worker's KV cache: --kv-cache-tokens, or --kv-cache-mib
                               * in positions of this model (0: the worker's default) */
    struct tokenizer *tok;
    struct chat_template tmpl;
    enum toolcall_format tool_format; /* the markup of the model's calls (NONE: unknown) */
    bool thinks;                      /* its template has <think> blocks */
    struct gguf *gguf; /* open while the tokenizer may borrow from it; NULL for the mock */
    /* recent chat generations, so a next turn reuses the answer's ids (gen_memo.h; NULL:
     * --chat-memo-entries 0) */
    struct gen_memo *memo;

    /* generations (front_model.c) */
    uint32_t refs;
    uint32_t gen;                 /* 1, 2, ...: the order the front loaded them in */
    bool closed;                  /* being retired by a reload: no new request binds to it */
    char arg[PATH_MAX];           /* --model as configured ("mock", a path, an hf: reference) */
    char path[PATH_MAX];          /* what the workers load: the file, or "mock" */
    struct front_model_file file; /* path's identity when it was opened (zero for the mock) */
    /* the settings besides the file it was made with: a reload that changes one rolls the
     * workers onto a new generation of the same file */
    uint32_t set_ctx, set_kv_cache_tokens, set_kv_cache_mib;
    char set_chat_template[64];
    char set_chat_template_file[PATH_MAX];
    char set_tool_call_format[64];
};

/* Fill m from cfg: the mock (byte tokenizer, "mock", --ctx or 4096) or a GGUF file (its name,
 * context length, tokenizer and chat template); --chat-template overrides the family.
 * Returns 0 or -errno with a one-line message in err (api.c). */
int front_model_open(struct front_model *m, const struct kiln_config *cfg, char *err,
                     size_t errlen);
void front_model_close(struct front_model *m);

/* A new generation (one reference) for cfg's model, whose file is path (cfg->model may be an
 * hf: reference that path resolves). Returns NULL with a one-line message in err. */
struct front_model *front_model_load(const struct kiln_config *cfg, const char *path,
                                     uint32_t gen, char *err, size_t errlen);
struct front_model *front_model_ref(struct front_model *m);
/* Drop one reference; the last frees m. NULL is fine. */
void front_model_put(struct front_model *m);

/* Whether path is not the file m was opened from (another path, another inode, or the same
 * one rewritten), so a reload must roll the workers onto it. */
bool front_model_changed(const struct front_model *m, const char *path);

/* Whether cfg's ctx, kv-cache-tokens, kv-cache-mib, chat-template, chat-template-file or
 * tool-call-format differ from those m was made with; what says which ("ctx 4096 -> 2048", ...). */
bool front_model_settings_changed(const struct front_model *m, const struct kiln_config *cfg,
                                  char *what, size_t len);

#endif
