/* The chat page's files as the build embedded them (build/gen/webui_assets.c, written by
 * tools/webui-embed.c): read-only data, no code. */
#ifndef WEBUI_ASSETS_H
#define WEBUI_ASSETS_H

#include <stddef.h>

struct webui_asset {
    const char *url;          /* "/index.html", "/webui/app.js", ... */
    const unsigned char *data;
    size_t len;
    const unsigned char *gz;  /* the same bytes gzipped; NULL when that saves too little */
    size_t gz_len;
    const char *hash;         /* 16 hex digits of the bytes: the ETag's body */
};

extern const struct webui_asset webui_assets[];
extern const unsigned webui_n_assets;
/* 1: marked, DOMPurify and highlight.js are embedded; 0: npm could not install them */
extern const int webui_has_libs;

#endif
