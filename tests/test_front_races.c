/* Integration tests of the front's request life when clients leave at awkward moments: a
 * queue full of a departed client's choices of n, pruned to admit another request, and a
 * client that asks for n=2 and closes at once while the queue has one place left. Both used
 * to touch freed requests (caught by ASan, or a crash); the front must answer the next
 * client and exit cleanly. A client that only half-closed is not departed: it keeps its
 * place in a full queue. The departures are made deterministic by stopping the front
 * (SIGSTOP) while the client acts, so it sees request and close in one turn. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "front_util.h"

static int setup_one_slot_two_waiting(void **state)
{
    static const char *args[] = {"--model",         "mock", "--workers",       "1",
                                 "--max-sequences", "1",    "--max-waiting",   "2",
                                 "--mock-delay-ms", "100",  "--mock-reply",    MOCK_REPLY,
                                 NULL};
    struct kiln_proc *p = front_start(args);
    if (!p)
        return -1;
    *state = p;
    return 0;
}

static int teardown(void **state)
{
    return front_stop(*state);
}

static void format_request(char *buf, size_t cap, const char *body)
{
    snprintf(buf, cap,
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(body), body);
}

/* Send a whole request on a new connection without reading. Returns the fd. */
static int send_request(int port, const char *body)
{
    char req[1024];
    int fd = http_raw_connect(port);
    assert_true(fd >= 0);
    format_request(req, sizeof(req), body);
    assert_int_equal(http_raw_send(fd, req, strlen(req)), 0);
    return fd;
}

static bool one_running(void *arg)
{
    return front_running(*(int *)arg) == 1;
}

static bool waiting_1(void *arg)
{
    return front_waiting(*(int *)arg) == 1;
}

static bool waiting_2(void *arg)
{
    return front_waiting(*(int *)arg) == 2;
}

/* The front (not its workers) stopped while the test acts, then resumed. */
static void front_pause(struct kiln_proc *p)
{
    assert_int_equal(kiln_kill(p, SIGSTOP), 0);
    /* a stopped process shows 'T' once the signal took effect */
    for (int i = 0; i < 1000 && proc_state(kiln_pid(p)) != 'T'; i++)
        usleep(1000);
    assert_int_equal(proc_state(kiln_pid(p)), 'T');
}

/* After the departure the front still serves: a plain request is answered in full. */
static void assert_serves(int port)
{
    json_t *j;
    assert_int_equal(front_call(port, "POST", "/v1/completions",
                                "{\"prompt\":\"after\",\"max_tokens\":3}", &j, NULL),
                     200);
    json_decref(j);
}

/* A's n=2 choices fill the queue; A leaves unnoticed; B's admission prunes the queue, and
 * failing A's lead ends (and frees) its other choice, the one the scan was about to visit. */
static void test_front_races_prune_of_a_departed_group(void **state)
{
    struct kiln_proc *p = *state;
    int port = kiln_port(p);
    char breq[1024];

    int x = send_request(port, "{\"prompt\":\"x\",\"max_tokens\":50}"); /* the only slot */
    assert_true(wait_until(one_running, &port, 5000));
    int a = send_request(port, "{\"prompt\":\"a\",\"max_tokens\":5,\"n\":2}");
    assert_true(wait_until(waiting_2, &port, 5000)); /* the queue is full */

    /* B's request all but its last byte, so it is complete in the same turn A's close is
     * seen */
    format_request(breq, sizeof(breq), "{\"prompt\":\"b\",\"max_tokens\":2}");
    size_t blen = strlen(breq);
    int b = http_raw_connect(port);
    assert_true(b >= 0);
    assert_int_equal(http_raw_send(b, breq, blen - 1), 0);
    assert_true(wait_until(waiting_2, &port, 5000)); /* the front took B's head in */

    front_pause(p);
    assert_int_equal(http_raw_send(b, breq + blen - 1, 1), 0);
    close(a);
    assert_int_equal(kiln_kill(p, SIGCONT), 0);

    /* B is queued behind X (A's place freed for it) and answered in turn */
    struct http_response r;
    assert_int_equal(http_raw_read_response(b, &r, 20000), 200);
    assert_non_null(strstr(r.body, "\"text_completion\""));
    http_response_free(&r);
    close(b);
    close(x);
    assert_serves(port);
}

/* With one place left in the queue, a client sends n=2 and closes at once: admitting its
 * second choice prunes the queue, which finds this very client gone and ends its group. */
static void test_front_races_departed_n2_client_at_admission(void **state)
{
    struct kiln_proc *p = *state;
    int port = kiln_port(p);
    char req[1024];

    int x = send_request(port, "{\"prompt\":\"x\",\"max_tokens\":50}");
    assert_true(wait_until(one_running, &port, 5000));
    int q1 = send_request(port, "{\"prompt\":\"q\",\"max_tokens\":2}");
    assert_true(wait_until(waiting_1, &port, 5000));

    int c = http_raw_connect(port);
    assert_true(c >= 0);
    assert_true(wait_until(waiting_1, &port, 5000)); /* the front accepted c meanwhile */
    format_request(req, sizeof(req), "{\"prompt\":\"c\",\"max_tokens\":5,\"n\":2}");
    front_pause(p);
    assert_int_equal(http_raw_send(c, req, strlen(req)), 0);
    close(c);
    assert_int_equal(kiln_kill(p, SIGCONT), 0);

    /* c's choices are gone; q1 is still queued and answered */
    struct http_response r;
    assert_int_equal(http_raw_read_response(q1, &r, 20000), 200);
    http_response_free(&r);
    close(q1);
    close(x);
    assert_serves(port);
}

/* A client that half-closes after its request waits in a full queue; the prune made for a
 * newer request must not take it for gone (it was: EOF counted as a close). The newer
 * request is refused, the half-closed client gets its answer. */
static void test_front_races_half_closed_client_keeps_its_place_in_a_full_queue(void **state)
{
    struct kiln_proc *p = *state;
    int port = kiln_port(p);

    int x = send_request(port, "{\"prompt\":\"x\",\"max_tokens\":20}"); /* the only slot */
    assert_true(wait_until(one_running, &port, 5000));
    int h = send_request(port, "{\"prompt\":\"h\",\"max_tokens\":2}");
    assert_int_equal(shutdown(h, SHUT_WR), 0);
    int q = send_request(port, "{\"prompt\":\"q\",\"max_tokens\":2}");
    assert_true(wait_until(waiting_2, &port, 5000)); /* the queue is full */

    struct http_response r;
    int c = send_request(port, "{\"prompt\":\"c\",\"max_tokens\":2}");
    assert_int_equal(http_raw_read_response(c, &r, 20000), 503);
    http_response_free(&r);
    close(c);

    char *all = NULL;
    size_t len = 0;
    assert_int_equal(http_raw_read_all(h, &all, &len, 20000), 0);
    assert_non_null(strstr(all, "HTTP/1.1 200 OK"));
    assert_non_null(strstr(all, "\"text_completion\""));
    free(all);
    close(h);
    assert_int_equal(http_raw_read_response(q, &r, 20000), 200);
    http_response_free(&r);
    close(q);
    close(x);
    assert_serves(port);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_front_races_prune_of_a_departed_group,
                                        setup_one_slot_two_waiting, teardown),
        cmocka_unit_test_setup_teardown(test_front_races_departed_n2_client_at_admission,
                                        setup_one_slot_two_waiting, teardown),
        cmocka_unit_test_setup_teardown(
            test_front_races_half_closed_client_keeps_its_place_in_a_full_queue,
            setup_one_slot_two_waiting, teardown),
    };
    return cmocka_run_group_tests_name("front_races", tests, NULL, NULL);
}
