/*
 * cgroup.c - cgroups for the node agent (see cgroup.h): the root, an
 * attempt's cgroup and its processes; cgroup_fs.c has the files, the mount
 * table and the v1 side.
 *
 * Everything goes through the cgroup filesystems' files: a small write to
 * cgroup.procs, cgroup.kill, memory.max, cpu.weight, cpu.max,
 * cgroup.subtree_control (v1: memory.limit_in_bytes, cpu.shares, ...), a
 * read of cgroup.procs, cgroup.events, cgroup.controllers, memory.events.
 * Those files report a size of 0, so reads grow their buffer instead of
 * trusting stat.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "agent/cgroup_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* The limits' controllers, in cg_ctrl's order: a root has each on cgroup v2
 * (enabled in its cgroup.subtree_control), in a v1 hierarchy, or not. */
#define NLIMITS 2 /* CG_CPU, CG_MEMORY */

struct cgroup_root {
    char *path;
    enum cgroup_kind kind[NLIMITS]; /* where each limit is enforced */
    char *dir[CG_NCTRL];            /* the root's v1 siblings (cgroup_int.h); NULL: none */
};

int cgroup_mount_find(char *ret_path, size_t len, char *err, size_t errlen)
{
    if (!ret_path || len == 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_mount_find: no buffer");
    struct cg_mounts *m = malloc(sizeof(*m));
    if (!m)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = cg_mounts_read(NULL, m, err, errlen);
    size_t n = strlen(m->v2);
    if (!rc && !n)
        rc = errbuf_set(err, errlen, GPO_ENOTSUP, "no cgroup2 filesystem in /proc/self/mountinfo");
    else if (!rc && n >= len)
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: cgroup2 mount point too long", m->v2);
    else if (!rc)
        memcpy(ret_path, m->v2, n + 1);
    free(m);
    return rc;
}

/* Creates a probe cgroup in `dir`, moves a short-lived child into it and
 * removes it: the root is usable only if all three work. */
static int probe(const char *dir, char *err, size_t errlen)
{
    char child[CGROUP_PATH_MAX], name[64];
    snprintf(name, sizeof(name), "gpuorch-probe.%ld", (long)getpid());
    if (!cg_join(child, sizeof(child), dir, name))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", dir);
    rmdir(child); /* left by a crashed earlier probe of a process with our pid */
    if (mkdir(child, 0755) < 0)
        return errbuf_set(err, errlen, GPO_ENOTSUP, "%s: not writable: mkdir %s: %s", dir, child,
                          strerror(errno));
    int pfd[2];
    int rc = 0;
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        rc = errbuf_set(err, errlen, GPO_EIO, "pipe: %s", strerror(errno));
    } else {
        pid_t pid = fork();
        if (pid == 0) {
            /* Waits for the parent to close its end, then leaves. */
            char c;
            close(pfd[1]);
            while (read(pfd[0], &c, 1) < 0 && errno == EINTR)
                ;
            _exit(0);
        }
        close(pfd[0]);
        if (pid < 0) {
            rc = errbuf_set(err, errlen, GPO_EIO, "fork: %s", strerror(errno));
        } else {
            char why[256];
            if (cgroup_attach(child, pid, why, sizeof(why)) < 0)
                rc = errbuf_set(err, errlen, GPO_ENOTSUP,
                                "%s: cannot move a process into a child cgroup: %s", dir, why);
            close(pfd[1]);
            pfd[1] = -1;
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        }
        if (pfd[1] >= 0)
            close(pfd[1]);
    }
    /* The reaped child leaves the cgroup; give the kernel a moment if not yet. */
    int tries = 0;
    while (rmdir(child) < 0 && errno == EBUSY && tries++ < 1000)
        cg_nap_ms(1);
    return rc;
}

/* Turns on cpu and memory for the root's children where its
 * cgroup.controllers offers them, then records what they get. */
static void enable_v2(struct cgroup_root *r)
{
    char path[CGROUP_PATH_MAX], ctl[CGROUP_PATH_MAX], *offered = NULL, *enabled = NULL;
    if (!cg_join(path, sizeof(path), r->path, "cgroup.controllers") ||
        !cg_join(ctl, sizeof(ctl), r->path, "cgroup.subtree_control") || cg_read(path, &offered))
        return;
    for (int c = 0; c < NLIMITS; c++) {
        char word[32];
        snprintf(word, sizeof(word), "+%s", cg_ctrl_names[c]);
        /* One at a time: a write of several fails as a whole. Failure is
         * not fatal: the limit is then not enforced, and has() says so. */
        if (cg_has_word(offered, cg_ctrl_names[c]))
            cg_write(ctl, word);
    }
    free(offered);
    if (cg_read(ctl, &enabled) < 0)
        return;
    for (int c = 0; c < NLIMITS; c++)
        if (cg_has_word(enabled, cg_ctrl_names[c]))
            r->kind[c] = CGROUP_V2;
    free(enabled);
}

/* For each limit v2 does not give the root, and (on a v1 root) for the
 * freezer: the v1 hierarchy of that controller, at the root's path below
 * its own mount, made where missing. What cannot be made is left out. */
static int enable_v1(struct cgroup_root *r, char *err, size_t errlen)
{
    struct cg_mounts *m = malloc(sizeof(*m));
    if (!m)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = cg_mounts_read(r->path, m, err, errlen);
    for (int c = 0; !rc && m->rel && c < CG_NCTRL; c++) {
        char dir[CGROUP_PATH_MAX];
        bool wanted = c < NLIMITS ? r->kind[c] == CGROUP_NONE : m->at_v1;
        if (!wanted || !m->v1[c][0])
            continue;
        if (strcmp(m->v1[c], m->at) == 0) { /* the root's own hierarchy */
            if (c < NLIMITS)
                r->kind[c] = CGROUP_V1;
            continue;
        }
        int n = snprintf(dir, sizeof(dir), "%s%s", m->v1[c], m->rel);
        if (n < 0 || (size_t)n >= sizeof(dir) - 32 || cg_mkdir_parents(dir) < 0)
            continue;
        if (!(r->dir[c] = strdup(dir))) {
            rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
            break;
        }
        if (c < NLIMITS)
            r->kind[c] = CGROUP_V1;
    }
    free(m);
    return rc;
}

/* The automatic root: the cgroup2 mount + "/gpuorch", or without one, that
 * of a v1 hierarchy (the freezer's, else memory's, else cpu's). */
static int auto_dir(char *dir, size_t len, char *err, size_t errlen)
{
    struct cg_mounts *m = malloc(sizeof(*m));
    if (!m)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = cg_mounts_read(NULL, m, err, errlen);
    const char *mnt = m->v2[0]               ? m->v2
                      : m->v1[CG_FREEZER][0] ? m->v1[CG_FREEZER]
                      : m->v1[CG_MEMORY][0]  ? m->v1[CG_MEMORY]
                                             : m->v1[CG_CPU];
    if (!rc && !mnt[0])
        rc = errbuf_set(err, errlen, GPO_ENOTSUP,
                        "no cgroup2 filesystem and no cgroup v1 hierarchy in /proc/self/mountinfo");
    else if (!rc && !cg_join(dir, len, mnt, "gpuorch"))
        rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", mnt);
    free(m);
    return rc;
}

/* Resolves `path` (NULL/"auto" or an absolute directory) into dir, creating
 * the automatic root when missing. */
static int root_dir(const char *path, char *dir, size_t len, char *err, size_t errlen)
{
    if (!path || strcmp(path, "auto") == 0) {
        int rc = auto_dir(dir, len, err, errlen);
        if (rc)
            return rc;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return errbuf_set(err, errlen, GPO_ENOTSUP, "%s: not writable: mkdir: %s", dir,
                              strerror(errno));
        return 0;
    }
    size_t n = strlen(path);
    if (path[0] != '/')
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: not an absolute path", path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (n >= len)
        return errbuf_set(err, errlen, GPO_EINVAL, "%.64s...: path too long", path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    return 0;
}

int cgroup_root_open(const char *path, struct cgroup_root **ret, char *err, size_t errlen)
{
    if (!ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_root_open: NULL argument");
    char dir[CGROUP_PATH_MAX];
    int rc = root_dir(path, dir, sizeof(dir), err, errlen);
    if (rc)
        return rc;
    struct stat st;
    struct statfs sf;
    if (stat(dir, &st) < 0)
        return errbuf_set(err, errlen, GPO_ENOTSUP, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return errbuf_set(err, errlen, GPO_ENOTSUP, "%s: not a directory", dir);
    if (statfs(dir, &sf) < 0)
        return errbuf_set(err, errlen, GPO_ENOTSUP, "statfs %s: %s", dir, strerror(errno));
    if (sf.f_type != CGROUP2_SUPER_MAGIC && sf.f_type != CGROUP_SUPER_MAGIC)
        return errbuf_set(err, errlen, GPO_ENOTSUP,
                          "%s: not on a cgroup filesystem (cgroup2 or a v1 hierarchy)", dir);
    rc = probe(dir, err, errlen);
    if (rc)
        return rc;
    struct cgroup_root *r = calloc(1, sizeof(*r));
    if (!r || !(r->path = strdup(dir))) {
        free(r);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    if (sf.f_type == CGROUP2_SUPER_MAGIC)
        enable_v2(r);
    if ((rc = enable_v1(r, err, errlen))) {
        cgroup_root_close(r);
        return rc;
    }
    *ret = r;
    return 0;
}

void cgroup_root_close(struct cgroup_root *root)
{
    if (!root)
        return;
    for (int c = 0; c < CG_NCTRL; c++)
        free(root->dir[c]);
    free(root->path);
    free(root);
}

const char *cgroup_root_path(const struct cgroup_root *root)
{
    return root->path;
}

/* The index of a limit's controller by name; -1 for another. */
static int limit_index(const char *controller)
{
    for (int c = 0; controller && c < NLIMITS; c++)
        if (strcmp(cg_ctrl_names[c], controller) == 0)
            return c;
    return -1;
}

const char *cgroup_kind_name(enum cgroup_kind kind)
{
    switch (kind) {
    case CGROUP_NONE:
        return "no";
    case CGROUP_V1:
        return "cgroup v1";
    case CGROUP_V2:
        return "cgroup v2";
    }
    return "unknown";
}

enum cgroup_kind cgroup_root_kind(const struct cgroup_root *root, const char *controller)
{
    int c = limit_index(controller);
    return root && c >= 0 ? root->kind[c] : CGROUP_NONE;
}

bool cgroup_root_has(const struct cgroup_root *root, const char *controller)
{
    return cgroup_root_kind(root, controller) != CGROUP_NONE;
}

const char *cgroup_root_dir(const struct cgroup_root *root, const char *controller)
{
    int c = limit_index(controller);
    if (!root || c < 0 || root->kind[c] == CGROUP_NONE)
        return NULL;
    return root->dir[c] ? root->dir[c] : root->path;
}

/* cpu.weight for cpu_milli: 100 (the kernel's default) per CPU, in its
 * range 1..10000. */
static uint64_t v2_weight(uint32_t cpu_milli)
{
    uint64_t w = cpu_milli ? cpu_milli / 10 : 100;
    return w < 1 ? 1 : w > 10000 ? 10000 : w;
}

/* Writes value into DIR/NAME, with a message naming both on failure. */
static int put(const char *dir, const char *name, const char *value, char *err, size_t errlen)
{
    char path[CGROUP_PATH_MAX];
    if (!cg_join(path, sizeof(path), dir, name) || cg_write(path, value) < 0)
        return errbuf_set(err, errlen, GPO_EIO, "write %s to %s/%s: %s", value, dir, name,
                          strerror(errno));
    return 0;
}

/* Writes the v2 limits in `dir`: memory.max (and memory.swap.max 0 where
 * there is one, so swap does not stretch the limit), cpu.weight, cpu.max. */
static int v2_limits(const char *dir, bool cpu, bool mem, uint32_t cpu_milli, int64_t mem_mib,
                     char *err, size_t errlen)
{
    char value[64];
    int rc = 0;
    if (mem) {
        char swap[CGROUP_PATH_MAX];
        if (mem_mib > 0)
            snprintf(value, sizeof(value), "%" PRId64, mem_mib * 1024 * 1024);
        else
            snprintf(value, sizeof(value), "max");
        rc = put(dir, "memory.max", value, err, errlen);
        if (!rc && cg_join(swap, sizeof(swap), dir, "memory.swap.max") && access(swap, F_OK) == 0)
            rc = put(dir, "memory.swap.max", mem_mib > 0 ? "0" : "max", err, errlen);
    }
    if (cpu && !rc) {
        snprintf(value, sizeof(value), "%" PRIu64, v2_weight(cpu_milli));
        rc = put(dir, "cpu.weight", value, err, errlen);
        /* The kernel refuses a quota under 1 ms per period. */
        uint64_t quota = (uint64_t)cpu_milli * 100;
        if (cpu_milli > 0)
            snprintf(value, sizeof(value), "%" PRIu64 " 100000", quota < 1000 ? 1000 : quota);
        else
            snprintf(value, sizeof(value), "max 100000");
        rc = rc ? rc : put(dir, "cpu.max", value, err, errlen);
    }
    return rc;
}

/* An attempt's directories: the primary one and its v1 siblings. */
struct att_dirs {
    char path[CGROUP_PATH_MAX];
    char sib[CG_NCTRL][CGROUP_PATH_MAX]; /* "" where the root has none */
};

/* Makes the attempt's directories (existing ones are reused); on failure,
 * removes those it made. */
static int make_dirs(const struct att_dirs *d, bool *ret_made, char *err, size_t errlen)
{
    bool made[CG_NCTRL + 1] = {false};
    int rc = 0;
    for (int c = 0; c <= CG_NCTRL && !rc; c++) {
        const char *dir = c < CG_NCTRL ? d->sib[c] : d->path;
        if (!dir[0])
            continue;
        made[c] = mkdir(dir, 0755) == 0;
        /* A v1 directory of the root that went (its parents hold no
         * setting) is made again. */
        if (!made[c] && errno == ENOENT && c < CG_NCTRL && cg_mkdir_parents(dir) == 0)
            made[c] = true;
        if (!made[c] && errno != EEXIST)
            rc = cg_fail(err, errlen, "mkdir", dir);
    }
    for (int c = 0; rc && c <= CG_NCTRL; c++)
        if (made[c])
            rmdir(c < CG_NCTRL ? d->sib[c] : d->path);
    *ret_made = made[CG_NCTRL];
    return rc;
}

int cgroup_create(const struct cgroup_root *root, uint64_t job, uint32_t attempt,
                  uint32_t cpu_milli, int64_t mem_mib, char *path_out, size_t len, char *err,
                  size_t errlen)
{
    if (!root || !path_out)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_create: NULL argument");
    if (job == 0 || attempt == 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_create: job and attempt start at 1");
    if (mem_mib < 0 || mem_mib > CGROUP_MEM_MIB_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL,
                          "cgroup_create: mem_mib %" PRId64 " out of range", mem_mib);
    struct att_dirs *d = calloc(1, sizeof(*d));
    if (!d)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    char name[64];
    snprintf(name, sizeof(name), "job-%" PRIu64 ".%" PRIu32, job, attempt);
    bool fits = cg_join(d->path, sizeof(d->path), root->path, name) && strlen(d->path) < len;
    for (int c = 0; c < CG_NCTRL; c++)
        fits = fits && (!root->dir[c] || cg_join(d->sib[c], sizeof(d->sib[c]), root->dir[c], name));
    bool made = false;
    int rc = fits ? make_dirs(d, &made, err, errlen)
                  : errbuf_set(err, errlen, GPO_EINVAL, "%s/%s: too long", root->path, name);
    if (!rc) {
        const char *cpu = d->sib[CG_CPU][0] ? d->sib[CG_CPU] : d->path;
        const char *mem = d->sib[CG_MEMORY][0] ? d->sib[CG_MEMORY] : d->path;
        rc = v2_limits(d->path, root->kind[CG_CPU] == CGROUP_V2, root->kind[CG_MEMORY] == CGROUP_V2,
                       cpu_milli, mem_mib, err, errlen);
        rc = rc ? rc
                : cg_v1_limits(root->kind[CG_CPU] == CGROUP_V1 ? cpu : NULL,
                               root->kind[CG_MEMORY] == CGROUP_V1 ? mem : NULL, cpu_milli, mem_mib,
                               err, errlen);
        if (rc && made)
            cgroup_remove(d->path, NULL, 0);
    }
    if (!rc)
        memcpy(path_out, d->path, strlen(d->path) + 1);
    free(d);
    return rc;
}

/* Writes pid's text into DIR/cgroup.procs. */
static int attach_one(const char *dir, const char *value, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX];
    if (!cg_join(file, sizeof(file), dir, "cgroup.procs"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", dir);
    if (cg_write(file, value) < 0)
        return cg_fail(err, errlen, "write to", file);
    return 0;
}

int cgroup_attach(const char *path, pid_t pid, char *err, size_t errlen)
{
    char value[32], (*sib)[CGROUP_PATH_MAX] = malloc(CG_NCTRL * sizeof(*sib));
    if (!path || pid < 0 || !sib) {
        free(sib);
        return errbuf_set(err, errlen, !sib ? GPO_ENOMEM : GPO_EINVAL, "cgroup_attach: %s",
                          !sib ? "out of memory" : "bad argument");
    }
    snprintf(value, sizeof(value), "%ld", (long)pid);
    int rc = cg_siblings(path, sib, err, errlen);
    for (int c = 0; !rc && c < CG_NCTRL; c++)
        if (sib[c][0])
            rc = attach_one(sib[c], value, err, errlen);
    free(sib);
    return rc ? rc : attach_one(path, value, err, errlen);
}

int cgroup_pids(const char *path, pid_t **ret_pids, size_t *ret_n, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX], *text;
    if (!path || !ret_pids || !ret_n)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_pids: NULL argument");
    if (!cg_join(file, sizeof(file), path, "cgroup.procs"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", path);
    if (cg_read(file, &text) < 0)
        return cg_fail(err, errlen, "read", file);
    size_t n = 0, cap = 0;
    pid_t *v = NULL;
    int rc = 0;
    for (char *p = text; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        p = end;
        if (pid <= 0 || pid > INT32_MAX)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            pid_t *nv = realloc(v, nc * sizeof(*nv));
            if (!nv) {
                rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
                break;
            }
            v = nv;
            cap = nc;
        }
        v[n++] = (pid_t)pid;
    }
    free(text);
    if (rc) {
        free(v);
        return rc;
    }
    if (n == 0) {
        free(v);
        v = NULL;
    }
    *ret_pids = v;
    *ret_n = n;
    return 0;
}

int cgroup_signal(const char *path, int sig, char *err, size_t errlen)
{
    if (sig < 1 || sig > 64)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_signal: bad signal %d", sig);
    pid_t *pids;
    size_t n;
    int rc = cgroup_pids(path, &pids, &n, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (kill(pids[i], sig) < 0 && errno != ESRCH && rc == 0)
            rc = errbuf_set(err, errlen, GPO_EIO, "kill %ld (in %s): %s", (long)pids[i], path,
                            strerror(errno));
    free(pids);
    return rc;
}

int cgroup_kill(const char *path, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX];
    struct stat st;
    if (!path)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_kill: NULL argument");
    if (!cg_join(file, sizeof(file), path, "cgroup.kill"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", path);
    if (cg_write(file, "1") == 0)
        return 0;
    if (errno != ENOENT)
        return cg_fail(err, errlen, "write to", file);
    if (stat(path, &st) < 0)
        return cg_fail(err, errlen, "stat", path);
    return cg_kill_each(path, err, errlen);
}

/* A v1 cgroup has no cgroup.events: it is populated while it lists a
 * process. (A child cgroup that a job running as root made keeps it from
 * being removed: cgroup_remove says GPO_EBUSY.) */
static int populated_v1(const char *path, bool *ret_populated, char *err, size_t errlen)
{
    pid_t *pids = NULL;
    size_t n = 0;
    int rc = cgroup_pids(path, &pids, &n, err, errlen);
    if (rc)
        return rc;
    free(pids);
    *ret_populated = n > 0;
    return 0;
}

int cgroup_populated(const char *path, bool *ret_populated, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX], *text = NULL;
    if (!path || !ret_populated)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_populated: NULL argument");
    if (!cg_join(file, sizeof(file), path, "cgroup.events"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", path);
    int r = cg_read(file, &text);
    if (r < 0 && errno == ENOENT && access(path, F_OK) == 0)
        return populated_v1(path, ret_populated, err, errlen);
    if (r < 0)
        return cg_fail(err, errlen, "read", file);
    int rc = errbuf_set(err, errlen, GPO_EIO, "%s: no \"populated\" line", file);
    // NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign): read_text set text (its -errno < 0)
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, "populated ", 10) == 0 && (p[10] == '0' || p[10] == '1')) {
            *ret_populated = p[10] == '1';
            rc = 0;
            break;
        }
    }
    free(text);
    return rc;
}

/* rmdir of one of cgroup `path`'s directories: 0 (also when gone),
 * GPO_EBUSY, GPO_EIO. */
static int remove_one(const char *path, const char *dir, char *err, size_t errlen)
{
    if (rmdir(dir) == 0 || errno == ENOENT)
        return 0;
    bool busy = errno == EBUSY;
    if (strcmp(path, dir) != 0)
        return errbuf_set(err, errlen, busy ? GPO_EBUSY : GPO_EIO, "cgroup %s: rmdir %s: %s", path,
                          dir, busy ? "processes remain" : strerror(errno));
    if (busy)
        return errbuf_set(err, errlen, GPO_EBUSY, "rmdir %s: processes remain", path);
    return cg_fail(err, errlen, "rmdir", path);
}

int cgroup_remove(const char *path, char *err, size_t errlen)
{
    if (!path)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_remove: NULL argument");
    char(*sib)[CGROUP_PATH_MAX] = malloc(CG_NCTRL * sizeof(*sib));
    if (!sib)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    /* The siblings first: the primary directory stays until they are gone,
     * so that a retry finds them again. */
    int rc = cg_siblings(path, sib, err, errlen);
    for (int c = 0; !rc && c < CG_NCTRL; c++)
        if (sib[c][0])
            rc = remove_one(path, sib[c], err, errlen);
    free(sib);
    return rc ? rc : remove_one(path, path, err, errlen);
}

/* The number after `key ` on a line of DIR/NAME. 0, -ENOENT (no such
 * file), GPO_EIO. */
static int read_counter(const char *dir, const char *name, const char *key, uint64_t *ret,
                        char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX], *text = NULL;
    if (!cg_join(file, sizeof(file), dir, name))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", dir);
    if (cg_read(file, &text) < 0)
        return errno == ENOENT ? -ENOENT : cg_fail(err, errlen, "read", file);
    size_t kl = strlen(key);
    int rc = errbuf_set(err, errlen, GPO_EIO, "%s: no \"%s\" line", file, key);
    // NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign): cg_read set text (its -errno < 0)
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        char *end;
        if (strncmp(p, key, kl) != 0 || p[kl] != ' ')
            continue;
        unsigned long long v = strtoull(p + kl + 1, &end, 10);
        if (end != p + kl + 1 && (*end == '\n' || *end == '\0')) {
            *ret = v;
            rc = 0;
        }
        break;
    }
    free(text);
    return rc;
}

int cgroup_oom_kills(const char *path, uint64_t *ret_kills, char *err, size_t errlen)
{
    if (!path || !ret_kills)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_oom_kills: NULL argument");
    if (access(path, F_OK) < 0)
        return cg_fail(err, errlen, "access", path);
    uint64_t n = 0;
    int rc = read_counter(path, "memory.events", "oom_kill", &n, err, errlen);
    if (rc == -ENOENT)
        rc = read_counter(path, "memory.oom_control", "oom_kill", &n, err, errlen);
    if (rc == -ENOENT) {
        char(*sib)[CGROUP_PATH_MAX] = malloc(CG_NCTRL * sizeof(*sib));
        rc = !sib ? errbuf_set(err, errlen, GPO_ENOMEM, "out of memory")
                  : cg_siblings(path, sib, err, errlen);
        if (!rc && sib[CG_MEMORY][0])
            rc = read_counter(sib[CG_MEMORY], "memory.oom_control", "oom_kill", &n, err, errlen);
        else if (!rc)
            rc = -ENOENT;
        free(sib);
    }
    if (rc == -ENOENT)
        return errbuf_set(err, errlen, GPO_ENOTSUP, "%s: no memory controller", path);
    if (!rc)
        *ret_kills = n;
    return rc;
}

int cgroup_layout_read(struct cgroup_layout *ret, char *err, size_t errlen)
{
    struct cg_mounts *m = malloc(sizeof(*m));
    struct cgroup_layout *l = calloc(1, sizeof(*l));
    int rc = !m || !l ? errbuf_set(err, errlen, GPO_ENOMEM, "out of memory")
                      : auto_dir(l->root, sizeof(l->root), err, errlen);
    rc = rc ? rc : cg_mounts_read(l->root, m, err, errlen);
    if (!rc) {
        /* A child of the v2 mount gets what its cgroup.subtree_control enables. */
        char ctl[CGROUP_PATH_MAX], *enabled = NULL;
        if (m->v2[0] && !m->at_v1 && cg_join(ctl, sizeof(ctl), m->v2, "cgroup.subtree_control"))
            cg_read(ctl, &enabled);
        l->root_kind = m->at_v1 ? CGROUP_V1 : CGROUP_V2;
        for (int c = 0; c < NLIMITS; c++) {
            struct cgroup_limit *lim = c == CG_CPU ? &l->cpu : &l->memory;
            if (enabled && cg_has_word(enabled, cg_ctrl_names[c])) {
                lim->kind = CGROUP_V2;
                snprintf(lim->dir, sizeof(lim->dir), "%s", l->root);
            } else if (m->v1[c][0] && m->rel) {
                lim->kind = CGROUP_V1;
                snprintf(lim->dir, sizeof(lim->dir), "%s%s", m->v1[c], m->rel);
            }
        }
        free(enabled);
        *ret = *l;
    }
    free(m);
    free(l);
    return rc;
}
