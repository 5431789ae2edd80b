/*
 * attempts_int.h - the attempt table's own state (attempts.h), shared by
 * attempts.c (launches, kills, the monitor) and attempts_report.c (the
 * reports to the controller). Not for other modules.
 */
#ifndef GPUORCH_AGENT_ATTEMPTS_INT_H
#define GPUORCH_AGENT_ATTEMPTS_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/attempts.h"
#include "agent/exits.h"
#include "agent/jobsignal.h"
#include "agent/launch.h"
#include "agent/mps.h"
#include "agent/replica.h"

enum phase {
    PH_RUNNING, /* launched; no outcome yet */
    PH_ENDING,  /* outcome known; leftovers killed, GPUs being checked */
    PH_FINAL,   /* final report owed */
    PH_HELD,    /* reported; some of its GPUs still run its processes (dirty) */
};

struct att {
    uint64_t job;
    uint32_t attempt;
    enum phase phase;
    char dir[JOURNAL_PATH_MAX];
    pid_t pid; /* the shim's; 0: never started */
    uint64_t start_time;
    int pidfd;    /* the shim's (exits.h), while PH_RUNNING; -1: none, read status files */
    bool watched; /* a pidfd was asked for */
    bool exited;  /* its pidfd said the shim ended */
    char **uuids;
    char **mig_uuids; /* [nuuids]: the MIG device of each share, NULL for a whole GPU's */
    size_t nuuids;
    bool *dirty;
    int64_t limit_ms;          /* time limit deadline; 0: none */
    int64_t limit_s;           /* the time limit it was given; 0: none */
    int64_t launched_ms;       /* when its command started, on the agent's clock */
    struct jobsignal sig;      /* the job's --signal */
    bool running_owed;         /* the RUNNING report is still to be acknowledged */
    bool killing;              /* a kill started: kill_as says what it ends as */
    enum proto_state kill_as;  /* CANCELLED, PREEMPTED, TIMEOUT */
    int64_t sigkill_ms;        /* when SIGTERM turns into SIGKILL; 0: sent */
    int64_t dirty_until;       /* PH_ENDING: give up waiting for the GPUs then */
    struct proto_report final; /* the final report, once known (from PH_ENDING on) */
    bool listed;               /* in the latest assignments answer */
    bool gone;                 /* to be dropped from the table */
    int64_t report_after;      /* a refused or failed report is sent again from then */
    bool recovered;            /* taken up from the journal: GPUs and limit from the next answer */
    uint32_t port;             /* a serving replica's (replica.h); 0: not one */
    char kill_why[PROTO_REASON_MAX + 1]; /* a kill_as FAILED's reason */
    char *mps_gpu;                       /* the GPU whose MPS daemon it counts on (mps.h); NULL */
    bool fenced; /* stopped by the fence (attempts_fence): reported FAILED, "fenced" */
};

struct attempts {
    struct attempts_config cfg;
    char *node, *state_dir;
    struct launch_gpus gpus; /* the node's GPUs by index, for SLURM_JOB_GPUS */
    pthread_mutex_t lock;
    struct exits *exits; /* the monitor's sleep: wake-ups and the shims' pidfds */
    struct replica *rep; /* the serving replicas' probes */
    struct mps *mps;     /* MPS daemons' clients, under the lock */
    bool mps_swept;      /* the first answer's mps_sweep is done */
    bool told_poll;      /* the log said that exits are polled for */
    bool fenced;         /* attempts_fence until attempts_unfence: nothing is launched */
    struct att **v;
    size_t n, cap;
};

/* The attempt (job, attempt) in the table, or NULL. Under the lock. */
struct att *attempts_find(struct attempts *t, uint64_t job, uint32_t attempt);

/* SIGTERM now, SIGKILL after grace_ms; the attempt then ends as `as` (the
 * log says why, NULL: as's name). Nothing for one not running or being
 * killed already. Under the lock. */
void attempts_kill_start(struct attempts *t, struct att *a, enum proto_state as, int64_t grace_ms,
                         const char *why, int64_t now);
/* The SIGKILL of an attempt being killed, once due. Under the lock. */
void attempts_sigkill_due(struct attempts *t, struct att *a, int64_t now);
/* An attempt taken up from the journal that an earlier agent fenced after
 * unreached_ms: it ends as fenced, and what runs of it is killed at once
 * (attempts_fence.c). Under the lock. */
void attempts_fenced_again(struct attempts *t, struct att *a, int64_t unreached_ms);

/* A report to send, encoded under the table's lock so that HTTP runs unlocked. */
struct attempts_owed {
    uint64_t job;
    uint32_t attempt;
    enum proto_state state;
    char *body; /* NULL: it could not be encoded (out of memory); caller frees */
    bool final;
    struct proto_endpoint ep; /* a replica's, as sent; port 0: none */
};

/* Report r (borrowed) of a, encoded. Under the lock. */
struct attempts_owed attempts_owe(const struct att *a, const struct proto_report *r, bool final);
/* Sends it with c (not under the lock): whether the controller has it. */
bool attempts_post(struct attempts *t, struct httpc *c, const struct attempts_owed *o);
/* After a report was sent (done: acknowledged); *next becomes 0 when a
 * final report is due at once. Under the lock. */
void attempts_reported(struct attempts *t, const struct attempts_owed *o, bool done, int64_t now,
                       int64_t *next);

#endif
