/*
 * cgroup.c - cgroup v2 for the node agent (see cgroup.h).
 *
 * Everything goes through the cgroup filesystem's files: a small write to
 * cgroup.procs, cgroup.kill, memory.max, cpu.max, cgroup.subtree_control, a
 * read of cgroup.procs, cgroup.events, cgroup.controllers. Those files report
 * a size of 0, so reads grow their buffer instead of trusting stat.
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
#include "util/errbuf.h"
#include "base/banned.h"

/* cgroup.procs of a cgroup with very many processes; more is not an attempt. */
#define READ_MAX_BYTES (4 << 20)
/* The fallback kill without cgroup.kill: rounds of SIGKILL, 1 ms apart. */
#define KILL_ROUNDS 1000

enum { HAS_CPU = 1 << 0, HAS_MEMORY = 1 << 1 };

static const struct {
    const char *name;
    unsigned flag;
} controllers[] = {
    {"cpu", HAS_CPU},
    {"memory", HAS_MEMORY},
};
#define NCONTROLLERS (sizeof(controllers) / sizeof(controllers[0]))

struct cgroup_root {
    char *path;
    unsigned has; /* HAS_* the root's children get */
};

static void nap_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* PARENT/NAME into out (outlen bytes); false when it does not fit. */
static bool join(char *out, size_t outlen, const char *parent, const char *name)
{
    return (size_t)snprintf(out, outlen, "%s/%s", parent, name) < outlen;
}

/* Writes `text` to an existing file in one write(), as the cgroup files want
 * it. Returns 0 or -errno (errno set too). */
static int write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text);
    ssize_t w;
    while ((w = write(fd, text, len)) < 0 && errno == EINTR)
        ;
    int e = errno;
    close(fd);
    if (w < 0 || (size_t)w != len) {
        errno = w < 0 ? e : EIO;
        return -errno;
    }
    return 0;
}

/* Reads a whole file into a NUL-terminated heap buffer (*ret, caller frees).
 * Returns 0, or -errno with errno set too (EFBIG over READ_MAX_BYTES). */
static int read_text(const char *path, char **ret)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    int e = buf ? 0 : ENOMEM;
    while (!e) {
        if (cap - len < 2) {
            char *nb = cap < READ_MAX_BYTES ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                e = cap < READ_MAX_BYTES ? ENOMEM : EFBIG;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            e = errno;
        else if (n == 0)
            break;
        else
            len += (size_t)n;
    }
    close(fd);
    if (e) {
        free(buf);
        errno = e;
        return -e;
    }
    buf[len] = '\0';
    *ret = buf;
    return 0;
}

/* The code for a failed call on a cgroup file, with its message. */
static int fail(char *err, size_t errlen, const char *call, const char *path)
{
    int e = errno;
    int code = e == ENOENT ? GPO_ENOENT : e == ENOMEM ? GPO_ENOMEM : GPO_EIO;
    return errbuf_set(err, errlen, code, "%s %s: %s", call, path, strerror(e));
}

/* True when whitespace-separated `list` holds `word`. */
static bool has_word(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == '\n' || *p == '\t')
            p++;
        size_t n = strcspn(p, " \n\t");
        if (n == wl && memcmp(p, word, n) == 0)
            return true;
        p += n;
    }
    return false;
}

/* Undoes mountinfo's octal escapes (\040 for a space, ...) in place. */
static void unescape_octal(char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

int cgroup_mount_find(char *ret_path, size_t len, char *err, size_t errlen)
{
    static const char file[] = "/proc/self/mountinfo";
    if (!ret_path || len == 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_mount_find: no buffer");
    char *text;
    if (read_text(file, &text) < 0)
        return errbuf_set(err, errlen, errno == ENOMEM ? GPO_ENOMEM : GPO_EIO, "read %s: %s", file,
                          strerror(errno));
    int rc = errbuf_set(err, errlen, GPO_ENOTSUP, "no cgroup2 filesystem in %s", file);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        /* ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE ... */
        char *sep = strstr(line, " - ");
        if (!sep || strncmp(sep + 3, "cgroup2 ", 8) != 0)
            continue;
        *sep = '\0';
        char *f[5], *fs = NULL;
        int nf = 0;
        for (char *tok = strtok_r(line, " ", &fs); tok && nf < 5; tok = strtok_r(NULL, " ", &fs))
            f[nf++] = tok;
        if (nf < 5)
            continue;
        unescape_octal(f[4]);
        size_t n = strlen(f[4]);
        if (n >= len) {
            rc = errbuf_set(err, errlen, GPO_EINVAL, "%s: cgroup2 mount point too long", file);
            break;
        }
        memcpy(ret_path, f[4], n + 1);
        rc = 0;
        break;
    }
    free(text);
    return rc;
}

/* Creates a probe cgroup in `dir`, moves a short-lived child into it and
 * removes it: the root is usable only if all three work. */
static int probe(const char *dir, char *err, size_t errlen)
{
    char child[CGROUP_PATH_MAX], name[64];
    snprintf(name, sizeof(name), "gpuorch-probe.%ld", (long)getpid());
    if (!join(child, sizeof(child), dir, name))
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
        nap_ms(1);
    return rc;
}

/* Turns on cpu and memory for the root's children where offered, then
 * records what they get. */
static void enable_controllers(struct cgroup_root *r)
{
    char path[CGROUP_PATH_MAX], ctl[CGROUP_PATH_MAX], *offered = NULL, *enabled = NULL;
    if (!join(path, sizeof(path), r->path, "cgroup.controllers") ||
        !join(ctl, sizeof(ctl), r->path, "cgroup.subtree_control") || read_text(path, &offered))
        return;
    for (size_t i = 0; i < NCONTROLLERS; i++) {
        char word[32];
        snprintf(word, sizeof(word), "+%s", controllers[i].name);
        /* One at a time: a write of several fails as a whole. Failure is
         * not fatal: the limit is then not enforced, and has() says so. */
        if (has_word(offered, controllers[i].name))
            write_text(ctl, word);
    }
    free(offered);
    if (read_text(ctl, &enabled) < 0)
        return;
    for (size_t i = 0; i < NCONTROLLERS; i++)
        if (has_word(enabled, controllers[i].name))
            r->has |= controllers[i].flag;
    free(enabled);
}

/* Resolves `path` (NULL/"auto" or an absolute directory) into dir, creating
 * the automatic root when missing. */
static int root_dir(const char *path, char *dir, size_t len, char *err, size_t errlen)
{
    if (!path || strcmp(path, "auto") == 0) {
        char mnt[CGROUP_PATH_MAX];
        int rc = cgroup_mount_find(mnt, sizeof(mnt), err, errlen);
        if (rc)
            return rc;
        if (!join(dir, len, mnt, "gpuorch"))
            return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", mnt);
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
    if (sf.f_type != CGROUP2_SUPER_MAGIC)
        return errbuf_set(err, errlen, GPO_ENOTSUP, "%s: not on a cgroup v2 filesystem", dir);
    rc = probe(dir, err, errlen);
    if (rc)
        return rc;
    struct cgroup_root *r = calloc(1, sizeof(*r));
    if (!r || !(r->path = strdup(dir))) {
        free(r);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    enable_controllers(r);
    *ret = r;
    return 0;
}

void cgroup_root_close(struct cgroup_root *root)
{
    if (!root)
        return;
    free(root->path);
    free(root);
}

const char *cgroup_root_path(const struct cgroup_root *root)
{
    return root->path;
}

bool cgroup_root_has(const struct cgroup_root *root, const char *controller)
{
    for (size_t i = 0; root && controller && i < NCONTROLLERS; i++)
        if (strcmp(controllers[i].name, controller) == 0)
            return (root->has & controllers[i].flag) != 0;
    return false;
}

/* Writes the attempt's limits where the root can enforce them. */
static int write_limits(const struct cgroup_root *root, const char *dir, uint32_t cpu_milli,
                        int64_t mem_mib, char *err, size_t errlen)
{
    char path[CGROUP_PATH_MAX], value[64];
    if (root->has & HAS_MEMORY) {
        if (mem_mib > 0)
            snprintf(value, sizeof(value), "%" PRId64, mem_mib * 1024 * 1024);
        else
            snprintf(value, sizeof(value), "max");
        if (!join(path, sizeof(path), dir, "memory.max") || write_text(path, value) < 0)
            return errbuf_set(err, errlen, GPO_EIO, "write %s to %s/memory.max: %s", value, dir,
                              strerror(errno));
    }
    if (root->has & HAS_CPU) {
        /* The kernel refuses a quota under 1 ms per period. */
        uint64_t quota = (uint64_t)cpu_milli * 100;
        if (cpu_milli > 0)
            snprintf(value, sizeof(value), "%" PRIu64 " 100000", quota < 1000 ? 1000 : quota);
        else
            snprintf(value, sizeof(value), "max 100000");
        if (!join(path, sizeof(path), dir, "cpu.max") || write_text(path, value) < 0)
            return errbuf_set(err, errlen, GPO_EIO, "write %s to %s/cpu.max: %s", value, dir,
                              strerror(errno));
    }
    return 0;
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
    char dir[CGROUP_PATH_MAX];
    int n = snprintf(dir, sizeof(dir), "%s/job-%" PRIu64 ".%" PRIu32, root->path, job, attempt);
    if ((size_t)n >= sizeof(dir) || (size_t)n >= len)
        return errbuf_set(err, errlen, GPO_EINVAL, "%s/job-%" PRIu64 ".%" PRIu32 ": too long",
                          root->path, job, attempt);
    bool made = mkdir(dir, 0755) == 0;
    if (!made && errno != EEXIST)
        return fail(err, errlen, "mkdir", dir);
    int rc = write_limits(root, dir, cpu_milli, mem_mib, err, errlen);
    if (rc) {
        if (made)
            rmdir(dir);
        return rc;
    }
    memcpy(path_out, dir, (size_t)n + 1);
    return 0;
}

int cgroup_attach(const char *path, pid_t pid, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX], value[32];
    if (!path || pid < 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_attach: bad argument");
    if (!join(file, sizeof(file), path, "cgroup.procs"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", path);
    snprintf(value, sizeof(value), "%ld", (long)pid);
    if (write_text(file, value) < 0)
        return fail(err, errlen, "write to", file);
    return 0;
}

int cgroup_pids(const char *path, pid_t **ret_pids, size_t *ret_n, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX], *text;
    if (!path || !ret_pids || !ret_n)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_pids: NULL argument");
    if (!join(file, sizeof(file), path, "cgroup.procs"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", path);
    if (read_text(file, &text) < 0)
        return fail(err, errlen, "read", file);
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

/* Without cgroup.kill: freeze (so that nothing forks meanwhile), SIGKILL
 * each listed process until none is listed, thaw. A frozen process still
 * dies of SIGKILL. */
static int kill_each(const char *path, char *err, size_t errlen)
{
    char freeze[CGROUP_PATH_MAX];
    bool frozen =
        join(freeze, sizeof(freeze), path, "cgroup.freeze") && write_text(freeze, "1") == 0;
    int rc = 0;
    for (int round = 0; round < KILL_ROUNDS; round++) {
        pid_t *pids;
        size_t n;
        rc = cgroup_pids(path, &pids, &n, err, errlen);
        if (rc || n == 0)
            break;
        for (size_t i = 0; i < n; i++)
            kill(pids[i], SIGKILL);
        free(pids);
        nap_ms(1);
    }
    if (frozen)
        write_text(freeze, "0");
    return rc;
}

int cgroup_kill(const char *path, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX];
    struct stat st;
    if (!path)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_kill: NULL argument");
    if (!join(file, sizeof(file), path, "cgroup.kill"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", path);
    if (write_text(file, "1") == 0)
        return 0;
    if (errno != ENOENT)
        return fail(err, errlen, "write to", file);
    if (stat(path, &st) < 0)
        return fail(err, errlen, "stat", path);
    return kill_each(path, err, errlen);
}

int cgroup_populated(const char *path, bool *ret_populated, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX], *text;
    if (!path || !ret_populated)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_populated: NULL argument");
    if (!join(file, sizeof(file), path, "cgroup.events"))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", path);
    if (read_text(file, &text) < 0)
        return fail(err, errlen, "read", file);
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

int cgroup_remove(const char *path, char *err, size_t errlen)
{
    if (!path)
        return errbuf_set(err, errlen, GPO_EINVAL, "cgroup_remove: NULL argument");
    if (rmdir(path) == 0 || errno == ENOENT)
        return 0;
    if (errno == EBUSY)
        return errbuf_set(err, errlen, GPO_EBUSY, "rmdir %s: processes remain", path);
    return fail(err, errlen, "rmdir", path);
}
