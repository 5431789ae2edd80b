/*
 * jobsignal.h - sbatch's --signal=[B:]SIG@SECS: the job's own warning
 * signal, SECS seconds before its time limit, once per attempt.
 *
 * Without "B:" the signal goes to every process of the attempt (its cgroup,
 * or its process group), the batch script included; with "B:" to the
 * command's own process alone (the batch script). A job without a time
 * limit gets none, as in Slurm, which accepts --signal there and ignores
 * it. An attempt whose limit is closer than SECS when it starts gets it at
 * once.
 *
 * Once: the agent journals the signal after sending it (journal_signalled),
 * and an attempt taken up from the journal with that record is not
 * signalled again; one taken up without it is armed from its recomputed
 * time limit (attempts.c's adopt: the limit counts from the shim's pid
 * file). A crash between the send and the journal sends it twice rather
 * than never.
 *
 * The struct is the attempt's (attempts.c holds one per attempt, under its
 * table's lock); nothing here locks or logs but through the caller's log.
 */
#ifndef GPUORCH_AGENT_JOBSIGNAL_H
#define GPUORCH_AGENT_JOBSIGNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/journal.h"
#include "agent/priv.h"
#include "proto/proto.h"

struct jobsignal {
    int64_t due_ms; /* on the caller's clock; 0: none, or sent */
    int sig;        /* 1..64 */
    bool leader;    /* to the command's process alone (B:) */
    bool sent;      /* sent, or journaled as sent by an earlier agent */
};

/* Arms js for spec s (borrowed) whose time limit runs out at limit_ms;
 * nothing when s has no signal or no time limit, or js was sent. */
void jobsignal_arm(struct jobsignal *js, const struct proto_spec *s, int64_t limit_ms);

/* Whether js is due at now. */
bool jobsignal_due(const struct jobsignal *js, int64_t now);

/* Milliseconds from now until js is due, at most `next` (0 when due). */
int64_t jobsignal_next(const struct jobsignal *js, int64_t now, int64_t next);

/* Sends the due signal to attempt (job, attempt) through p, then journals
 * it in j; js is then spent. What failed goes to log. */
void jobsignal_send(struct jobsignal *js, struct priv *p, struct journal *j, uint64_t job,
                    uint32_t attempt,
                    void (*log)(const char *fmt, ...) __attribute__((format(printf, 1, 2))));

#endif
