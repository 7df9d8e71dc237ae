/* hf:OWNER/REPO[:QUANT] -> a local GGUF file. The cache is <models-dir>/OWNER/REPO/<path in
 * the repository>; a cached file is used as it is, without the network. Otherwise the hub's
 * file list (GET /api/models/OWNER/REPO/tree/main?recursive=true: path, size, lfs.oid = the
 * sha256) picks the file, and download.c fetches /OWNER/REPO/resolve/main/PATH. */
#include "hf_pull.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_DEFAULT_ENDPOINT "https://huggingface.co"
#define HF_LIST_MAX (8u << 20) /* the file list of a repository, in bytes */
#define HF_MAX_FILES 4096
#define HF_SCAN_DEPTH 4

/* Preferred quantizations when the spec names none (llama.cpp's -hf picks Q4_K_M too). */
static const char *const default_quants[] = {"Q4_K_M", "Q8_0"};

bool hf_is_ref(const char *model)
{
    return model && strncmp(model, "hf:", 3) == 0;
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= 96 || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

/* A relative path without empty, "." or ".." components. */
static bool path_ok(const char *p)
{
    if (!*p || *p == '/' || strlen(p) >= 512)
        return false;
    for (const char *c = p; *c;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)c[i] < 0x20)
                return false;
        c += n + (e != NULL);
    }
    return true;
}

static bool ends_with_ci(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

int hf_parse_ref(const char *spec, struct hf_ref *ref, char *err, size_t errlen)
{
    memset(ref, 0, sizeof(*ref));
    if (!hf_is_ref(spec)) {
        snprintf(err, errlen, "'%s' is not of the form hf:OWNER/REPO[:QUANT]", spec);
        return -EINVAL;
    }
    const char *s = spec + 3;
    const char *slash = strchr(s, '/');
    if (!slash || !name_ok(s, (size_t)(slash - s)))
        goto bad;
    memcpy(ref->owner, s, (size_t)(slash - s));
    const char *r = slash + 1;
    size_t rn = strcspn(r, "/:");
    if (!name_ok(r, rn))
        goto bad;
    memcpy(ref->repo, r, rn);
    const char *rest = r + rn;
    if (*rest == ':') {
        size_t qn = strlen(rest + 1);
        if (qn == 0 || qn >= sizeof(ref->quant))
            goto bad;
        for (size_t i = 1; i <= qn; i++)
            if (!isalnum((unsigned char)rest[i]) && rest[i] != '_' && rest[i] != '-' &&
                rest[i] != '.')
                goto bad;
        memcpy(ref->quant, rest + 1, qn);
    } else if (*rest == '/') {
        if (!path_ok(rest + 1) || !ends_with_ci(rest + 1, ".gguf"))
            goto bad;
        snprintf(ref->file, sizeof(ref->file), "%s", rest + 1);
    }
    return 0;
bad:
    snprintf(err, errlen,
             "'%s': expected hf:OWNER/REPO, hf:OWNER/REPO:QUANT (e.g. Q4_K_M) or "
             "hf:OWNER/REPO/FILE.gguf",
             spec);
    return -EINVAL;
}

static const char *base_name(const char *p)
{
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

static bool is_tag_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

bool hf_name_matches_quant(const char *name, const char *quant)
{
    const char *b = base_name(name);
    size_t n = strlen(b), q = strlen(quant);
    if (q == 0)
        return false;
    for (size_t i = 0; i + q <= n; i++) {
        if (strncasecmp(b + i, quant, q) != 0)
            continue;
        if ((i == 0 || !is_tag_char(b[i - 1])) && (i + q == n || !is_tag_char(b[i + q])))
            return true;
    }
    return false;
}

/* "...-00001-of-00003.gguf": one part of a split file. */
static bool is_split(const char *name)
{
    const char *p = strstr(base_name(name), "-of-");
    if (!p || p - base_name(name) < 6)
        return false;
    for (int i = 1; i <= 5; i++)
        if (!isdigit((unsigned char)p[-i]))
            return false;
    return p[-6] == '-';
}

/* A model file: .gguf, and not a vision projector. */
static bool is_model_file(const char *path)
{
    return ends_with_ci(path, ".gguf") && strncasecmp(base_name(path), "mmproj", 6) != 0;
}

/* Among paths, the file quant names (shortest name first, single files before split ones);
 * no quant: Q4_K_M, then Q8_0, then the only model file. Returns its index, -1 when none,
 * -2 when only split files match. */
static long pick(const char *const *paths, size_t n, const char *quant)
{
    if (!quant || !*quant) {
        for (size_t d = 0; d < sizeof(default_quants) / sizeof(default_quants[0]); d++) {
            long i = pick(paths, n, default_quants[d]);
            if (i >= 0)
                return i;
        }
        long only = -1;
        for (size_t i = 0; i < n; i++) {
            if (!is_model_file(paths[i]))
                continue;
            if (only >= 0)
                return -1;
            only = (long)i;
        }
        return only >= 0 && is_split(paths[only]) ? -2 : only;
    }
    long best = -1;
    bool split_only = false;
    for (size_t i = 0; i < n; i++) {
        if (!is_model_file(paths[i]) || !hf_name_matches_quant(paths[i], quant))
            continue;
        if (is_split(paths[i])) {
            split_only = best < 0;
            continue;
        }
        if (best < 0 || strlen(base_name(paths[i])) < strlen(base_name(paths[best])))
            best = (long)i;
    }
    return best >= 0 ? best : split_only ? -2 : -1;
}

/* ---- the cache ---- */

static int models_dir(const struct hf_pull_opts *o, char *out, size_t cap)
{
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (o->models_dir && *o->models_dir)
        n = snprintf(out, cap, "%s", o->models_dir);
    else if (x && *x == '/')
        n = snprintf(out, cap, "%s/kiln/models", x);
    else if (home && *home)
        n = snprintf(out, cap, "%s/.cache/kiln/models", home);
    else
        return -ENOENT;
    return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static int mkdir_p(const char *dir)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

struct names {
    char **v;
    size_t n, cap;
};

static int names_add(struct names *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s)))
        return -ENOMEM;
    l->n++;
    return 0;
}

static void names_free(struct names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* The .gguf files under root/rel, as paths relative to root (finished downloads only). */
static int scan(const char *root, const char *rel, int depth, struct names *out)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    struct dirent *e;
    int rc = 0;
    if (!d)
        return 0;
    while (rc == 0 && (e = readdir(d))) {
        char sub[1024];
        if (e->d_name[0] == '.')
            continue;
        if (snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name) >=
            (int)sizeof(sub))
            continue;
        if (e->d_type == DT_DIR && depth > 0)
            rc = scan(root, sub, depth - 1, out);
        else if ((e->d_type == DT_REG || e->d_type == DT_LNK) && ends_with_ci(sub, ".gguf"))
            rc = names_add(out, sub);
    }
    closedir(d);
    return rc;
}

/* ---- the hub ---- */

struct hub_file {
    const char *path;
    long long size;     /* -1: unknown */
    const char *sha256; /* NULL: none published */
};

static void endpoint_of(const struct hf_pull_opts *o, char *out, size_t cap)
{
    const char *e = o->endpoint && *o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
    snprintf(out, cap, "%s", e && *e ? e : HF_DEFAULT_ENDPOINT);
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '/')
        out[--n] = '\0';
}

/* The repository's files from the hub's tree listing; *json owns the strings. */
static int hub_list(const struct hf_ref *ref, const char *endpoint, const char *token,
                    json_t **json, struct hub_file **files, size_t *n, char *err, size_t errlen)
{
    char url[1024], *body = NULL;
    size_t len;
    json_error_t je;
    snprintf(url, sizeof(url), "%s/api/models/%s/%s/tree/main?recursive=true", endpoint,
             ref->owner, ref->repo);
    int rc = download_get(url, token, HF_LIST_MAX, &body, &len, err, errlen);
    if (rc == -ENOENT || rc == -EACCES) {
        snprintf(err, errlen,
                 "hf:%s/%s: no such repository on %s, or it is private or gated (set HF_TOKEN "
                 "to a token that may read it)",
                 ref->owner, ref->repo, endpoint);
        return rc;
    }
    if (rc < 0)
        return rc;
    *json = json_loadb(body, len, 0, &je);
    free(body);
    if (!*json || !json_is_array(*json)) {
        snprintf(err, errlen, "%s: not a JSON list of files", url);
        json_decref(*json);
        *json = NULL;
        return -EPROTO;
    }
    size_t cap = json_array_size(*json) < HF_MAX_FILES ? json_array_size(*json) : HF_MAX_FILES;
    *files = calloc(cap ? cap : 1, sizeof(**files));
    if (!*files)
        return -ENOMEM;
    *n = 0;
    for (size_t i = 0; i < cap; i++) {
        json_t *f = json_array_get(*json, i), *lfs = json_object_get(f, "lfs");
        const char *type = json_string_value(json_object_get(f, "type"));
        const char *path = json_string_value(json_object_get(f, "path"));
        if (!path || (type && strcmp(type, "file") != 0) || !path_ok(path))
            continue;
        struct hub_file *h = &(*files)[(*n)++];
        h->path = path;
        h->size = -1;
        json_t *size = json_object_get(lfs ? lfs : f, "size");
        if (json_is_integer(size) && json_integer_value(size) >= 0)
            h->size = (long long)json_integer_value(size);
        const char *oid = lfs ? json_string_value(json_object_get(lfs, "oid")) : NULL;
        h->sha256 = oid && strlen(oid) == 64 ? oid : NULL;
    }
    return 0;
}

/* endpoint/OWNER/REPO/resolve/main/PATH with each path component escaped. */
static int resolve_url(const struct hf_ref *ref, const char *endpoint, const char *path,
                       char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s/%s/resolve/main", endpoint, ref->owner, ref->repo);
    for (const char *c = path; *c && n > 0 && (size_t)n < cap;) {
        const char *e = strchr(c, '/');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        char *esc = curl_easy_escape(NULL, c, (int)len);
        if (!esc)
            return -ENOMEM;
        n += snprintf(out + n, cap - (size_t)n, "/%s", esc);
        curl_free(esc);
        c += len + (e != NULL);
    }
    return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static void list_quants(const struct hub_file *files, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && k + 2 < cap; i++) {
        if (!is_model_file(files[i].path))
            continue;
        int w = snprintf(out + k, cap - k, "%s%s", k ? ", " : "", base_name(files[i].path));
        if (w < 0 || (size_t)w >= cap - k) {
            snprintf(out + (cap > 5 ? cap - 5 : 0), cap > 5 ? 5 : cap, "...");
            return;
        }
        k += (size_t)w;
    }
    if (!k)
        snprintf(out, cap, "no .gguf file");
}

int hf_pull(const char *spec, const struct hf_pull_opts *o, char *path, size_t cap, char *err,
            size_t errlen)
{
    struct hf_ref ref;
    char root[2048], repo_dir[2304], endpoint[512], url[4096];
    struct names cached = {0};
    json_t *json = NULL;
    struct hub_file *files = NULL;
    size_t n_files = 0;
    const char *off = getenv("HF_HUB_OFFLINE");
    bool offline = o->offline || (off && *off && strcmp(off, "0") != 0);
    const char *token = o->token ? o->token : getenv("HF_TOKEN");
    int rc;

    if ((rc = hf_parse_ref(spec, &ref, err, errlen)) < 0)
        return rc;
    if ((rc = models_dir(o, root, sizeof(root))) < 0) {
        snprintf(err, errlen, "no models folder: give --models-dir (or set XDG_CACHE_HOME)");
        return rc;
    }
    snprintf(repo_dir, sizeof(repo_dir), "%s/%s/%s", root, ref.owner, ref.repo);

    /* 1. the cache, without the network */
    if (ref.file[0]) {
        if (names_add(&cached, ref.file) < 0)
            return -ENOMEM;
        snprintf(url, sizeof(url), "%s/%s", repo_dir, ref.file);
        if (access(url, R_OK) != 0) {
            free(cached.v[0]);
            cached.n = 0;
        }
    } else if ((rc = scan(repo_dir, "", HF_SCAN_DEPTH, &cached)) < 0) {
        snprintf(err, errlen, "%s: %s", repo_dir, strerror(-rc));
        goto out;
    }
    long hit = ref.file[0] ? (cached.n ? 0 : -1)
                           : pick((const char *const *)cached.v, cached.n, ref.quant);
    if (hit >= 0) {
        rc = snprintf(path, cap, "%s/%s", repo_dir, cached.v[hit]) < (int)cap ? 0 : -ENAMETOOLONG;
        if (rc == 0 && o->out)
            fprintf(o->out, "kiln: %s is %s (cached)\n", spec, path);
        goto out;
    }
    if (offline) {
        snprintf(err, errlen, "%s: not in %s, and offline (HF_HUB_OFFLINE)", spec, repo_dir);
        rc = -ENOENT;
        goto out;
    }

    /* 2. the hub's list picks the file */
    endpoint_of(o, endpoint, sizeof(endpoint));
    if ((rc = hub_list(&ref, endpoint, token, &json, &files, &n_files, err, errlen)) < 0)
        goto out;
    long k = -1;
    if (ref.file[0]) {
        for (size_t i = 0; i < n_files && k < 0; i++)
            if (strcmp(files[i].path, ref.file) == 0)
                k = (long)i;
    } else {
        const char **paths = malloc((n_files ? n_files : 1) * sizeof(*paths));
        if (!paths) {
            rc = -ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < n_files; i++)
            paths[i] = files[i].path;
        k = pick(paths, n_files, ref.quant);
        free(paths);
    }
    if (k < 0) {
        char avail[768];
        list_quants(files, n_files, avail, sizeof(avail));
        if (k == -2)
            snprintf(err, errlen,
                     "%s: that quantization is split into several files, which kiln does not "
                     "read; merge them (llama-gguf-split --merge) or choose another: %s",
                     spec, avail);
        else if (ref.file[0])
            snprintf(err, errlen, "%s: no file %s in %s/%s (%s)", spec, ref.file, ref.owner,
                     ref.repo, avail);
        else if (ref.quant[0])
            snprintf(err, errlen, "%s: no .gguf file for %s in %s/%s; it has: %s", spec,
                     ref.quant, ref.owner, ref.repo, avail);
        else
            snprintf(err, errlen, "%s: name a quantization (hf:%s/%s:QUANT); it has: %s", spec,
                     ref.owner, ref.repo, avail);
        rc = -ENOENT;
        goto out;
    }

    /* 3. download */
    const struct hub_file *f = &files[k];
    char dest[4096];
    if (snprintf(dest, sizeof(dest), "%s/%s", repo_dir, f->path) >= (int)sizeof(dest) ||
        (rc = resolve_url(&ref, endpoint, f->path, url, sizeof(url))) < 0) {
        snprintf(err, errlen, "%s: path too long", spec);
        rc = -ENAMETOOLONG;
        goto out;
    }
    char *slash = strrchr(dest, '/');
    *slash = '\0';
    rc = mkdir_p(dest);
    *slash = '/';
    if (rc < 0) {
        snprintf(err, errlen, "creating the folder of %s: %s", dest, strerror(-rc));
        goto out;
    }
    if (o->out)
        fprintf(o->out, "kiln: %s is %s/%s/%s; downloading to %s\n", spec, ref.owner, ref.repo,
                f->path, dest);
    struct download_file_opts d = {.url = url,
                                   .dest = dest,
                                   .bearer = token,
                                   .sha256 = f->sha256,
                                   .size = f->size,
                                   .label = base_name(f->path),
                                   .progress = o->progress,
                                   .out = o->out};
    if ((rc = download_file(&d, err, errlen)) < 0)
        goto out;
    rc = snprintf(path, cap, "%s", dest) < (int)cap ? 0 : -ENAMETOOLONG;
    if (rc == 0 && o->out)
        fprintf(o->out, "kiln: saved %s\n", dest);
out:
    free(files);
    json_decref(json);
    names_free(&cached);
    return rc;
}

int hf_pull_main(int argc, char **argv)
{
    struct hf_pull_opts o = {.out = stderr};
    const char *spec = NULL;
    char path[4096], err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--models-dir") == 0 && i + 1 < argc)
            o.models_dir = argv[++i];
        else if (strncmp(a, "--models-dir=", 13) == 0)
            o.models_dir = a + 13;
        else if (strcmp(a, "--quiet") == 0)
            o.progress = DOWNLOAD_PROGRESS_NONE;
        else if (!spec && a[0] != '-')
            spec = a;
        else
            spec = NULL, i = argc; /* anything else: usage */
    }
    if (!spec) {
        fprintf(stderr, "usage: kiln pull hf:OWNER/REPO[:QUANT] [--models-dir DIR] [--quiet]\n");
        return 2;
    }
    if (hf_pull(spec, &o, path, sizeof(path), err, sizeof(err)) < 0) {
        fprintf(stderr, "kiln: %s\n", err);
        return 1;
    }
    printf("%s\n", path);
    return 0;
}
