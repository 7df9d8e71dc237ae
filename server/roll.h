/* The rolling restart a reload starts when the model file, --threads or --workers changed:
 * first one extra worker with the new settings is started (a surge), and only once it is
 * ready is an old worker drained (no new jobs; its running ones get --drain-ms) and restarted
 * with the new settings, one at a time; at the end the extra worker goes again (or workers
 * are added or removed to reach --workers). So as many workers serve as before throughout,
 * and a new model that fails to load fails on the extra worker: the old ones never stopped,
 * the reload is rolled back, and /health and STATUS say why.
 *
 * Models during a roll: a request is tokenized for one model generation (front_model.h) and
 * runs only on its workers. New requests bind to the new model from the moment one of its
 * workers is ready (a request that names a model still served binds to it); the last worker
 * of the old model is drained only once no queued request waits for that model. */
#ifndef ROLL_H
#define ROLL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct front;
struct front_model;
struct roll;

/* The roll's state for f (idle). Returns NULL when out of memory. */
struct roll *roll_create(struct front *f);
void roll_free(struct roll *rl);

/* Roll the workers onto model (one reference, taken over), threads and n workers. A roll
 * under way is retargeted. */
void roll_start(struct roll *rl, struct front_model *model, uint32_t threads, uint32_t n);

/* Whether a roll is under way (rl may be NULL: none). */
bool roll_active(const struct roll *rl);

/* A reload (SIGHUP) begins: /health's reload counts it in "signals" and, unless a roll is
 * under way, describes it from now on (state "idle" until it asks for a roll). */
void roll_reload_begin(struct roll *rl);

/* The reload's config could not be read or applied (nothing changed): why, for /health. */
void roll_refused(struct roll *rl, const char *why);

/* A reload failed before any worker moved (the new model does not load): why, for /health
 * and the service status. */
void roll_failed(struct roll *rl, const char *why);

/* What the workers are rolling to, or run when no roll is under way. */
struct front_model *roll_target(struct roll *rl, uint32_t *threads, uint32_t *n);

/* /health's "reload", about the last reload: {"state": "idle" (nothing to roll), "rolling",
 * "done" or "failed", "model" (the target's name), "error" (why it failed, else null), "at"
 * (when it last changed, ISO 8601 UTC), "count" (reloads that asked to change the workers so
 * far), "signals" (reloads begun so far)}. */
json_t *roll_health(struct roll *rl);

/* The service status's part ("", or "; reload: rolling to X", "; reload failed: ..."). */
void roll_status(struct roll *rl, char *buf, size_t len);

/* The served model named name (the current one first), or NULL: a request naming it binds
 * to it. */
struct front_model *roll_find_model(struct front *f, const char *name);

/* /v1/models' data: each model new requests may name, the current one first. */
json_t *roll_models(struct front *f);

#endif
