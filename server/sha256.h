/* SHA-256 (FIPS 180-4), incremental: for checking downloaded model files against the
 * checksum their host publishes. Not for secrets (no constant-time care needed). */
#ifndef SHA256_H
#define SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
    uint32_t h[8];
    uint64_t len;          /* bytes hashed so far */
    unsigned char buf[64]; /* the partial block */
    size_t n;              /* bytes in buf */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
/* Finish and write the 64 lowercase hex digits and a NUL to hex (65 bytes). s is spent. */
void sha256_hex(struct sha256 *s, char hex[65]);

#endif
