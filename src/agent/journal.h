/*
 * journal.h - the node agent's attempt journal: each attempt is launched at
 * most once, across agent crashes and restarts.
 *
 * The agent calls journal_begin (which returns only once the record is on
 * disk) before it forks the shim of an attempt, journal_started once it knows
 * the shim's pid, and journal_ended once the controller has the attempt's
 * outcome. A restarted agent calls journal_list for the attempts begun and
 * not ended, and tells a running shim from a dead one (or from an unrelated
 * process that reuses its pid) with journal_attempt_alive.
 *
 * On disk: DIR/journal, one JSON object per line, appended with a single
 * write() and fdatasync()'d before the call returns. One append-only file
 * rather than one file per attempt, because a record then costs one write and
 * one fdatasync (no temp file, rename and directory fsync), and reading the
 * whole history back at start is one sequential read. A crash (kill -9, power
 * loss) during an append leaves at most the last line torn, without its
 * newline: journal_open drops it (that call had not returned, so its attempt
 * was never launched) and cuts the file back to the last whole line, so the
 * next append starts on a line of its own. Any other malformed line is an
 * error that names the file and line. journal_compact rewrites the file
 * without the details of ended attempts.
 *
 * DIR/journal.lock is held with flock() while the journal is open, so two
 * agents on one state directory cannot both launch an attempt.
 *
 * Errors: functions return 0 or one of the negative JOURNAL_* codes below, and
 * write a one-line message into the caller's `err` buffer (errlen bytes; may
 * be NULL/0) where they take one. Out-parameters are set only on success. Out
 * of memory: GPO_ENOMEM, the journal unchanged. Nothing here logs or
 * exits. A journal may be used from several threads: calls are serialized by
 * a mutex inside it.
 */
#ifndef GPUORCH_AGENT_JOURNAL_H
#define GPUORCH_AGENT_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/err.h"

/* Longest attempt directory path, NUL included; longer ones are refused
 * (GPO_E2BIG), which also bounds a journal line. */
#define JOURNAL_PATH_MAX 1024

struct journal;

/* One attempt as the journal knows it. pid 0 and start_time 0: begun, but no
 * journal_started recorded, so the agent may or may not have forked its shim
 * (it crashed in between); the attempt directory's files tell which. Never
 * launch such an attempt again. */
struct journal_attempt {
    uint64_t job;
    uint32_t attempt;
    char dir[JOURNAL_PATH_MAX]; /* the attempt directory */
    pid_t pid;                  /* the shim's */
    uint64_t start_time;        /* the shim's, /proc/PID/stat field 22, clock ticks */
    bool signalled;             /* journal_signalled recorded (journal_list only) */
    uint32_t port;              /* a serving replica's port (replica.h), 1..65535; 0: none */
    bool fenced;                /* journal_fenced recorded (journal_list only) */
    int64_t unreached_ms;       /* fenced: how long no controller had been reached */
};

/*
 * Opens (creating, mode 0700 / 0600, when missing) the journal in `dir` and
 * reads it back. Returns 0 and *ret (caller frees with journal_close), or
 * GPO_EIO (a system call failed; the message names it and the path),
 * GPO_ECORRUPT ("PATH:LINE: what"), GPO_EBUSY (another process holds
 * the journal), GPO_E2BIG, GPO_ENOMEM, GPO_EINVAL. `dir` is
 * borrowed.
 */
int journal_open(const char *dir, struct journal **ret, char *err, size_t errlen);

/* Closes the journal and releases its lock. NULL is fine. */
void journal_close(struct journal *j);

/*
 * Durably records that attempt (a->job, a->attempt) with directory a->dir
 * (and a->port, a replica's, when not 0) is about to be launched (a->pid
 * and a->start_time are ignored). Returns 0 once
 * the record is on disk: the caller may fork. GPO_EEXIST if that (job,
 * attempt) was ever begun, ended or not, by this or an earlier agent: the
 * caller must not launch it again. Else GPO_E2BIG (dir too long),
 * GPO_EINVAL (empty dir, or a job id above INT64_MAX, which JSON lines
 * cannot hold), GPO_EIO (nothing recorded: launch nothing),
 * GPO_ENOMEM. `a` is borrowed.
 */
int journal_begin(struct journal *j, const struct journal_attempt *a, char *err, size_t errlen);

/*
 * Records the shim's pid and start time (journal_proc_start_time) of a begun
 * attempt. Returns 0, GPO_ENOENT (never begun, or already ended),
 * GPO_EEXIST (already recorded with other values; the same values again
 * are a no-op), GPO_EINVAL (pid <= 0), GPO_EIO.
 */
int journal_started(struct journal *j, uint64_t job, uint32_t attempt, pid_t pid,
                    uint64_t start_time, char *err, size_t errlen);

/*
 * Records that the job's --signal (sbatch's warning signal before the time
 * limit) was sent to the attempt, so that a restarted agent does not send it
 * again. Returns 0 (also when recorded already), GPO_ENOENT (never begun,
 * or ended), GPO_EIO.
 */
int journal_signalled(struct journal *j, uint64_t job, uint32_t attempt, char *err, size_t errlen);

/*
 * Records that the agent fenced the attempt (docs/agent.md, "Fencing"): it
 * had reached no controller for unreached_ms (> 0), and stopped it; a
 * restarted agent reports it fenced. Returns 0 (also when recorded
 * already), GPO_ENOENT (never begun, or ended), GPO_EINVAL, GPO_EIO.
 */
int journal_fenced(struct journal *j, uint64_t job, uint32_t attempt, int64_t unreached_ms,
                   char *err, size_t errlen);

/*
 * Records that the attempt's outcome reached the controller: it leaves
 * journal_list, and compaction drops its details (journal_begin still refuses
 * it). Returns 0 (also when it had ended already), GPO_ENOENT (never
 * begun), GPO_EIO.
 */
int journal_ended(struct journal *j, uint64_t job, uint32_t attempt, char *err, size_t errlen);

/*
 * Every attempt begun and not ended, in the order begun. Returns 0 with
 * *ret_list (caller frees with free(); NULL when *ret_n is 0) and *ret_n, or
 * GPO_ENOMEM.
 */
int journal_list(struct journal *j, struct journal_attempt **ret_list, size_t *ret_n);

/*
 * Rewrites the journal as one line per attempt: begun ones with their
 * details, ended ones as a bare key (so that journal_begin still refuses
 * them). Written to a temp file, fsync'd, renamed over the journal and the
 * directory fsync'd (fsutil_atomic_commit_keep), so a crash leaves the old
 * file or the new one. Returns 0, GPO_EIO (the old file is kept; or, when
 * only the directory's fsync failed, the new one has the name and appends
 * are refused until a compaction succeeds) or GPO_ENOMEM.
 */
int journal_compact(struct journal *j, char *err, size_t errlen);

/*
 * Reads the start time of process `pid` (field 22 of /proc/PID/stat, clock
 * ticks since boot). Returns 0 and *ret, GPO_ENOENT (no such process),
 * GPO_EINVAL (pid <= 0) or GPO_EIO (unreadable or unparsable).
 */
int journal_proc_start_time(pid_t pid, uint64_t *ret);

/* True only if a process with a->pid exists, has not exited (a zombie has),
 * and started at a->start_time: a reused pid is not the attempt's shim. */
bool journal_attempt_alive(const struct journal_attempt *a);

#endif
