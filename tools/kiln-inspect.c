/* kiln-inspect: print what a GGUF file holds (version, metadata, tensor table, totals) through
 * the same reader the server uses, so a file it rejects is rejected here with the same
 * message. Long arrays and strings are abbreviated unless --full. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

#define ARRAY_SHOWN   8   /* first elements printed of a long array */
#define STRING_SHOWN  120 /* bytes printed of a long string */

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln-inspect [--full] FILE.gguf\n"
               "  prints the GGUF version, the metadata (key, type, value) and the tensor table\n"
               "  (name, type, dims, offset, bytes) with totals; --full prints arrays and strings\n"
               "  whole. Exits 1 with the reader's message on a bad file.\n");
}

/* A quoted string with C escapes; UTF-8 passes through. limit 0 prints it all. */
static void print_str(struct gguf_str s, uint64_t limit)
{
    uint64_t n = limit && s.len > limit ? limit : s.len;
    putchar('"');
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        switch (c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (c < 0x20 || c == 0x7f)
                printf("\\x%02x", c);
            else
                putchar(c);
        }
    }
    putchar('"');
    if (n < s.len)
        printf("... (%" PRIu64 " bytes)", s.len);
}

/* Element i of a fixed-size array, printed by type. */
static void print_elem(enum gguf_type t, const void *data, uint64_t i)
{
    const unsigned char *p = data;
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
    } v;
    static const uint8_t size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    memcpy(&v, p + i * size[t], size[t]);
    switch (t) {
    case GGUF_TYPE_UINT8: printf("%u", v.u8); break;
    case GGUF_TYPE_INT8: printf("%d", v.i8); break;
    case GGUF_TYPE_UINT16: printf("%u", v.u16); break;
    case GGUF_TYPE_INT16: printf("%d", v.i16); break;
    case GGUF_TYPE_UINT32: printf("%" PRIu32, v.u32); break;
    case GGUF_TYPE_INT32: printf("%" PRId32, v.i32); break;
    case GGUF_TYPE_UINT64: printf("%" PRIu64, v.u64); break;
    case GGUF_TYPE_INT64: printf("%" PRId64, v.i64); break;
    case GGUF_TYPE_FLOAT32: printf("%.9g", (double)v.f32); break;
    case GGUF_TYPE_FLOAT64: printf("%.17g", v.f64); break;
    case GGUF_TYPE_BOOL: fputs(v.u8 ? "true" : "false", stdout); break;
    default: break;
    }
}

static void print_value(const struct gguf_kv *kv, bool full)
{
    switch (kv->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: printf("%" PRIu64, kv->v.u64); break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: printf("%" PRId64, kv->v.i64); break;
    case GGUF_TYPE_FLOAT32: printf("%.9g", kv->v.f64); break;
    case GGUF_TYPE_FLOAT64: printf("%.17g", kv->v.f64); break;
    case GGUF_TYPE_BOOL: fputs(kv->v.u64 ? "true" : "false", stdout); break;
    case GGUF_TYPE_STRING: print_str(kv->v.str, full ? 0 : STRING_SHOWN); break;
    case GGUF_TYPE_ARRAY: {
        uint64_t n = full || kv->arr_n <= ARRAY_SHOWN ? kv->arr_n : ARRAY_SHOWN;
        if (kv->arr_type == GGUF_TYPE_ARRAY) {
            fputs("[...]", stdout); /* arrays of arrays: the reader skips their contents */
            break;
        }
        putchar('[');
        for (uint64_t i = 0; i < n; i++) {
            if (i)
                fputs(", ", stdout);
            if (kv->arr_type == GGUF_TYPE_STRING)
                print_str(gguf_arr_str(kv, i), full ? 0 : 40);
            else
                print_elem(kv->arr_type, kv->arr_data, i);
        }
        if (n < kv->arr_n)
            fputs(", ...", stdout);
        putchar(']');
        break;
    }
    default: break;
    }
}

static void print_dims(const struct gguf_tensor *t)
{
    char buf[128];
    int o = 0;
    for (uint32_t d = 0; d < t->n_dims; d++)
        o += snprintf(buf + o, sizeof(buf) - (size_t)o, "%s%" PRIu64, d ? " x " : "", t->ne[d]);
    printf("%-22s", buf);
}

int main(int argc, char **argv)
{
    bool full = false;
    const char *path = NULL;
    char err[1024];

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--full")) {
            full = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || path) {
            usage(stderr);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    struct gguf *g = gguf_open(path, err, sizeof(err));
    if (!g) {
        fprintf(stderr, "kiln-inspect: %s\n", err);
        return 1;
    }

    printf("%s: GGUF v%" PRIu32 ", %zu bytes, %" PRIu64 " metadata entries, %" PRIu64
           " tensors, alignment %" PRIu64 ", data at offset %" PRIu64 "\n",
           path, g->version, g->size, g->n_kv, g->n_tensors, g->alignment, g->data_off);

    printf("\nmetadata:\n");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        char type[48];
        if (kv->type == GGUF_TYPE_ARRAY)
            snprintf(type, sizeof(type), "%s[%" PRIu64 "]", gguf_type_name(kv->arr_type),
                     kv->arr_n);
        else
            snprintf(type, sizeof(type), "%s", gguf_type_name(kv->type));
        printf("  %-44.*s %-16s ", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr,
               type);
        print_value(kv, full);
        putchar('\n');
    }

    uint64_t params = 0, bytes = 0;
    if (g->n_tensors) {
        printf("\ntensors:\n  %5s  %-36s %-8s %-22s %12s %12s\n", "#", "name", "type", "dims",
               "offset", "bytes");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const struct gguf_tensor *t = &g->tensors[i];
            printf("  %5" PRIu64 "  %-36.*s %-8s ", i, (int)(t->name.len > 200 ? 200 : t->name.len),
                   t->name.ptr, ggml_type_name(t->type));
            print_dims(t);
            /* offsets are absolute in the file, as a hex dump would show them */
            printf(" %12" PRIu64 " %12" PRIu64 "\n", g->data_off + t->offset, t->nbytes);
            params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; /* checked at open */
            bytes += t->nbytes;
        }
    }
    printf("\ntotals: %" PRIu64 " tensors, %" PRIu64 " parameters (%.2fM), %" PRIu64
           " bytes of tensor data (%.2f MiB)\n",
           g->n_tensors, params, (double)params / 1e6, bytes, (double)bytes / (1024.0 * 1024.0));
    gguf_close(g);
    return 0;
}
