#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

struct fx *fx_new(void)
{
    struct fx *fx = calloc(1, sizeof(*fx));
    if (!fx)
        abort();
    fx->c.nodes = fx->nodes;
    fx->c.gpus = fx->gpus;
    fx->c.pools = fx->pools;
    fx->c.gpu_types = fx->types;
    fx->c.teams = fx->teams;
    fx->c.classes = fx->classes;
    sched_policy_default(&fx->pol);
    sched_state_init(&fx->st);
    sched_result_init(&fx->res);
    return fx;
}

void fx_free(struct fx *fx)
{
    if (!fx)
        return;
    sched_state_release(&fx->st);
    sched_result_release(&fx->res);
    free(fx);
}

int fx_teardown(void **state)
{
    fx_free(*state);
    return 0;
}

uint32_t fx_pool(struct fx *fx, const char *name)
{
    fx->pools[fx->c.npools].name = name;
    return fx->c.npools++;
}

uint32_t fx_type(struct fx *fx, const char *name)
{
    fx->types[fx->c.ngpu_types] =
        (struct sched_gpu_type){.id = 100 + fx->c.ngpu_types, .name = name};
    return fx->c.ngpu_types++;
}

uint32_t fx_nodes(struct fx *fx, uint32_t count, uint32_t pool, uint32_t type, uint32_t ngpus,
                  uint32_t gpu_mem_mib, uint32_t cpus, uint64_t mem_mib)
{
    uint32_t first = fx->c.nnodes;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t n = fx->c.nnodes++;
        snprintf(fx->names[n], sizeof(fx->names[n]), "node%u", n);
        fx->nodes[n] = (struct sched_node){.name = fx->names[n],
                                           .pool = pool,
                                           .state = SCHED_NODE_UP,
                                           .cpus = cpus,
                                           .mem_mib = mem_mib,
                                           .gpu_first = fx->c.ngpus,
                                           .ngpus = ngpus};
        for (uint32_t g = 0; g < ngpus; g++) {
            fx->gpus[fx->c.ngpus++] =
                (struct sched_gpu){.type = type,
                                   .mem_mib = gpu_mem_mib,
                                   .nvlink_domain = ngpus >= 4 ? (int32_t)(g * 2 / ngpus) : -1};
        }
    }
    return first;
}

uint32_t fx_team(struct fx *fx, const char *name, uint32_t weight, int64_t borrow_limit_milli)
{
    uint32_t t = fx->c.nteams++;
    fx->teams[t] = (struct sched_team){.id = 1000 + t,
                                       .name = name,
                                       .weight = weight,
                                       .borrow_limit_milli = borrow_limit_milli,
                                       .quotas = fx->quotas[t]};
    return t;
}

void fx_quota(struct fx *fx, uint32_t team, uint32_t pool, uint32_t type, int64_t guaranteed,
              int64_t borrow_limit)
{
    struct sched_team *t = &fx->teams[team];
    fx->quotas[team][t->nquotas++] = (struct sched_quota){.pool = pool,
                                                          .gpu_type = type,
                                                          .guaranteed_milli = guaranteed,
                                                          .borrow_limit_milli = borrow_limit};
}

uint32_t fx_class(struct fx *fx, const char *name, int32_t order, bool may_preempt)
{
    fx->classes[fx->c.nclasses] =
        (struct sched_prio_class){.name = name, .order = order, .may_preempt = may_preempt};
    return fx->c.nclasses++;
}

struct sched_job *fx_job(struct fx *fx, uint64_t id)
{
    if (fx->njobs >= FX_MAX_JOBS)
        abort();
    struct fx_job *j = &fx->jobs[fx->njobs++];
    memset(j, 0, sizeof(*j));
    j->req = (struct sched_job){.id = id,
                                .submit_ms = fx->now,
                                .pool = SCHED_ANY,
                                .gpu_type = SCHED_ANY,
                                .gpus = 1,
                                .cpus = 1,
                                .mem_mib = 1024,
                                .time_limit_ms = 3600 * 1000};
    j->started_ms = -1;
    j->kill_ms = -1;
    return &j->req;
}

struct fx_job *fx_get(struct fx *fx, uint64_t id)
{
    for (uint32_t i = 0; i < fx->njobs; i++) {
        if (fx->jobs[i].req.id == id)
            return &fx->jobs[i];
    }
    return NULL;
}

void fx_collect(struct fx *fx, struct sched_queue *q, struct sched_running_set *r)
{
    fx->nqueue = fx->nrunning = 0;
    for (uint32_t i = 0; i < fx->njobs; i++) {
        struct fx_job *j = &fx->jobs[i];
        if (j->done)
            continue;
        if (j->started_ms < 0) {
            fx->queue_of[fx->nqueue] = i;
            fx->queue[fx->nqueue++] = j->req;
        } else {
            fx->running_of[fx->nrunning] = i;
            fx->running[fx->nrunning++] = (struct sched_running){.job = &j->req,
                                                                 .alloc = j->alloc,
                                                                 .start_ms = j->started_ms,
                                                                 .borrowed = j->borrowed,
                                                                 .preempting = j->kill_ms >= 0};
        }
    }
    *q = (struct sched_queue){fx->queue, fx->nqueue};
    *r = (struct sched_running_set){fx->running, fx->nrunning};
}

int fx_pass(struct fx *fx, int64_t now)
{
    struct sched_queue q;
    struct sched_running_set r;
    fx->now = now;
    fx_collect(fx, &q, &r);
    return sched_pass(&fx->c, &q, &r, &fx->pol, &fx->st, now, &fx->res);
}

void fx_apply(struct fx *fx)
{
    for (size_t s = 0; s < fx->res.nstarts; s++) {
        const struct sched_start *st = &fx->res.starts[s];
        struct fx_job *j = fx_get(fx, st->job);
        if (!j || st->alloc.nnodes > FX_MAX_SHARES || st->alloc.nshares > FX_MAX_SHARES)
            abort();
        memcpy(j->parts, st->alloc.nodes, st->alloc.nnodes * sizeof(*j->parts));
        memcpy(j->shares, st->alloc.shares, st->alloc.nshares * sizeof(*j->shares));
        j->alloc = (struct sched_alloc){j->parts, st->alloc.nnodes, j->shares, st->alloc.nshares};
        j->started_ms = fx->now;
        j->ends_ms = j->run_ms > 0 ? fx->now + j->run_ms : INT64_MAX;
        j->borrowed = st->borrowed;
        j->starts++;
    }
    for (size_t p = 0; p < fx->res.npreempts; p++) {
        struct fx_job *j = fx_get(fx, fx->res.preempts[p].job);
        if (j && j->kill_ms < 0)
            j->kill_ms = fx->now + fx->res.preempts[p].grace_ms;
    }
}

void fx_finish(struct fx *fx, uint64_t id)
{
    struct fx_job *j = fx_get(fx, id);
    if (j)
        j->done = true;
}

static int64_t alloc_milli(const struct sched_alloc *a)
{
    int64_t m = 0;
    for (uint32_t i = 0; i < a->nshares; i++)
        m += a->shares[i].milli;
    return m;
}

/* As the controller does when a job leaves the running set: charge its usage
 * since the last pass. */
static void charge_end(struct fx *fx, struct fx_job *j, int64_t end_ms)
{
    struct sched_running run = {.job = &j->req, .alloc = j->alloc, .start_ms = j->started_ms};
    if (sched_state_charge_end(&fx->st, &fx->c, &fx->pol, &run, end_ms) != 0)
        abort();
}

int fx_step(struct fx *fx, int64_t now)
{
    for (uint32_t i = 0; i < fx->njobs; i++) {
        struct fx_job *j = &fx->jobs[i];
        if (j->done || j->started_ms < 0)
            continue;
        if (j->ends_ms <= now && (j->kill_ms < 0 || j->ends_ms <= j->kill_ms)) {
            fx->gpu_ms_done += alloc_milli(&j->alloc) * (j->ends_ms - j->started_ms) / 1000;
            charge_end(fx, j, j->ends_ms);
            j->done = true;
        } else if (j->kill_ms >= 0 && j->kill_ms <= now) {
            charge_end(fx, j, j->kill_ms);
            if (j->req.checkpointable && j->run_ms > 0) {
                int64_t worked = j->kill_ms - j->started_ms;
                fx->gpu_ms_done += alloc_milli(&j->alloc) * worked / 1000;
                j->run_ms -= worked;
            }
            j->started_ms = -1;
            j->kill_ms = -1;
            j->preemptions++;
        }
    }
    int err = fx_pass(fx, now);
    if (!err)
        fx_apply(fx);
    return err;
}

const struct sched_wait *fx_wait(const struct fx *fx, uint64_t id)
{
    for (size_t i = 0; i < fx->res.nwaits; i++) {
        if (fx->res.waits[i].job == id)
            return &fx->res.waits[i];
    }
    return NULL;
}

const struct sched_start *fx_start(const struct fx *fx, uint64_t id)
{
    for (size_t i = 0; i < fx->res.nstarts; i++) {
        if (fx->res.starts[i].job == id)
            return &fx->res.starts[i];
    }
    return NULL;
}

const struct sched_preempt *fx_preempt(const struct fx *fx, uint64_t id)
{
    for (size_t i = 0; i < fx->res.npreempts; i++) {
        if (fx->res.preempts[i].job == id)
            return &fx->res.preempts[i];
    }
    return NULL;
}

bool fx_running(const struct fx *fx, uint64_t id)
{
    for (uint32_t i = 0; i < fx->njobs; i++) {
        if (fx->jobs[i].req.id == id)
            return !fx->jobs[i].done && fx->jobs[i].started_ms >= 0;
    }
    return false;
}

uint32_t fx_start_node(const struct fx *fx, uint64_t id)
{
    const struct sched_start *s = fx_start(fx, id);
    if (!s)
        return SCHED_NONE;
    if (s->alloc.nshares)
        return s->alloc.nodes[0].node;
    return s->alloc.nnodes ? s->alloc.nodes[0].node : SCHED_NONE;
}

int64_t fx_next_event(const struct fx *fx)
{
    int64_t t = -1;
    for (uint32_t i = 0; i < fx->njobs; i++) {
        const struct fx_job *j = &fx->jobs[i];
        if (j->done || j->started_ms < 0)
            continue;
        if (j->run_ms > 0 && (t < 0 || j->ends_ms < t))
            t = j->ends_ms;
        if (j->kill_ms >= 0 && (t < 0 || j->kill_ms < t))
            t = j->kill_ms;
    }
    return t;
}

uint64_t fx_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t fx_rng_range(uint64_t *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(fx_rng_next(s) % (uint64_t)(hi - lo + 1));
}
