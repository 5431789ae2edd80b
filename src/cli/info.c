/*
 * info.c - gpuorch info, as sinfo (info.h).
 */
#include "cli/info.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli.h"
#include "cli/slurm.h"
#include "cli/table.h"
#include "client/client.h"
#include "util/hostlist.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define LIST_LEN     4096

struct info_args {
    struct cli_common co;
    const char *pools, *states;
    bool nodes, noheader;
};

static const struct opts_opt info_opts[] = {
    {.name = "Node",
     .short_name = 'N',
     .type = OPTS_FLAG,
     .offset = offsetof(struct info_args, nodes)},
    {.name = "partition",
     .short_name = 'p',
     .type = OPTS_STRING,
     .offset = offsetof(struct info_args, pools)},
    {.name = "states",
     .short_name = 't',
     .type = OPTS_STRING,
     .offset = offsetof(struct info_args, states)},
    {.name = "noheader",
     .short_name = 'h',
     .type = OPTS_FLAG,
     .offset = offsetof(struct info_args, noheader)},
    CLI_OPT_JSON(struct info_args, co),
    CLI_OPTS_COMMON_LONG_HELP(struct info_args, co),
};

static void info_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch info [-N] [-p POOL[,POOL]] [-t STATE[,STATE]] [-h] [--json]\n"
                 "\n"
                 "Shows pools and their nodes as sinfo does: PARTITION AVAIL TIMELIMIT NODES\n"
                 "STATE NODELIST GRES, one row per pool, node state and GPU kind; NODELIST in\n"
                 "Slurm's host-list form (node[01-04,07]), GRES as gpu:TYPE:COUNT per node.\n"
                 "STATE: idle (no GPU in use), mix (some), alloc (all), drain (draining, idle),\n"
                 "drng (draining with work), down (no heartbeats); n/a for a pool without\n"
                 "nodes. A pool marked default has a '*'.\n"
                 "\n"
                 "  -N, --Node          one row per node: NODELIST NODES PARTITION STATE GRES\n"
                 "  -p, --partition P   these pools only\n"
                 "  -t, --states S      these states only (idle, mix, alloc, drain, drng, down)\n"
                 "  -h, --noheader      no header line\n"
                 "  --json              the rows as JSON\n"
                 "  --help              this text\n");
    cli_help_common(out, false);
}

static const char *const state_words[] = {"idle", "mix", "alloc", "drain", "drng", "down"};

/* A node's sinfo state. */
static const char *node_state(const json_t *n)
{
    const char *st = cli_json_str(n, "state");
    /* GPUs in use in GPU shares (a 0.25 job: 0.25), an integer from an older controller. */
    const json_t *in_use = json_object_get(n, "gpus_in_use");
    double used = json_is_number(in_use) ? json_number_value(in_use) : 0;
    double ngpus = (double)json_array_size(json_object_get(n, "gpus"));
    if (st && strcmp(st, "down") == 0)
        return "down";
    if (st && strcmp(st, "draining") == 0)
        return used > 0 ? "drng" : "drain";
    return used <= 0 ? "idle" : used >= ngpus ? "alloc" : "mix";
}

/* "gpu:H100-80GB:8" (the node's first GPU's type; "(null)" without GPUs). */
static void gres_text(const json_t *n, char *buf, size_t len)
{
    const json_t *gpus = json_object_get(n, "gpus");
    const char *type = cli_json_str(json_array_get(gpus, 0), "gpu_type");
    if (json_array_size(gpus))
        snprintf(buf, len, "gpu:%s:%zu", type ? type : "gpu", json_array_size(gpus));
    else
        snprintf(buf, len, "(null)");
}

/* A pool's TIMELIMIT: its configured limit if it has one, else infinite. */
static void limit_text(const json_t *pools, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "infinite");
    for (size_t k = 0; k < json_array_size(pools); k++) {
        const json_t *p = json_array_get(pools, k);
        const char *pn = cli_json_str(p, "name");
        json_int_t s = json_integer_value(json_object_get(p, "time_limit_s"));
        if (pn && name && strcmp(pn, name) == 0 && s > 0)
            timefmt_duration(s, buf, len);
    }
}

static bool pool_default(const json_t *pools, const char *name)
{
    for (size_t k = 0; k < json_array_size(pools); k++) {
        const json_t *p = json_array_get(pools, k);
        const char *pn = cli_json_str(p, "name");
        if (pn && name && strcmp(pn, name) == 0)
            return json_is_true(json_object_get(p, "default"));
    }
    return false;
}

/* One row of the summary: the nodes of one pool, state and GRES. */
struct info_row {
    const char *pool, *state;
    char gres[96];
    const char **names;
    size_t n;
};

static int row_add(struct info_row **rows, size_t *nrows, const json_t *node)
{
    const char *pool = cli_json_str(node, "pool"), *state = node_state(node);
    char gres[96];
    gres_text(node, gres, sizeof(gres));
    struct info_row *r = NULL;
    for (size_t k = 0; k < *nrows && !r; k++)
        if (strcmp((*rows)[k].pool, pool ? pool : "") == 0 &&
            strcmp((*rows)[k].state, state) == 0 && strcmp((*rows)[k].gres, gres) == 0)
            r = &(*rows)[k];
    if (!r) {
        struct info_row *v = realloc(*rows, (*nrows + 1) * sizeof(*v));
        if (!v)
            return GPO_ENOMEM;
        *rows = v;
        r = &v[(*nrows)++];
        *r = (struct info_row){.pool = pool ? pool : "", .state = state};
        snprintf(r->gres, sizeof(r->gres), "%s", gres);
    }
    const char **names = realloc(r->names, (r->n + 1) * sizeof(*names));
    if (!names)
        return GPO_ENOMEM;
    r->names = names;
    r->names[r->n++] = cli_json_str(node, "name") ? cli_json_str(node, "name") : "?";
    return 0;
}

static int row_cmp(const void *a, const void *b)
{
    const struct info_row *x = a, *y = b;
    int c = strcmp(x->pool, y->pool);
    return c ? c : strcmp(x->state, y->state);
}

static json_t *rows_json(const struct info_row *rows, size_t n, const json_t *pools)
{
    json_t *list = json_array();
    for (size_t k = 0; list && k < n; k++) {
        char nodelist[LIST_LEN], limit[TIMEFMT_DURATION_LEN];
        if (hostlist_compress(rows[k].names, rows[k].n, nodelist, sizeof(nodelist)) != 0)
            snprintf(nodelist, sizeof(nodelist), "%s", rows[k].n ? rows[k].names[0] : "");
        limit_text(pools, rows[k].pool, limit, sizeof(limit));
        json_array_append_new(
            list, json_pack("{s:s, s:b, s:s, s:s, s:I, s:s, s:s, s:s}", "partition", rows[k].pool,
                            "default", pool_default(pools, rows[k].pool), "avail", "up",
                            "timelimit", limit, "nodes", (json_int_t)rows[k].n, "state",
                            rows[k].state, "nodelist", nodelist, "gres", rows[k].gres));
    }
    return list;
}

static int print_rows(const json_t *list, const struct info_args *a)
{
    static const char *const head[] = {"PARTITION", "AVAIL",    "TIMELIMIT", "NODES",
                                       "STATE",     "NODELIST", "GRES"};
    static const char *const node_head[] = {"NODELIST", "NODES", "PARTITION", "STATE", "GRES"};
    struct table *t =
        a->nodes ? table_new(ARRAY_LEN(node_head), node_head) : table_new(ARRAY_LEN(head), head);
    int rc = t ? 0 : GPO_ENOMEM;
    for (size_t k = 0; rc == 0 && k < json_array_size(list); k++) {
        const json_t *r = json_array_get(list, k);
        char part[128], count[24];
        snprintf(part, sizeof(part), "%s%s", cli_json_str(r, "partition"),
                 json_is_true(json_object_get(r, "default")) ? "*" : "");
        snprintf(count, sizeof(count), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(r, "nodes")));
        const char *cells[] = {part,
                               cli_json_str(r, "avail"),
                               cli_json_str(r, "timelimit"),
                               count,
                               cli_json_str(r, "state"),
                               cli_json_str(r, "nodelist"),
                               cli_json_str(r, "gres")};
        const char *node_cells[] = {cells[5], count, part, cells[4], cells[6]};
        rc = table_add(t, a->nodes ? node_cells : cells);
    }
    if (rc == 0)
        table_print_rows(t, stdout, !a->noheader);
    table_free(t);
    return rc ? cli_fail("info", "out of memory") : 0;
}

/* The rows of the nodes (borrowed) that the flags select. */
static json_t *info_rows(const json_t *nodes, const json_t *pools, const struct info_args *a)
{
    struct info_row *rows = NULL;
    size_t n = 0;
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < json_array_size(nodes); k++) {
        const json_t *node = json_array_get(nodes, k);
        if (!slurm_in_list(a->pools, cli_json_str(node, "pool"), true) ||
            !slurm_in_list(a->states, node_state(node), true))
            continue;
        if (a->nodes) { /* one row per node: a row of its own */
            struct info_row *v = realloc(rows, (n + 1) * sizeof(*v));
            rc = v ? 0 : GPO_ENOMEM;
            if (v) {
                rows = v;
                rows[n] = (struct info_row){.pool = cli_json_str(node, "pool"),
                                            .state = node_state(node)};
                gres_text(node, rows[n].gres, sizeof(rows[n].gres));
                rows[n].names = malloc(sizeof(*rows[n].names));
                rc = rows[n].names ? 0 : GPO_ENOMEM;
                if (rows[n].names) {
                    rows[n].names[0] = cli_json_str(node, "name");
                    rows[n++].n = 1;
                }
            }
        } else {
            rc = row_add(&rows, &n, node);
        }
    }
    /* A pool without nodes is a row too, as sinfo shows an empty partition. */
    for (size_t k = 0; rc == 0 && !a->nodes && !a->states && k < json_array_size(pools); k++) {
        const char *name = cli_json_str(json_array_get(pools, k), "name");
        bool seen = !name || !slurm_in_list(a->pools, name, true);
        for (size_t i = 0; i < n && !seen; i++)
            seen = strcmp(rows[i].pool, name) == 0;
        struct info_row *v = seen ? NULL : realloc(rows, (n + 1) * sizeof(*v));
        rc = seen || v ? 0 : GPO_ENOMEM;
        if (v) {
            rows = v;
            rows[n] = (struct info_row){.pool = name, .state = "n/a"};
            snprintf(rows[n++].gres, sizeof(rows[0].gres), "(null)");
        }
    }
    if (rc == 0 && !a->nodes && n)
        qsort(rows, n, sizeof(*rows), row_cmp);
    json_t *list = rc ? NULL : rows_json(rows, n, pools);
    for (size_t k = 0; k < n; k++)
        free(rows[k].names);
    free(rows);
    return list;
}

int info_command(int argc, char **argv)
{
    struct info_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("info", argc, argv, CLI_OPTS(info_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        info_usage(stdout);
    else if (rc == 0 && npos)
        rc =
            cli_usage_error("info", "unexpected argument '%s' (see 'gpuorch info --help')", pos[0]);
    free(pos);
    for (const char *p = a.states; rc == 0 && !a.co.help && p;) {
        size_t len = strcspn(p, ","), k = 0;
        while (k < ARRAY_LEN(state_words) &&
               (strlen(state_words[k]) != len || strncasecmp(p, state_words[k], len) != 0))
            k++;
        if (k == ARRAY_LEN(state_words))
            rc = cli_usage_error("info",
                                 "--states: '%.*s' is not a node state (idle, mix, alloc, drain, "
                                 "drng, down)",
                                 (int)(len < 40 ? len : 40), p);
        p = p[len] ? p + len + 1 : NULL;
    }
    if (rc || a.co.help)
        return rc;
    struct cli c;
    json_t *nodes = NULL, *pools = NULL, *list = NULL;
    char err[CLI_ERR_MAX];
    if ((rc = cli_connect(&c, "info", &a.co)) == 0 &&
        (rc = client_nodes_list(&c.client, &nodes, err, sizeof(err))) != 0)
        rc = cli_fail_call("info", rc, err);
    /* The pools' settings (a limit, the default mark): what is readable. */
    if (rc == 0 && client_config_get(&c.client, CLIENT_KIND_POOLS, NULL, &pools, NULL, 0) != 0)
        pools = NULL;
    cli_disconnect(&c);
    if (rc == 0 &&
        !(list = info_rows(json_object_get(nodes, "nodes"), json_object_get(pools, "pools"), &a)))
        rc = cli_fail("info", "out of memory");
    if (rc == 0 && a.co.json) {
        json_t *out = json_pack("{s:O}", a.nodes ? "nodes" : "partitions", list);
        rc = out && cli_print_json(out) ? 0 : cli_fail("info", "out of memory");
        json_decref(out);
    } else if (rc == 0) {
        rc = print_rows(list, &a);
    }
    json_decref(list);
    json_decref(nodes);
    json_decref(pools);
    return rc;
}
