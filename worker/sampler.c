/* The worker's sampler: penalties, logit bias, logprobs, greedy or seeded random sampling
 * through top_k/top_p/min_p. The order is documented in sampler.h. No allocation after
 * sampler_create. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

struct sampler {
    uint32_t n_vocab;
    struct proto_sampling p;
    uint64_t rng[4];  /* xoshiro256** state */
    uint32_t *counts; /* (n_vocab) times generated in this request */
    uint8_t *seen;    /* (n_vocab) in the prompt or the output */
    float *probs;     /* (n_vocab) scratch */
    uint32_t *idx;    /* (n_vocab) scratch: candidate ids */
};

struct sampler *sampler_create(uint32_t n_vocab)
{
    struct sampler *s;

    if (n_vocab == 0)
        return NULL;
    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->counts = calloc(n_vocab, sizeof(*s->counts));
    s->seen = calloc(n_vocab, sizeof(*s->seen));
    s->probs = calloc(n_vocab, sizeof(*s->probs));
    s->idx = calloc(n_vocab, sizeof(*s->idx));
    if (!s->counts || !s->seen || !s->probs || !s->idx) {
        sampler_destroy(s);
        return NULL;
    }
    proto_sampling_init(&s->p);
    return s;
}

void sampler_destroy(struct sampler *s)
{
    if (!s)
        return;
    free(s->counts);
    free(s->seen);
    free(s->probs);
    free(s->idx);
    free(s);
}


static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t sampler_next_u64(struct sampler *s)
{
    uint64_t *r = s->rng;
    uint64_t result = rotl(r[1] * 5, 7) * 9;
    uint64_t t = r[1] << 17;

    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits */
static double next_unit(struct sampler *s)
{
    return (double)(sampler_next_u64(s) >> 11) * 0x1.0p-53;
}

void sampler_reset(struct sampler *s, const struct proto_sampling *p, const uint32_t *prompt,
                   uint32_t n_prompt)
{
    uint64_t x;

    s->p = *p;
    if (s->p.n_logit_bias > WIRE_MAX_LOGIT_BIAS)
        s->p.n_logit_bias = WIRE_MAX_LOGIT_BIAS;
    if (s->p.top_logprobs > WIRE_MAX_TOP_LOGPROBS)
        s->p.top_logprobs = WIRE_MAX_TOP_LOGPROBS;
    x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = hash_splitmix64(&x);
    /* once per request, not per token */
    memset(s->counts, 0, (size_t)s->n_vocab * sizeof(*s->counts));
    memset(s->seen, 0, s->n_vocab);
    for (uint32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < s->n_vocab)
            s->seen[prompt[i]] = 1;
}

static void apply_penalties(struct sampler *s, float *l)
{
    const struct proto_sampling *p = &s->p;
    bool rep = p->repetition_penalty != 1.0f && p->repetition_penalty > 0.0f;
    bool pres = p->presence_penalty != 0.0f;
    bool freq = p->frequency_penalty != 0.0f;

    if (rep || pres || freq) {
        for (uint32_t v = 0; v < s->n_vocab; v++) {
            if (rep && s->seen[v])
                l[v] = l[v] > 0.0f ? l[v] / p->repetition_penalty : l[v] * p->repetition_penalty;
            if (s->counts[v]) {
                if (pres)
                    l[v] -= p->presence_penalty;
                if (freq)
                    l[v] -= p->frequency_penalty * (float)s->counts[v];
            }
        }
    }
    for (uint32_t i = 0; i < p->n_logit_bias; i++) {
        uint32_t t = p->logit_bias[i].token;

        if (t >= s->n_vocab)
            continue;
        if (p->logit_bias[i].bias <= -100.0f)
            l[t] = -INFINITY;
        else
            l[t] += p->logit_bias[i].bias;
    }
}

/* Greedy: the highest logit, ties to the lowest id; NaN never wins */
static uint32_t argmax(const float *l, uint32_t n)
{
    uint32_t best = 0;
    float bv = -INFINITY;
    bool any = false;

    for (uint32_t v = 0; v < n; v++) {
        if (l[v] > bv || (!any && l[v] == bv)) {
            bv = l[v];
            best = v;
            any = true;
        }
    }
    return best;
}

/* log(sum(exp(l))) over the finite logits; -inf when none is */
static double log_sum_exp(const float *l, uint32_t n)
{
    float m = -INFINITY;
    double sum = 0.0;

    for (uint32_t v = 0; v < n; v++)
        if (l[v] > m)
            m = l[v];
    if (!isfinite(m))
        return -INFINITY;
    for (uint32_t v = 0; v < n; v++)
        if (l[v] > -INFINITY)
            sum += exp((double)(l[v] - m));
    return (double)m + log(sum);
}

/* The chosen token's logprob and the top_logprobs best alternatives, by insertion into a
 * small sorted array (top_logprobs <= WIRE_MAX_TOP_LOGPROBS). */
static void fill_logprobs(struct sampler *s, const float *l, uint32_t token,
                          struct proto_token *out)
{
    double lse = log_sum_exp(l, s->n_vocab);
    uint32_t want = s->p.top_logprobs, n = 0;

    out->logprob = isfinite(lse) ? (float)((double)l[token] - lse) : 0.0f;
    for (uint32_t v = 0; v < s->n_vocab && want; v++) {
        uint32_t j;

        if (!(l[v] > -INFINITY))
            continue;
        if (n == want && l[v] <= l[out->top[n - 1].token])
            continue;
        j = n < want ? n++ : n - 1;
        while (j > 0 && l[out->top[j - 1].token] < l[v]) {
            out->top[j] = out->top[j - 1];
            j--;
        }
        out->top[j].token = v;
    }
    for (uint32_t i = 0; i < n; i++)
        out->top[i].logprob = (float)((double)l[out->top[i].token] - lse);
    out->n_top = n;
}

/* Whether candidate a ranks before b: higher probability first, then the lower id. */
static inline bool ranks_before(const float *p, uint32_t a, uint32_t b)
{
    return p[a] != p[b] ? p[a] > p[b] : a < b;
}

static void sift_down(uint32_t *ix, uint32_t i, uint32_t n, const float *p)
{
    for (;;) {
        uint32_t c = 2 * i + 1, t;

        if (c >= n)
            return;
        /* a min-heap in rank order: the root is the candidate that ranks last */
        if (c + 1 < n && ranks_before(p, ix[c], ix[c + 1]))
            c++;
        if (!ranks_before(p, ix[i], ix[c]))
            return;
        t = ix[i];
        ix[i] = ix[c];
        ix[c] = t;
        i = c;
    }
}

/* Sort ix[0..n) by rank in place: heapsort, O(n log n), no allocation (glibc's qsort may
 * malloc for large arrays, and this runs in the token loop). */
static void sort_by_prob(uint32_t *ix, uint32_t n, const float *p)
{
    for (uint32_t i = n / 2; i-- > 0;)
        sift_down(ix, i, n, p);
    for (uint32_t end = n; end > 1; end--) {
        uint32_t t = ix[0];

        ix[0] = ix[end - 1];
        ix[end - 1] = t;
        sift_down(ix, 0, end - 1, p);
    }
}

/* Keep the k highest logits among the n candidates in s->idx: quickselect, O(n) */
static uint32_t keep_top_k(struct sampler *s, const float *l, uint32_t n, uint32_t k)
{
    uint32_t *ix = s->idx, lo = 0, hi = n - 1;

    if (k >= n)
        return n;
    while (lo < hi) {
        float pivot = l[ix[lo + (hi - lo) / 2]];
        uint32_t i = lo, j = hi;

        while (i <= j) {
            while (l[ix[i]] > pivot)
                i++;
            while (l[ix[j]] < pivot)
                j--;
            if (i <= j) {
                uint32_t t = ix[i];

                ix[i] = ix[j];
                ix[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
    return k;
}

/* Sort the candidates by probability, but only those that can be in the nucleus: a set of
 * the tokens above a threshold whose mass already reaches top_p contains it, so most of a
 * large vocabulary never gets sorted. */
static uint32_t keep_top_p(struct sampler *s, uint32_t n, float top_p)
{
    const float *p = s->probs;
    uint32_t *ix = s->idx, m = n;
    float t = 1.0f / (float)n;
    double cum = 0.0;

    for (int tries = 0; tries < 6; tries++, t /= 16.0f) {
        double mass = 0.0;

        for (uint32_t i = 0; i < n; i++)
            if (p[ix[i]] >= t)
                mass += p[ix[i]];
        if (mass >= top_p) {
            m = 0;
            for (uint32_t i = 0; i < n; i++)
                if (p[ix[i]] >= t)
                    ix[m++] = ix[i];
            break;
        }
    }
    sort_by_prob(ix, m, s->probs);
    for (uint32_t i = 0; i < m; i++) {
        cum += p[ix[i]];
        if (cum >= top_p)
            return i + 1;
    }
    return m;
}

static uint32_t sample_random(struct sampler *s, const float *l)
{
    const struct proto_sampling *p = &s->p;
    float *pr = s->probs, inv_t = 1.0f / p->temperature, maxl = -INFINITY, maxp = 0.0f;
    uint32_t *ix = s->idx, n = 0;
    double sum = 0.0, r;

    for (uint32_t v = 0; v < s->n_vocab; v++)
        if (l[v] > -INFINITY)
            ix[n++] = v;
    if (n == 0)
        return argmax(l, s->n_vocab);
    if (p->top_k > 0)
        n = keep_top_k(s, l, n, (uint32_t)p->top_k);
    for (uint32_t i = 0; i < n; i++)
        if (l[ix[i]] > maxl)
            maxl = l[ix[i]];
    for (uint32_t i = 0; i < n; i++) {
        pr[ix[i]] = expf((l[ix[i]] - maxl) * inv_t);
        sum += pr[ix[i]];
    }
    /* Non-finite logits (a broken model) leave no distribution to draw from. */
    if (!(sum > 0.0) || !isfinite(sum))
        return argmax(l, s->n_vocab);
    for (uint32_t i = 0; i < n; i++) {
        pr[ix[i]] = (float)(pr[ix[i]] / sum);
        if (pr[ix[i]] > maxp)
            maxp = pr[ix[i]];
    }
    if (p->top_p > 0.0f && p->top_p < 1.0f)
        n = keep_top_p(s, n, p->top_p);
    if (p->min_p > 0.0f) {
        uint32_t m = 0;
        float cut = p->min_p * maxp;

        for (uint32_t i = 0; i < n; i++)
            if (pr[ix[i]] >= cut)
                ix[m++] = ix[i];
        n = m; /* the most likely token always passes, unless the maximum was a NaN */
        if (n == 0)
            return argmax(l, s->n_vocab);
    }
    sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += pr[ix[i]];
    r = next_unit(s) * sum;
    for (uint32_t i = 0; i < n; i++) {
        r -= pr[ix[i]];
        if (r < 0.0)
            return ix[i];
    }
    return ix[n - 1]; /* rounding left a sliver */
}

uint32_t sampler_sample(struct sampler *s, float *logits, struct proto_token *out)
{
    uint32_t token;

    apply_penalties(s, logits);
    /* Below SAMPLER_MIN_TEMPERATURE, 1/temperature overflows the logit scale: such a
     * temperature is greedy in all but name, and is decoded as greedy. */
    if (s->p.temperature >= SAMPLER_MIN_TEMPERATURE && isfinite(s->p.temperature))
        token = sample_random(s, logits);
    else
        token = argmax(logits, s->n_vocab);
    if (out) {
        out->token = token;
        out->logprob = 0.0f;
        out->n_top = 0;
        if (s->p.logprobs || s->p.top_logprobs)
            fill_logprobs(s, logits, token, out);
    }
    if (s->counts[token] < UINT32_MAX)
        s->counts[token]++;
    s->seen[token] = 1;
    return token;
}
