/* test_server_serve_rt.c - the serving runtime on a server object without a
 * daemon (a store in a temporary directory, the server's clock the test's):
 * a router's queued request at zero asks for a reconcile at once, which
 * submits a replica job as the service's user; the agent's endpoint report
 * puts it in the routing table at the node's address; a probe that fails
 * after ready takes it out and backs off; the status and metrics show it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/err.h"
#include "server/sched/sched.h"
#include "server/serve/serve.h"
#include "server/srv.h"
#include "tmptree.h"
#include "util/prom.h"
#include "base/banned.h"

#define T0 1800000000000

struct env {
    char dir[64];
    int64_t now;
    struct server s;
};

static int64_t test_now(void *ctx)
{
    return ((struct env *)ctx)->now;
}

static int64_t test_mono(void)
{
    return 0;
}

static void check(int rc, const char *what, const char *err)
{
    if (rc)
        print_error("%s: %s (%s)\n", what, gpo_strerror(rc), err);
    assert_int_equal(rc, 0);
}

/* Pool main, team ml, node n1 (addr 10.0.0.5, one GPU), user alice, and
 * service chat (min 0). */
static void configure(struct env *e)
{
    struct server *s = &e->s;
    char err[256] = "";
    check(config_load(&s->config, e->now, err, sizeof(err)), "config_load", err);
    struct cluster_pool pool = {.id = 100, .name = strdup("main")};
    check(cluster_pool_add(&s->cluster, &pool, err, sizeof(err)), "pool", err);
    struct cluster_team team = {.id = 101, .weight = 1, .borrow_limit_milli = -1};
    team.name = strdup("ml");
    cluster_idle_default(&team.idle);
    check(cluster_team_add(&s->cluster, &team, err, sizeof(err)), "team", err);
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:i, s:[{s:i, s:s, s:s, s:i}]}", "name", "n1",
                          "addr", "10.0.0.5", "pool", "main", "cpus", 8, "mem_mib", 65536, "gpus",
                          "index", 0, "uuid", "GPU-11111111-2222-3333-4444-555555555555",
                          "gpu_type", "H100-80GB", "mem_mib", 81920);
    struct cluster_node node = {0};
    check(cluster_node_decode(o, 0, &node, err, sizeof(err)), "node", err);
    json_decref(o);
    node.id = 102;
    check(cluster_node_add(&s->cluster, &node, err, sizeof(err)), "node add", err);
    check(nodes_add(&s->nodes, "n1", e->now), "runtime", "");
    struct store_batch *b = store_batch_new();
    assert_int_equal(store_batch_user_put(b, "alice", "alice", "ml", "member", T0), 0);
    check(store_commit_wait(s->store, b, NULL, 0, err, sizeof(err)), "user", err);
    o = json_pack("{s:s, s:s, s:[s], s:i, s:i, s:{s:s}}", "name", "chat", "team", "ml", "command",
                  "serve", "min", 0, "max", 2, "resources", "pool", "main");
    struct cluster_service svc;
    check(cluster_service_decode(o, 0, &svc, err, sizeof(err)), "service", err);
    json_decref(o);
    svc.id = 103;
    svc.user = strdup("alice");
    check(cluster_service_add(&s->cluster, &svc, err, sizeof(err)), "service add", err);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_server_serve_rt.XXXXXX");
    if (!e || !mkdtemp(e->dir))
        return -1;
    e->now = T0;
    e->s.clock = (struct srv_clock){test_now, test_mono, e};
    e->s.cfg.pass_interval_ms = 5000;
    e->s.cfg.node_timeout_ms = 60000;
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/gpuorch.db", e->dir);
    if (store_open_sqlite(path, &e->s.store, err, sizeof(err)) ||
        store_epoch_acquire(e->s.store, &e->s.epoch) || srv_init(&e->s))
        return -1;
    configure(e);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    store_close(e->s.store);
    srv_release(&e->s);
    tmptree_remove(e->dir);
    free(e);
    return 0;
}

/* The replica's job, once the store's completion (the writer thread) has
 * applied it: waits on the completion, not on a clock's promise. */
static struct job *replica_job(struct server *s)
{
    for (int k = 0; k < 5000; k++) {
        pthread_mutex_lock(&s->lock);
        struct job *j = s->jobs.n ? s->jobs.v[s->jobs.n - 1] : NULL;
        bool tracked = s->serve->n && s->serve->v[0]->n && !s->serve->v[0]->submitting;
        pthread_mutex_unlock(&s->lock);
        if (j && tracked)
            return j;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    fail_msg("the replica job was not applied");
    return NULL;
}

static void report_queued(struct server *s, int64_t now, uint32_t queued)
{
    struct proto_load_service load = {.name = "chat", .queued = queued};
    struct proto_router_report rep = {
        .router = "r1", .interval_ms = 1000, .services = &load, .nservices = 1};
    assert_int_equal(serve_router_report(s, &rep, now), 0);
}

static const json_t *chat_endpoints(json_t *table)
{
    return json_object_get(json_array_get(json_object_get(table, "services"), 0), "endpoints");
}

static void a_queued_request_at_zero_starts_a_replica_that_becomes_routable(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    pthread_mutex_lock(&s->lock);
    serve_tick(s, e->now); /* min 0, no traffic: nothing starts */
    assert_int_equal(s->jobs.n, 0);
    assert_int_equal(serve_due_ms(s, e->now), T0 + SERVE_TICK_MS);
    /* The wall clock set back an hour: due at once, not an hour later. */
    assert_int_equal(serve_due_ms(s, e->now - 3600000), e->now - 3600000);
    report_queued(s, e->now + 10, 1);
    assert_int_equal(serve_due_ms(s, e->now), 0); /* at once, not at the next tick */
    serve_tick(s, e->now + 10);
    pthread_mutex_unlock(&s->lock);
    struct job *j = replica_job(s);

    pthread_mutex_lock(&s->lock);
    assert_string_equal(j->user, "alice");
    assert_string_equal(j->spec.serve.service, "chat");
    assert_int_equal(j->spec.serve.replica, 1);
    assert_false(j->spec.requeue);
    json_t *table = serve_routes_json(s);
    assert_int_equal(json_array_size(chat_endpoints(table)), 0); /* not ready yet */
    int64_t rev = json_integer_value(json_object_get(table, "rev"));
    json_decref(table);
    /* Placed and probed ready by its agent. */
    j->state = JOB_RUNNING;
    j->att.n = 1;
    j->att.start_ms = e->now;
    struct proto_endpoint ep = {
        .port = 41234, .ready = true, .metric_milli = PROTO_NONE, .ready_ms = e->now + 5000};
    serve_endpoint(s, j, "n1", &ep, e->now + 5000);
    table = serve_routes_json(s);
    const json_t *eps = chat_endpoints(table);
    assert_int_equal(json_array_size(eps), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(eps, 0), "addr")),
                        "10.0.0.5");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(eps, 0), "port")), 41234);
    assert_true(json_integer_value(json_object_get(table, "rev")) > rev);
    json_decref(table);
    json_t *st = serve_status_json(s, cluster_service_get(&s->cluster, "chat"), e->now + 5000);
    assert_int_equal(json_integer_value(json_object_get(st, "ready")), 1);
    json_decref(st);

    /* Its probe fails after ready: out of the table, and a back-off. */
    ep.ready = false;
    serve_endpoint(s, j, "n1", &ep, e->now + 6000);
    table = serve_routes_json(s);
    assert_int_equal(json_array_size(chat_endpoints(table)), 0);
    json_decref(table);
    st = serve_status_json(s, cluster_service_get(&s->cluster, "chat"), e->now + 6000);
    const json_t *bo = json_object_get(st, "backoff");
    assert_int_equal(json_integer_value(json_object_get(bo, "failures")), 1);
    assert_int_equal(json_integer_value(json_object_get(bo, "until_ms")), e->now + 7000);
    json_decref(st);
    pthread_mutex_unlock(&s->lock);
}

static void the_metrics_list_every_state_of_a_service(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    pthread_mutex_lock(&s->lock);
    serve_tick(s, e->now);
    struct prom *p = prom_new();
    serve_metrics(s->serve, p);
    size_t len = 0;
    const char *text = prom_text(p, &len);
    assert_non_null(
        strstr(text, "gpuorch_service_replicas{service=\"chat\",state=\"draining\"} 0"));
    assert_non_null(strstr(text, "gpuorch_service_desired_replicas{service=\"chat\"} 0"));
    assert_non_null(strstr(text, "gpuorch_service_requests_inflight{service=\"chat\"} 0"));
    prom_free(p);
    pthread_mutex_unlock(&s->lock);
}

/* A router silent for SERVE_ROUTER_FORGET_MS leaves its record to the next
 * new name: routers that come and go do not grow the list; one still
 * reporting keeps its own. */
static void a_silent_routers_record_is_reused_by_a_new_router(void **state)
{
    struct env *e = *state;
    struct server *s = &e->s;
    struct proto_load_service load = {.name = "chat", .inflight = 2};
    struct proto_router_report rep = {.interval_ms = 1000, .services = &load, .nservices = 1};
    pthread_mutex_lock(&s->lock);
    rep.router = "r1";
    assert_int_equal(serve_router_report(s, &rep, e->now), 0);
    rep.router = "r2";
    assert_int_equal(serve_router_report(s, &rep, e->now + SERVE_ROUTER_FORGET_MS - 1), 0);
    assert_int_equal(s->serve->nrouters, 2); /* r1 not silent long enough yet */
    rep.router = "r3";
    assert_int_equal(serve_router_report(s, &rep, e->now + SERVE_ROUTER_FORGET_MS), 0);
    assert_int_equal(s->serve->nrouters, 2); /* r1's record, now r3's */
    assert_string_equal(s->serve->routers[0].name, "r3");
    assert_int_equal(s->serve->routers[0].nloads, 1);
    assert_int_equal(s->serve->routers[0].loads[0].inflight, 2);
    assert_string_equal(s->serve->routers[1].name, "r2");
    pthread_mutex_unlock(&s->lock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            a_queued_request_at_zero_starts_a_replica_that_becomes_routable, setup, teardown),
        cmocka_unit_test_setup_teardown(the_metrics_list_every_state_of_a_service, setup, teardown),
        cmocka_unit_test_setup_teardown(a_silent_routers_record_is_reused_by_a_new_router, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
