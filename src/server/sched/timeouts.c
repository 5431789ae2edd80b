/*
 * timeouts.c - nodes whose heartbeats stopped: their attempts end NODE_FAIL
 * and the nodes are marked down, in one commit; and nodes marked down that
 * heartbeat again, marked up (sched.h).
 *
 * "down" is the controller's mark of a silent node only. An admin's drain
 * outlives a timeout (the node stays draining, its attempts end all the
 * same) and a heartbeat does not undo it; only resume does. Either way the
 * node's GPUs stay held until its agent has said which are clean
 * (nodes_hold), since a silent agent may still run what was ended here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/sched/sched_int.h"
#include "base/banned.h"

/* What one turn found: the nodes lost (marked down, or drained and kept so)
 * and the ends of their attempts. */
struct lost {
    struct sched_end *ends;
    size_t nends, ends_cap;
    char **names;
    bool *mark; /* names[k] is marked down (it was up) */
    size_t nnames, names_cap, mark_cap;
    size_t nrows; /* rows in the batch */
};

static void lost_release(struct lost *l)
{
    for (size_t k = 0; k < l->nnames; k++)
        free(l->names[k]);
    free(l->names);
    free(l->mark);
    free(l->ends);
}

static int lost_add(struct lost *l, const char *name, bool mark)
{
    if (vec_grow((void **)&l->names, &l->names_cap, l->nnames + 1, sizeof(*l->names)) ||
        vec_grow((void **)&l->mark, &l->mark_cap, l->nnames + 1, sizeof(*l->mark)) ||
        !(l->names[l->nnames] = strdup(name)))
        return GPO_ENOMEM;
    l->mark[l->nnames++] = mark;
    return 0;
}

/* Plans node `node` lost and the ends of every attempt on it into b. */
static int plan_node(struct server *s, const struct cluster_node *node, int64_t now_ms,
                     struct lost *l, struct store_batch *b)
{
    const char *name = node->name;
    bool mark = node->state == CLUSTER_NODE_UP;
    if ((mark && config_node_mark_row(&s->config, name, CLUSTER_NODE_DOWN, now_ms, b)) ||
        lost_add(l, name, mark))
        return GPO_ENOMEM;
    l->nrows += mark;
    char why[CLUSTER_HOST_MAX + 64];
    snprintf(why, sizeof(why), "node %s stopped heartbeating", name);
    for (size_t i = 0; i < s->jobs.n; i++) {
        const struct job *j = s->jobs.v[i];
        if (!j->att.n || !attempt_on_node(&j->att, name))
            continue;
        if (vec_grow((void **)&l->ends, &l->ends_cap, l->nends + 1, sizeof(*l->ends)) ||
            sched_end_plan(s, j, ATTEMPT_NODE_FAIL, STORE_NULL, STORE_NULL, why, now_ms,
                           &l->ends[l->nends], b))
            return GPO_ENOMEM;
        l->nends++;
        l->nrows++;
    }
    return 0;
}

static void lost_apply(struct server *s, const struct lost *l)
{
    for (size_t k = 0; k < l->nnames; k++) {
        if (l->mark[k])
            config_node_mark_apply(&s->config, l->names[k], CLUSTER_NODE_DOWN);
        struct node_rt *rt = nodes_find(&s->nodes, l->names[k]);
        if (rt)
            rt->lost = true;
        fprintf(stderr, "gpuorch server: node %s %s (no heartbeat for %" PRId64 " s)\n",
                l->names[k], l->mark[k] ? "marked down" : "lost, and stays drained",
                s->sched->node_timeout_ms / 1000);
    }
    for (size_t k = 0; k < l->nends; k++)
        sched_end_apply(s, &l->ends[k]);
    /* After the ends: every answer from the hold's revision on lacks them. */
    for (size_t k = 0; k < l->nnames; k++)
        nodes_hold(&s->nodes, l->names[k]);
}

/* Nodes marked down whose agents heartbeat again are marked up; their GPUs
 * stay held until the agent has said which are clean. */
static void node_rejoins(struct server *s, int64_t now_ms)
{
    struct store_batch *b = NULL;
    struct lost back = {0};
    int rc = 0;
    for (size_t k = 0; k < s->cluster.nnodes && !rc; k++) {
        const struct cluster_node *node = &s->cluster.nodes[k];
        const struct node_rt *rt = nodes_find(&s->nodes, node->name);
        if (node->state != CLUSTER_NODE_DOWN || !rt || rt->lost)
            continue;
        if (!b && !(b = store_batch_new()))
            rc = GPO_ENOMEM;
        rc = rc ? rc : config_node_mark_row(&s->config, node->name, CLUSTER_NODE_UP, now_ms, b);
        rc = rc ? rc : lost_add(&back, node->name, true);
    }
    if (rc)
        store_batch_free(b);
    else if (b && sched_commit_unlocked(s, b, "node rejoin") == 0) {
        for (size_t k = 0; k < back.nnames; k++) {
            config_node_mark_apply(&s->config, back.names[k], CLUSTER_NODE_UP);
            fprintf(stderr,
                    "gpuorch server: node %s heartbeats again: up (its GPUs wait for its "
                    "agent's report)\n",
                    back.names[k]);
        }
        sched_wake(s->sched, SCHED_WHY_NODE);
    }
    lost_release(&back);
}

void sched_node_timeouts(struct server *s, int64_t now_ms, int64_t mono_ms)
{
    struct store_batch *b = NULL;
    struct lost l = {0};
    int rc = 0;
    for (size_t k = 0; k < s->cluster.nnodes && !rc; k++) {
        const struct cluster_node *node = &s->cluster.nodes[k];
        struct node_rt *rt = nodes_find(&s->nodes, node->name);
        if (rt)
            nodes_date(rt, now_ms, mono_ms);
        /* Lost once is enough for a drained node; one an admin resumed while
         * it was silent is marked down again. Silence is counted on the
         * monotonic clock (nodes.h). */
        if (node->state == CLUSTER_NODE_DOWN || !rt ||
            (rt->lost && node->state == CLUSTER_NODE_DRAINING) ||
            nodes_silence_ms(rt, now_ms, mono_ms) <= s->sched->node_timeout_ms)
            continue;
        if (!b && !(b = store_batch_new()))
            rc = GPO_ENOMEM;
        rc = rc ? rc : plan_node(s, node, now_ms, &l, b);
    }
    if (rc || (b && !l.nrows)) {
        store_batch_free(b); /* nothing to store: a drained node with nothing on it */
        b = NULL;
    }
    if (!rc && l.nnames && (!b || sched_commit_unlocked(s, b, "node timeout") == 0))
        lost_apply(s, &l);
    lost_release(&l);
    node_rejoins(s, now_ms);
}
