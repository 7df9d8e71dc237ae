/* X-Request-Id (request_id.h). */
#include "request_id.h"

#include <stdio.h>
#include <string.h>

#include "http.h"

bool request_id_valid(const char *s)
{
    size_t n = 0;
    if (!s)
        return false;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.' || c == ':';
        if (!ok || n >= REQUEST_ID_MAX)
            return false;
    }
    return n > 0;
}

/* splitmix64: spreads the sequence number so made ids do not look consecutive */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void request_id_assign(struct http_req *http, uint64_t salt, uint64_t seq, char *out,
                       size_t cap)
{
    const char *given = http_req_header(http, "X-Request-Id");
    if (request_id_valid(given))
        snprintf(out, cap, "%s", given);
    else
        snprintf(out, cap, "%016llx%016llx", (unsigned long long)mix(salt ^ seq),
                 (unsigned long long)mix(seq + salt * 31));
    http_remove_header(http, "X-Request-Id");
    http_set_header(http, "X-Request-Id", out);
}
