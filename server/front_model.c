/* Model generations (front_model.h): load, reference counts, has the file changed. */
#include "front_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"

static void file_id(const char *path, struct front_model_file *id)
{
    struct stat st;
    memset(id, 0, sizeof(*id));
    if (strcmp(path, "mock") == 0 || stat(path, &st) < 0)
        return;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->size = st.st_size;
    id->mtime = st.st_mtim;
}

struct front_model *front_model_load(const struct kiln_config *cfg, const char *path,
                                     uint32_t gen, char *err, size_t errlen)
{
    struct front_model *m = malloc(sizeof(*m));
    struct kiln_config c = *cfg;
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c.model = path;
    /* the identity first: a file replaced while it is read reads as changed next time */
    struct front_model_file id;
    file_id(path, &id);
    if (front_model_open(m, &c, err, errlen) < 0) {
        free(m);
        return NULL;
    }
    m->refs = 1;
    m->gen = gen;
    m->closed = false;
    snprintf(m->arg, sizeof(m->arg), "%s", cfg->model);
    snprintf(m->path, sizeof(m->path), "%s", path);
    m->file = id;
    m->set_ctx = cfg->ctx;
    m->set_kv_cache_tokens = cfg->kv_cache_tokens;
    m->set_kv_cache_mib = cfg->kv_cache_mib;
    snprintf(m->set_chat_template, sizeof(m->set_chat_template), "%s",
             cfg->chat_template ? cfg->chat_template : "");
    snprintf(m->set_chat_template_file, sizeof(m->set_chat_template_file), "%s",
             cfg->chat_template_file ? cfg->chat_template_file : "");
    snprintf(m->set_tool_call_format, sizeof(m->set_tool_call_format), "%s",
             cfg->tool_call_format ? cfg->tool_call_format : "");
    return m;
}

struct front_model *front_model_ref(struct front_model *m)
{
    if (m)
        m->refs++;
    return m;
}

void front_model_put(struct front_model *m)
{
    if (!m || --m->refs > 0)
        return;
    front_model_close(m);
    free(m);
}

/* Append "name a -> b" to what (len bytes) when a and b differ. */
static bool differs_u32(char *what, size_t len, const char *name, uint32_t a, uint32_t b)
{
    size_t k = strlen(what);
    if (a == b)
        return false;
    snprintf(what + k, len - k, "%s%s %u -> %u", k ? ", " : "", name, a, b);
    return true;
}

static bool differs_str(char *what, size_t len, const char *name, const char *a, const char *b)
{
    size_t k = strlen(what);
    b = b ? b : "";
    if (strcmp(a, b) == 0)
        return false;
    snprintf(what + k, len - k, "%s%s '%s' -> '%s'", k ? ", " : "", name, a, b);
    return true;
}

bool front_model_settings_changed(const struct front_model *m, const struct kiln_config *cfg,
                                  char *what, size_t len)
{
    bool changed = false;
    what[0] = '\0';
    changed |= differs_u32(what, len, "ctx", m->set_ctx, cfg->ctx);
    changed |= differs_u32(what, len, "kv-cache-tokens", m->set_kv_cache_tokens,
                           cfg->kv_cache_tokens);
    changed |= differs_u32(what, len, "kv-cache-mib", m->set_kv_cache_mib, cfg->kv_cache_mib);
    changed |= differs_str(what, len, "chat-template", m->set_chat_template, cfg->chat_template);
    changed |= differs_str(what, len, "chat-template-file", m->set_chat_template_file,
                           cfg->chat_template_file);
    changed |= differs_str(what, len, "tool-call-format", m->set_tool_call_format,
                           cfg->tool_call_format);
    return changed;
}

bool front_model_changed(const struct front_model *m, const char *path)
{
    struct front_model_file id;
    if (strcmp(m->path, path) != 0)
        return true;
    file_id(path, &id);
    return id.dev != m->file.dev || id.ino != m->file.ino || id.size != m->file.size ||
           id.mtime.tv_sec != m->file.mtime.tv_sec || id.mtime.tv_nsec != m->file.mtime.tv_nsec;
}
