/*
 * cli.h - what every `gpuorch` user command shares: its flags read from a
 * table (util/opts.h), where the server is and the token, the link to the
 * server (client/client.h), and small helpers for output (aligned tables:
 * table.h).
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
 * defaults to CLI_DEFAULT_SERVER, the token has no default. The server may
 * be a list of several controllers' URLs, "http://a:8080,http://b:8080"
 * (util/httpc.h: the leader among them is found and followed).
 *
 * Errors: functions return 0 or a negative GPO_* code and, where a caller
 * buffer is passed, one line that names the problem. The functions that
 * print (cli_fail, cli_fail_call, cli_usage_error, cli_connect,
 * cli_parse_args, cli_help_common, cli_print_json) say so and return an
 * exit code; the rest print nothing. The API calls are client.h's.
 */
#ifndef GPUORCH_CLI_CLI_H
#define GPUORCH_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "client/client.h"
#include "util/httpc.h"
#include "util/opts.h"
#include "base/err.h"

enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,
    CLI_EXIT_USAGE = 2,
};

#define CLI_DEFAULT_SERVER "http://127.0.0.1:8080"
#define CLI_ERR_MAX        CLIENT_ERR_MAX      /* a buffer that holds any one-line message here */
#define CLI_CONFIG_MAX     ((size_t)64 * 1024) /* bytes of a configuration file */

/* ---- flags ----------------------------------------------------------- */

/* What every command accepts: where the server is, the token, --help, and
 * (read commands) --json. Pointers are borrowed from argv. */
struct cli_common {
    const char *server, *token, *token_file;
    bool json, help;
};

/* The table entries of the common flags, for a command whose args struct
 * `args` (a struct type) holds a struct cli_common `member` (util/opts.h). */
#define CLI_OPTS_COMMON(args, member)                                                              \
    {.name = "server", .type = OPTS_STRING, .offset = offsetof(args, member.server)},              \
        {.name = "token", .type = OPTS_STRING, .offset = offsetof(args, member.token)},            \
        {.name = "token-file", .type = OPTS_STRING, .offset = offsetof(args, member.token_file)},  \
    {                                                                                              \
        .name = "help", .short_name = 'h', .type = OPTS_HELP,                                      \
        .offset = offsetof(args, member.help)                                                      \
    }
/* The same with --help alone: for the commands whose -h is Slurm's
 * --noheader (queue as squeue, info as sinfo). */
#define CLI_OPTS_COMMON_LONG_HELP(args, member)                                                    \
    {.name = "server", .type = OPTS_STRING, .offset = offsetof(args, member.server)},              \
        {.name = "token", .type = OPTS_STRING, .offset = offsetof(args, member.token)},            \
        {.name = "token-file", .type = OPTS_STRING, .offset = offsetof(args, member.token_file)},  \
    {                                                                                              \
        .name = "help", .type = OPTS_HELP, .offset = offsetof(args, member.help)                   \
    }
#define CLI_OPT_JSON(args, member)                                                                 \
    {                                                                                              \
        .name = "json", .type = OPTS_FLAG, .offset = offsetof(args, member.json)                   \
    }

/* A table as cli_parse_args takes it: the array and its length. */
#define CLI_OPTS(t) (t), sizeof(t) / sizeof((t)[0])

/* The lines of --help that every command shares (connection flags, the
 * environment, the configuration file, exit codes). */
void cli_help_common(FILE *out, bool json);

/*
 * Parses a simple command's argv (argv[0] is the command's name) with
 * opts_parse against a table of n options into `args`, and its positional
 * words into a new array *ret_pos[0..*ret_npos) (caller frees; the words
 * are borrowed from argv). With --help the help member is set and no
 * value is converted. Prints the problem as one line and returns
 * CLI_EXIT_USAGE (a word in error is followed by "(see 'gpuorch CMD
 * --help')"), or CLI_EXIT_FAIL when out of memory; else returns 0.
 */
int cli_parse_args(const char *cmd, int argc, char **argv, const struct opts_opt *opts, size_t n,
                   void *args, const char ***ret_pos, size_t *ret_npos);

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

/* ---- the link to the server ----------------------------------------------- */

/* A command's link to the server. */
struct cli {
    const char *cmd; /* "submit": messages begin "gpuorch submit: " */
    struct cli_conn conn;
    struct client client;
};

/*
 * Resolves the connection (cli_conn_resolve with environ) and makes the
 * client. Returns 0, or prints the problem as one line and returns
 * CLI_EXIT_USAGE (no token found included). cmd is borrowed; release with
 * cli_disconnect, also after a failure.
 */
int cli_connect(struct cli *c, const char *cmd, const struct cli_common *flags);
void cli_disconnect(struct cli *c);

/* Prints a client call's failure (client.h's code and line in err) as
 * cli_fail does: "out of memory" for GPO_ENOMEM, else err. */
int cli_fail_call(const char *cmd, int rc, const char *err);

/* Prints "gpuorch CMD: " and the message to stderr as one line, and returns
 * CLI_EXIT_FAIL (cli_fail) or CLI_EXIT_USAGE (cli_usage_error). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#ifdef __clang_analyzer__
/* clang's static analyzer (make lint) does not follow calls into variadic
 * functions: for the analysis only, these say what they return (errbuf.h). */
#define cli_fail(...)        __extension__({ (void)cli_fail(__VA_ARGS__), CLI_EXIT_FAIL; })
#define cli_usage_error(...) __extension__({ (void)cli_usage_error(__VA_ARGS__), CLI_EXIT_USAGE; })
#endif

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
