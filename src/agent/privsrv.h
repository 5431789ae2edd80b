/*
 * privsrv.h - the agent's privileged process: what priv_start forks (priv.h
 * is the agent's side, and the wire format both sides speak).
 *
 * It keeps the agent's credentials and acts only on the fixed table of
 * requests in priv.h (launch, signal, cleanup, attribute, log open, step, mps, MIG change), each
 * checked field by field before anything is done: the user exists and is not root unless allowed,
 * paths are absolute and free of "..", sizes are bounded, environment names are valid, and signals
 * go only to the cgroup or process group of an attempt it launched. Split from priv.c so that the
 * code that runs with privileges is one file to read.
 */
#ifndef GPUORCH_AGENT_PRIVSRV_H
#define GPUORCH_AGENT_PRIVSRV_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/priv.h"

struct privsrv;

/*
 * Checks the configuration (cfg borrowed), makes STATE_DIR/attempts (0750,
 * the agent's group) and opens the cgroup root where one is configured.
 * Returns 0 and *ret (privsrv_free), writing into note (notelen bytes) how
 * cgroups stand, or GPO_EINVAL / GPO_EIO / GPO_ENOMEM with err.
 */
int privsrv_new(const struct priv_config *cfg, struct privsrv **ret, char *note, size_t notelen,
                char *err, size_t errlen);

/* Whether attempts get cgroups (else process groups). */
bool privsrv_has_cgroups(const struct privsrv *s);

/* In the forked child: serves requests on fd (SOCK_SEQPACKET) until the
 * agent closes it, then exits the process. Never returns. */
void privsrv_serve(struct privsrv *s, int fd) __attribute__((noreturn));

/* Frees it (the parent's copy after the fork); NULL is fine. */
void privsrv_free(struct privsrv *s);

/*
 * privsrv_read.c: the requests that only read, for privsrv.c's table
 * (ATTEMPTS is STATE_DIR/attempts). privsrv_do_attribute fills the reply's
 * jobs and attempts. privsrv_do_log_open forks the child that opens the
 * file and returns the descriptor to pass with the reply (the socket the
 * child answers on), or -1 with rep->rc set.
 */
void privsrv_do_attribute(const char *attempts, const void *req, struct priv_reply *rep);
int privsrv_do_log_open(const char *attempts, const void *req, struct priv_reply *rep);

/* privsrv_step.c: a step task's request (priv.h: priv_step_spawn). Forks
 * the keeper and returns the descriptor to pass (the caller's end of its
 * socket), or -1 with rep->rc set. */
struct privsrv_self;
int privsrv_do_step(const char *attempts, const struct privsrv_self *self, const void *req,
                    struct priv_reply *rep);

/* privsrv_mps.c: a CUDA MPS request (priv.h: priv_mps) for the control
 * program `control` ("" when none is configured), its directories under
 * STATE/mps. */
void privsrv_do_mps(const char *state, const char *control, const void *req,
                    struct priv_reply *rep);

/* One message of len bytes (borrowed) on a SOCK_SEQPACKET socket, with
 * pass_fd (borrowed; -1: none) as SCM_RIGHTS. sendmsg's result. */
ssize_t privsrv_send(int sock, const void *buf, size_t len, int pass_fd);

/* One message into buf (len bytes): its whole length (MSG_TRUNC: more than
 * len when it was cut), or -1 with errno; *ret_fd the descriptor that came
 * with it, close-on-exec (the caller closes it), or -1. */
ssize_t privsrv_recv(int sock, void *buf, size_t len, int *ret_fd);

#endif
