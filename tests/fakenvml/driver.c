/*
 * driver.c - the fake NVML's root-keeping process lister (driver.h).
 */
#define _GNU_SOURCE
#include "fakenvml/driver.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fakenvml/nvml_abi.h"
#include "base/banned.h"

#define PIDS_MAX 65536u /* the most processes one answer carries */

struct request {
    unsigned index;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
};

static struct {
    pthread_mutex_t lock;
    int fd; /* -1: no driver */
} drv = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static int io_all(int fd, void *buf, size_t len, bool out)
{
    char *p = buf;
    while (len) {
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void serve(int fd, driver_find_fn find) __attribute__((noreturn));
static void serve(int fd, driver_find_fn find)
{
    struct request q;
    while (io_all(fd, &q, sizeof(q), false) == 0) {
        q.uuid[sizeof(q.uuid) - 1] = '\0';
        struct fake_proc *pids = NULL;
        unsigned n = 0;
        if (find(q.uuid, q.index, &pids, &n) != 0)
            n = 0;
        if (n > PIDS_MAX)
            n = PIDS_MAX;
        int bad =
            io_all(fd, &n, sizeof(n), true) || (n && io_all(fd, pids, n * sizeof(*pids), true));
        free(pids);
        if (bad)
            break;
    }
    _exit(0);
}

int driver_start(driver_find_fn find)
{
    const char *want = getenv("FAKENVML_DRIVER");
    if (!want || strcmp(want, "1") != 0 || geteuid() != 0 || drv.fd >= 0)
        return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        fprintf(stderr, "fakenvml: driver: socketpair: %s\n", strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
            _exit(0);
        prctl(PR_SET_NAME, "fakenvml-drv", 0, 0, 0);
        if (dup3(sv[1], 3, O_CLOEXEC) < 0)
            _exit(1);
        close_range(4, ~0U, 0);
        serve(3, find);
    }
    int e = errno;
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        fprintf(stderr, "fakenvml: driver: fork: %s\n", strerror(e));
        return -1;
    }
    drv.fd = sv[0];
    return 0;
}

bool driver_running(void)
{
    return drv.fd >= 0;
}

int driver_processes(const char *uuid, unsigned index, struct fake_proc **ret_pids, unsigned *ret_n)
{
    struct request q = {.index = index};
    snprintf(q.uuid, sizeof(q.uuid), "%s", uuid);
    pthread_mutex_lock(&drv.lock);
    unsigned n = 0;
    struct fake_proc *pids = NULL;
    int rc = io_all(drv.fd, &q, sizeof(q), true) || io_all(drv.fd, &n, sizeof(n), false) ? -1 : 0;
    if (rc == 0 && n > PIDS_MAX)
        rc = -1;
    if (rc == 0 && !(pids = malloc((n + 1) * sizeof(*pids))))
        rc = -1;
    if (rc == 0 && n && io_all(drv.fd, pids, n * sizeof(*pids), false))
        rc = -1;
    pthread_mutex_unlock(&drv.lock);
    if (rc) {
        free(pids);
        return -1;
    }
    *ret_pids = pids;
    *ret_n = n;
    return 0;
}
