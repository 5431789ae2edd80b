/*
 * submit.c - `gpuorch submit` (submit.h): a table of flags, each with the
 * setter that writes its part of the POST /v1/jobs body; the command line
 * and the script's directives go through the same table.
 *
 * Decisions the header leaves open:
 *  - --gpu-mem alone asks for a share of one GPU by memory (gpu_mem_mib);
 *    next to --gpus it asks that each GPU have that much (min_gpu_mem_mib).
 *  - Without --export nothing of the caller's environment is sent (unlike
 *    sbatch, whose default is ALL): the job runs on another machine, maybe as
 *    another user, and the environment holds the caller's GPUORCH_TOKEN.
 *  - Arguments after a script are refused: the API runs a script without
 *    arguments.
 */
#include "cli/submit.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/sbatch.h"
#include "cli/script.h"
#include "cli/submit_int.h"
#include "client/client.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

extern char **environ;

/* ---- the flags ------------------------------------------------------------ */

/* Sets key to v (taken; NULL means out of memory). */
static int put(struct build *b, const char *key, json_t *v, char *err, size_t errlen)
{
    if (!v || json_object_set_new(b->body, key, v) != 0)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    return 0;
}

static int bad_value(const struct submit_flag *f, const char *v, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    return errbuf_set(err, errlen, GPO_EUSAGE, "expected %s, got '%s'", f->opt.expect,
                      jsonv_quote(v, strlen(v), q));
}

/* A JSON string of user text: invalid UTF-8 is a usage error, not "out of memory". */
static int put_text(struct build *b, const char *key, const char *v, char *err, size_t errlen)
{
    if (jsonv_check_utf8(v, strlen(v)) != 0)
        return errbuf_set(err, errlen, GPO_EUSAGE, "not valid UTF-8");
    return put(b, key, json_string(v), err, errlen);
}

static int set_text(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen)
{
    if (!*v)
        return bad_value(f, v, err, errlen);
    return put_text(b, f->key, v, err, errlen);
}

static int set_int(struct build *b, const struct submit_flag *f, const char *v, char *err,
                   size_t errlen)
{
    int64_t n;
    if (opts_parse_int(v, f->opt.min, f->opt.max, &n) != 0)
        return bad_value(f, v, err, errlen);
    return put(b, f->key, json_integer(n), err, errlen);
}

/* A flag without a value: `on` is the boolean it sets (--no-requeue: false). */
static int set_bool(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen)
{
    (void)v;
    return put(b, f->key, json_boolean(f->on), err, errlen);
}

static int set_size(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen)
{
    int64_t mib;
    if (sbatch_parse_size_mib(v, &mib) != 0)
        return bad_value(f, v, err, errlen);
    if (!f->key) {
        b->gpu_mem_mib = mib;
        return 0;
    }
    return put(b, f->key, json_integer(mib), err, errlen);
}

int submit_put(struct build *b, const char *key, json_t *v, char *err, size_t errlen)
{
    return put(b, key, v, err, errlen);
}

int submit_put_text(struct build *b, const char *key, const char *v, char *err, size_t errlen)
{
    return put_text(b, key, v, err, errlen);
}

int submit_bad_value(const struct submit_flag *f, const char *v, char *err, size_t errlen)
{
    return bad_value(f, v, err, errlen);
}

static int set_time(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen)
{
    int64_t s;
    if (sbatch_parse_time(v, &s) != 0)
        return bad_value(f, v, err, errlen);
    return put(b, "time_limit_s", json_integer(s), err, errlen);
}

static int set_begin(struct build *b, const struct submit_flag *f, const char *v, char *err,
                     size_t errlen)
{
    int64_t at;
    if (sbatch_parse_begin(v, &at) != 0)
        return bad_value(f, v, err, errlen);
    return put(b, "begin", json_integer(at), err, errlen);
}

static int set_dependency(struct build *b, const struct submit_flag *f, const char *v, char *err,
                          size_t errlen)
{
    (void)f;
    json_t *deps;
    int rc = sbatch_parse_dependency(v, &deps, err, errlen);
    return rc ? rc : put(b, "dependencies", deps, err, errlen);
}

static int set_export(struct build *b, const struct submit_flag *f, const char *v, char *err,
                      size_t errlen)
{
    (void)f;
    json_t *env;
    int rc = sbatch_parse_export(v, b->env->envp, &env, err, errlen);
    return rc ? rc : put(b, "env", env, err, errlen);
}

/* --open-mode: Slurm reads the first letter (a..., t...), case aside. */
static int set_open_mode(struct build *b, const struct submit_flag *f, const char *v, char *err,
                         size_t errlen)
{
    static const char *const modes[] = {"append", "truncate"};
    for (size_t k = 0; *v && k < 2; k++) {
        size_t n = strlen(v);
        if (n <= strlen(modes[k]) && strncasecmp(v, modes[k], n) == 0)
            return put_text(b, f->key, modes[k], err, errlen);
    }
    return bad_value(f, v, err, errlen);
}

static int set_workdir(struct build *b, const struct submit_flag *f, const char *v, char *err,
                       size_t errlen)
{
    char path[PATH_MAX];
    if (!*v)
        return bad_value(f, v, err, errlen);
    if (v[0] != '/' && !b->env->cwd)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "'%s' is relative, and there is no current "
                          "directory to start from",
                          v);
    int n = v[0] == '/' ? snprintf(path, sizeof(path), "%s", v)
                        : snprintf(path, sizeof(path), "%s/%s", b->env->cwd, v);
    if (n < 0 || (size_t)n >= sizeof(path))
        return errbuf_set(err, errlen, GPO_EUSAGE, "the path is too long");
    return put_text(b, "workdir", path, err, errlen);
}

// NOLINTNEXTLINE(readability-non-const-parameter): the signature of submit_flag's set
static int set_ignore(struct build *b, const struct submit_flag *f, const char *v, char *err,
                      size_t errlen)
{
    (void)b, (void)f, (void)v, (void)err, (void)errlen;
    return 0;
}

// NOLINTNEXTLINE(readability-non-const-parameter): the signature of submit_flag's set
static int set_parsable(struct build *b, const struct submit_flag *f, const char *v, char *err,
                        size_t errlen)
{
    (void)f, (void)v, (void)err, (void)errlen;
    b->plan->parsable = true;
    return 0;
}

static int set_key(struct build *b, const struct submit_flag *f, const char *v, char *err,
                   size_t errlen)
{
    size_t n = strlen(v);
    for (size_t i = 0; i < n; i++)
        if (v[i] <= ' ' || v[i] > '~')
            n = 0; /* the API takes printable ASCII only */
    if (n == 0 || n > 255)
        return bad_value(f, v, err, errlen);
    char *key = strdup(v);
    if (!key)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    free(b->plan->idempotency_key);
    b->plan->idempotency_key = key;
    return 0;
}

static int set_wrap(struct build *b, const struct submit_flag *f, const char *v, char *err,
                    size_t errlen)
{
    if (!*v)
        return bad_value(f, v, err, errlen);
    b->wrap = v;
    return 0;
}

#define W_CLI   SUBMIT_WHERE_CLI
#define W_OURS  (SUBMIT_WHERE_CLI | SUBMIT_WHERE_GPUORCH)
#define W_ALL   (SUBMIT_WHERE_CLI | SUBMIT_WHERE_GPUORCH | SUBMIT_WHERE_SBATCH)
#define NAME_RE "a name ([A-Za-z0-9._-])"
/* A flag with a value (VALUE) or without (BOOL), its setter and what it
 * writes; CONN: a connection flag, stored into struct submit_args. */
#define VALUE(name_, short_, where_, set_, key_, lo_, hi_, expect_)                                \
    {                                                                                              \
        .opt = {.name = name_,                                                                     \
                .short_name = short_,                                                              \
                .type = OPTS_STRING,                                                               \
                .where = where_,                                                                   \
                .min = lo_,                                                                        \
                .max = hi_,                                                                        \
                .expect = expect_},                                                                \
        .set = set_, .key = key_                                                                   \
    }
#define BOOL(name_, where_, set_, key_, on_)                                                       \
    {                                                                                              \
        .opt = {.name = name_, .type = OPTS_FLAG, .where = where_}, .set = set_, .key = key_,      \
        .on = on_                                                                                  \
    }
#define CONN(name_, short_, type_, member)                                                         \
    {                                                                                              \
        .opt = {                                                                                   \
            .name = name_,                                                                         \
            .short_name = short_,                                                                  \
            .type = type_,                                                                         \
            .where = W_CLI,                                                                        \
            .offset = offsetof(struct submit_args, co.member)                                      \
        }                                                                                          \
    }

static const struct submit_flag flags[] = {
    VALUE("job-name", 'J', W_ALL, set_text, "name", 0, 0, "a job name"),
    VALUE("output", 'o', W_ALL, set_text, "output", 0, 0, "a file"),
    VALUE("error", 'e', W_ALL, set_text, "error", 0, 0, "a file"),
    VALUE("time", 't', W_ALL, set_time, NULL, 0, 0,
          "a time limit (MM, HH:MM:SS, D-HH, D-HH:MM:SS, 90m, UNLIMITED)"),
    /* Slurm's resources (submit_slurm.c: what sbatch(1) says each means) */
    VALUE("nodes", 'N', W_ALL, submit_set_nodes, NULL, 0, 0, "a node count N"),
    VALUE("gpus", 'G', W_ALL, submit_set_gpus, NULL, 0, 0,
          "[TYPE:]N: whole GPUs in all, a fraction below 1 (0.25), or a MIG profile (1g.10gb)"),
    VALUE("gpus-per-node", 0, W_ALL, submit_set_gpus_per_node, NULL, 0, 0, "[TYPE:]N GPUs"),
    VALUE("gres", 0, W_ALL, submit_set_gres, NULL, 0, 0, "gpu:N, gpu:TYPE:N or gpu:PROFILE:1"),
    VALUE("gpus-per-task", 0, W_ALL, submit_set_gpus_per_task, NULL, 0, 0, "[TYPE:]N GPUs"),
    VALUE("ntasks", 'n', W_ALL, set_int, "ntasks", 1, 65536, "a number of tasks (1-65536)"),
    VALUE("ntasks-per-node", 0, W_ALL, set_int, "ntasks_per_node", 1, 65536,
          "a number of tasks (1-65536)"),
    VALUE("cpus-per-task", 'c', W_ALL, set_int, "cpus_per_task", 1, 4096,
          "a number of CPUs (1-4096)"),
    VALUE("mem", 0, W_ALL, submit_set_mem, "mem_per_node_mib", 0, 0,
          "MiB, or a size such as 4G (0: the whole node)"),
    VALUE("mem-per-cpu", 0, W_ALL, submit_set_mem, "mem_per_cpu_mib", 0, 0,
          "MiB, or a size such as 4G"),
    VALUE("mem-per-gpu", 0, W_ALL, submit_set_mem, "mem_per_gpu_mib", 0, 0,
          "MiB, or a size such as 4G"),
    BOOL("exclusive", W_ALL, set_bool, "exclusive", true),
    VALUE("constraint", 'C', W_ALL, set_text, "constraint", 0, 0, "features joined by & or |"),
    VALUE("partition", 'p', W_ALL, submit_set_partition, "pool", 0, 0, NAME_RE),
    VALUE("pool", 0, W_OURS, submit_set_partition, "pool", 0, 0, NAME_RE),
    VALUE("gpu-mem", 0, W_OURS, set_size, NULL, 0, 0, "MiB, or a size such as 40G"),
    VALUE("gpu-type", 0, W_OURS, set_text, "gpu_type", 0, 0, "a GPU type (H100-80GB)"),
    VALUE("cpus", 0, W_OURS, set_int, "cpus", 1, 4096, "a number of CPUs (1-4096)"),
    VALUE("array", 'a', W_ALL, set_text, "array", 0, 0, "indices such as 0-9%2"),
    VALUE("dependency", 'd', W_ALL, set_dependency, NULL, 0, 0, "afterok:ID"),
    VALUE("priority", 0, W_OURS, set_text, "priority", 0, 0, "a priority class"),
    VALUE("qos", 0, W_ALL, set_text, "priority", 0, 0, "a priority class"),
    VALUE("team", 0, W_OURS, set_text, "team", 0, 0, NAME_RE),
    VALUE("account", 'A', W_ALL, set_text, "team", 0, 0, NAME_RE),
    VALUE("project", 0, W_OURS, set_text, "project", 0, 0, NAME_RE),
    VALUE("model", 0, W_OURS, set_text, "model", 0, 0, NAME_RE),
    VALUE("workdir", 0, W_OURS, set_workdir, NULL, 0, 0, "a directory"),
    VALUE("chdir", 'D', W_ALL, set_workdir, NULL, 0, 0, "a directory"),
    VALUE("export", 0, W_ALL, set_export, NULL, 0, 0, "ALL, NONE or NAME[=VALUE],..."),
    /* What the agent does with the job's files and signals. */
    VALUE("signal", 0, W_ALL, set_text, "signal", 0, 0, "[B:]SIG[@SECS] (USR1@90)"),
    VALUE("open-mode", 0, W_ALL, set_open_mode, "open_mode", 0, 0, "append or truncate"),
    BOOL("multi-node", W_OURS, set_bool, "multi_node", true),
    BOOL("checkpointable", W_OURS, set_bool, "checkpointable", true),
    BOOL("requeue", W_ALL, set_bool, "requeue", true),
    BOOL("no-requeue", W_ALL, set_bool, "requeue", false),
    {.opt = {.name = "hold", .short_name = 'H', .type = OPTS_FLAG, .where = W_ALL},
     .set = set_bool,
     .key = "hold",
     .on = true},
    VALUE("begin", 'b', W_ALL, set_begin, NULL, 0, 0, TIMEFMT_BEGIN_FORMS),
    VALUE("max-retries", 0, W_OURS, set_int, "max_retries", 0, 100, "a number (0-100)"),
    VALUE("comment", 0, W_OURS, set_ignore, NULL, 0, 0, NULL),
    BOOL("parsable", W_ALL, set_parsable, NULL, false),
    VALUE("idempotency-key", 0, W_CLI, set_key, NULL, 0, 0, "1-255 printable characters"),
    VALUE("wrap", 0, W_CLI, set_wrap, NULL, 0, 0, "a shell command"),
    CONN("server", 0, OPTS_STRING, server),
    CONN("token", 0, OPTS_STRING, token),
    CONN("token-file", 0, OPTS_STRING, token_file),
    CONN("json", 0, OPTS_FLAG, json),
    CONN("help", 'h', OPTS_HELP, help),
};

/* ---- the command line ----------------------------------------------------- */

int submit_args_parse(int argc, char **argv, struct submit_args *ret, char *err, size_t errlen)
{
    struct submit_args a = {0};
    struct opts g;
    if (!(a.pairs = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*a.pairs))))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    opts_init(&g, argc - 1, argv + 1, OPTS_TABLE(flags), W_CLI);
    for (;;) {
        const struct opts_opt *o = NULL;
        const char *v = NULL;
        int k = opts_next(&g, &o, &v, err, errlen);
        if (k < 0) {
            free(a.pairs);
            (void)submit_exclusive_value(g.word, err, errlen);
            return GPO_EUSAGE;
        }
        if (k == OPTS_END)
            break;
        if (k == OPTS_DASHDASH) {
            a.command = g.argv + g.i;
            a.ncommand = (size_t)(g.argc - g.i);
            break;
        }
        if (k == OPTS_ARG) { /* the script: what follows is its own */
            a.script = v;
            a.script_args = g.argv + g.i;
            a.nscript_args = (size_t)(g.argc - g.i);
            break;
        }
        const struct submit_flag *f = (const struct submit_flag *)(const void *)o;
        if (f->set)
            a.pairs[a.npairs++] = (struct submit_pair){.flag = f, .value = v};
        else
            opts_store(o, v, &a, NULL, 0); /* strings and flags: nothing to refuse */
    }
    *ret = a;
    return 0;
}

void submit_args_release(struct submit_args *a)
{
    if (!a)
        return;
    free(a->pairs);
    memset(a, 0, sizeof(*a));
}

/* ---- the plan --------------------------------------------------------------- */

__attribute__((format(printf, 2, 3))) static int warn(struct submit_plan *p, const char *fmt, ...)
{
    char line[CLI_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    char **w = realloc(p->warnings, (p->nwarnings + 1) * sizeof(*w));
    if (!w)
        return GPO_ENOMEM;
    p->warnings = w;
    if (!(w[p->nwarnings] = strdup(line)))
        return GPO_ENOMEM;
    p->nwarnings++;
    return 0;
}

/* Applies one flag; `where` prefixes a message ("job.sh:4: #SBATCH "). */
static int apply(struct build *b, const struct submit_flag *f, const char *v, const char *where,
                 char *err, size_t errlen)
{
    char msg[CLI_ERR_MAX];
    int rc = f->set(b, f, v, msg, sizeof(msg));
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, rc, "out of memory");
    if (rc) {
        char name[64];
        return errbuf_set(err, errlen, rc, "%s%s: %s", where,
                          opts_name(&f->opt, name, sizeof(name)), msg);
    }
    return 0;
}

/* An option a directive names that its prefix does not know: an error with
 * its line (sbatch refuses unknown options), but for the few #SBATCH flags
 * that change nothing gpuorch controls, which warn. */
static int unknown_directive(struct build *b, const struct script_directive *d, const char *script,
                             const char *word, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    const char *eq = strchr(word, '=');
    size_t len = word[1] == '-' ? (eq ? (size_t)(eq - word) : strlen(word)) : 2;
    jsonv_quote(word, len, q);
    const char *ignored = d->prefix == SCRIPT_SBATCH ? submit_sbatch_ignored(word) : NULL;
    if (ignored)
        return warn(b->plan, "%s:%ld: #SBATCH %s changes nothing gpuorch controls (ignored)",
                    script, d->line, ignored);
    if (d->prefix == SCRIPT_SBATCH) {
        /* One of ours? Then say how to write it. */
        struct opts g;
        const struct opts_opt *o;
        const char *v;
        opts_init(&g, 1, (char **)&word, OPTS_TABLE(flags), SUBMIT_WHERE_GPUORCH);
        if (opts_next(&g, &o, &v, NULL, 0) != GPO_ENOENT)
            return errbuf_set(err, errlen, GPO_EUSAGE,
                              "%s:%ld: '%s' is a gpuorch flag, not an sbatch one: write it as "
                              "'#GPUORCH %s'",
                              script, d->line, q, q);
    }
    return errbuf_set(err, errlen, GPO_EUSAGE,
                      "%s:%ld: unknown %s directive '%s': it is not supported, and ignoring it "
                      "could change what the job gets or where it runs",
                      script, d->line, script_prefix_name(d->prefix), q);
}

static int apply_directive(struct build *b, const struct script_directive *d, const char *script,
                           char *err, size_t errlen)
{
    unsigned mask = d->prefix == SCRIPT_SBATCH ? SUBMIT_WHERE_SBATCH : SUBMIT_WHERE_GPUORCH;
    struct opts g;
    char where[PATH_MAX + 64], q[JSONV_QUOTE_MAX + 4];
    opts_init(&g, (int)d->nwords, d->words, OPTS_TABLE(flags), mask);
    snprintf(where, sizeof(where), "%s:%ld: %s ", script, d->line, script_prefix_name(d->prefix));
    for (int rc = 0;;) {
        const struct opts_opt *o = NULL;
        const char *v = NULL;
        char msg[256];
        int k = opts_next(&g, &o, &v, msg, sizeof(msg));
        if (k == OPTS_END)
            return 0;
        if (k == GPO_ENOENT) {
            const char *w = g.word;
            rc = unknown_directive(b, d, script, w, err, errlen);
            /* Its value, if it has one as a separate word, goes with it. */
            if (!strchr(w, '=') && (w[1] == '-' || w[2] == '\0') && g.i < g.argc &&
                g.argv[g.i][0] != '-')
                g.i++;
        } else if (k < 0) {
            if (submit_exclusive_value(g.word, msg, sizeof(msg)))
                return errbuf_set(err, errlen, GPO_EUSAGE, "%s:%ld: %s", script, d->line, msg);
            return errbuf_set(err, errlen, GPO_EUSAGE, "%s%s", where, msg);
        } else if (k == OPTS_ARG || k == OPTS_DASHDASH) {
            const char *w = g.word;
            g.rest = false; /* a directive's "--" is a stray word: options may follow */
            rc = warn(b->plan, "%s:%ld: %s: unexpected word '%s' (ignored)", script, d->line,
                      script_prefix_name(d->prefix), jsonv_quote(w, strlen(w), q));
        } else {
            rc = apply(b, (const struct submit_flag *)(const void *)o, v, where, err, errlen);
        }
        if (rc == GPO_ENOMEM)
            return errbuf_set(err, errlen, rc, "out of memory");
        if (rc)
            return rc;
    }
}

/* The script's directives, then its warnings for directives out of place. */
static int apply_script(struct build *b, const char *text, size_t len, const char *name, char *err,
                        size_t errlen)
{
    struct script_header h;
    char msg[CLI_ERR_MAX];
    int rc = script_header_parse(text, len, &h, msg, sizeof(msg));
    if (rc)
        return rc == GPO_ENOMEM ? errbuf_set(err, errlen, rc, "out of memory")
                                : errbuf_set(err, errlen, rc, "%s: %s", name, msg);
    for (size_t k = 0; k < h.n && rc == 0; k++)
        rc = apply_directive(b, &h.directives[k], name, err, errlen);
    for (size_t k = 0; k < h.nlate && rc == 0; k++)
        rc = warn(b->plan,
                  "%s:%ld: a directive after the first command (line %ld) is ignored, as sbatch "
                  "does",
                  name, h.late[k], h.first_command);
    script_header_release(&h);
    return rc == GPO_ENOMEM ? errbuf_set(err, errlen, rc, "out of memory") : rc;
}

/* What runs: the script, the command after "--", or --wrap. */
static int put_program(struct build *b, const struct submit_args *a, const char *text, size_t len,
                       const char *name, char *err, size_t errlen)
{
    int given = (a->script != NULL) + (a->command != NULL) + (b->wrap != NULL);
    if (given == 0)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "nothing to run: give a batch script, --wrap COMMAND or -- COMMAND "
                          "[ARGS...]");
    if (given > 1)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "give one of a batch script, --wrap COMMAND and -- COMMAND [ARGS...]");
    if (a->nscript_args) {
        char q[JSONV_QUOTE_MAX + 4];
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "arguments after the script ('%s'...) are not supported: the job runs "
                          "its script without arguments (pass values with --export)",
                          jsonv_quote(a->script_args[0], strlen(a->script_args[0]), q));
    }
    if (a->command) {
        if (a->ncommand == 0)
            return errbuf_set(err, errlen, GPO_EUSAGE, "no command after '--'");
        json_t *argv = json_array();
        int rc = put(b, "command", argv, err, errlen);
        for (size_t k = 0; rc == 0 && k < a->ncommand; k++) {
            if (jsonv_check_utf8(a->command[k], strlen(a->command[k])) != 0)
                rc = errbuf_set(err, errlen, GPO_EUSAGE, "the command's word %zu is not UTF-8", k);
            else if (json_array_append_new(argv, json_string(a->command[k])) != 0)
                rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        }
        return rc;
    }
    char *wrapped = NULL;
    if (b->wrap) {
        size_t n = strlen(b->wrap) + 16;
        if (!(wrapped = malloc(n)))
            return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
        len = (size_t)snprintf(wrapped, n, "#!/bin/sh\n%s\n", b->wrap);
        text = wrapped;
        name = "--wrap";
    }
    int rc = 0;
    if (len == 0)
        rc = errbuf_set(err, errlen, GPO_EUSAGE, "%s is empty", name);
    else if (len > SUBMIT_SCRIPT_MAX)
        rc = errbuf_set(err, errlen, GPO_EUSAGE, "%s is larger than %u bytes", name,
                        SUBMIT_SCRIPT_MAX);
    else if (memchr(text, '\0', len) || jsonv_check_utf8(text, len) != 0)
        rc = errbuf_set(err, errlen, GPO_EUSAGE, "%s is not UTF-8 text", name);
    else
        rc = put(b, "script", json_stringn(text, len), err, errlen);
    /* sbatch runs a script once, on the first node: its steps reach the rest. */
    if (!rc)
        rc = put(b, "launch", json_string("first_node"), err, errlen);
    free(wrapped);
    return rc;
}

static int finish(struct build *b, const struct submit_args *a, const char *text, size_t len,
                  const char *name, char *err, size_t errlen)
{
    int rc = 0;
    if (b->gpu_mem_mib >= 0) {
        json_t *g = json_object_get(b->body, "gpus");
        bool gpus = g && json_number_value(g) > 0;
        rc = put(b, gpus ? "min_gpu_mem_mib" : "gpu_mem_mib", json_integer(b->gpu_mem_mib), err,
                 errlen);
    }
    /* SLURM_SUBMIT_DIR: where gpuorch submit ran, whatever -D says; a
     * directory JSON cannot hold is not sent. */
    if (rc == 0 && b->env->cwd && jsonv_check_utf8(b->env->cwd, strlen(b->env->cwd)) == 0)
        rc = put_text(b, "submit_dir", b->env->cwd, err, errlen);
    if (rc == 0 && !json_object_get(b->body, "workdir") && b->env->cwd &&
        put_text(b, "workdir", b->env->cwd, err, errlen) != 0)
        rc = errbuf_set(err, errlen, GPO_EUSAGE,
                        "the current directory is not UTF-8: give --chdir DIR");
    /* A relative -o or -e is relative to the job's working directory, as sbatch has it. */
    const char *wd = json_string_value(json_object_get(b->body, "workdir"));
    for (int k = 0; rc == 0 && k < 2; k++) {
        const char *key = k ? "error" : "output";
        const char *v = json_string_value(json_object_get(b->body, key));
        if (!v || v[0] == '/')
            continue;
        char path[PATH_MAX];
        int n = wd ? snprintf(path, sizeof(path), "%s/%s", wd, v) : -1;
        if (n < 0 || (size_t)n >= sizeof(path))
            rc = errbuf_set(err, errlen, GPO_EUSAGE,
                            "--%s %s: relative, and no working directory to start from", key, v);
        else
            rc = put_text(b, key, path, err, errlen);
    }
    return rc ? rc : put_program(b, a, text, len, name, err, errlen);
}

int submit_plan_build(const struct submit_args *a, const char *script, size_t len,
                      const char *script_name, const struct submit_env *env,
                      struct submit_plan *ret, char *err, size_t errlen)
{
    struct submit_plan plan = {0};
    struct build b = {.env = env, .gpu_mem_mib = -1, .plan = &plan};
    const char *name = script_name ? script_name : "script";
    int rc = (plan.body = b.body = json_object()) ? 0 : GPO_ENOMEM;
    if (rc)
        errbuf_set(err, errlen, rc, "out of memory");
    if (rc == 0 && a->script && script)
        rc = apply_script(&b, script, len, name, err, errlen);
    for (size_t k = 0; rc == 0 && k < a->npairs; k++)
        rc = apply(&b, a->pairs[k].flag, a->pairs[k].value, "", err, errlen);
    if (rc == 0)
        rc = finish(&b, a, script, len, name, err, errlen);
    if (rc) {
        submit_plan_release(&plan);
        return rc;
    }
    *ret = plan;
    return 0;
}

void submit_plan_release(struct submit_plan *p)
{
    if (!p)
        return;
    json_decref(p->body);
    free(p->idempotency_key);
    for (size_t k = 0; k < p->nwarnings; k++)
        free(p->warnings[k]);
    free(p->warnings);
    memset(p, 0, sizeof(*p));
}

/* ---- the command ------------------------------------------------------------ */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch submit [FLAGS] SCRIPT\n"
            "       gpuorch submit [FLAGS] -- COMMAND [ARGS...]\n"
            "       gpuorch submit [FLAGS] --wrap 'SHELL COMMAND'\n"
            "\n"
            "Submits a job. SCRIPT (\"-\": stdin) is sent as the job's script and run by its\n"
            "#! line; its #SBATCH and #GPUORCH lines before the first command give flags, and\n"
            "the command line's flags win. Prints 'Submitted batch job ID'.\n"
            "\n"
            "resources:\n"
            "  -N, --nodes N          exactly N nodes (a gang spread evenly over them)\n"
            "  -G, --gpus [TYPE:]N    whole GPUs in all, or a fraction of one below 1 (0.25)\n"
            "  -G, --gpus PROFILE     one MIG instance of a profile (1g.10gb, MIG 1g.10gb;\n"
            "                         Slurm's --gres=gpu:1g.10gb:1 says the same; docs/mig.md)\n"
            "  --gpus-per-node [TYPE:]N, --gres gpu[:TYPE]:N   GPUs on each node\n"
            "  --gpus-per-task N, -n/--ntasks N, --ntasks-per-node N, -c/--cpus-per-task N\n"
            "  --gpu-mem SIZE         a share of one GPU by memory (MiB, or 40G); with\n"
            "                         --gpus, the memory each GPU must have\n"
            "  --gpu-type TYPE        the GPU model (H100-80GB, or h100)\n"
            "  --cpus N               host CPUs in all (default 1)\n"
            "  --mem SIZE             host memory per node: MiB, or with a K, M, G or T\n"
            "                         suffix (default 1024 MiB; 0: the whole node)\n"
            "  --mem-per-cpu SIZE, --mem-per-gpu SIZE\n"
            "  --exclusive            whole nodes, shared with no other job\n"
            "  -C, --constraint F     node features: a, a&b, a|b\n"
            "  -t, --time LIMIT       MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS, 90m, UNLIMITED\n"
            "  --multi-node           a gang may span the fewest nodes that hold it\n"
            "  --pool POOL, -p        where it may run (a pool or an alias of one)\n"
            "where it counts:\n"
            "  --team TEAM, -A        whose quota it uses (default: yours)\n"
            "  --project P, --model M cost labels\n"
            "  --priority CLASS       a priority class (--qos says the same)\n"
            "how it runs:\n"
            "  -J, --job-name NAME\n"
            "  -o, --output FILE      stdout on the node, and stderr too without -e;\n"
            "                         -e, --error FILE: stderr\n"
            "  --open-mode MODE       truncate (default: each attempt starts them empty)\n"
            "                         or append to the output files\n"
            "  --signal [B:]SIG[@S]   SIG (USR1, 10) S seconds (default 60) before the time\n"
            "                         limit; with B: to the batch script alone\n"
            "  -D, --chdir DIR        working directory (default: the current one)\n"
            "  --export LIST          environment: ALL (yours, but GPUORCH_* and the GPU\n"
            "                         lists), NONE, NAME (your value), NAME=VALUE, comma-\n"
            "                         separated. Default: nothing of yours is sent (sbatch's\n"
            "                         default is ALL)\n"
            "  -a, --array 0-9%%2      an array of jobs, at most %%N running at once\n"
            "  -d, --dependency afterok:ID[:ID...][,afterany:ID...]\n"
            "  --max-retries N        retries after a failure or a lost node (default 0)\n"
            "  --checkpointable       it resumes after preemption\n"
            "  --no-requeue           when preempted, end it (PREEMPTED), not requeue it\n"
            "  -H, --hold             submit it held ('gpuorch release' lets it start)\n"
            "  -b, --begin TIME       not before TIME: HH:MM[:SS], now+N[minutes|hours|days],\n"
            "                         YYYY-MM-DD[THH:MM[:SS]], midnight, noon, tomorrow\n"
            "output:\n"
            "  --parsable             print only the job id\n"
            "  --idempotency-key K    a retry with the same key makes no second job (the API\n"
            "                         answers with the first one's; keys are per user)\n");
    cli_help_common(out, true);
    fprintf(out,
            "\n"
            "#SBATCH directives read as sbatch(1) defines them (docs/user-guide.md):\n"
            "--job-name/-J, --output/-o, --error/-e, --time/-t, --nodes/-N, --gres=gpu[:TYPE]:N\n"
            "(gpu:PROFILE:1: one MIG instance),\n"
            "--gpus/-G, --gpus-per-node, --gpus-per-task, --ntasks/-n, --ntasks-per-node,\n"
            "--cpus-per-task/-c, --mem, --mem-per-cpu, --mem-per-gpu, --exclusive,\n"
            "--constraint/-C, --array/-a, --dependency/-d, --partition/-p (pool), --qos\n"
            "(priority class), --account/-A (team), --chdir/-D, --export, --requeue,\n"
            "--no-requeue, --hold/-H, --begin/-b, --signal, --open-mode, --parsable.\n"
            "--mail-type, --mail-user, --comment, --wckey, --profile, --acctg-freq, -v and -Q\n"
            "change nothing here: a warning. Any other is an error with its line, as sbatch\n"
            "refuses unknown options. #GPUORCH lines take the flags above (e.g. '#GPUORCH\n"
            "--gpu-type H100-80GB').\n");
}

/* Reads the script: CLI_EXIT_FAIL, printed, when it cannot be read (as
 * sbatch). */
static int read_script(const char *path, char **ret, size_t *ret_len)
{
    char err[256];
    int rc = cli_read_file(path, SUBMIT_SCRIPT_MAX, ret, ret_len, err, sizeof(err));
    if (rc)
        return cli_fail("submit", "script '%s': %s", path,
                        rc == GPO_ENOMEM ? "out of memory" : err);
    return 0;
}

static int submit_run(struct submit_args *a, const struct submit_plan *plan)
{
    struct cli c;
    char err[CLI_ERR_MAX];
    json_t *job = NULL;
    int rc = cli_connect(&c, "submit", &a->co);
    if (rc == 0 && (rc = client_jobs_submit(&c.client, plan->body, plan->idempotency_key, &job, err,
                                            sizeof(err))) != 0)
        rc = rc == GPO_EINVAL
                 ? cli_usage_error("submit",
                                   "--idempotency-key: expected 1-255 printable characters")
                 : cli_fail_call("submit", rc, err);
    cli_disconnect(&c);
    if (rc)
        return rc;
    json_int_t id = json_integer_value(json_object_get(job, "id"));
    if (a->co.json)
        rc = cli_print_json(job) ? 0 : cli_fail("submit", "out of memory");
    else if (plan->parsable)
        printf("%" JSON_INTEGER_FORMAT "\n", id);
    else
        printf("Submitted batch job %" JSON_INTEGER_FORMAT "\n", id);
    json_decref(job);
    return rc;
}

int submit_command(int argc, char **argv)
{
    struct submit_args a;
    struct submit_plan plan;
    char err[CLI_ERR_MAX], cwd[PATH_MAX];
    char *text = NULL;
    size_t len = 0;
    int rc = submit_args_parse(argc, argv, &a, err, sizeof(err));
    if (rc)
        return rc == GPO_ENOMEM
                   ? cli_fail("submit", "out of memory")
                   : cli_usage_error("submit", "%s (see 'gpuorch submit --help')", err);
    if (a.co.help) {
        usage(stdout);
        submit_args_release(&a);
        return 0;
    }
    if (a.script && (rc = read_script(a.script, &text, &len)) != 0) {
        submit_args_release(&a);
        return rc;
    }
    struct submit_env env = {.cwd = getcwd(cwd, sizeof(cwd)), .envp = environ};
    rc = submit_plan_build(&a, text, len,
                           a.script && strcmp(a.script, "-") != 0 ? a.script : "stdin", &env, &plan,
                           err, sizeof(err));
    free(text);
    if (rc) {
        submit_args_release(&a);
        return rc == GPO_ENOMEM ? cli_fail("submit", "out of memory")
                                : cli_usage_error("submit", "%s", err);
    }
    for (size_t k = 0; k < plan.nwarnings; k++)
        fprintf(stderr, "gpuorch submit: warning: %s\n", plan.warnings[k]);
    rc = submit_run(&a, &plan);
    submit_plan_release(&plan);
    submit_args_release(&a);
    return rc;
}
