/*
 * monotime.c - the monotonic clock in milliseconds (monotime.h).
 */
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/monotime.h"
#include "base/banned.h"

int64_t monotime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void monotime_boot_id(char buf[MONOTIME_BOOT_ID_MAX + 1])
{
    buf[0] = '\0';
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, MONOTIME_BOOT_ID_MAX);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}
