/*
 * submit_slurm.c - sbatch's resource directives as gpuorch takes them
 * (submit_int.h): nodes, GPUs per node or in all, memory per node, the
 * partition, --exclusive's values, and the directives that change nothing
 * gpuorch controls.
 *
 * Each setter cites the sbatch(1) text it follows. A directive whose meaning
 * gpuorch cannot honour is refused with its reason, never changed silently.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cli/sbatch.h"
#include "cli/submit_int.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

static json_t *gpus_json(int32_t milli)
{
    return milli % 1000 ? json_real(milli / 1000.0) : json_integer(milli / 1000);
}

/* Keys that say one amount in different ways: the last one given wins (the
 * command line's over the script's), as the others would contradict it. */
static const char *const gpu_keys[] = {"gpus", "gpus_per_node", "gpus_per_task", "mig_profile",
                                       NULL};
static const char *const mem_keys[] = {"mem_per_node_mib", "mem_per_cpu_mib", "mem_per_gpu_mib",
                                       "mem_whole_node", NULL};

static int put_one_of(struct build *b, const char *const *group, const char *key, json_t *v,
                      char *err, size_t errlen)
{
    for (size_t i = 0; group[i]; i++)
        json_object_del(b->body, group[i]);
    return submit_put(b, key, v, err, errlen);
}

/* PROFILE[:N] as "mig_profile": Slurm's MIG gres, whose type is the
 * profile; a job gets one instance (CUDA shows a process one MIG device),
 * so N is 1, and not per task. The profile is len bytes of v; `pre` is
 * what the flag's value had before v ("gpu:" of --gres), for messages. */
static int put_mig(struct build *b, const struct submit_flag *f, const char *pre, const char *v,
                   size_t len, const char *count, const char *key, char *err, size_t errlen)
{
    int64_t n = 1;
    char name[64];
    if (len >= sizeof(name) || (count && opts_parse_int(count, 0, SBATCH_GPUS_MAX, &n) != 0))
        return submit_bad_value(f, v, err, errlen);
    snprintf(name, sizeof(name), "%.*s", (int)len, v);
    if (strcmp(key, "gpus_per_task") == 0)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "a MIG profile (%s) is one instance per job, not per task: give "
                          "--gpus %s",
                          name, name);
    if (n != 1)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "%s%s:%lld asks for %lld MIG instances; a job gets one (CUDA shows a "
                          "process one MIG device): give %s%s:1, or submit an array of jobs "
                          "(--array)",
                          pre, name, (long long)n, (long long)n, pre, name);
    return put_one_of(b, gpu_keys, "mig_profile", json_string(name), err, errlen);
}

/* [TYPE:]N as `key` (and "gpu_type"); a fraction of one GPU always as
 * "gpus", the one field that takes it; a MIG profile as TYPE or alone as
 * "mig_profile". */
static int put_gpus(struct build *b, const struct submit_flag *f, const char *v, const char *key,
                    char *err, size_t errlen)
{
    const char *colon = strrchr(v, ':'), *pre = strcmp(f->opt.name, "gres") == 0 ? "gpu:" : "";
    if (colon && sbatch_is_mig_profile(v, (size_t)(colon - v)))
        return put_mig(b, f, pre, v, (size_t)(colon - v), colon + 1, key, err, errlen);
    if (!colon && sbatch_is_mig_profile(v, strlen(v)))
        return put_mig(b, f, pre, v, strlen(v), NULL, key, err, errlen);
    int32_t milli;
    if (sbatch_parse_gpus(colon ? colon + 1 : v, &milli) != 0 || (colon && colon == v))
        return submit_bad_value(f, v, err, errlen);
    if (colon) {
        char type[256];
        snprintf(type, sizeof(type), "%.*s", (int)(colon - v), v);
        int rc = submit_put_text(b, "gpu_type", type, err, errlen);
        if (rc)
            return rc;
    }
    return put_one_of(b, gpu_keys, milli % 1000 ? "gpus" : key, gpus_json(milli), err, errlen);
}

/* sbatch(1): "-G, --gpus=[type:]<number> Specify the total number of GPUs
 * required for the job." */
int submit_set_gpus(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen)
{
    return put_gpus(b, f, v, "gpus", err, errlen);
}

/* sbatch(1): "--gpus-per-node=[type:]<number> Specify the number of GPUs
 * required for the job on each node included in the job's resource
 * allocation." */
/* sbatch(1): "--gpus-per-task=[type:]<number> Specify the number of GPUs
 * required for the job on each task to be spawned in the job's resource
 * allocation." */
int submit_set_gpus_per_task(struct build *b, const struct submit_flag *f, const char *v, char *err,
                             size_t errlen)
{
    return put_gpus(b, f, v, "gpus_per_task", err, errlen);
}

int submit_set_gpus_per_node(struct build *b, const struct submit_flag *f, const char *v, char *err,
                             size_t errlen)
{
    return put_gpus(b, f, v, "gpus_per_node", err, errlen);
}

/* sbatch(1): "--gres=<list> Specifies a comma-delimited list of generic
 * consumable resources. The format for each entry in the list is
 * "name[[:type]:count]". ... The specified resources will be allocated to
 * the job on each node." GPUs are the one generic resource here. With
 * MIG, Slurm's gres type of an instance is its profile (its gres guide's
 * "MIG Support": Type=1g.5gb), so gpu:PROFILE[:1] asks for one instance. */
int submit_set_gres(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    if (strchr(v, ','))
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "one resource only (gpu:N or gpu:TYPE:N), got '%s'",
                          jsonv_quote(v, strlen(v), q));
    if (strcmp(v, "gpu") == 0)
        return put_one_of(b, gpu_keys, "gpus_per_node", json_integer(1), err, errlen);
    if (strncmp(v, "gpu:", 4) != 0)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "only GPUs (gpu:N or gpu:TYPE:N) are supported, got '%s'",
                          jsonv_quote(v, strlen(v), q));
    const char *rest = v + 4;
    int32_t milli;
    if (strchr(rest, ':') || sbatch_parse_gpus(rest, &milli) == 0 ||
        sbatch_is_mig_profile(rest, strlen(rest)))
        return put_gpus(b, f, rest, "gpus_per_node", err, errlen);
    int rc = submit_put_text(b, "gpu_type", rest, err, errlen); /* gpu:TYPE: one of that type */
    return rc ? rc : put_one_of(b, gpu_keys, "gpus_per_node", json_integer(1), err, errlen);
}

/* sbatch(1): "-N, --nodes=<minnodes>[-maxnodes] Request that a minimum of
 * minnodes nodes be allocated to this job. A maximum node count may also
 * be specified." gpuorch places exactly N: a range is refused unless its
 * ends agree. */
int submit_set_nodes(struct build *b, const struct submit_flag *f, const char *v, char *err,
                     size_t errlen)
{
    char lo[24] = "", *dash = strchr(v, '-');
    int64_t min, max;
    snprintf(lo, sizeof(lo), "%.*s", (int)(dash ? (size_t)(dash - v) : strlen(v)), v);
    if (opts_parse_int(lo, 1, 100000, &min) != 0 ||
        opts_parse_int(dash ? dash + 1 : lo, min, 100000, &max) != 0)
        return submit_bad_value(f, v, err, errlen);
    if (max != min)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "a node range (%s) is not supported: gpuorch allocates exactly the "
                          "nodes asked for; give one count (--nodes=%lld)",
                          v, (long long)min);
    return submit_put(b, "nodes", json_integer(min), err, errlen);
}

/* sbatch(1): "--mem=<size>[units] Specify the real memory required per
 * node. ... A memory size specification of zero is treated as a special
 * case and grants the job access to all of the memory on each node." */
int submit_set_mem(struct build *b, const struct submit_flag *f, const char *v, char *err,
                   size_t errlen)
{
    int64_t mib;
    if (sbatch_parse_size_mib(v, &mib) != 0)
        return submit_bad_value(f, v, err, errlen);
    if (mib == 0 && strcmp(f->key, "mem_per_node_mib") == 0)
        return put_one_of(b, mem_keys, "mem_whole_node", json_true(), err, errlen);
    if (mib == 0)
        return submit_bad_value(f, v, err, errlen);
    return put_one_of(b, mem_keys, f->key, json_integer(mib), err, errlen);
}

/* sbatch(1): "-p, --partition=<partition_names> ... If the job can use
 * more than one partition, specify their names in a comma separate list
 * and the one offering earliest initiation will be used." A job goes to one
 * pool here: a list is refused. */
int submit_set_partition(struct build *b, const struct submit_flag *f, const char *v, char *err,
                         size_t errlen)
{
    if (!*v)
        return submit_bad_value(f, v, err, errlen);
    if (strchr(v, ','))
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "a list of partitions (%s) is not supported: a job runs in the one "
                          "pool it names; give one",
                          v);
    return submit_put_text(b, f->key, v, err, errlen);
}

/* Directives that change nothing gpuorch controls: mail, accounting and
 * profiling options, comments, sbatch's own verbosity. */
static const char *const ignored[] = {
    "--mail-type",  "--mail-user", "--comment", "--wckey", "--profile",
    "--acctg-freq", "--verbose",   "--quiet",   "-v",      "-Q",
};

const char *submit_sbatch_ignored(const char *word)
{
    size_t len = strcspn(word, "=");
    for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++) {
        if (strlen(ignored[i]) == len && strncmp(word, ignored[i], len) == 0)
            return ignored[i];
        if (ignored[i][1] != '-' && strncmp(word, ignored[i], 2) == 0)
            return ignored[i]; /* -vv, -Q */
    }
    return NULL;
}

/* sbatch(1): "--exclusive[={user|mcs|topo}] The job allocation can not
 * share nodes with other running jobs (or just other users with the
 * "=user" option ...)." Only whole nodes are gpuorch's. */
int submit_exclusive_value(const char *word, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    if (strncmp(word, "--exclusive=", 12) != 0)
        return 0;
    return errbuf_set(err, errlen, GPO_EUSAGE,
                      "--exclusive: '%s' is not supported: --exclusive alone takes whole nodes; "
                      "sharing them only with the same user, MCS label or topology is not",
                      jsonv_quote(word + 12, strlen(word + 12), q));
}
