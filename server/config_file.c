/* kiln's config file (--config): every flag as a "key = value" line. The file's text is kept
 * in the config (config_text) and its values point into it, as argv's do for flags. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest config file read. */
#define CONFIG_FILE_MAX (1u << 20)

static char *read_all(const char *path, char *err, size_t errlen, int *rc)
{
    FILE *fp = fopen(path, "re");
    char *buf = NULL;
    size_t n = 0;
    if (!fp) {
        *rc = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (!(buf = malloc(CONFIG_FILE_MAX + 1))) {
        *rc = -ENOMEM;
        snprintf(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    n = fread(buf, 1, CONFIG_FILE_MAX + 1, fp);
    if (ferror(fp)) {
        *rc = -EIO;
        snprintf(err, errlen, "%s: read error", path);
        goto fail;
    }
    if (n > CONFIG_FILE_MAX) {
        *rc = -EFBIG;
        snprintf(err, errlen, "%s: larger than %u bytes", path, CONFIG_FILE_MAX);
        goto fail;
    }
    if (memchr(buf, '\0', n)) {
        *rc = -EINVAL;
        snprintf(err, errlen, "%s: holds a NUL byte (not a text file)", path);
        goto fail;
    }
    buf[n] = '\0';
    fclose(fp);
    return buf;
fail:
    free(buf);
    fclose(fp);
    return NULL;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* One line (NUL-terminated, in place). Returns 0 or -errno with a message in err. */
static int parse_line(struct kiln_config *c, char *line, char *err, size_t errlen)
{
    char *eq, *key, *val;
    line = trim(line);
    if (!*line || *line == '#' || *line == ';')
        return 0;
    if (!(eq = strchr(line, '='))) {
        snprintf(err, errlen, "expected 'key = value', got '%.60s'", line);
        return -EINVAL;
    }
    *eq = '\0';
    key = trim(line);
    val = trim(eq + 1);
    if (!*key) {
        snprintf(err, errlen, "a value without a key");
        return -EINVAL;
    }
    if (*val == '"' || *val == '\'') { /* quoted: taken as it is, '#' included */
        char q = *val++;
        char *end = strchr(val, q);
        if (!end) {
            snprintf(err, errlen, "%s: the quote is not closed", key);
            return -EINVAL;
        }
        if (*trim(end + 1) && *trim(end + 1) != '#') {
            snprintf(err, errlen, "%s: text after the closing quote", key);
            return -EINVAL;
        }
        *end = '\0';
    } else { /* a '#' after a blank starts a comment */
        for (char *p = val; *p; p++)
            if (*p == '#' && (p == val || p[-1] == ' ' || p[-1] == '\t')) {
                *p = '\0';
                val = trim(val);
                break;
            }
    }
    return config_set(c, key, val, err, errlen);
}

int config_file_load(struct kiln_config *c, const char *path, char *err, size_t errlen)
{
    int rc = 0;
    char msg[384];
    char *text = read_all(path, err, errlen, &rc);
    if (!text)
        return rc;
    unsigned lineno = 0;
    for (char *line = text, *next; line; line = next) {
        lineno++;
        if ((next = strchr(line, '\n')))
            *next++ = '\0';
        if ((rc = parse_line(c, line, msg, sizeof(msg))) < 0) {
            snprintf(err, errlen, "%s:%u: %s", path, lineno, msg);
            free(text);
            return rc;
        }
    }
    free(c->config_text);
    c->config_text = text;
    return 0;
}
