/*
 * metrics.c - MIG's GET /metrics families (mig.h): per instance, with
 * dcgm-exporter's labels for a GPU (gpu, UUID, device, modelName, Hostname)
 * and for a GPU instance (GPU_I_PROFILE, GPU_I_ID), as its MIG series carry
 * them; and the plans by outcome.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/mig/mig_int.h"
#include "server/srv.h"
#include "util/prom.h"
#include "base/banned.h"

/* The memory of job `job`'s processes on GPU `uuid` in the node's last
 * sample (on a MIG GPU a job holds one instance, so that is the
 * instance's), or -1 when the sample does not list them. */
static int64_t job_memory(const struct node_rt *rt, const char *uuid, int64_t job)
{
    for (size_t g = 0; rt && rt->has_sample && g < rt->sample.ngpus; g++) {
        const struct proto_gpu_sample *o = &rt->sample.gpus[g];
        if (!o->uuid || strcmp(o->uuid, uuid) != 0 || !o->procs_known)
            continue;
        int64_t mem = 0;
        for (size_t p = 0; p < o->nprocs; p++)
            if (o->procs[p].job == job && o->procs[p].memory_mib != PROTO_NONE)
                mem += o->procs[p].memory_mib;
        return mem;
    }
    return -1;
}

static void instance_samples(const struct server *s, const struct migctl_holders *held,
                             struct prom *p, bool memory)
{
    for (size_t k = 0; k < s->cluster.nnodes; k++) {
        const struct cluster_node *n = &s->cluster.nodes[k];
        const struct node_rt *rt = nodes_find(&s->nodes, n->name);
        for (size_t g = 0; g < n->ngpus; g++) {
            const struct cluster_gpu *gpu = &n->gpus[g];
            char index[12], device[20];
            snprintf(index, sizeof(index), "%" PRIu32, gpu->index);
            snprintf(device, sizeof(device), "nvidia%s", index);
            for (size_t i = 0; gpu->mig_enabled && i < gpu->nmig; i++) {
                const struct cluster_mig_instance *mi = &gpu->mig[i];
                char gi[12], job[24] = "", profile[24];
                snprintf(gi, sizeof(gi), "%" PRIu32, mi->gi_id);
                if (mi->profile)
                    snprintf(profile, sizeof(profile), "%s", mi->profile);
                else
                    snprintf(profile, sizeof(profile), "id-%" PRIu32, mi->profile_id);
                int64_t holder = migctl_holders_find(held, n->name, gpu->uuid, mi->start);
                if (holder)
                    snprintf(job, sizeof(job), "%" PRId64, holder);
                const char *l[] = {"gpu",      index,   "UUID",          gpu->uuid,
                                   "device",   device,  "modelName",     gpu->gpu_type,
                                   "Hostname", n->name, "GPU_I_PROFILE", profile,
                                   "GPU_I_ID", gi,      "hpc_job",       job,
                                   NULL};
                if (!memory) {
                    prom_sample(p, "gpuorch_mig_instance_info", l, 1);
                    continue;
                }
                int64_t mem = holder ? job_memory(rt, gpu->uuid, holder) : 0;
                if (mem >= 0)
                    prom_sample(p, "gpuorch_mig_instance_memory_used_mib", l, (double)mem);
            }
        }
    }
}

void migctl_metrics(const struct server *s, struct prom *p)
{
    prom_family(p, "gpuorch_mig_instance_info", PROM_GAUGE,
                "A MIG GPU instance a node reports (1), with the job that holds it in hpc_job "
                "(empty: free).");
    struct migctl_holders held;
    if (migctl_holders_build(s, &held))
        held = (struct migctl_holders){0}; /* out of memory: every instance shown free */
    instance_samples(s, &held, p, false);
    prom_family(p, "gpuorch_mig_instance_memory_used_mib", PROM_GAUGE,
                "GPU memory the processes of the job holding a MIG instance use (in MiB), "
                "where the node's heartbeat lists them; 0 for a free instance.");
    instance_samples(s, &held, p, true);
    migctl_holders_release(&held);
    prom_family(p, "gpuorch_mig_plans_total", PROM_COUNTER,
                "MIG repartition plans the controller sent, by outcome (sent, done, failed, "
                "timed_out: dropped without a report).");
    const struct migctl *m = s->mig;
    const struct {
        const char *name;
        uint64_t v;
    } out[] = {{"sent", m ? m->sent : 0},
               {"done", m ? m->ok : 0},
               {"failed", m ? m->failed : 0},
               {"timed_out", m ? m->timed_out : 0}};
    for (size_t k = 0; k < sizeof(out) / sizeof(out[0]); k++) {
        const char *labels[] = {"outcome", out[k].name, NULL};
        prom_sample(p, "gpuorch_mig_plans_total", labels, (double)out[k].v);
    }
}
