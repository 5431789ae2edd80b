/*
 * serve_shared.c - serving and training on one cluster, or split
 * (serve_shared.h says how).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/sort.h"
#include "core/explain.h"
#include "sim/serve_shared.h"
#include "util/errbuf.h"
#include "base/banned.h"

#define SERVING_TEAM "serving"
#define MS_PER_S     1000

/* One replica of one service, as a job of the job replay. */
struct replica_ref {
    int64_t submit_ms;
    uint32_t service;
    uint32_t k; /* its index in the service's replicas */
};

static bool ref_before(const struct replica_ref *a, const struct replica_ref *b)
{
    if (a->submit_ms != b->submit_ms)
        return a->submit_ms < b->submit_ms;
    if (a->service != b->service)
        return a->service < b->service;
    return a->k < b->k;
}

SORT_DEFINE(sort_refs, struct replica_ref, ref_before)

/* The delays each service's replay runs with (NULL: none yet). */
struct delays {
    int64_t **v; /* per service */
    size_t *n;
    size_t nservices;
};

static void delays_free(struct delays *d)
{
    for (size_t s = 0; d->v && s < d->nservices; s++)
        free(d->v[s]);
    free(d->v);
    free(d->n);
    memset(d, 0, sizeof(*d));
}

static int delays_alloc(struct delays *d, size_t nservices)
{
    d->nservices = nservices;
    d->v = calloc(nservices, sizeof(*d->v));
    d->n = calloc(nservices, sizeof(*d->n));
    return d->v && d->n ? 0 : GPO_ENOMEM;
}

/* How many delays differ between a and b (a missing one counting as 0),
 * and how many of them by more than `tick_ms`. */
static size_t delays_differ(const struct delays *a, const struct delays *b, int64_t tick_ms,
                            size_t *ret_over_tick)
{
    size_t n_diff = 0;
    *ret_over_tick = 0;
    for (size_t s = 0; s < a->nservices; s++) {
        size_t n = a->n[s] > b->n[s] ? a->n[s] : b->n[s];
        for (size_t k = 0; k < n; k++) {
            int64_t x = k < a->n[s] ? a->v[s][k] : 0, y = k < b->n[s] ? b->v[s][k] : 0;
            n_diff += x != y;
            *ret_over_tick += x - y > tick_ms || y - x > tick_ms;
        }
    }
    return n_diff;
}

/* A replica's life on the cluster: from its start (placement) to its end. */
static int64_t span_life_ms(const struct sim_replica_span *sp)
{
    return sp->end_ms > sp->start_ms ? sp->end_ms - sp->start_ms : 0;
}

/* The team the replicas run as: the spec's "serving", else one added to the
 * spec (*ret_added), guaranteed every pool whole (serve_shared.h). */
static int serving_team(struct sim_spec *spec, uint32_t *ret, bool *ret_added)
{
    *ret_added = false;
    for (size_t t = 0; t < spec->nteams; t++) {
        if (strcmp(spec->teams[t].name, SERVING_TEAM) == 0) {
            *ret = (uint32_t)t;
            return 0;
        }
    }
    struct sim_spec_team *teams = realloc(spec->teams, (spec->nteams + 1) * sizeof(*teams));
    if (!teams)
        return GPO_ENOMEM;
    spec->teams = teams;
    struct sim_spec_team *t = &teams[spec->nteams];
    *t = (struct sim_spec_team){.weight = 1, .borrow_limit_milli = -1, .pool = SIM_NONE};
    t->name = strdup(SERVING_TEAM);
    t->quotas = calloc(spec->npools ? spec->npools : 1, sizeof(*t->quotas));
    if (!t->name || !t->quotas) {
        free(t->name);
        free(t->quotas);
        return GPO_ENOMEM;
    }
    for (size_t p = 0; p < spec->npools; p++) {
        int64_t milli = (int64_t)spec->pools[p].nodes * spec->pools[p].gpus_per_node * 1000;
        t->quotas[p] = (struct sim_spec_quota){
            .pool = (uint32_t)p, .guaranteed_milli = milli, .borrow_limit_milli = -1};
    }
    t->nquotas = spec->npools;
    *ret = (uint32_t)spec->nteams++;
    *ret_added = true;
    return 0;
}

static int64_t spec_gpus(const struct sim_spec *spec)
{
    int64_t n = 0;
    for (size_t p = 0; p < spec->npools; p++)
        n += (int64_t)spec->pools[p].nodes * spec->pools[p].gpus_per_node;
    return n;
}

/* Service s's replay under policy `pol` with `opts`, into a fresh *r. */
static int serve_once(const struct sim_serve_shared_in *in, size_t s,
                      const struct sim_serve_policy *pol, const struct sim_serve_opts *opts,
                      struct sim_serve_result *r, char *err, size_t errlen)
{
    sim_serve_result_release(r);
    sim_serve_result_init(r);
    char msg[512] = "";
    int e = sim_serve_run(&in->traces[s], &in->services[s], pol, opts, r, msg, sizeof(msg));
    if (e)
        errbuf_set(err, errlen, e, "service %s, policy %s: %s", in->services[s].name, pol->name,
                   *msg ? msg : gpo_strerror(e));
    return e;
}

/* The job replay with the replicas of serve[0 .. nservices) as extra jobs;
 * their placement delays into *d (k-th replica of each service). */
static int jobs_once(const struct sim_serve_shared_in *in, const struct sim_serve_result *serve,
                     uint32_t team, bool added, struct sim_result *r, struct delays *d,
                     struct sim_serve_shared_stat *st, char *err, size_t errlen)
{
    size_t n = 0;
    for (size_t s = 0; s < in->nservices; s++)
        n += serve[s].nreplicas;
    struct replica_ref *refs = calloc(n ? n : 1, sizeof(*refs));
    struct sim_extra_job *extra = calloc(n ? n : 1, sizeof(*extra));
    int e = refs && extra ? 0 : GPO_ENOMEM;
    int64_t offset_ms = in->serve_offset_ms;
    size_t at = 0;
    for (size_t s = 0; !e && s < in->nservices; s++) {
        for (size_t k = 0; k < serve[s].nreplicas; k++)
            refs[at++] = (struct replica_ref){offset_ms + serve[s].replicas[k].asked_ms,
                                              (uint32_t)s, (uint32_t)k};
    }
    if (!e)
        e = sort_refs(refs, n);
    for (size_t i = 0; !e && i < n; i++) {
        const struct sim_replica_span *sp = &serve[refs[i].service].replicas[refs[i].k];
        extra[i] = (struct sim_extra_job){.submit_ms = refs[i].submit_ms,
                                          .duration_ms = span_life_ms(sp),
                                          .gpu_milli = in->services[refs[i].service].gpu_milli,
                                          .team = team};
    }
    struct sim_opts opts = in->job_opts ? *in->job_opts : (struct sim_opts){0};
    opts.extra = extra;
    opts.nextra = n;
    char msg[512] = "";
    sim_result_release(r);
    sim_result_init(r);
    if (!e && (e = sim_run(in->jobs, in->spec, in->job_policy, &opts, r, msg, sizeof(msg))))
        errbuf_set(err, errlen, e, "jobs with serving's replicas, policy %s: %s",
                   in->job_policy->name, *msg ? msg : gpo_strerror(e));
    if (!e && added && r->nteams == (size_t)team + 1)
        r->nteams--; /* the team added for serving: no part of training's figures (always 0) */
    for (size_t s = 0; !e && s < in->nservices; s++) {
        free(d->v[s]);
        d->n[s] = serve[s].nreplicas;
        if (!(d->v[s] = calloc(d->n[s] ? d->n[s] : 1, sizeof(**d->v))))
            e = GPO_ENOMEM;
    }
    *st = (struct sim_serve_shared_stat){.replicas = n, .converged = false};
    double sum = 0;
    for (size_t i = 0; !e && i < n; i++) {
        const struct sim_job_result *x = &r->extra[i];
        const struct sim_serve_service *svc = &in->services[refs[i].service];
        if (x->first_start_ms < 0) {
            e = errbuf_set(err, errlen, GPO_EINVAL,
                           "service %s: a replica of %.3g GPUs can never be placed on this "
                           "cluster (%s)",
                           svc->name, (double)svc->gpu_milli / 1000,
                           x->unschedulable ? explain_code(x->reason) : "never started");
            break;
        }
        int64_t delay = x->first_start_ms - refs[i].submit_ms;
        d->v[refs[i].service][refs[i].k] = delay;
        st->delayed += delay > 0;
        sum += (double)delay / MS_PER_S;
        if ((double)delay / MS_PER_S > st->delay_max_s)
            st->delay_max_s = (double)delay / MS_PER_S;
        st->replica_preemptions += x->preemptions;
    }
    st->delay_mean_s = n ? sum / (double)n : 0;
    free(refs);
    free(extra);
    return e;
}

/* Shared: serving and training on one cluster, the delays fed back. */
static int run_shared(const struct sim_serve_shared_in *in, const struct sim_serve_policy *pol,
                      uint32_t team, bool added, struct sim_serve_result *serve,
                      struct sim_result *jobs, struct sim_serve_shared_stat *st, char *err,
                      size_t errlen)
{
    struct delays ran = {0}, got = {0}; /* serving ran with / the job replay gave */
    int e = delays_alloc(&ran, in->nservices);
    if (!e)
        e = delays_alloc(&got, in->nservices);
    for (uint32_t round = 1; !e && round <= SIM_SERVE_SHARED_ROUNDS; round++) {
        for (size_t s = 0; !e && s < in->nservices; s++) {
            struct sim_serve_opts o = {.start_delay_ms = ran.v[s], .nstart_delay = ran.n[s]};
            e = serve_once(in, s, pol, &o, &serve[s], err, errlen);
        }
        if (!e)
            e = jobs_once(in, serve, team, added, jobs, &got, st, err, errlen);
        if (e)
            break;
        st->rounds = round;
        st->converged = delays_differ(&ran, &got, MS_PER_S, &st->moved) == 0;
        if (st->converged)
            break;
        struct delays t = ran;
        ran = got;
        got = t;
    }
    delays_free(&ran);
    delays_free(&got);
    return e;
}

/* Each service's cap under a split (serve_shared.h): all of it for one. */
static int split_caps(const struct sim_serve_shared_in *in, const struct sim_serve_policy *pol,
                      struct sim_serve_result *scratch, int64_t *caps, char *err, size_t errlen)
{
    if (in->nservices == 1) {
        caps[0] = in->split_gpu_milli;
        return 0;
    }
    int64_t sum = 0;
    for (size_t s = 0; s < in->nservices; s++) {
        struct sim_serve_summary peak;
        int e = serve_once(in, s, pol, NULL, scratch, err, errlen);
        if (!e)
            e = sim_serve_summarize(scratch, &in->services[s], pol->name, &peak);
        if (e)
            return e;
        caps[s] = (int64_t)peak.replicas_max * in->services[s].gpu_milli;
        sum += caps[s];
    }
    for (size_t s = 0; s < in->nservices; s++) {
        const struct sim_serve_service *svc = &in->services[s];
        /* in proportion to its peak, rounded down to whole replicas, at least one */
        int64_t share = sum ? (int64_t)((double)in->split_gpu_milli * (double)caps[s] / (double)sum)
                            : in->split_gpu_milli / (int64_t)in->nservices;
        share = share / svc->gpu_milli * svc->gpu_milli;
        caps[s] = share < svc->gpu_milli ? svc->gpu_milli : share;
    }
    return 0;
}

static int run_split(const struct sim_serve_shared_in *in, const struct sim_serve_policy *pol,
                     struct sim_serve_result *serve, struct sim_result *jobs,
                     struct sim_serve_shared_stat *st, char *err, size_t errlen)
{
    int64_t *caps = calloc(in->nservices, sizeof(*caps));
    if (!caps)
        return GPO_ENOMEM;
    int e = split_caps(in, pol, &serve[0], caps, err, errlen);
    *st = (struct sim_serve_shared_stat){.rounds = 1, .converged = true};
    for (size_t s = 0; !e && s < in->nservices; s++) {
        struct sim_serve_opts o = {.gpu_cap_milli = caps[s]};
        st->cap_gpu_milli += caps[s];
        e = serve_once(in, s, pol, &o, &serve[s], err, errlen);
    }
    free(caps);
    if (e)
        return e;
    struct sim_opts opts = in->job_opts ? *in->job_opts : (struct sim_opts){0};
    opts.held_gpus = (uint32_t)(in->split_gpu_milli / MS_PER_S);
    char msg[512] = "";
    sim_result_release(jobs);
    sim_result_init(jobs);
    e = sim_run(in->jobs, in->spec, in->job_policy, &opts, jobs, msg, sizeof(msg));
    if (e)
        errbuf_set(err, errlen, e, "jobs beside a split of %lld GPUs, policy %s: %s",
                   (long long)(in->split_gpu_milli / 1000), in->job_policy->name,
                   *msg ? msg : gpo_strerror(e));
    return e;
}

static int check_in(const struct sim_serve_shared_in *in, char *err, size_t errlen)
{
    if (!in->traces || !in->services || !in->nservices || !in->policies || !in->npolicies ||
        !in->jobs || !in->spec || !in->job_policy)
        return errbuf_set(err, errlen, GPO_EINVAL, "serving with jobs: missing input");
    if (in->serve_offset_ms < 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "serving's time 0 in the job trace: expected >= 0 ms, got %lld",
                          (long long)in->serve_offset_ms);
    int64_t gpus = spec_gpus(in->spec);
    if (in->split_gpu_milli < 0 || in->split_gpu_milli % 1000)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "--split: expected a whole number of GPUs >= 0, got %.3f",
                          (double)in->split_gpu_milli / 1000);
    if (in->split_gpu_milli / 1000 >= gpus)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "--split %lld: the cluster has %lld GPUs, and training needs some",
                          (long long)(in->split_gpu_milli / 1000), (long long)gpus);
    for (size_t s = 0; s < in->nservices; s++) {
        const struct sim_serve_service *svc = &in->services[s];
        if (svc->gpu_milli < 1 || (svc->gpu_milli > 1000 && svc->gpu_milli % 1000))
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "service %s: a replica's GPUs: expected a fraction of one or "
                              "whole GPUs, got %.3f",
                              svc->name, (double)svc->gpu_milli / 1000);
        if (in->split_gpu_milli && svc->gpu_milli > in->split_gpu_milli)
            return errbuf_set(err, errlen, GPO_EINVAL,
                              "service %s: a replica of %.3g GPUs does not fit a split of %lld",
                              svc->name, (double)svc->gpu_milli / 1000,
                              (long long)(in->split_gpu_milli / 1000));
    }
    return 0;
}

int sim_serve_shared_run(const struct sim_serve_shared_in *in, struct sim_serve_shared_out *out,
                         char *err, size_t errlen)
{
    if (!in || !out || !out->serve || !out->jobs)
        return errbuf_set(err, errlen, GPO_EINVAL, "serving with jobs: missing output");
    int e = check_in(in, err, errlen);
    uint32_t team = 0;
    bool added = false;
    if (!e && !in->split_gpu_milli)
        e = serving_team(in->spec, &team, &added);
    for (size_t p = 0; !e && p < in->npolicies; p++) {
        struct sim_serve_shared_stat st = {0};
        struct sim_serve_result *serve = &out->serve[p * in->nservices];
        const struct sim_serve_policy *pol = &in->policies[p];
        e = in->split_gpu_milli
                ? run_split(in, pol, serve, &out->jobs[p], &st, err, errlen)
                : run_shared(in, pol, team, added, serve, &out->jobs[p], &st, err, errlen);
        if (out->stats)
            out->stats[p] = st;
    }
    if (e == GPO_ENOMEM)
        errbuf_set(err, errlen, e, "serving with jobs: out of memory");
    return e;
}
