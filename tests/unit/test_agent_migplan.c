/* test_agent_migplan.c - MIG repartition plans applied by the agent
 * (agent/migplan.h), on the fake libnvidia-ml.so.1 (GPUORCH_FAKENVML) in
 * MIG mode: a plan of 1g instances on an empty GPU makes them, each with a
 * MIG UUID, as a second backend (another process's view: the state file)
 * reads them; an instance a process runs on is never destroyed, and the
 * result shows the layout unchanged; a GPU not in MIG mode is refused and
 * stays so; a wrong profile, an unknown GPU, a placement that overlaps
 * fail naming them; applying a plan again ends as once; the records make
 * a plan id apply once, across polls and across a restart; sampler
 * reports the instances. Files live in a mkdtemp directory removed at the
 * end. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/migplan.h"
#include "agent/sampler.h"
#include "gpu/gpu.h"
#include "base/banned.h"

#define P1G 19 /* H100's profile ids */
#define P2G 14
#define P3G 9

struct env {
    char dir[64], config[128], state[160], records[128];
    char uuid[3][GPU_UUID_MAX];
    const char *lib;
    struct gpu_backend *b;
    pid_t child;
};

static void write_config(struct env *e, const char *gpu0)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "{\"gpus\": [{\"uuid\": \"%s\", \"mig_enabled\": true %s},"
             " {\"uuid\": \"%s\", \"mig_enabled\": false},"
             " {\"uuid\": \"%s\", \"name\": \"NVIDIA L4\", \"memory_mib\": 23034,"
             " \"mig_capable\": false}]}",
             e->uuid[0], gpu0, e->uuid[1], e->uuid[2]);
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", e->config);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, e->config), 0);
}

static void no_log(const char *fmt, ...)
{
    (void)fmt;
}

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    e->lib = getenv("GPUORCH_FAKENVML");
    if (!e->lib || !*e->lib) {
        fprintf(stderr, "GPUORCH_FAKENVML must name libnvidia-ml.so.1\n");
        return -1;
    }
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_agent_migplan.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    snprintf(e->config, sizeof(e->config), "%s/gpus.json", e->dir);
    snprintf(e->state, sizeof(e->state), "%s.state", e->config);
    snprintf(e->records, sizeof(e->records), "%s/mig", e->dir);
    setenv("FAKENVML_CONFIG", e->config, 1);
    unsetenv("FAKENVML_STATE");
    unsetenv("FAKENVML_RESET");
    for (unsigned i = 0; i < 3; i++)
        snprintf(e->uuid[i], sizeof(e->uuid[i]), "GPU-%08x-a11c-4000-8000-%012x",
                 (unsigned)getpid(), i);
    *state = e;
    return 0;
}

static void remove_records(const struct env *e)
{
    DIR *d = opendir(e->records);
    for (struct dirent *x; d && (x = readdir(d));) {
        char p[400];
        snprintf(p, sizeof(p), "%s/%s", e->records, x->d_name);
        if (x->d_name[0] != '.')
            unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(e->records);
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    char p[200];
    unlink(e->config);
    unlink(e->state);
    snprintf(p, sizeof(p), "%s.lock", e->state);
    unlink(p);
    remove_records(e);
    rmdir(e->dir);
    free(e);
    return 0;
}

/* Each test: the GPU file with GPU 0's instances, a fresh state. */
static int open_with(struct env *e, const char *gpu0)
{
    unlink(e->state);
    write_config(e, gpu0);
    char err[256] = "";
    int rc = gpu_backend_open(e->lib, &e->b, err, sizeof(err));
    if (rc)
        fprintf(stderr, "gpu_backend_open: %s\n", err);
    return rc;
}

static int setup(void **state)
{
    return open_with(*state, "") ? -1 : 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    gpu_backend_close(e->b);
    e->b = NULL;
    if (e->child > 0) {
        kill(e->child, SIGKILL);
        waitpid(e->child, NULL, 0);
        e->child = 0;
    }
    remove_records(e);
    return 0;
}

/* GPU gpu's MIG state as another process would read it: a second backend
 * on the same files. */
static struct gpu_mig *read_fresh(const struct env *e, unsigned gpu)
{
    static struct gpu_mig m; /* large: not on the stack */
    struct gpu_backend *b = NULL;
    char err[256] = "";
    assert_int_equal(gpu_backend_open(e->lib, &b, err, sizeof(err)), 0);
    int rc = gpu_mig_read(b, gpu, &m, err, sizeof(err));
    if (rc)
        fail_msg("gpu_mig_read(%u): %d %s", gpu, rc, err);
    gpu_backend_close(b);
    return &m;
}

static struct proto_mig_plan plan(uint64_t id, const char *gpu, struct proto_mig_change *destroy,
                                  size_t nd, struct proto_mig_change *create, size_t nc)
{
    return (struct proto_mig_plan){.id = id,
                                   .gpu_uuid = (char *)gpu,
                                   .destroy = destroy,
                                   .ndestroy = nd,
                                   .create = create,
                                   .ncreate = nc};
}

static struct proto_mig_result run(const struct env *e, const struct proto_mig_plan *p)
{
    struct proto_mig_result r;
    assert_int_equal(migplan_run(e->b, NULL, NULL, p, &r), 0);
    assert_string_equal(r.gpu_uuid, p->gpu_uuid);
    return r;
}

static void test_a_plan_of_1g_instances_makes_them_with_mig_uuids(void **state)
{
    struct env *e = *state;
    struct proto_mig_change c[7];
    for (unsigned k = 0; k < 7; k++)
        c[k] = (struct proto_mig_change){P1G, k};
    struct proto_mig_plan p = plan(1, e->uuid[0], NULL, 0, c, 7);
    struct proto_mig_result r = run(e, &p);
    if (!r.ok)
        fail_msg("%s", r.error);
    assert_null(r.error);
    assert_int_equal(r.nmig, 7);
    const struct gpu_mig *m = read_fresh(e, 0);
    assert_int_equal(m->ninstances, 7);
    for (unsigned k = 0; k < 7; k++) {
        assert_int_equal(m->instances[k].profile_id, P1G);
        assert_int_equal(m->instances[k].ncompute, 1);
        assert_memory_equal(m->instances[k].compute[0].uuid, "MIG-", 4);
        /* the result lists the same instances, UUID for UUID */
        bool listed = false;
        for (size_t j = 0; j < r.nmig; j++)
            listed |= r.mig[j].gi_id == m->instances[k].id && r.mig[j].uuid &&
                      strcmp(r.mig[j].uuid, m->instances[k].compute[0].uuid) == 0 &&
                      r.mig[j].start == m->instances[k].placement.start;
        assert_true(listed);
    }
    proto_mig_result_release(&r);
    /* applied again (an agent that crashed before its record): the same */
    r = run(e, &p);
    assert_true(r.ok);
    assert_int_equal(r.nmig, 7);
    assert_int_equal(read_fresh(e, 0)->ninstances, 7);
    proto_mig_result_release(&r);
}

/* A child whose CUDA_VISIBLE_DEVICES names mig_uuid: the fake lists it on
 * that MIG device and on its GPU. */
static pid_t run_on(const char *mig_uuid)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char var[160];
        snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", mig_uuid);
        char *const argv[] = {"sleep", "60", NULL}, *const envp[] = {var, NULL};
        execve("/bin/sleep", argv, envp);
        _exit(127);
    }
    return pid;
}

static void test_a_busy_instance_is_never_destroyed(void **state)
{
    struct env *e = *state;
    gpu_backend_close(e->b);
    assert_int_equal(open_with(e, ", \"mig_instances\": [{\"profile_id\": 9, \"start\": 0},"
                                  " {\"profile_id\": 9, \"start\": 4}]"),
                     0);
    const struct gpu_mig *m = read_fresh(e, 0);
    assert_int_equal(m->ninstances, 2);
    char busy_uuid[GPU_UUID_MAX];
    const struct gpu_mig_instance *at0 =
        m->instances[0].placement.start == 0 ? &m->instances[0] : &m->instances[1];
    snprintf(busy_uuid, sizeof(busy_uuid), "%s", at0->compute[0].uuid);
    e->child = run_on(busy_uuid);
    /* wait until NVML lists it */
    bool seen = false;
    for (int tries = 0; !seen && tries < 500; tries++) {
        struct gpu_sample s = {0};
        assert_int_equal(gpu_sample(e->b, 0, &s, NULL, 0), 0);
        for (size_t k = 0; k < s.nprocs; k++)
            seen |= s.procs[k].pid == (uint32_t)e->child && s.procs[k].gpu_instance_id == at0->id;
        gpu_sample_release(&s);
        if (!seen)
            usleep(10000);
    }
    assert_true(seen);
    /* destroy both 3g (the idle one at 4 too), make 1g in their place */
    struct proto_mig_change d[] = {{P3G, 4}, {P3G, 0}}, c[] = {{P1G, 0}, {P1G, 1}, {P1G, 4}};
    struct proto_mig_plan p = plan(2, e->uuid[0], d, 2, c, 3);
    struct proto_mig_result r = run(e, &p);
    assert_false(r.ok);
    if (!strstr(r.error, "at slot 0") || !strstr(r.error, "runs process") ||
        !strstr(r.error, "not destroyed"))
        fail_msg("error: %s", r.error);
    /* nothing changed: the idle one was not destroyed either */
    assert_int_equal(r.nmig, 2);
    m = read_fresh(e, 0);
    assert_int_equal(m->ninstances, 2);
    bool kept = false;
    for (unsigned k = 0; k < m->ninstances; k++)
        kept |= strcmp(m->instances[k].compute[0].uuid, busy_uuid) == 0;
    assert_true(kept);
    proto_mig_result_release(&r);
    /* the idle one alone may go */
    struct proto_mig_change d4[] = {{P3G, 4}}, c4[] = {{P1G, 4}, {P1G, 5}};
    p = plan(3, e->uuid[0], d4, 1, c4, 2);
    r = run(e, &p);
    if (!r.ok)
        fail_msg("%s", r.error);
    assert_int_equal(r.nmig, 3);
    proto_mig_result_release(&r);
}

static void test_plans_that_cannot_apply_say_why_and_change_nothing(void **state)
{
    struct env *e = *state;
    struct proto_mig_change c[] = {{P1G, 0}}, gone[] = {{P1G, 6}}, wrong[] = {{P2G, 0}},
                            overlap[] = {{P3G, 0}, {P2G, 2}};
    static const struct {
        unsigned gpu; /* 3: no such GPU */
        int which;    /* 0: create a 1g; 2: a 3g and a 2g that overlap it */
        const char *msg;
    } cases[] = {
        {1, 0, "MIG mode is off on GPU 1"},
        {2, 0, "has no MIG"},
        {3, 0, "no GPU GPU-nope on this node"},
        {0, 2, "creating 2g.20gb at slot 2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *gpu = cases[i].gpu < 3 ? e->uuid[cases[i].gpu] : "GPU-nope";
        struct proto_mig_plan p =
            cases[i].which == 2 ? plan(4, gpu, NULL, 0, overlap, 2) : plan(4, gpu, NULL, 0, c, 1);
        struct proto_mig_result r = run(e, &p);
        assert_false(r.ok);
        if (!strstr(r.error, cases[i].msg))
            fail_msg("case %zu: '%s', expected '%s'", i, r.error, cases[i].msg);
        proto_mig_result_release(&r);
    }
    /* MIG mode stays as it was: the agent never changes it */
    const struct gpu_mig *m = read_fresh(e, 1);
    assert_false(m->enabled);
    assert_false(m->pending);
    /* after the overlap, the 3g made first stays and is reported */
    m = read_fresh(e, 0);
    assert_int_equal(m->ninstances, 1);
    /* a profile that is not the one at that slot */
    struct proto_mig_plan p = plan(5, e->uuid[0], wrong, 1, NULL, 0);
    struct proto_mig_result r = run(e, &p);
    assert_false(r.ok);
    if (!strstr(r.error, "no instance 2g.20gb at slot 0 to destroy") ||
        !strstr(r.error, "is 3g.40gb"))
        fail_msg("%s", r.error);
    assert_int_equal(r.nmig, 1);
    proto_mig_result_release(&r);
    /* an instance named for destruction that is gone already: skipped */
    p = plan(6, e->uuid[0], gone, 1, NULL, 0);
    r = run(e, &p);
    if (!r.ok)
        fail_msg("%s", r.error);
    assert_int_equal(r.nmig, 1);
    proto_mig_result_release(&r);
}

static void test_a_plan_id_is_applied_once_across_polls_and_restarts(void **state)
{
    struct env *e = *state;
    struct migplan_config cfg = {.dir = e->records, .gpus = e->b, .log = no_log};
    struct migplan *mp = NULL;
    char err[256] = "";
    assert_int_equal(migplan_new(&cfg, &mp, err, sizeof(err)), 0);
    struct proto_mig_change c[] = {{P1G, 0}, {P1G, 1}}, c2[] = {{P2G, 4}};
    struct proto_mig_plan plans[] = {plan(9, e->uuid[0], NULL, 0, c2, 1),
                                     plan(8, e->uuid[0], NULL, 0, c, 2)};
    struct proto_assignments ans = {.mig_plans = plans, .nmig_plans = 2};
    migplan_apply(mp, &ans);
    assert_true(migplan_applied(mp, 8));
    assert_true(migplan_applied(mp, 9));
    assert_int_equal(read_fresh(e, 0)->ninstances, 3);
    /* someone destroys them; the same plans again are not reapplied */
    const struct gpu_mig *m = read_fresh(e, 0);
    unsigned ids[8], n = m->ninstances;
    for (unsigned k = 0; k < n; k++)
        ids[k] = m->instances[k].id;
    for (unsigned k = 0; k < n; k++)
        assert_int_equal(gpu_mig_destroy(e->b, 0, ids[k], NULL, 0), 0);
    migplan_apply(mp, &ans);
    assert_int_equal(read_fresh(e, 0)->ninstances, 0);
    /* the results are on disk, owed */
    char path[300];
    snprintf(path, sizeof(path), "%s/8.json", e->records);
    assert_int_equal(access(path, R_OK), 0);
    migplan_free(mp);
    /* a restarted agent knows them too */
    mp = NULL;
    assert_int_equal(migplan_new(&cfg, &mp, err, sizeof(err)), 0);
    assert_true(migplan_applied(mp, 8));
    migplan_apply(mp, &ans);
    assert_int_equal(read_fresh(e, 0)->ninstances, 0);
    /* an owed result is not forgotten when its plan is no longer listed */
    struct proto_assignments none = {0};
    migplan_apply(mp, &none);
    assert_true(migplan_applied(mp, 8));
    /* a new id is applied */
    struct proto_mig_plan later = plan(10, e->uuid[0], NULL, 0, c, 1);
    struct proto_assignments ans2 = {.mig_plans = &later, .nmig_plans = 1};
    migplan_apply(mp, &ans2);
    assert_int_equal(read_fresh(e, 0)->ninstances, 1);
    migplan_free(mp);
}

static void test_the_heartbeat_and_registration_list_the_instances(void **state)
{
    struct env *e = *state;
    gpu_backend_close(e->b);
    assert_int_equal(open_with(e, ", \"mig_instances\": [{\"profile_id\": 19, \"start\": 6},"
                                  " {\"profile_id\": 5, \"start\": 0}]"),
                     0);
    struct proto_heartbeat hb = {0};
    assert_int_equal(sampler_sample(e->b, NULL, &hb), 0);
    assert_int_equal(hb.ngpus, 3);
    assert_true(hb.gpus[0].mig_known && hb.gpus[0].mig_enabled);
    assert_int_equal(hb.gpus[0].nmig, 2);
    for (size_t k = 0; k < 2; k++) {
        assert_non_null(hb.gpus[0].mig[k].uuid);
        assert_memory_equal(hb.gpus[0].mig[k].uuid, "MIG-", 4);
        assert_true(hb.gpus[0].mig[k].ci_id >= 0);
    }
    assert_true(hb.gpus[1].mig_known);
    assert_false(hb.gpus[1].mig_enabled);
    assert_false(hb.gpus[2].mig_known); /* an L4 has no MIG to report */
    proto_heartbeat_release(&hb);
    struct proto_register reg = {0};
    char err[256] = "";
    assert_int_equal(sampler_inventory(e->b, &reg, err, sizeof(err)), 0);
    assert_int_equal(reg.gpus[0].nmig, 2);
    assert_int_equal(reg.gpus[1].nmig, 0);
    assert_false(reg.gpus[1].mig_pending);
    proto_register_release(&reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_plan_of_1g_instances_makes_them_with_mig_uuids,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_busy_instance_is_never_destroyed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_plans_that_cannot_apply_say_why_and_change_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_plan_id_is_applied_once_across_polls_and_restarts,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_heartbeat_and_registration_list_the_instances,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
