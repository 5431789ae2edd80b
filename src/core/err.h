/*
 * err.h - error codes of the core library.
 *
 * Every core function that can fail returns 0 or one of these negative codes;
 * out-parameters are set only on success. The messages come from one X-macro
 * table, so a code and its text cannot drift apart.
 *
 * Out-of-memory policy (whole project): library code (src/core, src/store,
 * src/gpu) returns GPO_ENOMEM and leaves its inputs unchanged; the edges (the
 * server, the agent, the CLI, the simulator) treat it as fatal and exit with a
 * message, since a scheduler that cannot allocate cannot make a safe decision.
 */
#ifndef GPUORCH_CORE_ERR_H
#define GPUORCH_CORE_ERR_H

#define GPO_ERRNO_MAP(X)                                                                           \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(ERANGE, -3, "value out of range")                                                            \
    X(ENOTFOUND, -4, "not found")                                                                  \
    X(EEXIST, -5, "already exists")                                                                \
    X(ELIMIT, -6, "over a size limit")

enum gpo_err {
    GPO_OK = 0,
#define GPO_ERR_ENUM(name, value, text) GPO_##name = (value),
    GPO_ERRNO_MAP(GPO_ERR_ENUM)
#undef GPO_ERR_ENUM
};

/* Returns a static, never NULL, message for a code (unknown codes included). */
const char *gpo_strerror(int err);

#endif
