/* test_gpu_mig.c - the NVML backend's MIG functions (gpu.h, "MIG"), run on
 * the fake libnvidia-ml.so.1 (GPUORCH_FAKENVML; FAKENVML_CONFIG the GPU file
 * written here): the state read (profiles with NVIDIA's names and ids,
 * placements, instances with MIG UUIDs), creating and destroying instances,
 * the errors that name the NVML call, MIG mode with a reset pending, the
 * name rule, and `gpuorch agent --probe` printing it all (GPUORCH_BIN).
 * The expected names, ids and placements are NVIDIA's published tables
 * (tests/fakenvml/README.md cites them). Files live in a mkdtemp directory
 * removed at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "gpu/gpu.h"
#include "base/banned.h"

/* GPU 0: H100 in MIG mode; 1: A100 40GB in MIG mode; 2: L4; 3: H200 in MIG
 * mode; 4: H100 not in MIG mode (index 4, which no other test's children
 * name in CUDA_VISIBLE_DEVICES: the fake counts a process naming the
 * index). %s: UUIDs, then GPU 0's extra fields. */
#define CONFIG_FMT                                                                                 \
    "{\"gpus\": [\n"                                                                               \
    " {\"uuid\": \"%s\", \"mig_enabled\": true %s},\n"                                             \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA A100-SXM4-40GB\", \"memory_mib\": 40536,\n"            \
    "  \"mig_enabled\": true},\n"                                                                  \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA L4\", \"memory_mib\": 23034, \"mig_capable\": "        \
    "false},\n"                                                                                    \
    " {\"uuid\": \"%s\", \"name\": \"NVIDIA H200\", \"memory_mib\": 143771, \"mig_enabled\": "     \
    "true},\n"                                                                                     \
    " {\"uuid\": \"%s\"}]}\n"

struct env {
    char dir[64], config[128], state[160];
    char uuid[5][GPU_UUID_MAX];
    const char *lib, *bin;
    struct gpu_backend *b;
    pid_t child;
    int child_fd;
};

static void write_config(struct env *e, const char *gpu0_extra)
{
    char text[2048], tmp[160];
    snprintf(text, sizeof(text), CONFIG_FMT, e->uuid[0], gpu0_extra, e->uuid[1], e->uuid[2],
             e->uuid[3], e->uuid[4]);
    snprintf(tmp, sizeof(tmp), "%s.tmp", e->config);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rename(tmp, e->config), 0);
}

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    e->lib = getenv("GPUORCH_FAKENVML");
    e->bin = getenv("GPUORCH_BIN");
    if (!e->lib || !*e->lib) {
        fprintf(stderr, "GPUORCH_FAKENVML must name libnvidia-ml.so.1\n");
        return -1;
    }
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_gpu_mig.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    snprintf(e->config, sizeof(e->config), "%s/gpus.json", e->dir);
    snprintf(e->state, sizeof(e->state), "%s.state", e->config);
    setenv("FAKENVML_CONFIG", e->config, 1);
    unsetenv("FAKENVML_STATE");
    unsetenv("FAKENVML_RESET");
    for (unsigned i = 0; i < 5; i++)
        snprintf(e->uuid[i], sizeof(e->uuid[i]), "GPU-%08x-9a11-4000-8000-%012x",
                 (unsigned)getpid(), i);
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    char p[200];
    unlink(e->config);
    unlink(e->state);
    snprintf(p, sizeof(p), "%s.lock", e->state);
    unlink(p);
    rmdir(e->dir);
    free(e);
    return 0;
}

static int setup(void **state)
{
    struct env *e = *state;
    unlink(e->state);
    write_config(e, "");
    char err[256] = "";
    int rc = gpu_backend_open(e->lib, &e->b, err, sizeof(err));
    if (rc)
        fprintf(stderr, "gpu_backend_open: %s\n", err);
    return rc ? -1 : 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    gpu_backend_close(e->b);
    e->b = NULL;
    if (e->child > 0) {
        close(e->child_fd);
        waitpid(e->child, NULL, 0);
        e->child = 0;
    }
    return 0;
}

static struct gpu_mig *read_mig(const struct env *e, unsigned gpu)
{
    static struct gpu_mig m; /* large: not on the stack */
    char err[512] = "";
    int rc = gpu_mig_read(e->b, gpu, &m, err, sizeof(err));
    if (rc)
        print_error("gpu_mig_read(%u): %d %s\n", gpu, rc, err);
    assert_int_equal(rc, 0);
    return &m;
}

static const struct gpu_mig_profile *profile(const struct gpu_mig *m, unsigned id)
{
    for (unsigned i = 0; i < m->nprofiles; i++)
        if (m->profiles[i].id == id)
            return &m->profiles[i];
    fail_msg("no profile id %u", id);
    return NULL;
}

/* Starts /bin/cat with CUDA_VISIBLE_DEVICES=cvd; returns once it has exec'd. */
static void spawn_child(struct env *e, const char *cvd)
{
    int in[2], sync[2];
    char var[128];
    snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", cvd);
    char *const argv[] = {(char *)"cat", NULL};
    char *const envp[] = {var, NULL};
    assert_int_equal(pipe2(in, O_CLOEXEC), 0);
    assert_int_equal(pipe2(sync, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (dup2(in[0], STDIN_FILENO) >= 0)
            execve("/bin/cat", argv, envp);
        _exit(127);
    }
    close(in[0]);
    close(sync[1]);
    char c;
    ssize_t got;
    while ((got = read(sync[0], &c, 1)) < 0 && errno == EINTR)
        ;
    close(sync[0]);
    assert_int_equal(got, 0);
    e->child = pid;
    e->child_fd = in[1];
}

static void stop_child(struct env *e)
{
    close(e->child_fd);
    assert_int_equal(waitpid(e->child, NULL, 0), e->child);
    e->child = 0;
}

/* ---- reading ---- */

static void profiles_carry_nvidias_names_ids_and_placements(void **state)
{
    struct env *e = *state;
    static const struct {
        unsigned gpu;
        const char *names[7]; /* ids 19, 20, 15, 14, 9, 5, 0 */
    } cases[] = {
        {0, {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
        {3, {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
        {1, {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
    };
    static const unsigned ids[7] = {19, 20, 15, 14, 9, 5, 0};
    static const unsigned slices[7] = {1, 1, 1, 2, 3, 4, 7};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct gpu_mig *m = read_mig(e, cases[c].gpu);
        assert_true(m->capable && m->enabled && m->pending);
        assert_int_equal(m->nprofiles, 7);
        assert_int_equal(m->memory_slices, 8);
        assert_int_equal(m->ninstances, 0);
        for (size_t i = 0; i < 7; i++) {
            const struct gpu_mig_profile *p = profile(m, ids[i]);
            assert_string_equal(p->name, cases[c].names[i]);
            assert_int_equal(p->slices, slices[i]);
            assert_int_not_equal(p->index, p->id); /* 3g: index 2, id 9; 7g: 4 and 0 */
        }
        /* Ascending index: 1g (0), 2g, 3g, 4g, 7g (4), 1g+me (7), 1g.2x (9). */
        for (unsigned i = 1; i < m->nprofiles; i++)
            assert_true(m->profiles[i - 1].index < m->profiles[i].index);
    }
    const struct gpu_mig_profile *p3 = profile(read_mig(e, 0), 9);
    assert_int_equal(p3->index, 2);
    assert_int_equal(p3->memory_slices, 4);
    assert_int_equal(p3->nplacements, 2);
    assert_int_equal(p3->placements[0].start, 0);
    assert_int_equal(p3->placements[1].start, 4);
    assert_int_equal(p3->instances_max, 2);
    const struct gpu_mig_profile *p1 = profile(read_mig(e, 0), 19);
    assert_int_equal(p1->nplacements, 7);
    assert_int_equal(p1->placements[6].start, 6);
}

static void gpus_without_mig_or_outside_mig_mode_list_no_profiles(void **state)
{
    struct env *e = *state;
    const struct gpu_mig *m = read_mig(e, 2);
    assert_false(m->capable);
    m = read_mig(e, 4);
    assert_true(m->capable);
    assert_false(m->enabled || m->pending);
    assert_int_equal(m->nprofiles, 0);
    struct gpu_mig_instance inst;
    char err[512] = "";
    assert_int_equal(gpu_mig_create(e->b, 4, 19, 0, &inst, err, sizeof(err)), GPO_ENOTSUP);
    assert_non_null(strstr(err, "GPU 4: not in MIG mode"));
    assert_int_equal(gpu_mig_create(e->b, 2, 19, 0, &inst, err, sizeof(err)), GPO_ENOTSUP);
    assert_int_equal(gpu_mig_read(e->b, 9, NULL, err, sizeof(err)), GPO_EINVAL);
    static struct gpu_mig big;
    assert_int_equal(gpu_mig_read(e->b, 9, &big, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(gpu_mig_read(NULL, 0, &big, err, sizeof(err)), GPO_EINVAL);
}

static void the_gpu_files_instances_are_read_with_their_uuids(void **state)
{
    struct env *e = *state;
    write_config(e, ", \"mig_instances\": [{\"profile_id\": 19, \"start\": 6}, "
                    "{\"profile_id\": 9, \"start\": 0}]");
    const struct gpu_mig *m = read_mig(e, 0);
    assert_int_equal(m->ninstances, 2);
    const struct gpu_mig_instance *a = &m->instances[0], *b = &m->instances[1];
    assert_int_equal(a->id, 1); /* ascending id: 3g at 0 is 1, 1g at 6 is 13 */
    assert_int_equal(a->profile_id, 9);
    assert_string_equal(a->profile, "3g.40gb");
    assert_int_equal(a->placement.start, 0);
    assert_int_equal(a->placement.size, 4);
    assert_int_equal(a->ncompute, 1);
    assert_int_equal(a->compute[0].slices, 3);
    assert_int_equal(b->id, 13);
    assert_string_equal(b->profile, "1g.10gb");
    assert_int_equal(strlen(a->compute[0].uuid), 40);
    assert_memory_equal(a->compute[0].uuid, "MIG-", 4);
    assert_string_not_equal(a->compute[0].uuid, b->compute[0].uuid);
    assert_int_equal(a->memory_mib, profile(m, 9)->memory_mib);
}

/* ---- changing ---- */

static void instances_are_created_at_placements_and_destroyed(void **state)
{
    struct env *e = *state;
    struct gpu_mig_instance inst;
    char err[512] = "";
    int rc = gpu_mig_create(e->b, 0, 9, 4, &inst, err, sizeof(err));
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(inst.id, 2);
    assert_int_equal(inst.profile_id, 9);
    assert_int_equal(inst.placement.start, 4);
    assert_int_equal(inst.placement.size, 4);
    assert_int_equal(inst.ncompute, 1);
    assert_int_equal(inst.compute[0].slices, 3); /* one compute instance spans it */
    assert_memory_equal(inst.compute[0].uuid, "MIG-", 4);
    assert_int_equal(gpu_mig_create(e->b, 0, 5, 0, &inst, err, sizeof(err)), 0);
    assert_int_equal(inst.id, 1);
    const struct gpu_mig *m = read_mig(e, 0);
    assert_int_equal(m->ninstances, 2);
    /* Full: an overlap is NVML's INSUFFICIENT_RESOURCES, named. */
    struct gpu_mig_instance keep = {.id = 77};
    assert_int_equal(gpu_mig_create(e->b, 0, 19, 0, &keep, err, sizeof(err)), GPO_ENOSPC);
    assert_non_null(strstr(err, "nvmlDeviceCreateGpuInstanceWithPlacement(GPU 0)"));
    assert_int_equal(keep.id, 77);
    /* Ids, not indices: index 2 is 3g, but no profile has id 2. */
    assert_int_equal(gpu_mig_create(e->b, 0, 2, 0, &keep, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "no MIG profile id 2"));
    assert_non_null(strstr(err, "9 (3g.40gb)"));
    assert_int_equal(gpu_mig_create(e->b, 0, 9, 2, &keep, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "3g.40gb cannot start at memory slice 2; it starts at 0, 4"));
    assert_int_equal(gpu_mig_destroy(e->b, 0, 2, err, sizeof(err)), 0);
    assert_int_equal(gpu_mig_destroy(e->b, 0, 2, err, sizeof(err)), GPO_ENOENT);
    assert_non_null(strstr(err, "GPU 0: no MIG instance 2"));
    m = read_mig(e, 0);
    assert_int_equal(m->ninstances, 1);
    assert_int_equal(m->instances[0].id, 1);
    /* The freed half takes two 2g instances. */
    assert_int_equal(gpu_mig_create(e->b, 0, 14, 4, &inst, err, sizeof(err)), 0);
    assert_int_equal(gpu_mig_create(e->b, 0, 14, 6, &inst, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(gpu_mig_create(e->b, 0, 19, 6, &inst, err, sizeof(err)), 0);
    assert_int_equal(read_mig(e, 0)->ninstances, 3);
}

static void an_instance_in_use_is_not_destroyed(void **state)
{
    struct env *e = *state;
    struct gpu_mig_instance inst;
    char err[512] = "";
    assert_int_equal(gpu_mig_create(e->b, 3, 15, 2, &inst, err, sizeof(err)), 0);
    assert_string_equal(inst.profile, "1g.35gb");
    spawn_child(e, inst.compute[0].uuid);
    struct gpu_sample s;
    assert_int_equal(gpu_sample(e->b, 3, &s, err, sizeof(err)), 0);
    bool seen = false;
    for (size_t k = 0; k < s.nprocs; k++)
        if (s.procs[k].pid == (uint32_t)e->child) {
            seen = true;
            assert_int_equal(s.procs[k].gpu_instance_id, inst.id);
            assert_int_equal(s.procs[k].compute_instance_id, inst.compute[0].id);
        }
    gpu_sample_release(&s);
    assert_true(seen);
    assert_int_equal(gpu_mig_destroy(e->b, 3, inst.id, err, sizeof(err)), GPO_EBUSY);
    assert_non_null(strstr(err, "nvmlComputeInstanceDestroy(GPU 3)"));
    assert_int_equal(read_mig(e, 3)->ninstances, 1);
    stop_child(e);
    assert_int_equal(gpu_mig_destroy(e->b, 3, inst.id, err, sizeof(err)), 0);
    assert_int_equal(read_mig(e, 3)->ninstances, 0);
}

static void mig_mode_changes_at_once_when_idle_and_waits_for_a_reset_when_busy(void **state)
{
    struct env *e = *state;
    bool pending = true;
    char err[512] = "";
    assert_int_equal(gpu_mig_set_mode(e->b, 4, true, &pending, err, sizeof(err)), 0);
    assert_false(pending);
    const struct gpu_mig *m = read_mig(e, 4);
    assert_true(m->enabled && m->pending);
    assert_int_equal(m->nprofiles, 7);
    struct gpu_info info;
    assert_int_equal(gpu_info(e->b, 4, &info, err, sizeof(err)), 0);
    assert_true(info.mig_enabled);
    spawn_child(e, e->uuid[4]);
    assert_int_equal(gpu_mig_set_mode(e->b, 4, false, &pending, err, sizeof(err)), 0);
    assert_true(pending);
    m = read_mig(e, 4);
    assert_true(m->enabled);
    assert_false(m->pending);
    stop_child(e);
    assert_int_equal(gpu_mig_set_mode(e->b, 2, true, &pending, err, sizeof(err)), GPO_ENOTSUP);
    assert_non_null(strstr(err, "nvmlDeviceSetMigMode(GPU 2)"));
    assert_int_equal(gpu_mig_set_mode(e->b, 4, true, NULL, err, sizeof(err)), GPO_EINVAL);
}

static void profile_names_follow_the_rule(void **state)
{
    (void)state;
    static const struct {
        unsigned slices, mem, total;
        int64_t gb, mib;
        bool media;
        const char *want;
    } cases[] = {
        {1, 1, 8, 80, 9984, false, "1g.10gb"}, {1, 2, 8, 80, 0, false, "1g.20gb"},
        {3, 4, 8, 80, 0, false, "3g.40gb"},    {7, 8, 8, 80, 0, false, "7g.80gb"},
        {1, 1, 8, 141, 0, false, "1g.18gb"},   {1, 2, 8, 141, 0, false, "1g.35gb"},
        {3, 4, 8, 141, 0, false, "3g.71gb"},   {7, 8, 8, 141, 0, false, "7g.141gb"},
        {1, 1, 8, 40, 0, true, "1g.5gb+me"},   {2, 2, 8, 40, 0, false, "2g.10gb"},
        {1, 1, 4, 24, 0, false, "1g.6gb"},     {4, 4, 4, 24, 0, false, "4g.24gb"},  /* A30 */
        {1, 1, 8, 180, 0, false, "1g.23gb"},   {3, 4, 8, 180, 0, false, "3g.90gb"}, /* B200 */
        {1, 1, 8, -1, 9984, false, "1g.10gb"}, {2, 2, 8, 0, 20480, false, "2g.20gb"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[GPU_MIG_NAME_MAX] = "";
        assert_int_equal(gpu_mig_profile_name(cases[i].slices, cases[i].mem, cases[i].total,
                                              cases[i].gb, cases[i].mib, cases[i].media, buf,
                                              sizeof(buf)),
                         0);
        assert_string_equal(buf, cases[i].want);
    }
    char small[7] = "keep";
    assert_int_equal(gpu_mig_profile_name(1, 1, 8, 80, 0, false, small, sizeof(small)),
                     GPO_ENOBUFS);
    assert_string_equal(small, "keep");
    assert_int_equal(gpu_mig_profile_name(0, 1, 8, 80, 0, false, small, sizeof(small)), GPO_EINVAL);
    assert_int_equal(gpu_type_memory_gb("H200-141GB"), 141);
    assert_int_equal(gpu_type_memory_gb("L4"), -1);
}

/* ---- the probe ---- */

static json_t *run_probe(const struct env *e)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' agent --probe --nvml '%s' 2>/dev/null", e->bin, e->lib);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    json_error_t jerr;
    json_t *root = json_loadf(p, 0, &jerr);
    assert_int_equal(pclose(p), 0);
    if (!root)
        print_error("probe output: %s\n", jerr.text);
    assert_non_null(root);
    return root;
}

static void the_probe_prints_each_mig_gpus_state(void **state)
{
    struct env *e = *state;
    assert_true(e->bin && *e->bin); /* GPUORCH_BIN names gpuorch */
    write_config(e, ", \"mig_instances\": [{\"profile_id\": 9, \"start\": 4}]");
    const struct gpu_mig *m = read_mig(e, 0);
    char uuid[GPU_UUID_MAX];
    memcpy(uuid, m->instances[0].compute[0].uuid, sizeof(uuid));
    json_t *root = run_probe(e);
    json_t *devs = json_object_get(root, "devices");
    assert_int_equal(json_array_size(devs), 5);
    json_t *mig = json_object_get(json_array_get(devs, 0), "mig");
    assert_string_equal(json_string_value(json_object_get(mig, "current")), "enabled");
    assert_string_equal(json_string_value(json_object_get(mig, "pending")), "enabled");
    json_t *profiles = json_object_get(mig, "profiles");
    assert_int_equal(json_array_size(profiles), 7);
    bool found = false;
    size_t i;
    json_t *pj;
    json_array_foreach(profiles, i, pj)
    {
        if (json_integer_value(json_object_get(pj, "id")) != 9)
            continue;
        found = true;
        assert_string_equal(json_string_value(json_object_get(pj, "name")), "3g.40gb");
        json_t *pl = json_object_get(pj, "placements");
        assert_int_equal(json_array_size(pl), 2);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(pl, 1), "start")), 4);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(pl, 1), "size")), 4);
    }
    assert_true(found);
    json_t *inst = json_array_get(json_object_get(mig, "instances"), 0);
    assert_int_equal(json_array_size(json_object_get(mig, "instances")), 1);
    assert_int_equal(json_integer_value(json_object_get(inst, "id")), 2);
    assert_string_equal(json_string_value(json_object_get(inst, "profile")), "3g.40gb");
    assert_string_equal(json_string_value(json_object_get(inst, "uuid")), uuid);
    /* A GPU outside MIG mode: its mode, no profiles; one without MIG: null. */
    json_t *off = json_object_get(json_array_get(devs, 4), "mig");
    assert_string_equal(json_string_value(json_object_get(off, "current")), "disabled");
    assert_int_equal(json_array_size(json_object_get(off, "profiles")), 0);
    assert_true(json_is_null(json_object_get(json_array_get(devs, 2), "mig")));
    json_decref(root);
    /* Read only: the probe wrote no MIG state. */
    assert_int_equal(access(e->state, F_OK), -1);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(profile_names_follow_the_rule),
        T(profiles_carry_nvidias_names_ids_and_placements),
        T(gpus_without_mig_or_outside_mig_mode_list_no_profiles),
        T(the_gpu_files_instances_are_read_with_their_uuids),
        T(instances_are_created_at_placements_and_destroyed),
        T(an_instance_in_use_is_not_destroyed),
        T(mig_mode_changes_at_once_when_idle_and_waits_for_a_reset_when_busy),
        T(the_probe_prints_each_mig_gpus_state),
    };
#undef T
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
