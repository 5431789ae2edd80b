/* test_server_idle.c - idle GPUs: the team's "idle" object (defaults, both
 * duration forms, every bad value with its message, round trip), the
 * tracker's decisions on synthetic samples (window, threshold edges, one
 * busy GPU of two, stale samples, warning then action, busy again clears,
 * a policy changed while flagged), and a tick over a hand-built server:
 * fresh samples only, the job's "idle" member, and the metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/err.h"
#include "server/monitor/monitor.h"
#include "cluster/cluster.h"
#include "util/prom.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MIN_MS       60000
#define GPU_A        "GPU-aaaaaaaa-0000-0000-0000-000000000000"
#define GPU_B        "GPU-bbbbbbbb-0000-0000-0000-000000000000"

static char err[512];

static json_t *parse(const char *text)
{
    json_t *v = json_loads(text, 0, NULL);
    assert_non_null(v);
    return v;
}

static int decode_text(const char *text, struct cluster_idle *ret)
{
    json_t *v = parse(text);
    err[0] = '\0';
    int rc = cluster_idle_decode(v, ret, err, sizeof(err));
    json_decref(v);
    return rc;
}

/* ---- the policy -------------------------------------------------------- */

static void policy_absent_or_empty_gives_the_defaults(void **state)
{
    (void)state;
    struct cluster_idle p = {.threshold_pct = 77};
    assert_int_equal(cluster_idle_decode(NULL, &p, err, sizeof(err)), 0);
    assert_int_equal(p.threshold_pct, 5);
    assert_int_equal(p.window_s, 1800);
    assert_int_equal(p.action, CLUSTER_IDLE_REPORT);
    assert_int_equal(p.warning_s, 600);
    assert_int_equal(decode_text("{}", &p), 0);
    assert_int_equal(p.window_s, 1800);
    assert_int_equal(decode_text("{\"window_s\": null, \"threshold_pct\": 20}", &p), 0);
    assert_int_equal(p.window_s, 1800);
    assert_int_equal(p.threshold_pct, 20);
}

static void policy_takes_seconds_or_duration_strings(void **state)
{
    (void)state;
    struct cluster_idle p;
    assert_int_equal(decode_text("{\"threshold_pct\": 10, \"window_s\": \"2h\", \"action\": "
                                 "\"requeue\", \"warning_s\": \"00:05:00\"}",
                                 &p),
                     0);
    assert_int_equal(p.threshold_pct, 10);
    assert_int_equal(p.window_s, 7200);
    assert_int_equal(p.action, CLUSTER_IDLE_REQUEUE);
    assert_int_equal(p.warning_s, 300);
    assert_int_equal(decode_text("{\"window_s\": 1, \"warning_s\": 0, \"action\": \"cancel\"}", &p),
                     0);
    assert_int_equal(p.window_s, 1);
    assert_int_equal(p.warning_s, 0);
    assert_int_equal(p.action, CLUSTER_IDLE_CANCEL);
    assert_int_equal(decode_text("{\"threshold_pct\": 100, \"window_s\": \"30d\"}", &p), 0);
    assert_int_equal(p.window_s, 30 * 86400);
}

static void policy_refuses_bad_values_naming_the_field(void **state)
{
    (void)state;
    static const struct {
        const char *body, *msg;
    } cases[] = {
        {"[]", "field 'idle': expected an object, got an array"},
        {"{\"threshold_pct\": 101}", "field 'idle.threshold_pct': 101 is out of range 0..100"},
        {"{\"threshold_pct\": -1}", "field 'idle.threshold_pct': -1 is out of range 0..100"},
        {"{\"threshold_pct\": 5.5}", "field 'idle.threshold_pct': expected an integer"},
        {"{\"window_s\": 0}", "field 'idle.window_s': 0 s is out of range 1 s..30 days"},
        {"{\"window_s\": 2592001}", "field 'idle.window_s': 2592001 s is out of range"},
        {"{\"window_s\": \"31d\"}", "field 'idle.window_s': 2678400 s is out of range"},
        {"{\"window_s\": \"soon\"}", "field 'idle.window_s': 'soon' is not a duration"},
        {"{\"window_s\": \"UNLIMITED\"}", "field 'idle.window_s': 'UNLIMITED' is not a duration"},
        {"{\"window_s\": true}", "field 'idle.window_s': expected an integer of seconds"},
        {"{\"warning_s\": -1}", "field 'idle.warning_s': -1 s is out of range 0 s..1 day"},
        {"{\"warning_s\": \"2d\"}", "field 'idle.warning_s': 172800 s is out of range"},
        {"{\"action\": \"kill\"}", "field 'idle.action': 'kill' is not one of 'report', "
                                   "'requeue', 'cancel'"},
        {"{\"action\": 1}", "field 'idle.action': expected a string"},
        {"{\"treshold_pct\": 5}", "unknown field 'idle.treshold_pct'"},
        {"{\"window\": null}", "unknown field 'idle.window'"},
    };
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        struct cluster_idle p = {.threshold_pct = 42};
        assert_int_equal(decode_text(cases[k].body, &p), GPO_EINVAL);
        if (strncmp(err, cases[k].msg, strlen(cases[k].msg)) != 0)
            fail_msg("%s: got \"%s\", want \"%s...\"", cases[k].body, err, cases[k].msg);
        assert_int_equal(p.threshold_pct, 42); /* untouched */
    }
}

static void team_carries_idle_through_json_round_trip(void **state)
{
    (void)state;
    json_t *in = parse("{\"name\": \"ml\", \"idle\": {\"threshold_pct\": 10, \"window_s\": "
                       "\"30m\", \"action\": \"cancel\", \"warning_s\": 60}}");
    struct cluster_team t;
    assert_int_equal(cluster_team_decode(in, 0, &t, err, sizeof(err)), 0);
    json_t *out = cluster_team_to_json(&t, 0);
    json_t *want = parse("{\"threshold_pct\": 10, \"window_s\": 1800, \"action\": \"cancel\", "
                         "\"warning_s\": 60}");
    assert_true(json_equal(json_object_get(out, "idle"), want));
    struct cluster_team back;
    assert_int_equal(cluster_team_decode(out, 0, &back, err, sizeof(err)), 0);
    assert_int_equal(back.idle.window_s, 1800);
    assert_int_equal(back.idle.action, CLUSTER_IDLE_CANCEL);
    cluster_team_release(&back);
    cluster_team_release(&t);
    json_decref(want);
    json_decref(out);
    json_decref(in);

    /* A team without "idle" shows the defaults; a bad one is a 400's message. */
    in = parse("{\"name\": \"cv\"}");
    assert_int_equal(cluster_team_decode(in, 0, &t, err, sizeof(err)), 0);
    out = cluster_team_to_json(&t, 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(out, "idle"), "window_s")),
                     1800);
    cluster_team_release(&t);
    json_decref(out);
    json_decref(in);
    in = parse("{\"name\": \"cv\", \"idle\": {\"action\": \"nap\"}}");
    assert_int_equal(cluster_team_decode(in, 0, &t, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "idle.action"));
    json_decref(in);
}

/* ---- one attempt's decision -------------------------------------------- */

static const struct monitor_idle_obs IDLE_ALL = {.all_fresh = true};
static const struct monitor_idle_obs STALE = {.all_fresh = false};

static struct monitor_idle_obs busy_at(int64_t ms)
{
    return (struct monitor_idle_obs){.busy = true, .all_fresh = true, .busy_ms = ms};
}

static struct cluster_idle policy(enum cluster_idle_action a, int64_t window_s, int64_t warning_s)
{
    struct cluster_idle p;
    cluster_idle_default(&p);
    p.action = a;
    p.window_s = window_s;
    p.warning_s = warning_s;
    return p;
}

static void first_tick_starts_the_clock_and_flags_only_after_a_full_window(void **state)
{
    (void)state;
    struct attempt_idle tr = {0};
    struct cluster_idle p = policy(CLUSTER_IDLE_REPORT, 1800, 600);
    int64_t t0 = 1000000;
    /* Idle from the very first tick: the window counts from there. */
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0), MONITOR_IDLE_NONE);
    assert_int_equal(tr.active_ms, t0);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 29 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 30 * MIN_MS - 1),
                     MONITOR_IDLE_NONE);
    assert_int_equal(tr.since_ms, 0);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 30 * MIN_MS), MONITOR_IDLE_FLAGGED);
    assert_int_equal(tr.since_ms, t0);
    assert_int_equal(tr.flagged_ms, t0 + 30 * MIN_MS);
    assert_int_equal(tr.threshold_pct, 5);
    assert_int_equal(tr.window_s, 1800);
    /* report: flagged and nothing more, however long it stays idle. */
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 300 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_equal(tr.warned_ms, 0);
    assert_int_equal(tr.action_ms, 0);
}

static void busy_sample_restarts_the_window_and_clears_a_flag(void **state)
{
    (void)state;
    struct attempt_idle tr = {0};
    struct cluster_idle p = policy(CLUSTER_IDLE_REPORT, 1800, 600);
    int64_t t0 = 1000000;
    monitor_idle_step(&tr, &p, &IDLE_ALL, t0);
    struct monitor_idle_obs busy = busy_at(t0 + 20 * MIN_MS);
    assert_int_equal(monitor_idle_step(&tr, &p, &busy, t0 + 20 * MIN_MS + 500), MONITOR_IDLE_NONE);
    assert_int_equal(tr.active_ms, t0 + 20 * MIN_MS);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 40 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 50 * MIN_MS), MONITOR_IDLE_FLAGGED);
    assert_int_equal(tr.since_ms, t0 + 20 * MIN_MS);
    busy = busy_at(t0 + 51 * MIN_MS);
    assert_int_equal(monitor_idle_step(&tr, &p, &busy, t0 + 51 * MIN_MS), MONITOR_IDLE_CLEARED);
    assert_int_equal(tr.since_ms, 0);
    assert_int_equal(tr.flagged_ms, 0);
    assert_int_equal(tr.active_ms, t0 + 51 * MIN_MS);
    /* It takes a whole new window to be flagged again. */
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 80 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 81 * MIN_MS), MONITOR_IDLE_FLAGGED);
}

static void stale_samples_neither_flag_nor_clear(void **state)
{
    (void)state;
    struct attempt_idle tr = {0};
    struct cluster_idle p = policy(CLUSTER_IDLE_CANCEL, 1800, 600);
    int64_t t0 = 1000000;
    monitor_idle_step(&tr, &p, &IDLE_ALL, t0);
    /* Past the window, but a GPU was not heard from: no flag yet. */
    assert_int_equal(monitor_idle_step(&tr, &p, &STALE, t0 + 31 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_equal(tr.since_ms, 0);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 32 * MIN_MS), MONITOR_IDLE_WARNED);
    /* Flagged and warned: stale ticks keep the flag and never act. */
    assert_int_equal(monitor_idle_step(&tr, &p, &STALE, t0 + 45 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_not_equal(tr.since_ms, 0);
    assert_int_equal(monitor_idle_step(&tr, &p, &STALE, t0 + 90 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 91 * MIN_MS), MONITOR_IDLE_ACT);
}

static void warning_then_action_unless_busy_again(void **state)
{
    (void)state;
    struct cluster_idle p = policy(CLUSTER_IDLE_REQUEUE, 1800, 600);
    int64_t t0 = 1000000, flag = t0 + 30 * MIN_MS;
    struct attempt_idle tr = {0};
    monitor_idle_step(&tr, &p, &IDLE_ALL, t0);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, flag), MONITOR_IDLE_WARNED);
    assert_int_equal(tr.warned_ms, flag);
    assert_int_equal(tr.action_ms, flag + 10 * MIN_MS);
    assert_int_equal(tr.action, CLUSTER_IDLE_REQUEUE);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, flag + 10 * MIN_MS - 1),
                     MONITOR_IDLE_NONE);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, flag + 10 * MIN_MS), MONITOR_IDLE_ACT);

    /* The same, but a busy sample during the warning: no action, unflagged. */
    struct attempt_idle tr2 = {0};
    monitor_idle_step(&tr2, &p, &IDLE_ALL, t0);
    assert_int_equal(monitor_idle_step(&tr2, &p, &IDLE_ALL, flag), MONITOR_IDLE_WARNED);
    struct monitor_idle_obs busy = busy_at(flag + 5 * MIN_MS);
    assert_int_equal(monitor_idle_step(&tr2, &p, &busy, flag + 5 * MIN_MS), MONITOR_IDLE_CLEARED);
    assert_int_equal(tr2.warned_ms, 0);
    assert_int_equal(tr2.action_ms, 0);
    assert_int_equal(monitor_idle_step(&tr2, &p, &IDLE_ALL, flag + 11 * MIN_MS), MONITOR_IDLE_NONE);

    /* A zero warning acts at the next idle tick after the flag, not at it. */
    struct cluster_idle now = policy(CLUSTER_IDLE_CANCEL, 60, 0);
    struct attempt_idle tr3 = {0};
    monitor_idle_step(&tr3, &now, &IDLE_ALL, t0);
    assert_int_equal(monitor_idle_step(&tr3, &now, &IDLE_ALL, t0 + MIN_MS), MONITOR_IDLE_WARNED);
    assert_int_equal(monitor_idle_step(&tr3, &now, &IDLE_ALL, t0 + MIN_MS + 1), MONITOR_IDLE_ACT);
}

static void policy_changed_while_flagged_applies_from_the_next_tick(void **state)
{
    (void)state;
    struct cluster_idle p = policy(CLUSTER_IDLE_REPORT, 60, 120);
    struct attempt_idle tr = {0};
    int64_t t0 = 1000000;
    monitor_idle_step(&tr, &p, &IDLE_ALL, t0);
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + MIN_MS), MONITOR_IDLE_FLAGGED);
    p.action = CLUSTER_IDLE_CANCEL; /* the team's policy becomes cancel */
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 2 * MIN_MS), MONITOR_IDLE_WARNED);
    assert_int_equal(tr.action_ms, t0 + 4 * MIN_MS);
    p.action = CLUSTER_IDLE_REPORT; /* and back: the warning is withdrawn */
    assert_int_equal(monitor_idle_step(&tr, &p, &IDLE_ALL, t0 + 5 * MIN_MS), MONITOR_IDLE_NONE);
    assert_int_equal(tr.action_ms, 0);
    assert_int_not_equal(tr.since_ms, 0);
}

/* ---- observations from samples ----------------------------------------- */

/* A GPU's sample with only a utilization (PROTO_NONE: not reported). */
static struct proto_gpu_sample gpu_sample(uint32_t index, const char *uuid, int64_t util)
{
    struct proto_gpu_sample g = {.index = index, .uuid = strdup(uuid)};
    g.utilization_pct = util;
    g.memory_utilization_pct = g.memory_used_mib = g.memory_total_mib = g.power_mw =
        g.temperature_c = PROTO_NONE;
    return g;
}

/* A heartbeat of GPUs A and B at utilizations a and b, and a third GPU that
 * failed to sample. */
static struct proto_heartbeat sample2(int64_t a, int64_t b)
{
    struct proto_heartbeat hb = {.sampled_at_ms = PROTO_NONE, .ngpus = 3};
    hb.gpus = calloc(3, sizeof(*hb.gpus));
    hb.gpus[0] = gpu_sample(0, GPU_A, a);
    hb.gpus[1] = gpu_sample(1, GPU_B, b);
    hb.gpus[2] = (struct proto_gpu_sample){.index = 2, .error = strdup("lost")};
    return hb;
}

static struct attempt_share shares2[] = {{"n1", GPU_A, 1000, 0}, {"n1", GPU_B, 1000, 0}};

static void observe_needs_every_gpu_under_the_threshold(void **state)
{
    (void)state;
    struct attempt a = {.n = 1, .shares = shares2, .nshares = 2};
    struct monitor_idle_samples t = {0};
    struct proto_heartbeat s = sample2(4, 90);
    assert_int_equal(monitor_idle_samples_add(&t, "n1", &s, 5000), 0);
    assert_int_equal(t.n, 2); /* the GPU with an error is left out */
    monitor_idle_samples_sort(&t);
    struct monitor_idle_obs o = monitor_idle_observe(&a, &t, 5);
    assert_true(o.busy); /* one busy GPU of two keeps the job active */
    assert_int_equal(o.busy_ms, 5000);
    monitor_idle_samples_release(&t);
    proto_heartbeat_release(&s);

    /* Threshold edges: at the threshold is busy, one under is idle. */
    s = sample2(4, 5);
    monitor_idle_samples_add(&t, "n1", &s, 6000);
    monitor_idle_samples_sort(&t);
    assert_true(monitor_idle_observe(&a, &t, 5).busy);
    o = monitor_idle_observe(&a, &t, 6);
    assert_false(o.busy);
    assert_true(o.all_fresh);
    /* Threshold 0: nothing is under it, never idle. */
    assert_true(monitor_idle_observe(&a, &t, 0).busy);
    monitor_idle_samples_release(&t);
    proto_heartbeat_release(&s);

    /* A GPU with no fresh sample: not all fresh, and no evidence of use. */
    struct proto_heartbeat one = {.sampled_at_ms = PROTO_NONE, .ngpus = 1};
    one.gpus = calloc(1, sizeof(*one.gpus));
    one.gpus[0] = gpu_sample(1, GPU_B, 0);
    monitor_idle_samples_add(&t, "n1", &one, 7000);
    monitor_idle_samples_sort(&t);
    o = monitor_idle_observe(&a, &t, 5);
    assert_false(o.busy);
    assert_false(o.all_fresh);
    monitor_idle_samples_release(&t);
    o = monitor_idle_observe(&a, &t, 5); /* an empty table */
    assert_false(o.busy);
    assert_false(o.all_fresh);
    proto_heartbeat_release(&one);

    /* A quarter of a shared GPU is judged by the whole GPU's utilization. */
    struct attempt_share quarter = {"n1", GPU_A, 250, 0};
    struct attempt frac = {.n = 1, .shares = &quarter, .nshares = 1};
    s = sample2(40, 0);
    monitor_idle_samples_add(&t, "n1", &s, 8000);
    monitor_idle_samples_sort(&t);
    assert_true(monitor_idle_observe(&frac, &t, 40).busy);
    o = monitor_idle_observe(&frac, &t, 41);
    assert_false(o.busy);
    assert_true(o.all_fresh);
    monitor_idle_samples_release(&t);
    proto_heartbeat_release(&s);
}

/* Two node records with the same UUIDs (a machine registered again under
 * another name): the samples of one never stand for the other's GPUs. */
static void observe_takes_a_gpu_by_node_and_uuid(void **state)
{
    (void)state;
    struct attempt a = {.n = 1, .shares = shares2, .nshares = 2};
    struct monitor_idle_samples t = {0};
    struct proto_heartbeat twin = sample2(90, 90), own = sample2(1, 1);
    assert_int_equal(monitor_idle_samples_add(&t, "n0-old", &twin, 5000), 0);
    struct monitor_idle_obs o;
    monitor_idle_samples_sort(&t);
    o = monitor_idle_observe(&a, &t, 5);
    assert_false(o.busy); /* n0-old's busy GPUs are not n1's */
    assert_false(o.all_fresh);
    assert_int_equal(monitor_idle_samples_add(&t, "n1", &own, 6000), 0);
    monitor_idle_samples_sort(&t);
    o = monitor_idle_observe(&a, &t, 5);
    assert_false(o.busy);
    assert_true(o.all_fresh);
    monitor_idle_samples_release(&t);
    proto_heartbeat_release(&twin);
    proto_heartbeat_release(&own);
}

/* ---- a tick over a hand-built server ----------------------------------- */

struct fixture {
    struct monitor m;
    struct cluster cluster;
    struct jobs jobs;
    struct nodes nodes;
    struct job job;
    struct job *v[1];
    struct node_rt rt[1];
};

static void fixture_init(struct fixture *f, const char *team_idle)
{
    memset(f, 0, sizeof(*f));
    cluster_init(&f->cluster);
    char text[256];
    snprintf(text, sizeof(text), "{\"name\": \"ml\", \"idle\": %s}", team_idle);
    json_t *o = parse(text);
    struct cluster_team t;
    assert_int_equal(cluster_team_decode(o, 0, &t, err, sizeof(err)), 0);
    t.id = 1;
    assert_int_equal(cluster_team_add(&f->cluster, &t, err, sizeof(err)), 0);
    json_decref(o);
    f->job = (struct job){.id = 7, .team = "ml", .state = JOB_RUNNING};
    f->job.spec.project = "llm";
    f->job.att = (struct attempt){
        .n = 1, .running = true, .start_ms = 1000, .shares = shares2, .nshares = 2};
    f->v[0] = &f->job;
    f->jobs = (struct jobs){.v = f->v, .n = 1};
    snprintf(f->rt[0].name, sizeof(f->rt[0].name), "n1");
    f->nodes = (struct nodes){.v = f->rt, .n = 1};
    f->m = (struct monitor){.cluster = &f->cluster, .jobs = &f->jobs, .nodes = &f->nodes};
}

static void fixture_sample(struct fixture *f, int64_t a, int64_t b, int64_t ms)
{
    proto_heartbeat_release(&f->rt[0].sample);
    f->rt[0].sample = sample2(a, b);
    f->rt[0].has_sample = true;
    f->rt[0].sample_ms = ms;
}

static void fixture_release(struct fixture *f)
{
    proto_heartbeat_release(&f->rt[0].sample);
    monitor_release(&f->m);
    cluster_release(&f->cluster);
}

/* One tick of the tracker; the acts it orders are not needed here. */
static void tick(struct fixture *f, int64_t now)
{
    struct monitor_idle_act *acts = NULL;
    size_t n = 0;
    assert_int_equal(monitor_idle_tick(&f->m, now, &acts, &n), 0);
    free(acts);
}

static void tick_flags_a_job_on_fresh_idle_samples_and_shows_it(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "{\"threshold_pct\": 10, \"window_s\": 2}");
    int64_t t0 = 1800000000000;
    fixture_sample(&f, 0, 3, t0 - 100);
    tick(&f, t0); /* first sight */
    json_t *j = monitor_idle_job_json(&f.job);
    assert_true(json_is_null(j));
    json_decref(j);
    /* No new sample since the last tick: stale, so no flag however late. */
    tick(&f, t0 + 5000);
    assert_int_equal(f.job.att.idle.since_ms, 0);
    fixture_sample(&f, 0, 3, t0 + 5500);
    tick(&f, t0 + 6000);
    assert_int_equal(f.job.att.idle.since_ms, t0);
    j = monitor_idle_job_json(&f.job);
    assert_string_equal(json_string_value(json_object_get(j, "since")), "2027-01-15T08:00:00Z");
    assert_int_equal(json_integer_value(json_object_get(j, "threshold_pct")), 10);
    assert_int_equal(json_integer_value(json_object_get(j, "window_s")), 2);
    assert_string_equal(json_string_value(json_object_get(j, "action")), "report");
    assert_true(json_is_null(json_object_get(j, "action_at")));
    json_decref(j);

    struct prom *p = prom_new();
    monitor_idle_metrics(&f.m, p);
    size_t len;
    const char *text = prom_text(p, &len);
    assert_non_null(text);
    assert_non_null(
        strstr(text, "gpuorch_job_idle{hpc_job=\"7\",team=\"ml\",project=\"llm\"} 1\n"));
    assert_non_null(strstr(text, "gpuorch_idle_jobs{team=\"ml\"} 1\n"));
    assert_non_null(strstr(text, "gpuorch_idle_actions_total{team=\"ml\",action=\"requeue\"} 0\n"));
    prom_free(p);

    /* One GPU rises to 50 %: cleared at the next tick. */
    fixture_sample(&f, 0, 50, t0 + 7000);
    tick(&f, t0 + 7100);
    assert_int_equal(f.job.att.idle.since_ms, 0);
    j = monitor_idle_job_json(&f.job);
    assert_true(json_is_null(j));
    json_decref(j);
    fixture_release(&f);
}

static void tick_skips_jobs_not_running_or_being_killed(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, "{\"window_s\": 1}");
    int64_t t0 = 1800000000000;
    f.job.att.running = false; /* assigned, not started */
    fixture_sample(&f, 0, 0, t0);
    tick(&f, t0);
    fixture_sample(&f, 0, 0, t0 + 5000);
    tick(&f, t0 + 5000);
    assert_int_equal(f.job.att.idle.active_ms, 0);
    f.job.att.running = true;
    f.job.att.kill = KILL_CANCELLED;
    fixture_sample(&f, 0, 0, t0 + 9000);
    tick(&f, t0 + 9000);
    assert_int_equal(f.job.att.idle.active_ms, 0);
    fixture_release(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(policy_absent_or_empty_gives_the_defaults),
        cmocka_unit_test(policy_takes_seconds_or_duration_strings),
        cmocka_unit_test(policy_refuses_bad_values_naming_the_field),
        cmocka_unit_test(team_carries_idle_through_json_round_trip),
        cmocka_unit_test(first_tick_starts_the_clock_and_flags_only_after_a_full_window),
        cmocka_unit_test(busy_sample_restarts_the_window_and_clears_a_flag),
        cmocka_unit_test(stale_samples_neither_flag_nor_clear),
        cmocka_unit_test(warning_then_action_unless_busy_again),
        cmocka_unit_test(policy_changed_while_flagged_applies_from_the_next_tick),
        cmocka_unit_test(observe_needs_every_gpu_under_the_threshold),
        cmocka_unit_test(observe_takes_a_gpu_by_node_and_uuid),
        cmocka_unit_test(tick_flags_a_job_on_fresh_idle_samples_and_shows_it),
        cmocka_unit_test(tick_skips_jobs_not_running_or_being_killed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
