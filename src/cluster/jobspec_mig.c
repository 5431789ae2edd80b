/*
 * jobspec_mig.c - "mig_profile" of a submission (jobspec.h): one MIG
 * instance of a profile of core/mig.h's catalogue, checked against the
 * fields it cannot go with and, when the job names one, its GPU type.
 *
 * Decisions the header leaves open:
 *  - The name is kept in its canonical spelling ("MIG 1g.10gb",
 *    "mig-1G.10GB" and "1g.10gb" are "1g.10gb"; "1g.10gb.me" is
 *    "1g.10gb+me"), so the API shows one form and the scheduler compares
 *    names as they are.
 *  - A job gets exactly one instance: CUDA shows a process one MIG device.
 *    So no GPUs (whole, a fraction or by memory), no per-node or per-task
 *    GPUs, no gang (nodes > 1, multi_node) and no exclusive node beside it;
 *    and no min_gpu_mem_mib, since the profile says the memory.
 *  - A GPU type is matched against the catalogue as the scheduler matches
 *    a job's type against the cluster's (cluster_gpu_type_match: "h100" is
 *    H100-80GB); the profile must exist on the type it names, or on one of
 *    the types a short name matches ("a100": A100-40GB or A100-80GB).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "cluster/jobspec_int.h"
#include "core/mig.h"
#include "util/jsonv.h"
#include "base/banned.h"

#define fail jobspec_fail

#define MIG_MSG_MAX 400

/* A profile's name as a user may write it: letters, digits, '.', '+', '-'
 * and the space of "MIG 1g.10gb". */
static bool profile_chars_ok(const char *s)
{
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '+' || c == '-' || c == ' '))
            return false;
    }
    return true;
}

static int check_fields(const struct jobspec *s, char *err, size_t errlen)
{
    static const char one[] = "one MIG instance per job (CUDA shows a process one MIG device)";
    if (s->gpus_per_node > 0 || s->gpus_per_task > 0)
        return fail(err, errlen, "fields 'mig_profile' and '%s' are exclusive: %s",
                    s->gpus_per_node > 0 ? "gpus_per_node" : "gpus_per_task", one);
    if (s->gpus > 0 || s->gpu_milli > 0)
        return fail(err, errlen,
                    "fields 'mig_profile' and 'gpus' are exclusive: ask for GPUs or for %s", one);
    if (s->gpu_mem_mib > 0)
        return fail(err, errlen,
                    "fields 'mig_profile' and 'gpu_mem_mib' are exclusive: ask for a profile or "
                    "for GPU memory (which maps to the smallest profile that holds it)");
    if (s->min_gpu_mem_mib > 0)
        return fail(err, errlen,
                    "fields 'mig_profile' and 'min_gpu_mem_mib' are exclusive: the profile says "
                    "the instance's memory");
    if (s->nodes > 1 || s->multi_node)
        return fail(err, errlen, "fields 'mig_profile' and '%s': %s, on one node",
                    s->nodes > 1 ? "nodes" : "multi_node", one);
    if (s->exclusive)
        return fail(err, errlen,
                    "fields 'mig_profile' and 'exclusive': an exclusive job holds whole nodes, "
                    "not one MIG instance");
    return 0;
}

/* The profile on the job's GPU type (or on one of the types a short name
 * matches). */
static int check_type(const struct jobspec *s, char *err, size_t errlen)
{
    const char *names[MIG_NTYPES];
    for (unsigned t = 0; t < MIG_NTYPES; t++)
        names[t] = mig_type_at(t)->name;
    char why[MIG_MSG_MAX];
    size_t at;
    int rc = cluster_gpu_type_match(names, MIG_NTYPES, s->gpu_type, &at, NULL, 0);
    if (rc == GPO_ENOENT) {
        const struct mig_type *none;
        (void)mig_type_lookup(s->gpu_type, &none, why, sizeof(why));
        return fail(err, errlen, "fields 'mig_profile' and 'gpu_type': %s", why);
    }
    if (rc == 0)
        return mig_profile_lookup(mig_type_at((unsigned)at), s->mig_profile, why, sizeof(why)) >= 0
                   ? 0
                   : fail(err, errlen, "fields 'mig_profile' and 'gpu_type': %s", why);
    /* A short name of several types: the profile on one of them. */
    size_t wl = strlen(s->gpu_type);
    for (unsigned t = 0; t < MIG_NTYPES; t++) {
        const char *dash = strchr(names[t], '-');
        if (dash && (size_t)(dash - names[t]) == wl &&
            strncasecmp(names[t], s->gpu_type, wl) == 0 &&
            mig_profile_lookup(mig_type_at(t), s->mig_profile, NULL, 0) >= 0)
            return 0;
    }
    return fail(err, errlen,
                "fields 'mig_profile' and 'gpu_type': no GPU type that '%s' names has MIG "
                "profile '%s'",
                s->gpu_type, s->mig_profile);
}

int jobspec_check_mig(struct wire *w, char *err, size_t errlen)
{
    struct jobspec *s = &w->spec;
    if (!s->mig_profile)
        return 0;
    if (!profile_chars_ok(s->mig_profile)) {
        char q[JSONV_QUOTE_MAX + 4];
        return fail(err, errlen,
                    "field 'mig_profile': '%s' may hold only letters, digits, '.', '+', '-' and "
                    "' ' (a MIG profile such as 1g.10gb)",
                    jsonv_quote(s->mig_profile, strlen(s->mig_profile), q));
    }
    const char *name = cluster_mig_profile_name(s->mig_profile);
    if (!name) {
        char why[MIG_MSG_MAX];
        return fail(err, errlen,
                    "field 'mig_profile': no GPU type has MIG profile '%s' (known: %s)",
                    s->mig_profile, cluster_mig_profiles_known(why, sizeof(why)));
    }
    if (strcmp(name, s->mig_profile) != 0) {
        size_t n = strlen(name) + 1;
        char *copy = malloc(n);
        if (!copy)
            return jobspec_out_of_memory(err, errlen);
        memcpy(copy, name, n);
        free(s->mig_profile);
        s->mig_profile = copy;
    }
    int rc = check_fields(s, err, errlen);
    return rc || !s->gpu_type ? rc : check_type(s, err, errlen);
}
