/*
 * priv.h - the node agent's privileged half.
 *
 * As OpenBSD daemons split themselves, the agent forks, early and before it
 * starts any thread, a privileged process that keeps the agent's credentials
 * (root in production) while the agent itself may go on to drop them and talk
 * to the network. The privileged process acts only on a fixed table of
 * requests (launch an attempt, signal an attempt, clean an attempt up,
 * create or destroy a MIG instance, ...), each
 * a fixed-size struct with no pointers, received over a
 * socketpair(AF_UNIX, SOCK_SEQPACKET), sized exactly for its type and checked
 * field by field before anything is done; the reply says which field was
 * refused and why. It never signals a pid a request names, only the
 * processes of an attempt (job, attempt) it finds itself.
 *
 * On disk, for attempt A of job J:
 *   STATE_DIR/attempts/J.A/            mode 02750, owner the privileged user,
 *                                      group agent_gid (set-group-id: every
 *                                      file the shim writes inside gets that
 *                                      group, so an unprivileged agent reads
 *                                      them)
 *   STATE_DIR/attempts/J.A/attempt.json {"uid":U,"gid":G,"stdout":P,"stderr":P,
 *                                      "cgroup":PATH or ""}, written before
 *                                      the shim starts, for the log server
 *                                      and for later kills
 *   STATE_DIR/attempts/J.A/shim.log    the shim's own stderr
 *   pid, status, stdout, stderr        written by the shim (shim.h)
 * and, with cgroups, CGROUP_ROOT/job-J.A (cgroup.h).
 *
 * The privileged process reaps the shims it forks (they are never its
 * zombies for long); the agent watches them by pid and start time and by
 * their status files. It exits when its socket closes (the agent died or
 * called priv_stop); the shims it started keep running, in sessions of
 * their own, which is the point.
 *
 * Calls may come from any thread: they are serialized by a mutex, one
 * request at a time. Errors: 0 or a negative PRIV_* code, with a one-line
 * message in the caller's `err` (errlen bytes; may be NULL/0); out-parameters
 * are set only on success. GPO_EPIPE: the privileged process is gone, and
 * every later call fails the same way; the agent should exit.
 */
#ifndef GPUORCH_AGENT_PRIV_H
#define GPUORCH_AGENT_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "base/err.h"

/* Bounds on a launch request (each over-long field is refused by name). */
#define PRIV_USER_MAX    33      /* a Unix user name, NUL included */
#define PRIV_PATH_MAX    1024    /* workdir, stdout, stderr, NUL included */
#define PRIV_STRINGS_MAX 65536   /* argv and env, each string with its NUL */
#define PRIV_STRINGS_N   4096    /* argc + nenv */
#define PRIV_MSG_MAX     512     /* a reply's message, NUL included */
#define PRIV_PIDS_MAX    64      /* pids in one attribute request */
#define PRIV_PID_MAX     4194304 /* the kernel's largest pid (PID_MAX_LIMIT) */
#define PRIV_LOG_OPEN_MS 10000   /* how long priv_log_open waits for the file to open */

struct priv_config {
    const char *state_dir;   /* absolute; attempts live in STATE_DIR/attempts/JOB.ATTEMPT */
    const char *shim_exe;    /* absolute: the gpuorch-shim executable (shim.h), checked at
                              * start: root's or ours, writable by no one else */
    const char *cgroup_root; /* NULL: no cgroups (process groups); else as cgroup_root_open */
    bool cgroup_root_ours;   /* the agent made cgroup_root: the privileged process removes it
                              * when it exits, if no attempt's cgroup is left in it */
    bool allow_root;         /* jobs may run as uid 0 */
    gid_t agent_gid;         /* group of attempt dirs, so an unprivileged agent reads them */
    uid_t agent_uid;         /* the account the agent's network half runs as: it owns
                              * STATE_DIR/scripts, whose files a launch gives to the job */
    const char *nvml;        /* the NVML library MIG changes go through (gpu.h's
                              * gpu_backend_open, opened at the first one); NULL: the default */
    const char *mps_control; /* absolute: nvidia-cuda-mps-control, checked at start as the
                              * shim is; NULL: none (priv_mps refuses, naming why) */
    const char *fence_file;  /* absolute: the agent's fence file, every shim's --fence (its
                              * watchdog, for an agent dead or stopped); NULL: none */
};

struct priv;

/*
 * Checks cfg (borrowed), creates STATE_DIR/attempts when missing (0750,
 * group agent_gid), opens the cgroup root (a failure there is not an error:
 * priv_has_cgroups is then false and priv_cgroup_note says why), and forks
 * the privileged process. Call it before the process starts threads: the
 * privileged process is a fork, not an exec. Returns 0 and *ret (caller
 * frees with priv_stop), GPO_EINVAL (a bad field of cfg, named), GPO_EIO,
 * GPO_ENOMEM.
 */
int priv_start(const struct priv_config *cfg, struct priv **ret, char *err, size_t errlen);

/* Ends the privileged process (closes its socket and reaps it); shims it
 * started keep running. NULL is fine. */
void priv_stop(struct priv *p);

/* The privileged process's pid, for the agent's log (-1 when none). */
pid_t priv_pid(const struct priv *p);

/* Whether the privileged process runs as root (jobs then run as their users). */
bool priv_is_root(const struct priv *p);

/* False: there was no usable cgroup v2 root, and kills go to process groups. */
bool priv_has_cgroups(const struct priv *p);

/* One line for the agent's log: why there are no cgroups, or, where there
 * are, the root and which limits it enforces. Owned by p. */
const char *priv_cgroup_note(const struct priv *p);

struct priv_launch {
    uint64_t job;            /* 1..INT64_MAX */
    uint32_t attempt;        /* >= 1 */
    const char *unix_user;   /* NULL: run as the agent's own user */
    const char *workdir;     /* absolute; NULL: the user's home (or /, if it has none) */
    const char *const *argv; /* argc >= 1, argv[0] not empty */
    size_t argc;             /* */
    const char *const *env;  /* "NAME=VALUE", the command's whole environment */
    size_t nenv;             /* */
    const char *stdout_path; /* absolute; NULL: ATTEMPT_DIR/stdout */
    const char *stderr_path; /* absolute; NULL: ATTEMPT_DIR/stderr */
    uint32_t cpu_milli;      /* 0: no CPU limit */
    int64_t mem_mib;         /* 0: no memory limit */
    bool script;             /* argv[0] is STATE_DIR/scripts/JOB.ATTEMPT, written by the
                              * caller: it is given to the job's user (mode 0700) */
    bool append;             /* stdout_path and stderr_path are appended to; else an
                              * existing file is truncated (sbatch's --open-mode) */
};

/*
 * Launches one attempt: creates ATTEMPT_DIR (an existing one that holds a
 * status or pid file is refused: GPO_EEXIST), the attempt's cgroup,
 * attempt.json, then forks and execs
 *   SHIM_EXE --dir D --user U [--cgroup C] [--workdir W]
 *                 [--stdout P] [--stderr P] [--append] --ready-fd 3 --env-fd 4 -- ARGV
 * (U: unix_user, or the privileged process's own user when NULL). The shim
 * runs with a fixed environment of ours (it is root); the request's
 * environment reaches only the command, exactly, through a pipe (--env-fd),
 * so that nothing in it (LD_PRELOAD, ...) acts on a root process. Then it
 * waits until the shim has written the pid file (the command is then in its
 * cgroup and process group, so a priv_signal that follows reaches it) or
 * has given up. Returns 0 with the shim's pid and start time
 * (journal_proc_start_time), GPO_EINVAL (a field refused, the message
 * naming it: unix_user unknown, not a valid name, uid 0 without allow_root,
 * another user than the privileged process's own when that is not root;
 * workdir, stdout_path, stderr_path not absolute, with "..", or too long;
 * argv empty; an env entry without "=" or with a bad name; counts or total
 * size over the bounds above; job, attempt, mem_mib, cpu_milli out of
 * range; a script whose argv[0] is not STATE_DIR/scripts/JOB.ATTEMPT, or
 * whose file is not a regular file of agent_uid's with one link),
 * GPO_EEXIST, GPO_EIO (the message says what failed; a shim that
 * stopped before its command points to ATTEMPT_DIR/shim.log), GPO_EPIPE.
 * `req` and its strings are borrowed. Other calls wait while a launch
 * waits for its shim.
 */
int priv_launch(struct priv *p, const struct priv_launch *req, pid_t *ret_pid,
                uint64_t *ret_start_time, char *err, size_t errlen);

/*
 * Sends sig (SIGTERM or SIGKILL only) to attempt (job, attempt). Where the
 * attempt has a cgroup: SIGKILL writes cgroup.kill (every process, those
 * that called setsid included), SIGTERM goes to every process in the cgroup.
 * Else to the command's process group (ATTEMPT_DIR/pid, which the shim
 * wrote); a child that left that group with setsid is then out of reach.
 * Returns 0, also when nothing is left to signal; GPO_ENOENT (no such
 * attempt directory), GPO_EINVAL, GPO_EIO, GPO_EPIPE.
 */
int priv_signal(struct priv *p, uint64_t job, uint32_t attempt, int sig, char *err, size_t errlen);

/*
 * The job's own warning signal (sbatch's --signal): sig 1..64, but not
 * SIGKILL or SIGSTOP, to attempt (job, attempt). With `leader`, to the
 * command's own process alone (ATTEMPT_DIR/pid, checked to be in the
 * attempt's cgroup where there is one: the batch script, --signal=B:);
 * else to every process of the attempt, as priv_signal's SIGTERM goes.
 * Returns as priv_signal.
 */
int priv_signal_job(struct priv *p, uint64_t job, uint32_t attempt, int sig, bool leader, char *err,
                    size_t errlen);

/*
 * Removes the attempt's cgroup once it is empty. *ret_empty: true when no
 * process of the attempt is left (cgroup removed, or its process group
 * gone), false while some remain (call again later). The attempt directory
 * and its logs stay. Returns 0, GPO_ENOENT, GPO_EINVAL, GPO_EIO,
 * GPO_EPIPE.
 */
int priv_cleanup(struct priv *p, uint64_t job, uint32_t attempt, bool *ret_empty, char *err,
                 size_t errlen);

/*
 * Which attempts processes belong to, by their environment (GPUORCH_JOB_ID
 * and GPUORCH_ATTEMPT in /proc/PID/environ, which only root reads for
 * other users' processes): for each of pids[0..n) (n at most
 * PRIV_PIDS_MAX, each 2..PRIV_PID_MAX), jobs[i] and attempts[i], or 0 and 0
 * when the process is gone, names no attempt, or names one that this node
 * never launched (no attempt directory). Nothing else of the environment
 * leaves the privileged process. Returns 0, GPO_EINVAL, GPO_EPIPE.
 */
int priv_attribute(struct priv *p, const pid_t *pids, size_t n, uint64_t *jobs, uint32_t *attempts,
                   char *err, size_t errlen);

enum priv_stream { PRIV_STREAM_STDOUT = 1, PRIV_STREAM_STDERR = 2 };

/*
 * Opens attempt (job, attempt)'s log `stream` for reading, at the path its
 * attempt.json names, and checks it: a regular file owned by the attempt's
 * uid (an O_PATH open, checked with fstat, then opened again through
 * /proc/self/fd, so that no device or FIFO is ever opened for real and no
 * rename between the check and the open matters). The open runs in a child
 * of the privileged process, so a path that blocks (a dead NFS server)
 * holds up only this call, for at most timeout_ms (0: PRIV_LOG_OPEN_MS).
 * Returns 0 with *ret_fd (O_RDONLY|O_NONBLOCK, close-on-exec; the caller
 * closes it) and *ret_size; GPO_ENOENT (no such file, yet, or no such
 * attempt); GPO_EPERM (not a regular file of the attempt's uid);
 * GPO_ETIMEDOUT; GPO_EINVAL; GPO_EIO; GPO_EPIPE. Other calls do not wait
 * for the open.
 */
int priv_log_open(struct priv *p, uint64_t job, uint32_t attempt, enum priv_stream stream,
                  int64_t timeout_ms, int *ret_fd, int64_t *ret_size, char *err, size_t errlen);

struct priv_step {
    uint64_t job;            /* 1..INT64_MAX */
    uint32_t attempt;        /* >= 1 */
    const char *workdir;     /* absolute; NULL: the user's home (or /) */
    const char *const *argv; /* argc >= 1, argv[0] not empty (found on the env's PATH) */
    size_t argc;             /* */
    const char *const *env;  /* "NAME=VALUE", the task's whole environment */
    size_t nenv;             /* */
    bool pty;                /* on a pseudo-terminal (PRIV_REQ_STEP_PTY) */
};

/*
 * Starts one task of a job step in attempt (job, attempt), which must be
 * running on this node (its directory holds attempt.json and the shim's pid
 * file, and no status): as the attempt's user (attempt.json's uid and gid,
 * uid 0 only with allow_root), in the attempt's cgroup, in a process group
 * of its own, stdin /dev/null. A keeper process (the privileged process's
 * child, root, in the cgroup too) forks the task, waits for it, and talks
 * to the caller over a socket: it writes the task's stdout and stderr as
 * util/stepframe.h frames (task 0), and an EXIT frame last (its status,
 * or -1 and the signal), after the task ended and its output was read
 * (what is left of its process group is then killed); it reads single
 * bytes, each a signal for the task's process group (SIGINT, SIGTERM or
 * SIGKILL; others are ignored). When the caller closes its end the task
 * gets SIGTERM, and SIGKILL PRIV_STEP_GRACE_MS later.
 * With `pty` the task runs on a pseudo-terminal instead (a session of its
 * own, the terminal's slave its controlling terminal and its stdin, stdout
 * and stderr): the keeper sends what the terminal shows as STDOUT frames
 * and reads frames from the caller in place of signal bytes: STDIN (to
 * the terminal), WINSIZE (TIOCSWINSZ: the task's foreground gets
 * SIGWINCH), HANGUP (the terminal's master closes: the task gets SIGHUP,
 * and SIGKILL PRIV_STEP_GRACE_MS later, as when the caller closes its end). Returns 0 and
 * *ret_fd (SOCK_STREAM, close-on-exec; the caller closes it); GPO_EINVAL (a
 * field refused, named, as priv_launch's), GPO_ENOENT (no such attempt
 * here), GPO_ESTATE (the attempt is not running), GPO_EIO, GPO_EPIPE.
 * `req` and its strings are borrowed.
 */
#define PRIV_STEP_GRACE_MS 2000
int priv_step_spawn(struct priv *p, const struct priv_step *req, int *ret_fd, char *err,
                    size_t errlen);

/*
 * MIG changes, which NVML allows root only: creates a GPU instance of
 * profile id `profile_id` (0..63) at start slot `start` (0..7) on GPU `gpu`
 * (NVML's index, below GPU_MAX_DEVICES and the GPUs NVML finds), with one
 * compute instance spanning it; or destroys GPU instance `instance_id`
 * (0..63) of GPU `gpu` (its compute instances first). The privileged
 * process opens its own NVML backend (priv_config's nvml) at the first
 * such request; nothing else of NVML is reachable through it (MIG mode is
 * not: the agent never changes it). Returns 0, GPO_EINVAL (a field refused,
 * named), the mapped NVML code with gpu.h's message (GPO_ENOSPC, GPO_EBUSY,
 * GPO_ENOENT, GPO_EPERM, ...), GPO_EPIPE.
 */
int priv_mig_create(struct priv *p, unsigned gpu, unsigned profile_id, unsigned start, char *err,
                    size_t errlen);
int priv_mig_destroy(struct priv *p, unsigned gpu, unsigned instance_id, char *err, size_t errlen);

/*
 * CUDA MPS for one GPU (agent/mps.h), with the privileged process's own
 * credentials (root in production, as NVIDIA's multi-user setup has it: the
 * control daemon then starts each user's MPS server under that user's uid).
 * Its directories are STATE_DIR/mps/UUID/pipe and STATE_DIR/mps/UUID/log
 * (made 0755 when missing), and the control program runs with only
 * CUDA_VISIBLE_DEVICES=UUID, CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY
 * and PATH in its environment, its output in STATE_DIR/mps/UUID/control.out.
 * PRIV_MPS_START: unless the daemon of that pipe directory runs already (its
 * nvidia-cuda-mps-control.pid names a live process), runs
 * `nvidia-cuda-mps-control -d`, which must exit 0, and waits until the
 * daemon has written its pid file. PRIV_MPS_QUIT: writes "quit" to
 * `nvidia-cuda-mps-control` on stdin and waits until the daemon is gone;
 * nothing to do when none runs. Each wait is at most PRIV_MPS_WAIT_MS.
 * uuid: 1..PRIV_UUID_MAX-1 bytes of letters, digits and '-'. Returns 0,
 * GPO_EINVAL (a bad uuid or op), GPO_ENOENT (no control program
 * configured), GPO_EIO (it failed, or did not finish in time: the message
 * says which, with its output), GPO_EPIPE.
 */
#define PRIV_UUID_MAX    96
#define PRIV_MPS_WAIT_MS 10000
enum priv_mps_op { PRIV_MPS_START = 1, PRIV_MPS_QUIT = 2 };
int priv_mps(struct priv *p, enum priv_mps_op op, const char *uuid, char *err, size_t errlen);

/*
 * The wire format, exposed so that tests can send what the typed calls
 * never build. Every request starts with its type and is exactly the size
 * of its struct; strings are NUL-terminated inside their arrays; launch's
 * `strings` holds argc then nenv NUL-terminated strings, strings_len bytes
 * in all.
 */
enum priv_req_type {
    PRIV_REQ_LAUNCH = 1,
    PRIV_REQ_SIGNAL = 2,
    PRIV_REQ_CLEANUP = 3,
    PRIV_REQ_ATTRIBUTE = 4,
    PRIV_REQ_LOG_OPEN = 5,
    PRIV_REQ_STEP = 6,     /* a struct priv_req_launch: job, attempt, workdir, argv and env;
                            * every other field 0 */
    PRIV_REQ_STEP_PTY = 7, /* the same, the task on a pseudo-terminal */
    PRIV_REQ_MPS = 8,      /* a struct priv_req_mps */
    PRIV_REQ_MIG = 9,      /* a struct priv_req_mig */
};

enum priv_mig_op { PRIV_MIG_CREATE = 1, PRIV_MIG_DESTROY = 2 };

/* A MIG change: create (profile_id, start; instance 0) or destroy
 * (instance; profile_id and start 0). */
#define PRIV_MIG_PROFILE_MAX  63
#define PRIV_MIG_SLOT_MAX     7
#define PRIV_MIG_INSTANCE_MAX 63
struct priv_req_mig {
    uint32_t type; /* PRIV_REQ_MIG */
    uint32_t op;   /* enum priv_mig_op */
    uint32_t gpu;  /* NVML's index, 0..GPU_MAX_DEVICES-1 */
    uint32_t profile_id;
    uint32_t start;
    uint32_t instance;
};

struct priv_req_launch {
    uint32_t type; /* PRIV_REQ_LAUNCH */
    uint32_t attempt;
    uint64_t job;
    int64_t mem_mib;
    uint32_t cpu_milli;
    uint32_t argc, nenv, strings_len;
    uint8_t has_user, has_workdir, has_stdout, has_stderr; /* 0 or 1 */
    uint8_t has_script;                                    /* 0 or 1 */
    uint8_t append;                                        /* 0 or 1 */
    char unix_user[PRIV_USER_MAX];
    char workdir[PRIV_PATH_MAX];
    char stdout_path[PRIV_PATH_MAX];
    char stderr_path[PRIV_PATH_MAX];
    char strings[PRIV_STRINGS_MAX];
};

/* A signal request's flags. */
enum priv_signal_flags {
    PRIV_SIGNAL_JOB = 1 << 0,    /* the job's own signal: any but SIGKILL and SIGSTOP */
    PRIV_SIGNAL_LEADER = 1 << 1, /* to the command's process alone (with PRIV_SIGNAL_JOB) */
};

struct priv_req_attempt {
    uint32_t type; /* PRIV_REQ_SIGNAL or PRIV_REQ_CLEANUP */
    uint32_t attempt;
    uint64_t job;
    int32_t sig;    /* PRIV_REQ_SIGNAL only; 0 otherwise */
    uint32_t flags; /* enum priv_signal_flags, PRIV_REQ_SIGNAL only; 0 otherwise */
};

struct priv_req_attribute {
    uint32_t type;               /* PRIV_REQ_ATTRIBUTE */
    uint32_t n;                  /* 1..PRIV_PIDS_MAX */
    int32_t pids[PRIV_PIDS_MAX]; /* pids[0..n): 2..PRIV_PID_MAX; the rest 0 */
};

struct priv_req_log {
    uint32_t type; /* PRIV_REQ_LOG_OPEN */
    uint32_t attempt;
    uint64_t job;
    uint32_t stream; /* enum priv_stream */
    uint32_t pad;
};

struct priv_req_mps {
    uint32_t type; /* PRIV_REQ_MPS */
    uint32_t op;   /* enum priv_mps_op */
    char uuid[PRIV_UUID_MAX];
};

/* Every reply; a log open's reply carries a descriptor (SCM_RIGHTS): the
 * socket on which the child that opens the file answers, with a reply of
 * its own and the log file's descriptor. */
struct priv_reply {
    int32_t rc;
    int32_t pid;
    uint64_t start_time;
    uint32_t empty;
    uint32_t pad;
    int64_t size;                 /* a log open: the file's size */
    uint64_t jobs[PRIV_PIDS_MAX]; /* an attribute request's answers */
    uint32_t attempts[PRIV_PIDS_MAX];
    char msg[PRIV_MSG_MAX];
};

/* Sends `len` bytes (borrowed) as one request and returns the reply's code
 * and message (GPO_EPIPE if none came). For tests of the checks. */
int priv_call_raw(struct priv *p, const void *req, size_t len, char *err, size_t errlen);

#endif
