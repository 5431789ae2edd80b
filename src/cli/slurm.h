/*
 * slurm.h - Slurm's vocabulary for the commands its users reach for
 * (history as sacct, queue as squeue, info as sinfo): state names and
 * codes, sacct's --format fields and squeue's -o fields, sacct's time
 * forms, and squeue's rows of job arrays (pending tasks in one row).
 *
 * Pure but for the local time zone (sacct reads and prints local times, as
 * Slurm does: localtime_r and mktime); nothing here prints. Jobs are the
 * API's job objects (borrowed): GET /v1/jobs and GET /v1/accounting/jobs,
 * the latter with "attempts".
 */
#ifndef GPUORCH_CLI_SLURM_H
#define GPUORCH_CLI_SLURM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* ---- states ----------------------------------------------------------- */

/* Slurm's job states gpuorch has: X(name, code). REQUEUED is a pending job
 * that has run before; OUT_OF_MEMORY a failed one its cgroup killed. */
#define SLURM_STATES(X)                                                                            \
    X(PENDING, "PD")                                                                               \
    X(RUNNING, "R")                                                                                \
    X(COMPLETED, "CD")                                                                             \
    X(FAILED, "F")                                                                                 \
    X(CANCELLED, "CA")                                                                             \
    X(TIMEOUT, "TO")                                                                               \
    X(PREEMPTED, "PR")                                                                             \
    X(REQUEUED, "RQ")                                                                              \
    X(OUT_OF_MEMORY, "OOM")                                                                        \
    X(NODE_FAIL, "NF")

enum slurm_state {
#define SLURM_STATE_ENUM(name, code) SLURM_##name,
    SLURM_STATES(SLURM_STATE_ENUM)
#undef SLURM_STATE_ENUM
        SLURM_STATE_COUNT
};

/* "PENDING" and "PD"; "?" out of range. */
const char *slurm_state_name(enum slurm_state s);
const char *slurm_state_code(enum slurm_state s);

/* The Slurm state of a job object. */
enum slurm_state slurm_job_state(const json_t *job);

/* "pd,running,OOM" (names or codes, any case, comma-separated) into bits
 * 1 << enum slurm_state. 0; GPO_EUSAGE naming the word in err. */
int slurm_states_parse(const char *text, unsigned *ret_bits, char *err, size_t errlen);

/* -j's selectors: a job (or an array's every task: index -1), or one task. */
struct slurm_job_sel {
    int64_t id, index;
};
#define SLURM_JOB_SELS_MAX 100

/* "41,42_7" into sel[0, *ret_n) (room for SLURM_JOB_SELS_MAX). 0;
 * GPO_EUSAGE naming the word. */
int slurm_jobs_parse(const char *text, struct slurm_job_sel *sel, size_t *ret_n, char *err,
                     size_t errlen);
/* Whether job is one that sel[0, n) selects (n 0: every job). */
bool slurm_job_selected(const struct slurm_job_sel *sel, size_t n, const json_t *job);

/* The API's state bits (1 << enum client_job_state of client.h) that hold
 * the Slurm states `bits`: REQUEUED is PENDING there, OUT_OF_MEMORY FAILED. */
unsigned slurm_api_states(unsigned bits);

/* Whether word is one of the comma-separated list's words (list NULL: any
 * word; word NULL: none), in any case when `nocase`. */
bool slurm_in_list(const char *list, const char *word, bool nocase);

/* The names of a JSON array (borrowed) in Slurm's host-list form into buf
 * (`none` when it has none), their count in *ret_n; returns buf. */
const char *slurm_nodelist(const json_t *nodes, const char *none, char *buf, size_t len,
                           size_t *ret_n);

/* The nodes a job's spec (borrowed) asks for: its "nodes", at least 1. */
int64_t slurm_spec_nodes(const json_t *spec);

/* ---- sacct's fields ----------------------------------------------------- */

/* X(name, header, width): sacct's field names and default widths. */
#define SACCT_FIELDS(X)                                                                            \
    X(JOBID, "JobID", 12)                                                                          \
    X(JOBIDRAW, "JobIDRaw", 12)                                                                    \
    X(JOBNAME, "JobName", 10)                                                                      \
    X(PARTITION, "Partition", 10)                                                                  \
    X(ACCOUNT, "Account", 10)                                                                      \
    X(USER, "User", 9)                                                                             \
    X(STATE, "State", 10)                                                                          \
    X(EXITCODE, "ExitCode", 8)                                                                     \
    X(ELAPSED, "Elapsed", 10)                                                                      \
    X(ELAPSEDRAW, "ElapsedRaw", 10)                                                                \
    X(START, "Start", 19)                                                                          \
    X(END, "End", 19)                                                                              \
    X(SUBMIT, "Submit", 19)                                                                        \
    X(NNODES, "NNodes", 8)                                                                         \
    X(NODELIST, "NodeList", 15)                                                                    \
    X(ALLOCTRES, "AllocTRES", 10)                                                                  \
    X(ALLOCCPUS, "AllocCPUS", 10)                                                                  \
    X(NCPUS, "NCPUS", 10)                                                                          \
    X(REQMEM, "ReqMem", 10)                                                                        \
    X(TIMELIMIT, "Timelimit", 10)                                                                  \
    X(QOS, "QOS", 10)                                                                              \
    X(REASON, "Reason", 20)                                                                        \
    X(WORKDIR, "WorkDir", 20)                                                                      \
    X(ARRAYJOBID, "ArrayJobID", 12)                                                                \
    X(ARRAYTASKID, "ArrayTaskID", 12)

enum sacct_field {
#define SACCT_FIELD_ENUM(name, header, width) SACCT_##name,
    SACCT_FIELDS(SACCT_FIELD_ENUM)
#undef SACCT_FIELD_ENUM
        SACCT_FIELD_COUNT
};

/* sacct's columns without --format. */
#define SACCT_DEFAULT_FORMAT "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
#define SACCT_COLS_MAX       64

/* One column: a field, its width, and whether it is left-justified (JobID
 * and JobIDRaw by default, any field written "%-N"). */
struct sacct_col {
    enum sacct_field field;
    int width;
    bool left;
};

/* The header of a field ("JobID"). */
const char *sacct_field_header(enum sacct_field f);

/*
 * Parses --format's text ("JobID,JobName%30,state%-8": names in any case,
 * comma- or space-separated, each with an optional %N width, %-N to justify
 * left) into cols[0, *ret_n) (room for SACCT_COLS_MAX). 0; GPO_EUSAGE with
 * a line naming the unknown field (and listing the known ones) or the bad
 * width.
 */
int sacct_format_parse(const char *text, struct sacct_col *cols, size_t *ret_n, char *err,
                       size_t errlen);

/* The text of field f for job (an accounting job, with "attempts") at
 * now_ms, as sacct prints it, into buf (len bytes); returns buf. */
const char *sacct_field_text(enum sacct_field f, const json_t *job, int64_t now_ms, char *buf,
                             size_t len);

/* text fitted to width (padded, right-justified unless `left`; longer text
 * cut with '+' as its last character, as sacct does) into buf. */
const char *slurm_cell(const char *text, int width, bool left, char *buf, size_t len);

/* ---- squeue's -o fields --------------------------------------------------- */

/* The squeue fields gpuorch knows: X(code, header). */
#define SQUEUE_FIELDS(X)                                                                           \
    X('i', "JOBID")                                                                                \
    X('j', "NAME")                                                                                 \
    X('u', "USER")                                                                                 \
    X('a', "ACCOUNT")                                                                              \
    X('t', "ST")                                                                                   \
    X('T', "STATE")                                                                                \
    X('M', "TIME")                                                                                 \
    X('l', "TIME_LIMIT")                                                                           \
    X('D', "NODES")                                                                                \
    X('C', "CPUS")                                                                                 \
    X('N', "NODELIST")                                                                             \
    X('r', "REASON")                                                                               \
    X('R', "NODELIST(REASON)")                                                                     \
    X('P', "PARTITION")                                                                            \
    X('b', "TRES_PER_NODE")                                                                        \
    X('V', "SUBMIT_TIME")

#define SQUEUE_ITEMS_MAX 64

/* One item of an -o format: a field (code not 0) or literal text. */
struct squeue_item {
    const char *text; /* literal: borrowed from the format */
    size_t len;
    int width;  /* 0: as long as it is */
    char code;  /* 0: literal text[0, len) */
    bool right; /* "%.10i": right-justified */
};

/* Parses "%.18i %.9P %j%%": 0 and items[0, *ret_n) (room for
 * SQUEUE_ITEMS_MAX); GPO_EUSAGE naming a field gpuorch does not know. */
int squeue_format_parse(const char *text, struct squeue_item *items, size_t *ret_n, char *err,
                        size_t errlen);

/* The header of field `code` ("JOBID"), or NULL for a code it does not know. */
const char *squeue_field_header(char code);

/* One row of the queue: a job, or the pending tasks of one array. */
struct queue_row {
    const json_t *job; /* borrowed: the job, or the array's first pending task */
    char id[96];       /* "41", "41_3", "41_[5-20%4]" */
};

/*
 * The rows squeue shows for jobs (a JSON array, borrowed; in id order): a
 * job that is not in an array as itself ("41"); an array's task as
 * "ARRAY_INDEX" ("41_3"); unless `expand`, the pending tasks of one array
 * in one row at the first of them, "41_[5-20%4]" (the indices compressed,
 * then the array's limit on running tasks if it has one). *ret: a new
 * array (caller frees) of *ret_n rows. 0 or GPO_ENOMEM.
 */
int slurm_queue_rows(const json_t *jobs, bool expand, struct queue_row **ret, size_t *ret_n);

/* The text of squeue field `code` for row r at now_ms into buf; returns buf. */
const char *squeue_field_text(char code, const struct queue_row *r, int64_t now_ms, char *buf,
                              size_t len);

/* ---- times ------------------------------------------------------------------ */

/*
 * Parses a time as sacct's -S/-E take it, in local time: HH:MM[:SS],
 * MMDD[YY], MM/DD[/YY], MM.DD[.YY] (each with -HH:MM[:SS] after it),
 * YYYY-MM-DD[THH:MM[:SS]], RFC 3339, "today" and "midnight" (0:00 today),
 * "noon", "now" and now[+|-]COUNT[seconds|minutes|hours|days|weeks] (the
 * unit's first letters are enough; without one, seconds). now_ms is the
 * current time. 0 and *ret_ms; GPO_EUSAGE.
 */
int slurm_time_parse(const char *text, int64_t now_ms, int64_t *ret_ms);

/* A time as sacct prints it, local: "2026-12-02T01:02:03". */
const char *slurm_time_text(int64_t ms, char *buf, size_t len);

/* Compressed indices as Slurm writes them: "1-3,7,9-10" for v[0, n)
 * (sorted, distinct). 0; GPO_ENOBUFS when buf is too small. */
int slurm_ranges_text(const int64_t *v, size_t n, char *buf, size_t len);

#endif
