/* test_cli_cli.c - what the user commands share: their flags with the
 * common ones (util/opts.h does the reading), the configuration file (every
 * error named by file and line), where the server and token come from
 * (flags, then environment, then the file), and times and sizes as people
 * read them. The API calls are tested in test_client_client.c. */
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
#include "tmptree.h"
#include "base/banned.h"

/* ---- flags ---- */

struct args {
    struct cli_common co;
    int64_t rank;
    bool all;
};

static const struct opts_opt opts[] = {
    {.name = "rank", .type = OPTS_INT, .min = 0, .max = 9, .offset = offsetof(struct args, rank)},
    {.name = "all", .short_name = 'a', .type = OPTS_FLAG, .offset = offsetof(struct args, all)},
    CLI_OPT_JSON(struct args, co),
    CLI_OPTS_COMMON(struct args, co),
};

static int parse(struct args *a, const char ***pos, size_t *npos, int n, ...)
{
    char *argv[16] = {"test"};
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++)
        argv[k + 1] = va_arg(ap, char *);
    va_end(ap);
    *a = (struct args){0};
    *pos = NULL;
    return cli_parse_args("test", n + 1, argv, CLI_OPTS(opts), a, pos, npos);
}

static void commands_read_their_flags_and_the_common_ones(void **state)
{
    (void)state;
    struct args a;
    const char **pos;
    size_t n;
    assert_int_equal(parse(&a, &pos, &n, 8, "--server", "http://s:1", "-a", "JOB", "--json",
                           "--rank=3", "--token-file", "f"),
                     0);
    assert_string_equal(a.co.server, "http://s:1");
    assert_string_equal(a.co.token_file, "f");
    assert_true(a.all && a.co.json);
    assert_int_equal(a.rank, 3);
    assert_int_equal(n, 1);
    assert_string_equal(pos[0], "JOB");
    free(pos);
    assert_int_equal(parse(&a, &pos, &n, 3, "x", "--rank", "42"), CLI_EXIT_USAGE);
    assert_null(pos);
    assert_int_equal(parse(&a, &pos, &n, 1, "--bogus"), CLI_EXIT_USAGE);
    /* --help wins over a bad value, not over an unknown flag. */
    assert_int_equal(parse(&a, &pos, &n, 3, "--rank", "42", "-h"), 0);
    assert_true(a.co.help);
    assert_int_equal(a.rank, 0);
    assert_int_equal(n, 0);
    free(pos);
    assert_int_equal(parse(&a, &pos, &n, 2, "-h", "--bogus"), CLI_EXIT_USAGE);
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
    /* A list of controllers: each entry checked, the bad one named. */
    char *list_url[] = {"GPUORCH_SERVER=http://a:1, http://b:2", "GPUORCH_TOKEN=t", NULL};
    assert_int_equal(resolve(&none, list_url, &c, err), 0);
    assert_string_equal(c.server, "http://a:1, http://b:2");
    struct cli_common bad_entry = {.server = "http://a:1,b:2,http://c:3", .token = "t"};
    assert_int_equal(resolve(&bad_entry, no_token, &c, err), GPO_EUSAGE);
    assert_string_equal(err, "server 'b:2' (entry 2 of 3, from --server): expected "
                             "http://HOST:PORT or https://HOST:PORT");
    struct cli_common empty_entry = {.server = "http://a:1,", .token = "t"};
    assert_int_equal(resolve(&empty_entry, no_token, &c, err), GPO_EUSAGE);
    assert_string_equal(err, "server '' (entry 2 of 2, from --server): an empty entry");

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
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(commands_read_their_flags_and_the_common_ones),
        cmocka_unit_test(config_reads_keys_comments_and_blank_lines),
        cmocka_unit_test(config_errors_name_the_file_and_line),
        cmocka_unit_test_setup_teardown(server_and_token_come_from_flags_then_env_then_config,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(resolution_errors_say_where_the_bad_value_came_from,
                                        tmp_setup, tmp_teardown),
        cmocka_unit_test(ages_and_sizes_read_as_people_say_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
