/* Build-time helper: writes a C file holding the chat page's files (the page under webui/ and
 * the npm libraries it uses) as byte arrays, each with a gzip copy made here (so the server
 * compresses nothing at run time) and an ETag. Runs on the build machine only; kiln does not
 * link it.
 *
 *   webui-embed OUT.c URL=FILE... [--libs URL=FILE...]
 *
 * Files after --libs are the libraries: when any of them is missing none is embedded and the
 * generated webui_has_libs is 0 (the page then renders answers as plain text). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#define EMBED_MAX_FILES 64
#define EMBED_MAX_BYTES (8u << 20)

struct item {
    const char *url;
    const char *file;
    unsigned char *data;
    size_t len;
    unsigned char *gz; /* NULL: not worth compressing */
    size_t gz_len;
};

/* Read all of path into *out (malloc'd). Returns 0 or -errno. */
static int read_file(const char *path, unsigned char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    int err = 0;

    if (!f)
        return -errno;
    for (;;) {
        if (n == cap) {
            unsigned char *nb;
            cap = cap ? cap * 2 : 65536;
            if (cap > EMBED_MAX_BYTES + 1 || !(nb = realloc(buf, cap))) {
                err = cap > EMBED_MAX_BYTES + 1 ? -EFBIG : -ENOMEM;
                goto fail;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                err = -EIO;
                goto fail;
            }
            break;
        }
    }
    fclose(f);
    *out = buf;
    *len = n;
    return 0;
fail:
    fclose(f);
    free(buf);
    return err;
}

/* gzip (RFC 1952, mtime 0 so the output depends on the bytes only). Returns 0 or -ENOMEM. */
static int gzip_bytes(const unsigned char *in, size_t len, unsigned char **out, size_t *out_len)
{
    z_stream z;
    uLong cap;
    unsigned char *buf;

    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        return -ENOMEM;
    cap = deflateBound(&z, (uLong)len) + 32;
    if (!(buf = malloc(cap))) {
        deflateEnd(&z);
        return -ENOMEM;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
        deflateEnd(&z);
        free(buf);
        return -ENOMEM;
    }
    *out_len = z.total_out;
    deflateEnd(&z);
    *out = buf;
    return 0;
}

/* FNV-1a, 64 bits: the ETag only has to change when the bytes do. */
static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int write_array(FILE *o, const char *name, const unsigned char *p, size_t n)
{
    fprintf(o, "static const unsigned char %s[%zu] = {", name, n ? n : 1);
    if (!n)
        fputs("0", o);
    for (size_t i = 0; i < n; i++)
        fprintf(o, "%s%u,", i % 24 == 0 ? "\n    " : "", p[i]);
    fputs("\n};\n", o);
    return ferror(o) ? -EIO : 0;
}

static int parse_item(const char *arg, struct item *it)
{
    const char *eq = strchr(arg, '=');
    if (!eq || arg[0] != '/' || !eq[1])
        return -EINVAL;
    it->url = strndup(arg, (size_t)(eq - arg));
    it->file = eq + 1;
    return it->url ? 0 : -ENOMEM;
}

int main(int argc, char **argv)
{
    struct item items[EMBED_MAX_FILES];
    size_t n = 0, first_lib = 0;
    int has_libs = 0, in_libs = 0, rc;
    FILE *o;

    if (argc < 3) {
        fprintf(stderr, "usage: %s OUT.c URL=FILE... [--libs URL=FILE...]\n", argv[0]);
        return 2;
    }
    memset(items, 0, sizeof(items));
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--libs") == 0) {
            in_libs = 1;
            first_lib = n;
            has_libs = 1;
            continue;
        }
        if (n == EMBED_MAX_FILES || parse_item(argv[i], &items[n]) < 0) {
            fprintf(stderr, "webui-embed: bad argument '%s' (want /url=file)\n", argv[i]);
            return 2;
        }
        if ((rc = read_file(items[n].file, &items[n].data, &items[n].len)) < 0) {
            if (!in_libs) {
                fprintf(stderr, "webui-embed: %s: %s\n", items[n].file, strerror(-rc));
                return 1;
            }
            has_libs = 0; /* a library is missing: embed none of them */
        }
        n++;
    }
    if (in_libs && !has_libs) {
        fprintf(stderr, "webui-embed: the page's libraries (marked, dompurify, highlight.js) "
                        "are not installed: the chat page will render answers as plain text\n");
        n = first_lib;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char *gz;
        size_t gz_len;
        if (gzip_bytes(items[i].data, items[i].len, &gz, &gz_len) < 0) {
            fprintf(stderr, "webui-embed: out of memory\n");
            return 1;
        }
        if (gz_len + gz_len / 10 < items[i].len) { /* worth it: at least ~10% smaller */
            items[i].gz = gz;
            items[i].gz_len = gz_len;
        } else {
            free(gz);
        }
    }
    if (!(o = fopen(argv[1], "w"))) {
        fprintf(stderr, "webui-embed: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    fputs("/* Generated by tools/webui-embed.c from webui/ and the page's npm libraries: do not "
          "edit. */\n#include \"webui_assets.h\"\n\n",
          o);
    for (size_t i = 0; i < n; i++) {
        char name[32];
        fprintf(o, "/* %s from %s */\n", items[i].url, items[i].file);
        snprintf(name, sizeof(name), "a%zu", i);
        write_array(o, name, items[i].data, items[i].len);
        if (items[i].gz) {
            snprintf(name, sizeof(name), "a%zu_gz", i);
            write_array(o, name, items[i].gz, items[i].gz_len);
        }
    }
    fprintf(o, "\nconst struct webui_asset webui_assets[] = {\n");
    for (size_t i = 0; i < n; i++) {
        uint64_t h = fnv1a(items[i].data, items[i].len);
        fprintf(o, "    {\"%s\", a%zu, %zu, ", items[i].url, i, items[i].len);
        if (items[i].gz)
            fprintf(o, "a%zu_gz, %zu, ", i, items[i].gz_len);
        else
            fprintf(o, "0, 0, ");
        fprintf(o, "\"%016llx\"},\n", (unsigned long long)h);
    }
    if (!n)
        fprintf(o, "    {0, 0, 0, 0, 0, 0},\n");
    fprintf(o, "};\nconst unsigned webui_n_assets = %zu;\nconst int webui_has_libs = %d;\n", n,
            has_libs);
    if (fclose(o) != 0) {
        fprintf(stderr, "webui-embed: %s: write failed\n", argv[1]);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        free(items[i].data);
        free(items[i].gz);
        free((char *)items[i].url);
    }
    return 0;
}
