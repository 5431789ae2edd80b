/*
 * migplan.c - MIG repartition plans applied, recorded and reported
 * (migplan.h).
 */
#include "agent/migplan.h"

#include <dirent.h> /* scandir */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/sampler.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "util/text.h"
#include "base/banned.h"

#define RECORD_MAX ((size_t)64 * 1024) /* one result's JSON: 7 instances fit many times */

struct record {
    uint64_t id;
    bool posted; /* the controller has it (DIR/ID.done) */
    bool told;   /* a failure to send it was logged: not again until it is sent */
    char *body;  /* the result's JSON while not posted */
};

struct migplan {
    struct migplan_config cfg;
    char *dir;
    struct record *v;
    size_t n, cap;
};

/* ---- one plan ------------------------------------------------------------ */

/* The name of profile id `id` on the GPU ("1g.10gb"), else "profile id N". */
static const char *profile_name(const struct gpu_mig *m, unsigned id, char *buf, size_t len)
{
    for (unsigned k = 0; k < m->nprofiles; k++) {
        if (m->profiles[k].id == id && m->profiles[k].name[0])
            return m->profiles[k].name;
    }
    snprintf(buf, len, "profile id %u", id);
    return buf;
}

static const struct gpu_mig_instance *at_slot(const struct gpu_mig *m, unsigned start)
{
    for (unsigned k = 0; k < m->ninstances; k++) {
        if (m->instances[k].placement.start == start)
            return &m->instances[k];
    }
    return NULL;
}

/* GPU uuid's index into *ret: 0, or GPO_ENOENT. */
static int find_gpu(const struct gpu_backend *b, const char *uuid, unsigned *ret)
{
    for (unsigned i = 0; i < gpu_count(b); i++) {
        struct gpu_info info;
        if (gpu_info(b, i, &info, NULL, 0) == 0 && strcmp(info.uuid, uuid) == 0) {
            *ret = i;
            return 0;
        }
    }
    return GPO_ENOENT;
}

/* Why instance g may not be destroyed (a process runs on it, or an
 * attempt of ours was given it), into why; 0 when it may. */
static int busy(const struct gpu_backend *b, struct attempts *att, unsigned index,
                const struct gpu_mig *m, const struct gpu_mig_instance *g, char *why, size_t len)
{
    char name[32];
    const char *pname = profile_name(m, g->profile_id, name, sizeof(name));
    for (unsigned c = 0; att && c < g->ncompute; c++) {
        if (g->compute[c].uuid[0] && attempts_mig_in_use(att, g->compute[c].uuid))
            return errbuf_set(why, len, GPO_EBUSY,
                              "instance %s at slot %u (GPU instance %u) is %s, which a job on "
                              "this node was given: not destroyed",
                              pname, g->placement.start, g->id, g->compute[c].uuid);
    }
    struct gpu_sample s = {0};
    if (gpu_sample(b, index, &s, NULL, 0) != 0)
        return 0; /* NVML refuses to destroy an instance in use (IN_USE) */
    int rc = 0;
    for (size_t k = 0; !rc && k < s.nprocs; k++) {
        if (s.procs[k].gpu_instance_id == g->id)
            rc = errbuf_set(why, len, GPO_EBUSY,
                            "instance %s at slot %u (GPU instance %u) runs process %" PRIu32
                            ": not destroyed",
                            pname, g->placement.start, g->id, s.procs[k].pid);
    }
    gpu_sample_release(&s);
    return rc;
}

/* The checks before anything changes: the GPU is ours and in MIG mode, and
 * every instance to destroy is the plan's profile and idle. */
static int plan_check(const struct gpu_backend *b, struct attempts *att, unsigned index,
                      const struct gpu_mig *m, const struct proto_mig_plan *p, char *why,
                      size_t len)
{
    if (!m->capable)
        return errbuf_set(why, len, GPO_ENOTSUP, "GPU %u (%s) has no MIG", index, p->gpu_uuid);
    if (!m->enabled)
        return errbuf_set(why, len, GPO_ENOTSUP,
                          "MIG mode is off on GPU %u (%s%s); the agent never changes MIG mode",
                          index, p->gpu_uuid, m->pending ? ", on after its next reset" : "");
    for (size_t k = 0; k < p->ndestroy; k++) {
        const struct proto_mig_change *d = &p->destroy[k];
        const struct gpu_mig_instance *g = at_slot(m, d->start);
        if (!g)
            continue; /* gone already: nothing to do */
        if (g->profile_id != d->profile_id) {
            char want[32], have[32];
            return errbuf_set(why, len, GPO_EINVAL,
                              "no instance %s at slot %u to destroy: GPU instance %u there is %s",
                              profile_name(m, d->profile_id, want, sizeof(want)), d->start, g->id,
                              profile_name(m, g->profile_id, have, sizeof(have)));
        }
        int rc = busy(b, att, index, m, g, why, len);
        if (rc)
            return rc;
    }
    return 0;
}

/* One instance made or destroyed: through the privileged half when there is
 * one (NVML wants root), else through b. */
static int change(const struct gpu_backend *b, struct priv *priv, unsigned index, bool create,
                  unsigned profile_id, unsigned start, unsigned instance, char *err, size_t len)
{
    struct gpu_mig_instance made;
    if (priv)
        return create ? priv_mig_create(priv, index, profile_id, start, err, len)
                      : priv_mig_destroy(priv, index, instance, err, len);
    return create ? gpu_mig_create(b, index, profile_id, start, &made, err, len)
                  : gpu_mig_destroy(b, index, instance, err, len);
}

/* Destroys, then creates, what p names on GPU index (m: its state before). */
static int plan_change(const struct gpu_backend *b, struct priv *priv, unsigned index,
                       const struct gpu_mig *m, const struct proto_mig_plan *p, char *why,
                       size_t len)
{
    char err[PROTO_ERROR_MAX], name[32];
    for (size_t k = 0; k < p->ndestroy; k++) {
        const struct gpu_mig_instance *g = at_slot(m, p->destroy[k].start);
        if (g && change(b, priv, index, false, 0, 0, g->id, err, sizeof(err)) != 0)
            return errbuf_set(why, len, GPO_EIO, "destroying %s at slot %u: %s",
                              profile_name(m, g->profile_id, name, sizeof(name)),
                              g->placement.start, err);
    }
    for (size_t k = 0; k < p->ncreate; k++) {
        const struct proto_mig_change *c = &p->create[k];
        const struct gpu_mig_instance *g = at_slot(m, c->start);
        bool destroyed = false;
        for (size_t d = 0; g && d < p->ndestroy; d++)
            destroyed |= p->destroy[d].start == c->start;
        if (g && !destroyed && g->profile_id == c->profile_id)
            continue; /* there already */
        if (change(b, priv, index, true, c->profile_id, c->start, 0, err, sizeof(err)) != 0)
            return errbuf_set(why, len, GPO_EIO, "creating %s at slot %u: %s",
                              profile_name(m, c->profile_id, name, sizeof(name)), c->start, err);
    }
    return 0;
}

int migplan_run(const struct gpu_backend *b, struct attempts *att, struct priv *priv,
                const struct proto_mig_plan *p, struct proto_mig_result *ret)
{
    char why[PROTO_ERROR_MAX + 1] = "";
    struct gpu_mig *m = malloc(sizeof(*m));
    if (!m)
        return GPO_ENOMEM;
    unsigned index = 0;
    int rc = find_gpu(b, p->gpu_uuid, &index);
    bool found = rc == 0;
    if (rc)
        errbuf_set(why, sizeof(why), rc, "no GPU %s on this node", p->gpu_uuid);
    else if ((rc = gpu_mig_read(b, index, m, why, sizeof(why))) == 0 &&
             (rc = plan_check(b, att, index, m, p, why, sizeof(why))) == 0)
        rc = plan_change(b, priv, index, m, p, why, sizeof(why));
    struct proto_mig_result r = {.ok = rc == 0};
    /* What the GPU holds now, also after a failure: the controller
     * schedules on it. */
    char err[256] = "";
    int read = found ? gpu_mig_read(b, index, m, err, sizeof(err)) : GPO_ENOENT;
    int mem = read == 0 ? sampler_mig_instances(m, &r.mig, &r.nmig) : 0;
    free(m);
    if (read && found && r.ok) {
        r.ok = false;
        snprintf(why, sizeof(why), "the layout after the plan could not be read: %s", err);
    }
    r.gpu_uuid = strdup(p->gpu_uuid);
    r.error = r.ok ? NULL : strdup(text_fit_line(why[0] ? why : "failed", PROTO_ERROR_MAX));
    if (mem || !r.gpu_uuid || (!r.ok && !r.error)) {
        proto_mig_result_release(&r);
        return GPO_ENOMEM;
    }
    struct proto_gpu_sample fit = {
        .mig_known = true, .mig_enabled = true, .mig = r.mig, .nmig = r.nmig};
    proto_gpu_sample_fit(&fit); /* nothing the controller's decoder would refuse */
    r.mig = fit.mig;
    r.nmig = fit.nmig;
    *ret = r;
    return 0;
}

/* ---- records ------------------------------------------------------------- */

static void record_path(const struct migplan *m, uint64_t id, bool done, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%" PRIu64 ".%s", m->dir, id, done ? "done" : "json");
}

static struct record *find(const struct migplan *m, uint64_t id)
{
    for (size_t k = 0; k < m->n; k++) {
        if (m->v[k].id == id)
            return &m->v[k];
    }
    return NULL;
}

/* A record of id; *body (NULL: none) is taken on success. */
static int add(struct migplan *m, uint64_t id, bool posted, char **body)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        struct record *v = realloc(m->v, cap * sizeof(*v));
        if (!v)
            return GPO_ENOMEM;
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n++] = (struct record){.id = id, .posted = posted, .body = *body};
    *body = NULL;
    return 0;
}

static char *read_body(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    char *buf = malloc(RECORD_MAX + 1);
    size_t len = 0;
    ssize_t r = 0;
    while (buf && len < RECORD_MAX &&
           ((r = read(fd, buf + len, RECORD_MAX - len)) > 0 || (r < 0 && errno == EINTR)))
        len += r > 0 ? (size_t)r : 0;
    close(fd);
    if (buf)
        buf[len] = '\0';
    return buf;
}

/* DIR/ID.json and DIR/ID.done into the table; other names are left alone. */
static int load(struct migplan *m, char *err, size_t errlen)
{
    struct dirent **names = NULL;
    int n = scandir(m->dir, &names, NULL, alphasort);
    if (n < 0)
        return errbuf_set(err, errlen, -errno, "%s: %s", m->dir, strerror(errno));
    int rc = 0;
    for (int k = 0; k < n; k++) {
        const char *name = names[k]->d_name;
        char *end = NULL;
        errno = 0;
        unsigned long long id = strtoull(name, &end, 10);
        bool done = end && strcmp(end, ".done") == 0, pending = end && strcmp(end, ".json") == 0;
        if (!rc && !errno && id && end != name && (done || pending) && !find(m, id)) {
            char path[4200];
            snprintf(path, sizeof(path), "%s/%s", m->dir, name);
            char *body = pending ? read_body(path) : NULL;
            if (pending && !body) {
                m->cfg.log("MIG plan %llu: its result %s cannot be read: not sent", id, path);
                done = true;
            }
            rc = add(m, id, done, &body);
            free(body);
        }
        free(names[k]);
    }
    free(names);
    return rc ? errbuf_set(err, errlen, rc, "out of memory") : 0;
}

int migplan_new(const struct migplan_config *cfg, struct migplan **ret, char *err, size_t errlen)
{
    struct migplan *m = calloc(1, sizeof(*m));
    if (!m || !(m->dir = strdup(cfg->dir))) {
        free(m);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    m->cfg = *cfg;
    m->cfg.dir = m->dir;
    int rc = 0;
    if (mkdir(m->dir, 0700) != 0 && errno != EEXIST)
        rc = errbuf_set(err, errlen, -errno, "%s: %s", m->dir, strerror(errno));
    rc = rc ? rc : load(m, err, errlen);
    if (rc) {
        migplan_free(m);
        return rc;
    }
    *ret = m;
    return 0;
}

void migplan_free(struct migplan *m)
{
    if (!m)
        return;
    for (size_t k = 0; k < m->n; k++)
        free(m->v[k].body);
    free(m->v);
    free(m->dir);
    free(m);
}

bool migplan_applied(const struct migplan *m, uint64_t id)
{
    return m && find(m, id) != NULL;
}

/* Plan ids in order: indices of v sorted by id (n is small: one per GPU). */
static void by_id(const struct proto_mig_plan *v, size_t n, size_t *order)
{
    for (size_t k = 0; k < n; k++) {
        size_t j = k;
        for (; j > 0 && v[order[j - 1]].id > v[k].id; j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
}

/* Applies p and records its result. */
static void apply_one(struct migplan *m, const struct proto_mig_plan *p)
{
    struct proto_mig_result r;
    json_t *o = NULL;
    char *body = NULL;
    if (migplan_run(m->cfg.gpus, m->cfg.att, m->cfg.priv, p, &r) != 0) {
        m->cfg.log("MIG plan %" PRIu64 ": out of memory: not applied", p->id);
        return;
    }
    if (r.ok)
        m->cfg.log("MIG plan %" PRIu64 " on %s: destroyed %zu, created %zu instance(s); %zu now",
                   p->id, p->gpu_uuid, p->ndestroy, p->ncreate, r.nmig);
    else
        m->cfg.log("MIG plan %" PRIu64 " on %s failed: %s (%zu instance(s) now)", p->id,
                   p->gpu_uuid, r.error, r.nmig);
    if (proto_mig_result_encode(&r, &o) == 0)
        body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    proto_mig_result_release(&r);
    char path[4200], err[512];
    record_path(m, p->id, false, path, sizeof(path));
    int rc = body ? fsutil_write_atomic(path, body, strlen(body), 0600, 0, err, sizeof(err)) : 0;
    if (!body || add(m, p->id, false, &body) != 0) {
        free(body);
        m->cfg.log("MIG plan %" PRIu64 ": out of memory: its result is not sent", p->id);
        return;
    }
    if (rc)
        m->cfg.log("MIG plan %" PRIu64 ": %s (a restarted agent would not send its result)", p->id,
                   err);
}

void migplan_apply(struct migplan *m, const struct proto_assignments *answer)
{
    size_t n = answer->nmig_plans;
    size_t *order = calloc(n + 1, sizeof(*order));
    if (!order) {
        m->cfg.log("MIG plans: out of memory: none applied");
        return;
    }
    by_id(answer->mig_plans, n, order);
    for (size_t k = 0; k < n; k++) {
        const struct proto_mig_plan *p = &answer->mig_plans[order[k]];
        if (!find(m, p->id))
            apply_one(m, p);
    }
    free(order);
    /* Done and no longer listed: the controller has let go of it. */
    for (size_t k = 0; k < m->n;) {
        bool listed = false;
        for (size_t j = 0; !listed && j < n; j++)
            listed = answer->mig_plans[j].id == m->v[k].id;
        if (!m->v[k].posted || listed) {
            k++;
            continue;
        }
        char path[4200];
        record_path(m, m->v[k].id, true, path, sizeof(path));
        if (unlink(path) != 0 && errno != ENOENT) {
            k++;
            continue;
        }
        m->v[k] = m->v[--m->n];
    }
}

size_t migplan_report(struct migplan *m, struct httpc *c, const char *prefix)
{
    size_t owed = 0;
    for (size_t k = 0; k < m->n; k++) {
        struct record *r = &m->v[k];
        if (r->posted)
            continue;
        char path[1200], err[512];
        snprintf(path, sizeof(path), "%s/%" PRIu64, prefix, r->id);
        struct httpc_response res = {0};
        int rc =
            httpc_request(c, "POST", path, r->body, strlen(r->body), 15000, &res, err, sizeof(err));
        bool done = !rc && ((res.status >= 200 && res.status < 300) || res.status == 404 ||
                            res.status == 409 || res.status == 410);
        if (!rc && done && (res.status < 200 || res.status >= 300))
            m->cfg.log("MIG plan %" PRIu64 ": the controller answered %ld to its result: %.200s",
                       r->id, res.status, res.body ? res.body : "");
        else if (!done && !r->told)
            m->cfg.log("MIG plan %" PRIu64 ": sending its result: %s (sent again later)", r->id,
                       rc ? err : (res.body ? res.body : "no body"));
        r->told = !done;
        httpc_response_release(&res);
        if (!done) {
            owed++;
            continue;
        }
        char from[4200], to[4200];
        record_path(m, r->id, false, from, sizeof(from));
        record_path(m, r->id, true, to, sizeof(to));
        if (rename(from, to) != 0 && errno != ENOENT)
            m->cfg.log("MIG plan %" PRIu64 ": rename %s: %s", r->id, from, strerror(errno));
        r->posted = true;
        free(r->body);
        r->body = NULL;
    }
    return owed;
}
