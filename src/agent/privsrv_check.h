/*
 * privsrv_check.h - the privileged process's checks of a request (priv.h's
 * wire format), as pure functions: no I/O, no system call, no state; each
 * refusal is one line in the caller's buffer (msg, len bytes) that starts
 * with the field it names ("workdir: ...", "request: ..."). privsrv.c calls
 * them before it does anything; tests/fuzz/fuzz_privsrv_check.c drives them
 * with any bytes.
 *
 * What needs the system stays in privsrv.c: looking the user up in the
 * password database (the result then goes through privsrv_check_runas),
 * reading attempt.json and the pid file (their contents then go through
 * privsrv_check_cgroup and privsrv_check_pgid), reading a process's
 * environment (privsrv_check_environ), and the fstat of a log file or a
 * script (privsrv_check_log_file, privsrv_check_script_file).
 *
 * Errors: 0 or GPO_EINVAL (GPO_ENOMEM for privsrv_check_launch's array).
 */
#ifndef GPUORCH_AGENT_PRIVSRV_CHECK_H
#define GPUORCH_AGENT_PRIVSRV_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "agent/priv.h"

/*
 * A request's type, from its first bytes (n of them, borrowed): the type
 * must be in the table and n exactly its struct's size. 0 and *ret_type.
 */
int privsrv_check_request(const void *buf, size_t n, uint32_t *ret_type, char *msg, size_t len);

/*
 * Every field of a launch that needs no system call: job and attempt, the
 * limits, the has_* flags, every fixed array NUL-terminated, the user
 * name's shape, the paths (absolute, no ".." component), and the packed
 * strings (argc + nenv of them, argv[0] not empty, each env entry NAME=...
 * with a valid name). 0 and *ret_cmd: argv[0..argc), NULL, env[0..nenv),
 * NULL, pointing into q->strings (caller frees the array with free()).
 */
int privsrv_check_launch(const struct priv_req_launch *q, char ***ret_cmd, char *msg, size_t len);

/*
 * A step task's request (PRIV_REQ_STEP or PRIV_REQ_STEP_PTY, in a struct
 * priv_req_launch): job
 * and attempt, workdir as a launch's, the packed strings as a launch's, and
 * every field a step does not use zero (no user: it runs as the attempt's;
 * no output paths, script or limits). 0 and *ret_cmd as
 * privsrv_check_launch's.
 */
int privsrv_check_step(const struct priv_req_launch *q, char ***ret_cmd, char *msg, size_t len);

/* What privsrv_check_runas compares a launch's user with. */
struct privsrv_self {
    uid_t uid;       /* the privileged process's effective uid */
    bool allow_root; /* jobs may run as uid 0 */
};

/*
 * Who a launch runs as, once looked up: `named` the request's user, NULL
 * for the privileged process's own; uid what it resolved to. Refuses uid 0
 * without allow_root, and any other user than its own when the privileged
 * process is not root.
 */
int privsrv_check_runas(const struct privsrv_self *self, const char *named, uid_t uid, char *msg,
                        size_t len);

/* The highest signal number a job's own signal may be (SIGRTMAX here). */
#define PRIVSRV_SIG_MAX 64

/* A signal (sig SIGTERM or SIGKILL, flags 0; or with PRIV_SIGNAL_JOB, and
 * perhaps PRIV_SIGNAL_LEADER, any of 1..PRIVSRV_SIG_MAX but SIGKILL and
 * SIGSTOP) or cleanup (sig 0, flags 0) request, by its type: the signal,
 * flags, job and attempt. */
int privsrv_check_attempt(const struct priv_req_attempt *q, char *msg, size_t len);

/* Whether attempt.json's cgroup path is attempt (job, attempt)'s: absolute,
 * ending in /job-J.A, no "/../". A second guard: the file sits in a
 * directory only the privileged process writes. */
bool privsrv_check_cgroup(const char *cg, uint64_t job, uint32_t attempt);

/* The process group in a pid file's text (text, n bytes; a pid and an
 * optional newline), or 0 when it holds none (pid 1 and below included). */
pid_t privsrv_check_pgid(const char *text, size_t n);

/* An attribute request: n in 1..PRIV_PIDS_MAX, pids[0..n) each in
 * 2..PRIV_PID_MAX, every pid past n 0. */
int privsrv_check_attribute(const struct priv_req_attribute *q, char *msg, size_t len);

/* The attempt a process's environment names (text, n bytes: NUL-separated
 * NAME=VALUE entries as /proc/PID/environ holds them, the last one maybe
 * cut): true with *job (1..INT64_MAX) and *attempt (1..UINT32_MAX) when
 * both GPUORCH_JOB_ID and GPUORCH_ATTEMPT are whole decimal numbers in
 * range; the last of each counts, as getenv's first would not: the agent
 * sets them after the job's own environment. */
bool privsrv_check_environ(const char *text, size_t n, uint64_t *job, uint32_t *attempt);

/*
 * An attempt.json (o, borrowed: the object privsrv.c wrote) read for the
 * log of `stream` ("stdout" or "stderr"): *ret_uid the attempt's uid and
 * path (pathlen bytes) the log's, the file's absolute "stdout" or
 * "stderr", else DIR/STREAM (dir the attempt's directory). 0, or
 * GPO_EINVAL naming what is wrong ("uid: ...", "stdout: ...").
 */
int privsrv_check_attempt_log(const json_t *o, const char *dir, const char *stream, uid_t *ret_uid,
                              char *path, size_t pathlen, char *msg, size_t len);

/* A MIG change: op create or destroy, gpu below GPU_MAX_DEVICES, and the
 * op's fields in their ranges, the other op's 0 (priv.h). */
int privsrv_check_mig(const struct priv_req_mig *q, char *msg, size_t len);

/* A log open request: job and attempt, stream stdout or stderr, pad 0. */
int privsrv_check_log(const struct priv_req_log *q, char *msg, size_t len);

/* What an O_PATH open of a log file found (fstat's st_mode and st_uid):
 * 0 for a regular file owned by uid (the attempt's), else GPO_EPERM. */
int privsrv_check_log_file(mode_t mode, uid_t owner, uid_t uid);

/* A script job's file as the launch finds it: argv0 the path the launch
 * names, want STATE_DIR/scripts/JOB.ATTEMPT; mode, owner, nlink from its
 * fstat; agent_uid the network half's account, which writes scripts. 0 or
 * GPO_EINVAL with the reason ("script: ..."). */
int privsrv_check_script(const char *argv0, const char *want, mode_t mode, uid_t owner,
                         uint64_t nlink, uid_t agent_uid, char *msg, size_t len);

/* A CUDA MPS request: op start or quit, uuid 1..PRIV_UUID_MAX-1 bytes of
 * letters, digits and '-' (not first: it becomes a directory name), zero
 * after its NUL. */
int privsrv_check_mps(const struct priv_req_mps *q, char *msg, size_t len);

#endif
