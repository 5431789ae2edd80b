/*
 * cli.h - what every `gpuorch` user command shares: its flags read from a
 * table, where the server is and the token, one API call with its error as
 * one line, and small helpers for output (aligned tables: table.h).
 *
 * Exit codes, the same for every command: 0 done; 1 failed (the API answered
 * an error, the server could not be reached, an input file such as a batch
 * script or an apply document cannot be read); 2 usage (a bad flag or
 * argument, a bad configuration file or token file, no token).
 *
 * The server and the token come from, first to last:
 *   1. flags: --server URL, --token TOKEN or --token-file FILE;
 *   2. the environment: GPUORCH_SERVER, GPUORCH_TOKEN, GPUORCH_TOKEN_FILE;
 *   3. the configuration file: $GPUORCH_CONFIG (which must exist when set),
 *      else $XDG_CONFIG_HOME/gpuorch/config, else ~/.config/gpuorch/config
 *      (either may be missing), with lines `server = URL`, `token = TOKEN`
 *      or `token_file = PATH` (relative to the file's directory), blank
 *      lines and `#` comments; an unknown key is an error naming the file
 *      and line.
 * Each of the two is taken from the first place that gives it; the server
 * defaults to CLI_DEFAULT_SERVER, the token has no default.
 *
 * Errors: functions return 0 or a negative CLI_* code and, where a caller
 * buffer is passed, one line that names the problem. The functions that
 * print (cli_fail, cli_usage_error, cli_connect, cli_parse_args,
 * cli_help_common, cli_print_json) say so; the rest print nothing.
 */
#ifndef GPUORCH_CLI_CLI_H
#define GPUORCH_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "util/httpc.h"
#include "base/err.h"

enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,
    CLI_EXIT_USAGE = 2,
};

#define CLI_DEFAULT_SERVER  "http://127.0.0.1:8080"
#define CLI_ERR_MAX         1024        /* a buffer that holds any one-line message here */
#define CLI_CONFIG_MAX      (64 * 1024) /* bytes of a configuration file */
#define CLI_CALL_TIMEOUT_MS 30000L

/* ---- flags ----------------------------------------------------------- */

/*
 * One flag of a command, as the first member of a table entry (a command
 * with more to say per flag embeds it in a larger struct). `where` holds
 * bits the caller gives meaning to: cli_getopt_next sees only the entries
 * that share a bit with its mask (submit uses them for "command line",
 * "#SBATCH" and "#GPUORCH"). `offset` is for cli_opt_store: a `const char *`
 * member for a flag with a value, a `bool` for one without.
 */
struct cli_opt {
    const char *name; /* long name without "--" ("job-name"); NULL: short only */
    char short_name;  /* 'J'; 0: long only */
    bool value;       /* takes a value: --name VALUE, --name=VALUE, -J VALUE, -JVALUE */
    unsigned where;
    size_t offset;
};

/* Walks argv[i..argc); argv is borrowed. */
struct cli_getopt {
    int argc;
    char **argv;
    int i;
};

enum cli_getopt_kind {
    CLI_GETOPT_END = 0,  /* no words left */
    CLI_GETOPT_OPTION,   /* *ret_entry and *ret_value (NULL for a flag without one) */
    CLI_GETOPT_ARG,      /* a positional word in *ret_value ("-" is one) */
    CLI_GETOPT_DASHDASH, /* "--": the words after it are argv[g->i..argc) */
};

/*
 * Reads the next word (and an option's value) of g. `table` holds n entries
 * of `stride` bytes, each beginning with a struct cli_opt. Returns one of
 * enum cli_getopt_kind, with *ret_entry (the table entry) and *ret_value set
 * as it says; or GPO_ENOENT (no such option among those `mask` selects),
 * GPO_EUSAGE (a value missing, or given to a flag that takes none), with
 * the message in err. Either way g moves past the word.
 */
int cli_getopt_next(struct cli_getopt *g, const void *table, size_t n, size_t stride, unsigned mask,
                    const void **ret_entry, const char **ret_value, char *err, size_t errlen);

/* Stores an option into the struct `args` at opt->offset (see struct cli_opt):
 * value (borrowed) into a `const char *`, or true into a `bool`. */
void cli_opt_store(void *args, const struct cli_opt *opt, const char *value);

/* What every command accepts: where the server is, the token, --help, and
 * (read commands) --json. Pointers are borrowed from argv. */
struct cli_common {
    const char *server, *token, *token_file;
    bool json, help;
};

#define CLI_OPTS_COMMON(type, member)                                                              \
    {"server", 0, true, 1, offsetof(type, member.server)},                                         \
        {"token", 0, true, 1, offsetof(type, member.token)},                                       \
        {"token-file", 0, true, 1, offsetof(type, member.token_file)},                             \
    {                                                                                              \
        "help", 'h', false, 1, offsetof(type, member.help)                                         \
    }
#define CLI_OPT_JSON(type, member)                                                                 \
    {                                                                                              \
        "json", 0, false, 1, offsetof(type, member.json)                                           \
    }

/* The lines of --help that every command shares (connection flags, the
 * environment, the configuration file, exit codes). */
void cli_help_common(FILE *out, bool json);

/*
 * Parses a simple command's argv (argv[0] is the command's name) against a
 * table of struct cli_opt (mask 1) into `args`, and its positional words
 * into pos[0..*ret_npos) (borrowed from argv; pos has room for argc). Prints
 * a usage error and returns CLI_EXIT_USAGE on a problem; else returns 0.
 */
int cli_parse_args(const char *cmd, int argc, char **argv, const struct cli_opt *opts, size_t n,
                   void *args, const char **pos, size_t *ret_npos);

/* ---- where the server is ---------------------------------------------- */

/* A configuration file's settings (strings owned; NULL: not given). */
struct cli_config {
    char *server;
    char *token;
    char *token_file; /* as written; relative to the file's directory */
    long server_line, token_line, token_file_line;
};

/*
 * Parses a configuration file's text (len bytes) named `path` (for
 * messages). 0 and *ret (release with cli_config_release); GPO_EUSAGE with
 * "PATH:LINE: ..." in err for a line that is not `key = value`, an unknown
 * key, an empty value, a key given twice, or both token and token_file;
 * GPO_ENOMEM.
 */
int cli_config_parse(const char *text, size_t len, const char *path, struct cli_config *ret,
                     char *err, size_t errlen);
void cli_config_release(struct cli_config *c);

/* Where the server is, and the token. */
struct cli_conn {
    char server[HTTPC_URL_MAX];
    char token[HTTPC_TOKEN_MAX];
};

/*
 * Resolves the server and token as the header says from the flags in
 * `flags` (borrowed), the environment `envp` (NULL-terminated "NAME=value"
 * strings, as environ; NULL: empty) and the configuration file it names,
 * reading the files involved. 0 and *ret; GPO_EUSAGE (no token anywhere, a
 * bad URL, an unreadable or empty token file, a bad configuration file,
 * --token with --token-file), GPO_ENOMEM; the message in err names where
 * the bad value came from.
 */
int cli_conn_resolve(const struct cli_common *flags, char *const *envp, struct cli_conn *ret,
                     char *err, size_t errlen);

/* ---- API calls ---------------------------------------------------------- */

/* A command's link to the server. */
struct cli {
    const char *cmd; /* "submit": messages begin "gpuorch submit: " */
    struct cli_conn conn;
    struct httpc *http;
};

/*
 * Resolves the connection (cli_conn_resolve with environ) and makes the
 * HTTP client. Returns 0, or prints the problem as one line and returns
 * CLI_EXIT_USAGE (no token found included). cmd is borrowed; release with
 * cli_disconnect, also after a failure.
 */
int cli_connect(struct cli *c, const char *cmd, const struct cli_common *flags);
void cli_disconnect(struct cli *c);

/*
 * METHOD path (query included) with `body` (borrowed; NULL: none) as JSON.
 * A 2xx answer: 0 and *ret (its JSON, caller json_decref's; NULL for an
 * empty body; ret may be NULL). Otherwise GPO_EAPI with "STATUS CODE:
 * MESSAGE" from the API's error object in err (the status and the start of
 * the body if it is not one), GPO_ECONNREFUSED with the HTTP client's line (the
 * server could not be reached, or timed out), GPO_ENOMEM. *ret_status (may
 * be NULL) is set whenever the server answered, GPO_EAPI included.
 */
int cli_call(struct cli *c, const char *method, const char *path, const json_t *body,
             long *ret_status, json_t **ret, char *err, size_t errlen);

/* Every job GET /v1/jobs?QUERY selects (query: "state=RUNNING&team=a", ""
 * for all), page after page, appended to the array `all` (borrowed). 0, or
 * cli_call's codes. */
int cli_jobs_list(struct cli *c, const char *query, json_t *all, char *err, size_t errlen);

/* "STATUS CODE: MESSAGE" for an error answer (body of len bytes; borrowed). */
void cli_api_error(long status, const char *body, size_t len, char *err, size_t errlen);

/* Prints "gpuorch CMD: " and the message to stderr as one line, and returns
 * CLI_EXIT_FAIL (cli_fail) or CLI_EXIT_USAGE (cli_usage_error). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- output ----------------------------------------------------------- */

/* Prints v (borrowed) as indented JSON and a newline to stdout; false when
 * out of memory. */
bool cli_print_json(const json_t *v);

/* ---- small helpers ------------------------------------------------------ */

/* Reads the whole file `path` ("-": stdin) into a new NUL-terminated buffer
 * (caller frees). 0 with *ret and *ret_len; GPO_EIO (errno's text in err),
 * GPO_EUSAGE (larger than max bytes), GPO_ENOMEM. */
int cli_read_file(const char *path, size_t max, char **ret, size_t *ret_len, char *err,
                  size_t errlen);

/* obj[key] as a string, or NULL when absent or not a string (obj borrowed). */
const char *cli_json_str(const json_t *obj, const char *key);

/* Parses a whole decimal number in lo..hi. 0 and *ret; GPO_EUSAGE. */
int cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *ret);

/* MiB as people read them: "64G" when whole GiB, else "1536M". Writes into
 * buf (len bytes) and returns it. */
const char *cli_size_text(int64_t mib, char *buf, size_t len);

/* The current time, ms since the epoch (the edges may read the clock). */
int64_t cli_now_ms(void);

/* How long ago an RFC 3339 time was, for people: "12s ago", "5m ago",
 * "3h ago", "2d ago" ("-" for NULL or an unreadable time, "now" for a time
 * not in the past). Writes into buf (len bytes) and returns it. */
const char *cli_age(const char *rfc3339, int64_t now_ms, char *buf, size_t len);

#endif
