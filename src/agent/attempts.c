/*
 * attempts.c - launches, kills and the monitor of the node agent's attempts
 * (attempts.h).
 */
#include "agent/attempts_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/jobsignal.h"
#include "agent/exits.h"
#include "agent/fence.h"
#include "agent/launch.h"
#include "agent/replica.h"
#include "agent/sampler.h"
#include "agent/shim.h"
#include "util/errbuf.h"
#include "util/text.h"
#include "base/banned.h"

static void nolog(const char *fmt, ...)
{
    (void)fmt;
}

static void replica_changed(void *arg)
{
    exits_wake(((struct attempts *)arg)->exits);
}

int attempts_new(const struct attempts_config *cfg, struct attempts **ret)
{
    struct attempts *t = calloc(1, sizeof(*t));
    if (!t)
        return GPO_ENOMEM;
    t->cfg = *cfg;
    if (!t->cfg.log)
        t->cfg.log = nolog;
    t->node = strdup(cfg->node);
    t->state_dir = strdup(cfg->state_dir);
    int rc = t->node && t->state_dir ? exits_new(cfg->exit_poll, &t->exits) : GPO_ENOMEM;
    struct replica_config rc_cfg = {.wake = replica_changed, .arg = t, .log = t->cfg.log};
    rc = rc ? rc : replica_new(&rc_cfg, &t->rep);
    rc = rc ? rc : mps_new(cfg->priv, cfg->state_dir, &t->mps);
    if (rc) {
        attempts_free(t);
        return rc;
    }
    pthread_mutex_init(&t->lock, NULL);
    *ret = t;
    return 0;
}

static void strs_free(char **v, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        free(v[k]);
    free(v);
}

static void att_free(struct att *a)
{
    if (!a)
        return;
    strs_free(a->uuids, a->nuuids);
    strs_free(a->mig_uuids, a->nuuids);
    free(a->dirty);
    if (a->pidfd >= 0)
        close(a->pidfd);
    proto_report_release(&a->final);
    free(a->mps_gpu);
    free(a);
}

void attempts_free(struct attempts *t)
{
    if (!t)
        return;
    for (size_t k = 0; k < t->n; k++)
        att_free(t->v[k]);
    replica_free(t->rep); /* its thread wakes the monitor through exits */
    mps_free(t->mps);
    launch_gpus_release(&t->gpus);
    free(t->v);
    free(t->node);
    free(t->state_dir);
    if (t->exits)
        pthread_mutex_destroy(&t->lock);
    exits_free(t->exits);
    free(t);
}

struct att *attempts_find(struct attempts *t, uint64_t job, uint32_t attempt)
{
    for (size_t k = 0; k < t->n; k++) {
        if (t->v[k]->job == job && t->v[k]->attempt == attempt)
            return t->v[k];
    }
    return NULL;
}

static struct att *add(struct attempts *t, uint64_t job, uint32_t attempt)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        // NOLINTNEXTLINE(bugprone-sizeof-expression): *v is a pointer (an array of them)
        struct att **v = realloc(t->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        t->v = v;
        t->cap = cap;
    }
    struct att *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->job = job;
    a->attempt = attempt;
    a->pidfd = -1;
    snprintf(a->dir, sizeof(a->dir), "%s/attempts/%" PRIu64 ".%" PRIu32, t->state_dir, job,
             attempt);
    t->v[t->n++] = a;
    return a;
}

static char *reason_dup(const char *text);

/* Ends an attempt with a known outcome (taken): next, its leftovers and GPUs. */
static void set_outcome(struct attempts *t, struct att *a, struct proto_report final, int64_t now)
{
    proto_report_release(&a->final);
    a->final = final;
    if (a->killing && a->kill_as == PROTO_STATE_FAILED && a->kill_why[0]) {
        free(a->final.reason);
        a->final.state = PROTO_STATE_FAILED;
        a->final.reason = reason_dup(a->kill_why);
        a->final.fenced = a->fenced;
    }
    a->phase = PH_ENDING;
    if (a->port)
        replica_remove(t->rep, a->job, a->attempt);
    steps_attempt_remove(t->cfg.steps, a->job, a->attempt);
    if (a->pidfd >= 0)
        close(a->pidfd);
    a->pidfd = -1;
    a->dirty_until = now + t->cfg.dirty_wait_ms;
}

/* A report's reason from any text: at most PROTO_REASON_MAX bytes, cut
 * between characters, one line of UTF-8 (control characters and other
 * bytes shown as '?'). NULL when out of memory. */
static char *reason_dup(const char *text)
{
    size_t len = strlen(text);
    char *r = malloc(len + 1);
    if (!r)
        return NULL;
    memcpy(r, text, len + 1);
    return text_fit_line(r, PROTO_REASON_MAX); /* as the controller reads a reason */
}

static struct proto_report report_of(enum proto_state state)
{
    return (struct proto_report){.state = state, .exit_code = PROTO_NONE, .signal = PROTO_NONE};
}

static struct proto_report failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static struct proto_report failed(const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    struct proto_report r = report_of(PROTO_STATE_FAILED);
    r.reason = reason_dup(reason); /* NULL when out of memory: reported without one */
    return r;
}

/* The final report of an attempt whose shim wrote its status. */
static struct proto_report outcome_of(const struct att *a, const struct shim_status *st)
{
    char error[SHIM_ERROR_MAX + 1];
    snprintf(error, sizeof(error), "%.*s", (int)strnlen(st->error, sizeof(st->error)), st->error);
    struct proto_report r = report_of(PROTO_STATE_FAILED);
    if (error[0]) {
        r.exit_code = st->exit_code;
        r.reason = reason_dup(error);
    } else if (st->fenced_ms > 0) {
        /* The shim's watchdog fenced it (this agent, or the one before it,
         * reached no controller for the lease): a lost node's attempt. */
        char why[96];
        snprintf(why, sizeof(why), FENCE_REASON_FMT, st->fenced_ms / 1000);
        *(st->signaled ? &r.signal : &r.exit_code) = st->signaled ? st->signal : st->exit_code;
        r.reason = reason_dup(why);
        r.fenced = true;
    } else if (a->killing && (st->signaled || st->exit_code != 0)) {
        r.state = a->kill_as;
        *(st->signaled ? &r.signal : &r.exit_code) = st->signaled ? st->signal : st->exit_code;
    } else if (st->oom_kills > 0) {
        /* Over its memory limit, whatever the command made of the kill. */
        char why[160];
        snprintf(why, sizeof(why),
                 "out of memory: the kernel killed %" PRIu64 " process%s of the job at its "
                 "memory limit",
                 st->oom_kills, st->oom_kills == 1 ? "" : "es");
        *(st->signaled ? &r.signal : &r.exit_code) = st->signaled ? st->signal : st->exit_code;
        r.reason = reason_dup(why);
    } else if (st->signaled) {
        r.signal = st->signal;
        r.reason = reason_dup("killed by a signal");
    } else {
        r.state = st->exit_code == 0 ? PROTO_STATE_COMPLETED : PROTO_STATE_FAILED;
        r.exit_code = st->exit_code;
    }
    return r;
}

/* ---- launching --------------------------------------------------------- */

/* An MPS client (mps.h) counts on its GPU's daemon from before its launch
 * (or, taken up from the journal, from its first listing) until its end
 * is checked. 0, or the reason in err. Under the lock. */
static int mps_join(struct attempts *t, struct att *a, const struct proto_attempt *asg, char *err,
                    size_t errlen)
{
    const char *uuid = mps_gpu(asg);
    if (!uuid || a->mps_gpu)
        return 0;
    char why[PRIV_MSG_MAX] = "";
    int rc = mps_acquire(t->mps, uuid, why, sizeof(why));
    if (rc)
        return errbuf_set(err, errlen, rc, "CUDA MPS on GPU %s: %s", uuid, why);
    if (!(a->mps_gpu = strdup(uuid))) {
        mps_release(t->mps, uuid, why, sizeof(why));
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    return 0;
}

static void mps_leave(struct attempts *t, struct att *a)
{
    char why[PRIV_MSG_MAX] = "";
    if (a->mps_gpu && mps_release(t->mps, a->mps_gpu, why, sizeof(why)) != 0)
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": stopping the MPS daemon of GPU %s: %s", a->job,
                   a->attempt, a->mps_gpu, why);
    free(a->mps_gpu);
    a->mps_gpu = NULL;
}

/* The attempt's GPUs, from its assignment: 0 or GPO_ENOMEM (none kept). */
static int set_gpus(struct att *a, const struct proto_attempt *asg)
{
    strs_free(a->uuids, a->nuuids);
    strs_free(a->mig_uuids, a->nuuids);
    free(a->dirty);
    a->nuuids = 0;
    a->uuids = calloc(asg->ngpus + 1, sizeof(*a->uuids));
    a->mig_uuids = calloc(asg->ngpus + 1, sizeof(*a->mig_uuids));
    a->dirty = calloc(asg->ngpus + 1, sizeof(*a->dirty));
    for (size_t k = 0; a->uuids && a->mig_uuids && a->dirty && k < asg->ngpus; k++) {
        if (!(a->uuids[k] = strdup(asg->gpus[k].uuid)))
            return GPO_ENOMEM;
        a->nuuids++;
        const char *mig = asg->gpus[k].mig_uuid;
        if (mig && !(a->mig_uuids[k] = strdup(mig)))
            return GPO_ENOMEM;
    }
    return a->uuids && a->mig_uuids && a->dirty ? 0 : GPO_ENOMEM;
}

/* A recovered attempt learns its GPUs and time limit from the first answer
 * that lists it; the limit counts from when its shim wrote ATTEMPT_DIR/pid. */
static void adopt(struct attempts *t, struct att *a, const struct proto_attempt *asg, int64_t now)
{
    a->recovered = false;
    char why[PRIV_MSG_MAX + 64] = "";
    if (a->phase == PH_RUNNING && mps_join(t, a, asg, why, sizeof(why)) != 0)
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": %s", a->job, a->attempt, why);
    if (set_gpus(a, asg) || steps_attempt_add(t->cfg.steps, asg))
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": out of memory: its GPUs go unchecked", a->job,
                   a->attempt);
    int64_t limit = asg->spec.time_limit_s;
    char path[JOURNAL_PATH_MAX + 8];
    snprintf(path, sizeof(path), "%s/pid", a->dir);
    struct stat st;
    struct timespec real;
    int64_t ran = 0;
    if (stat(path, &st) == 0 && clock_gettime(CLOCK_REALTIME, &real) == 0)
        ran = ((int64_t)real.tv_sec - st.st_mtim.tv_sec) * 1000 +
              (real.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
    a->launched_ms = now - (ran > 0 ? ran : 0);
    if (a->port && asg->spec.serve.service &&
        replica_add(t->rep, a->job, a->attempt, &asg->spec.serve, a->port, a->launched_ms) != 0)
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": its replica's probes could not start", a->job,
                   a->attempt);
    a->limit_s = limit > 0 ? limit : 0;
    if (limit > 0)
        a->limit_ms = a->launched_ms + limit * 1000;
    jobsignal_arm(&a->sig, &asg->spec, a->limit_ms);
}

/* A running attempt whose time limit changed (scontrol update TimeLimit):
 * the new limit counts from its launch, and so does its warning signal. */
static void retime(struct att *a, const struct proto_attempt *asg)
{
    int64_t limit = asg->spec.time_limit_s;
    if (a->recovered || a->phase != PH_RUNNING || a->killing || limit == a->limit_s)
        return;
    a->limit_s = limit;
    a->limit_ms = limit > 0 ? a->launched_ms + limit * 1000 : 0;
    if (!a->sig.sent)
        a->sig.due_ms = 0;
    jobsignal_arm(&a->sig, &asg->spec, a->limit_ms);
}

/* Asks for the shim's pidfd, so that its end wakes the monitor; without one
 * (an old kernel, --exit-poll, or the shim gone already) the monitor reads
 * its status file each round. Under the lock. */
static void watch_open(struct attempts *t, struct att *a)
{
    a->watched = true;
    int fd = exits_watch(t->exits, a->pid, a->start_time);
    if (fd >= 0)
        a->pidfd = fd;
    if (fd == GPO_ENOTSUP && !t->told_poll) {
        t->told_poll = true;
        t->cfg.log("exits are seen by reading the status files every second (%s)",
                   t->cfg.exit_poll ? "--exit-poll" : "pidfd_open(2) is not supported here");
    }
}

/* Launches a new attempt of assignment `asg`: journal first, then the fork.
 * Under the lock. */
static void launch(struct attempts *t, const struct proto_attempt *asg, int64_t now)
{
    uint64_t job = asg->job;
    uint32_t attempt = asg->attempt;
    struct att *a = add(t, job, attempt);
    if (!a) {
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": out of memory; not launched", job, attempt);
        return;
    }
    a->listed = true;
    struct journal_attempt ja = {.job = job, .attempt = attempt};
    snprintf(ja.dir, sizeof(ja.dir), "%s", a->dir);
    char err[512] = "";
    int rc = set_gpus(a, asg);
    if (!rc && asg->spec.serve.service && (rc = replica_port_pick(&ja.port)) != 0)
        snprintf(err, sizeof(err), "no free port for the replica: %s", gpo_strerror(rc));
    a->port = ja.port;
    rc = rc ? rc : journal_begin(t->cfg.journal, &ja, err, sizeof(err));
    if (rc) {
        /* Not journaled: nothing is launched. An attempt begun before (by an
         * earlier agent) was taken up by attempts_recover or has ended. */
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": not launched: %s", job, attempt,
                   rc == GPO_EEXIST ? "launched before"
                   : err[0]         ? err
                                    : gpo_strerror(rc));
        t->v[--t->n] = NULL;
        att_free(a);
        return;
    }
    launch_gpus_read(&t->gpus, t->cfg.gpus);
    struct launch_config lc = {.node = t->node,
                               .state_dir = t->state_dir,
                               .as_root = priv_is_root(t->cfg.priv),
                               .gpu_uuids = (const char *const *)t->gpus.uuids,
                               .ngpu_uuids = t->gpus.n,
                               .port = a->port};
    struct launch l = {0};
    /* An MPS client never runs without its daemon: unenforced, it would
     * take the whole GPU. */
    rc = mps_join(t, a, asg, err, sizeof(err));
    rc = rc ? rc : launch_prepare(&lc, asg, &l, err, sizeof(err));
    rc = rc ? rc : steps_launch(t->cfg.steps, asg, &l, err, sizeof(err));
    if (!rc)
        rc = priv_launch(t->cfg.priv, &l.req, &a->pid, &a->start_time, err, sizeof(err));
    launch_release(&l);
    a->running_owed = true;
    if (rc) {
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": launch failed: %s", job, attempt, err);
        set_outcome(t, a, failed("launch failed: %s", err), now);
        return;
    }
    rc = journal_started(t->cfg.journal, job, attempt, a->pid, a->start_time, err, sizeof(err));
    if (rc) /* the shim runs; a restart finds it by its directory (see recover) */
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": journal: %s", job, attempt, err);
    a->launched_ms = now;
    if (a->port && (rc = replica_add(t->rep, job, attempt, &asg->spec.serve, a->port, now)) != 0)
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": its replica's probes: %s", job, attempt,
                   gpo_strerror(rc));
    a->limit_s = asg->spec.time_limit_s > 0 ? asg->spec.time_limit_s : 0;
    jobsignal_arm(&a->sig, &asg->spec, now + asg->spec.time_limit_s * 1000);
    if (asg->spec.time_limit_s > 0)
        a->limit_ms = now + asg->spec.time_limit_s * 1000;
    watch_open(t, a);
    t->cfg.log("job %" PRIu64 ".%" PRIu32 ": started, shim pid %d, %zu GPU(s)", job, attempt,
               (int)a->pid, a->nuuids);
}

void attempts_kill_start(struct attempts *t, struct att *a, enum proto_state as, int64_t grace_ms,
                         const char *why, int64_t now)
{
    if (a->phase != PH_RUNNING || a->killing)
        return;
    a->killing = true;
    a->kill_as = as;
    char err[256] = "";
    if (priv_signal(t->cfg.priv, a->job, a->attempt, SIGTERM, err, sizeof(err)))
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": SIGTERM: %s", a->job, a->attempt, err);
    a->sigkill_ms = now + (grace_ms > 0 ? grace_ms : 0);
    if (a->sigkill_ms == 0)
        a->sigkill_ms = 1;
    t->cfg.log("job %" PRIu64 ".%" PRIu32 ": stopping (%s): SIGTERM, SIGKILL in %" PRId64 " ms",
               a->job, a->attempt, why ? why : proto_state_name(as), grace_ms);
}

/* What a kill's cause ends an attempt as. */
static const enum proto_state kill_states[] = {
    [PROTO_KILL_CANCELLED] = PROTO_STATE_CANCELLED,
    [PROTO_KILL_PREEMPTED] = PROTO_STATE_PREEMPTED,
};

void attempts_apply(struct attempts *t, const struct proto_assignments *answer, int64_t now_ms)
{
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; k < t->n; k++)
        t->v[k]->listed = false;
    for (size_t i = 0; i < answer->nattempts; i++) {
        const struct proto_attempt *e = &answer->attempts[i];
        struct att *a = attempts_find(t, e->job, e->attempt);
        if (a)
            a->listed = true;
        if (a && a->recovered && e->action == PROTO_ACTION_RUN)
            adopt(t, a, e, now_ms);
        else if (a && e->action == PROTO_ACTION_RUN)
            retime(a, e);
        if (e->action == PROTO_ACTION_RUN && !a && !t->fenced)
            launch(t, e, now_ms); /* fenced: left for an answer after the fence */
        else if (e->action == PROTO_ACTION_KILL && a)
            attempts_kill_start(t, a, kill_states[e->cause],
                                e->grace_s != PROTO_NONE ? e->grace_s * 1000 : t->cfg.kill_grace_ms,
                                NULL, now_ms);
    }
    /* Running attempts the controller no longer lists ended there (a node
     * timeout, say): stop them; their report will be refused, which is fine. */
    for (size_t k = 0; k < t->n; k++) {
        if (!t->v[k]->listed && t->v[k]->phase == PH_RUNNING)
            attempts_kill_start(t, t->v[k], PROTO_STATE_CANCELLED, t->cfg.kill_grace_ms, NULL,
                                now_ms);
    }
    /* The first answer has counted the MPS clients taken up from the
     * journal: a daemon with none left ended its jobs while we were away. */
    if (!t->mps_swept) {
        t->mps_swept = true;
        launch_gpus_read(&t->gpus, t->cfg.gpus);
        mps_sweep(t->mps, (const char *const *)t->gpus.uuids, t->gpus.n, t->cfg.log);
    }
    exits_wake(t->exits);
    pthread_mutex_unlock(&t->lock);
}

/* ---- recovery ---------------------------------------------------------- */

size_t attempts_recover(struct attempts *t, int64_t now_ms)
{
    struct journal_attempt *list = NULL;
    size_t n = 0, taken = 0;
    if (journal_list(t->cfg.journal, &list, &n))
        return 0;
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; k < n; k++) {
        const struct journal_attempt *ja = &list[k];
        struct att *a = attempts_find(t, ja->job, ja->attempt);
        if (a || !(a = add(t, ja->job, ja->attempt)))
            continue;
        taken++;
        snprintf(a->dir, sizeof(a->dir), "%s", ja->dir);
        a->pid = ja->pid;
        a->start_time = ja->start_time;
        a->running_owed = true; /* perhaps sent already: the controller takes it twice */
        a->recovered = true;
        a->sig.sent = ja->signalled;
        a->port = ja->port;
        a->listed = true; /* until the first answer says otherwise */
        if (ja->fenced)
            attempts_fenced_again(t, a, ja->unreached_ms);
        a->uuids = calloc(1, sizeof(*a->uuids));
        a->dirty = calloc(1, sizeof(*a->dirty));
        struct shim_status st;
        if (shim_read_status(a->dir, &st, NULL, 0) == 0) {
            set_outcome(t, a, outcome_of(a, &st), now_ms);
        } else if (!ja->pid || !journal_attempt_alive(ja)) {
            /* Begun but never known to have started, or its shim died without a
             * status: whatever may still run of it is killed, and it is
             * reported FAILED; it is never launched again. */
            char err[256];
            priv_signal(t->cfg.priv, a->job, a->attempt, SIGKILL, err, sizeof(err));
            set_outcome(t, a,
                        failed(ja->pid ? "the shim (pid %d) ended without writing a status"
                                       : "the agent stopped while launching it",
                               (int)ja->pid),
                        now_ms);
        }
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": taken up from the journal (%s)", a->job,
                   a->attempt, a->phase == PH_RUNNING ? "running" : "ended");
    }
    pthread_mutex_unlock(&t->lock);
    free(list);
    return taken;
}

/* ---- the monitor ------------------------------------------------------- */

void attempts_sigkill_due(struct attempts *t, struct att *a, int64_t now)
{
    if (!a->killing || !a->sigkill_ms || now < a->sigkill_ms)
        return;
    char err[256] = "";
    if (priv_signal(t->cfg.priv, a->job, a->attempt, SIGKILL, err, sizeof(err)))
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": SIGKILL: %s", a->job, a->attempt, err);
    a->sigkill_ms = 0;
}

/* PH_RUNNING: the shim's outcome, the time limit, SIGKILL after grace.
 * Returns ms until its next deadline (at most `next`). */
static int64_t watch(struct attempts *t, struct att *a, int64_t now, int64_t next)
{
    struct shim_status st;
    struct journal_attempt ja = {.pid = a->pid, .start_time = a->start_time};
    if (!a->watched)
        watch_open(t, a); /* taken up from the journal */
    /* With a pidfd the status is read once it says the shim ended. */
    bool look = a->pidfd < 0 || a->exited;
    if (look && shim_read_status(a->dir, &st, NULL, 0) == 0) {
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": exited (seen by %s)", a->job, a->attempt,
                   a->exited ? "its pidfd" : "reading its status file");
        set_outcome(t, a, outcome_of(a, &st), now);
        return next;
    }
    if (look && !journal_attempt_alive(&ja)) {
        /* The shim may have written its status just before it exited. */
        struct proto_report r = report_of(a->kill_as);
        r.signal = SIGKILL;
        if (shim_read_status(a->dir, &st, NULL, 0) == 0)
            r = outcome_of(a, &st);
        else if (!a->killing)
            r = failed("the shim (pid %d) ended without a status", (int)a->pid);
        set_outcome(t, a, r, now);
        return next;
    }
    if (jobsignal_due(&a->sig, now) && !a->killing)
        jobsignal_send(&a->sig, t->cfg.priv, t->cfg.journal, a->job, a->attempt, t->cfg.log);
    if (a->limit_ms && now >= a->limit_ms && !a->killing)
        attempts_kill_start(t, a, PROTO_STATE_TIMEOUT, t->cfg.kill_grace_ms, NULL, now);
    attempts_sigkill_due(t, a, now);
    if (!a->killing)
        next = jobsignal_next(&a->sig, now, next);
    if (a->limit_ms && !a->killing && a->limit_ms - now < next)
        next = a->limit_ms - now;
    if (a->killing && a->sigkill_ms && a->sigkill_ms - now < next)
        next = a->sigkill_ms - now;
    return next;
}

/* Every GPU of the node, as an attempt's GPUs: one the controller stopped
 * listing before it learned its own (taken up from the journal) is checked
 * on all of them. Out of memory leaves it as it was. */
static void every_gpu(struct attempts *t, struct att *a)
{
    unsigned n = gpu_count(t->cfg.gpus);
    struct proto_attempt all = {.gpus = calloc(n ? n : 1, sizeof(*all.gpus))};
    struct gpu_info *info = calloc(n ? n : 1, sizeof(*info));
    for (unsigned i = 0; all.gpus && info && i < n; i++) {
        if (gpu_info(t->cfg.gpus, i, &info[i], NULL, 0) == 0)
            all.gpus[all.ngpus++].uuid = info[i].uuid;
    }
    if (all.gpus && info && set_gpus(a, &all))
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": out of memory: some GPUs go unchecked", a->job,
                   a->attempt);
    free(all.gpus);
    free(info);
}

/* PH_ENDING: its leftovers killed, its GPUs checked; the final report then
 * names the GPUs still running its processes. Returns ms to the next look. */
static int64_t finish(struct attempts *t, struct att *a, int64_t now, int64_t next)
{
    if (!a->nuuids && !a->listed && a->recovered)
        every_gpu(t, a);
    /* Whatever the command left behind (daemons, setsid children) goes
     * with it, as Slurm's proctrack does; then its GPUs must be clear. */
    char err[256] = "";
    if (a->pid)
        priv_signal(t->cfg.priv, a->job, a->attempt, SIGKILL, err, sizeof(err));
    memset(a->dirty, 0, a->nuuids * sizeof(*a->dirty));
    int nd = a->nuuids
                 ? sampler_attempt_dirty(t->cfg.gpus, t->cfg.priv, (const char *const *)a->uuids,
                                         a->nuuids, a->job, a->attempt, a->dirty)
                 : 0;
    if (nd != 0 && now < a->dirty_until)
        return 100 < next ? 100 : next;
    bool empty = true;
    if (a->pid)
        priv_cleanup(t->cfg.priv, a->job, a->attempt, &empty, err, sizeof(err));
    if (nd != 0) {
        t->cfg.log("job %" PRIu64 ".%" PRIu32 ": %d GPU(s) still run its processes: held "
                   "back as dirty",
                   a->job, a->attempt, nd);
        /* The controller holds them back from this report on. */
        char **list = calloc(a->nuuids + 1, sizeof(*list));
        size_t n = 0;
        for (size_t k = 0; list && k < a->nuuids; k++) {
            if ((a->dirty[k] || nd < 0) && (list[n] = strdup(a->uuids[k])))
                n++;
        }
        if (!list)
            t->cfg.log("job %" PRIu64 ".%" PRIu32 ": out of memory", a->job, a->attempt);
        strs_free(a->final.dirty_gpus, a->final.ndirty);
        a->final.dirty_gpus = list;
        a->final.ndirty = n;
    }
    mps_leave(t, a);
    a->phase = PH_FINAL;
    return next;
}

/* Moves one attempt on; under the lock. Returns ms until its next deadline. */
static int64_t advance(struct attempts *t, struct att *a, int64_t now)
{
    int64_t next = 1000;
    if (a->phase == PH_RUNNING)
        next = watch(t, a, now, next);
    if (a->phase == PH_HELD) {
        /* Reported already: the GPUs stay named in heartbeats until clear. */
        memset(a->dirty, 0, a->nuuids * sizeof(*a->dirty));
        if (sampler_attempt_dirty(t->cfg.gpus, t->cfg.priv, (const char *const *)a->uuids,
                                  a->nuuids, a->job, a->attempt, a->dirty) == 0) {
            t->cfg.log("job %" PRIu64 ".%" PRIu32 ": its GPUs are clear again", a->job, a->attempt);
            a->gone = true;
        }
        return next;
    }
    if (a->phase == PH_ENDING)
        next = finish(t, a, now, next);
    return next;
}

/* A running replica's endpoint (and why it is not ready, in rs) into *r;
 * one not ready within its startup timeout is killed. Whether a report of
 * the endpoint is owed. Under the lock. */
static bool serving(struct attempts *t, struct att *a, int64_t now, struct proto_report *r,
                    struct replica_state *rs)
{
    if (a->phase != PH_RUNNING || replica_report(t->rep, a->job, a->attempt, now, rs) != 0)
        return false;
    r->endpoint = rs->ep;
    r->reason = rs->reason[0] ? rs->reason : NULL; /* borrowed until it is encoded */
    if (rs->expired && !a->killing) {
        snprintf(a->kill_why, sizeof(a->kill_why),
                 "not ready within the startup timeout (%" PRId64 " s)", rs->startup_timeout_s);
        attempts_kill_start(t, a, PROTO_STATE_FAILED, t->cfg.kill_grace_ms, NULL, now);
    }
    return rs->owed && !a->killing;
}

int64_t attempts_tick(struct attempts *t, struct httpc *c, int64_t now_ms)
{
    int64_t next = 1000;
    size_t nowed = 0;
    pthread_mutex_lock(&t->lock);
    struct attempts_owed *owed = calloc(2 * t->n + 1, sizeof(*owed));
    for (size_t k = 0; owed && k < t->n; k++) {
        struct att *a = t->v[k];
        int64_t d = advance(t, a, now_ms);
        if (d < next)
            next = d;
        struct proto_report running = report_of(PROTO_STATE_RUNNING);
        struct replica_state rs;
        bool endpoint_owed = a->port && serving(t, a, now_ms, &running, &rs);
        if (now_ms < a->report_after)
            continue;
        if (a->running_owed && !a->pid)
            a->running_owed = false; /* never started: the final report says so */
        else if (a->running_owed || endpoint_owed)
            owed[nowed++] = attempts_owe(a, &running, false);
        if (a->phase == PH_FINAL && !a->running_owed)
            owed[nowed++] = attempts_owe(a, &a->final, true);
    }
    pthread_mutex_unlock(&t->lock);
    for (size_t k = 0; k < nowed; k++) {
        bool done = owed[k].body && attempts_post(t, c, &owed[k]);
        pthread_mutex_lock(&t->lock);
        attempts_reported(t, &owed[k], done, now_ms, &next);
        pthread_mutex_unlock(&t->lock);
        free(owed[k].body);
    }
    free(owed);
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n;) {
        if (t->v[i]->gone) {
            att_free(t->v[i]);
            t->v[i] = t->v[--t->n];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return next < 0 ? 0 : next;
}

/* Whether uuid is among v[0..n). */
static bool listed(char *const *v, size_t n, const char *uuid)
{
    for (size_t k = 0; k < n; k++) {
        if (strcmp(v[k], uuid) == 0)
            return true;
    }
    return false;
}

/* An attempt the controller stopped listing (it ended it without us: a lost
 * node) whose end is not yet known to be clean may still run on its GPUs, up
 * to its kill grace: they are dirty until it has ended, and when they are
 * not known (taken up from the journal, never listed since) every GPU is. */
static bool leaving(const struct att *a)
{
    return !a->listed && (a->phase == PH_RUNNING || a->phase == PH_ENDING);
}

/* Adds uuid to list[0..*n) unless there: 0 or GPO_ENOMEM. */
static int list_add(char **list, size_t *n, const char *uuid)
{
    if (listed(list, *n, uuid))
        return 0;
    if (!(list[*n] = strdup(uuid)))
        return GPO_ENOMEM;
    (*n)++;
    return 0;
}

int attempts_dirty(struct attempts *t, char ***ret, size_t *ret_n)
{
    unsigned ngpus = gpu_count(t->cfg.gpus);
    pthread_mutex_lock(&t->lock);
    size_t cap = 1 + ngpus, n = 0;
    for (size_t k = 0; k < t->n; k++)
        cap += t->v[k]->nuuids;
    char **list = calloc(cap, sizeof(*list));
    int rc = list ? 0 : GPO_ENOMEM;
    bool every = false;
    for (size_t k = 0; !rc && k < t->n; k++) {
        const struct att *a = t->v[k];
        bool gone_from_us = leaving(a);
        every |= gone_from_us && a->nuuids == 0;
        for (size_t g = 0;
             !rc && (gone_from_us || a->phase == PH_FINAL || a->phase == PH_HELD) && g < a->nuuids;
             g++) {
            if (gone_from_us || a->dirty[g])
                rc = list_add(list, &n, a->uuids[g]);
        }
    }
    pthread_mutex_unlock(&t->lock);
    for (unsigned i = 0; !rc && every && i < ngpus; i++) {
        struct gpu_info info;
        if (gpu_info(t->cfg.gpus, i, &info, NULL, 0) == 0)
            rc = list_add(list, &n, info.uuid);
    }
    if (rc) {
        strs_free(list, n);
        return rc;
    }
    *ret = list;
    *ret_n = n;
    return 0;
}

bool attempts_mig_in_use(struct attempts *t, const char *mig_uuid)
{
    bool used = false;
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; !used && k < t->n; k++) {
        const struct att *a = t->v[k];
        for (size_t g = 0; !used && a->mig_uuids && g < a->nuuids; g++)
            used = a->mig_uuids[g] && strcmp(a->mig_uuids[g], mig_uuid) == 0;
    }
    pthread_mutex_unlock(&t->lock);
    return used;
}

size_t attempts_active(struct attempts *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->n;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void attempts_wait(struct attempts *t, int64_t ms)
{
    pthread_mutex_lock(&t->lock);
    int *fds = calloc(t->n + 1, sizeof(*fds));
    bool *ready = calloc(t->n + 1, sizeof(*ready));
    // NOLINTNEXTLINE(bugprone-sizeof-expression): *of is a pointer (an array of them)
    struct att **of = calloc(t->n + 1, sizeof(*of));
    size_t n = 0;
    for (size_t k = 0; fds && ready && of && k < t->n; k++) {
        struct att *a = t->v[k];
        if (a->phase == PH_RUNNING && a->pidfd >= 0 && !a->exited) {
            fds[n] = a->pidfd;
            of[n++] = a;
        }
    }
    pthread_mutex_unlock(&t->lock);
    /* Only this thread (the monitor's) closes pidfds and frees attempts
     * that have one: of[] stays valid while it sleeps. */
    exits_wait(t->exits, fds, n, ms, ready);
    pthread_mutex_lock(&t->lock);
    for (size_t k = 0; k < n; k++)
        if (ready[k])
            of[k]->exited = true;
    pthread_mutex_unlock(&t->lock);
    free(fds);
    free(ready);
    free(of);
}

void attempts_wake(struct attempts *t)
{
    exits_wake(t->exits);
}
