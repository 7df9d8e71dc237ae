/* The mock model: its reply under greedy decoding, then EOS; markers inert without faults;
 * each injected fault with them (the fatal ones in a forked child). */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tokenizer.h"
#include "../worker/model.h"
#include "../worker/model_mock.h"

static uint32_t argmax(const float *l, uint32_t n)
{
    uint32_t b = 0;

    for (uint32_t v = 1; v < n; v++)
        if (l[v] > l[b])
            b = v;
    return b;
}

static uint32_t to_tokens(const char *s, uint32_t *out)
{
    uint32_t n = 0;

    while (*s)
        out[n++] = (unsigned char)*s++;
    return n;
}

/* Greedy over one slot: the reply text up to EOS; the count of tokens before EOS */
static int run_greedy(struct model *m, const char *prompt, char *out, size_t cap)
{
    uint32_t toks[256], n = to_tokens(prompt, toks), t;
    float logits[TOKENIZER_BYTES_EOS + 1];
    size_t len = 0;
    int rc = model_prefill(m, 0, toks, n, logits);

    if (rc < 0)
        return rc;
    while ((t = argmax(logits, m->n_vocab)) != TOKENIZER_BYTES_EOS && len + 1 < cap) {
        struct model_result res;
        int slot = 0;

        out[len++] = (char)t;
        if (model_decode_batch(m, &slot, &t, 1, logits, &res) != 1)
            return -EPROTO;
        if (res.status < 0)
            return res.status;
    }
    out[len] = '\0';
    model_seq_free(m, 0);
    return (int)len;
}

static struct model *new_mock(const char *reply, int faults)
{
    struct model_mock_opts o = {.reply = reply, .faults = faults != 0};
    char err[128];
    struct model *m = model_mock_create(&o, err, sizeof(err));

    assert_non_null(m);
    return m;
}

static void test_model_mock_replies_then_eos(void **state)
{
    struct model *m = new_mock("hi there", 0);
    char out[64];

    (void)state;
    assert_int_equal(m->n_vocab, TOKENIZER_BYTES_EOS + 1);
    assert_int_equal(m->n_eos, 1);
    assert_int_equal(m->eos[0], TOKENIZER_BYTES_EOS);
    assert_int_equal(m->max_context, 4096);
    assert_int_equal(run_greedy(m, "x", out, sizeof(out)), 8);
    assert_string_equal(out, "hi there");
    /* the slot is reusable and starts over */
    assert_int_equal(run_greedy(m, "again", out, sizeof(out)), 8);
    assert_string_equal(out, "hi there");
    model_destroy(m);
}

static void test_model_mock_default_reply(void **state)
{
    struct model *m = new_mock(NULL, 0);
    char out[128];

    (void)state;
    assert_true(run_greedy(m, "x", out, sizeof(out)) > 0);
    assert_string_equal(out, MODEL_MOCK_DEFAULT_REPLY);
    model_destroy(m);
}

static void test_model_mock_faults_inactive_without_the_flag(void **state)
{
    struct model *m = new_mock("ok", 0);
    char out[64];

    (void)state;
    assert_int_equal(
        run_greedy(m, "[[kiln:error]][[kiln:abort]][[kiln:hang]][[kiln:segv]][[kiln:hold]]", out,
                   sizeof(out)),
        2);
    assert_string_equal(out, "ok");
    model_destroy(m);
}

static void test_model_mock_error_fault_fails_only_its_sequence(void **state)
{
    struct model_mock_opts o = {.reply = "ok", .faults = true, .max_sequences = 2};
    char err[128];
    struct model *m = model_mock_create(&o, err, sizeof(err));
    uint32_t bad[64], good[8], nb = to_tokens("x [[kiln:error]] y", bad), ng = to_tokens("x", good);
    float logits[2 * (TOKENIZER_BYTES_EOS + 1)];
    struct model_result res[2];
    int slots[2] = {0, 1};
    uint32_t toks[2] = {'o', 'o'};

    (void)state;
    assert_non_null(m);
    assert_int_equal(model_prefill(m, 0, bad, nb, logits), 0);
    assert_int_equal(model_prefill(m, 1, good, ng, logits), 0);
    assert_int_equal(model_decode_batch(m, slots, toks, 2, logits, res), 2);
    assert_int_equal(res[0].status, -EIO);
    assert_string_equal(res[0].error, "injected fault");
    assert_int_equal(res[1].status, 0);
    assert_int_equal(argmax(logits + m->n_vocab, m->n_vocab), 'k');
    model_destroy(m);
}

static void test_model_mock_context_is_bounded(void **state)
{
    struct model_mock_opts o = {.reply = "abcdefgh", .max_context = 4};
    char err[128];
    struct model *m = model_mock_create(&o, err, sizeof(err));
    uint32_t p[4] = {'a', 'b', 'c', 'd'};
    float logits[TOKENIZER_BYTES_EOS + 1];
    struct model_result res;
    int slot = 0;
    uint32_t t = 'a';

    (void)state;
    assert_non_null(m);
    assert_true(model_prefill(m, 0, p, 4, logits) < 0); /* no room for a token */
    assert_int_equal(model_prefill(m, 0, p, 3, logits), 0);
    assert_int_equal(model_decode_batch(m, &slot, &t, 1, logits, &res), 1);
    assert_int_equal(res.status, 0);
    assert_int_equal(model_decode_batch(m, &slot, &t, 1, logits, &res), 1);
    assert_int_equal(res.status, -ENOSPC);
    model_destroy(m);
}

/* Run prompt's prefill and one decode in a child with faults on; its wait status */
static int child_status(const char *prompt)
{
    pid_t pid = fork();
    int st;

    assert_true(pid >= 0);
    if (pid == 0) {
        struct model *m = new_mock("ok", 1);
        char out[16];

        alarm(20); /* a hang ends as SIGALRM, never as a stuck test */
        _exit(run_greedy(m, prompt, out, sizeof(out)) == 2 ? 0 : 3);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static void test_model_mock_fatal_faults_with_the_flag(void **state)
{
    int st;

    (void)state;
    st = child_status("[[kiln:abort]]");
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    st = child_status("[[kiln:segv]]");
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    st = child_status("plain");
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_model_mock_hold_waits_for_sigusr1(void **state)
{
    int ready[2], done[2], st;
    struct pollfd pfd;
    pid_t pid;
    char c;

    (void)state;
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct model *m = new_mock("ok", 1);
        char out[16];
        int n;

        alarm(20);
        if (write(ready[1], "r", 1) != 1)
            _exit(4);
        n = run_greedy(m, "[[kiln:hold]]", out, sizeof(out));
        if (write(done[1], "d", 1) != 1)
            _exit(4);
        _exit(n == 2 ? 0 : 3);
    }
    assert_int_equal(read(ready[0], &c, 1), 1);
    /* held: nothing comes while no SIGUSR1 was sent (a bounded look, not a proof) */
    pfd = (struct pollfd){.fd = done[0], .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 200), 0);
    assert_int_equal(kill(pid, SIGUSR1), 0);
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(ready[0]);
    close(ready[1]);
    close(done[0]);
    close(done[1]);
}

static volatile sig_atomic_t test_stop_flag;

static void test_on_term(int sig)
{
    (void)sig;
    test_stop_flag = 1;
}

/* The worker's SIGTERM ends a hold (the signal may come before or during it): the held
 * prefill returns and the worker can leave its loop instead of waiting for a SIGUSR1. */
static void test_model_mock_hold_ends_on_stop(void **state)
{
    int ready[2], done[2], st;
    struct pollfd pfd;
    pid_t pid;
    char c;

    (void)state;
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(done), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct model_mock_opts o = {.reply = "ok", .faults = true, .stop = &test_stop_flag};
        struct sigaction sa = {.sa_handler = test_on_term};
        char err[128], out[16];
        struct model *m;
        int n;

        alarm(20);
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        if (!(m = model_mock_create(&o, err, sizeof(err))))
            _exit(5);
        if (write(ready[1], "r", 1) != 1)
            _exit(4);
        n = run_greedy(m, "[[kiln:hold]]", out, sizeof(out));
        if (write(done[1], "d", 1) != 1)
            _exit(4);
        _exit(n == 2 && test_stop_flag ? 0 : 3);
    }
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(kill(pid, SIGTERM), 0);
    pfd = (struct pollfd){.fd = done[0], .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(ready[0]);
    close(ready[1]);
    close(done[0]);
    close(done[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_mock_replies_then_eos),
        cmocka_unit_test(test_model_mock_default_reply),
        cmocka_unit_test(test_model_mock_faults_inactive_without_the_flag),
        cmocka_unit_test(test_model_mock_error_fault_fails_only_its_sequence),
        cmocka_unit_test(test_model_mock_context_is_bounded),
        cmocka_unit_test(test_model_mock_fatal_faults_with_the_flag),
        cmocka_unit_test(test_model_mock_hold_waits_for_sigusr1),
        cmocka_unit_test(test_model_mock_hold_ends_on_stop),
    };

    return cmocka_run_group_tests_name("model_mock", tests, NULL, NULL);
}
