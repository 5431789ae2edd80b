/*
 * cgroup_int.h - what cgroup.c and cgroup_fs.c share; not for other modules.
 *
 * An attempt's cgroup is named by one directory, its "primary" one: on the
 * cgroup2 mount where there is one, else on a v1 hierarchy. Where the cpu or
 * memory controller is bound to a v1 hierarchy instead of the cgroup2 one (a
 * hybrid or legacy machine), the cgroup also has a directory in that
 * hierarchy at the same path relative to its mount point, its "sibling":
 * processes are moved into every sibling too, limits are written there, and
 * removing the cgroup removes its siblings. The siblings are found again
 * from /proc/self/mountinfo for each call, so that a path alone (as the
 * shim and attempt.json carry it) names the whole cgroup.
 */
#ifndef GPUORCH_AGENT_CGROUP_INT_H
#define GPUORCH_AGENT_CGROUP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/cgroup.h"

/* The v1 controllers the agent uses: limits (cpu, memory) and, where the
 * primary directory is on v1 and has no cgroup.kill, freezing (freezer). */
enum cg_ctrl { CG_CPU, CG_MEMORY, CG_FREEZER, CG_NCTRL };

/* cg_ctrl's names, as mountinfo's super options and cgroup.controllers
 * spell them. */
extern const char *const cg_ctrl_names[CG_NCTRL];

/* The cgroup filesystems mounted here, from /proc/self/mountinfo. */
struct cg_mounts {
    char v2[CGROUP_PATH_MAX];           /* the first cgroup2 mount point; "" none */
    char v1[CG_NCTRL][CGROUP_PATH_MAX]; /* the hierarchy of each controller; "" none */
    char at[CGROUP_PATH_MAX];           /* the mount point holding the path asked about */
    bool at_v1;                         /* `at` is a v1 hierarchy */
    const char *rel;                    /* that path below `at` ("" at the mount point),
                                           pointing into the path asked about; NULL when
                                           no cgroup mount holds it */
};

/* Fills *m (every field) for `path` (borrowed; NULL: no path). Returns 0,
 * GPO_EIO or GPO_ENOMEM (mountinfo unreadable). */
int cg_mounts_read(const char *path, struct cg_mounts *m, char *err, size_t errlen);

/* The siblings of cgroup `path`: sib[c] is MOUNT/REL in controller c's v1
 * hierarchy where that directory exists and is not `path` itself, else "".
 * Returns 0 (also for a path on no cgroup mount: no siblings) or as
 * cg_mounts_read. */
int cg_siblings(const char *path, char sib[CG_NCTRL][CGROUP_PATH_MAX], char *err, size_t errlen);

/* Creates `dir` and its missing parents (0755). Returns 0 or -errno. */
int cg_mkdir_parents(const char *dir);

/* Writes the v1 limits of an attempt: memory.limit_in_bytes (and
 * memory.memsw.limit_in_bytes where there is one, so swap does not stretch
 * the limit) in mem_dir, cpu.shares and cpu.cfs_quota_us in cpu_dir; a NULL
 * dir is skipped. 0 or GPO_EIO. */
int cg_v1_limits(const char *cpu_dir, const char *mem_dir, uint32_t cpu_milli, int64_t mem_mib,
                 char *err, size_t errlen);

/* cpu.shares for cpu_milli (1024 per CPU, the kernel's default for one). */
uint64_t cg_v1_shares(uint32_t cpu_milli);

/* Kills every process in cgroup `path` without cgroup.kill, by rounds of
 * freeze (cgroup.freeze, or the v1 freezer's freezer.state where `path` or
 * its freezer sibling has one), SIGKILL to each listed pid, thaw. */
int cg_kill_each(const char *path, char *err, size_t errlen);

/* The files: join PARENT/NAME (false when it does not fit), write one
 * text in one write(), read a whole file (caller frees), whitespace word
 * lists. write/read return 0 or -errno (errno set too). */
bool cg_join(char *out, size_t outlen, const char *parent, const char *name);
int cg_write(const char *path, const char *text);
int cg_read(const char *path, char **ret);
bool cg_has_word(const char *list, const char *word);
void cg_nap_ms(long ms);

/* The code for a failed call on a cgroup file (from errno), with its
 * message "CALL PATH: strerror". */
int cg_fail(char *err, size_t errlen, const char *call, const char *path);

#endif
