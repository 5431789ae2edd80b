/* test_sort.c - SORT_DEFINE, the merge sort a pass uses for its per-running-
 * job arrays: against qsort on random arrays of every small size and a few
 * large ones, with many equal keys (stable: equal keys keep their order),
 * and on input already in order and in reverse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "base/sort.h"
#include "fixture.h"

struct item {
    int64_t key;
    uint32_t seq; /* position before sorting: stability shows in it */
};

static bool item_before(const struct item *x, const struct item *y)
{
    return x->key < y->key;
}

SORT_DEFINE(sort_items, struct item, item_before)

static int cmp_item(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq); /* what a stable sort gives */
}

/* Sorts `n` items whose keys come from `keygen` both ways; they must agree. */
static void check(size_t n, int64_t (*keygen)(size_t i, size_t n))
{
    struct item *a = malloc((n + 1) * sizeof(*a)), *b = malloc((n + 1) * sizeof(*b));
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] = (struct item){keygen(i, n), (uint32_t)i};
    assert_int_equal(sort_items(a, n), 0);
    qsort(b, n, sizeof(*b), cmp_item);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(a[i].key, b[i].key);
        assert_int_equal(a[i].seq, b[i].seq);
    }
    free(a);
    free(b);
}

static uint64_t rng = 42;

static int64_t random_key(size_t i, size_t n)
{
    (void)i;
    (void)n;
    return (int64_t)(fx_rng_next(&rng) % 1000003) - 500000;
}

static int64_t few_keys(size_t i, size_t n)
{
    (void)i;
    (void)n;
    return (int64_t)(fx_rng_next(&rng) % 4); /* many ties */
}

static int64_t ascending(size_t i, size_t n)
{
    (void)n;
    return (int64_t)(i / 3);
}

static int64_t descending(size_t i, size_t n)
{
    return (int64_t)(n - i);
}

static void test_small_sizes(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 100; n++) {
        check(n, random_key);
        check(n, few_keys);
        check(n, ascending);
        check(n, descending);
    }
}

static void test_large_sizes(void **state)
{
    (void)state;
    const size_t sizes[] = {255, 256, 257, 1000, 4096, 10007};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        check(sizes[k], random_key);
        check(sizes[k], few_keys);
        check(sizes[k], ascending);
        check(sizes[k], descending);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_sizes),
        cmocka_unit_test(test_large_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
