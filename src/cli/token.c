/*
 * token.c - `gpuorch token` (token.h).
 */
#include "cli/token.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "client/client.h"
#include "util/opts.h"
#include "base/banned.h"

struct token_args {
    struct cli_common co;
    const char *label;
};

static const struct opts_opt opts[] = {
    {.name = "label", .type = OPTS_STRING, .offset = offsetof(struct token_args, label)},
    CLI_OPT_JSON(struct token_args, co),
    CLI_OPTS_COMMON(struct token_args, co),
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gpuorch token USER [--label LABEL] [--json]\n"
                 "\n"
                 "Issues an API token for USER and prints it, alone on a line: it is shown once\n"
                 "(the server keeps its SHA-256 only). The token may do what USER's role\n"
                 "allows: 'admin', 'member' (its team's jobs), or 'metrics' (GET /metrics for\n"
                 "Prometheus, nothing else; a user made with 'gpuorch apply', role: metrics).\n"
                 "Needs an admin's token.\n"
                 "\n"
                 "  --label LABEL   a note kept with the token (at most 128 bytes)\n"
                 "  --json          print {\"user\", \"token\"}\n");
    cli_help_common(out, true);
}

int token_command(int argc, char **argv)
{
    struct token_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("token", argc, argv, CLI_OPTS(opts), &a, &pos, &npos);
    const char *user = npos == 1 ? pos[0] : NULL;
    free(pos);
    if (rc == 0 && a.co.help) {
        usage(stdout);
        return 0;
    }
    if (rc == 0 && !user)
        rc = cli_usage_error("token", "expected one USER (see 'gpuorch token --help')");
    struct cli c;
    if (rc || (rc = cli_connect(&c, "token", &a.co)) != 0)
        return rc;
    json_t *out = NULL;
    char err[CLI_ERR_MAX];
    if ((rc = client_users_token_issue(&c.client, user, a.label, &out, err, sizeof(err))) != 0)
        rc = cli_fail_call("token", rc, err);
    else if (a.co.json)
        rc = cli_print_json(out) ? 0 : cli_fail("token", "out of memory");
    else
        printf("%s\n", cli_json_str(out, "token") ? cli_json_str(out, "token") : "");
    cli_disconnect(&c);
    json_decref(out);
    return rc;
}
