/* SIGHUP (systemctl reload): read the config file and the command line again into a fresh
 * config and apply what the front can change live (log level, timeouts, API keys and
 * key file, metrics key, rate limits). Settings that need new workers (model,
 * threads, workers, ...) are named in the log and left as they were. */
#ifndef RELOAD_H
#define RELOAD_H

struct front;
struct service;

/* Reload f's config from argv (the command line kiln was started with). The new config
 * replaces the running one's fields only where they can change live; errors leave everything as it was, logged. */
void reload_run(struct front *f, struct service *svc, int argc, char **argv);

#endif
