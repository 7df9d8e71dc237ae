/* SIGHUP (systemctl reload): read the config file and the command line again into a fresh
 * config and apply what the front can change live (log level, timeouts, API keys and
 * key file, metrics key, rate limits, the access log's file, the TLS certificate). The model
 * file, ctx, the KV cache's size, the chat template, threads and workers are applied by a
 * rolling restart (roll.h), and so is watchdog-ms; max-sequences is logged as needing a
 * restart. */
#ifndef RELOAD_H
#define RELOAD_H

struct front;
struct service;

/* Reload f's config from argv (the command line kiln was started with). The new config
 * replaces the running one's fields only where they can change live; errors leave everything as it was, logged. */
void reload_run(struct front *f, struct service *svc, int argc, char **argv);

#endif
