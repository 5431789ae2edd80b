/* test_sim_queue.c - the simulator's pending queue: pushes, sorting back
 * into job order after a requeue, and removing entries anywhere (the
 * entries before the last removed one move, the rest stay), checked against
 * a plain array model over many random rounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "sim/queue.h"
#include "fixture.h"

static void check(const struct sim_queue *q, const uint32_t *model, size_t n)
{
    assert_int_equal(q->n, n);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(q->job[q->head + k], model[k]);
        assert_int_equal(q->req[q->head + k].id, model[k] + 1); /* the request moved with it */
        assert_true(q->reason[q->head + k] != SIM_QUEUE_GONE);
    }
}

static void test_against_a_model(void **state)
{
    (void)state;
    struct sim_queue q;
    sim_queue_init(&q);
    uint32_t model[4096];
    size_t n = 0;
    uint32_t next = 0;
    uint64_t rng = 99;
    for (int round = 0; round < 2000; round++) {
        /* Arrivals in job order, now and then a requeue of a lower job. */
        int arrivals = (int)(fx_rng_next(&rng) % 5);
        for (int a = 0; a < arrivals && n < 4000; a++) {
            uint32_t job = fx_rng_next(&rng) % 8 == 0 && next > 10
                               ? (uint32_t)(fx_rng_next(&rng) % next) + 100000
                               : next++;
            struct sched_job req = {.id = job + 1};
            assert_int_equal(sim_queue_push(&q, job, &req), 0);
            model[n++] = job;
        }
        assert_int_equal(sim_queue_sort(&q), 0);
        /* the model, sorted (insertion: it is nearly in order) */
        for (size_t i = 1; i < n; i++) {
            uint32_t v = model[i];
            size_t k = i;
            for (; k > 0 && model[k - 1] > v; k--)
                model[k] = model[k - 1];
            model[k] = v;
        }
        check(&q, model, n);
        /* Remove a few, mostly near the front. */
        size_t last = SIZE_MAX, m = 0;
        for (size_t k = 0; k < n; k++) {
            bool gone = fx_rng_next(&rng) % (k < 8 ? 3 : 50) == 0;
            if (gone) {
                q.reason[q.head + k] = SIM_QUEUE_GONE;
                last = k;
            } else {
                q.reason[q.head + k] = (uint8_t)(k % 7);
                model[m++] = model[k];
            }
        }
        if (last != SIZE_MAX)
            sim_queue_compact(&q, last);
        n = m;
        check(&q, model, n);
        for (size_t k = 0; k < n; k++)
            q.reason[q.head + k] = 0;
    }
    sim_queue_release(&q);
    sim_queue_release(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_a_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
