/* Models by name from Hugging Face: "hf:OWNER/REPO[:QUANT]" (or hf:OWNER/REPO/PATH.gguf)
 * resolved to a GGUF file of the repository, downloaded once into a cache folder and served
 * from there. Runs in the front before any worker starts (it blocks). */
#ifndef HF_PULL_H
#define HF_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "download.h"

/* The part of a spec after "hf:". */
struct hf_ref {
    char owner[96], repo[96];
    char quant[48]; /* "" when not given */
    char file[512]; /* a path in the repository when given, else "" */
};

struct hf_pull_opts {
    const char *models_dir; /* NULL: $XDG_CACHE_HOME/kiln/models, else ~/.cache/kiln/models */
    const char *endpoint;   /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *token;      /* NULL: $HF_TOKEN (sent as Bearer) */
    bool offline;           /* never touch the network (also $HF_HUB_OFFLINE=1) */
    enum download_progress progress;
    FILE *out;              /* progress and notes; NULL: silent */
};

/* Whether model names a Hugging Face file ("hf:..."). */
bool hf_is_ref(const char *model);

/* Parse "hf:OWNER/REPO[:QUANT]" or "hf:OWNER/REPO/PATH.gguf". Returns 0 or -EINVAL with a
 * message naming what is wrong. */
int hf_parse_ref(const char *spec, struct hf_ref *ref, char *err, size_t errlen);

/* Whether the file name (its last path component) carries the quantization tag quant (case
 * does not matter; the tag must stand between separators: "Q4_K" is not "Q4_K_M"). */
bool hf_name_matches_quant(const char *name, const char *quant);

/* The local path of spec: a file already in the cache is used without any network access;
 * otherwise the repository's file list is fetched, QUANT picks the .gguf file (no QUANT:
 * Q4_K_M, then Q8_0, then the only one), and the file is downloaded (resumable, checked
 * against the sha256 the hub publishes). Writes the path to path. Returns 0 or -errno with a
 * one-line message in err. */
int hf_pull(const char *spec, const struct hf_pull_opts *o, char *path, size_t cap, char *err,
            size_t errlen);

/* `kiln pull SPEC [--models-dir DIR] [--quiet]`: hf_pull() alone, printing the path.
 * argv[0] is "pull". Returns the process's exit status (0, 1 on failure, 2 on bad usage). */
int hf_pull_main(int argc, char **argv);

#endif
