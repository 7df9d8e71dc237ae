/* HTTPS: the server's certificate chain and key (--tls-cert, --tls-key, PEM) in an OpenSSL
 * context for TLS 1.2 and 1.3 only, with forward-secret AEAD ciphers; read again on reload.
 * Each connection gets its SSL from the context current when it was accepted. */
#ifndef TLS_H
#define TLS_H

#include <stddef.h>

struct tls;
struct ssl_st;

/* Read cert (a PEM chain, leaf first) and key (PEM) into a new context. Returns NULL with a
 * one-line message naming the file at fault in err. */
struct tls *tls_create(const char *cert, const char *key, char *err, size_t errlen);

/* Read cert and key again (their paths may have changed): the new context serves the
 * connections accepted from now on; open ones keep theirs. On failure (message in err) the
 * old one stays. Returns 0 or -1. */
int tls_reload(struct tls *t, const char *cert, const char *key, char *err, size_t errlen);

/* A server-side SSL for a new connection, or NULL when out of memory. */
struct ssl_st *tls_new_ssl(struct tls *t);

/* NULL is fine. */
void tls_free(struct tls *t);

#endif
