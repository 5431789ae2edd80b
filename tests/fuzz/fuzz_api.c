/* fuzz_api.c - libFuzzer target: any bytes as the body of one of the
 * controller's routes (the first byte picks which), parsed as src/http
 * parses a body and decoded by the function its handler calls:
 *
 *   POST /v1/jobs                       jobspec_decode
 *   PUT  /v1/nodes/NAME                 proto_register_decode, cluster_node_check
 *   POST /v1/nodes/NAME/heartbeat       proto_heartbeat_decode
 *   POST /v1/nodes/NAME/attempts/J/A    proto_report_decode
 *   PUT  /v1/users/NAME                 cluster_user_decode
 *   POST /v1/users/NAME/tokens?label=L  the label's checks (the bytes are L)
 *   PUT  /v1/{teams,pools,priority-classes,prices}/NAME  cluster_X_decode
 *                                       (what `gpuorch apply` sends)
 *
 * A refusal is one non-empty line. What is accepted must hold what the
 * docs promise of it: every name, UUID, address and message one line of
 * text (util/text.h); a heartbeat's figures in their ranges, memory used
 * within the total, no GPU twice, a process's ids together, and nothing
 * that proto_gpu_sample_fit would change; a node and a job with at least
 * one CPU and one MiB. tests/fuzz/run.sh builds and runs it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster/cluster.h"
#include "cluster/jobspec.h"
#include "proto/proto.h"
#include "util/jsonv.h"
#include "util/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must(bool cond)
{
    if (!cond)
        abort();
}

static void one_line(const char *err)
{
    must(err[0] && !strchr(err, '\n')); /* every refusal says why, on one line */
}

/* A control character as text.h defines it, byte by byte: the oracle the
 * shared check is compared with. */
static bool has_control(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7F || (p[0] == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F))
            return true;
    }
    return false;
}

static bool is_line(const char *s)
{
    return !s || !has_control(s);
}

static bool in(int64_t v, int64_t lo, int64_t hi)
{
    return v == PROTO_NONE || (v >= lo && v <= hi);
}

static void job_submit(json_t *body)
{
    struct jobspec s;
    char err[512] = "";
    if (jobspec_decode(body, &s, err, sizeof(err))) {
        one_line(err);
        return;
    }
    must(s.cpus >= 1 && s.mem_mib >= 1 && is_line(s.name));
    jobspec_release(&s);
}

static void node_register(json_t *body)
{
    struct proto_register r;
    char err[512] = "";
    if (proto_register_decode(body, &r, err, sizeof(err))) {
        one_line(err);
        return;
    }
    must(r.cpus >= 1 && r.mem_mib >= 1 && is_line(r.pool) && is_line(r.addr) && is_line(r.name));
    struct cluster_gpu gpus[PROTO_GPUS_MAX];
    for (size_t k = 0; k < r.ngpus; k++) {
        const struct proto_gpu *g = &r.gpus[k];
        must(is_line(g->uuid) && is_line(g->gpu_type));
        for (size_t j = 0; j < k; j++)
            must(g->index != r.gpus[j].index && strcmp(g->uuid, r.gpus[j].uuid) != 0);
        gpus[k] = (struct cluster_gpu){.index = g->index,
                                       .uuid = g->uuid,
                                       .gpu_type = g->gpu_type,
                                       .mem_mib = g->mem_mib,
                                       .nvlink_domain = g->nvlink_domain,
                                       .mig_slices = g->mig_slices,
                                       .mig_enabled = g->mig_enabled};
    }
    /* The node as the handler builds it (strings borrowed), through the
     * configuration's check. */
    struct cluster_node n = {.name = "fuzz",
                             .pool = r.pool,
                             .cpus = r.cpus,
                             .mem_mib = r.mem_mib,
                             .addr = r.addr,
                             .log_port = r.log_port,
                             .gpus = gpus,
                             .ngpus = r.ngpus};
    if (cluster_node_check(&n, err, sizeof(err)))
        one_line(err);
    proto_register_release(&r);
}

static void sample_holds(const struct proto_gpu_sample *g)
{
    must(is_line(g->uuid) && is_line(g->error) && (!g->uuid != !g->error));
    must(in(g->utilization_pct, 0, PROTO_PCT_MAX) &&
         in(g->memory_utilization_pct, 0, PROTO_PCT_MAX));
    must(in(g->memory_used_mib, 0, PROTO_GPU_MEM_MAX) &&
         in(g->memory_total_mib, 0, PROTO_GPU_MEM_MAX));
    must(g->memory_used_mib == PROTO_NONE || g->memory_total_mib == PROTO_NONE ||
         g->memory_used_mib <= g->memory_total_mib);
    must(in(g->power_mw, 0, PROTO_POWER_MW_MAX) &&
         in(g->temperature_c, PROTO_TEMP_MIN_C, PROTO_TEMP_MAX_C));
    for (size_t k = 0; k < g->nprocs; k++) {
        const struct proto_process *p = &g->procs[k];
        must(in(p->pid, 1, PROTO_PID_MAX) && in(p->memory_mib, 0, PROTO_GPU_MEM_MAX));
        must((p->job == PROTO_NONE) == (p->attempt == PROTO_NONE));
    }
    /* A decoded sample is one the agent's fitting leaves alone. */
    struct proto_gpu_sample fitted = *g;
    struct proto_process procs[8];
    size_t n = g->nprocs < 8 ? g->nprocs : 8;
    if (n)
        memcpy(procs, g->procs, n * sizeof(*procs));
    fitted.procs = procs;
    fitted.nprocs = n;
    fitted.error = NULL; /* fitting text is in place: checked by is_line above */
    proto_gpu_sample_fit(&fitted);
    must(fitted.utilization_pct == g->utilization_pct && fitted.power_mw == g->power_mw &&
         fitted.memory_used_mib == g->memory_used_mib && fitted.temperature_c == g->temperature_c);
    must(!n || memcmp(procs, g->procs, n * sizeof(*procs)) == 0);
}

static void node_heartbeat(json_t *body)
{
    struct proto_heartbeat h;
    char err[512] = "";
    if (proto_heartbeat_decode(body, &h, err, sizeof(err))) {
        one_line(err);
        return;
    }
    for (size_t i = 0; i < h.ngpus; i++) {
        sample_holds(&h.gpus[i]);
        for (size_t j = 0; j < i; j++)
            must(h.gpus[i].index != h.gpus[j].index &&
                 (!h.gpus[i].uuid || !h.gpus[j].uuid || strcmp(h.gpus[i].uuid, h.gpus[j].uuid)));
    }
    for (size_t k = 0; k < h.ndirty; k++)
        must(is_line(h.dirty[k]));
    proto_heartbeat_release(&h);
}

static void attempt_report(json_t *body)
{
    struct proto_report r;
    char err[512] = "";
    if (proto_report_decode(body, &r, err, sizeof(err))) {
        one_line(err);
        return;
    }
    must(is_line(r.reason) && (!r.reason || strlen(r.reason) <= PROTO_REASON_MAX));
    for (size_t k = 0; k < r.ndirty; k++)
        must(is_line(r.dirty_gpus[k]));
    proto_report_release(&r);
}

/* The label's checks as users.c makes them. */
static void token_label(const uint8_t *data, size_t size)
{
    char label[256];
    if (size >= sizeof(label) || memchr(data, 0, size))
        return; /* longer than the route takes; a query value holds no NUL */
    memcpy(label, data, size);
    label[size] = '\0';
    if (jsonv_check_utf8(label, size) != 0)
        return; /* refused before: not UTF-8 */
    char err[160] = "";
    int rc = text_check_line("label", label, err, sizeof(err));
    must((rc != 0) == has_control(label));
    if (rc)
        one_line(err);
}

/* As config_put_plan and user_put decode a body whose "name" the path
 * gave (api_body_named); fuzz_cluster.c checks what they show reads back. */
#define CONFIG(kind)                                                                               \
    static void config_##kind(json_t *body)                                                        \
    {                                                                                              \
        struct cluster_##kind x;                                                                   \
        char err[512] = "";                                                                        \
        json_object_set_new(body, "name", json_string("fuzz"));                                    \
        if (cluster_##kind##_decode(body, 0, &x, err, sizeof(err)) == 0)                           \
            cluster_##kind##_release(&x);                                                          \
        else                                                                                       \
            one_line(err);                                                                         \
    }

CONFIG(user)
CONFIG(team)
CONFIG(pool)
CONFIG(class)
CONFIG(price)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static void (*const routes[])(json_t *) = {
        job_submit,  node_register, node_heartbeat, attempt_report, config_user,
        config_team, config_pool,   config_class,   config_price,
    };
    const size_t nroutes = sizeof(routes) / sizeof(routes[0]);
    if (size < 1)
        return 0;
    size_t route = data[0] % (nroutes + 1);
    if (route == nroutes) {
        token_label(data + 1, size - 1);
        return 0;
    }
    /* As src/http reads a JSON body: duplicates refused, an object only. */
    json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (body && json_is_object(body))
        routes[route](body);
    json_decref(body);
    return 0;
}
