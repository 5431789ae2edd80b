/*
 * shim_status.c - the agent's side of the shim: reading the outcome it left
 * in an attempt's directory (shim.h). The shim itself (shim.c) writes it
 * without jansson: it links libc only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/shim.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "base/banned.h"

/* The status file is tiny; a bigger one is not ours. */
#define STATUS_MAX_BYTES 65536

struct status_doc {
    int64_t exit_code, signal, started_ms, ended_ms, pid, oom_kills, fenced_ms;
    char *error;
    enum jsonv_presence has_exit, has_signal;
};

static const struct jsonv_field status_fields[] = {
    {.name = "exit_code",
     .kind = JSONV_INT64,
     .flags = JSONV_PRESENCE,
     .offset = offsetof(struct status_doc, exit_code),
     .min = 0,
     .max = 255,
     .presence_offset = offsetof(struct status_doc, has_exit)},
    {.name = "signal",
     .kind = JSONV_INT64,
     .flags = JSONV_PRESENCE,
     .offset = offsetof(struct status_doc, signal),
     .min = 1,
     .max = 64,
     .presence_offset = offsetof(struct status_doc, has_signal)},
    {.name = "error",
     .kind = JSONV_STRING,
     .offset = offsetof(struct status_doc, error),
     .max = 4096},
    {.name = "started_ms",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct status_doc, started_ms),
     .min = 0,
     .max = INT64_MAX},
    {.name = "ended_ms",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct status_doc, ended_ms),
     .min = 0,
     .max = INT64_MAX},
    {.name = "pid",
     .kind = JSONV_INT64,
     .flags = JSONV_REQUIRED,
     .offset = offsetof(struct status_doc, pid),
     .min = 0,
     .max = INT32_MAX},
    {.name = "oom_kills",
     .kind = JSONV_INT64,
     .offset = offsetof(struct status_doc, oom_kills),
     .min = 0,
     .max = INT64_MAX},
    {.name = "fenced_ms",
     .kind = JSONV_INT64,
     .offset = offsetof(struct status_doc, fenced_ms),
     .min = 1,
     .max = INT64_MAX},
};
#define NSTATUS_FIELDS (sizeof(status_fields) / sizeof(status_fields[0]))

static int decode_status(const char *path, const char *buf, size_t len, struct shim_status *ret,
                         char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: %s", path, jerr.text);
    struct status_doc d = {0};
    char msg[256];
    int rc = jsonv_decode(o, status_fields, NSTATUS_FIELDS, &d, msg, sizeof(msg));
    json_decref(o);
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    if (rc)
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: %s", path, msg);
    if ((d.has_exit == JSONV_GIVEN) == (d.has_signal == JSONV_GIVEN)) {
        jsonv_release(status_fields, NSTATUS_FIELDS, &d);
        return errbuf_set(err, errlen, GPO_ECORRUPT, "%s: expected one of exit_code and signal",
                          path);
    }
    *ret = (struct shim_status){.signaled = d.has_signal == JSONV_GIVEN,
                                .exit_code = (int)d.exit_code,
                                .signal = (int)d.signal,
                                .started_ms = d.started_ms,
                                .ended_ms = d.ended_ms,
                                .pid = (pid_t)d.pid,
                                .oom_kills = (uint64_t)d.oom_kills,
                                .fenced_ms = d.fenced_ms};
    snprintf(ret->error, sizeof(ret->error), "%s", d.error ? d.error : "");
    jsonv_release(status_fields, NSTATUS_FIELDS, &d);
    return 0;
}

int shim_read_status(const char *dir, struct shim_status *ret, char *err, size_t errlen)
{
    if (!dir || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "shim_read_status: NULL argument");
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/status", dir) >= sizeof(path))
        return errbuf_set(err, errlen, GPO_EINVAL, "%s: path too long", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
                   ? errbuf_set(err, errlen, GPO_ENOENT, "%s: no status yet", path)
                   : errbuf_set(err, errlen, GPO_EIO, "open %s: %s", path, strerror(errno));
    char *buf = malloc(STATUS_MAX_BYTES + 1);
    size_t len = 0;
    ssize_t n = 0;
    while (buf && len < STATUS_MAX_BYTES + 1 &&
           ((n = read(fd, buf + len, STATUS_MAX_BYTES + 1 - len)) > 0 || (n < 0 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    int e = errno;
    close(fd);
    int rc;
    if (!buf)
        rc = errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    else if (n < 0)
        rc = errbuf_set(err, errlen, GPO_EIO, "read %s: %s", path, strerror(e));
    else if (len > STATUS_MAX_BYTES)
        rc = errbuf_set(err, errlen, GPO_ECORRUPT, "%s: larger than %d bytes", path,
                        STATUS_MAX_BYTES);
    else
        rc = decode_status(path, buf, len, ret, err, errlen);
    free(buf);
    return rc;
}
