/*
 * wrappers.c - gpuorch slurm-wrappers DIR and gpuorch hostlist (wrappers.h).
 */
#include "cli/wrappers.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/fsutil.h"
#include "util/hostlist.h"
#include "util/opts.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MARK         "# written by 'gpuorch slurm-wrappers':"
#define SCRIPT_MAX   4096

/* Each wrapper: its name and the shell after the mark line, where @BIN@
 * stands for the gpuorch binary's path, quoted. squeue gets
 * squeue's default columns unless SQUEUE_FORMAT names others. */
static const struct {
    const char *name, *body;
} wrappers[] = {
    {"sbatch", "exec @BIN@ submit \"$@\"\n"},
    {"squeue", "SQUEUE_FORMAT=${SQUEUE_FORMAT:-'%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R'} "
               "exec @BIN@ queue \"$@\"\n"},
    {"scancel", "exec @BIN@ cancel \"$@\"\n"},
    {"srun", "exec @BIN@ run \"$@\"\n"},
    {"salloc", "exec @BIN@ alloc \"$@\"\n"},
    {"sacct", "exec @BIN@ history \"$@\"\n"},
    {"sinfo", "exec @BIN@ info \"$@\"\n"},
    {"seff", "exec @BIN@ eff \"$@\"\n"},
    {"scontrol",
     "case \"$1\" in\n"
     "hold | release | requeue | update) exec @BIN@ \"$@\" ;;\n"
     "show)\n"
     "    case \"$2\" in\n"
     "    job | jobs) shift 2; exec @BIN@ show \"$@\" ;;\n"
     "    hostnames) shift 2; exec @BIN@ hostlist --expand \"$@\" ;;\n"
     "    hostlist | hostlistsorted) shift 2; exec @BIN@ hostlist --compress \"$@\" ;;\n"
     "    esac ;;\n"
     "esac\n"
     "echo \"scontrol: gpuorch has hold, release, requeue, update, show job, show hostnames\" "
     "\"and show hostlist, not '$*'\" >&2\n"
     "exit 1\n"},
};

struct wrappers_args {
    struct cli_common co;
    const char *gpuorch;
    bool force;
};

static const struct opts_opt wrappers_opts[] = {
    {.name = "gpuorch", .type = OPTS_STRING, .offset = offsetof(struct wrappers_args, gpuorch)},
    {.name = "force", .type = OPTS_FLAG, .offset = offsetof(struct wrappers_args, force)},
    CLI_OPTS_COMMON(struct wrappers_args, co),
};

static void wrappers_usage(FILE *out)
{
    fprintf(out, "usage: gpuorch slurm-wrappers DIR [--gpuorch PATH] [--force]\n"
                 "\n"
                 "Writes Slurm's commands into DIR as shell scripts that run this gpuorch:\n"
                 "sbatch (submit), squeue (queue), scancel (cancel), srun (run), salloc\n"
                 "(alloc), sacct (history), sinfo (info), seff (eff) and scontrol (hold,\n"
                 "release, requeue, update, show job, show hostnames, show hostlist). With DIR\n"
                 "early in PATH, existing Slurm scripts run unchanged; docs/slurm.md lists the\n"
                 "options each takes.\n"
                 "\n"
                 "  --gpuorch PATH   the binary the scripts run (default: this one's absolute\n"
                 "                   path; make install gives the installed one)\n"
                 "  --force          replace files of these names that gpuorch did not write\n");
    cli_help_common(out, false);
}

/* 'path' quoted for sh (a ' inside as '\''). */
static int sh_quote(const char *s, char *buf, size_t len)
{
    size_t at = 0;
    if (len < 3)
        return GPO_ENOBUFS;
    buf[at++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t n = piece ? 4 : 1;
        if (at + n + 2 > len)
            return GPO_ENOBUFS;
        memcpy(buf + at, piece ? piece : s, n);
        at += n;
    }
    buf[at++] = '\'';
    buf[at] = '\0';
    return 0;
}

/* Whether the file at path may be replaced: absent, or one of ours. */
static bool replaceable(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT;
    char line[256] = "", mark[256] = "";
    bool ours = fgets(line, sizeof(line), f) && fgets(mark, sizeof(mark), f) &&
                strncmp(mark, MARK, strlen(MARK)) == 0;
    (void)fclose(f); /* read only: nothing to lose */
    return ours;
}

static int write_one(const char *dir, size_t k, const char *bin, bool force)
{
    char path[PATH_MAX], script[SCRIPT_MAX], err[CLI_ERR_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, wrappers[k].name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return cli_usage_error("slurm-wrappers", "%s: the path is too long", dir);
    if (!force && !replaceable(path))
        return cli_fail("slurm-wrappers",
                        "%s exists and gpuorch did not write it (--force replaces it)", path);
    int at = snprintf(script, sizeof(script), "#!/bin/sh\n" MARK " Slurm's %s runs gpuorch\n",
                      wrappers[k].name);
    size_t len = at > 0 ? (size_t)at : 0;
    for (const char *b = wrappers[k].body; *b && len < sizeof(script);) {
        const char *next = strstr(b, "@BIN@");
        size_t piece = next ? (size_t)(next - b) : strlen(b);
        int w =
            snprintf(script + len, sizeof(script) - len, "%.*s%s", (int)piece, b, next ? bin : "");
        len = w < 0 ? sizeof(script) : len + (size_t)w;
        b += piece + (next ? 5 : 0);
    }
    if (at < 0 || len >= sizeof(script))
        return cli_usage_error("slurm-wrappers", "--gpuorch: the path is too long");
    if (fsutil_write_atomic(path, script, len, 0755, 0, err, sizeof(err)) != 0)
        return cli_fail("slurm-wrappers", "%s", err);
    printf("%s\n", path);
    return 0;
}

int wrappers_command(int argc, char **argv)
{
    struct wrappers_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("slurm-wrappers", argc, argv, CLI_OPTS(wrappers_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help)
        wrappers_usage(stdout);
    else if (rc == 0 && npos != 1)
        rc = cli_usage_error("slurm-wrappers",
                             "expected one DIR (see 'gpuorch slurm-wrappers --help')");
    const char *dir = npos == 1 ? pos[0] : NULL;
    free(pos);
    if (rc || a.co.help)
        return rc;
    char self[PATH_MAX], bin[PATH_MAX * 4 + 3];
    if (!a.gpuorch) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
            return cli_fail("slurm-wrappers", "cannot find this binary's path: %s (give --gpuorch)",
                            strerror(errno));
        self[n] = '\0';
        a.gpuorch = self;
    }
    if (a.gpuorch[0] != '/')
        return cli_usage_error("slurm-wrappers", "--gpuorch: '%s' is not an absolute path",
                               a.gpuorch);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_fail("slurm-wrappers", "%s: not a directory", dir);
    if (sh_quote(a.gpuorch, bin, sizeof(bin)) != 0)
        return cli_usage_error("slurm-wrappers", "--gpuorch: the path is too long");
    for (size_t k = 0; k < ARRAY_LEN(wrappers) && rc == 0; k++)
        rc = write_one(dir, k, bin, a.force);
    return rc;
}

/* ---- hostlist ------------------------------------------------------------------- */

struct hostlist_args {
    struct cli_common co;
    bool expand, compress;
};

static const struct opts_opt hostlist_opts[] = {
    {.name = "expand", .type = OPTS_FLAG, .offset = offsetof(struct hostlist_args, expand)},
    {.name = "compress", .type = OPTS_FLAG, .offset = offsetof(struct hostlist_args, compress)},
    CLI_OPTS_COMMON(struct hostlist_args, co),
};

/* Every name of words[0, n) (each a host list) into one new array. */
static int expand_all(const char **words, size_t n, char ***ret, size_t *ret_n)
{
    char **all = NULL;
    size_t nall = 0;
    for (size_t k = 0; k < n; k++) {
        char **v = NULL, err[CLI_ERR_MAX];
        size_t nv = 0;
        int rc = hostlist_expand(words[k], &v, &nv, err, sizeof(err));
        char **grown = rc ? NULL : realloc(all, (nall + nv + 1) * sizeof(*all));
        if (!grown) {
            hostlist_free(v, nv);
            hostlist_free(all, nall);
            return rc ? cli_usage_error("hostlist", "%s", err)
                      : cli_fail("hostlist", "out of memory");
        }
        all = grown;
        memcpy(all + nall, v, nv * sizeof(*v));
        nall += nv;
        free(v);
    }
    *ret = all;
    *ret_n = nall;
    return 0;
}

int hostlist_command(int argc, char **argv)
{
    struct hostlist_args a = {0};
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("hostlist", argc, argv, CLI_OPTS(hostlist_opts), &a, &pos, &npos);
    if (rc == 0 && a.co.help) {
        printf("usage: gpuorch hostlist --expand [LIST...] | --compress [LIST...]\n\n"
               "Slurm's host lists, as 'scontrol show hostnames' and 'show hostlist' print\n"
               "them: --expand writes each name of node[01-03],login on a line of its own;\n"
               "--compress writes the names (lists, or names, comma- or space-separated) as\n"
               "one compressed list. Without LIST, $SLURM_JOB_NODELIST.\n");
        cli_help_common(stdout, false);
    } else if (rc == 0 && a.expand == a.compress) {
        rc = cli_usage_error("hostlist", "expected --expand or --compress");
    }
    const char *env = getenv("SLURM_JOB_NODELIST");
    const char **words = npos ? pos : &env;
    size_t nwords = npos ? npos : env ? 1 : 0;
    char **names = NULL;
    size_t n = 0;
    if (rc == 0 && !a.co.help)
        rc = expand_all(words, nwords, &names, &n);
    free(pos);
    if (rc || a.co.help)
        return rc;
    if (a.expand) {
        for (size_t k = 0; k < n; k++)
            printf("%s\n", names[k]);
    } else {
        char buf[65536];
        if (n && hostlist_compress((const char *const *)names, n, buf, sizeof(buf)) != 0)
            rc = cli_fail("hostlist", "the names do not fit in one list");
        else
            printf("%s\n", n ? buf : "");
    }
    hostlist_free(names, n);
    return rc;
}
