/*
 * cgroup_fs.c - the cgroup filesystems under cgroup.c (see cgroup_int.h):
 * reading and writing their files, the mount table, an attempt's sibling
 * directories in the v1 hierarchies, v1 limits, and the kill by rounds
 * where there is no cgroup.kill.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/cgroup_int.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* cgroup.procs of a cgroup with very many processes; more is not an attempt. */
#define READ_MAX_BYTES (4 << 20)
/* The kill without cgroup.kill: rounds of freeze, SIGKILL, thaw, 1 ms apart. */
#define KILL_ROUNDS 1000
/* The v1 freezer takes a moment to reach FROZEN; this many 1 ms looks. */
#define FREEZE_WAIT_MS 100

const char *const cg_ctrl_names[CG_NCTRL] = {"cpu", "memory", "freezer"};

void cg_nap_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* PARENT/NAME into out (outlen bytes); false when it does not fit. */
bool cg_join(char *out, size_t outlen, const char *parent, const char *name)
{
    return (size_t)snprintf(out, outlen, "%s/%s", parent, name) < outlen;
}

/* Writes `text` to an existing file in one write(), as the cgroup files want
 * it. Returns 0 or -errno (errno set too). */
int cg_write(const char *path, const char *text)
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
/* -errno, never 0 (an errno of 0 reads as EIO). */
static int neg_errno(void)
{
    int e = errno > 0 ? errno : EIO;
    errno = e;
    return -e;
}

int cg_read(const char *path, char **ret)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return neg_errno();
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
int cg_fail(char *err, size_t errlen, const char *call, const char *path)
{
    int e = errno;
    int code = e == ENOENT ? GPO_ENOENT : e == ENOMEM ? GPO_ENOMEM : GPO_EIO;
    return errbuf_set(err, errlen, code, "%s %s: %s", call, path, strerror(e));
}

/* True when whitespace-separated `list` holds `word`. */
bool cg_has_word(const char *list, const char *word)
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

/* True when comma-separated `opts` holds `word`. */
static bool has_option(const char *opts, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = opts; *p;) {
        size_t n = strcspn(p, ",");
        if (n == wl && memcmp(p, word, n) == 0)
            return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* The part of `path` below mount point `mnt`, or NULL when `mnt` does not
 * hold it. */
static const char *below(const char *path, const char *mnt)
{
    size_t n = strlen(mnt);
    while (n > 1 && mnt[n - 1] == '/')
        n--;
    if (strncmp(path, mnt, n) != 0 || (path[n] != '/' && path[n] != '\0'))
        return NULL;
    return path + n;
}

/* One mountinfo line's mount point and filesystem: 1 for cgroup2, 2 for a
 * v1 hierarchy (opts: its super options), 0 for anything else. */
static int parse_line(char *line, char **ret_point, char **ret_opts)
{
    /* ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER */
    char *sep = strstr(line, " - ");
    if (!sep)
        return 0;
    *sep = '\0';
    char *fs = NULL, *ftype = strtok_r(sep + 3, " ", &fs);
    char *src = ftype ? strtok_r(NULL, " ", &fs) : NULL;
    char *super = src ? strtok_r(NULL, " ", &fs) : NULL;
    int kind = !ftype                          ? 0
               : strcmp(ftype, "cgroup2") == 0 ? 1
               : strcmp(ftype, "cgroup") == 0  ? 2
                                               : 0;
    char *f[5], *save = NULL;
    int nf = 0;
    for (char *tok = strtok_r(line, " ", &save); tok && nf < 5; tok = strtok_r(NULL, " ", &save))
        f[nf++] = tok;
    if (!kind || nf < 5 || (kind == 2 && !super))
        return 0;
    unescape_octal(f[4]);
    *ret_point = f[4];
    *ret_opts = super ? super : "";
    return kind;
}

/* Copies a mount point into a CGROUP_PATH_MAX field; false when too long. */
static bool set_point(char *field, const char *point)
{
    size_t n = strlen(point);
    if (n >= CGROUP_PATH_MAX)
        return false;
    memcpy(field, point, n + 1);
    return true;
}

int cg_mounts_read(const char *path, struct cg_mounts *m, char *err, size_t errlen)
{
    static const char file[] = "/proc/self/mountinfo";
    char *text;
    memset(m, 0, sizeof(*m));
    if (cg_read(file, &text) < 0)
        return errbuf_set(err, errlen, errno == ENOMEM ? GPO_ENOMEM : GPO_EIO, "read %s: %s", file,
                          strerror(errno));
    size_t best = 0;
    char *save = NULL;
    // NOLINTNEXTLINE(clang-analyzer-core.CallAndMessage): cg_read set text (its -errno < 0)
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *point, *opts;
        int kind = parse_line(line, &point, &opts);
        if (!kind)
            continue;
        if (kind == 1 && !m->v2[0])
            set_point(m->v2, point);
        for (int c = 0; kind == 2 && c < CG_NCTRL; c++)
            if (!m->v1[c][0] && has_option(opts, cg_ctrl_names[c]))
                set_point(m->v1[c], point);
        const char *rel = path ? below(path, point) : NULL;
        if (rel && strlen(point) + 1 > best && set_point(m->at, point)) {
            best = strlen(point) + 1;
            m->at_v1 = kind == 2;
            m->rel = rel;
        }
    }
    free(text);
    return 0;
}

int cg_siblings(const char *path, char sib[CG_NCTRL][CGROUP_PATH_MAX], char *err, size_t errlen)
{
    struct cg_mounts *m = malloc(sizeof(*m));
    if (!m)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = cg_mounts_read(path, m, err, errlen);
    for (int c = 0; c < CG_NCTRL; c++) {
        sib[c][0] = '\0';
        struct stat st;
        if (rc || !m->rel || !m->v1[c][0] || strcmp(m->v1[c], m->at) == 0)
            continue;
        int n = snprintf(sib[c], CGROUP_PATH_MAX, "%s%s", m->v1[c], m->rel);
        if (n < 0 || n >= CGROUP_PATH_MAX || stat(sib[c], &st) < 0 || !S_ISDIR(st.st_mode))
            sib[c][0] = '\0';
    }
    free(m);
    return rc;
}

int cg_mkdir_parents(const char *dir)
{
    char buf[CGROUP_PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, dir, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

uint64_t cg_v1_shares(uint32_t cpu_milli)
{
    /* The kernel's range is 2..262144. */
    uint64_t shares = cpu_milli ? (uint64_t)cpu_milli * 1024 / 1000 : 1024;
    return shares < 2 ? 2 : shares > 262144 ? 262144 : shares;
}

/* Writes value to DIR/NAME; a message naming both on failure. */
static int put(const char *dir, const char *name, const char *value, char *err, size_t errlen)
{
    char path[CGROUP_PATH_MAX];
    if (!cg_join(path, sizeof(path), dir, name))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s/%s: path too long", dir, name);
    if (cg_write(path, value) < 0)
        return errbuf_set(err, errlen, GPO_EIO, "write %s to %s: %s", value, path, strerror(errno));
    return 0;
}

static bool has_file(const char *dir, const char *name)
{
    char path[CGROUP_PATH_MAX];
    return cg_join(path, sizeof(path), dir, name) && access(path, F_OK) == 0;
}

int cg_v1_limits(const char *cpu_dir, const char *mem_dir, uint32_t cpu_milli, int64_t mem_mib,
                 char *err, size_t errlen)
{
    char value[64];
    int rc = 0;
    if (mem_dir) {
        /* memsw >= limit at every step: lift memsw, set the limit, then
         * memsw to the same (no swap beyond the limit). */
        bool memsw = has_file(mem_dir, "memory.memsw.limit_in_bytes");
        snprintf(value, sizeof(value), "%" PRId64, mem_mib > 0 ? mem_mib * 1024 * 1024 : -1);
        if (memsw)
            rc = put(mem_dir, "memory.memsw.limit_in_bytes", "-1", err, errlen);
        rc = rc ? rc : put(mem_dir, "memory.limit_in_bytes", value, err, errlen);
        if (memsw && !rc)
            rc = put(mem_dir, "memory.memsw.limit_in_bytes", value, err, errlen);
    }
    if (cpu_dir && !rc) {
        snprintf(value, sizeof(value), "%" PRIu64, cg_v1_shares(cpu_milli));
        rc = put(cpu_dir, "cpu.shares", value, err, errlen);
        /* The same cap as cpu.max on v2: cpu_milli * 100 us per 100 ms. */
        uint64_t quota = (uint64_t)cpu_milli * 100;
        if (cpu_milli > 0)
            snprintf(value, sizeof(value), "%" PRIu64, quota < 1000 ? 1000 : quota);
        else
            snprintf(value, sizeof(value), "-1");
        rc = rc ? rc : put(cpu_dir, "cpu.cfs_period_us", "100000", err, errlen);
        rc = rc ? rc : put(cpu_dir, "cpu.cfs_quota_us", value, err, errlen);
    }
    return rc;
}

/* How `path` freezes: its cgroup.freeze (v2), else freezer.state in it or
 * in its freezer sibling (v1). Fills file; false when neither exists. */
static bool freeze_file(const char *path, char *file, size_t len, bool *ret_v1)
{
    char sib[CG_NCTRL][CGROUP_PATH_MAX];
    *ret_v1 = false;
    if (cg_join(file, len, path, "cgroup.freeze") && access(file, F_OK) == 0)
        return true;
    *ret_v1 = true;
    if (cg_join(file, len, path, "freezer.state") && access(file, F_OK) == 0)
        return true;
    return cg_siblings(path, sib, NULL, 0) == 0 && sib[CG_FREEZER][0] &&
           cg_join(file, len, sib[CG_FREEZER], "freezer.state") && access(file, F_OK) == 0;
}

/* Freezes (and waits, bounded, for the v1 freezer to say FROZEN). */
static void freeze(const char *file, bool v1)
{
    if (cg_write(file, v1 ? "FROZEN" : "1") < 0 || !v1)
        return;
    for (int i = 0; i < FREEZE_WAIT_MS; i++) {
        char *state = NULL;
        bool frozen = cg_read(file, &state) == 0 && state && strncmp(state, "FROZEN", 6) == 0;
        free(state);
        if (frozen)
            return;
        cg_nap_ms(1);
    }
}

int cg_kill_each(const char *path, char *err, size_t errlen)
{
    char file[CGROUP_PATH_MAX];
    bool v1 = false;
    bool can_freeze = freeze_file(path, file, sizeof(file), &v1);
    int rc = 0;
    /* Frozen, nothing forks between the list and the kill; a task the v1
     * freezer holds dies of its SIGKILL once thawed, before it runs on. */
    for (int round = 0; round < KILL_ROUNDS; round++) {
        pid_t *pids;
        size_t n;
        if (can_freeze)
            freeze(file, v1);
        rc = cgroup_pids(path, &pids, &n, err, errlen);
        for (size_t i = 0; rc == 0 && i < n; i++)
            kill(pids[i], SIGKILL);
        if (rc == 0)
            free(pids);
        if (can_freeze)
            cg_write(file, v1 ? "THAWED" : "0");
        if (rc || n == 0)
            break;
        cg_nap_ms(1);
    }
    return rc;
}
