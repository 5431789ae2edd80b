/*
 * state.c - the MIG state the controller keeps: the GPUs' damping state,
 * the reported instances into the cluster, the plans in flight and their
 * results (mig.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "base/err.h"
#include "base/vec.h"
#include "server/mig/mig_int.h"
#include "server/sched/sched.h"
#include "server/srv.h"
#include "util/errbuf.h"
#include "base/banned.h"

struct migctl *migctl_new(void)
{
    return calloc(1, sizeof(struct migctl));
}

void migctl_free(struct migctl *m)
{
    if (!m)
        return;
    free(m->gpus);
    free(m->plans);
    free(m->groups);
    free(m);
}

/* Where (node, uuid) is or would go in an array of n elements of `size`
 * bytes sorted by node, then UUID, each element's strings at node_off and
 * uuid_off: m->gpus and m->plans (one plan per GPU) alike. */
static size_t key_search(const void *base, size_t n, size_t size, size_t node_off, size_t uuid_off,
                         const char *node, const char *uuid, bool *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *e = (const char *)base + mid * size;
        int c = strcmp(e + node_off, node);
        c = c ? c : strcmp(e + uuid_off, uuid);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static size_t gpu_search(const struct migctl *m, const char *node, const char *uuid, bool *found)
{
    return key_search(m->gpus, m->ngpus, sizeof(*m->gpus), offsetof(struct migctl_gpu, node),
                      offsetof(struct migctl_gpu, uuid), node, uuid, found);
}

struct migctl_gpu *migctl_gpu_find(const struct migctl *m, const char *node, const char *uuid)
{
    bool found;
    size_t at = gpu_search(m, node, uuid, &found);
    return found ? &m->gpus[at] : NULL;
}

struct migctl_gpu *migctl_gpu_get(struct migctl *m, const char *node, const char *uuid)
{
    bool found;
    size_t at = gpu_search(m, node, uuid, &found);
    if (found)
        return &m->gpus[at];
    if (vec_grow((void **)&m->gpus, &m->gpus_cap, m->ngpus + 1, sizeof(*m->gpus)))
        return NULL;
    memmove(&m->gpus[at + 1], &m->gpus[at], (m->ngpus - at) * sizeof(*m->gpus));
    m->ngpus++;
    struct migctl_gpu *g = &m->gpus[at];
    memset(g, 0, sizeof(*g));
    snprintf(g->node, sizeof(g->node), "%s", node);
    snprintf(g->uuid, sizeof(g->uuid), "%s", uuid);
    g->changed_ms = INT64_MIN;
    return g;
}

static size_t plan_search(const struct migctl *m, const char *node, const char *uuid, bool *found)
{
    return key_search(m->plans, m->nplans, sizeof(*m->plans), offsetof(struct migctl_plan, node),
                      offsetof(struct migctl_plan, uuid), node, uuid, found);
}

struct migctl_plan *migctl_plan_find(const struct migctl *m, const char *node, const char *uuid)
{
    bool found;
    size_t at = plan_search(m, node, uuid, &found);
    return found ? &m->plans[at] : NULL;
}

bool migctl_planning(const struct migctl *m, const char *node, const char *uuid)
{
    return m && migctl_plan_find(m, node, uuid) != NULL;
}

void migctl_plan_drop(struct migctl *m, struct migctl_plan *p)
{
    size_t at = (size_t)(p - m->plans);
    memmove(p, p + 1, (m->nplans - at - 1) * sizeof(*p));
    m->nplans--;
}

/* ---- reported instances ----------------------------------------------------- */

int migctl_gpu_set(struct cluster_gpu *g, const struct proto_mig_instance *mig, size_t nmig)
{
    if (nmig > MIG_MAX_INSTANCES)
        nmig = MIG_MAX_INSTANCES; /* the decoder's bound */
    struct cluster_mig_instance *v = calloc(nmig ? nmig : 1, sizeof(*v));
    if (!v)
        return GPO_ENOMEM;
    const struct mig_type *t = mig_type_find(g->gpu_type);
    int rc = 0;
    for (size_t k = 0; k < nmig && !rc; k++) {
        const struct proto_mig_instance *pi = &mig[k];
        int p = t ? mig_profile_by_nvml_id(t, pi->profile_id) : GPO_ENOENT;
        v[k] = (struct cluster_mig_instance){.profile_id = pi->profile_id,
                                             .start = pi->start,
                                             .gi_id = pi->gi_id,
                                             .ci_id = pi->ci_id == PROTO_NONE ? -1 : pi->ci_id};
        if ((p >= 0 && !(v[k].profile = strdup(t->profiles[p].name))) ||
            (pi->uuid && !(v[k].uuid = strdup(pi->uuid))))
            rc = GPO_ENOMEM;
    }
    if (rc) {
        struct cluster_gpu tmp = {.mig = v, .nmig = nmig};
        cluster_gpu_mig_clear(&tmp);
        return rc;
    }
    cluster_gpu_mig_clear(g);
    g->mig = v;
    g->nmig = nmig;
    return 0;
}

/* Logs, once per GPU and id, each instance of g whose NVML profile id the
 * catalogue does not know. */
static void log_unknown(struct migctl *m, const char *node, const struct cluster_gpu *g)
{
    for (size_t k = 0; k < g->nmig; k++) {
        const struct cluster_mig_instance *mi = &g->mig[k];
        if (mi->profile || mi->profile_id >= 64)
            continue;
        struct migctl_gpu *st = migctl_gpu_get(m, node, g->uuid);
        if (!st || (st->logged & (UINT64_C(1) << mi->profile_id)))
            continue;
        st->logged |= UINT64_C(1) << mi->profile_id;
        fprintf(stderr,
                "gpuorch server: node %s GPU %s: MIG instance at slot %" PRIu32
                " has NVML profile id %" PRIu32
                ", unknown for %s: shown, but takes no job and its GPU is not repartitioned\n",
                node, g->uuid, mi->start, mi->profile_id, g->gpu_type);
    }
}

struct cluster_node *migctl_node_mut(struct server *s, const char *name)
{
    for (size_t k = 0; k < s->cluster.nnodes; k++)
        if (strcmp(s->cluster.nodes[k].name, name) == 0)
            return &s->cluster.nodes[k];
    return NULL;
}

struct cluster_gpu *migctl_node_gpu(struct cluster_node *n, const char *uuid)
{
    for (size_t k = 0; n && k < n->ngpus; k++)
        if (strcmp(n->gpus[k].uuid, uuid) == 0)
            return &n->gpus[k];
    return NULL;
}

/* Whether the instances reported differ from those g holds. */
static bool mig_differs(const struct cluster_gpu *g, const struct proto_mig_instance *mig,
                        size_t nmig)
{
    if (g->nmig != nmig)
        return true;
    for (size_t k = 0; k < nmig; k++) {
        const struct cluster_mig_instance *c = &g->mig[k];
        if (c->start != mig[k].start || c->profile_id != mig[k].profile_id ||
            c->gi_id != mig[k].gi_id || !c->uuid != !mig[k].uuid ||
            (c->uuid && strcmp(c->uuid, mig[k].uuid) != 0))
            return true;
    }
    return false;
}

bool migctl_heartbeat(struct server *s, const char *node, const struct proto_heartbeat *hb)
{
    struct cluster_node *n = migctl_node_mut(s, node);
    bool changed = false;
    for (size_t k = 0; n && k < hb->ngpus; k++) {
        const struct proto_gpu_sample *o = &hb->gpus[k];
        struct cluster_gpu *g = o->uuid && o->mig_known ? migctl_node_gpu(n, o->uuid) : NULL;
        if (!g || g->mig_slices == 0)
            continue;
        struct migctl_gpu *st = s->mig ? migctl_gpu_find(s->mig, node, g->uuid) : NULL;
        if (st && st->skip_beat) {
            st->skip_beat = false;
            continue;
        }
        if (s->mig)
            log_unknown(s->mig, node, g); /* a registration's, or the last report's */
        size_t nmig = o->mig_enabled ? o->nmig : 0;
        if (g->mig_enabled == o->mig_enabled && g->mig_pending == o->mig_pending &&
            !mig_differs(g, o->mig, nmig))
            continue;
        changed = true;
        g->mig_enabled = o->mig_enabled;
        g->mig_pending = o->mig_pending;
        if (migctl_gpu_set(g, o->mig_enabled ? o->mig : NULL, o->mig_enabled ? o->nmig : 0))
            fprintf(stderr,
                    "gpuorch server: node %s GPU %s: MIG instances not kept: out of memory\n", node,
                    g->uuid);
    }
    return changed;
}

/* ---- the plans in flight ---------------------------------------------------- */

static int plan_id_cmp(const void *a, const void *b)
{
    uint64_t x = ((const struct proto_mig_plan *)a)->id, y = ((const struct proto_mig_plan *)b)->id;
    return (x > y) - (x < y);
}

int migctl_node_plans(const struct migctl *m, const char *node, struct proto_mig_plan **ret,
                      size_t *ret_n)
{
    *ret = NULL;
    *ret_n = 0;
    bool found;
    size_t first = m ? plan_search(m, node, "", &found) : 0, n = 0;
    while (m && first + n < m->nplans && strcmp(m->plans[first + n].node, node) == 0)
        n++;
    if (!n)
        return 0;
    struct proto_mig_plan *v = calloc(n, sizeof(*v));
    if (!v)
        return GPO_ENOMEM;
    n = 0;
    for (size_t k = first; k < m->nplans && strcmp(m->plans[k].node, node) == 0; k++) {
        struct migctl_plan *p = &m->plans[k];
        v[n++] = (struct proto_mig_plan){.id = p->id,
                                         .gpu_uuid = p->uuid,
                                         .destroy = p->destroy,
                                         .create = p->create,
                                         .ndestroy = p->core.ndestroy,
                                         .ncreate = p->core.ncreate};
    }
    qsort(v, n, sizeof(*v), plan_id_cmp); /* the agent applies them in id order */
    *ret = v;
    *ret_n = n;
    return 0;
}

int migctl_plan_add(struct server *s, const char *node, const struct cluster_gpu *g,
                    const struct mig_type *t, const struct mig_gpu_plan *plan, const char *why,
                    int64_t now_ms)
{
    struct migctl *m = s->mig;
    bool found;
    size_t pos = plan_search(m, node, g->uuid, &found);
    if (found)
        return GPO_EEXIST; /* one plan per GPU: the caller checked */
    if (vec_grow((void **)&m->plans, &m->plans_cap, m->nplans + 1, sizeof(*m->plans)))
        return GPO_ENOMEM;
    memmove(&m->plans[pos + 1], &m->plans[pos], (m->nplans - pos) * sizeof(*m->plans));
    m->nplans++;
    struct migctl_plan *p = &m->plans[pos];
    memset(p, 0, sizeof(*p));
    uint64_t id = (uint64_t)(now_ms > 0 ? now_ms : 0) * 1000;
    p->id = m->last_id = id > m->last_id ? id : m->last_id + 1;
    snprintf(p->node, sizeof(p->node), "%s", node);
    snprintf(p->uuid, sizeof(p->uuid), "%s", g->uuid);
    p->type = t;
    p->core = *plan;
    p->sent_ms = now_ms;
    char text[400];
    size_t at = 0;
    for (uint8_t k = 0; k < plan->ndestroy; k++) {
        p->destroy[k] = (struct proto_mig_change){t->profiles[plan->destroy[k].profile].nvml_id,
                                                  plan->destroy[k].start};
        at += (size_t)snprintf(text + at, sizeof(text) - at, " -%s@%u",
                               t->profiles[plan->destroy[k].profile].name, plan->destroy[k].start);
        at = at < sizeof(text) ? at : sizeof(text) - 1;
    }
    for (uint8_t k = 0; k < plan->ncreate; k++) {
        p->create[k] = (struct proto_mig_change){t->profiles[plan->create[k].profile].nvml_id,
                                                 plan->create[k].start};
        at += (size_t)snprintf(text + at, sizeof(text) - at, " +%s@%u",
                               t->profiles[plan->create[k].profile].name, plan->create[k].start);
        at = at < sizeof(text) ? at : sizeof(text) - 1;
    }
    text[at] = '\0';
    m->sent++;
    fprintf(stderr, "gpuorch server: MIG plan %" PRIu64 " (%s) for node %s GPU %s:%s\n", p->id, why,
            node, g->uuid, text);
    nodes_changed(&s->nodes, node);
    return 0;
}

/* Whether the reported instances hold a valid layout: those of known
 * profiles, by the placement table. */
static int result_check(const struct mig_type *t, const struct proto_mig_result *r, char *err,
                        size_t errlen)
{
    struct mig_instance inst[MIG_MAX_INSTANCES];
    size_t n = 0;
    if (r->nmig > MIG_MAX_INSTANCES)
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'mig': %zu instances, at most %d",
                          r->nmig, MIG_MAX_INSTANCES);
    for (size_t k = 0; k < r->nmig; k++) {
        int p = mig_profile_by_nvml_id(t, r->mig[k].profile_id);
        if (p >= 0)
            inst[n++] =
                (struct mig_instance){.profile = (uint8_t)p, .start = (uint8_t)r->mig[k].start};
    }
    char msg[200];
    if (mig_layout_check(t, inst, n, msg, sizeof(msg)))
        return errbuf_set(err, errlen, GPO_EINVAL, "field 'mig': %s", msg);
    return 0;
}

int migctl_result(struct server *s, const char *node, uint64_t id, const struct proto_mig_result *r,
                  char *err, size_t errlen)
{
    struct migctl *m = s->mig;
    struct migctl_plan *p = NULL;
    for (size_t k = 0; k < m->nplans && !p; k++)
        if (m->plans[k].id == id && strcmp(m->plans[k].node, node) == 0)
            p = &m->plans[k];
    if (!p)
        return errbuf_set(err, errlen, GPO_ENOENT,
                          "node '%s' has no MIG plan %" PRIu64
                          " in flight (done already, or from before a controller restart)",
                          node, id);
    if (!r->gpu_uuid || strcmp(r->gpu_uuid, p->uuid) != 0)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "field 'gpu_uuid': plan %" PRIu64 " is for GPU '%s', not '%s'", id,
                          p->uuid, r->gpu_uuid ? r->gpu_uuid : "");
    int rc = result_check(p->type, r, err, errlen);
    struct cluster_gpu *g = rc ? NULL : migctl_node_gpu(migctl_node_mut(s, node), p->uuid);
    if (!rc && g && (rc = migctl_gpu_set(g, r->mig, r->nmig)) != 0)
        return errbuf_set(err, errlen, rc, "out of memory");
    if (rc)
        return rc;
    int64_t now = srv_now_ms(s);
    struct migctl_gpu *st = migctl_gpu_get(m, node, p->uuid);
    if (st && p->core.ndestroy)
        st->changed_ms = now;
    if (st) {
        st->retry_ms = r->ok ? 0 : now + MIGCTL_RETRY_MS;
        st->skip_beat = true;
    }
    if (r->ok)
        m->ok++;
    else
        m->failed++;
    fprintf(stderr,
            "gpuorch server: MIG plan %" PRIu64 " on node %s GPU %s: %s%s%s (%zu instances now)\n",
            id, node, p->uuid, r->ok ? "done" : "failed", r->ok ? "" : ": ",
            r->ok ? "" : (r->error ? r->error : "no reason given"), r->nmig);
    migctl_plan_drop(m, p);
    nodes_changed(&s->nodes, node);
    sched_wake(s->sched, SCHED_WHY_NODE);
    return 0;
}

/* ---- views ------------------------------------------------------------------ */

static int held_cmp(const void *a, const void *b)
{
    const struct migctl_held *x = a, *y = b;
    int c = strcmp(x->node, y->node);
    c = c ? c : strcmp(x->uuid, y->uuid);
    return c ? c : (x->start > y->start) - (x->start < y->start);
}

int migctl_holders_build(const struct server *s, struct migctl_holders *ret)
{
    *ret = (struct migctl_holders){0};
    size_t n = 0, cap = 0;
    struct migctl_held *v = NULL;
    for (size_t k = 0; k < s->jobs.n; k++) {
        const struct job *j = s->jobs.v[k];
        for (size_t g = 0; j->att.n && g < j->att.nshares; g++) {
            const struct attempt_share *sh = &j->att.shares[g];
            if (!sh->mig)
                continue;
            if (vec_grow((void **)&v, &cap, n + 1, sizeof(*v))) {
                free(v);
                return GPO_ENOMEM;
            }
            v[n++] = (struct migctl_held){sh->node, sh->uuid, sh->mig_start, j->id};
        }
    }
    if (n)
        qsort(v, n, sizeof(*v), held_cmp);
    *ret = (struct migctl_holders){v, n};
    return 0;
}

int64_t migctl_holders_find(const struct migctl_holders *h, const char *node, const char *uuid,
                            uint32_t start)
{
    struct migctl_held key = {node, uuid, start, 0};
    const struct migctl_held *hit =
        h->n ? bsearch(&key, h->v, h->n, sizeof(*h->v), held_cmp) : NULL;
    return hit ? hit->job : 0;
}

void migctl_holders_release(struct migctl_holders *h)
{
    free(h->v);
    *h = (struct migctl_holders){0};
}

const struct cluster_mig *migctl_setting(const struct cluster *c, const struct cluster_node *node)
{
    if (node->mig)
        return node->mig;
    const struct cluster_pool *p = cluster_pool_get(c, node->pool);
    return p ? &p->mig : NULL;
}

const char *migctl_mode_name(enum cluster_mig_mode mode)
{
    return mode == CLUSTER_MIG_STATIC ? "static" : mode == CLUSTER_MIG_DYNAMIC ? "dynamic" : "off";
}
