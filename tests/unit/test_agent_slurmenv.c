/* test_agent_slurmenv.c - the Slurm environment of a task, golden: the
 * exact variables, in order, for one node, a 2-node gang, an array task and
 * a task of a step (the node list in Slurm's compressed form, the tasks per
 * node in its repetition form); variables not asked for are not set; the
 * job's own env cannot set SLURM_* names; a task that cannot be is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/launch.h"
#include "agent/slurmenv.h"
#include "base/err.h"
#include "base/banned.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char *const node_gpus[] = {"GPU-a0", "GPU-a1", "GPU-a2", "GPU-a3"};

static struct launch_config config(const char *node)
{
    return (struct launch_config){.node = node,
                                  .state_dir = "/nonexistent",
                                  .as_root = true,
                                  .gpu_uuids = node_gpus,
                                  .ngpu_uuids = N(node_gpus)};
}

/* The variables env holds, one per line, against want[0, n). */
static void check_env(const struct launch_strv *env, const char *const *want, size_t n)
{
    char got[8192] = "", exp[8192] = "";
    size_t at = 0;
    for (size_t k = 0; k < env->n; k++)
        at += (size_t)snprintf(got + at, sizeof(got) - at, "%s\n", env->v[k]);
    at = 0;
    for (size_t k = 0; k < n; k++)
        at += (size_t)snprintf(exp + at, sizeof(exp) - at, "%s\n", want[k]);
    assert_string_equal(got, exp);
}

static void check_task(const struct launch_config *cfg, const struct proto_attempt *a,
                       const struct slurmenv_task *t, const char *const *want, size_t n)
{
    struct launch_strv env = {0};
    int rc = slurmenv_add(cfg, a, t, &env);
    if (rc)
        fail_msg("slurmenv_add: %s", gpo_strerror(rc));
    check_env(&env, want, n);
    launch_strv_release(&env);
}

static void test_one_node_job_gets_its_ids_resources_and_node(void **state)
{
    (void)state;
    struct proto_share gpus[] = {{"GPU-a1", 1000, 0}, {"GPU-a3", 1000, 0}};
    struct proto_attempt a = {.job = 42,
                              .attempt = 1,
                              .gpus = gpus,
                              .ngpus = N(gpus),
                              .user = "alice",
                              .unix_user = "nobody",
                              .array_id = PROTO_NONE,
                              .array_index = PROTO_NONE,
                              .pool = "h100",
                              .priority = "normal",
                              .spec = {.name = "train",
                                       .team = "ml",
                                       .cpus = 8,
                                       .mem_per_node_mib = 16384,
                                       .submit_dir = "/home/alice/proj"}};
    struct launch_config cfg = config("gpu07");
    struct slurmenv_task t = slurmenv_batch_task(&a);
    assert_int_equal(t.procid, 0);
    assert_int_equal(t.ntasks, 1);
    assert_int_equal(t.step, -1);
    const char *const want[] = {
        "SLURM_CLUSTER_NAME=gpuorch",
        "SLURM_JOB_ID=42",
        "SLURM_JOBID=42",
        "SLURM_JOB_NAME=train",
        "SLURM_JOB_USER=nobody",
        "SLURM_JOB_UID=65534",
        "SLURM_JOB_ACCOUNT=ml",
        "SLURM_JOB_PARTITION=h100",
        "SLURM_JOB_QOS=normal",
        "SLURM_SUBMIT_DIR=/home/alice/proj",
        "SLURM_JOB_NODELIST=gpu07",
        "SLURM_NODELIST=gpu07",
        "SLURM_JOB_NUM_NODES=1",
        "SLURM_NNODES=1",
        "SLURMD_NODENAME=gpu07",
        "SLURM_NODEID=0",
        "SLURM_NTASKS=1",
        "SLURM_NPROCS=1",
        "SLURM_TASKS_PER_NODE=1",
        "SLURM_PROCID=0",
        "SLURM_LOCALID=0",
        "SLURM_JOB_CPUS_PER_NODE=8",
        "SLURM_CPUS_ON_NODE=8",
        "SLURM_GPUS_ON_NODE=2",
        "SLURM_JOB_GPUS=1,3",
        "SLURM_MEM_PER_NODE=16384",
    };
    check_task(&cfg, &a, &t, want, N(want));
}

static void test_two_node_gang_rank_one_sees_the_compressed_list_and_its_tasks(void **state)
{
    (void)state;
    char *nodes[] = {"node01", "node02", NULL};
    struct proto_share gpus[8];
    for (size_t k = 0; k < N(gpus); k++)
        gpus[k] = (struct proto_share){(char *)"GPU-elsewhere", 1000, 0};
    struct proto_attempt a = {.job = 7,
                              .attempt = 1,
                              .gpus = gpus,
                              .ngpus = N(gpus),
                              .user = "bob",
                              .unix_user = "nobody",
                              .array_id = PROTO_NONE,
                              .array_index = PROTO_NONE,
                              .gang = {.nodes = nodes,
                                       .nnodes = 2,
                                       .rank = 1,
                                       .master_addr = "10.0.0.1",
                                       .master_port = 20007},
                              .spec = {.cpus = 32,
                                       .nodes = 2,
                                       .gpus_per_node = 8,
                                       .ntasks_per_node = 8,
                                       .cpus_per_task = 2,
                                       .mem_per_gpu_mib = 4096}};
    struct launch_config cfg = config("node02");
    struct slurmenv_task t = slurmenv_batch_task(&a);
    assert_int_equal(t.procid, 8);
    assert_int_equal(t.ntasks, 16);
    const char *const want[] = {
        "SLURM_CLUSTER_NAME=gpuorch",
        "SLURM_JOB_ID=7",
        "SLURM_JOBID=7",
        "SLURM_JOB_NAME=job",
        "SLURM_JOB_USER=nobody",
        "SLURM_JOB_UID=65534",
        "SLURM_JOB_NODELIST=node[01-02]",
        "SLURM_NODELIST=node[01-02]",
        "SLURM_JOB_NUM_NODES=2",
        "SLURM_NNODES=2",
        "SLURMD_NODENAME=node02",
        "SLURM_NODEID=1",
        "SLURM_NTASKS=16",
        "SLURM_NPROCS=16",
        "SLURM_TASKS_PER_NODE=8(x2)",
        "SLURM_NTASKS_PER_NODE=8",
        "SLURM_PROCID=8",
        "SLURM_LOCALID=0",
        "SLURM_JOB_CPUS_PER_NODE=16(x2)",
        "SLURM_CPUS_ON_NODE=16",
        "SLURM_CPUS_PER_TASK=2",
        "SLURM_GPUS_ON_NODE=8",
        "SLURM_GPUS_PER_NODE=8",
        "SLURM_MEM_PER_GPU=4096",
    };
    /* GPUs the node's table does not list: no SLURM_JOB_GPUS rather than a
     * wrong one. */
    check_task(&cfg, &a, &t, want, N(want));
}

static void test_array_task_has_its_own_job_id_and_the_arrays_figures(void **state)
{
    (void)state;
    struct proto_attempt a = {.job = 105,
                              .attempt = 2,
                              .user = "carol",
                              .unix_user = "nobody",
                              .array_id = 100,
                              .array_index = 5,
                              .spec = {.name = "sweep", .cpus = 1, .array = "0-15:5%2"}};
    struct launch_config cfg = config("n1");
    cfg.gpu_uuids = NULL;
    struct slurmenv_task t = slurmenv_batch_task(&a);
    const char *const want[] = {
        "SLURM_CLUSTER_NAME=gpuorch",
        "SLURM_JOB_ID=105",
        "SLURM_JOBID=105",
        "SLURM_JOB_NAME=sweep",
        "SLURM_JOB_USER=nobody",
        "SLURM_JOB_UID=65534",
        "SLURM_RESTART_COUNT=1",
        "SLURM_ARRAY_JOB_ID=100",
        "SLURM_ARRAY_TASK_ID=5",
        "SLURM_ARRAY_TASK_COUNT=4",
        "SLURM_ARRAY_TASK_MIN=0",
        "SLURM_ARRAY_TASK_MAX=15",
        "SLURM_ARRAY_TASK_STEP=5",
        "SLURM_JOB_NODELIST=n1",
        "SLURM_NODELIST=n1",
        "SLURM_JOB_NUM_NODES=1",
        "SLURM_NNODES=1",
        "SLURMD_NODENAME=n1",
        "SLURM_NODEID=0",
        "SLURM_NTASKS=1",
        "SLURM_NPROCS=1",
        "SLURM_TASKS_PER_NODE=1",
        "SLURM_PROCID=0",
        "SLURM_LOCALID=0",
        "SLURM_JOB_CPUS_PER_NODE=1",
        "SLURM_CPUS_ON_NODE=1",
        "SLURM_GPUS_ON_NODE=0",
    };
    check_task(&cfg, &a, &t, want, N(want));
}

/* The array's step when its indices are evenly spaced, else 1. */
static void test_array_step_is_one_for_unevenly_spaced_indices(void **state)
{
    (void)state;
    const struct {
        const char *text;
        const char *count, *min, *max, *step;
    } cases[] = {
        {"1,2,4", "3", "1", "4", "1"},
        {"10-30:10,0", "4", "0", "30", "10"},
        {"7", "1", "7", "7", "1"},
        {"0-99%8", "100", "0", "99", "1"},
    };
    for (size_t c = 0; c < N(cases); c++) {
        struct proto_attempt a = {.job = 3,
                                  .attempt = 1,
                                  .unix_user = "nobody",
                                  .array_id = 3,
                                  .array_index = 1,
                                  .spec = {.array = (char *)cases[c].text}};
        struct launch_config cfg = config("n1");
        struct slurmenv_task t = slurmenv_batch_task(&a);
        struct launch_strv env = {0};
        assert_int_equal(slurmenv_add(&cfg, &a, &t, &env), 0);
        char want[4][64];
        snprintf(want[0], sizeof(want[0]), "SLURM_ARRAY_TASK_COUNT=%s", cases[c].count);
        snprintf(want[1], sizeof(want[1]), "SLURM_ARRAY_TASK_MIN=%s", cases[c].min);
        snprintf(want[2], sizeof(want[2]), "SLURM_ARRAY_TASK_MAX=%s", cases[c].max);
        snprintf(want[3], sizeof(want[3]), "SLURM_ARRAY_TASK_STEP=%s", cases[c].step);
        size_t found = 0;
        for (size_t k = 0; k < env.n; k++) {
            for (size_t w = 0; w < 4; w++)
                found += strcmp(env.v[k], want[w]) == 0;
        }
        if (found != 4)
            fail_msg("array '%s': %zu of 4 figures right", cases[c].text, found);
        launch_strv_release(&env);
    }
}

static void test_step_task_gets_the_step_variables_and_block_layout(void **state)
{
    (void)state;
    char *nodes[] = {"node01", "node02", "node03", NULL};
    struct proto_share gpus[] = {{"GPU-a0", 1000, 0}};
    struct proto_attempt a = {
        .job = 9,
        .attempt = 1,
        .gpus = gpus,
        .ngpus = N(gpus),
        .user = "dan",
        .unix_user = "nobody",
        .array_id = PROTO_NONE,
        .array_index = PROTO_NONE,
        .pool = "main",
        .gang =
            {.nodes = nodes, .nnodes = 3, .rank = 2, .master_addr = "node01", .master_port = 20009},
        .spec = {.name = "mpi", .cpus = 3, .nodes = 3, .launch = PROTO_LAUNCH_FIRST_NODE}};
    struct launch_config cfg = config("node03");
    /* 5 tasks over 3 nodes in blocks: 2, 2, 1; this node's only task is 4. */
    struct slurmenv_task t = {.procid = 4, .localid = 0, .ntasks = 5, .step = 0};
    const char *const want[] = {
        "SLURM_CLUSTER_NAME=gpuorch",
        "SLURM_JOB_ID=9",
        "SLURM_JOBID=9",
        "SLURM_JOB_NAME=mpi",
        "SLURM_JOB_USER=nobody",
        "SLURM_JOB_UID=65534",
        "SLURM_JOB_PARTITION=main",
        "SLURM_JOB_NODELIST=node[01-03]",
        "SLURM_NODELIST=node[01-03]",
        "SLURM_JOB_NUM_NODES=3",
        "SLURM_NNODES=3",
        "SLURMD_NODENAME=node03",
        "SLURM_NODEID=2",
        "SLURM_NTASKS=5",
        "SLURM_NPROCS=5",
        "SLURM_TASKS_PER_NODE=2(x2),1",
        "SLURM_PROCID=4",
        "SLURM_LOCALID=0",
        "SLURM_STEP_ID=0",
        "SLURM_STEPID=0",
        "SLURM_STEP_NODELIST=node[01-03]",
        "SLURM_STEP_NUM_NODES=3",
        "SLURM_STEP_NUM_TASKS=5",
        "SLURM_STEP_TASKS_PER_NODE=2(x2),1",
        "SLURM_JOB_CPUS_PER_NODE=1(x3)",
        "SLURM_CPUS_ON_NODE=1",
        "SLURM_GPUS_ON_NODE=1",
        "SLURM_JOB_GPUS=0",
    };
    check_task(&cfg, &a, &t, want, N(want));
    /* The batch script of a first-node job is task 0 wherever it runs. */
    struct slurmenv_task b = slurmenv_batch_task(&a);
    assert_int_equal(b.procid, 0);
    assert_int_equal(b.ntasks, 3);
}

static void test_impossible_task_is_refused(void **state)
{
    (void)state;
    struct proto_attempt a = {
        .job = 1, .attempt = 1, .unix_user = "nobody", .array_id = PROTO_NONE};
    struct launch_config cfg = config("n1");
    const struct slurmenv_task bad[] = {
        {.procid = 0, .ntasks = 0, .step = -1},
        {.procid = 3, .ntasks = 3, .step = -1},
        {.procid = 1, .localid = 2, .ntasks = 3, .step = 0},
    };
    for (size_t k = 0; k < N(bad); k++) {
        struct launch_strv env = {0};
        assert_int_equal(slurmenv_add(&cfg, &a, &bad[k], &env), GPO_EINVAL);
        launch_strv_release(&env);
    }
}

/* launch_prepare puts the Slurm variables in, after the job's own env,
 * which cannot set them. */
static void test_jobs_env_cannot_set_slurm_names(void **state)
{
    (void)state;
    char *argv[] = {"/bin/true", NULL};
    struct proto_env env[] = {{"SLURM_JOB_ID", "999"},
                              {"SLURMD_NODENAME", "fake"},
                              {"SLURMX", "kept"},
                              {"HOME_DIR", "kept"}};
    struct proto_attempt a = {.job = 11,
                              .attempt = 1,
                              .user = "eve",
                              .array_id = PROTO_NONE,
                              .array_index = PROTO_NONE,
                              .spec = {.argv = argv, .argc = 1, .env = env, .nenv = N(env)}};
    struct launch_config cfg = config("n1");
    cfg.as_root = false;
    struct launch l;
    char err[256] = "";
    int rc = launch_prepare(&cfg, &a, &l, err, sizeof(err));
    if (rc)
        fail_msg("launch_prepare: %s", err);
    size_t job_ids = 0, nodenames = 0, kept = 0;
    for (size_t k = 0; k < l.req.nenv; k++) {
        const char *v = l.req.env[k];
        job_ids += strncmp(v, "SLURM_JOB_ID=", 13) == 0;
        nodenames += strncmp(v, "SLURMD_NODENAME=", 16) == 0;
        kept += strcmp(v, "SLURMX=kept") == 0 || strcmp(v, "HOME_DIR=kept") == 0;
        assert_string_not_equal(v, "SLURM_JOB_ID=999");
        assert_string_not_equal(v, "SLURMD_NODENAME=fake");
    }
    assert_int_equal(job_ids, 1);
    assert_int_equal(nodenames, 1);
    assert_int_equal(kept, 2); /* SLURMX is no Slurm name */
    launch_release(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_node_job_gets_its_ids_resources_and_node),
        cmocka_unit_test(test_two_node_gang_rank_one_sees_the_compressed_list_and_its_tasks),
        cmocka_unit_test(test_array_task_has_its_own_job_id_and_the_arrays_figures),
        cmocka_unit_test(test_array_step_is_one_for_unevenly_spaced_indices),
        cmocka_unit_test(test_step_task_gets_the_step_variables_and_block_layout),
        cmocka_unit_test(test_impossible_task_is_refused),
        cmocka_unit_test(test_jobs_env_cannot_set_slurm_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
