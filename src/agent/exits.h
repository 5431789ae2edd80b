/*
 * exits.h - seeing a shim end when it ends: a pidfd (pidfd_open(2), Linux
 * 5.3) per running shim, which poll(2) reports readable once the process
 * has exited, whoever its parent is (the shims are the privileged half's
 * children, and outlive the agent). The monitor thread sleeps in
 * exits_wait on the pidfds and a wake-up descriptor, so an exit, a new
 * launch or a kill wakes it at once. The status file stays the record of
 * the outcome: a pidfd only says when to read it.
 *
 * Where pidfd_open is missing (ENOSYS: an older kernel) or refused, or
 * with poll_only (the agent's --exit-poll, and tests of that path),
 * exits_watch says so and the caller reads the status files on its timer.
 *
 * Threads: exits_wake from any thread; exits_watch and exits_wait from the
 * monitor's. Not locked: the descriptors are the kernel's.
 */
#ifndef GPUORCH_AGENT_EXITS_H
#define GPUORCH_AGENT_EXITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct exits;

/* 0 and *ret (caller frees with exits_free), or GPO_ENOMEM / -errno (the
 * wake-up eventfd). poll_only: exits_watch never opens a pidfd. */
int exits_new(bool poll_only, struct exits **ret);
void exits_free(struct exits *x);

/*
 * A pidfd of shim `pid`, which /proc/PID/stat says started at start_time
 * (journal_proc_start_time): checked after the open, so that a pid reused
 * since the shim ended is not taken for it. Returns the descriptor (>= 0,
 * close-on-exec; the caller closes it), GPO_ENOTSUP (no pidfd here, or
 * poll_only: read the status file on a timer), or GPO_ENOENT (that process
 * is gone: its status file says how it ended).
 */
int exits_watch(struct exits *x, pid_t pid, uint64_t start_time);

/* Whether a pidfd was ever refused as unsupported (for one log line). */
bool exits_unsupported(const struct exits *x);

/* Wakes exits_wait (at most one wake is kept while nobody waits). */
void exits_wake(struct exits *x);

/*
 * Sleeps up to ms (0: just looks) until exits_wake, or one of fds[0..n)
 * (pidfds) is readable: ready[k] says which (all false when out of memory:
 * then it only sleeps). Returns 0 (a wake, a ready pidfd or the time out)
 * or poll's -errno.
 */
int exits_wait(struct exits *x, const int *fds, size_t n, int64_t ms, bool *ready);

#endif
