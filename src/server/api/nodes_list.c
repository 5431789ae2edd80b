/*
 * nodes_list.c - GET /v1/nodes: every node with its runtime (heartbeat,
 * last GPU sample, dirty GPUs) and how much of its GPUs is in use, in GPU
 * shares (jobs_gpu_milli_in_use: a 0.25 job is 0.25 of a GPU). Under
 * private_data "nodes" a member sees the processes of its own team's jobs
 * only: how busy a node is, not whose work is on it.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "proto/proto.h"
#include "server/api/api.h"
#include "server/mig/mig.h"
#include "server/srv.h"
#include "util/timefmt.h"
#include "base/banned.h"

/* Marks each GPU of the node's JSON "in_use" (some attempt holds a share of
 * it) and "share_in_use" (how much of it, jobs_gpu_milli_in_use: 0.25 for a
 * 0.25 job), and sets the node's "gpus_in_use", the sum of those shares:
 * aggregates every user may see. */
static int mark_in_use(json_t *o, const struct cluster_node *node, const struct gpu_holder *held,
                       size_t nheld)
{
    json_t *gpus = json_object_get(o, "gpus");
    uint64_t milli = 0;
    int e = 0;
    for (size_t g = 0; g < node->ngpus; g++) {
        size_t lo, hi;
        jobs_gpu_holders_of(held, nheld, node->name, node->gpus[g].uuid, &lo, &hi);
        uint32_t used = jobs_gpu_milli_in_use(held, lo, hi);
        milli += used;
        json_t *gpu = json_array_get(gpus, g);
        e |= json_object_set_new(gpu, "in_use", json_boolean(hi > lo));
        e |= json_object_set_new(gpu, "share_in_use", json_real((double)used / 1000.0));
    }
    return e | json_object_set_new(o, "gpus_in_use", json_real((double)milli / 1000.0));
}

/* MIG on the node's JSON: its layout setting's mode ("mig_mode": off,
 * static, dynamic), and per MIG GPU whether a plan is in flight
 * ("mig_planning") and per instance the job that holds it ("job": an id,
 * null when free; "in use" without the id where the holder's team is
 * private to this user). */
static void mark_mig(struct server *s, struct http_request *req, json_t *o,
                     const struct cluster_node *node, const struct migctl_holders *held)
{
    const struct cluster_mig *cm = migctl_setting(&s->cluster, node);
    json_object_set_new(o, "mig_mode", json_string(migctl_mode_name(cm ? cm->mode : 0)));
    json_t *gpus = json_object_get(o, "gpus");
    for (size_t g = 0; g < node->ngpus; g++) {
        const struct cluster_gpu *gpu = &node->gpus[g];
        json_t *e = json_array_get(gpus, g);
        if (!gpu->mig_slices)
            continue;
        json_object_set_new(e, "mig_planning",
                            json_boolean(migctl_planning(s->mig, node->name, gpu->uuid)));
        json_t *mig = json_object_get(e, "mig");
        for (size_t k = 0; k < gpu->nmig; k++) {
            int64_t id = migctl_holders_find(held, node->name, gpu->uuid, gpu->mig[k].start);
            const struct job *j = id ? jobs_find(&s->jobs, id) : NULL;
            bool sees = j && api_user_sees(s, req, CLUSTER_PRIVATE_NODES, j->team);
            json_t *inst = json_array_get(mig, k);
            json_object_set_new(inst, "in_use", json_boolean(id != 0));
            json_object_set_new(inst, "job", sees ? json_integer(id) : json_null());
        }
    }
}

/* A member's view of a node's GPU samples while the cluster keeps "nodes"
 * private: the processes of other teams' jobs (and of no job) left out. */
static void samples_filter(struct server *s, struct http_request *req, json_t *samples)
{
    if (!api_visible_team(s, req, CLUSTER_PRIVATE_NODES))
        return;
    size_t i;
    json_t *gpu;
    json_array_foreach(samples, i, gpu)
    {
        json_t *procs = json_object_get(gpu, "processes");
        for (size_t k = json_array_size(procs); k-- > 0;) {
            json_t *id = json_object_get(json_array_get(procs, k), "job");
            const struct job *j =
                json_is_integer(id) ? jobs_find(&s->jobs, json_integer_value(id)) : NULL;
            if (!j || !api_user_sees(s, req, CLUSTER_PRIVATE_NODES, j->team))
                json_array_remove(procs, k);
        }
    }
}

/* One node as GET /v1/nodes shows it to the request's user; under the lock. */
static json_t *node_listed(struct server *s, struct http_request *req,
                           const struct cluster_node *node, const struct gpu_holder *held,
                           size_t nheld, const struct migctl_holders *mig_held)
{
    json_t *o = cluster_node_to_json(node, 0);
    const struct node_rt *rt = nodes_find(&s->nodes, node->name);
    char at[TIMEFMT_RFC3339_LEN] = "";
    if (rt)
        timefmt_rfc3339(rt->last_heartbeat_ms, at, sizeof(at));
    if (o) {
        json_object_set_new(o, "last_heartbeat", at[0] ? json_string(at) : json_null());
        mark_mig(s, req, o, node, mig_held);
        if (mark_in_use(o, node, held, nheld)) {
            json_decref(o);
            return NULL;
        }
    }
    if (o && rt && rt->has_sample) {
        char st[TIMEFMT_RFC3339_LEN] = "";
        timefmt_rfc3339(rt->sample_ms, st, sizeof(st));
        json_t *samples = NULL;
        if (proto_gpu_samples_encode(rt->sample.gpus, rt->sample.ngpus, &samples))
            samples = NULL;
        samples_filter(s, req, samples);
        json_object_set_new(o, "sampled_at", json_string(st));
        json_object_set_new(o, "gpu_samples", samples ? samples : json_null());
    }
    if (o && rt) {
        json_t *dirty = json_array();
        for (size_t d = 0; dirty && d < rt->ndirty; d++)
            json_array_append_new(dirty, json_string(rt->dirty[d]));
        json_object_set_new(o, "dirty_gpus", dirty ? dirty : json_null());
        /* Rejoining: no GPU offered until the agent has said which are clean. */
        json_object_set_new(o, "rejoin_hold", json_boolean(rt->hold));
        json_object_set_new(o, "awaiting_heartbeat", json_boolean(rt->unheard));
    }
    return o;
}

static int node_list(struct http_request *req, void *ctx)
{
    struct server *s = ctx;
    json_t *list = json_array();
    struct gpu_holder *held = NULL;
    size_t nheld = 0;
    struct migctl_holders mig_held = {0};
    pthread_mutex_lock(&s->lock);
    if (jobs_gpu_holders(&s->jobs, &held, &nheld) != 0 || migctl_holders_build(s, &mig_held) != 0) {
        json_decref(list);
        list = NULL;
    }
    for (size_t k = 0; list && k < s->cluster.nnodes; k++) {
        json_t *o = node_listed(s, req, &s->cluster.nodes[k], held, nheld, &mig_held);
        if (!o || json_array_append_new(list, o)) {
            json_decref(list);
            list = NULL;
        }
    }
    pthread_mutex_unlock(&s->lock);
    free(held);
    migctl_holders_release(&mig_held);
    json_t *out = list ? json_pack("{s:o}", "nodes", list) : NULL;
    if (!out)
        return http_request_error(req, 500, "internal", "out of memory");
    return http_request_respond_json(req, 200, out);
}

static const struct http_route routes[] = {
    {"GET", "/v1/nodes", node_list, 0, NULL},
};
const struct api_routes api_node_list_routes = {routes, sizeof(routes) / sizeof(routes[0])};
