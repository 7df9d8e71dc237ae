/* The model interface's dispatchers, and the default decode_batch that runs decode one
 * sequence at a time (a model with a ragged-batch forward pass overrides it). */
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int model_decode_batch_default(struct model *m, const int *slots, const uint32_t *tokens, int n,
                               float *logits, struct model_result *res)
{
    for (int i = 0; i < n; i++) {
        int rc;

        m->error[0] = '\0';
        rc = m->ops->decode(m, slots[i], tokens[i], logits + (size_t)i * m->n_vocab);
        res[i].status = rc < 0 ? rc : 0;
        res[i].error[0] = '\0';
        if (rc < 0)
            snprintf(res[i].error, sizeof(res[i].error), "%s",
                     m->error[0] ? m->error : strerror(-rc));
    }
    return n;
}

int model_prefill(struct model *m, int slot, const uint32_t *prompt, uint32_t n, float *logits)
{
    m->error[0] = '\0';
    return m->ops->prefill(m, slot, prompt, n, logits);
}

int model_decode_batch(struct model *m, const int *slots, const uint32_t *tokens, int n,
                       float *logits, struct model_result *res)
{
    if (m->ops->decode_batch)
        return m->ops->decode_batch(m, slots, tokens, n, logits, res);
    return model_decode_batch_default(m, slots, tokens, n, logits, res);
}

void model_seq_free(struct model *m, int slot)
{
    if (m->ops->seq_free)
        m->ops->seq_free(m, slot);
}

int model_seq_begin(struct model *m, int slot, const uint32_t *prompt, uint32_t n,
                    uint32_t max_len, int reuse)
{
    m->error[0] = '\0';
    if (!m->ops->seq_begin)
        return 0;
    return m->ops->seq_begin(m, slot, prompt, n, max_len, reuse);
}

int model_prefill_batch(struct model *m, const int *slots, const uint32_t *const *prompts,
                        const uint32_t *ns, int count, float *logits, struct model_result *res)
{
    if (m->ops->prefill_batch)
        return m->ops->prefill_batch(m, slots, prompts, ns, count, logits, res);
    for (int i = 0; i < count; i++) {
        m->error[0] = '\0';
        res[i].status = m->ops->prefill(m, slots[i], prompts[i], ns[i],
                                        logits + (size_t)i * m->n_vocab);
        res[i].error[0] = '\0';
        if (res[i].status < 0)
            snprintf(res[i].error, sizeof(res[i].error), "%s",
                     m->error[0] ? m->error : strerror(-res[i].status));
    }
    return count;
}

uint32_t model_cache_events(struct model *m, uint64_t *out, uint32_t cap, int *lost)
{
    *lost = 0;
    return m->ops->cache_events ? m->ops->cache_events(m, out, cap, lost) : 0;
}

void model_cache_stats(const struct model *m, struct model_cache_stats *st)
{
    *st = (struct model_cache_stats){0};
    if (m->ops->cache_stats)
        m->ops->cache_stats(m, st);
}

void model_destroy(struct model *m)
{
    if (m && m->ops->destroy)
        m->ops->destroy(m);
}
