/*
 * privsrv_read.c - the privileged process's requests that only read
 * (privsrv.h): which attempts processes belong to, and opening an attempt's
 * log for the log server; and the one message with a descriptor that both
 * sides of the socket send.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/privsrv.h"
#include "agent/privsrv_check.h"
#include "util/errbuf.h"
#include "base/banned.h"

/* Largest /proc/PID/environ read: the agent puts GPUORCH_* early, but the
 * job's own variables come first in the file when it set many. */
#define ENVIRON_MAX ((size_t)256 * 1024)
/* A log open's child gives up after this (an open stuck in the kernel
 * cannot be interrupted; one that sleeps can). */
#define LOG_CHILD_ALARM_S 60

/* ==== one message, maybe with a descriptor ==== */

ssize_t privsrv_send(int sock, const void *buf, size_t len, int pass_fd)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        struct cmsghdr h;
        char bytes[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pass_fd >= 0) {
        m.msg_control = ctl.bytes;
        m.msg_controllen = sizeof(ctl.bytes);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    ssize_t n;
    while ((n = sendmsg(sock, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    return n;
}

ssize_t privsrv_recv(int sock, void *buf, size_t len, int *ret_fd)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    union {
        struct cmsghdr h;
        char bytes[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.bytes, .msg_controllen = sizeof(ctl)};
    *ret_fd = -1;
    ssize_t n;
    while ((n = recvmsg(sock, &m, MSG_TRUNC | MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
            c->cmsg_len < CMSG_LEN(sizeof(int)))
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*ret_fd < 0)
                *ret_fd = fd;
            else
                close(fd); /* one descriptor per message, never more */
        }
    }
    if (n >= 0 && (m.msg_flags & MSG_CTRUNC) && *ret_fd < 0)
        n = -1;
    return n;
}

/* ==== attribute ==== */

/* The attempt process pid's environment names, if this node launched it. */
static bool attribute_one(const char *attempts, pid_t pid, char *buf, uint64_t *job,
                          uint32_t *attempt)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t len = 0;
    ssize_t r;
    while (len < ENVIRON_MAX &&
           ((r = read(fd, buf + len, ENVIRON_MAX - len)) > 0 || (r < 0 && errno == EINTR)))
        len += r > 0 ? (size_t)r : 0;
    close(fd);
    uint64_t j;
    uint32_t a;
    if (!privsrv_check_environ(buf, len, &j, &a))
        return false;
    char dir[PRIV_PATH_MAX + 64];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s/%" PRIu64 ".%" PRIu32, attempts, j, a);
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return false;
    *job = j;
    *attempt = a;
    return true;
}

void privsrv_do_attribute(const char *attempts, const void *req, struct priv_reply *rep)
{
    const struct priv_req_attribute *q = req;
    if ((rep->rc = privsrv_check_attribute(q, rep->msg, sizeof(rep->msg))))
        return;
    char *buf = malloc(ENVIRON_MAX);
    if (!buf) {
        rep->rc = errbuf_set(rep->msg, sizeof(rep->msg), GPO_ENOMEM, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < q->n; i++) {
        uint64_t job = 0;
        uint32_t attempt = 0;
        if (attribute_one(attempts, (pid_t)q->pids[i], buf, &job, &attempt)) {
            rep->jobs[i] = job;
            rep->attempts[i] = attempt;
        }
    }
    free(buf);
}

/* ==== log open ==== */

/* From ATTEMPTS/J.A/attempt.json, which only the privileged process
 * writes: the attempt's uid and the path of its log `stream`. */
static int log_target(const char *dir, const char *stream, uid_t *ret_uid, char *path,
                      size_t pathlen, char *msg, size_t len)
{
    char file[PRIV_PATH_MAX + 128];
    snprintf(file, sizeof(file), "%s/attempt.json", dir);
    json_error_t jerr;
    json_t *o = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return access(file, F_OK) != 0
                   ? errbuf_set(msg, len, GPO_ENOENT, "%s: no such attempt", dir)
                   : errbuf_set(msg, len, GPO_EIO, "%s: %s", file, jerr.text);
    char why[256];
    int rc = privsrv_check_attempt_log(o, dir, stream, ret_uid, path, pathlen, why, sizeof(why));
    if (rc)
        errbuf_set(msg, len, GPO_EIO, "%s: %s", file, why);
    json_decref(o);
    return rc;
}

/* The child's open: by O_PATH (no device or FIFO is opened for real by
 * it), checked, then opened for reading through /proc/self/fd. */
static int open_checked(const char *path, uid_t uid, int *ret_fd, int64_t *ret_size)
{
    int pfd = open(path, O_PATH | O_CLOEXEC);
    if (pfd < 0)
        return errno == ENOTDIR ? GPO_ENOENT : -errno;
    struct stat st, st2;
    int rc = fstat(pfd, &st) != 0 ? -errno : privsrv_check_log_file(st.st_mode, st.st_uid, uid);
    int fd = -1;
    if (!rc) {
        char again[64];
        snprintf(again, sizeof(again), "/proc/self/fd/%d", pfd);
        fd = open(again, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        rc = fd < 0                                               ? -errno
             : fstat(fd, &st2) != 0                               ? -errno
             : st2.st_ino != st.st_ino || st2.st_dev != st.st_dev ? GPO_EPERM
                                                                  : 0;
    }
    close(pfd);
    if (rc) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *ret_fd = fd;
    *ret_size = (int64_t)st2.st_size;
    return 0;
}

/* In the forked child: open, answer on sock with the descriptor, exit. */
static void log_child(int sock, const char *path, uid_t uid) __attribute__((noreturn));
static void log_child(int sock, const char *path, uid_t uid)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    alarm(LOG_CHILD_ALARM_S);
    struct priv_reply rep;
    memset(&rep, 0, sizeof(rep));
    int fd = -1;
    int64_t size = 0;
    rep.rc = open_checked(path, uid, &fd, &size);
    rep.size = size;
    if (rep.rc)
        errbuf_set(rep.msg, sizeof(rep.msg), rep.rc, "%s: %s", path, gpo_strerror(rep.rc));
    privsrv_send(sock, &rep, sizeof(rep), fd);
    _exit(0);
}

int privsrv_do_log_open(const char *attempts, const void *req, struct priv_reply *rep)
{
    const struct priv_req_log *q = req;
    char *msg = rep->msg;
    size_t len = sizeof(rep->msg);
    if ((rep->rc = privsrv_check_log(q, msg, len)))
        return -1;
    char dir[PRIV_PATH_MAX + 64], path[PRIV_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/%" PRIu64 ".%" PRIu32, attempts, q->job, q->attempt);
    uid_t uid = 0;
    const char *stream = q->stream == PRIV_STREAM_STDOUT ? "stdout" : "stderr";
    if ((rep->rc = log_target(dir, stream, &uid, path, sizeof(path), msg, len)))
        return -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        rep->rc = errbuf_set(msg, len, GPO_EIO, "socketpair: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* Only its own end stays open; it is reaped by the serving loop. */
        if (dup3(sv[1], 3, O_CLOEXEC) < 0)
            _exit(1);
        close_range(4, ~0U, 0);
        log_child(3, path, uid);
    }
    int e = errno;
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        rep->rc = errbuf_set(msg, len, GPO_EIO, "fork: %s", strerror(e));
        return -1;
    }
    return sv[0];
}
