/*
 * serve_spec.c - the service a serving replay runs (serve_spec.h).
 *
 * Decisions the header leaves open:
 *  - The document is one service: a mapping with its `name` (a `services:`
 *    list, which `gpuorch service apply -f` also takes, is refused with a
 *    message: the simulator pairs each request trace with one file).
 *  - Everything but `simulate:` goes to cluster_service_decode unchanged, so
 *    the fields, defaults and rules are the controller's; its message, which
 *    names the field ("field 'queue.limit': ..."), gets the file and the
 *    field's line in front.
 *  - What the simulator cannot model is refused: a replica without GPUs, the
 *    autoscaling metric `replica` (a value the replicas export).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/err.h"
#include "cluster/cluster.h"
#include "sim/doc.h"
#include "sim/serve_spec.h"
#include "util/yamljson.h"
#include "base/banned.h"

#define SPEC_FILE_MAX (1u << 20)
#define TPS_MAX       1e9
#define STARTUP_MAX_S 86400.0
#define SLO_MAX_S     86400.0
#define MAX_BATCH_MAX 4096

static const char *const simulate_keys[] = {
    "prefill_tps", "decode_tps", "decode_tps_request", "max_batch", "startup_s", "slo", NULL};
static const char *const slo_keys[] = {"ttft_s", "tpot_ms", "e2e_s", NULL};

/* A number field > 0 (min_open) or >= min, at most max; def when absent
 * (NAN: required). */
static int get_real(struct sim_doc *d, const json_t *o, const char *key, double min, bool min_open,
                    double max, double def, double *ret)
{
    size_t mark = sim_doc_key(d, key);
    const json_t *v = json_object_get(o, key);
    int rc = 0;
    if (!v && isnan(def)) {
        rc = sim_doc_fail(d, GPO_EINVAL, "required field missing");
    } else if (!v) {
        *ret = def;
    } else {
        double x = json_number_value(v);
        if (!json_is_number(v) || (min_open ? !(x > min) : x < min) || x > max) {
            char got[128];
            rc = sim_doc_fail(d, GPO_EINVAL, "expected a number %s %g and <= %g, got %s",
                              min_open ? ">" : ">=", min, max,
                              sim_doc_shown(d, v, got, sizeof(got)));
        } else {
            *ret = x;
        }
    }
    sim_doc_pop(d, mark);
    return rc;
}

/* A time in `unit_ms` units as whole ms, > 0 (at least 1 ms once rounded). */
static int get_time_ms(struct sim_doc *d, const json_t *o, const char *key, double unit_ms,
                       bool zero_ok, int64_t *ret)
{
    double x = 0;
    int rc = get_real(d, o, key, 0, !zero_ok, SLO_MAX_S * 1000 / unit_ms, 0, &x);
    if (rc)
        return rc;
    int64_t ms = (int64_t)llround(x * unit_ms);
    if (ms < 1 && x > 0) {
        size_t mark = sim_doc_key(d, key);
        rc = sim_doc_fail(d, GPO_EINVAL, "%g is below one millisecond", x);
        sim_doc_pop(d, mark);
        return rc;
    }
    *ret = ms;
    return 0;
}

static int decode_slo(struct sim_doc *d, const json_t *sim, struct sim_slo *slo)
{
    size_t mark = sim_doc_key(d, "slo");
    const json_t *o = json_object_get(sim, "slo");
    int rc = 0;
    if (!o)
        rc = sim_doc_fail(d, GPO_EINVAL,
                          "required field missing (a mapping with ttft_s, tpot_ms or e2e_s)");
    rc = rc ? rc : sim_doc_check_object(d, o, slo_keys);
    rc = rc ? rc : get_time_ms(d, o, "ttft_s", 1000, false, &slo->ttft_ms);
    rc = rc ? rc : get_time_ms(d, o, "tpot_ms", 1, false, &slo->tpot_ms);
    rc = rc ? rc : get_time_ms(d, o, "e2e_s", 1000, false, &slo->e2e_ms);
    if (!rc && !slo->ttft_ms && !slo->tpot_ms && !slo->e2e_ms)
        rc = sim_doc_fail(d, GPO_EINVAL, "expected at least one of ttft_s, tpot_ms, e2e_s");
    sim_doc_pop(d, mark);
    return rc;
}

static int decode_simulate(struct sim_doc *d, const json_t *sim, struct sim_serve_service *svc)
{
    struct sim_replica_model *m = &svc->model;
    size_t mark = sim_doc_key(d, "simulate");
    int64_t batch = 0;
    double startup_s = 0;
    static const struct sim_doc_num r_batch = {true, 1, false, MAX_BATCH_MAX, 1, GPO_EINVAL};
    int rc = sim_doc_check_object(d, sim, simulate_keys);
    rc = rc ? rc : get_real(d, sim, "prefill_tps", 0, true, TPS_MAX, NAN, &m->prefill_tps);
    rc = rc ? rc : get_real(d, sim, "decode_tps", 0, true, TPS_MAX, NAN, &m->decode_tps);
    rc = rc ? rc
            : get_real(d, sim, "decode_tps_request", 0, true, TPS_MAX, m->decode_tps,
                       &m->decode_tps_request);
    if (!rc && m->decode_tps_request > m->decode_tps) {
        size_t k = sim_doc_key(d, "decode_tps_request");
        rc = sim_doc_fail(d, GPO_EINVAL,
                          "%g is above decode_tps (%g): one request cannot decode "
                          "faster than its batch",
                          m->decode_tps_request, m->decode_tps);
        sim_doc_pop(d, k);
    }
    rc = rc ? rc : sim_doc_get_num(d, sim, "max_batch", &r_batch, SIM_DOC_REQUIRED, &batch);
    rc = rc ? rc : get_real(d, sim, "startup_s", 0, false, STARTUP_MAX_S, NAN, &startup_s);
    rc = rc ? rc : decode_slo(d, sim, &svc->slo);
    sim_doc_pop(d, mark);
    m->max_batch = (int32_t)batch;
    m->startup_ms = (int64_t)llround(startup_s * 1000);
    return rc;
}

/* The decoder's message with the file and the line of the field it names
 * ("field 'queue.limit': ..." -> "chat.yaml:12: field 'queue.limit': ..."). */
static int service_fail(struct sim_doc *d, const char *msg)
{
    char path[256] = "";
    const char *q = strstr(msg, "field '");
    if (q) {
        q += strlen("field '");
        size_t n = strcspn(q, "'");
        snprintf(path, sizeof(path), "%.*s", (int)(n < sizeof(path) ? n : sizeof(path) - 1), q);
    }
    long line = d->yaml ? yamljson_line(d->yaml, path) : 0;
    if (!line && d->yaml && strstr(msg, "missing required")) /* the mapping it belongs in */
        line = yamljson_line(d->yaml, "");
    return sim_doc_fail_at(d, GPO_EINVAL, line, "%s", msg);
}

static int from_service(struct sim_doc *d, const struct cluster_service *cs,
                        struct sim_serve_service *svc)
{
    const struct jobspec *r = &cs->replica;
    if (cs->autoscale.metric == AUTOSCALE_METRIC_REPLICA) {
        size_t mark = sim_doc_key(d, "autoscaling");
        sim_doc_key(d, "metric");
        int rc = sim_doc_fail(d, GPO_EINVAL,
                              "'replica' scales on a value the replicas export, which the "
                              "simulator does not model (use concurrency or rps)");
        sim_doc_pop(d, mark);
        return rc;
    }
    int64_t milli = r->gpu_milli > 0 ? r->gpu_milli : (int64_t)r->gpus * 1000;
    if (milli <= 0) {
        size_t mark = sim_doc_key(d, "resources");
        sim_doc_key(d, "gpus");
        int rc = sim_doc_fail(d, GPO_EINVAL, "a simulated replica needs GPUs (expected > 0)");
        sim_doc_pop(d, mark);
        return rc;
    }
    snprintf(svc->name, sizeof(svc->name), "%s", cs->name);
    svc->autoscale = cs->autoscale;
    svc->concurrency_limit = cs->concurrency_limit;
    svc->queue_limit = cs->queue_limit;
    svc->queue_timeout_ms = cs->queue_timeout_ms;
    svc->drain_timeout_ms = cs->drain_timeout_s * 1000;
    svc->gpu_milli = milli;
    return 0;
}

static int decode_root(struct sim_doc *d, const json_t *root, struct sim_serve_service *svc)
{
    if (!json_is_object(root) || !json_object_get(root, "name"))
        return sim_doc_fail(d, GPO_EINVAL,
                            "expected one service: a mapping with its name, fields as "
                            "'gpuorch service apply -f' takes, and a 'simulate' section");
    const json_t *sim = json_object_get(root, "simulate");
    if (!sim)
        return sim_doc_fail(d, GPO_EINVAL,
                            "no 'simulate' section: add the replica model the simulator runs "
                            "(simulate: {prefill_tps, decode_tps, max_batch, startup_s, slo: "
                            "{ttft_s, tpot_ms, e2e_s}}; docs/simulator.md, \"Serving\")");
    json_t *copy = json_copy((json_t *)root);
    if (!copy || json_object_del(copy, "simulate") != 0) {
        json_decref(copy);
        return sim_doc_fail(d, GPO_ENOMEM, "out of memory");
    }
    struct cluster_service cs;
    char msg[512] = "";
    int rc = cluster_service_decode(copy, 0, &cs, msg, sizeof(msg));
    json_decref(copy);
    if (rc == GPO_ENOMEM)
        return sim_doc_fail(d, GPO_ENOMEM, "out of memory");
    if (rc)
        return service_fail(d, msg);
    rc = from_service(d, &cs, svc);
    cluster_service_release(&cs);
    return rc ? rc : decode_simulate(d, sim, svc);
}

int sim_serve_spec_parse(const char *text, size_t len, const char *name,
                         struct sim_serve_service *ret, char *err, size_t errlen)
{
    struct sim_doc d;
    struct sim_serve_service svc;
    json_t *root = NULL;
    memset(&svc, 0, sizeof(svc));
    sim_doc_init(&d, name ? name : "service", err, errlen);
    int rc = sim_doc_parse(&d, text, len, &root);
    rc = rc ? rc : decode_root(&d, root, &svc);
    sim_doc_release(&d);
    if (rc)
        return rc == GPO_ENOMEM ? GPO_ENOMEM : GPO_EINVAL;
    *ret = svc;
    return 0;
}

int sim_serve_spec_load(const char *path, struct sim_serve_service *ret, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    int rc = sim_doc_read_file(path, &text, &len, err, errlen);
    if (rc == 0 && len > SPEC_FILE_MAX) {
        if (err && errlen)
            snprintf(err, errlen, "%s: larger than %u MiB", path, SPEC_FILE_MAX >> 20);
        rc = GPO_EINVAL;
    }
    if (rc == 0)
        rc = sim_serve_spec_parse(text, len, path, ret, err, errlen);
    free(text);
    return rc == GPO_ENOMEM ? GPO_ENOMEM : rc ? GPO_EINVAL : 0;
}
