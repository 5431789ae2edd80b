/*
 * err.h - the one error space of gpuorch.
 *
 * Every function that can fail returns 0 or a negative code from this file:
 * a negative errno value (GPO_EINVAL is -EINVAL), or one of a few project
 * codes below -GPO_EPROJECT (-4096), for failures no errno names. The codes
 * and their messages come from one X-macro table (libuv's UV_ERRNO_MAP
 * habit), so a code and its text cannot drift apart, and a code can travel
 * from any layer to any other without translation: the store's -ENOENT is
 * the core's GPO_ENOENT. Detail (the file, the field, the system call) goes
 * into the caller's error buffer (util/errbuf.h), not into the code.
 *
 * Out-parameters are set only on success.
 *
 * Out-of-memory policy (whole project): library code (src/core, src/cluster,
 * src/store, src/gpu, src/util, src/proto) returns GPO_ENOMEM and leaves its
 * inputs unchanged; the edges (the server, the agent, the CLI, the
 * simulator) decide: a request gets a 500 and nothing stored changes, a pass
 * is skipped and retried, a command exits with a message.
 */
#ifndef GPUORCH_BASE_ERR_H
#define GPUORCH_BASE_ERR_H

#include <errno.h>

/* Project codes start below this. */
#define GPO_EPROJECT 4096

/*
 * X(name, value, message). The errno rows give the message gpuorch prints
 * for that errno (shorter than strerror's, and the same on every libc); a
 * negative errno not listed here is described by the C library.
 */
#define GPO_ERRNO_MAP(X)                                                                           \
    X(EPERM, -EPERM, "operation not permitted")                                                    \
    X(ENOENT, -ENOENT, "not found")                                                                \
    X(EIO, -EIO, "input/output error")                                                             \
    X(E2BIG, -E2BIG, "over a size limit")                                                          \
    X(ENOMEM, -ENOMEM, "out of memory")                                                            \
    X(EACCES, -EACCES, "permission denied")                                                        \
    X(EBUSY, -EBUSY, "busy")                                                                       \
    X(EEXIST, -EEXIST, "already exists")                                                           \
    X(ENODEV, -ENODEV, "no such device")                                                           \
    X(EINVAL, -EINVAL, "invalid argument")                                                         \
    X(ENOSPC, -ENOSPC, "no space left on device")                                                  \
    X(EPIPE, -EPIPE, "the other end is gone")                                                      \
    X(ERANGE, -ERANGE, "value out of range")                                                       \
    X(ENAMETOOLONG, -ENAMETOOLONG, "name too long")                                                \
    X(ELIBACC, -ELIBACC, "a needed shared library was not found")                                  \
    X(ELIBBAD, -ELIBBAD, "a shared library lacks a needed function")                               \
    X(EOVERFLOW, -EOVERFLOW, "value too large")                                                    \
    X(ENOBUFS, -ENOBUFS, "buffer too small")                                                       \
    X(ENOTSUP, -ENOTSUP, "not supported")                                                          \
    X(ESHUTDOWN, -ESHUTDOWN, "shutting down")                                                      \
    X(ETIMEDOUT, -ETIMEDOUT, "timed out")                                                          \
    X(ECONNREFUSED, -ECONNREFUSED, "could not connect")                                            \
    X(ECANCELED, -ECANCELED, "stopped by the caller")                                              \
    X(EFENCED, -(GPO_EPROJECT + 1), "fenced: a newer leader epoch exists")                         \
    X(ETOONEW, -(GPO_EPROJECT + 2), "stored data is newer than this program")                      \
    X(ECORRUPT, -(GPO_EPROJECT + 3), "malformed stored data")                                      \
    X(ESYNTAX, -(GPO_EPROJECT + 4), "not in the expected format")                                  \
    X(EMODE, -(GPO_EPROJECT + 5), "the file is accessible by group or others")                     \
    X(ECRYPTO, -(GPO_EPROJECT + 6), "the crypto library could not be initialised")                 \
    X(ESTATE, -(GPO_EPROJECT + 7), "not allowed in the current state")                             \
    X(ETLS, -(GPO_EPROJECT + 8), "TLS setup failed")                                               \
    X(EUSAGE, -(GPO_EPROJECT + 9), "usage error")                                                  \
    X(EAPI, -(GPO_EPROJECT + 10), "the server answered an error")                                  \
    X(ENODRIVER, -(GPO_EPROJECT + 11), "GPU driver not loaded or of another version")              \
    X(EGPULOST, -(GPO_EPROJECT + 12), "the GPU is lost or needs a reset")

enum gpo_err {
    GPO_OK = 0,
#define GPO_ERR_ENUM(name, value, text) GPO_##name = (value),
    GPO_ERRNO_MAP(GPO_ERR_ENUM)
#undef GPO_ERR_ENUM
};

/* A static message for any code, never NULL: the table's, the C library's
 * for another negative errno, "unknown error" otherwise. */
const char *gpo_strerror(int err);

/* The code's name ("EINVAL"), or NULL when it has none in the table: for
 * tests and logs that print both. */
const char *gpo_errname(int err);

#endif
