/* test_idmap.c - the pass's id map: every id put is found with its value,
 * none that was not, a second put of an id is refused, and a new generation
 * forgets the last one; whether ids fall in the directly indexed window the
 * last pass chose, outside it, or the map has no window at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/err.h"
#include "core/idmap.h"
#include "fixture.h"

/* One generation: puts ids[0, n) with values k (and a few as running),
 * checks each is found, that ids not put are not, and duplicates. */
static void generation(struct idmap *m, const uint64_t *ids, size_t n, const uint64_t *absent,
                       size_t nabsent)
{
    assert_int_equal(idmap_init(m, n), 0);
    for (size_t k = 0; k < n; k++) {
        uint32_t v = (uint32_t)k | (k % 5 == 0 ? IDMAP_RUNNING : 0);
        assert_int_equal(idmap_put(m, ids[k], v), 0);
    }
    for (size_t k = 0; k < n; k++) {
        uint32_t v = (uint32_t)k | (k % 5 == 0 ? IDMAP_RUNNING : 0);
        assert_int_equal(idmap_get(m, ids[k]), v);
        assert_int_equal(idmap_put(m, ids[k], 7), GPO_EEXIST);
        assert_int_equal(idmap_get(m, ids[k]), v); /* the refused put changed nothing */
    }
    for (size_t k = 0; k < nabsent; k++)
        assert_int_equal(idmap_get(m, absent[k]), IDMAP_NONE);
}

static void test_dense_ids_across_passes(void **state)
{
    (void)state;
    struct idmap m = {0};
    enum { N = 5000 };
    uint64_t *ids = malloc(N * sizeof(*ids));
    assert_non_null(ids);
    /* Pass after pass the oldest jobs leave and new ones arrive above: the
     * window follows. The absent ids are the ones that left, the next ones to
     * come, and ids far away on either side. */
    for (uint64_t pass = 0; pass < 6; pass++) {
        uint64_t lo = 1000 + pass * 700;
        for (size_t k = 0; k < N; k++)
            ids[k] = lo + (k * 7919) % N; /* a permutation of lo .. lo + N - 1 */
        uint64_t absent[] = {lo - 1, lo - 700, lo + N, lo + N + 3000, 0, UINT64_MAX, lo + 10 * N};
        generation(&m, ids, N, absent, sizeof(absent) / sizeof(absent[0]));
        if (pass > 0)
            assert_true(m.nwin > 0); /* the ids were dense: the map chose a window */
    }
    idmap_release(&m);
    free(ids);
}

static void test_sparse_ids_mostly_use_the_hash(void **state)
{
    (void)state;
    struct idmap m = {0};
    enum { N = 3000 };
    uint64_t *ids = malloc(N * sizeof(*ids));
    assert_non_null(ids);
    uint64_t x = 12345;
    for (int pass = 0; pass < 3; pass++) {
        for (size_t k = 0; k < N; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            ids[k] = (x >> 1) | 1; /* odd: the even ones below are surely absent */
        }
        uint64_t absent[] = {2, 4, 1ULL << 40, UINT64_MAX - 1};
        generation(&m, ids, N, absent, sizeof(absent) / sizeof(absent[0]));
        /* Too spread out for one window: it covers the newest, 64 cells per id. */
        assert_true(m.nwin <= 64 * (size_t)N + 3072 + N / 2 + 1024 + 1);
    }
    idmap_release(&m);
    free(ids);
}

static void test_ids_on_both_sides_of_the_window(void **state)
{
    (void)state;
    struct idmap m = {0};
    enum { N = 2000 };
    uint64_t ids[N];
    for (size_t k = 0; k < N; k++)
        ids[k] = 50000 + k;
    generation(&m, ids, N, NULL, 0);
    /* The next pass: half the ids fall in the window chosen from the last one,
     * half far below and far above it; a duplicate is caught on either side. */
    for (size_t k = 0; k < N; k++)
        ids[k] = k % 3 == 0 ? 50000 + k : k % 3 == 1 ? 7 + k : (1ULL << 50) + k;
    uint64_t absent[] = {50001, 9, (1ULL << 50) + 1, 49999};
    generation(&m, ids, N, absent, sizeof(absent) / sizeof(absent[0]));
    assert_true(m.nwin > 0);
    idmap_release(&m);
}

static void test_empty_and_zeroed_maps(void **state)
{
    (void)state;
    struct idmap m = {0};
    assert_int_equal(idmap_init(&m, 0), 0);
    assert_int_equal(idmap_get(&m, 0), IDMAP_NONE);
    assert_int_equal(idmap_get(&m, 42), IDMAP_NONE);
    assert_int_equal(idmap_put(&m, 0, 3), 0);
    assert_int_equal(idmap_get(&m, 0), 3);
    /* A new generation forgets the old one. */
    assert_int_equal(idmap_init(&m, 1), 0);
    assert_int_equal(idmap_get(&m, 0), IDMAP_NONE);
    idmap_release(&m);
    idmap_release(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_ids_across_passes),
        cmocka_unit_test(test_sparse_ids_mostly_use_the_hash),
        cmocka_unit_test(test_ids_on_both_sides_of_the_window),
        cmocka_unit_test(test_empty_and_zeroed_maps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
