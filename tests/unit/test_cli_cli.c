/* test_cli_cli.c - what the user commands share: the flag reader (long,
 * short, attached and separate values, "--", unknown flags), the
 * configuration file (every error named by file and line), where the server
 * and token come from (flags, then environment, then the file), API errors
 * as one line against a loopback server, paging through GET /v1/jobs, and
 * times and sizes as people read them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli/cli.h"
#include "http/http.h"
#include "tmptree.h"
#include "base/banned.h"

/* ---- flags ---- */

struct args {
    const char *name, *time;
    bool quiet;
};

static const struct cli_opt opts[] = {
    {"job-name", 'J', true, 1, offsetof(struct args, name)},
    {"time", 't', true, 1, offsetof(struct args, time)},
    {"quiet", 'q', false, 1, offsetof(struct args, quiet)},
    {"hidden", 0, false, 2, 0},
};

/* Reads argv into a and the positional words (joined by '|') into pos. */
static int read_all(int argc, char **argv, struct args *a, char *pos, size_t len, char *err,
                    size_t errlen)
{
    struct cli_getopt g = {.argc = argc, .argv = argv, .i = 0};
    pos[0] = '\0';
    for (;;) {
        const void *e;
        const char *v;
        int k = cli_getopt_next(&g, opts, 4, sizeof(opts[0]), 1, &e, &v, err, errlen);
        if (k < 0 || k == CLI_GETOPT_END)
            return k;
        if (k == CLI_GETOPT_OPTION)
            cli_opt_store(a, e, v);
        else if (k == CLI_GETOPT_ARG)
            snprintf(pos + strlen(pos), len - strlen(pos), "%s|", v);
        else
            for (; g.i < argc; g.i++)
                snprintf(pos + strlen(pos), len - strlen(pos), "%s|", argv[g.i]);
    }
}

static void flags_take_every_spelling_of_a_value(void **state)
{
    (void)state;
    char *argv[] = {"-J", "a", "--time=5", "x", "-q", "-Jb", "--", "--time", "y"};
    struct args a = {0};
    char pos[256], err[256];
    assert_int_equal(read_all(9, argv, &a, pos, sizeof(pos), err, sizeof(err)), CLI_GETOPT_END);
    assert_string_equal(a.name, "b"); /* the last one wins */
    assert_string_equal(a.time, "5");
    assert_true(a.quiet);
    assert_string_equal(pos, "x|--time|y|"); /* after "--", words are not flags */

    char *argv2[] = {"--job-name", "c", "--time", "-1", "-"};
    struct args b = {0};
    assert_int_equal(read_all(5, argv2, &b, pos, sizeof(pos), err, sizeof(err)), CLI_GETOPT_END);
    assert_string_equal(b.name, "c");
    assert_string_equal(b.time, "-1"); /* a value may start with '-' */
    assert_string_equal(pos, "-|");    /* "-" alone is a word (stdin) */
}

static void flags_refuse_unknown_missing_and_extra_values_with_the_flag_named(void **state)
{
    (void)state;
    struct args a = {0};
    char pos[256], err[256];
    char *unknown[] = {"--jobname", "x"};
    assert_int_equal(read_all(2, unknown, &a, pos, sizeof(pos), err, sizeof(err)), GPO_ENOENT);
    assert_string_equal(err, "unknown option '--jobname'");
    char *hidden[] = {"--hidden"}; /* in the table, not in the mask */
    assert_int_equal(read_all(1, hidden, &a, pos, sizeof(pos), err, sizeof(err)), GPO_ENOENT);
    char *short_unknown[] = {"-z"};
    assert_int_equal(read_all(1, short_unknown, &a, pos, sizeof(pos), err, sizeof(err)),
                     GPO_ENOENT);
    assert_string_equal(err, "unknown option '-z'");
    char *missing[] = {"--time"};
    assert_int_equal(read_all(1, missing, &a, pos, sizeof(pos), err, sizeof(err)), GPO_EUSAGE);
    assert_string_equal(err, "option '--time' needs a value");
    char *extra[] = {"--quiet=yes"};
    assert_int_equal(read_all(1, extra, &a, pos, sizeof(pos), err, sizeof(err)), GPO_EUSAGE);
    assert_string_equal(err, "option '--quiet' takes no value");
    char *attached[] = {"-qx"};
    assert_int_equal(read_all(1, attached, &a, pos, sizeof(pos), err, sizeof(err)), GPO_EUSAGE);
}

/* ---- the configuration file ---- */

static int parse_config(const char *text, struct cli_config *c, char *err, size_t errlen)
{
    return cli_config_parse(text, strlen(text), "/etc/x/config", c, err, errlen);
}

static void config_reads_keys_comments_and_blank_lines(void **state)
{
    (void)state;
    struct cli_config c;
    char err[512];
    const char *text = "# written by make run\n"
                       "\n"
                       "  server =  http://10.0.0.1:8080  \r\n"
                       "\t# indented comment\n"
                       "token_file=tokens/admin.token";
    assert_int_equal(parse_config(text, &c, err, sizeof(err)), 0);
    assert_string_equal(c.server, "http://10.0.0.1:8080");
    assert_string_equal(c.token_file, "tokens/admin.token");
    assert_null(c.token);
    assert_int_equal(c.server_line, 3);
    assert_int_equal(c.token_file_line, 5);
    cli_config_release(&c);
    assert_int_equal(parse_config("", &c, err, sizeof(err)), 0);
    assert_null(c.server);
    cli_config_release(&c);
}

static void config_errors_name_the_file_and_line(void **state)
{
    (void)state;
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"server = http://a\nsevrer = http://b\n",
         "/etc/x/config:2: unknown key 'sevrer' (expected server, token or token_file)"},
        {"# c\n\nserver http://a\n",
         "/etc/x/config:3: expected 'key = value', got 'server http://a'"},
        {"token =\n", "/etc/x/config:1: 'token' has no value"},
        {"server = a\nserver = b\n", "/etc/x/config:2: 'server' is given twice (first on line 1)"},
        {"token = t\n\ntoken_file = f\n",
         "/etc/x/config:3: 'token' and 'token_file' (line 1) exclude each other: keep one"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct cli_config c = {.server = (char *)"untouched"};
        char err[512] = "";
        assert_int_equal(parse_config(cases[k].text, &c, err, sizeof(err)), GPO_EUSAGE);
        assert_string_equal(err, cases[k].want);
        assert_string_equal(c.server, "untouched");
    }
    struct cli_config c;
    char err[256];
    assert_int_equal(cli_config_parse("server = a\0b", 12, "f", &c, err, sizeof(err)), GPO_EUSAGE);
}

/* ---- resolving server and token ---- */

struct tmp {
    char dir[64];
};

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int tmp_setup(void **state)
{
    struct tmp *t = calloc(1, sizeof(*t));
    snprintf(t->dir, sizeof(t->dir), "/tmp/gpuorch-test-cli-XXXXXX");
    if (!mkdtemp(t->dir))
        return -1;
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/gpuorch", t->dir);
    mkdir(sub, 0700);
    write_file(t->dir, "file.token", "gpo_from_file\n");
    write_file(t->dir, "empty.token", "\n  \n");
    *state = t;
    return 0;
}

static int tmp_teardown(void **state)
{
    struct tmp *t = *state;
    tmptree_remove(t->dir);
    free(t);
    return 0;
}

static int resolve(const struct cli_common *f, char **envp, struct cli_conn *c, char *err)
{
    memset(c, 0, sizeof(*c));
    return cli_conn_resolve(f, envp, c, err, CLI_ERR_MAX);
}

static void server_and_token_come_from_flags_then_env_then_config(void **state)
{
    struct tmp *t = *state;
    char xdg[128], home[128], tokfile[256], err[CLI_ERR_MAX];
    struct cli_conn c;
    snprintf(xdg, sizeof(xdg), "XDG_CONFIG_HOME=%s", t->dir);
    snprintf(home, sizeof(home), "HOME=%s/nohome", t->dir);
    write_file(t->dir, "gpuorch/config",
               "server = http://cfg:1\ntoken_file = ../file.token\n"); /* relative to the file */

    char *cfg_only[] = {xdg, home, NULL};
    struct cli_common none = {0};
    assert_int_equal(resolve(&none, cfg_only, &c, err), 0);
    assert_string_equal(c.server, "http://cfg:1");
    assert_string_equal(c.token, "gpo_from_file");

    char *env[] = {xdg, "GPUORCH_SERVER=http://env:2", "GPUORCH_TOKEN=gpo_env", NULL};
    assert_int_equal(resolve(&none, env, &c, err), 0);
    assert_string_equal(c.server, "http://env:2");
    assert_string_equal(c.token, "gpo_env");

    snprintf(tokfile, sizeof(tokfile), "GPUORCH_TOKEN_FILE=%s/file.token", t->dir);
    char *env_file[] = {xdg, tokfile, NULL};
    assert_int_equal(resolve(&none, env_file, &c, err), 0);
    assert_string_equal(c.server, "http://cfg:1"); /* each from its own first place */
    assert_string_equal(c.token, "gpo_from_file");

    struct cli_common flags = {.server = "https://flag:3", .token = "gpo_flag"};
    assert_int_equal(resolve(&flags, env, &c, err), 0);
    assert_string_equal(c.server, "https://flag:3");
    assert_string_equal(c.token, "gpo_flag");

    /* Nothing anywhere but a token: the default server. */
    char *bare[] = {home, "GPUORCH_TOKEN=t", NULL};
    assert_int_equal(resolve(&none, bare, &c, err), 0);
    assert_string_equal(c.server, CLI_DEFAULT_SERVER);
}

static void resolution_errors_say_where_the_bad_value_came_from(void **state)
{
    struct tmp *t = *state;
    char home[128], cfg[256], bad[256], err[CLI_ERR_MAX], path[256];
    struct cli_conn c;
    struct cli_common none = {0};
    snprintf(home, sizeof(home), "HOME=%s/nohome", t->dir);

    char *no_token[] = {home, NULL};
    assert_int_equal(resolve(&none, no_token, &c, err), GPO_EUSAGE);
    assert_non_null(strstr(err, "no token"));
    assert_non_null(strstr(err, "/nohome/.config/gpuorch/config"));

    snprintf(cfg, sizeof(cfg), "GPUORCH_CONFIG=%s/missing", t->dir);
    char *missing[] = {cfg, "GPUORCH_TOKEN=t", NULL};
    assert_int_equal(resolve(&none, missing, &c, err), GPO_EUSAGE);
    assert_non_null(strstr(err, "(from GPUORCH_CONFIG): No such file"));

    write_file(t->dir, "bad.conf", "server = http://x\nport = 1\n");
    snprintf(bad, sizeof(bad), "GPUORCH_CONFIG=%s/bad.conf", t->dir);
    char *badcfg[] = {bad, NULL};
    assert_int_equal(resolve(&none, badcfg, &c, err), GPO_EUSAGE);
    snprintf(path, sizeof(path), "%s/bad.conf:2: unknown key 'port'", t->dir);
    assert_non_null(strstr(err, path));

    char *bad_url[] = {"GPUORCH_SERVER=localhost:8080", "GPUORCH_TOKEN=t", NULL};
    assert_int_equal(resolve(&none, bad_url, &c, err), GPO_EUSAGE);
    assert_string_equal(err, "server 'localhost:8080' (from GPUORCH_SERVER): expected "
                             "http://HOST:PORT or https://HOST:PORT");

    snprintf(path, sizeof(path), "%s/empty.token", t->dir);
    struct cli_common empty = {.token_file = path};
    assert_int_equal(resolve(&empty, no_token, &c, err), GPO_EUSAGE);
    assert_non_null(strstr(err, "(from --token-file) is empty"));

    struct cli_common both = {.token = "a", .token_file = "b"};
    assert_int_equal(resolve(&both, no_token, &c, err), GPO_EUSAGE);
    struct cli_common spaced = {.token = "two words"};
    assert_int_equal(resolve(&spaced, no_token, &c, err), GPO_EUSAGE);
    assert_non_null(strstr(err, "the token from --token is not a token"));
}

/* ---- API calls against a loopback server ---- */

static int h_error(struct http_request *req, void *ctx)
{
    (void)ctx;
    return http_request_error(req, 400, "invalid_field", "field 'gpus': 5000 is out of range");
}

static int h_text(struct http_request *req, void *ctx)
{
    (void)ctx;
    static const char text[] = "<html>\nbad gateway\n</html>";
    return http_request_respond_static(req, 502, "text/html", text, sizeof(text) - 1);
}

/* Three pages of jobs: ids 1..5, two per page, keyset paging on after=. */
static int h_jobs(struct http_request *req, void *ctx)
{
    (void)ctx;
    const char *after = http_request_query(req, "after"), *state = http_request_query(req, "state");
    long a = after ? strtol(after, NULL, 10) : 0;
    json_t *jobs = json_array();
    for (long id = a + 1; id <= 5 && id <= a + 2; id++)
        json_array_append_new(jobs, json_pack("{s:i, s:s}", "id", (int)id, "state", state));
    json_t *next = a + 2 < 5 ? json_integer(a + 2) : json_null();
    return http_request_respond_json(req, 200,
                                     json_pack("{s:o, s:o}", "jobs", jobs, "next_after", next));
}

static const struct http_route routes[] = {
    {"GET", "/error", h_error, 0},
    {"GET", "/text", h_text, 0},
    {"GET", "/v1/jobs", h_jobs, 0},
};

struct srv {
    struct http_server *srv;
    struct cli c;
};

static int srv_setup(void **state)
{
    struct srv *s = calloc(1, sizeof(*s));
    struct http_config cfg = {.bind_addr = "127.0.0.1", .routes = routes, .nroutes = 3};
    char err[256], url[64];
    if (!s || http_server_new(&cfg, &s->srv, err, sizeof(err)) ||
        http_server_start(s->srv, err, sizeof(err)))
        return -1;
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", http_server_port(s->srv));
    s->c.cmd = "test";
    if (httpc_new(url, "tok", &s->c.http, err, sizeof(err)))
        return -1;
    *state = s;
    return 0;
}

static int srv_teardown(void **state)
{
    struct srv *s = *state;
    cli_disconnect(&s->c);
    http_server_free(s->srv);
    free(s);
    return 0;
}

static void api_errors_become_one_line_with_status_and_code(void **state)
{
    struct srv *s = *state;
    char err[CLI_ERR_MAX];
    long status = 0;
    json_t *v = (json_t *)1;
    assert_int_equal(cli_call(&s->c, "GET", "/error", NULL, &status, &v, err, sizeof(err)),
                     GPO_EAPI);
    assert_int_equal(status, 400);
    assert_string_equal(err, "400 invalid_field: field 'gpus': 5000 is out of range");
    assert_ptr_equal(v, (json_t *)1); /* untouched */
    assert_int_equal(cli_call(&s->c, "GET", "/text", NULL, &status, NULL, err, sizeof(err)),
                     GPO_EAPI);
    assert_string_equal(err, "502: <html>"); /* the first line of what came */
    assert_int_equal(cli_call(&s->c, "GET", "/nowhere", NULL, &status, NULL, err, sizeof(err)),
                     GPO_EAPI);
    assert_int_equal(status, 404);
    assert_null(strchr(err, '\n'));

    /* A server that is not there: the client's line, marked as no answer. */
    struct cli gone = {.cmd = "test"};
    assert_int_equal(httpc_new("http://127.0.0.1:1", "t", &gone.http, NULL, 0), 0);
    assert_int_equal(cli_call(&gone, "GET", "/v1/jobs", NULL, NULL, NULL, err, sizeof(err)),
                     GPO_ECONNREFUSED);
    assert_non_null(strstr(err, "no answer: GET http://127.0.0.1:1/v1/jobs"));
    cli_disconnect(&gone);
}

static void job_lists_are_read_page_after_page(void **state)
{
    struct srv *s = *state;
    char err[CLI_ERR_MAX];
    json_t *all = json_array();
    assert_int_equal(cli_jobs_list(&s->c, "state=RUNNING", all, err, sizeof(err)), 0);
    assert_int_equal(json_array_size(all), 5);
    for (size_t k = 0; k < 5; k++) {
        assert_int_equal(json_integer_value(json_object_get(json_array_get(all, k), "id")), k + 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(all, k), "state")),
                            "RUNNING");
    }
    json_decref(all);
}

/* ---- output ---- */

static void ages_and_sizes_read_as_people_say_them(void **state)
{
    (void)state;
    char buf[32];
    int64_t now = INT64_C(1796000000000); /* 2026-11-30T00:53:20Z */
    assert_string_equal(cli_age("2026-11-30T00:53:15Z", now, buf, sizeof(buf)), "5s ago");
    assert_string_equal(cli_age("2026-11-30T00:23:20Z", now, buf, sizeof(buf)), "30m ago");
    assert_string_equal(cli_age("2026-11-29T21:53:20Z", now, buf, sizeof(buf)), "3h ago");
    assert_string_equal(cli_age("2026-11-28T00:53:20Z", now, buf, sizeof(buf)), "2d ago");
    assert_string_equal(cli_age("2026-11-30T01:00:00Z", now, buf, sizeof(buf)), "now");
    assert_string_equal(cli_age(NULL, now, buf, sizeof(buf)), "-");
    assert_string_equal(cli_age("yesterday", now, buf, sizeof(buf)), "-");
    assert_string_equal(cli_size_text(65536, buf, sizeof(buf)), "64G");
    assert_string_equal(cli_size_text(1536, buf, sizeof(buf)), "1536M");
    assert_string_equal(cli_size_text(2 << 20, buf, sizeof(buf)), "2T");
    int64_t n;
    assert_int_equal(cli_parse_int("42", 1, 100, &n), 0);
    assert_int_equal(n, 42);
    assert_int_equal(cli_parse_int("+42", 1, 100, &n), GPO_EUSAGE);
    assert_int_equal(cli_parse_int("0", 1, 100, &n), GPO_EUSAGE);
    assert_int_equal(cli_parse_int("4x", 1, 100, &n), GPO_EUSAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flags_take_every_spelling_of_a_value),
        cmocka_unit_test(flags_refuse_unknown_missing_and_extra_values_with_the_flag_named),
        cmocka_unit_test(config_reads_keys_comments_and_blank_lines),
        cmocka_unit_test(config_errors_name_the_file_and_line),
        cmocka_unit_test_setup_teardown(server_and_token_come_from_flags_then_env_then_config,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(resolution_errors_say_where_the_bad_value_came_from,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(api_errors_become_one_line_with_status_and_code, srv_setup,
                                        srv_teardown),
        cmocka_unit_test_setup_teardown(job_lists_are_read_page_after_page, srv_setup,
                                        srv_teardown),
        cmocka_unit_test(ages_and_sizes_read_as_people_say_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
