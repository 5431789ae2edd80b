/* test_agent_mps.c - an MPS client's environment (agent/mps.h), golden: a
 * fraction of an mps attempt gets its daemon's directories, ceil(milli/10)
 * as its active thread percentage and its memory as device 0's pinned
 * limit; a whole GPU, a MIG instance, several GPUs and an attempt without
 * mps get nothing; the job's own CUDA_MPS_* names are held back only for
 * a client; the launch's whole environment carries the variables once, the
 * job's own value of one of them dropped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/launch.h"
#include "agent/mps.h"
#include "base/err.h"
#include "base/banned.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define UUID "GPU-0000a1b2-0000-4000-8000-000000000001"

static char *env_text(const struct launch_strv *env)
{
    static char got[8192];
    size_t at = 0;
    got[0] = '\0';
    for (size_t k = 0; k < env->n; k++)
        at += (size_t)snprintf(got + at, sizeof(got) - at, "%s\n", env->v[k]);
    return got;
}

static const char *client_env(struct proto_share share, bool mps)
{
    struct proto_attempt a = {.mps = mps, .gpus = &share, .ngpus = 1};
    struct launch_strv env = {0};
    assert_int_equal(mps_env("/var/lib/gpuorch/agent", &a, &env), 0);
    const char *text = env_text(&env);
    launch_strv_release(&env);
    return text;
}

static void test_a_fraction_gets_its_daemon_share_and_memory(void **state)
{
    (void)state;
    assert_string_equal(client_env((struct proto_share){UUID, 250, 20389, NULL}, true),
                        "CUDA_MPS_PIPE_DIRECTORY=/var/lib/gpuorch/agent/mps/" UUID "/pipe\n"
                        "CUDA_MPS_LOG_DIRECTORY=/var/lib/gpuorch/agent/mps/" UUID "/log\n"
                        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n"
                        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20389M\n");
    /* Rounded up, so that a share never gets fewer threads than it holds. */
    assert_non_null(strstr(client_env((struct proto_share){UUID, 333, 1, NULL}, true),
                           "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=34\n"));
    assert_non_null(strstr(client_env((struct proto_share){UUID, 1, 1, NULL}, true),
                           "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1\n"));
    assert_non_null(strstr(client_env((struct proto_share){UUID, 999, 1, NULL}, true),
                           "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100\n"));
    /* A share without memory has no memory limit. */
    assert_null(strstr(client_env((struct proto_share){UUID, 500, 0, NULL}, true),
                       "PINNED_DEVICE_MEM_LIMIT"));
}

static void test_only_a_fraction_of_an_mps_attempt_is_a_client(void **state)
{
    (void)state;
    assert_string_equal(client_env((struct proto_share){UUID, 1000, 81559, NULL}, true), "");
    assert_string_equal(client_env((struct proto_share){UUID, 250, 20389, NULL}, false), "");
    assert_string_equal(client_env((struct proto_share){UUID, 250, 20389, "MIG-x"}, true), "");
    struct proto_share two[] = {{UUID, 500, 1, NULL}, {"GPU-b", 500, 1, NULL}};
    struct proto_attempt a = {.mps = true, .gpus = two, .ngpus = 2};
    assert_null(mps_gpu(&a));
    a.ngpus = 1;
    assert_string_equal(mps_gpu(&a), UUID);
    assert_true(mps_reserved(&a, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
    assert_true(mps_reserved(&a, "CUDA_MPS_PIPE_DIRECTORY"));
    assert_false(mps_reserved(&a, "CUDA_DEVICE_MAX_CONNECTIONS"));
    a.mps = false;
    assert_false(mps_reserved(&a, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
}

static void test_the_launch_sets_them_once_over_the_jobs_own(void **state)
{
    (void)state;
    struct proto_share share = {UUID, 500, 40779, NULL};
    char *argv[] = {"/bin/true", NULL};
    struct proto_env own[] = {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"}, {"SEED", "7"}};
    struct proto_attempt a = {.job = 5,
                              .attempt = 1,
                              .mps = true,
                              .gpus = &share,
                              .ngpus = 1,
                              .array_id = PROTO_NONE,
                              .array_index = PROTO_NONE,
                              .spec = {.argv = argv, .argc = 1, .env = own, .nenv = N(own)}};
    const char *const uuids[] = {UUID};
    struct launch_config cfg = {
        .node = "n1", .state_dir = "/s", .gpu_uuids = uuids, .ngpu_uuids = 1};
    struct launch l;
    char err[256];
    assert_int_equal(launch_prepare(&cfg, &a, &l, err, sizeof(err)), 0);
    const char *text = env_text(&l.env);
    assert_non_null(strstr(text, "\nSEED=7\n"));
    assert_non_null(strstr(text, "\nCUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50\n"));
    assert_null(strstr(text, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"));
    assert_non_null(strstr(text, "\nCUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40779M\n"));
    assert_non_null(strstr(text, "\nCUDA_VISIBLE_DEVICES=" UUID "\n"));
    launch_release(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_fraction_gets_its_daemon_share_and_memory),
        cmocka_unit_test(test_only_a_fraction_of_an_mps_attempt_is_a_client),
        cmocka_unit_test(test_the_launch_sets_them_once_over_the_jobs_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
