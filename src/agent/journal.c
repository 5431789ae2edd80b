/*
 * journal.c - the attempt journal: an append-only file of JSON lines, each
 * fdatasync'd before the call that wrote it returns (see journal.h).
 *
 * Lines:
 *   {"op":"begin","job":J,"attempt":A,"dir":"..."[,"port":P]}
 *   {"op":"started","job":J,"attempt":A,"pid":P,"start_time":T}
 *   {"op":"signalled","job":J,"attempt":A}
 *   {"op":"fenced","job":J,"attempt":A,"unreached_ms":M}
 *   {"op":"ended","job":J,"attempt":A}
 * An "ended" line with no "begin" before it is what compaction leaves of an
 * ended attempt.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "agent/journal.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "base/banned.h"

/* A line holds at most a path and a few numbers; anything longer is not ours. */
#define LINE_MAX_BYTES (JOURNAL_PATH_MAX * 2 + 256)

struct entry {
    uint64_t job;
    uint32_t attempt;
    bool ended;
    bool signalled;       /* its --signal was sent */
    int64_t unreached_ms; /* fenced (journal_fenced) after so long unreached; 0: not fenced */
    pid_t pid;
    uint64_t start_time;
    uint32_t port; /* a replica's; 0: none */
    char *dir;     /* NULL once ended: its details are no longer needed */
};

struct journal {
    pthread_mutex_t mu;
    char *dir;
    char *path;
    int fd;      /* O_APPEND */
    int lock_fd; /* holds the flock */
    off_t size;  /* end of the last whole line */
    bool broken; /* a failed append could not be undone: refuse more */
    struct entry *v;
    size_t n, cap;
};

/* GPO_EIO (GPO_ENOMEM for ENOMEM) with "CALL PATH: reason" for errno e. */
static int fail_errno(char *err, size_t errlen, const char *call, const char *path, int e)
{
    return errbuf_set(err, errlen, e == ENOMEM ? GPO_ENOMEM : GPO_EIO, "%s %s: %s", call, path,
                      strerror(e));
}

static int fail_sys(char *err, size_t errlen, const char *call, const char *path)
{
    return fail_errno(err, errlen, call, path, errno);
}

static char *path_join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + 1 + strlen(name) + 1;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s/%s", dir, name);
    return p;
}

static struct entry *find(struct journal *j, uint64_t job, uint32_t attempt)
{
    /* Newest first: the attempts a caller asks about are mostly recent. */
    for (size_t i = j->n; i-- > 0;)
        if (j->v[i].job == job && j->v[i].attempt == attempt)
            return &j->v[i];
    return NULL;
}

/* Appends an entry; takes `dir` (may be NULL) only on success. */
// NOLINTNEXTLINE(readability-non-const-parameter): the entry takes dir and frees it
static int push(struct journal *j, uint64_t job, uint32_t attempt, char *dir)
{
    if (j->n == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 64;
        struct entry *v = realloc(j->v, cap * sizeof(*v));
        if (!v)
            return GPO_ENOMEM;
        j->v = v;
        j->cap = cap;
    }
    j->v[j->n++] = (struct entry){.job = job, .attempt = attempt, .dir = dir};
    return 0;
}

/* ---- reading back ---- */

static int get_uint(const json_t *o, const char *key, uint64_t max, uint64_t *ret)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max)
        return GPO_ECORRUPT;
    *ret = (uint64_t)json_integer_value(v);
    return 0;
}

/* Applies one parsed line to the in-memory index; a message on failure. */
static int apply_line(struct journal *j, const json_t *o, const char **what)
{
    uint64_t job, attempt;
    const char *op = json_string_value(json_object_get(o, "op"));
    if (!op || get_uint(o, "job", INT64_MAX, &job) || get_uint(o, "attempt", UINT32_MAX, &attempt))
        return *what = "expected op, job and attempt", GPO_ECORRUPT;
    struct entry *e = find(j, job, (uint32_t)attempt);
    if (strcmp(op, "begin") == 0) {
        const char *dir = json_string_value(json_object_get(o, "dir"));
        if (!dir || !*dir || strlen(dir) >= JOURNAL_PATH_MAX)
            return *what = "begin without a valid dir", GPO_ECORRUPT;
        if (e)
            return *what = "attempt begun twice", GPO_ECORRUPT;
        uint64_t port = 0;
        if (json_object_get(o, "port") && get_uint(o, "port", 65535, &port))
            return *what = "begin with a port out of range", GPO_ECORRUPT;
        char *copy = strdup(dir);
        if (!copy || push(j, job, (uint32_t)attempt, copy) != 0) {
            free(copy);
            return *what = "out of memory", GPO_ENOMEM;
        }
        j->v[j->n - 1].port = (uint32_t)port;
    } else if (strcmp(op, "started") == 0) {
        uint64_t pid, start_time;
        if (get_uint(o, "pid", INT_MAX, &pid) || pid == 0 ||
            get_uint(o, "start_time", INT64_MAX, &start_time))
            return *what = "started without a valid pid and start_time", GPO_ECORRUPT;
        if (!e || e->ended)
            return *what = "started for an attempt not begun or already ended", GPO_ECORRUPT;
        e->pid = (pid_t)pid;
        e->start_time = start_time;
    } else if (strcmp(op, "signalled") == 0) {
        if (!e || e->ended)
            return *what = "signalled for an attempt not begun or already ended", GPO_ECORRUPT;
        e->signalled = true;
    } else if (strcmp(op, "fenced") == 0) {
        uint64_t ms;
        if (get_uint(o, "unreached_ms", INT64_MAX, &ms) || ms == 0)
            return *what = "fenced without a valid unreached_ms", GPO_ECORRUPT;
        if (!e || e->ended)
            return *what = "fenced for an attempt not begun or already ended", GPO_ECORRUPT;
        e->unreached_ms = (int64_t)ms;
    } else if (strcmp(op, "ended") == 0) {
        if (!e && push(j, job, (uint32_t)attempt, NULL) != 0)
            return *what = "out of memory", GPO_ENOMEM;
        e = find(j, job, (uint32_t)attempt);
        e->ended = true;
        free(e->dir);
        e->dir = NULL;
    } else {
        return *what = "unknown op", GPO_ECORRUPT;
    }
    return 0;
}

/* Reads the journal; sets j->size to the end of its last whole line. */
static int load(struct journal *j, char *err, size_t errlen)
{
    FILE *f = fopen(j->path, "re");
    if (!f)
        return fail_sys(err, errlen, "open", j->path);
    char *line = NULL;
    size_t linecap = 0;
    ssize_t len;
    unsigned long lineno = 0;
    off_t off = 0;
    int rc = 0;
    while ((len = getline(&line, &linecap, f)) > 0) {
        lineno++;
        if (line[len - 1] != '\n')
            break; /* torn by a crash mid-append: that call never returned */
        const char *what = NULL;
        json_error_t jerr;
        json_t *o = NULL;
        if ((size_t)len > LINE_MAX_BYTES)
            what = "line too long";
        else if (!(o = json_loadb(line, (size_t)len - 1, JSON_REJECT_DUPLICATES, &jerr)) ||
                 !json_is_object(o))
            what = "not a JSON object";
        else
            rc = apply_line(j, o, &what);
        json_decref(o);
        if (what) {
            rc = rc ? rc : GPO_ECORRUPT;
            errbuf_set(err, errlen, rc, "%s:%lu: %s", j->path, lineno, what);
            break;
        }
        off += len;
    }
    if (rc == 0 && ferror(f))
        rc = fail_sys(err, errlen, "read", j->path);
    free(line);
    (void)fclose(f); /* read only: ferror above checked the reads */
    if (rc == 0)
        j->size = off;
    return rc;
}

/* ---- open / close ---- */

static int open_files(struct journal *j, char *err, size_t errlen)
{
    if (mkdir(j->dir, 0700) < 0 && errno != EEXIST)
        return fail_sys(err, errlen, "mkdir", j->dir);
    char *lock = path_join(j->dir, "journal.lock");
    if (!lock)
        return GPO_ENOMEM;
    j->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    int rc = 0;
    if (j->lock_fd < 0)
        rc = fail_sys(err, errlen, "open", lock);
    else if (flock(j->lock_fd, LOCK_EX | LOCK_NB) < 0)
        rc = errno == EWOULDBLOCK
                 ? errbuf_set(err, errlen, GPO_EBUSY, "%s is held by another process", lock)
                 : fail_sys(err, errlen, "flock", lock);
    free(lock);
    if (rc)
        return rc;
    /* O_CLOEXEC: a shim must not inherit the journal (nor its lock). */
    j->fd = open(j->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (j->fd < 0)
        return fail_sys(err, errlen, "open", j->path);
    /* The file may be new: make its name durable before anything relies on it. */
    int e = fsutil_fsync_dir(j->path);
    return e ? fail_errno(err, errlen, "fsync", j->dir, -e) : 0;
}

int journal_open(const char *dir, struct journal **ret, char *err, size_t errlen)
{
    if (!dir || !*dir || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "journal_open: no directory");
    if (strlen(dir) >= JOURNAL_PATH_MAX)
        return errbuf_set(err, errlen, GPO_E2BIG, "journal directory path too long");
    struct journal *j = calloc(1, sizeof(*j));
    if (!j)
        return GPO_ENOMEM;
    j->fd = j->lock_fd = -1;
    pthread_mutex_init(&j->mu, NULL);
    j->dir = strdup(dir);
    j->path = j->dir ? path_join(dir, "journal") : NULL;
    int rc = j->path ? 0 : GPO_ENOMEM;
    if (rc == 0)
        rc = open_files(j, err, errlen);
    if (rc == 0)
        rc = load(j, err, errlen);
    struct stat st;
    if (rc == 0 && fstat(j->fd, &st) < 0)
        rc = fail_sys(err, errlen, "stat", j->path);
    /* Cut a torn last line off, so the next append starts a line of its own. */
    if (rc == 0 && st.st_size != j->size && (ftruncate(j->fd, j->size) < 0 || fdatasync(j->fd) < 0))
        rc = fail_sys(err, errlen, "truncate", j->path);
    if (rc) {
        if (rc == GPO_ENOMEM)
            errbuf_set(err, errlen, rc, "out of memory");
        journal_close(j);
        return rc;
    }
    *ret = j;
    return 0;
}

void journal_close(struct journal *j)
{
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    if (j->lock_fd >= 0)
        close(j->lock_fd);
    for (size_t i = 0; i < j->n; i++)
        free(j->v[i].dir);
    free(j->v);
    free(j->path);
    free(j->dir);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* ---- appending ---- */

/* Serializes `o` as one line (taken: freed here). */
static char *to_line(json_t *o, size_t *ret_len)
{
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!s)
        return NULL;
    size_t len = strlen(s);
    char *line = realloc(s, len + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[len] = '\n';
    line[len + 1] = '\0';
    *ret_len = len + 1;
    return line;
}

/* Appends one record (`o` taken) and makes it durable. On failure the file is
 * cut back, so that no half line stays in the middle of the journal. */
/* A "begin" line's object (NULL when out of memory). */
static json_t *begin_json(uint64_t job, uint32_t attempt, const char *dir, uint32_t port)
{
    json_t *o = json_pack("{s:s, s:I, s:I, s:s}", "op", "begin", "job", (json_int_t)job, "attempt",
                          (json_int_t)attempt, "dir", dir);
    if (o && port && json_object_set_new(o, "port", json_integer(port)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int append(struct journal *j, json_t *o, char *err, size_t errlen)
{
    if (j->broken)
        return errbuf_set(err, errlen, GPO_EIO, "%s: an earlier write failed", j->path);
    size_t len;
    char *line = to_line(o, &len);
    if (!line)
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    int rc = fsutil_write_all(j->fd, line, len);
    if (rc)
        rc = fail_errno(err, errlen, "write", j->path, -rc);
    else if (fdatasync(j->fd) < 0)
        rc = fail_sys(err, errlen, "fdatasync", j->path);
    free(line);
    if (rc == GPO_ENOMEM)
        rc = GPO_EIO;
    if (rc == 0)
        j->size += (off_t)len;
    else if (ftruncate(j->fd, j->size) < 0 || fdatasync(j->fd) < 0)
        j->broken = true;
    return rc;
}

static int begin_locked(struct journal *j, const struct journal_attempt *a, char *err,
                        size_t errlen)
{
    size_t dirlen = strnlen(a->dir, JOURNAL_PATH_MAX);
    if (dirlen == 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "attempt directory is empty");
    if (dirlen >= JOURNAL_PATH_MAX)
        return errbuf_set(err, errlen, GPO_E2BIG, "attempt directory path too long");
    if (a->job > INT64_MAX || a->port > 65535)
        return errbuf_set(err, errlen, GPO_EINVAL, "job id or port out of range");
    if (find(j, a->job, a->attempt))
        return errbuf_set(err, errlen, GPO_EEXIST,
                          "attempt %" PRIu64 ".%" PRIu32 " was begun before", a->job, a->attempt);
    char *dir = strndup(a->dir, dirlen);
    /* Reserve the slot first, so nothing can fail after the record is on disk. */
    if (!dir || push(j, a->job, a->attempt, dir) != 0) {
        free(dir);
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    }
    j->n--;
    int rc = append(j, begin_json(a->job, a->attempt, dir, a->port), err, errlen);
    if (rc) {
        free(dir);
        return rc;
    }
    j->v[j->n++].port = a->port;
    return 0;
}

int journal_begin(struct journal *j, const struct journal_attempt *a, char *err, size_t errlen)
{
    if (!j || !a)
        return errbuf_set(err, errlen, GPO_EINVAL, "journal_begin: NULL argument");
    pthread_mutex_lock(&j->mu);
    int rc = begin_locked(j, a, err, errlen);
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* The entry of attempt (job, attempt), begun and not ended; else NULL,
 * with GPO_ENOENT in *rc and err. Under mu. */
static struct entry *live_entry(struct journal *j, uint64_t job, uint32_t attempt, int *rc,
                                char *err, size_t errlen)
{
    struct entry *e = find(j, job, attempt);
    if (e && !e->ended)
        return e;
    *rc = errbuf_set(err, errlen, GPO_ENOENT,
                     "attempt %" PRIu64 ".%" PRIu32 " is not begun or has ended", job, attempt);
    return NULL;
}

static int started_locked(struct journal *j, uint64_t job, uint32_t attempt, pid_t pid,
                          uint64_t start_time, char *err, size_t errlen)
{
    int rc = 0;
    struct entry *e = live_entry(j, job, attempt, &rc, err, errlen);
    if (!e)
        return rc;
    if (e->pid != 0)
        return e->pid == pid && e->start_time == start_time
                   ? 0
                   : errbuf_set(err, errlen, GPO_EEXIST,
                                "attempt %" PRIu64 ".%" PRIu32 " already has pid %ld", job, attempt,
                                (long)e->pid);
    json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I}", "op", "started", "job", (json_int_t)job,
                          "attempt", (json_int_t)attempt, "pid", (json_int_t)pid, "start_time",
                          (json_int_t)start_time);
    rc = append(j, o, err, errlen);
    if (rc == 0) {
        e->pid = pid;
        e->start_time = start_time;
    }
    return rc;
}

int journal_started(struct journal *j, uint64_t job, uint32_t attempt, pid_t pid,
                    uint64_t start_time, char *err, size_t errlen)
{
    if (!j || pid <= 0 || start_time > INT64_MAX)
        return errbuf_set(err, errlen, GPO_EINVAL, "journal_started: invalid argument");
    pthread_mutex_lock(&j->mu);
    int rc = started_locked(j, job, attempt, pid, start_time, err, errlen);
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_signalled(struct journal *j, uint64_t job, uint32_t attempt, char *err, size_t errlen)
{
    if (!j)
        return errbuf_set(err, errlen, GPO_EINVAL, "journal_signalled: NULL journal");
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    struct entry *e = live_entry(j, job, attempt, &rc, err, errlen);
    if (e && !e->signalled &&
        (rc = append(j,
                     json_pack("{s:s, s:I, s:I}", "op", "signalled", "job", (json_int_t)job,
                               "attempt", (json_int_t)attempt),
                     err, errlen)) == 0)
        e->signalled = true;
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* A "fenced" line's object (NULL when out of memory). */
static json_t *fenced_json(uint64_t job, uint32_t attempt, int64_t unreached_ms)
{
    return json_pack("{s:s, s:I, s:I, s:I}", "op", "fenced", "job", (json_int_t)job, "attempt",
                     (json_int_t)attempt, "unreached_ms", (json_int_t)unreached_ms);
}

int journal_fenced(struct journal *j, uint64_t job, uint32_t attempt, int64_t unreached_ms,
                   char *err, size_t errlen)
{
    if (!j || unreached_ms <= 0)
        return errbuf_set(err, errlen, GPO_EINVAL, "journal_fenced: invalid argument");
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    struct entry *e = live_entry(j, job, attempt, &rc, err, errlen);
    if (e && !e->unreached_ms &&
        (rc = append(j, fenced_json(job, attempt, unreached_ms), err, errlen)) == 0)
        e->unreached_ms = unreached_ms;
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_ended(struct journal *j, uint64_t job, uint32_t attempt, char *err, size_t errlen)
{
    if (!j)
        return errbuf_set(err, errlen, GPO_EINVAL, "journal_ended: NULL journal");
    pthread_mutex_lock(&j->mu);
    struct entry *e = find(j, job, attempt);
    int rc = 0;
    if (!e) {
        rc = errbuf_set(err, errlen, GPO_ENOENT, "attempt %" PRIu64 ".%" PRIu32 " was never begun",
                        job, attempt);
    } else if (!e->ended) {
        json_t *o = json_pack("{s:s, s:I, s:I}", "op", "ended", "job", (json_int_t)job, "attempt",
                              (json_int_t)attempt);
        rc = append(j, o, err, errlen);
        if (rc == 0) {
            e->ended = true;
            free(e->dir);
            e->dir = NULL;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

int journal_list(struct journal *j, struct journal_attempt **ret_list, size_t *ret_n)
{
    if (!j || !ret_list || !ret_n)
        return GPO_EINVAL;
    pthread_mutex_lock(&j->mu);
    size_t live = 0;
    for (size_t i = 0; i < j->n; i++)
        live += !j->v[i].ended;
    struct journal_attempt *list = live ? calloc(live, sizeof(*list)) : NULL;
    if (live && !list) {
        pthread_mutex_unlock(&j->mu);
        return GPO_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < j->n; i++) {
        const struct entry *e = &j->v[i];
        if (e->ended)
            continue;
        list[k] = (struct journal_attempt){.job = e->job,
                                           .attempt = e->attempt,
                                           .pid = e->pid,
                                           .start_time = e->start_time,
                                           .signalled = e->signalled,
                                           .port = e->port,
                                           .fenced = e->unreached_ms > 0,
                                           .unreached_ms = e->unreached_ms};
        snprintf(list[k].dir, sizeof(list[k].dir), "%s", e->dir);
        k++;
    }
    pthread_mutex_unlock(&j->mu);
    *ret_list = list;
    *ret_n = live;
    return 0;
}

/* ---- compaction ---- */

/* Writes one record (`o` taken; NULL: out of memory) as a line to fd. */
static int write_line(int fd, json_t *o)
{
    size_t len;
    char *line = to_line(o, &len);
    int rc = line ? fsutil_write_all(fd, line, len) : GPO_ENOMEM;
    free(line);
    return rc;
}

/* A live entry's lines after its "begin", so that compacted output reads
 * back like the original. */
static int write_live(const struct entry *e, int fd)
{
    int rc = 0;
    if (e->pid != 0)
        rc = write_line(fd, json_pack("{s:s, s:I, s:I, s:I, s:I}", "op", "started", "job",
                                      (json_int_t)e->job, "attempt", (json_int_t)e->attempt, "pid",
                                      (json_int_t)e->pid, "start_time", (json_int_t)e->start_time));
    if (rc == 0 && e->signalled)
        rc = write_line(fd, json_pack("{s:s, s:I, s:I}", "op", "signalled", "job",
                                      (json_int_t)e->job, "attempt", (json_int_t)e->attempt));
    if (rc == 0 && e->unreached_ms)
        rc = write_line(fd, fenced_json(e->job, e->attempt, e->unreached_ms));
    return rc;
}

static int write_compacted(struct journal *j, int fd)
{
    for (size_t i = 0; i < j->n; i++) {
        const struct entry *e = &j->v[i];
        int rc =
            e->ended
                ? write_line(fd, json_pack("{s:s, s:I, s:I}", "op", "ended", "job",
                                           (json_int_t)e->job, "attempt", (json_int_t)e->attempt))
                : write_line(fd, begin_json(e->job, e->attempt, e->dir, e->port));
        if (rc == 0 && !e->ended)
            rc = write_live(e, fd);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Whether fd is the file that path names now. */
static bool names_fd(const char *path, int fd)
{
    struct stat held, named;
    return fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_dev == named.st_dev &&
           held.st_ino == named.st_ino;
}

static int compact_locked(struct journal *j, char *err, size_t errlen)
{
    struct fsutil_atomic a;
    int rc = fsutil_atomic_begin(&a, j->path, 0600, 0, err, errlen);
    if (rc == 0 && (rc = write_compacted(j, a.fd)) < 0) {
        if (rc == GPO_ENOMEM)
            errbuf_set(err, errlen, rc, "out of memory");
        else
            fail_errno(err, errlen, "write", a.tmp, -rc);
        fsutil_atomic_abort(&a);
    }
    int fd = -1;
    if (rc == 0 && (rc = fsutil_atomic_commit_keep(&a, &fd, err, errlen)) != 0) {
        /* When only the directory's fsync failed, the name holds the new
         * file already, and appends to the old one would be lost. */
        if (!names_fd(j->path, j->fd))
            j->broken = true;
    }
    if (rc)
        return rc == GPO_ENOMEM ? rc : GPO_EIO;
    /* The new file has the name: from now on appends go to it. */
    close(j->fd);
    j->fd = fd;
    struct stat st;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_APPEND) < 0 || fstat(fd, &st) < 0) {
        j->broken = true;
        return fail_sys(err, errlen, "fcntl", j->path);
    }
    j->size = st.st_size;
    j->broken = false;
    return 0;
}

int journal_compact(struct journal *j, char *err, size_t errlen)
{
    if (!j)
        return errbuf_set(err, errlen, GPO_EINVAL, "journal_compact: NULL journal");
    pthread_mutex_lock(&j->mu);
    int rc = compact_locked(j, err, errlen);
    pthread_mutex_unlock(&j->mu);
    return rc;
}

/* ---- processes ---- */

/* Reads the state (field 3) and start time (field 22) of /proc/PID/stat. */
static int proc_stat(pid_t pid, char *ret_state, uint64_t *ret_start)
{
    if (pid <= 0)
        return GPO_EINVAL;
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? GPO_ENOENT : GPO_EIO;
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len < 0)
        return errno == ESRCH ? GPO_ENOENT : GPO_EIO;
    buf[len] = '\0';
    /* Field 2 is "(comm)", and comm may hold spaces and parentheses: the
     * fields after it start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return GPO_EIO;
    char state = p[2];
    p += 3;
    for (int field = 4; field <= 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return GPO_EIO;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long start = strtoull(p, &end, 10);
    if (errno || end == p || (*end != ' ' && *end != '\n' && *end != '\0'))
        return GPO_EIO;
    *ret_state = state;
    *ret_start = start;
    return 0;
}

int journal_proc_start_time(pid_t pid, uint64_t *ret)
{
    char state;
    uint64_t start;
    if (!ret)
        return GPO_EINVAL;
    int rc = proc_stat(pid, &state, &start);
    if (rc == 0)
        *ret = start;
    return rc;
}

bool journal_attempt_alive(const struct journal_attempt *a)
{
    char state;
    uint64_t start;
    if (!a || a->pid <= 0 || proc_stat(a->pid, &state, &start) != 0)
        return false;
    return start == a->start_time && state != 'Z' && state != 'X';
}
