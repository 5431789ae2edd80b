/*
 * exits.c - a shim's end as it happens, by pidfd (exits.h).
 */
#include "agent/exits.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/journal.h"
#include "base/err.h"
#include "base/banned.h"

struct exits {
    bool poll_only;
    bool unsupported; /* pidfd_open answered ENOSYS (or EPERM, from a seccomp filter) */
    int wakefd;       /* eventfd: exits_wake's counter */
};

int exits_new(bool poll_only, struct exits **ret)
{
    struct exits *x = calloc(1, sizeof(*x));
    if (!x)
        return GPO_ENOMEM;
    x->poll_only = poll_only;
    x->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (x->wakefd < 0) {
        int rc = -errno;
        free(x);
        return rc;
    }
    *ret = x;
    return 0;
}

void exits_free(struct exits *x)
{
    if (!x)
        return;
    close(x->wakefd);
    free(x);
}

/* pidfd_open(2) through syscall(2): glibc declares it from 2.36 only. */
static int pidfd_open_call(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

int exits_watch(struct exits *x, pid_t pid, uint64_t start_time)
{
    if (x->poll_only || x->unsupported)
        return GPO_ENOTSUP;
    if (pid <= 0)
        return GPO_ENOENT;
    int fd = pidfd_open_call(pid);
    if (fd < 0) {
        if (errno == ESRCH)
            return GPO_ENOENT;
        x->unsupported = true;
        return GPO_ENOTSUP;
    }
    /* The pidfd names whatever process had the pid at the open: the shim,
     * unless it ended and the pid went to another. The start time after
     * the open tells: the shim's, and alive, means the pidfd is its. */
    struct journal_attempt ja = {.pid = pid, .start_time = start_time};
    if (!journal_attempt_alive(&ja)) {
        close(fd);
        return GPO_ENOENT;
    }
    return fd;
}

bool exits_unsupported(const struct exits *x)
{
    return x->poll_only || x->unsupported;
}

void exits_wake(struct exits *x)
{
    uint64_t one = 1;
    /* EAGAIN: the counter is full, a wake is pending anyway. */
    while (write(x->wakefd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

int exits_wait(struct exits *x, const int *fds, size_t n, int64_t ms, bool *ready)
{
    struct pollfd one = {.fd = -1}, *pfd = n ? calloc(n + 1, sizeof(*pfd)) : &one;
    size_t m = pfd ? n : 0; /* out of memory: a plain sleep, the pidfds looked at next time */
    if (!pfd)
        pfd = &one;
    pfd[0] = (struct pollfd){.fd = x->wakefd, .events = POLLIN};
    for (size_t k = 0; k < m; k++)
        pfd[k + 1] = (struct pollfd){.fd = fds[k], .events = POLLIN};
    for (size_t k = 0; k < n; k++)
        ready[k] = false;
    int timeout = ms < 0 ? 0 : ms > INT32_MAX ? INT32_MAX : (int)ms;
    int r = poll(pfd, m + 1, timeout), rc = r < 0 && errno != EINTR ? -errno : 0;
    uint64_t count;
    if (r > 0 && (pfd[0].revents & POLLIN))
        while (read(x->wakefd, &count, sizeof(count)) < 0 && errno == EINTR)
            ;
    for (size_t k = 0; r > 0 && k < m; k++)
        ready[k] = (pfd[k + 1].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    if (pfd != &one)
        free(pfd);
    return rc;
}
