/* The chat page at `/`: static files embedded in the binary at build time (or, with
 * --webui-dir, read from a folder first), served with their content type, gzip when the
 * client accepts it, ETag revalidation and a strict Content-Security-Policy. It knows nothing
 * of the API the page calls. */
#ifndef WEBUI_H
#define WEBUI_H

#include <stdbool.h>
#include <stddef.h>

struct http_req;
struct kiln_config;

/* Check cfg's web UI flags (--webui-dir must name a readable folder) and log what is served.
 * Returns 0, or -EINVAL / -errno with a one-line message in err. */
int webui_init(const struct kiln_config *cfg, char *err, size_t errlen);

/* Answer http when path is one of the page's (`/`, `/index.html`, `/webui/...`) and the web
 * UI is on. key_required tells the page whether to ask for an API key before calling the
 * API (served as /webui/config.json). Returns true when http was answered (a 200, 304, 405,
 * or 500), false when the path is not the page's: the caller routes it. */
bool webui_handle(const struct kiln_config *cfg, struct http_req *http, const char *path,
                  bool key_required);

/* The media type for a file name, by extension ("application/octet-stream" when unknown).
 * Exposed for the unit test. */
const char *webui_content_type(const char *name);

/* Whether an Accept-Encoding value accepts gzip (a "gzip" or "*" entry whose q is not 0). */
bool webui_accepts_gzip(const char *accept_encoding);

/* Whether an If-None-Match value matches etag (a quoted strong tag; "W/" prefixes and "*"
 * count, per RFC 9110's weak comparison). */
bool webui_etag_matches(const char *if_none_match, const char *etag);

/* Whether rel (a path below the web UI's folder, without the leading '/') is safe to open:
 * letters, digits, '.', '_', '-' and '/', no empty part and no part starting with '.'. */
bool webui_safe_name(const char *rel);

#endif
