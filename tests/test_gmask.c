/* Grammar masks against a brute-force reference: on the llama (SentencePiece) and GPT-2 (BPE)
 * vocabularies, for JSON Schema grammars, at every step of random constrained generations the
 * mask (trie walk, memoised steps, mask cache) allows exactly the tokens whose every byte the
 * grammar takes one at a time from the current state, and an end id exactly where the
 * grammar may end. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "gguf.h"
#include "grammar.h"
#include "hash.h"
#include "json_schema.h"
#include "tokenizer.h"
#include "../worker/gmask.h"

static const char *schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"n\":{\"type\":\"integer\",\"minimum\":-20,\"maximum\":300},\"t\":{\"type\":\"array\","
    "\"items\":{\"enum\":[\"a\",\"bc\",null]},\"maxItems\":3}},\"required\":[\"name\",\"n\"]}",
    "{\"type\":\"string\",\"pattern\":\"^[a-f0-9]{2,6}(-x|é)?$\"}",
    "{\"type\":\"object\"}",
};

static bool brute_allowed(struct grammar_matcher *m, const char *piece, size_t n)
{
    struct grammar_mark k = grammar_mark(m);
    struct grammar_state s = *grammar_matcher_state(m), next;
    bool ok = n > 0;

    for (size_t i = 0; i < n && ok; i++) {
        ok = grammar_step(m, &s, (uint8_t)piece[i], &next) > 0;
        s = next;
    }
    grammar_rollback(m, k);
    return ok;
}

static void check_vocab(const char *file)
{
    const char *shared = getenv("KILN_SHARED");
    char path[512], err[256], piece[512];
    struct gguf *g;
    struct tokenizer *tok;
    const uint32_t *eos;
    size_t n_eos;
    uint32_t nv;
    float *logits;
    uint64_t rng = 1;

    snprintf(path, sizeof(path), "%s/vocab/%s", shared ? shared : "../shared", file);
    g = gguf_open(path, err, sizeof(err));
    if (!g)
        fail_msg("%s: %s", path, err);
    tok = tokenizer_create_gguf(g, err, sizeof(err));
    assert_non_null(tok);
    nv = tokenizer_n_vocab(tok);
    n_eos = tokenizer_eog_ids(tok, &eos);
    logits = malloc(nv * sizeof(float));
    assert_non_null(logits);
    struct gmask *gm = gmask_create(tok, nv, eos, (uint32_t)n_eos, 4);

    assert_non_null(gm);
    for (size_t sc = 0; sc < sizeof(schemas) / sizeof(schemas[0]); sc++) {
        json_error_t je;
        json_t *js = json_loads(schemas[sc], 0, &je);
        size_t len;
        char *text = json_schema_to_grammar(js, &len, err, sizeof(err));
        struct grammar *gr = grammar_compile(text, len, err, sizeof(err));
        struct gmask_grammar *gg = gmask_grammar_get(gm, text, len, err, sizeof(err));
        struct gmask_seq *seq = gmask_seq_create();
        struct grammar_matcher *ref = grammar_matcher_create(0);

        assert_non_null(gr);
        assert_non_null(gg);
        for (int run = 0; run < 4; run++) {
            bool first = true;

            assert_int_equal(gmask_seq_start(gm, seq, gg), 0);
            assert_int_equal(grammar_matcher_start(ref, gr), 0);
            for (int step = 0; step < 40; step++) {
                uint32_t allowed = 0, pick = 0, n_pick = 0;
                long n;

                for (uint32_t i = 0; i < nv; i++)
                    logits[i] = 0.0f;
                n = gmask_apply(gm, seq, logits);
                for (uint32_t id = 0; id < nv; id++) {
                    int pn = tokenizer_piece(tok, id, false, piece, sizeof(piece));
                    const char *p = piece;
                    bool is_eos = false, want;

                    for (size_t k = 0; k < n_eos; k++)
                        is_eos |= eos[k] == id;
                    if (is_eos) {
                        want = grammar_state_can_end(grammar_matcher_state(ref));
                    } else {
                        if (first && tokenizer_strips_leading_space(tok) && pn > 0 && p[0] == ' ')
                            p++, pn--, want = pn == 0 || brute_allowed(ref, p, (size_t)pn);
                        else
                            want = pn > 0 && brute_allowed(ref, p, (size_t)pn);
                    }
                    if (want != (logits[id] == 0.0f))
                        fail_msg("%s schema %zu run %d step %d: token %u '%.*s' %s by the mask", file,
                                 sc, run, step, id, pn, p, want ? "refused" : "allowed");
                    if (want) {
                        allowed++;
                        /* a random allowed token, preferring text to ending */
                        if (!is_eos && hash_splitmix64(&rng) % ++n_pick == 0)
                            pick = id;
                    }
                }
                assert_int_equal(n, allowed);
                if (n_pick == 0)
                    break; /* only the end is left */
                assert_int_equal(gmask_accept(gm, seq, pick), 0);
                int pn = tokenizer_piece(tok, pick, false, piece, sizeof(piece));
                const char *p = piece;

                if (first && tokenizer_strips_leading_space(tok) && pn > 0 && p[0] == ' ')
                    p++, pn--;
                assert_int_equal(grammar_matcher_feed(ref, p, (size_t)pn), 0);
                first = false;
                if (gmask_seq_must_end(seq))
                    break;
            }
        }
        grammar_matcher_destroy(ref);
        gmask_seq_destroy(seq);
        gmask_grammar_put(gm, gg);
        grammar_destroy(gr);
        free(text);
        json_decref(js);
    }
    gmask_destroy(gm);
    free(logits);
    tokenizer_destroy(tok);
    gguf_close(g);
}

static void test_gmask_matches_brute_force_on_a_sentencepiece_vocab(void **state)
{
    (void)state;
    check_vocab("ggml-vocab-llama-spm.gguf");
}

static void test_gmask_matches_brute_force_on_a_bpe_vocab(void **state)
{
    (void)state;
    check_vocab("ggml-vocab-gpt-2.gguf");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gmask_matches_brute_force_on_a_sentencepiece_vocab),
        cmocka_unit_test(test_gmask_matches_brute_force_on_a_bpe_vocab),
    };
    return cmocka_run_group_tests_name("gmask", tests, NULL, NULL);
}
