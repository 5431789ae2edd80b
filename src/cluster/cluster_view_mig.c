/*
 * cluster_view_mig.c - a job's MIG request as the core takes it
 * (core/model.h: sched_job.mig_types and mig_profile[]), resolved once per
 * job against core/mig.h's catalogue and the GPU types of the view.
 *
 * A profile by name ("mig_profile") sets the bit of every catalogue type
 * that has the profile, narrowed to the job's GPU type when it names one;
 * it must land on some GPU type the cluster has (else the job waits with
 * the reason, as a job that names a GPU type nobody has). A memory request
 * ("gpu_mem_mib") also sets the types whose smallest profile holds it, so
 * that it may take an instance on a MIG GPU as well as a share of a GPU
 * that is not in MIG mode; where none holds it, it sets nothing.
 */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "core/mig.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define KNOWN_MAX 200

/* The catalogue types of the view's GPU types (bit t: mig_type_at(t)). */
static uint8_t view_mig_types(const struct sched_cluster *c)
{
    uint8_t bits = 0;
    for (uint32_t i = 0; i < c->ngpu_types; i++) {
        const struct mig_type *t = mig_type_find(c->gpu_types[i].name);
        bits |= t ? (uint8_t)(1u << t->id) : 0;
    }
    return bits;
}

static const char *type_names(uint8_t bits, char buf[KNOWN_MAX])
{
    const char *names[MIG_NTYPES];
    size_t n = 0;
    for (unsigned t = 0; t < MIG_NTYPES; t++)
        if (bits & (1u << t))
            names[n++] = mig_type_at(t)->name;
    return cluster_names_list(names, n, buf, KNOWN_MAX);
}

int cluster_job_mig(const struct sched_cluster *c, const struct jobspec *spec, struct sched_job *j,
                    char *err, size_t errlen)
{
    j->mig_types = 0;
    memset(j->mig_profile, 0, sizeof(j->mig_profile));
    if (!spec->mig_profile && spec->gpu_mem_mib <= 0)
        return 0;
    /* The job's GPU type narrows the catalogue to its entry (none: no MIG). */
    uint8_t allowed = (uint8_t)((1u << MIG_NTYPES) - 1);
    if (j->gpu_type != SCHED_ANY && j->gpu_type < c->ngpu_types) {
        const struct mig_type *t = mig_type_find(c->gpu_types[j->gpu_type].name);
        allowed = t ? (uint8_t)(1u << t->id) : 0;
    }
    struct mig_request req = {.profile = spec->mig_profile,
                              .mem_mib = spec->mig_profile ? 0 : (uint64_t)spec->gpu_mem_mib};
    for (unsigned t = 0; t < MIG_NTYPES; t++) {
        int k = (allowed & (1u << t)) ? mig_request_resolve(mig_type_at(t), &req) : GPO_ENOENT;
        if (k < 0)
            continue;
        j->mig_types |= (uint8_t)(1u << t);
        j->mig_profile[t] = (uint8_t)k;
    }
    if (!spec->mig_profile)
        return 0;
    uint8_t present = view_mig_types(c);
    if (!(j->mig_types & present)) {
        char here[KNOWN_MAX], has[KNOWN_MAX];
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "MIG profile '%s': no GPU type of the cluster has it (its MIG GPU "
                          "types: %s; the profile's: %s)",
                          spec->mig_profile, type_names(present, here),
                          type_names(j->mig_types, has));
    }
    return 0;
}
