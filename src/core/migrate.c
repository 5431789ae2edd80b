#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "core/evict.h"
#include "core/migrate.h"
#include "core/preempt.h"
#include "base/banned.h"

/* Moves made for one job: never more jobs than a claim records. */
#define MAX_MOVES SCHED_CLAIM_VICTIMS
/* Nodes tried for one job, fewest GPUs to move first. */
#define MAX_NODES 4
/* In migrate_pass_end's table of shapes: its jobs may not move anything. */
#define NO_MOVE (SCHED_NONE - 1)

bool migrate_may(struct pass *p, const struct sched_job *j)
{
    if (!p->pol->migrate || !p->pol->preemption || !p->nmovable || j->gpus <= 0 || j->multi_node ||
        sched_job_shaped(j))
        return false; /* a job with Slurm's shape: moving others is not what it needs */
    bool may = false;
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        const struct view_group *grp = &p->view.groups[g];
        if (!view_group_eligible(&p->view, j, g) || grp->max_node_gpus < (uint32_t)j->gpus)
            continue;
        view_group_refresh(&p->view, g);
        if (grp->max_free_whole >= (uint32_t)j->gpus)
            return false; /* some node has the GPUs: fragmentation is not what stops it */
        may |= grp->sum_free_whole >= (uint64_t)j->gpus;
    }
    return may;
}

/* Per node, the running jobs that could move (p->rbits R_MOVABLE), built on
 * first use in a pass: node n's are mv_runs[mv_start[n] .. mv_start[n + 1]). */
static int build_index(struct pass *p)
{
    if (p->mv_start)
        return 0;
    uint32_t nn = p->c->nnodes;
    uint32_t *start = pass_scratch(p, (nn + 1) * sizeof(*start), true);
    uint32_t *runs = pass_scratch(p, p->nmovable * sizeof(*runs), false);
    if (!start || !runs)
        return GPO_ENOMEM;
    for (size_t r = 0; r < p->run->njobs; r++) {
        if (p->rbits[r] & R_MOVABLE)
            start[p->run->jobs[r].alloc.nodes[0].node + 1]++;
    }
    for (uint32_t n = 0; n < nn; n++)
        start[n + 1] += start[n];
    for (size_t r = 0; r < p->run->njobs; r++) {
        if (p->rbits[r] & R_MOVABLE)
            runs[start[p->run->jobs[r].alloc.nodes[0].node]++] = (uint32_t)r;
    }
    for (uint32_t n = nn; n > 0; n--)
        start[n] = start[n - 1];
    start[0] = 0;
    p->mv_start = start;
    p->mv_runs = runs;
    return 0;
}

/* May running job r move for a job of class order `order`? */
static bool may_move(const struct pass *p, uint32_t r, int32_t order)
{
    return !(p->rflag[r] & R_LEAVING) && p->rorder[r] <= order;
}

struct move {
    uint32_t run; /* index into the running set */
    uint32_t gpus;
    uint64_t id;
    int64_t lost_gpu_ms;
    uint32_t to; /* the node it restarts on */
};

/* Scratch for the tries of one pass, allocated once. */
struct scratch {
    bool *allowed;                 /* per group: the mover's own */
    struct sched_node_part *parts; /* a mover's placement */
    struct sched_share *shares;
    uint32_t *held; /* nodes of the job's own reservation */
};

/* Fewest GPUs first, then least work lost, then the lower job id. */
static int cmp_move(const void *a, const void *b)
{
    const struct move *x = a, *y = b;
    if (x->gpus != y->gpus)
        return x->gpus < y->gpus ? -1 : 1;
    if (x->lost_gpu_ms != y->lost_gpu_ms)
        return x->lost_gpu_ms < y->lost_gpu_ms ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Does reservation r (-1: none) leave its node to job j: its own, or one
 * that starts after j would end? */
static bool resv_leaves(const struct view *v, int32_t r, const struct sched_job *j, int64_t end)
{
    return r < 0 || v->resvs[r].job == j->id || end <= v->resvs[r].start_ms;
}

/* GPUs on node n that jobs of class order `order` or lower could free by moving. */
static uint32_t movable_gpus(const struct pass *p, uint32_t n, int32_t order)
{
    uint32_t sum = 0;
    for (uint32_t m = p->mv_start[n]; m < p->mv_start[n + 1]; m++) {
        uint32_t r = p->mv_runs[m];
        if (may_move(p, r, order))
            sum += (uint32_t)p->run->jobs[r].job->gpus;
    }
    return sum;
}

/*
 * Up to MAX_NODES nodes where job j (ending at `end`) could go if jobs moved
 * away, among the groups p->allowed covers: the fewest GPUs to move first,
 * ties to the lower index. Only nodes short of GPUs count, and only those a
 * reservation leaves to j. Returns how many, in ret.
 */
static uint32_t pick_nodes(struct pass *p, const struct sched_job *j, int64_t end, uint32_t *ret)
{
    uint32_t need = (uint32_t)j->gpus, n_ret = 0, cost[MAX_NODES];
    int32_t order = p->c->classes[j->prio].order;
    for (uint32_t g = 0; g < p->view.ngroups; g++) {
        const struct view_group *grp = &p->view.groups[g];
        if (!p->allowed[g] || grp->max_node_gpus < need)
            continue;
        view_group_refresh(&p->view, g);
        if (grp->sum_free_whole < need)
            continue;
        for (uint32_t k = 0; k < grp->nnodes; k++) {
            uint32_t n = grp->nodes[k];
            const struct view_node *vn = &p->view.nodes[n];
            if (!vn->usable || p->mv_start[n] == p->mv_start[n + 1] ||
                !resv_leaves(&p->view, vn->resv, j, end))
                continue;
            uint32_t free = view_node_whole_for(&p->view, j, n);
            if (free >= need)
                continue; /* room already: what it misses is not GPUs */
            uint32_t move = need - free;
            if ((n_ret == MAX_NODES && move >= cost[n_ret - 1]) ||
                free + movable_gpus(p, n, order) < need)
                continue;
            /* Insert in order of cost, dropping the last when full. */
            uint32_t at = n_ret < MAX_NODES ? n_ret++ : MAX_NODES - 1;
            for (; at > 0 && cost[at - 1] > move; at--) {
                cost[at] = cost[at - 1];
                ret[at] = ret[at - 1];
            }
            cost[at] = move;
            ret[at] = n;
        }
    }
    return n_ret;
}

/* The jobs to move off node n: the fewest GPUs that give `move`, smallest
 * first, then any that a larger one taken later made unneeded dropped.
 * Returns how many (0: not possible within MAX_MOVES). */
static size_t pick_moves(struct pass *p, uint32_t n, int32_t order, uint32_t move, struct move *ret)
{
    struct move all[MAX_MOVES * 4];
    size_t nall = 0;
    for (uint32_t m = p->mv_start[n]; m < p->mv_start[n + 1] && nall < (size_t)MAX_MOVES * 4; m++) {
        uint32_t r = p->mv_runs[m];
        if (may_move(p, r, order))
            all[nall++] =
                (struct move){r, (uint32_t)p->run->jobs[r].job->gpus, p->run->jobs[r].job->id,
                              preempt_lost_gpu_ms(&p->run->jobs[r], p->now), 0};
    }
    // cppcheck-suppress uninitvar ; qsort reads all[0, nall), which the loop above wrote
    qsort(all, nall, sizeof(*all), cmp_move);
    size_t k = 0;
    uint32_t sum = 0;
    for (; k < nall && sum < move; k++)
        sum += all[k].gpus;
    if (sum < move)
        return 0;
    size_t nret = 0;
    for (size_t x = 0; x < k; x++) {
        if (x + 1 < k && sum - all[x].gpus >= move) {
            sum -= all[x].gpus;
            continue;
        }
        if (nret == MAX_MOVES)
            return 0;
        ret[nret++] = all[x];
    }
    return nret;
}

/*
 * Tries the moves on the view: the movers' GPUs given back, job j placed (on
 * node n, which must be where it lands), then each mover placed in its own
 * group, on another node. Fills p->place with j's placement and each move's
 * `to`. The view is put back either way. 1, 0, or GPO_ENOMEM.
 */
static int try_moves(struct pass *p, const struct scratch *sc, const struct sched_job *j,
                     uint32_t n, int64_t end, struct move *mv, size_t nmv)
{
    struct view *v = &p->view;
    bool *allowed = sc->allowed;
    uint32_t *held = sc->held, nheld = 0;
    /* j's own reservation, if it has one, is given up for the try: the movers
     * may go there. It stays given up if the moves are made. */
    int32_t own = -1;
    for (uint32_t x = 0; x < v->cluster->nnodes; x++) {
        int32_t r = v->nodes[x].resv;
        if (r >= 0 && v->resvs[r].job == j->id) {
            own = r;
            held[nheld++] = x;
            v->nodes[x].resv = -1;
            v->groups[v->nodes[x].group].dirty = true;
        }
    }
    int ok = 1, err = 0;
    for (size_t k = 0; k < nmv && !err; k++)
        err = view_apply_logged(v, &p->run->jobs[mv[k].run].alloc, true, &p->undo);
    unsigned miss = 0;
    /* Only node n changed, and pick_nodes checked its reservation. */
    if (!err && (!view_place(v, j, p->allowed, end, true, &p->place, &miss) ||
                 p->place.nnodes != 1 || p->place.nodes[0].node != n))
        ok = 0;
    if (ok && !err) {
        struct sched_alloc a = {p->place.nodes, p->place.nnodes, p->place.shares, p->place.nshares};
        err = view_apply_logged(v, &a, false, &p->undo);
    }
    const int64_t *headroom = v->headroom;
    v->headroom = NULL; /* a mover keeps its own share: no quota is asked of it */
    for (size_t k = 0; k < nmv && ok && !err; k++) {
        const struct sched_running *run = &p->run->jobs[mv[k].run];
        struct view_place pl = {.nodes = sc->parts, .shares = sc->shares};
        uint32_t g = p->rgroup[mv[k].run];
        allowed[g] = true;
        bool fits =
            view_place(v, run->job, allowed, job_end(p, run->job, p->now), false, &pl, &miss);
        allowed[g] = false;
        if (!fits || pl.nnodes != 1 || pl.nodes[0].node == n) {
            ok = 0;
            break;
        }
        mv[k].to = pl.nodes[0].node;
        struct sched_alloc a = {pl.nodes, pl.nnodes, pl.shares, pl.nshares};
        err = view_apply_logged(v, &a, false, &p->undo);
    }
    v->headroom = headroom;
    view_undo(v, &p->undo);
    if (err || !ok) {
        for (uint32_t x = 0; x < nheld; x++) {
            v->nodes[held[x]].resv = own;
            v->groups[v->nodes[held[x]].group].dirty = true;
        }
    }
    return err ? err : ok;
}

/* Makes the moves planned for job j onto node n: the movers leave for j, j
 * claims node n, and each mover claims its new place, held until it has
 * left and can restart there. p->place holds j's placement. */
static int commit(struct pass *p, const struct sched_job *j, uint32_t n, const struct move *mv,
                  size_t nmv)
{
    int64_t until = p->now + p->pol->preempt_grace_ms;
    uint64_t ids[MAX_MOVES];
    int err;
    for (size_t k = 0; k < nmv; k++) {
        if ((err = evict_record(p, j, mv[k].run, mv[k].lost_gpu_ms, SCHED_PREEMPT_MIGRATE)))
            return err;
        ids[k] = mv[k].id;
    }
    if ((err = evict_add_claim(p, j->id, ids, (uint32_t)nmv, &n, 1, p->now)))
        return err;
    int hr = pass_hold_place(p, j->id, until);
    if (hr < 0)
        return hr;
    for (size_t k = 0; k < nmv; k++) {
        if ((err = evict_add_claim(p, ids[k], NULL, 0, &mv[k].to, 1, p->now)))
            return err;
        int r = pass_hold_nodes(p, ids[k], until, &mv[k].to, 1);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Tries to make room for job i on one node by moving jobs away: 1 planned,
 * 0 not, or an error. */
static int migrate_try(struct pass *p, const struct scratch *sc, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    if (!migrate_may(p, j))
        return 0;
    int err = build_index(p);
    if (err)
        return err;
    int64_t end = job_end(p, j, p->now);
    int32_t order = p->c->classes[j->prio].order;
    uint32_t nodes[MAX_NODES];
    uint32_t nn = pick_nodes(p, j, end, nodes);
    for (uint32_t k = 0; k < nn; k++) {
        uint32_t n = nodes[k];
        struct move mv[MAX_MOVES];
        uint32_t free = view_node_whole_for(&p->view, j, n);
        size_t nmv = pick_moves(p, n, order, (uint32_t)j->gpus - free, mv);
        if (!nmv)
            continue;
        int ok = try_moves(p, sc, j, n, end, mv, nmv);
        if (ok < 0)
            return ok;
        if (ok)
            return (err = commit(p, j, n, mv, nmv)) ? err : 1;
    }
    return 0;
}

/* Job i's turn at the end of the pass: 1 moved, 0 not, or an error. */
static int try_job(struct pass *p, const struct scratch *sc, uint32_t i)
{
    const struct sched_job *j = &p->q->jobs[i];
    uint32_t nallowed;
    pass_allowed(p, i, &nallowed);
    if (!nallowed)
        return 0;
    p->view.headroom = p->headroom;
    int r = migrate_try(p, sc, i);
    p->view.headroom = NULL;
    if (r <= 0)
        return r;
    pass_set_wait(p, i, SCHED_REASON_PREEMPTING, j->pool, j->gpu_type, 0, NULL);
    p->jwait[i].est_start_ms = p->now + p->pol->preempt_grace_ms;
    return 1;
}

/* May waiting job i move jobs? Not if it started, is preempting already,
 * waits behind a blocked pool (backfill off: nothing behind it may start) or
 * for quota, or can never run. */
static bool waiting(const struct pass *p, uint32_t i)
{
    if (p->jflag[i] & J_STARTED)
        return false;
    if (!(p->jflag[i] & J_DONE)) /* not reached: frozen, or blocked if backfill is off */
        return p->pol->backfill && p->shapes_of[p->jshape[i]].valid;
    enum sched_reason why = p->jwait[i].reason;
    return why != SCHED_REASON_PREEMPTING && why != SCHED_REASON_BLOCKED &&
           why != SCHED_REASON_QUOTA && !explain_is_final(why);
}

/* Does job x come before job y in the order moves are tried, the pass's
 * order as it stands at the end: higher class, then (fair share) the team
 * with the lower share (`share`, per team), less-served LAS queue, earlier
 * submit, lower id? */
static bool before(const struct pass *p, const double *share, uint32_t x, uint32_t y)
{
    const struct sched_job *a = &p->q->jobs[x], *b = &p->q->jobs[y];
    int32_t oa = p->c->classes[a->prio].order, ob = p->c->classes[b->prio].order;
    if (oa != ob)
        return oa > ob;
    if (share && share[a->team] != share[b->team])
        return share[a->team] < share[b->team];
    uint8_t qa = p->lasq ? p->lasq[x] : 0, qb = p->lasq ? p->lasq[y] : 0;
    if (qa != qb)
        return qa < qb;
    if (a->submit_ms != b->submit_ms)
        return a->submit_ms < b->submit_ms;
    return a->id < b->id;
}

/*
 * The fair-share gate's limit for each shape that may move (first[s] is not
 * NO_MOVE): the mean share (`share`, per team) of the teams its team competes
 * with, or INFINITY when it competes with none. A team is in a group when it
 * runs there or one of its waiting jobs may go there; a shape's competitors
 * are the teams with a share that are in a group its jobs may use, or in no
 * group at all (a team idle now may come back to any). Where each team has
 * a pool to itself, none is held back by the shares of teams in other pools;
 * where all share one, every team with a share counts.
 */
static int share_limits(struct pass *p, const uint32_t *first, const double *share, double *limit)
{
    uint32_t nt = p->c->nteams, ng = p->view.ngroups;
    bool *present = pass_scratch(p, (size_t)nt * ng * sizeof(*present), false);
    bool *somewhere = pass_scratch(p, nt * sizeof(*somewhere), true);
    bool *counted = pass_scratch(p, nt * sizeof(*counted), false);
    if (!present || !somewhere || !counted)
        return GPO_ENOMEM;
    for (size_t k = 0; k < (size_t)nt * ng; k++)
        present[k] = p->quota.used[k] > 0;
    for (uint32_t s = 0; s < p->nshapes; s++) {
        const struct sched_job *j = &p->q->jobs[p->shapes_of[s].first];
        if (!p->shapes_of[s].valid)
            continue;
        for (uint32_t g = 0; g < ng; g++) {
            if (view_group_eligible(&p->view, j, g))
                present[(size_t)j->team * ng + g] = true;
        }
    }
    for (size_t k = 0; k < (size_t)nt * ng; k++)
        somewhere[k / ng] |= present[k];
    for (uint32_t s = 0; s < p->nshapes; s++) {
        limit[s] = INFINITY;
        if (first[s] == NO_MOVE)
            continue;
        const struct sched_job *j = &p->q->jobs[p->shapes_of[s].first];
        for (uint32_t t = 0; t < nt; t++)
            counted[t] = !somewhere[t];
        for (uint32_t g = 0; g < ng; g++) {
            if (!view_group_eligible(&p->view, j, g))
                continue;
            for (uint32_t t = 0; t < nt; t++)
                counted[t] |= present[(size_t)t * ng + g];
        }
        double sum = 0.0;
        uint32_t n = 0;
        for (uint32_t t = 0; t < nt; t++) {
            if (counted[t] && share[t] > 0.0) {
                sum += share[t];
                n++;
            }
        }
        if (n > 1)
            limit[s] = sum / n;
    }
    return 0;
}

int migrate_pass_end(struct pass *p)
{
    if (!p->pol->migrate || !p->pol->preemption || !p->nmovable || !p->nshapes)
        return 0;
    bool any_free = false;
    for (uint32_t g = 0; g < p->view.ngroups && !any_free; g++) {
        view_group_refresh(&p->view, g);
        any_free = p->view.groups[g].sum_free_whole > 0;
    }
    if (!any_free)
        return 0;
    /* Jobs of one shape ask for the same: the first of each, in the order
     * above, stands for it. The order does not depend on how far the ordered
     * loop went, so neither do the moves. Shapes are asked first (any job of
     * one will do), so that the queue is walked only when one may move. */
    uint32_t *first = pass_scratch(p, p->nshapes * sizeof(*first), false);
    double *share = NULL;
    if (!first)
        return GPO_ENOMEM;
    bool any = false;
    for (uint32_t s = 0; s < p->nshapes; s++) {
        bool may = p->shapes_of[s].valid && migrate_may(p, &p->q->jobs[p->shapes_of[s].first]);
        first[s] = may ? SCHED_NONE : NO_MOVE;
        any |= may;
    }
    if (!any)
        return 0;
    /* Under fair share, only a team at or below the mean share of the teams
     * it competes with moves jobs: the GPUs it gathers are ones that later
     * arrivals would have found free, and a team already ahead would only
     * get further ahead (on philly_vc, letting every team move cost the
     * default 12 % of average JCT; this way it costs none). */
    double *limit = NULL;
    if (p->pol->order == SCHED_ORDER_FAIRSHARE) {
        share = pass_scratch(p, p->c->nteams * sizeof(*share), false);
        limit = pass_scratch(p, p->nshapes * sizeof(*limit), false);
        if (!share || !limit)
            return GPO_ENOMEM;
        for (uint32_t t = 0; t < p->c->nteams; t++)
            share[t] = order_team_share(&p->order, t);
        int err = share_limits(p, first, share, limit);
        if (err)
            return err;
    }
    for (uint32_t i = 0; i < p->q->njobs; i++) {
        uint32_t s = p->jshape[i];
        if (first[s] == NO_MOVE || (limit && share[p->q->jobs[i].team] > limit[s]))
            continue;
        if (waiting(p, i) && (first[s] == SCHED_NONE || before(p, share, i, first[s])))
            first[s] = i;
    }
    uint32_t n = 0;
    for (uint32_t s = 0; s < p->nshapes; s++) {
        if (first[s] != SCHED_NONE && first[s] != NO_MOVE)
            first[n++] = first[s];
    }
    /* Insertion sort: a few shapes at most pass migrate_may. */
    for (uint32_t k = 1; k < n; k++) {
        uint32_t x = first[k], at = k;
        for (; at > 0 && before(p, share, x, first[at - 1]); at--)
            first[at] = first[at - 1];
        first[at] = x;
    }
    uint32_t nn = p->c->nnodes;
    struct scratch sc = {pass_scratch(p, p->view.ngroups * sizeof(*sc.allowed), true),
                         pass_scratch(p, nn * sizeof(*sc.parts), false),
                         pass_scratch(p, SCHED_MAX_GPUS_PER_NODE * sizeof(*sc.shares), false),
                         pass_scratch(p, nn * sizeof(*sc.held), false)};
    if (!sc.allowed || !sc.parts || !sc.shares || !sc.held)
        return GPO_ENOMEM;
    for (uint32_t k = 0; k < n && k < MAX_PLANS; k++) {
        int r = try_job(p, &sc, first[k]);
        if (r < 0)
            return r;
    }
    return 0;
}
