/*
 * steps_run.c - one step's thread (steps_int.h): each task's environment,
 * its start through the privileged half, and the relay of its keeper's
 * frames into the step's stream.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/slurmenv.h"
#include "agent/steps_int.h"
#include "util/stepframe.h"
#include "base/banned.h"

/* What every task gets from us, whatever the client's environment says
 * (and every SLURM_* name: slurmenv.h's). */
static const char *const ours[] = {
    "GPUORCH_NODE",      "GPUORCH_NODE_RANK",    "GPUORCH_STEP_ID",        "GPUORCH_GPUS",
    "GPUORCH_GPU_MILLI", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "RANK",
    "LOCAL_RANK",        "WORLD_SIZE",           "LOCAL_WORLD_SIZE",       "MASTER_ADDR",
    "MASTER_PORT",
};

static bool is_ours(const char *kv)
{
    const char *eq = strchr(kv, '=');
    size_t n = eq ? (size_t)(eq - kv) : strlen(kv);
    char name[128];
    if (n >= sizeof(name))
        return false;
    memcpy(name, kv, n);
    name[n] = '\0';
    if (slurmenv_reserved(name))
        return true;
    for (size_t k = 0; k < sizeof(ours) / sizeof(ours[0]); k++) {
        if (strcmp(ours[k], name) == 0)
            return true;
    }
    return false;
}

/* Task l's GPUs: its own gpus_per_task of the node's, or all of them. */
static int gpu_env(const struct step *st, uint32_t l, struct launch_strv *e)
{
    const struct steps_request *r = &st->req;
    size_t from = r->gpus_per_task ? (size_t)l * r->gpus_per_task : 0;
    size_t n = r->gpus_per_task ? r->gpus_per_task : st->nuuids;
    size_t len = 1;
    for (size_t k = from; k < from + n; k++)
        len += strlen(st->uuids[k]) + 1;
    char *list = calloc(1, len);
    if (!list)
        return GPO_ENOMEM;
    size_t at = 0;
    for (size_t k = from; k < from + n; k++)
        at += (size_t)snprintf(list + at, len - at, "%s%s", k > from ? "," : "", st->uuids[k]);
    int rc = launch_strv_add(e, "CUDA_VISIBLE_DEVICES=%s", list);
    rc = rc ? rc : launch_strv_add(e, "NVIDIA_VISIBLE_DEVICES=%s", n ? list : "void");
    rc = rc ? rc : launch_strv_add(e, "GPUORCH_GPUS=%s", list);
    if (!rc && n && st->milli < 1000)
        rc = launch_strv_add(e, "GPUORCH_GPU_MILLI=%" PRIu32, st->milli);
    free(list);
    return rc;
}

/* Task l of this node's: the client's environment, then ours. */
static int task_env(const struct step *st, uint32_t l, struct launch_strv *e)
{
    const struct steps_request *r = &st->req;
    uint32_t rank = r->first_task + l;
    int rc = 0;
    for (size_t k = 0; !rc && k < r->nenv; k++) {
        if (strchr(r->env[k], '=') && !is_ours(r->env[k]))
            rc = launch_strv_add(e, "%s", r->env[k]);
    }
    rc = rc ? rc : launch_strv_add(e, "GPUORCH_NODE=%s", st->node);
    rc = rc ? rc : launch_strv_add(e, "GPUORCH_NODE_RANK=%" PRIu32, r->node_index);
    rc = rc ? rc : launch_strv_add(e, "GPUORCH_STEP_ID=%" PRIu32, r->step);
    rc = rc ? rc : gpu_env(st, l, e);
    const struct {
        const char *name;
        uint32_t value;
    } nums[] = {
        {"RANK", rank},
        {"LOCAL_RANK", l},
        {"WORLD_SIZE", r->ntasks},
        {"LOCAL_WORLD_SIZE", r->local_tasks},
        {"MASTER_PORT", r->master_port},
    };
    for (size_t k = 0; !rc && k < sizeof(nums) / sizeof(nums[0]); k++)
        rc = launch_strv_add(e, "%s=%" PRIu32, nums[k].name, nums[k].value);
    /* Slurm's names for the same, and the job's: SLURM_PROCID, ... */
    struct launch_config cfg = {.node = st->node, .as_root = st->as_root};
    struct slurmenv_task t = {
        .procid = rank, .localid = l, .ntasks = r->ntasks, .step = (int64_t)r->step};
    rc = rc ? rc : slurmenv_add(&cfg, &st->att, &t, e);
    return rc ? rc : launch_strv_add(e, "MASTER_ADDR=%s", r->master_addr);
}

/* One task's end of the relay. */
struct task {
    uint32_t rank;
    int fd; /* -1: its last frame is out */
    uint8_t buf[STEPFRAME_HEAD + STEPFRAME_DATA_MAX];
    size_t len;
};

/* A frame for the stream, under the step's lock; the stream is woken. */
static void emit(struct step *st, int type, uint32_t task, const void *data, size_t n)
{
    pthread_mutex_lock(&st->mu);
    /* Out of memory loses the frame; the step goes on. */
    (void)steps_out_frame(st, type, task, data, n);
    pthread_mutex_unlock(&st->mu);
    http_stream_wake(st->stream);
}

static void emit_error(struct step *st, uint32_t task, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void emit_error(struct step *st, uint32_t task, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    emit(st, STEPFRAME_ERROR, task, msg,
         n < 0                      ? 0
         : (size_t)n >= sizeof(msg) ? sizeof(msg) - 1
                                    : (size_t)n);
}

/* Starts task l; its keeper's socket, or -1 after an ERROR frame. */
static int spawn(struct step *st, uint32_t l)
{
    struct launch_strv env = {0};
    uint32_t rank = st->req.first_task + l;
    char err[PRIV_MSG_MAX] = "";
    int fd = -1;
    int rc = task_env(st, l, &env);
    if (!rc) {
        struct priv_step ps = {.job = st->job,
                               .attempt = st->attempt,
                               .workdir = st->req.workdir,
                               .argv = (const char *const *)st->req.argv,
                               .argc = st->req.argc,
                               .env = (const char *const *)env.v,
                               .nenv = env.n,
                               .pty = st->req.pty};
        rc = priv_step_spawn(st->priv, &ps, &fd, err, sizeof(err));
    }
    launch_strv_release(&env);
    if (rc) {
        emit_error(st, rank, "task %" PRIu32 " (node %s): not started: %s", rank, st->node,
                   err[0] ? err : gpo_strerror(rc));
        return -1;
    }
    return fd;
}

/* Reads what task t's keeper sent and passes its whole frames on. False
 * once its last frame (or its loss) is out. */
static bool relay(struct step *st, struct task *t)
{
    ssize_t n = read(t->fd, t->buf + t->len, sizeof(t->buf) - t->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0) {
        emit_error(st, t->rank,
                   "task %" PRIu32 " (node %s): lost: its keeper ended without a "
                   "status (the job's end, or the node's agent, killed it)",
                   t->rank, st->node);
        return false;
    }
    t->len += (size_t)n;
    size_t at = 0;
    bool more = true;
    while (more && t->len - at >= STEPFRAME_HEAD) {
        struct stepframe f;
        if (stepframe_parse(t->buf + at, &f) != 0) {
            emit_error(st, t->rank, "task %" PRIu32 " (node %s): its keeper sent a bad frame",
                       t->rank, st->node);
            return false;
        }
        if (t->len - at < STEPFRAME_HEAD + f.len)
            break;
        emit(st, f.type, t->rank, t->buf + at + STEPFRAME_HEAD, f.len);
        more = f.type != STEPFRAME_EXIT && f.type != STEPFRAME_ERROR;
        at += STEPFRAME_HEAD + f.len;
    }
    memmove(t->buf, t->buf + at, t->len - at);
    t->len -= at;
    return more;
}

/* A pty step's input, as much as its keeper takes now (its socket does not
 * block the step's thread: a task that reads nothing holds only its
 * input). */
static void feed(struct step *st, int fd)
{
    pthread_mutex_lock(&st->mu);
    ssize_t n = st->in_len ? send(fd, st->in, st->in_len, MSG_DONTWAIT | MSG_NOSIGNAL) : 0;
    if (n > 0) {
        memmove(st->in, st->in + n, st->in_len - (size_t)n);
        st->in_len -= (size_t)n;
    }
    pthread_mutex_unlock(&st->mu);
}

static bool input_waits(struct step *st)
{
    pthread_mutex_lock(&st->mu);
    bool v = st->in_len > 0;
    pthread_mutex_unlock(&st->mu);
    return v;
}

/* Waits for room in the stream's buffer; false when the step is cancelled. */
static bool wait_room(struct step *st)
{
    pthread_mutex_lock(&st->mu);
    while (st->out_len > STEPS_BUF_MAX && !st->cancelled)
        pthread_cond_wait(&st->cond, &st->mu);
    bool go = !st->cancelled;
    pthread_mutex_unlock(&st->mu);
    return go;
}

static void relay_all(struct step *st, struct task *tasks, uint32_t n)
{
    uint32_t open = 0;
    for (uint32_t k = 0; k < n; k++)
        open += tasks[k].fd >= 0;
    struct pollfd *p = calloc(n + 1, sizeof(*p));
    while (p && open && wait_room(st)) {
        bool in = st->req.pty && input_waits(st);
        for (uint32_t k = 0; k < n; k++)
            p[k] = (struct pollfd){.fd = tasks[k].fd,
                                   .events = (short)(POLLIN | (in && k == 0 ? POLLOUT : 0))};
        p[n] = (struct pollfd){.fd = st->wake_fd, .events = POLLIN};
        int r = poll(p, n + 1, 1000);
        if (r == 0) /* a client that left is noticed at a wake */
            http_stream_wake(st->stream);
        uint64_t woken;
        if (r > 0 && p[n].revents && read(st->wake_fd, &woken, sizeof(woken)) < 0) {
        } /* new input, or cancelled (wait_room sees that) */
        if (r > 0 && (p[0].revents & POLLOUT) && tasks[0].fd >= 0)
            feed(st, tasks[0].fd);
        for (uint32_t k = 0; r > 0 && k < n; k++) {
            if ((p[k].revents & ~POLLOUT) && !relay(st, &tasks[k])) {
                close(tasks[k].fd);
                tasks[k].fd = -1;
                open--;
            }
        }
    }
    free(p);
}

void *steps_run(void *arg)
{
    struct step *st = arg;
    uint32_t n = st->req.local_tasks;
    struct task *tasks = calloc(n, sizeof(*tasks));
    bool failed = !tasks;
    if (!tasks)
        emit_error(st, st->req.first_task, "node %s: out of memory", st->node);
    for (uint32_t k = 0; tasks && k < n; k++) {
        tasks[k].rank = st->req.first_task + k;
        tasks[k].fd = failed ? -1 : spawn(st, k);
        failed |= tasks[k].fd < 0;
    }
    /* A step whose task could not start ends (srun's rule): the others are
     * killed, and their ends are reported as such. */
    const unsigned char kill9 = SIGKILL;
    for (uint32_t k = 0; failed && tasks && k < n; k++) {
        if (tasks[k].fd >= 0 && write(tasks[k].fd, &kill9, 1) != 1) {
            close(tasks[k].fd);
            tasks[k].fd = -1;
        }
    }
    if (tasks && !failed && st->req.pty && st->req.rows && st->req.cols) {
        uint8_t f[STEPFRAME_HEAD + 4];
        stepframe_head(&(struct stepframe){.type = STEPFRAME_WINSIZE, .len = 4}, f);
        stepframe_winsize_data((uint16_t)st->req.rows, (uint16_t)st->req.cols, f + STEPFRAME_HEAD);
        pthread_mutex_lock(&st->mu);
        (void)steps_in_frames(st, f, sizeof(f)); /* before any input: it cannot be full */
        pthread_mutex_unlock(&st->mu);
    }
    if (tasks)
        relay_all(st, tasks, n);
    /* Cancelled (the client left, the attempt ended): closing the sockets
     * makes each keeper end its task. */
    for (uint32_t k = 0; tasks && k < n; k++) {
        if (tasks[k].fd >= 0)
            close(tasks[k].fd);
    }
    free(tasks);
    pthread_mutex_lock(&st->mu);
    st->done = true;
    pthread_mutex_unlock(&st->mu);
    http_stream_wake(st->stream);
    steps_unref(st);
    return NULL;
}
