/* test_gpu_nvml.c - the NVML backend, run on the fake libnvidia-ml.so.1 of
 * tests/fakenvml/ (GPUORCH_FAKENVML names it; FAKENVML_CONFIG the JSON file
 * that scripts its GPUs): discovery (index, UUID, name, gpu_type, memory,
 * MIG, NVLink peers), samples that follow the file as it is rewritten, a
 * child started with CUDA_VISIBLE_DEVICES=<uuid> seen among its GPU's
 * processes, concurrent sampling, and errors that name the library, the
 * missing symbol or the failing NVML call. The tests that need the fake
 * are skipped when GPUORCH_FAKENVML is unset or empty; the gpu_type table
 * and the library errors run everywhere. Files live in a mkdtemp directory
 * removed at the end. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "gpu/gpu.h"
#include "base/banned.h"

#define NGPUS       4
#define DEADLINE_MS 10000 /* for a child to show up in /proc with its environment */

struct fake_gpu {
    const char *uuid, *name;
    int64_t memory_mib, memory_used_mib;
    int utilization, memory_utilization;
    int64_t power_mw;
    int temperature_c;
    bool mig_capable, mig_enabled;
    int npeers, peers[NGPUS];
    int64_t process_memory_mib;
};

/* GPU 3 lists GPU 0 as a peer but GPU 0 does not list it: one side suffices.
 * GPU 2 has no NVLink. */
static const struct fake_gpu base_gpus[NGPUS] = {
    {.uuid = "GPU-6b1d0f3e-0000-4000-8000-000000000000",
     .name = "NVIDIA H100 80GB HBM3",
     .memory_mib = 81559,
     .memory_used_mib = 4096,
     .utilization = 35,
     .memory_utilization = 10,
     .power_mw = 210000,
     .temperature_c = 41,
     .mig_capable = true,
     .npeers = 1,
     .peers = {1},
     .process_memory_mib = 1024},
    {.uuid = "GPU-6b1d0f3e-0000-4000-8000-000000000001",
     .name = "NVIDIA H100 80GB HBM3",
     .memory_mib = 81559,
     .power_mw = 95000,
     .temperature_c = 30,
     .mig_capable = true,
     .mig_enabled = true,
     .npeers = 1,
     .peers = {0},
     .process_memory_mib = 2048},
    {.uuid = "GPU-6b1d0f3e-0000-4000-8000-000000000002",
     .name = "NVIDIA L4",
     .memory_mib = 23034,
     .memory_used_mib = 100,
     .utilization = 7,
     .memory_utilization = 3,
     .power_mw = 16000,
     .temperature_c = 38,
     .process_memory_mib = 512},
    {.uuid = "GPU-6b1d0f3e-0000-4000-8000-000000000003",
     .name = "NVIDIA H200",
     .memory_mib = 143771,
     .power_mw = 80000,
     .temperature_c = 29,
     .mig_capable = true,
     .npeers = 1,
     .peers = {0},
     .process_memory_mib = 256},
};

struct env {
    char dir[64];
    char config[128];
    const char *lib; /* the fake; NULL: tests that need it are skipped */
    struct fake_gpu gpus[NGPUS];
    /* Closed or ended by the per-test teardown, also after a failed assert,
     * so that one failure does not leave the fake initialised for the next. */
    struct gpu_backend *b;
    pid_t child;
    int child_fd;
};

static int write_config(struct env *e)
{
    json_t *arr = json_array();
    for (int i = 0; i < NGPUS; i++) {
        const struct fake_gpu *g = &e->gpus[i];
        json_t *o = json_pack(
            "{s:s, s:s, s:I, s:I, s:i, s:i, s:I, s:i, s:b, s:b, s:I}", "uuid", g->uuid, "name",
            g->name, "memory_mib", (json_int_t)g->memory_mib, "memory_used_mib",
            (json_int_t)g->memory_used_mib, "utilization", g->utilization, "memory_utilization",
            g->memory_utilization, "power_mw", (json_int_t)g->power_mw, "temperature_c",
            g->temperature_c, "mig_capable", g->mig_capable, "mig_enabled", g->mig_enabled,
            "process_memory_mib", (json_int_t)g->process_memory_mib);
        /* Without the field a GPU has no NVLink at all. */
        if (o && g->npeers > 0) {
            json_t *peers = json_array();
            for (int p = 0; p < g->npeers; p++)
                json_array_append_new(peers, json_integer(g->peers[p]));
            json_object_set_new(o, "nvlink_peers", peers);
        }
        json_array_append_new(arr, o);
    }
    json_t *root = json_pack("{s:s, s:o}", "driver_version", "550.54.15", "gpus", arr);
    /* Written aside and renamed, so that the fake never reads half a file. */
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", e->config);
    int rc = root ? json_dump_file(root, tmp, JSON_INDENT(1)) : -1;
    json_decref(root);
    return rc == 0 ? rename(tmp, e->config) : -1;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) == 0 ? rc : -1;
}

static const char *fake_path(void);

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    if (!e)
        return -1;
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_gpu_nvml.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    snprintf(e->config, sizeof(e->config), "%s/fakenvml.json", e->dir);
    e->lib = fake_path();
    setenv("FAKENVML_CONFIG", e->config, 1);
    *state = e;
    return 0;
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s.tmp", e->config);
    unlink(tmp);
    unlink(e->config);
    rmdir(e->dir);
    free(e);
    return 0;
}

/* Each test starts from the base configuration. */
static int reset(void **state)
{
    struct env *e = *state;
    memcpy(e->gpus, base_gpus, sizeof(base_gpus));
    return e->lib ? write_config(e) : 0;
}

static int cleanup(void **state)
{
    struct env *e = *state;
    gpu_backend_close(e->b);
    e->b = NULL;
    if (e->child > 0) {
        close(e->child_fd);
        kill(e->child, SIGKILL);
        waitpid(e->child, NULL, 0);
        e->child = 0;
    }
    return 0;
}

static struct gpu_backend *open_fake(struct env *e)
{
    struct gpu_backend *b = NULL;
    char err[256] = "";
    int rc = gpu_backend_open(e->lib, &b, err, sizeof(err));
    if (rc != 0)
        print_error("gpu_backend_open: %d %s\n", rc, err);
    assert_int_equal(rc, 0);
    assert_non_null(b);
    e->b = b;
    return b;
}

static void open_discovers_every_gpu_with_its_identity(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    assert_string_equal(gpu_backend_name(b), "nvml");
    assert_int_equal(gpu_count(b), NGPUS);
    static const char *const types[NGPUS] = {"H100-80GB", "H100-80GB", "L4-24GB", "H200-141GB"};
    char seen_bus[NGPUS][GPU_PCI_BUS_ID_MAX];
    for (unsigned i = 0; i < NGPUS; i++) {
        struct gpu_info info;
        char err[256] = "";
        assert_int_equal(gpu_info(b, i, &info, err, sizeof(err)), 0);
        assert_int_equal(info.index, i);
        assert_string_equal(info.uuid, e->gpus[i].uuid);
        assert_string_equal(info.name, e->gpus[i].name);
        assert_string_equal(info.gpu_type, types[i]);
        assert_int_equal(info.memory_mib, e->gpus[i].memory_mib);
        assert_true(info.pci_bus_id[0] != '\0');
        for (unsigned j = 0; j < i; j++)
            assert_string_not_equal(info.pci_bus_id, seen_bus[j]);
        memcpy(seen_bus[i], info.pci_bus_id, sizeof(info.pci_bus_id));
    }
}

static void mig_mode_is_read_per_gpu(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    for (unsigned i = 0; i < NGPUS; i++) {
        struct gpu_info info;
        assert_int_equal(gpu_info(b, i, &info, NULL, 0), 0);
        assert_int_equal(info.mig_capable, e->gpus[i].mig_capable);
        assert_int_equal(info.mig_enabled, e->gpus[i].mig_enabled);
    }
    /* MIG mode is not cached: enabling it shows on the next call. */
    e->gpus[0].mig_enabled = true;
    assert_int_equal(write_config(e), 0);
    struct gpu_info info;
    assert_int_equal(gpu_info(b, 0, &info, NULL, 0), 0);
    assert_true(info.mig_capable && info.mig_enabled);
}

static void nvlink_peers_map_remote_pci_addresses_to_local_gpus(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    static const unsigned want_n[NGPUS] = {2, 1, 0, 1};
    static const unsigned want[NGPUS][2] = {{1, 3}, {0, 0}, {0, 0}, {0, 0}};
    for (unsigned i = 0; i < NGPUS; i++) {
        struct gpu_info info;
        assert_int_equal(gpu_info(b, i, &info, NULL, 0), 0);
        assert_int_equal(info.npeers, want_n[i]);
        for (unsigned p = 0; p < info.npeers; p++)
            assert_int_equal(info.peers[p], want[i][p]);
    }
}

static void sample_reports_the_configured_figures(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    const unsigned idx[] = {0, 2};
    for (size_t k = 0; k < 2; k++) {
        const struct fake_gpu *g = &e->gpus[idx[k]];
        struct gpu_sample s;
        char err[256] = "";
        assert_int_equal(gpu_sample(b, idx[k], &s, err, sizeof(err)), 0);
        assert_int_equal(s.utilization_pct, g->utilization);
        assert_int_equal(s.memory_utilization_pct, g->memory_utilization);
        assert_int_equal(s.memory_used_mib, g->memory_used_mib);
        assert_int_equal(s.memory_total_mib, g->memory_mib);
        assert_int_equal(s.power_mw, g->power_mw);
        assert_int_equal(s.temperature_c, g->temperature_c);
        assert_true(s.procs_known);
        gpu_sample_release(&s);
        assert_null(s.procs);
    }
}

static void rewriting_the_config_changes_the_next_sample(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    struct gpu_sample s;
    assert_int_equal(gpu_sample(b, 0, &s, NULL, 0), 0);
    assert_int_equal(s.utilization_pct, 35);
    gpu_sample_release(&s);
    e->gpus[0].utilization = 97;
    e->gpus[0].power_mw = 650000;
    e->gpus[0].temperature_c = 77;
    e->gpus[0].memory_used_mib = 70000;
    assert_int_equal(write_config(e), 0);
    assert_int_equal(gpu_sample(b, 0, &s, NULL, 0), 0);
    assert_int_equal(s.utilization_pct, 97);
    assert_int_equal(s.power_mw, 650000);
    assert_int_equal(s.temperature_c, 77);
    assert_int_equal(s.memory_used_mib, 70000);
    gpu_sample_release(&s);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The memory of `pid` in GPU gpu's process list, or -2 when it is absent. */
static int64_t proc_memory(const struct gpu_backend *b, unsigned gpu, pid_t pid)
{
    struct gpu_sample s;
    char err[256] = "";
    int rc = gpu_sample(b, gpu, &s, err, sizeof(err));
    if (rc != 0)
        print_error("gpu_sample: %d %s\n", rc, err);
    assert_int_equal(rc, 0);
    assert_true(s.procs_known);
    int64_t mib = -2;
    for (size_t k = 0; k < s.nprocs; k++)
        if (s.procs[k].pid == (uint32_t)pid)
            mib = s.procs[k].memory_mib;
    gpu_sample_release(&s);
    return mib;
}

/* A `cat` reading a pipe: it runs, with only CUDA_VISIBLE_DEVICES in its
 * environment, until the pipe is closed. */
static pid_t start_child(const char *uuid, int *ret_wfd)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char var[GPU_UUID_MAX + 32];
    snprintf(var, sizeof(var), "CUDA_VISIBLE_DEVICES=%s", uuid);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (dup2(fds[0], 0) < 0 || devnull < 0 || dup2(devnull, 1) < 0)
            _exit(126);
        close(fds[0]);
        close(fds[1]);
        char *const argv[] = {"cat", NULL};
        char *const envp[] = {var, NULL};
        execve("/bin/cat", argv, envp);
        _exit(127);
    }
    close(fds[0]);
    *ret_wfd = fds[1];
    return pid;
}

static void child_with_cuda_visible_devices_shows_up_in_its_gpus_processes(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    pid_t pid = start_child(e->gpus[1].uuid, &e->child_fd);
    e->child = pid;
    /* Until exec, the child still has this process's environment: poll. */
    int64_t mib = -2;
    for (int64_t deadline = now_ms() + DEADLINE_MS; mib == -2 && now_ms() < deadline;) {
        mib = proc_memory(b, 1, pid);
        if (mib == -2)
            nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    assert_int_equal(mib, e->gpus[1].process_memory_mib);
    assert_int_equal(proc_memory(b, 0, pid), -2);
    assert_int_equal(proc_memory(b, 2, pid), -2);
    close(e->child_fd);
    e->child = 0;
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(proc_memory(b, 1, pid), -2);
}

struct sampler {
    const struct gpu_backend *b;
    int failures;
};

static void *sample_loop(void *arg)
{
    struct sampler *t = arg;
    for (int round = 0; round < 50; round++) {
        for (unsigned i = 0; i < gpu_count(t->b); i++) {
            struct gpu_sample s;
            struct gpu_info info;
            if (gpu_sample(t->b, i, &s, NULL, 0) != 0 || gpu_info(t->b, i, &info, NULL, 0) != 0 ||
                info.index != i)
                t->failures++;
            else
                gpu_sample_release(&s);
        }
    }
    return NULL;
}

static void samples_from_many_threads_at_once_all_succeed(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    pthread_t th[4];
    struct sampler t[4];
    for (int k = 0; k < 4; k++) {
        t[k] = (struct sampler){.b = b};
        assert_int_equal(pthread_create(&th[k], NULL, sample_loop, &t[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        assert_int_equal(pthread_join(th[k], NULL), 0);
        assert_int_equal(t[k].failures, 0);
    }
}

static void bad_index_and_null_arguments_are_refused(void **state)
{
    struct env *e = *state;
    struct gpu_backend *b = open_fake(e);
    struct gpu_info info = {.index = 77};
    struct gpu_sample s = {.nprocs = 5};
    char err[256] = "";
    assert_int_equal(gpu_info(b, NGPUS, &info, err, sizeof(err)), GPO_ENOENT);
    assert_non_null(strstr(err, "no GPU 4"));
    assert_int_equal(info.index, 77);
    assert_int_equal(gpu_sample(b, 99, &s, err, sizeof(err)), GPO_ENOENT);
    assert_int_equal(s.nprocs, 5);
    assert_int_equal(gpu_info(b, 0, NULL, err, sizeof(err)), GPO_EINVAL);
    assert_int_equal(gpu_sample(NULL, 0, &s, NULL, 0), GPO_EINVAL);
    assert_int_equal(gpu_backend_open(e->lib, NULL, NULL, 0), GPO_EINVAL);
    assert_int_equal(gpu_count(NULL), 0);
    assert_string_equal(gpu_backend_name(NULL), "");
    gpu_backend_close(NULL);
    gpu_sample_release(NULL);
}

static void malformed_config_fails_open_with_nvmls_error_text(void **state)
{
    struct env *e = *state;
    assert_int_equal(write_text(e->config, "{\"gpus\": [\n"), 0);
    /* The expected text comes from the library itself. */
    void *dl = dlopen(e->lib, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(dl);
    const char *(*error_string)(int);
    void *sym = dlsym(dl, "nvmlErrorString");
    assert_non_null(sym);
    memcpy(&error_string, &sym, sizeof(sym));
    char want[256];
    snprintf(want, sizeof(want), "nvmlInit_v2: %s (NVML error 999)", error_string(999));
    dlclose(dl);

    static struct gpu_backend sentinel;
    struct gpu_backend *b = &sentinel; /* must stay as it is */
    char err[256] = "";
    assert_int_equal(gpu_backend_open(e->lib, &b, err, sizeof(err)), GPO_EIO);
    assert_string_equal(err, want);
    assert_ptr_equal(b, &sentinel);
}

static void missing_library_is_named_in_the_error(void **state)
{
    (void)state;
    const char *path = "/nonexistent/gpuorch/libnvidia-ml.so.1";
    struct gpu_backend *b = NULL;
    char err[512] = "";
    assert_int_equal(gpu_backend_open(path, &b, err, sizeof(err)), GPO_ELIBACC);
    assert_null(b);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "cannot open shared object file"));
    /* The driver's library, where none is installed, says what is missing. */
    int rc = gpu_backend_open(NULL, &b, err, sizeof(err));
    if (rc == 0) {
        gpu_backend_close(b); /* a machine with a driver */
        return;
    }
    if (rc == GPO_ELIBACC) {
        assert_non_null(strstr(err, "libnvidia-ml.so.1: cannot open shared object file"));
        assert_non_null(strstr(err, "(no NVIDIA driver?)"));
    }
}

static void library_without_nvml_names_the_missing_symbol(void **state)
{
    (void)state;
    struct gpu_backend *b = NULL;
    char err[512] = "";
    assert_int_equal(gpu_backend_open("libc.so.6", &b, err, sizeof(err)), GPO_ELIBBAD);
    assert_null(b);
    assert_non_null(strstr(err, "libc.so.6 lacks nvmlInit_v2"));
    assert_int_equal(gpu_backend_open("", &b, err, sizeof(err)), GPO_EINVAL);
}

static void gpu_type_from_name_follows_the_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t memory_mib;
        const char *want;
    } cases[] = {
        {"NVIDIA H100 80GB HBM3", 81559, "H100-80GB"},
        {"NVIDIA A100-SXM4-40GB", 40536, "A100-40GB"},
        {"Tesla V100-SXM2-16GB", 16160, "V100-16GB"},
        {"NVIDIA H200", 141 * 1024, "H200-141GB"},
        {"NVIDIA H200", 143771, "H200-141GB"},
        {"NVIDIA L4", 23034, "L4-24GB"},
        {"NVIDIA A100 80GB PCIe", 81920, "A100-80GB"},
        {"NVIDIA A100-PCIE-40GB", 40960, "A100-40GB"},
        {"NVIDIA H100 PCIe", 81559, "H100-80GB"},
        {"NVIDIA H100 NVL", 95830, "H100-94GB"},
        {"Tesla T4", 15360, "T4-16GB"},
        {"NVIDIA A10G", 23028, "A10G-24GB"},
        {"NVIDIA L40S", 46068, "L40S-48GB"},
        {"NVIDIA RTX A6000", 49140, "RTX-A6000-48GB"},
        {"NVIDIA GeForce RTX 4090", 24564, "RTX-4090-24GB"},
        {"NVIDIA B200", 183359, "B200-180GB"},
        {"Tesla V100S-PCIE-32GB", 32510, "V100S-32GB"},
        {"NVIDIA H100 80GB HBM3", 0, "H100-80GB"}, /* the name's size wins */
        {"NVIDIA Odd", 50 * 1024 + 1, "Odd-51GB"}, /* no marketed size near: rounded up */
        {"NVIDIA Future", 400 * 1024, "Future-400GB"},
        {"NVIDIA L4", 0, "L4"},                      /* no memory known */
        {"NVIDIA", 8192, "GPU-8GB"},                 /* no model left */
        {"  NVIDIA  A30 / x ", 24576, "A30-x-24GB"}, /* separators and odd characters */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[GPU_TYPE_MAX] = "";
        int rc = gpu_type_from_name(cases[i].name, cases[i].memory_mib, buf, sizeof(buf));
        if (rc != 0 || strcmp(buf, cases[i].want) != 0)
            print_error("'%s' %lld MiB: rc %d, got '%s', want '%s'\n", cases[i].name,
                        (long long)cases[i].memory_mib, rc, buf, cases[i].want);
        assert_int_equal(rc, 0);
        assert_string_equal(buf, cases[i].want);
    }
    char small[10] = "keep";
    assert_int_equal(gpu_type_from_name("NVIDIA H100 80GB HBM3", 0, small, 9), GPO_ENOBUFS);
    assert_string_equal(small, "keep");
    assert_int_equal(gpu_type_from_name("NVIDIA H100 80GB HBM3", 0, small, 10), 0);
    assert_string_equal(small, "H100-80GB");
    assert_int_equal(gpu_type_from_name(NULL, 0, small, sizeof(small)), GPO_EINVAL);
}

static const char *fake_path(void)
{
    const char *lib = getenv("GPUORCH_FAKENVML");
    return lib && *lib && access(lib, R_OK) == 0 ? lib : NULL;
}

int main(void)
{
    /* The tests that need the fake come last, so that without it the run
     * stops before them: cmocka 1.1's skip() prints "not ok ... # SKIP",
     * which TAP readers count as a failure. */
    static const struct CMUnitTest tests[] = {
        cmocka_unit_test(missing_library_is_named_in_the_error),
        cmocka_unit_test(library_without_nvml_names_the_missing_symbol),
        cmocka_unit_test(gpu_type_from_name_follows_the_table),
#define NPLAIN 4
        cmocka_unit_test_setup_teardown(open_discovers_every_gpu_with_its_identity, reset, cleanup),
        cmocka_unit_test_setup_teardown(mig_mode_is_read_per_gpu, reset, cleanup),
        cmocka_unit_test_setup_teardown(nvlink_peers_map_remote_pci_addresses_to_local_gpus, reset,
                                        cleanup),
        cmocka_unit_test_setup_teardown(sample_reports_the_configured_figures, reset, cleanup),
        cmocka_unit_test_setup_teardown(rewriting_the_config_changes_the_next_sample, reset,
                                        cleanup),
        cmocka_unit_test_setup_teardown(
            child_with_cuda_visible_devices_shows_up_in_its_gpus_processes, reset, cleanup),
        cmocka_unit_test_setup_teardown(samples_from_many_threads_at_once_all_succeed, reset,
                                        cleanup),
        cmocka_unit_test_setup_teardown(bad_index_and_null_arguments_are_refused, reset, cleanup),
        cmocka_unit_test_setup_teardown(malformed_config_fails_open_with_nvmls_error_text, reset,
                                        cleanup),
    };
    size_t n = sizeof(tests) / sizeof(tests[0]);
    if (!fake_path()) {
        for (size_t i = NPLAIN; i < n; i++)
            printf("# SKIP %s: GPUORCH_FAKENVML names no readable fake libnvidia-ml.so.1\n",
                   tests[i].name);
        fflush(stdout);
        n = NPLAIN;
    }
    return _cmocka_run_group_tests("gpu_nvml", tests, n, group_setup, group_teardown);
}
