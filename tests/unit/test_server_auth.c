/* test_server_auth.c - who may do what, without a daemon: the first start
 * makes the admin and its token file (0600) and the logs key (0600, 32
 * bytes), a restart reuses the secrets, every kind of token against every
 * kind of route, teams' visibility, and nodes' log tokens. A store in a
 * directory of its own under /tmp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/err.h"
#include "server/auth/auth.h"
#include "util/token.h"
#include "tmptree.h"
#include "base/banned.h"

#define T0 1800000000000

struct env {
    char dir[64];
    struct store *store;
    struct auth auth;
    char admin[TOKEN_STR_LEN + 1];
    char join[TOKEN_STR_LEN + 1];
};

static void open_store(struct env *e)
{
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/gpuorch.db", e->dir);
    assert_int_equal(store_open_sqlite(path, &e->store, err, sizeof(err)), 0);
}

static void start(struct env *e)
{
    char err[512] = "";
    int rc = auth_start(&e->auth, e->store, e->dir, T0, err, sizeof(err));
    if (rc)
        print_error("auth_start: %s\n", err);
    assert_int_equal(rc, 0);
}

static void read_token(const char *dir, const char *name, char *out)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s.token", dir, name);
    assert_int_equal(token_read_file(path, out, TOKEN_STR_LEN + 1), 0);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_server_auth.XXXXXX");
    if (!e || !mkdtemp(e->dir) || token_lib_init())
        return -1;
    open_store(e);
    start(e);
    read_token(e->dir, "admin", e->admin);
    read_token(e->dir, "join", e->join);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    store_close(e->store);
    tmptree_remove(e->dir);
    free(e);
    return 0;
}

/* A user `name` of team `team` (NULL: none) and role `role` with a token
 * into out. */
static void add_user(struct env *e, const char *name, const char *team, const char *role, char *out)
{
    uint8_t hash[TOKEN_HASH_LEN];
    assert_int_equal(token_generate(out, TOKEN_STR_LEN + 1), 0);
    assert_int_equal(token_hash(out, hash), 0);
    struct store_batch *b = store_batch_new();
    assert_int_equal(store_batch_user_put(b, name, NULL, team, role, T0), 0);
    assert_int_equal(store_batch_token_put(b, name, hash, "test", T0), 0);
    char msg[256] = "";
    assert_int_equal(store_commit_wait(e->store, b, NULL, 0, msg, sizeof(msg)), 0);
}

static void add_member(struct env *e, const char *name, const char *team, char *out)
{
    add_user(e, name, team, "member", out);
}

static void first_start_makes_the_admin_and_a_private_token_file(void **state)
{
    struct env *e = *state;
    struct stat st;
    char path[128];
    snprintf(path, sizeof(path), "%s/admin.token", e->dir);
    assert_string_equal(e->auth.admin_token_path, path);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* The logs key: its 32 bytes, as private as the tokens. */
    snprintf(path, sizeof(path), "%s/logs.key", e->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(st.st_size, 32);
    struct auth_user u;
    assert_int_equal(auth_check(&e->auth, e->admin, AUTH_NEED_ADMIN, &u), AUTH_OK);
    assert_string_equal(u.name, "admin");
    assert_true(u.admin);
    assert_null(auth_visible_team(&u, true));
}

static void a_restart_keeps_every_secret(void **state)
{
    struct env *e = *state;
    char tok_before[AUTH_LOG_TOKEN_LEN + 1], tok_after[AUTH_LOG_TOKEN_LEN + 1];
    auth_node_log_token(&e->auth, "n1", tok_before);
    struct auth again = {0};
    char err[512] = "";
    assert_int_equal(auth_start(&again, e->store, e->dir, T0 + 1000, err, sizeof(err)), 0);
    char admin[TOKEN_STR_LEN + 1];
    read_token(e->dir, "admin", admin);
    assert_string_equal(admin, e->admin); /* not made again */
    assert_memory_equal(again.join_hash, e->auth.join_hash, sizeof(again.join_hash));
    auth_node_log_token(&again, "n1", tok_after);
    assert_string_equal(tok_before, tok_after);
    struct auth_user u;
    assert_int_equal(auth_check(&again, e->join, AUTH_NEED_AGENT, &u), AUTH_OK);
}

static void tokens_meet_routes(void **state)
{
    struct env *e = *state;
    char alice[TOKEN_STR_LEN + 1];
    add_member(e, "alice", "ml", alice);
    struct auth_user u = {0};
    /* No token, a malformed one, a well-formed unknown one. */
    assert_int_equal(auth_check(&e->auth, NULL, AUTH_NEED_USER, &u), AUTH_NO_TOKEN);
    assert_int_equal(auth_check(&e->auth, "hello", AUTH_NEED_USER, &u), AUTH_BAD_TOKEN);
    char stranger[TOKEN_STR_LEN + 1];
    assert_int_equal(token_generate(stranger, sizeof(stranger)), 0);
    assert_int_equal(auth_check(&e->auth, stranger, AUTH_NEED_USER, &u), AUTH_BAD_TOKEN);
    /* A member: user routes yes, admin routes no. */
    assert_int_equal(auth_check(&e->auth, alice, AUTH_NEED_USER, &u), AUTH_OK);
    assert_string_equal(u.name, "alice");
    assert_string_equal(u.team, "ml");
    assert_false(u.admin);
    assert_int_equal(auth_check(&e->auth, alice, AUTH_NEED_ADMIN, &u), AUTH_NOT_ADMIN);
    /* Agent routes take the join token and only it. */
    assert_int_equal(auth_check(&e->auth, e->join, AUTH_NEED_AGENT, &u), AUTH_OK);
    assert_int_equal(auth_check(&e->auth, alice, AUTH_NEED_AGENT, &u), AUTH_NOT_AGENT);
    assert_int_equal(auth_check(&e->auth, e->admin, AUTH_NEED_AGENT, &u), AUTH_NOT_AGENT);
    assert_int_equal(auth_check(&e->auth, stranger, AUTH_NEED_AGENT, &u), AUTH_BAD_TOKEN);
    /* The join token is no user's. */
    assert_int_equal(auth_check(&e->auth, e->join, AUTH_NEED_USER, &u), AUTH_BAD_TOKEN);
}

static void members_see_their_team_only(void **state)
{
    (void)state;
    struct auth_user admin = {.admin = true}, alice = {.admin = false}, lost = {.admin = false};
    snprintf(alice.team, sizeof(alice.team), "ml");
    assert_true(auth_user_may(&admin, "ml"));
    assert_true(auth_user_may(&admin, "cv"));
    assert_true(auth_user_may(&alice, "ml"));
    assert_false(auth_user_may(&alice, "cv"));
    assert_false(auth_user_may(&alice, NULL));
    assert_false(auth_user_may(&lost, "ml")); /* a member without a team sees none */
    assert_false(auth_user_may(NULL, "ml"));
    assert_string_equal(auth_visible_team(&alice, true), "ml");
    assert_string_equal(auth_visible_team(&lost, true), "");
}

static void metrics_route_takes_an_admin_or_a_metrics_user_only(void **state)
{
    struct env *e = *state;
    char alice[TOKEN_STR_LEN + 1], prom[TOKEN_STR_LEN + 1];
    add_member(e, "alice", "ml", alice);
    add_user(e, "prometheus", NULL, "metrics", prom);
    struct auth_user u = {0};
    assert_int_equal(auth_check(&e->auth, e->admin, AUTH_NEED_METRICS, &u), AUTH_OK);
    assert_int_equal(auth_check(&e->auth, prom, AUTH_NEED_METRICS, &u), AUTH_OK);
    assert_true(u.metrics);
    assert_false(u.admin);
    assert_int_equal(auth_check(&e->auth, alice, AUTH_NEED_METRICS, &u), AUTH_NOT_METRICS);
    /* A scraper's token opens nothing else. */
    assert_int_equal(auth_check(&e->auth, prom, AUTH_NEED_USER, &u), AUTH_ONLY_METRICS);
    assert_int_equal(auth_check(&e->auth, prom, AUTH_NEED_ADMIN, &u), AUTH_ONLY_METRICS);
    assert_int_equal(auth_check(&e->auth, prom, AUTH_NEED_AGENT, &u), AUTH_NOT_AGENT);
}

static void private_kinds_show_members_their_team_and_open_kinds_every_team(void **state)
{
    (void)state;
    struct auth_user admin = {.admin = true}, alice = {.admin = false}, lost = {.admin = false};
    snprintf(alice.team, sizeof(alice.team), "ml");
    assert_string_equal(auth_visible_team(&alice, true), "ml");
    assert_null(auth_visible_team(&alice, false));
    assert_null(auth_visible_team(&admin, true));
    assert_true(auth_user_sees(&alice, true, "ml"));
    assert_false(auth_user_sees(&alice, true, "cv"));
    assert_false(auth_user_sees(&alice, true, NULL));
    assert_true(auth_user_sees(&alice, false, "cv"));
    assert_true(auth_user_sees(&admin, true, "cv"));
    assert_false(auth_user_sees(&lost, true, "ml"));
    assert_false(auth_user_sees(&lost, true, ""));
}

static void log_tokens_differ_per_node(void **state)
{
    struct env *e = *state;
    char a[AUTH_LOG_TOKEN_LEN + 1], b[AUTH_LOG_TOKEN_LEN + 1];
    auth_node_log_token(&e->auth, "n1", a);
    auth_node_log_token(&e->auth, "n2", b);
    assert_int_equal(strlen(a), AUTH_LOG_TOKEN_LEN);
    assert_string_not_equal(a, b);
    for (size_t k = 0; k < AUTH_LOG_TOKEN_LEN; k++)
        assert_non_null(strchr("0123456789abcdef", a[k]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(first_start_makes_the_admin_and_a_private_token_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_restart_keeps_every_secret, setup, teardown),
        cmocka_unit_test_setup_teardown(tokens_meet_routes, setup, teardown),
        cmocka_unit_test(members_see_their_team_only),
        cmocka_unit_test_setup_teardown(metrics_route_takes_an_admin_or_a_metrics_user_only, setup,
                                        teardown),
        cmocka_unit_test(private_kinds_show_members_their_team_and_open_kinds_every_team),
        cmocka_unit_test_setup_teardown(log_tokens_differ_per_node, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
