/* HTTP(S) downloads for the front's model fetching (libcurl): a whole small body into memory,
 * and a large file to disk, resumable, checked against a SHA-256 and renamed into place. Not
 * for use once workers run: it blocks. */
#ifndef DOWNLOAD_H
#define DOWNLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum download_progress {
    DOWNLOAD_PROGRESS_AUTO,  /* a bar when out is a terminal, else lines */
    DOWNLOAD_PROGRESS_BAR,
    DOWNLOAD_PROGRESS_LINES, /* one line per 10 % (and at least every 10 s) */
    DOWNLOAD_PROGRESS_NONE,
};

struct download_file_opts {
    const char *url;
    const char *dest;   /* the final path; bytes go to "<dest>.part" first */
    const char *bearer; /* sent as "Authorization: Bearer" to the first host only; NULL: none */
    const char *sha256; /* 64 hex digits expected; NULL: the X-Linked-Etag (or ETag) the
                         * server sends, when it is a SHA-256 */
    int64_t size;       /* expected bytes; -1: unknown */
    const char *label;  /* the name progress shows */
    enum download_progress progress;
    FILE *out;          /* where progress goes */
    unsigned attempts;  /* transfers tried before giving up (each resumes); 0: 5 */
};

/* Download o->url to o->dest. A "<dest>.part" left by an earlier, interrupted run is resumed
 * with a Range request (restarted when the server ignores it); the finished file is checked
 * against the expected size and SHA-256, then fsync'd and renamed into place, so dest is
 * either absent or complete. A checksum mismatch deletes the part file. Returns 0, or -errno
 * with a one-line message in err (-EBADMSG: wrong size or checksum; -EIO: the transfer
 * failed every attempt; -ENOENT: 404). Concurrent calls for one dest serialize on a lock. */
int download_file(const struct download_file_opts *o, char *err, size_t errlen);

/* GET url into a malloc'd, NUL-terminated buffer of at most max bytes (*body, *len; free()
 * it). Returns 0 or -errno with a message (-ENOENT: 404; -EACCES: 401/403; -EIO otherwise). */
int download_get(const char *url, const char *bearer, size_t max, char **body, size_t *len,
                 char *err, size_t errlen);

/* The bytes of path hashed: 0 and the hex digest, or -errno. */
int download_sha256_file(const char *path, char hex[65]);

#endif
