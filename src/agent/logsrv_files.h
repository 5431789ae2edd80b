/*
 * logsrv_files.h - the log server's look at an attempt's files
 * (logsrv.h): attempt.json, the log file's own open and check, and a log
 * the shim is still creating. These calls may block (they touch the file
 * system): the log server makes them on worker threads, never on its
 * polling thread.
 */
#ifndef GPUORCH_AGENT_LOGSRV_FILES_H
#define GPUORCH_AGENT_LOGSRV_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* From dir/attempt.json: the attempt's uid and the path of `stream` into
 * path (pathlen bytes). 0; GPO_ENOENT (no such attempt); GPO_EINVAL with a
 * message (a malformed file, or one the launcher did not write: only root
 * or the agent's own user may own it, since the uid in it decides which
 * files may be read). */
int logsrv_attempt_load(const char *dir, const char *stream, uid_t *ret_uid, char *path,
                        size_t pathlen, char *err, size_t errlen);

/* Opens a log file for reading (O_RDONLY|O_NOCTTY|O_NONBLOCK, close-on-exec)
 * and checks it after the open. 0 and *ret_fd, *ret_size; GPO_ENOENT (not
 * there yet); GPO_EPERM (not a regular file owned by uid); -errno. */
int logsrv_file_open(const char *path, uid_t uid, int *ret_fd, int64_t *ret_size);

/* Whether path, refused as not the job's, is a default log the shim is
 * still giving to the job's user: root's, empty, directly in the attempt's
 * directory dir, while the attempt runs (no status file). */
bool logsrv_being_created(const char *path, const char *dir);

#endif
