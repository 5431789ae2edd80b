/*
 * apply.c - `gpuorch apply` (apply.h).
 */
#include "cli/apply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli/cli.h"
#include "client/client.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define ARRAY_LEN(a)   (sizeof(a) / sizeof((a)[0]))
#define BUSY_RETRIES   50  /* a 409 "another change is being stored": tries */
#define BUSY_WAIT_MS   200 /* between them */
#define OBJECTS_MAX    10000
#define NAME_SHOWN_MAX 128

static const char *const user_readonly[] = {"created_at", NULL};
/* The server sets a service's generation and user; status is its runtime. */
static const char *const service_readonly[] = {"generation", "user", "status", NULL};

/* A list of the document, its kind in the API, and its name in output. */
static const struct kind {
    const char *section;
    enum client_kind kind;
    const char *label;
    const char *const *readonly; /* keys GET shows and PUT refuses */
} kinds[] = {
    {"pools", CLIENT_KIND_POOLS, "pool", NULL},
    {"priority_classes", CLIENT_KIND_PRIORITY_CLASSES, "priority-class", NULL},
    {"teams", CLIENT_KIND_TEAMS, "team", NULL},
    {"users", CLIENT_KIND_USERS, "user", user_readonly},
    {"prices", CLIENT_KIND_PRICES, "price", NULL}, /* by GPU type: nodes must have registered */
    {"services", CLIENT_KIND_SERVICES, "service",
     service_readonly}, /* name teams, classes, pools */
};
/* The cluster's settings: one object, not a list. */
static const struct kind settings_kind = {"settings", CLIENT_KIND_SETTINGS, "settings", NULL};
/* Nodes register themselves: a file sets only a node's own "mig" (PUT
 * /v1/nodes/NAME/mig), after the pools. The kind is unused. */
static const struct kind nodes_kind = {"nodes", CLIENT_KIND_COUNT, "node", NULL};

/* ---- the document ------------------------------------------------------ */

long apply_doc_line(const struct apply_doc *d, const char *path)
{
    return d->yaml.lines ? yamljson_line(&d->yaml, path) : 0;
}

/* "NAME:LINE" or "NAME" when the line is not known. */
static const char *where(const struct apply_doc *d, const char *name, const char *path, char *buf,
                         size_t len)
{
    long line = apply_doc_line(d, path);
    if (line)
        snprintf(buf, len, "%s:%ld", name, line);
    else
        snprintf(buf, len, "%s", name);
    return buf;
}

static const struct kind *kind_of(const char *section)
{
    if (strcmp(section, settings_kind.section) == 0)
        return &settings_kind;
    if (strcmp(section, nodes_kind.section) == 0)
        return &nodes_kind;
    for (size_t k = 0; k < ARRAY_LEN(kinds); k++)
        if (strcmp(kinds[k].section, section) == 0)
            return &kinds[k];
    return NULL;
}

/* One list: objects, each with a name given once. */
static int check_list(const struct apply_doc *d, const char *name, const char *section,
                      const json_t *list, char *err, size_t errlen)
{
    char at[4200], path[128], q[JSONV_QUOTE_MAX + 4];
    if (json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return errbuf_set(err, errlen, GPO_EUSAGE, "%s: '%s' must be a list of objects",
                          where(d, name, section, at, sizeof(at)), section);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *o = json_array_get(list, i);
        const char *n = cli_json_str(o, "name");
        snprintf(path, sizeof(path), "%s[%zu]", section, i);
        if (!json_is_object(o) || !n || !n[0])
            return errbuf_set(err, errlen, GPO_EUSAGE, "%s: %s: expected an object with a 'name'",
                              where(d, name, path, at, sizeof(at)), path);
        for (size_t j = 0; j < i; j++)
            if (strcmp(cli_json_str(json_array_get(list, j), "name"), n) == 0)
                return errbuf_set(err, errlen, GPO_EUSAGE, "%s: %s: '%s' is also %s[%zu]",
                                  where(d, name, path, at, sizeof(at)), path,
                                  jsonv_quote(n, strlen(n), q), section, j);
    }
    return 0;
}

static int check_doc(const struct apply_doc *d, const char *name, char *err, size_t errlen)
{
    char at[4200], q[JSONV_QUOTE_MAX + 4];
    const char *key;
    const json_t *v;
    size_t total = 0;
    if (!json_is_object(d->root))
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "%s: expected an object with settings, pools, priority_classes, teams, "
                          "users, prices, services or nodes",
                          name);
    json_object_foreach((json_t *)d->root, key, v)
    {
        if (!kind_of(key))
            return errbuf_set(err, errlen, GPO_EUSAGE,
                              "%s: unknown list '%s' (expected settings, pools, priority_classes, "
                              "teams, users, prices, services or nodes)",
                              where(d, name, key, at, sizeof(at)),
                              jsonv_quote(key, strlen(key), q));
        if (kind_of(key) == &settings_kind) {
            if (!json_is_object(v) && !json_is_null(v))
                return errbuf_set(err, errlen, GPO_EUSAGE, "%s: 'settings' must be an object",
                                  where(d, name, key, at, sizeof(at)));
            continue;
        }
        int rc = check_list(d, name, key, v, err, errlen);
        if (rc)
            return rc;
        total += json_array_size(v);
    }
    if (total > OBJECTS_MAX)
        return errbuf_set(err, errlen, GPO_EUSAGE, "%s: %zu objects, at most %d", name, total,
                          OBJECTS_MAX);
    return 0;
}

int apply_doc_parse(const char *text, size_t len, const char *name, struct apply_doc *ret,
                    char *err, size_t errlen)
{
    struct apply_doc d = {0};
    struct yamljson_error ye;
    int rc = yamljson_parse(&d.yaml, text, len, &ye);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc == 0) {
        d.root = json_incref(d.yaml.root);
    } else {
        size_t i = 0;
        while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
            i++;
        /* JSON that YAML refuses (tabs, say) is still JSON. */
        if (i < len && text[i] == '{')
            d.root = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
        if (!d.root) {
            if (ye.line)
                return errbuf_set(err, errlen, GPO_EUSAGE, "%s:%ld: %s", name, ye.line, ye.problem);
            return errbuf_set(err, errlen, GPO_EUSAGE, "%s: %s", name, ye.problem);
        }
    }
    if ((rc = check_doc(&d, name, err, errlen)) != 0) {
        apply_doc_release(&d);
        return rc;
    }
    *ret = d;
    return 0;
}

void apply_doc_release(struct apply_doc *d)
{
    if (!d)
        return;
    json_decref(d->root);
    yamljson_release(&d->yaml);
    memset(d, 0, sizeof(*d));
}

/* ---- merge and compare -------------------------------------------------- */

/* The file's value with the keys it sets to null left out, at any depth. */
// NOLINTNEXTLINE(misc-no-recursion): as deep as the file, which yamljson caps at 16 levels
static json_t *without_nulls(const json_t *v)
{
    if (json_is_object(v))
        return apply_merge(NULL, v);
    if (!json_is_array(v))
        return json_deep_copy(v);
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(v); i++) {
        json_t *e = without_nulls(json_array_get(v, i));
        if (!e || json_array_append_new(out, e) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* A pool's "mig" (docs/mig.md): the planner's settings merge onto the
 * server's planner settings; a layout, "off", or a switch between a layout
 * and the planner replaces the server's setting whole (a count the file
 * leaves out goes). */
// NOLINTNEXTLINE(misc-no-recursion): apply_merge's depth
static json_t *merge_mig(const json_t *cur, const json_t *file)
{
    if (json_is_object(cur) && json_is_object(file) && !json_object_get(cur, "layout") &&
        !json_object_get(file, "layout"))
        return apply_merge(cur, file);
    return without_nulls(file);
}

// NOLINTNEXTLINE(misc-no-recursion): as deep as the file, which yamljson caps at 16 levels
json_t *apply_merge(const json_t *current, const json_t *file)
{
    json_t *out = json_is_object(current) ? json_deep_copy(current) : json_object();
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)file, key, v)
    {
        if (!out)
            break;
        if (json_is_null(v)) {
            json_object_del(out, key);
            continue;
        }
        json_t *cur = json_object_get(out, key);
        json_t *m = strcmp(key, "mig") == 0                    ? merge_mig(cur, v)
                    : json_is_object(cur) && json_is_object(v) ? apply_merge(cur, v)
                                                               : without_nulls(v);
        if (!m || json_object_set_new(out, key, m) != 0) {
            json_decref(out);
            out = NULL;
        }
    }
    return out;
}

/* Seconds of a duration as a file or the server writes it: an integer, or
 * a duration string ("30m"); -1 for anything else. */
static int64_t duration_of(const json_t *v)
{
    int64_t s;
    if (json_is_integer(v))
        return json_integer_value(v);
    if (json_is_string(v) && timefmt_parse_duration(json_string_value(v), &s) == 0 &&
        s != TIMEFMT_UNLIMITED)
        return s;
    return -1;
}

/* A duration field ("window_s", and a pool's mig "settle", "hold",
 * "min_interval") the file writes as "30m" and the server shows in seconds
 * or as "1800s": the same value. */
static bool same_duration(const char *key, const json_t *file, const json_t *current)
{
    static const char *const mig_durations[] = {"settle", "hold", "min_interval"};
    size_t n = strlen(key);
    bool duration = n > 2 && strcmp(key + n - 2, "_s") == 0;
    for (size_t i = 0; i < ARRAY_LEN(mig_durations); i++)
        duration = duration || strcmp(key, mig_durations[i]) == 0;
    int64_t a = duration ? duration_of(file) : -1;
    return a >= 0 && a == duration_of(current);
}

/* A MIG profile as the server spells it: lower case, without "MIG " or
 * "mig-", ".me" as "+me" (core/mig.h's mig_profile_lookup reads these). */
static void profile_spelling(const char *s, char *buf, size_t size)
{
    size_t n = 0;
    if (strncasecmp(s, "mig ", 4) == 0 || strncasecmp(s, "mig-", 4) == 0)
        s += 4;
    for (; *s && n + 1 < size; s++)
        buf[n++] = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
    buf[n] = '\0';
    if (n > 3 && strcmp(buf + n - 3, ".me") == 0)
        buf[n - 3] = '+';
}

/* A layout's counts are the whole layout: the same profiles (however
 * spelled) with the same counts. */
static bool same_layout(const json_t *file, const json_t *current)
{
    if (json_object_size(file) != json_object_size(current))
        return false;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)file, key, v)
    {
        char want[64], have[64];
        profile_spelling(key, want, sizeof(want));
        const char *ckey;
        json_t *cv;
        bool found = false;
        json_object_foreach((json_t *)current, ckey, cv)
        {
            profile_spelling(ckey, have, sizeof(have));
            found = found || (strcmp(want, have) == 0 && json_is_number(v) && json_is_number(cv) &&
                              json_number_value(v) == json_number_value(cv));
        }
        if (!found)
            return false;
    }
    return true;
}

/* A pool's "mig": "off" (or false) is what a server without one shows. */
static bool same_off(const char *key, const json_t *file, const json_t *current)
{
    return strcmp(key, "mig") == 0 && !current &&
           (json_is_false(file) ||
            (json_is_string(file) && strcmp(json_string_value(file), "off") == 0));
}

// NOLINTNEXTLINE(misc-no-recursion): as deep as the file, which yamljson caps at 16 levels
bool apply_subset(const json_t *file, const json_t *current)
{
    if (json_is_number(file) && json_is_number(current))
        return json_number_value(file) == json_number_value(current);
    if (json_is_object(file) && json_is_object(current)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)file, key, v)
        {
            const json_t *c = json_object_get(current, key);
            if (same_duration(key, v, c) || same_off(key, v, c))
                continue;
            if (strcmp(key, "layout") == 0 && json_is_object(v) && json_is_object(c)) {
                if (!same_layout(v, c))
                    return false;
                continue;
            }
            if (json_is_null(v) ? c != NULL && !json_is_null(c) : !apply_subset(v, c))
                return false;
        }
        return true;
    }
    if (json_is_array(file) && json_is_array(current)) {
        if (json_array_size(file) != json_array_size(current))
            return false;
        for (size_t i = 0; i < json_array_size(file); i++)
            if (!apply_subset(json_array_get(file, i), json_array_get(current, i)))
                return false;
        return true;
    }
    return file && current && json_equal((json_t *)file, (json_t *)current);
}

/* What the server holds, as a PUT body would say it: no read-only keys, no
 * nulls (which mean "not set"). */
static void normalize(json_t *o, const struct kind *k)
{
    for (size_t i = 0; k->readonly && k->readonly[i]; i++)
        json_object_del(o, k->readonly[i]);
    const char *key;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(o, tmp, key, v)
    {
        if (json_is_null(v))
            json_object_del(o, key);
    }
}

/* ---- the command ---------------------------------------------------------- */

struct apply_args {
    struct cli_common co;
    const char *file;
    bool dry_run;
};

static const struct opts_opt opts[] = {
    {.name = "filename",
     .short_name = 'f',
     .type = OPTS_STRING,
     .offset = offsetof(struct apply_args, file)},
    {.name = "dry-run", .type = OPTS_FLAG, .offset = offsetof(struct apply_args, dry_run)},
    CLI_OPTS_COMMON(struct apply_args, co),
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gpuorch apply -f FILE [--dry-run]\n"
                 "\n"
                 "Creates or updates the cluster's settings, pools, priority classes, teams,\n"
                 "users, prices and services from a YAML or JSON file ('-': stdin), in that\n"
                 "order, and prints what changed, one line per object:\n"
                 "'pool/main created', 'team/research configured', 'user/alice unchanged'.\n"
                 "\n"
                 "  settings:          {private_data: true | false | [jobs, usage, nodes, teams]}\n"
                 "  pools:             [{name, description, aliases, node_features,\n"
                 "                       mig: off | {layout: all-1g.10gb | {1g.10gb: 2, ...}} |\n"
                 "                       {dynamic: true, settle, hold, min_interval, keep_free,\n"
                 "                       max_repartitions}}]  (docs/mig.md)\n"
                 "  priority_classes:  [{name, order, may_preempt, description}]\n"
                 "  teams:             [{name, weight, borrow_limit,\n"
                 "                       quotas: [{pool, gpu_type, guaranteed, borrow_limit}],\n"
                 "                       idle: {threshold_pct, window_s, action, warning_s},\n"
                 "                       budget: {monthly, alert_at, block_below}}]\n"
                 "  users:             [{name, unix_user, team, role}]\n"
                 "  prices:            [{name (a GPU type), per_gpu_hour, description}]\n"
                 "  services:          [{name, team, project, model, command | script, env,\n"
                 "                       workdir, resources: {gpus, gpu_type, cpus, mem_mib,\n"
                 "                       pool, ...}, priority, readiness: {path, period_ms, ...},\n"
                 "                       startup_timeout_s, min, max, concurrency_limit,\n"
                 "                       queue, hosts, api_key_sha256, autoscaling: {...}}]\n"
                 "                     (docs/api.md, \"Services\")\n"
                 "  nodes:             [{name, mig}]  a registered node's own MIG setting\n"
                 "                     (overrides its pool's; null: the pool's again)\n"
                 "\n"
                 "Fields the file leaves out keep their value; a list it gives (quotas) replaces\n"
                 "the server's; a field set to null goes back to its default. Applying the same\n"
                 "file again prints only 'unchanged'. An object the API refuses gets one line\n"
                 "(file, line, object, the API's message); the rest are still applied and the\n"
                 "exit code is 1. Needs an admin's token.\n"
                 "\n"
                 "  -f, --filename FILE  the document\n"
                 "  --dry-run            say what would change, change nothing\n");
    cli_help_common(out, false);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* PUT, again while another configuration change is being stored (409). */
static int put(struct cli *c, const struct kind *k, const char *name, const json_t *body, char *err,
               size_t errlen)
{
    for (int n = 0;; n++) {
        int rc = client_config_put(&c->client, k->kind, name, body, NULL, err, errlen);
        if (rc != GPO_EAPI || c->client.status != 409 || n == BUSY_RETRIES)
            return rc;
        sleep_ms(BUSY_WAIT_MS);
    }
}

/* One object: compare, maybe PUT, one line. 0, or CLI_EXIT_FAIL once its
 * error line is printed. */
static int apply_one(struct cli *c, const struct kind *k, const json_t *obj, const char *at,
                     bool dry)
{
    bool one = k == &settings_kind; /* a single object, named by its kind */
    const char *name = one ? NULL : cli_json_str(obj, "name");
    char err[CLI_ERR_MAX], shown[NAME_SHOWN_MAX + 4];
    snprintf(shown, sizeof(shown), "%s", one ? "cluster" : name);
    json_t *cur = NULL, *body = NULL;
    const char *done = "unchanged";
    int rc = client_config_get(&c->client, k->kind, name, &cur, err, sizeof(err));
    if (rc == GPO_ENAMETOOLONG)
        return cli_fail("apply", "%s: %s/%s: the name is too long", at, k->label, shown);
    if (rc == GPO_EAPI && c->client.status == 404) {
        done = "created";
        rc = (body = apply_merge(NULL, obj)) ? 0 : GPO_ENOMEM;
    } else if (rc == 0) {
        normalize(cur, k);
        if (!apply_subset(obj, cur)) {
            done = "configured";
            rc = (body = apply_merge(cur, obj)) ? 0 : GPO_ENOMEM;
        }
    }
    if (rc == 0 && body && !dry)
        rc = put(c, k, name, body, err, sizeof(err));
    json_decref(cur);
    json_decref(body);
    if (rc == GPO_ENOMEM)
        snprintf(err, sizeof(err), "out of memory");
    if (rc)
        return cli_fail("apply", "%s: %s/%s: %s", at, k->label, shown, err);
    printf("%s/%s %s%s\n", k->label, shown, done, dry ? " (dry run)" : "");
    return 0;
}

/* One node's own "mig" ({name, mig}: nothing else a file sets on a node),
 * against the listing `nodes` (GET /v1/nodes). 0, or CLI_EXIT_FAIL once its
 * error line is printed. */
static int apply_node(struct cli *c, const json_t *nodes, const json_t *obj, const char *at,
                      bool dry)
{
    const char *name = cli_json_str(obj, "name"), *key;
    char err[CLI_ERR_MAX], q[JSONV_QUOTE_MAX + 4];
    const json_t *v, *cur = NULL;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (strcmp(key, "name") != 0 && strcmp(key, "mig") != 0)
            return cli_fail("apply",
                            "%s: node/%s: unknown field '%s' (a node registers itself; a "
                            "file sets only its 'mig')",
                            at, name, jsonv_quote(key, strlen(key), q));
    }
    for (size_t i = 0; !cur && i < json_array_size(nodes); i++) {
        const char *n = cli_json_str(json_array_get(nodes, i), "name");
        if (n && strcmp(n, name) == 0)
            cur = json_array_get(nodes, i);
    }
    if (!cur)
        return cli_fail("apply",
                        "%s: node/%s: no such node (a node registers itself when its "
                        "agent starts; set its mig after that)",
                        at, name);
    const json_t *file_mig = json_object_get(obj, "mig"), *cur_mig = json_object_get(cur, "mig");
    json_t *f = json_pack("{s:O?}", "mig", file_mig), *now = json_pack("{s:O?}", "mig", cur_mig);
    json_t *merged = f && now ? apply_merge(now, f) : NULL;
    int rc = merged ? 0 : GPO_ENOMEM;
    bool same = !rc && (file_mig ? apply_subset(f, now) : true);
    if (!rc && !same && !dry)
        rc = client_nodes_mig(&c->client, name, json_object_get(merged, "mig"), NULL, err,
                              sizeof(err));
    json_decref(f);
    json_decref(now);
    json_decref(merged);
    if (rc == GPO_ENOMEM)
        snprintf(err, sizeof(err), "out of memory");
    if (rc)
        return cli_fail("apply", "%s: node/%s: %s", at, name, err);
    printf("node/%s %s%s\n", name, same ? "unchanged" : "configured", dry ? " (dry run)" : "");
    return 0;
}

static int apply_nodes(struct cli *c, const struct apply_doc *d, const char *name, bool dry)
{
    const json_t *list = json_object_get(d->root, nodes_kind.section);
    if (!json_array_size(list))
        return 0;
    char err[CLI_ERR_MAX];
    json_t *nodes = NULL;
    if (client_nodes_list(&c->client, &nodes, err, sizeof(err)) != 0)
        return cli_fail("apply", "%s: nodes: %s", name, err);
    int rc = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        char path[128], at[4200];
        snprintf(path, sizeof(path), "%s[%zu]", nodes_kind.section, i);
        if (apply_node(c, json_object_get(nodes, "nodes"), json_array_get(list, i),
                       where(d, name, path, at, sizeof(at)), dry) != 0)
            rc = CLI_EXIT_FAIL;
    }
    json_decref(nodes);
    return rc;
}

static int apply_doc(struct cli *c, const struct apply_doc *d, const char *name, bool dry)
{
    int rc = 0;
    const json_t *set = json_object_get(d->root, settings_kind.section);
    if (json_is_object(set)) {
        char at[4200];
        rc = apply_one(c, &settings_kind, set,
                       where(d, name, settings_kind.section, at, sizeof(at)), dry)
                 ? CLI_EXIT_FAIL
                 : 0;
    }
    for (size_t k = 0; k < ARRAY_LEN(kinds); k++) {
        const json_t *list = json_object_get(d->root, kinds[k].section);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char path[128], at[4200];
            snprintf(path, sizeof(path), "%s[%zu]", kinds[k].section, i);
            if (apply_one(c, &kinds[k], json_array_get(list, i),
                          where(d, name, path, at, sizeof(at)), dry) != 0)
                rc = CLI_EXIT_FAIL; /* and on with the rest */
        }
    }
    return apply_nodes(c, d, name, dry) ? CLI_EXIT_FAIL : rc;
}

int apply_command(int argc, char **argv)
{
    struct apply_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("apply", argc, argv, CLI_OPTS(opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        usage(stdout);
    else if (rc == 0 && npos)
        rc = cli_usage_error("apply", "unexpected argument '%s' (the file goes after -f)", pos[0]);
    else if (rc == 0 && !a.file)
        rc = cli_usage_error("apply", "expected -f FILE (see 'gpuorch apply --help')");
    free(pos);
    if (rc || a.co.help)
        return rc;
    const char *name = strcmp(a.file, "-") == 0 ? "stdin" : a.file;
    char *text = NULL, err[CLI_ERR_MAX];
    size_t len = 0;
    struct apply_doc d = {0};
    if ((rc = cli_read_file(a.file, APPLY_FILE_MAX, &text, &len, err, sizeof(err))) != 0)
        return cli_fail("apply", "%s: %s", name, rc == GPO_ENOMEM ? "out of memory" : err);
    rc = apply_doc_parse(text, len, name, &d, err, sizeof(err));
    free(text);
    if (rc)
        return cli_fail("apply", "%s", rc == GPO_ENOMEM ? "out of memory" : err);
    struct cli c;
    if ((rc = cli_connect(&c, "apply", &a.co)) == 0)
        rc = apply_doc(&c, &d, name, a.dry_run);
    cli_disconnect(&c);
    apply_doc_release(&d);
    return rc;
}
