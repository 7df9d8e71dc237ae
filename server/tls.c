/* The OpenSSL context behind --tls-cert and --tls-key (tls.h). */
#include "tls.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/* TLS 1.2 suites: ECDHE key exchange and AEAD ciphers only (Mozilla's "intermediate" set);
 * TLS 1.3's suites are all AEAD and keep OpenSSL's default order. */
#define TLS12_CIPHERS                                                                      \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                           \
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                           \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

struct tls {
    SSL_CTX *ctx;
};

/* OpenSSL's reason for the last failure (its error queue emptied), or "unknown error". */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    ERR_clear_error();
    return r ? r : "unknown error";
}

/* Whether path can be opened for reading; else a message naming flag and path. */
static bool readable(const char *flag, const char *path, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "%s %s: %s", flag, path, strerror(errno));
        return false;
    }
    fclose(fp);
    return true;
}

static SSL_CTX *load(const char *cert, const char *key, char *err, size_t errlen)
{
    SSL_CTX *ctx;

    if (!cert || !key) {
        snprintf(err, errlen, "--tls-cert and --tls-key go together: give both or neither");
        return NULL;
    }
    if (!readable("--tls-cert", cert, err, errlen) || !readable("--tls-key", key, err, errlen))
        return NULL;
    ERR_clear_error();
    if (!(ctx = SSL_CTX_new(TLS_server_method()))) {
        snprintf(err, errlen, "TLS: cannot make a context: %s", ssl_reason());
        return NULL;
    }
    if (!SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) ||
        !SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS)) {
        snprintf(err, errlen, "TLS: cannot set the protocols and ciphers: %s", ssl_reason());
        goto fail;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        snprintf(err, errlen, "--tls-cert %s: not a readable PEM certificate chain: %s", cert,
                 ssl_reason());
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
            snprintf(err, errlen,
                     "--tls-key %s does not match the certificate in --tls-cert %s", key, cert);
            ERR_clear_error();
            goto fail;
        }
        snprintf(err, errlen, "--tls-key %s: not a readable PEM private key: %s", key,
                 ssl_reason());
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen, "--tls-key %s does not match the certificate in --tls-cert %s",
                 key, cert);
        ERR_clear_error();
        goto fail;
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

struct tls *tls_create(const char *cert, const char *key, char *err, size_t errlen)
{
    struct tls *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, errlen, "TLS: out of memory");
        return NULL;
    }
    if (!(t->ctx = load(cert, key, err, errlen))) {
        free(t);
        return NULL;
    }
    return t;
}

int tls_reload(struct tls *t, const char *cert, const char *key, char *err, size_t errlen)
{
    SSL_CTX *ctx = load(cert, key, err, errlen);
    if (!ctx)
        return -1;
    SSL_CTX_free(t->ctx); /* open connections hold their own reference */
    t->ctx = ctx;
    return 0;
}

struct ssl_st *tls_new_ssl(struct tls *t)
{
    return SSL_new(t->ctx);
}

void tls_free(struct tls *t)
{
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}
