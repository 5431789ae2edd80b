/*
 * timeouts.c - nodes whose heartbeats stopped: their attempts end NODE_FAIL
 * and the nodes are marked down, in one commit (sched.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/sched/sched_int.h"
#include "base/banned.h"

/* What one turn found: the nodes to mark down and the ends of their attempts. */
struct lost {
    struct sched_end *ends;
    size_t nends, ends_cap;
    char **down;
    size_t ndown, down_cap;
};

static void lost_release(struct lost *l)
{
    for (size_t k = 0; k < l->ndown; k++)
        free(l->down[k]);
    free(l->down);
    free(l->ends);
}

/* Plans node `name` down and the ends of every attempt on it into b. */
static int plan_node(struct server *s, const char *name, int64_t now_ms, struct lost *l,
                     struct store_batch *b)
{
    if (config_node_down_row(&s->config, name, now_ms, b) ||
        vec_grow((void **)&l->down, &l->down_cap, l->ndown + 1, sizeof(*l->down)) ||
        !(l->down[l->ndown] = strdup(name)))
        return GPO_ENOMEM;
    l->ndown++;
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
    }
    return 0;
}

void sched_node_timeouts(struct server *s, int64_t now_ms)
{
    struct store_batch *b = NULL;
    struct lost l = {0};
    int rc = 0;
    for (size_t k = 0; k < s->cluster.nnodes && !rc; k++) {
        const struct cluster_node *node = &s->cluster.nodes[k];
        const struct node_rt *rt = nodes_find(&s->nodes, node->name);
        if (node->state == CLUSTER_NODE_DOWN || !rt ||
            now_ms - rt->last_heartbeat_ms <= s->sched->node_timeout_ms)
            continue;
        if (!b && !(b = store_batch_new()))
            rc = GPO_ENOMEM;
        rc = rc ? rc : plan_node(s, node->name, now_ms, &l, b);
    }
    if (!b || rc) {
        store_batch_free(b);
        lost_release(&l);
        return;
    }
    if (sched_commit_unlocked(s, b, "node timeout") == 0) {
        for (size_t k = 0; k < l.ndown; k++) {
            config_node_down_apply(&s->config, l.down[k]);
            fprintf(stderr,
                    "gpuorch server: node %s marked down (no heartbeat for %" PRId64 " s)\n",
                    l.down[k], s->sched->node_timeout_ms / 1000);
        }
        for (size_t k = 0; k < l.nends; k++)
            sched_end_apply(s, &l.ends[k]);
    }
    lost_release(&l);
}
