/*
 * sigspec.h - Slurm's --signal=[B:]SIG[@SECS]: a signal sent SECS seconds
 * before a job's time limit, to the batch shell only with "B:". The job's
 * spec (cluster/jobspec.h) and the controller-agent spec (proto/proto.h)
 * both read and write it with these.
 */
#ifndef GPUORCH_UTIL_SIGSPEC_H
#define GPUORCH_UTIL_SIGSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIGSPEC_NUM_MAX      64
#define SIGSPEC_BEFORE_MAX   65535 /* seconds, Slurm's bound */
#define SIGSPEC_DEFAULT_SECS 60
#define SIGSPEC_TEXT_MAX     32 /* "B:VTALRM@65535" and its NUL fit */

struct sigspec {
    int32_t num;      /* 1..SIGSPEC_NUM_MAX */
    int32_t before_s; /* 0..SIGSPEC_BEFORE_MAX */
    bool batch_only;
};

/* Reads text: SIG a number or a name, with or without "SIG", any case.
 * 0, or GPO_EINVAL with a message naming what was expected (not the
 * field: the caller prefixes it); *ret set only on success. */
int sigspec_parse(const char *text, struct sigspec *ret, char *err, size_t errlen);

/* The canonical text ("B:USR1@60", a name where the number has one) into
 * buf (at least SIGSPEC_TEXT_MAX bytes); "" for num 0. */
void sigspec_format(const struct sigspec *s, char *buf, size_t len);

#endif
