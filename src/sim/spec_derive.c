/*
 * spec_derive.c - the default cluster spec of a trace (sim_spec_from_trace),
 * and scaling a spec to a load (sim_spec_scale, sim_spec_set_load); reading
 * a spec is in spec.c.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "sim/spec.h"
#include "base/banned.h"

/* Nodes of 8 GPUs that carry the trace's offered load at 90 %, and its largest job. */
static uint64_t trace_nodes(const struct sim_trace *t)
{
    unsigned __int128 work = 0, durations = 0; /* milli-GPU-seconds; seconds */
    int64_t first = t->jobs[0].submit_s, last = first, largest = 0;
    for (size_t i = 0; i < t->njobs; i++) {
        const struct sim_trace_job *j = &t->jobs[i];
        uint64_t dur = j->duration_s > 0 ? (uint64_t)j->duration_s : 0;
        uint64_t milli = j->gpu_milli > 0 ? (uint64_t)j->gpu_milli : 0;
        work += (unsigned __int128)dur * milli;
        durations += dur;
        first = j->submit_s < first ? j->submit_s : first;
        last = j->submit_s > last ? j->submit_s : last;
        largest = j->gpu_milli > largest ? j->gpu_milli : largest;
    }
    unsigned __int128 span = (unsigned __int128)((uint64_t)last - (uint64_t)first);
    span = span ? span : durations ? durations : 1;
    /* ceil(work / 1000 / span / 0.9 / 8) */
    unsigned __int128 load = (work + span * 7200 - 1) / (span * 7200);
    uint64_t need = ((uint64_t)largest + 7999) / 8000;
    load = load > need ? load : need;
    return load < 1 ? 1 : load > UINT64_MAX ? UINT64_MAX : (uint64_t)load;
}

/* The empty queue's team: "default", or "default-N" if a queue has that name. */
static int empty_queue_team(const struct sim_trace *t, char **ret)
{
    char name[32] = "default";
    for (unsigned n = 2;; n++) {
        size_t k = 0;
        while (k < t->nqueues && strcmp(t->queues[k], name) != 0)
            k++;
        if (k == t->nqueues)
            break;
        snprintf(name, sizeof(name), "default-%u", n);
    }
    *ret = strdup(name);
    return *ret ? 0 : GPO_ENOMEM;
}

static int trace_teams(struct sim_spec *s, const struct sim_trace *t)
{
    s->teams = calloc(t->nqueues, sizeof(*s->teams));
    if (!s->teams)
        return GPO_ENOMEM;
    for (size_t i = 0; i < t->nqueues; i++) {
        struct sim_spec_team *tm = &s->teams[s->nteams++];
        tm->weight = 1;
        tm->borrow_limit_milli = -1;
        tm->pool = SIM_NONE;
        tm->queues = calloc(1, sizeof(*tm->queues));
        if (!tm->queues || !(tm->queues[0] = strdup(t->queues[i])))
            return GPO_ENOMEM;
        tm->nqueues = 1;
        if (t->queues[i][0] == '\0' ? empty_queue_team(t, &tm->name) != 0
                                    : !(tm->name = strdup(t->queues[i])))
            return GPO_ENOMEM;
    }
    return 0;
}

int sim_spec_from_trace(struct sim_spec *s, const struct sim_trace *t, char *err, size_t errlen)
{
    char scratch[1];
    struct sim_spec out;
    int rc = 0;
    err = err && errlen ? err : scratch;
    errlen = err == scratch ? sizeof(scratch) : errlen;
    err[0] = '\0';
    sim_spec_init(&out);
    sim_spec_init(s);
    uint64_t nodes = t && t->njobs ? trace_nodes(t) : 0;
    if (!t || t->njobs == 0 || t->nqueues == 0) {
        snprintf(err, errlen, "the trace has no %s", !t || !t->njobs ? "jobs" : "queues");
        return GPO_EINVAL;
    }
    if (t->nqueues > SIM_SPEC_MAX_TEAMS) {
        snprintf(err, errlen, "the trace has %zu queues, more than the %u teams a spec may have",
                 t->nqueues, SIM_SPEC_MAX_TEAMS);
        return GPO_E2BIG;
    }
    if (nodes > SIM_SPEC_MAX_NODES) {
        snprintf(err, errlen, "the trace's load needs %llu nodes, more than %u",
                 (unsigned long long)nodes, SIM_SPEC_MAX_NODES);
        return GPO_E2BIG;
    }
    if (!(out.pools = calloc(1, sizeof(*out.pools))))
        rc = GPO_ENOMEM;
    if (rc == 0) {
        struct sim_spec_pool *p = &out.pools[out.npools++];
        *p = (struct sim_spec_pool){.nodes = (uint32_t)nodes,
                                    .gpus_per_node = 8,
                                    .gpu_mem_mib = 80 * 1024,
                                    .cpus = 64,
                                    .mem_mib = UINT64_C(512) * 1024,
                                    .nvlink = true};
        p->name = strdup("default");
        p->gpu_type = strdup("GPU");
        rc = p->name && p->gpu_type ? trace_teams(&out, t) : GPO_ENOMEM;
    }
    if (rc == GPO_ENOMEM)
        snprintf(err, errlen, "out of memory");
    if (rc != 0)
        sim_spec_release(&out);
    *s = out;
    return rc;
}

static uint32_t scaled_nodes(uint32_t nodes, double factor)
{
    double x = round((double)nodes * factor);
    return x < 1 ? 1 : x > SIM_SPEC_MAX_NODES ? SIM_SPEC_MAX_NODES + 1 : (uint32_t)x;
}

/* A quota in a pool that went from `was` to `now` nodes, rounded; -1 stays. */
static int64_t scaled_quota(int64_t milli, uint32_t was, uint32_t now)
{
    if (milli < 0 || was == 0)
        return milli;
    __int128 x = ((__int128)milli * now * 2 + was) / ((__int128)was * 2);
    return x > (__int128)SIM_SPEC_MAX_MILLI ? SIM_SPEC_MAX_MILLI + 1 : (int64_t)x;
}

static int64_t scaled_limit(int64_t milli, double factor)
{
    double x = round((double)milli * factor);
    return milli < 0 ? milli : x > (double)SIM_SPEC_MAX_MILLI ? SIM_SPEC_MAX_MILLI + 1 : (int64_t)x;
}

/* Checks (apply false) or applies the scaling of teams; 0 or GPO_E2BIG. */
static int scale_teams(struct sim_spec *s, double factor, bool apply)
{
    for (size_t i = 0; i < s->nteams; i++) {
        struct sim_spec_team *t = &s->teams[i];
        int64_t b = scaled_limit(t->borrow_limit_milli, factor);
        if (b > SIM_SPEC_MAX_MILLI)
            return GPO_E2BIG;
        t->borrow_limit_milli = apply ? b : t->borrow_limit_milli;
        for (size_t k = 0; k < t->nquotas; k++) {
            struct sim_spec_quota *q = &t->quotas[k];
            if (q->pool >= s->npools)
                return GPO_EINVAL;
            uint32_t was = s->pools[q->pool].nodes, now = scaled_nodes(was, factor);
            int64_t g = scaled_quota(q->guaranteed_milli, was, now);
            int64_t l = scaled_quota(q->borrow_limit_milli, was, now);
            if (g > SIM_SPEC_MAX_MILLI || l > SIM_SPEC_MAX_MILLI)
                return GPO_E2BIG;
            q->guaranteed_milli = apply ? g : q->guaranteed_milli;
            q->borrow_limit_milli = apply ? l : q->borrow_limit_milli;
        }
    }
    return 0;
}

int sim_spec_scale(struct sim_spec *s, double factor)
{
    uint64_t total = 0;
    if (!s || !isfinite(factor) || !(factor > 0))
        return GPO_EINVAL;
    for (size_t i = 0; i < s->npools; i++)
        total += scaled_nodes(s->pools[i].nodes, factor);
    if (total > SIM_SPEC_MAX_NODES)
        return GPO_E2BIG;
    int rc = scale_teams(s, factor, false);
    if (rc != 0)
        return rc;
    scale_teams(s, factor, true); /* before the pools: it reads their old sizes */
    for (size_t i = 0; i < s->npools; i++)
        s->pools[i].nodes = scaled_nodes(s->pools[i].nodes, factor);
    return 0;
}

uint32_t sim_spec_team_of_queue(const struct sim_spec *s, const char *queue)
{
    for (size_t t = 0; t < s->nteams; t++) {
        for (size_t k = 0; k < s->teams[t].nqueues; k++) {
            if (strcmp(s->teams[t].queues[k], queue) == 0)
                return (uint32_t)t;
        }
    }
    return s->unmapped_team;
}

int sim_spec_set_load(struct sim_spec *s, const struct sim_trace *t, double load,
                      double *ret_factor)
{
    if (!(load > 0))
        return GPO_EINVAL;
    bool *taken = malloc((t->nqueues ? t->nqueues : 1) * sizeof(*taken));
    if (!taken)
        return GPO_ENOMEM;
    for (size_t q = 0; q < t->nqueues; q++)
        taken[q] = sim_spec_team_of_queue(s, t->queues[q]) != SIM_NONE;
    double gpu_s = 0, gpus = 0;
    int64_t first = -1, last = 0;
    for (size_t i = 0; i < t->njobs; i++) {
        const struct sim_trace_job *j = &t->jobs[i];
        if (!taken[j->queue])
            continue;
        gpu_s += (double)j->duration_s * (double)j->gpu_milli / 1000.0;
        first = first < 0 ? j->submit_s : first;
        last = j->submit_s;
    }
    free(taken);
    for (size_t p = 0; p < s->npools; p++)
        gpus += (double)s->pools[p].nodes * s->pools[p].gpus_per_node;
    double span = (double)(last - first);
    if (first < 0 || span <= 0 || gpus <= 0 || gpu_s <= 0)
        return GPO_EINVAL;
    double factor = gpu_s / span / load / gpus;
    int e = sim_spec_scale(s, factor);
    if (!e && ret_factor)
        *ret_factor = factor;
    return e;
}
