/*
 * probe.c - `gpuorch agent --probe` (probe.h).
 */
#include "agent/probe.h"

#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "agent/cgroup.h"
#include "agent/sampler.h"
#include "gpu/gpu.h"
#include "proto/proto.h"
#include "base/err.h"
#include "base/banned.h"

static json_t *placement_json(const struct gpu_mig_placement *p)
{
    return json_pack("{s:I, s:I}", "start", (json_int_t)p->start, "size", (json_int_t)p->size);
}

static json_t *mig_profile_json(const struct gpu_mig_profile *p)
{
    json_t *pl = json_array();
    for (unsigned k = 0; pl && k < p->nplacements; k++)
        json_array_append_new(pl, placement_json(&p->placements[k]));
    return json_pack("{s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:o*}", "id", (json_int_t)p->id, "index",
                     (json_int_t)p->index, "name", p->name, "slices", (json_int_t)p->slices,
                     "memory_slices", (json_int_t)p->memory_slices, "memory_mib",
                     (json_int_t)p->memory_mib, "instances_max", (json_int_t)p->instances_max,
                     "placements", pl);
}

static json_t *mig_instance_json(const struct gpu_mig_instance *g)
{
    json_t *cis = json_array();
    for (unsigned c = 0; cis && c < g->ncompute; c++)
        json_array_append_new(
            cis, json_pack("{s:I, s:I, s:I, s:s}", "id", (json_int_t)g->compute[c].id, "profile_id",
                           (json_int_t)g->compute[c].profile_id, "slices",
                           (json_int_t)g->compute[c].slices, "uuid", g->compute[c].uuid));
    /* The instance's MIG device, as gpuorch makes instances: its one compute instance. */
    const char *uuid = g->ncompute ? g->compute[0].uuid : "";
    return json_pack("{s:I, s:I, s:s, s:o*, s:I, s:s, s:o*}", "id", (json_int_t)g->id, "profile_id",
                     (json_int_t)g->profile_id, "profile", g->profile, "placement",
                     placement_json(&g->placement), "memory_mib", (json_int_t)g->memory_mib, "uuid",
                     uuid, "compute_instances", cis);
}

/* A GPU's MIG state: what nvidia-smi mig -lgip and -lgi show; null on a GPU
 * without MIG, {"error": ...} when it cannot be read. */
static json_t *mig_json(const struct gpu_backend *b, unsigned index)
{
    struct gpu_mig *m = malloc(sizeof(*m));
    char err[512] = "out of memory";
    if (!m || gpu_mig_read(b, index, m, err, sizeof(err)) != 0) {
        free(m);
        return json_pack("{s:s}", "error", err);
    }
    json_t *out = json_null();
    if (m->capable) {
        json_t *profiles = json_array(), *instances = json_array();
        for (unsigned p = 0; profiles && p < m->nprofiles; p++)
            json_array_append_new(profiles, mig_profile_json(&m->profiles[p]));
        for (unsigned g = 0; instances && g < m->ninstances; g++)
            json_array_append_new(instances, mig_instance_json(&m->instances[g]));
        out =
            json_pack("{s:s, s:s, s:I, s:o*, s:o*}", "current", m->enabled ? "enabled" : "disabled",
                      "pending", m->pending ? "enabled" : "disabled", "memory_slices",
                      (json_int_t)m->memory_slices, "profiles", profiles, "instances", instances);
    }
    free(m);
    return out;
}

/* What NVML says of each device, beyond what the inventory registers. */
static json_t *devices_json(const struct gpu_backend *b)
{
    json_t *info = json_array();
    for (unsigned i = 0; info && i < gpu_count(b); i++) {
        struct gpu_info g;
        if (gpu_info(b, i, &g, NULL, 0) == 0)
            json_array_append_new(
                info, json_pack("{s:I, s:s, s:s, s:s, s:I, s:b, s:b, s:b, s:o*}", "index",
                                (json_int_t)g.index, "uuid", g.uuid, "name", g.name, "pci_bus_id",
                                g.pci_bus_id, "memory_mib", (json_int_t)g.memory_mib, "mig_capable",
                                g.mig_capable, "mig_enabled", g.mig_enabled, "mig_pending",
                                g.mig_pending, "mig", mig_json(b, i)));
    }
    return info;
}

/* One limit of the layout: {"cgroup": "v1"|"v2", "dir": D}, or null. */
static json_t *limit_json(const struct cgroup_limit *l)
{
    if (l->kind == CGROUP_NONE)
        return json_null();
    return json_pack("{s:s, s:s}", "cgroup", l->kind == CGROUP_V2 ? "v2" : "v1", "dir", l->dir);
}

/* Where --cgroup-root auto puts attempts' cgroups and their limits, or
 * {"error": ...} where there is no cgroup filesystem. */
static json_t *cgroups_json(void)
{
    struct cgroup_layout l;
    char err[512] = "out of memory";
    if (cgroup_layout_read(&l, err, sizeof(err)) != 0)
        return json_pack("{s:s}", "error", err);
    return json_pack("{s:s, s:s, s:o, s:o}", "root", l.root, "root_cgroup",
                     l.root_kind == CGROUP_V2 ? "v2" : "v1", "cpu", limit_json(&l.cpu), "memory",
                     limit_json(&l.memory));
}

int agent_probe(const char *nvml)
{
    struct gpu_backend *b = NULL;
    char err[1024] = "out of memory";
    if (gpu_backend_open(nvml, &b, err, sizeof(err))) {
        fprintf(stderr, "gpuorch agent --probe: %s\n", err);
        return 1;
    }
    struct proto_register reg = {0};
    struct proto_heartbeat hb = {.sampled_at_ms = PROTO_NONE};
    json_t *inv = NULL, *sample = NULL;
    int rc = sampler_inventory(b, &reg, err, sizeof(err));
    rc = rc ? rc : sampler_sample(b, NULL, &hb);
    rc = rc ? rc : proto_gpus_encode(reg.gpus, reg.ngpus, &inv);
    rc = rc ? rc : proto_gpu_samples_encode(hb.gpus, hb.ngpus, &sample);
    json_t *out = rc ? NULL
                     : json_pack("{s:s, s:I, s:o, s:o, s:o, s:o}", "backend", gpu_backend_name(b),
                                 "gpus", (json_int_t)gpu_count(b), "devices", devices_json(b),
                                 "inventory", inv, "sample", sample, "cgroups", cgroups_json());
    if (rc) { /* else json_pack took them, also when it failed */
        json_decref(inv);
        json_decref(sample);
    }
    proto_register_release(&reg);
    proto_heartbeat_release(&hb);
    gpu_backend_close(b);
    if (!out) {
        fprintf(stderr, "gpuorch agent --probe: %s\n", rc == GPO_ENOMEM ? "out of memory" : err);
        return 1;
    }
    char *text = json_dumps(out, JSON_INDENT(2));
    json_decref(out);
    if (text)
        printf("%s\n", text);
    free(text);
    return text ? 0 : 1;
}
