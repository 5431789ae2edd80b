/*
 * shim.h - `gpuorch-shim`: the small process that runs one attempt's command,
 * outlives the agent, and leaves the outcome in the attempt's directory. It
 * is an executable of its own, installed beside `gpuorch`, that links libc
 * only (shim.c and the libc-only files it is built from: shim_fence.c,
 * cgroup.c, cgroup_fs.c, util/fsutil.c, util/errbuf.c, util/monotime.c,
 * base/err.c); the agent reads its outcome with shim_read_status
 * (shim_status.c, in the agent).
 *
 *   gpuorch-shim --dir ATTEMPT_DIR [--user NAME [--allow-root]] [--cgroup DIR]
 *                 [--workdir DIR] [--stdout PATH] [--stderr PATH] [--append]
 *                 [--ready-fd FD] [--env-fd FD] [--fence FILE] -- ARGV...
 *
 * The shim calls setsid() (its own session and process group, so the agent's
 * death, or a hangup of the agent's terminal, does not reach it), forks the
 * command into a process group of its own, and writes the command's pid to
 * ATTEMPT_DIR/pid. It forwards SIGTERM, SIGINT and SIGHUP to the command's
 * process group, so the agent stops an attempt by signalling the shim's pid.
 * When the command ends it writes ATTEMPT_DIR/status, one JSON object:
 *   {"exit_code": N, "started_ms": T0, "ended_ms": T1, "pid": P}
 *   {"signal": N, "started_ms": T0, "ended_ms": T1, "pid": P}
 *   {"exit_code": 127, "error": "execvp ARG0: No such file or directory", ...}
 * plus "oom_kills": N when, with --cgroup, the kernel's OOM killer ended N of
 * the cgroup's processes at its memory limit (cgroup_oom_kills, read once
 * the command is reaped), and "fenced_ms": U when --fence's watchdog stopped
 * the command, U ms after the agent last reached a controller
 * (times are CLOCK_REALTIME milliseconds; "error" only when the command did
 * not start: the user is unknown or refused, the cgroup could not be joined,
 * an output file could not be opened, privileges could not be dropped, the
 * working directory could not be entered, or exec failed; "pid" is then the
 * forked child's, or 0 when none was forked, as for an unknown user). The
 * status is written as fsutil_write_atomic does (NAME.tmp.XXXXXX, fsync,
 * rename, fsync of the directory): it is the outcome's record, which a
 * restarted agent reports; the pid file is written to pid.tmp and renamed,
 * without fsync (it only matters while the command runs, which no crash of
 * the machine outlives). Both mode 0640: a reader sees no file or a whole
 * one.
 *
 * The command runs with the shim's environment (or --env-fd's), stdin from
 * /dev/null, stdout and stderr appended to ATTEMPT_DIR/stdout and
 * ATTEMPT_DIR/stderr (mode 0640) unless --stdout/--stderr name other files,
 * the default disposition of every signal, an empty signal mask, and no file
 * descriptor above 2 that it did not open itself. The child that becomes the
 * command does, in this order:
 *   - --cgroup DIR: writes "0" to DIR/cgroup.procs, so the command and all
 *     its descendants (even those that call setsid) are in the cgroup; the
 *     shim itself stays outside, so it survives cgroup.kill and writes the
 *     status. The shim also moves the child there itself before it writes the
 *     pid file: once that file exists, the command is in its cgroup.
 *   - opens the default log files, still with the shim's privileges; with
 *     --user they are then fchown'd to the user and to ATTEMPT_DIR's group,
 *     mode 0640 (so the agent reads them through that group);
 *   - --user NAME (looked up in passwd by the shim before it forks; uid 0 is
 *     refused unless --allow-root): initgroups, setgid, setuid, then checks
 *     with getuid/geteuid/getgid/getegid that the switch stuck and that root
 *     cannot be regained. A non-root shim asked for its own user skips this;
 *   - --env-fd FD: replaces its environment with the NUL-terminated
 *     NAME=VALUE strings the shim read from FD (to its end, at most 1 MiB)
 *     when it started. A shim that runs as root is exec'd with an
 *     environment of its own choosing and gets the job's this way, so that
 *     nothing in it (LD_PRELOAD, GCONV_PATH, ...) reaches a root process;
 *   - opens --stdout/--stderr files as the user (so that a user cannot make
 *     root write where they may not), O_APPEND, truncated first unless
 *     --append (sbatch's --open-mode); one path given for both is opened
 *     once and both streams share it, in the order written;
 *   - with --user, sets HOME, USER, LOGNAME and SHELL from passwd where the
 *     environment lacks them;
 *   - --workdir DIR: chdir as the user; without it, with --user, the user's
 *     home or else / (as login does); with neither, the shim's own directory.
 * --ready-fd FD: the shim closes FD (and the command never inherits it) once
 * the pid file is written, or when it exits without one: a launcher waits
 * for end-of-file on it to know the command can be signalled through its
 * cgroup or process group.
 *
 * --fence FILE: the agent's fence file (fence.h: its lease, its grace, the
 * boot and the CLOCK_MONOTONIC time a controller last answered it), looked
 * at once a round (SHIM_WATCH_ROUND_MS) and at the lease's end. It is the
 * fence of an agent that is dead or stopped, which cannot fence itself:
 * once the lease has run out the shim sends SIGTERM to the command's process
 * group, and SIGKILL after the grace (with --cgroup, to every process of the
 * cgroup), as the agent's own fence does, never later than it (the file is
 * never ahead of the agent's time), and records "fenced_ms". A renewal after
 * the SIGTERM changes nothing (the agent's fence does not stop midway
 * either). No file, a lease of 0, another boot's file or one that is not the
 * agent's format: no watchdog until the next look finds one.
 */
#ifndef GPUORCH_AGENT_SHIM_H
#define GPUORCH_AGENT_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/err.h"
#include "util/monotime.h"

/* shim_main's exit status when the shim itself failed (bad usage, or the
 * status file could not be written), as env(1) and timeout(1) use it. */
#define SHIM_EXIT_FAILURE 125

/* Longest "error" text kept, NUL included. */
#define SHIM_ERROR_MAX 256

/* An attempt's outcome, as ATTEMPT_DIR/status records it. */
struct shim_status {
    bool signaled;              /* killed by `signal`; else exited with `exit_code` */
    int exit_code;              /* 0..255 */
    int signal;                 /* 1..64 */
    int64_t started_ms;         /* CLOCK_REALTIME, when the command was forked */
    int64_t ended_ms;           /* CLOCK_REALTIME, when it was reaped */
    pid_t pid;                  /* the command's; 0 if it was never forked */
    uint64_t oom_kills;         /* processes the OOM killer ended in its cgroup; 0: none */
    int64_t fenced_ms;          /* --fence's watchdog stopped it this long after the agent last
                                   reached a controller; 0: it did not */
    char error[SHIM_ERROR_MAX]; /* why the command did not start; "" when it did */
};

/* ---- the watchdog (shim_fence.c) ---- */

#define SHIM_WATCH_ROUND_MS 1000

/* The agent's fence file, as fence.c writes it. */
struct shim_fence {
    int64_t lease_ms, grace_ms, answered_ms; /* answered_ms: CLOCK_MONOTONIC */
    char boot_id[MONOTIME_BOOT_ID_MAX + 1];
};
/* The file's text: 0 and *ret, or GPO_ECORRUPT (not that object). */
int shim_fence_parse(const char *text, size_t len, struct shim_fence *ret);
/* The file at path: 0, GPO_ENOENT, GPO_EIO or GPO_ECORRUPT. */
int shim_fence_read(const char *path, struct shim_fence *ret);

/* What the watchdog has decided: nothing yet, SIGTERM now, SIGKILL now. */
enum shim_watch_action { SHIM_WATCH_NONE, SHIM_WATCH_TERM, SHIM_WATCH_KILL };
struct shim_watch {
    char boot_id[MONOTIME_BOOT_ID_MAX + 1]; /* this boot's (monotime_boot_id) */
    enum shim_watch_action action;
    int64_t unreached_ms; /* at the SIGTERM */
    int64_t kill_at_ms;   /* the SIGKILL's time, CLOCK_MONOTONIC */
};
/* One look at now_ms (CLOCK_MONOTONIC) with the file's content f (have:
 * the file was read): moves w->action on, once the lease has run out, to
 * TERM (the grace counted from now), then at the grace's end to KILL.
 * Returns the ms to the next look, or -1 once KILL (nothing more to time). */
int64_t shim_fence_step(struct shim_watch *w, const struct shim_fence *f, bool have,
                        int64_t now_ms);

/*
 * The `gpuorch-shim` program (argv[0] is its name, ignored). Runs
 * the attempt to its end and returns the exit status for the shim's process:
 * the command's exit code, or 128 + its signal, once the status file is
 * written; SHIM_EXIT_FAILURE (with a message on stderr) on bad usage or when
 * no status file could be written. Call it in a fresh process: it installs
 * signal handlers and changes the signal mask, session and process group.
 */
int shim_main(int argc, char **argv);

/*
 * Reads the outcome in attempt directory `dir` (borrowed). Returns 0 and
 * *ret, GPO_ENOENT while the command runs (no status file yet), GPO_EIO,
 * GPO_ECORRUPT (the message names the file and the problem), GPO_ENOMEM or
 * GPO_EINVAL. `err` (errlen bytes; may be NULL/0) receives a message.
 */
int shim_read_status(const char *dir, struct shim_status *ret, char *err, size_t errlen);

#endif
