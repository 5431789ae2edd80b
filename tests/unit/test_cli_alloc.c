/* test_cli_alloc.c - what `gpuorch alloc` and `gpuorch run` (outside a job)
 * read from -G/--gpus: whole GPUs, or a MIG profile that asks for one
 * instance (docs/mig.md); anything else refused with what was expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "cli/alloc.h"
#include "base/banned.h"

static void gpus_are_a_count_or_a_mig_profile(void **state)
{
    (void)state;
    char err[256];
    struct alloc_flags f = {0};
    assert_int_equal(alloc_gpus_parse(NULL, &f, err, sizeof(err)), 0);
    assert_int_equal(f.gpus, 0);
    assert_null(f.mig_profile);
    assert_int_equal(alloc_gpus_parse("4", &f, err, sizeof(err)), 0);
    assert_int_equal(f.gpus, 4);
    assert_null(f.mig_profile);
    f = (struct alloc_flags){0};
    assert_int_equal(alloc_gpus_parse("MIG 1g.10gb", &f, err, sizeof(err)), 0);
    assert_string_equal(f.mig_profile, "MIG 1g.10gb"); /* the server spells it */
    assert_int_equal(f.gpus, 0);
    static const char *const bad[] = {"0", "1025", "two", "1g", "0.5", "H100-80GB:2"};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        f = (struct alloc_flags){0};
        assert_int_equal(alloc_gpus_parse(bad[k], &f, err, sizeof(err)), GPO_EUSAGE);
        char want[256];
        snprintf(want, sizeof(want),
                 "--gpus: expected GPUs in all (1-1024) or a MIG profile (1g.10gb), got '%s'",
                 bad[k]);
        assert_string_equal(err, want);
        assert_int_equal(f.gpus, 0);
        assert_null(f.mig_profile);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpus_are_a_count_or_a_mig_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
