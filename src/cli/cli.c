/*
 * cli.c - what the user commands share (cli.h): flags through util/opts,
 * the configuration file and the resolution of server and token, the link
 * to the server, and small helpers for output.
 */
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/client.h"
#include "util/errbuf.h"
#include "util/jsonv.h"
#include "util/opts.h"
#include "util/timefmt.h"
#include "base/banned.h"

/* The analyzer's stand-ins (cli.h): here are the functions. */
#undef cli_fail
#undef cli_usage_error

#define TOKEN_FILE_MAX 4096 /* bytes of a token file */
#define PATH_LEN       4096

extern char **environ;

/* ---- flags ------------------------------------------------------------- */

int cli_parse_args(const char *cmd, int argc, char **argv, const struct opts_opt *opts, size_t n,
                   void *args, const char ***ret_pos, size_t *ret_npos)
{
    const char **pos = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*pos));
    if (!pos)
        return cli_fail(cmd, "out of memory");
    struct opts p;
    char err[CLI_ERR_MAX];
    size_t np = 0;
    opts_init(&p, argc - 1, argv + 1, opts, n, sizeof(*opts), 0);
    int rc = opts_parse(&p, args, pos, &np, err, sizeof(err));
    if (rc < 0) {
        free(pos);
        return p.bad ? cli_usage_error(cmd, "%s", err)
                     : cli_usage_error(cmd, "%s (see 'gpuorch %s --help')", err, cmd);
    }
    *ret_pos = pos;
    *ret_npos = np;
    return 0;
}

void cli_help_common(FILE *out, bool json)
{
    fprintf(out, "\ncommon flags:\n");
    if (json)
        fprintf(out, "  --json              print the API's JSON instead of text\n");
    fprintf(out, "  --server URL        the controller (else $GPUORCH_SERVER, the config file,\n"
                 "                      or " CLI_DEFAULT_SERVER "); several controllers' URLs\n"
                 "                      with commas: the leader among them answers\n"
                 "  --token TOKEN       the API token (else $GPUORCH_TOKEN)\n"
                 "  --token-file FILE   a file holding the token (else $GPUORCH_TOKEN_FILE, or\n"
                 "                      token_file in the config file)\n"
                 "  -h, --help          this help\n"
                 "\n"
                 "The config file is $GPUORCH_CONFIG, else $XDG_CONFIG_HOME/gpuorch/config or\n"
                 "~/.config/gpuorch/config: lines 'server = URL', 'token_file = PATH' or\n"
                 "'token = TOKEN', and '#' comments.\n"
                 "Exit codes: 0 ok, 1 failed (an API error, the server unreachable), 2 usage.\n");
}

/* ---- the configuration file -------------------------------------------- */

struct config_key {
    const char *key;
    size_t value, line; /* offsets of the char * and long members */
};

static const struct config_key config_keys[] = {
    {"server", offsetof(struct cli_config, server), offsetof(struct cli_config, server_line)},
    {"token", offsetof(struct cli_config, token), offsetof(struct cli_config, token_line)},
    {"token_file", offsetof(struct cli_config, token_file),
     offsetof(struct cli_config, token_file_line)},
};

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* s[*a..*b) without the spaces at its ends. */
static void trim(const char *s, size_t *a, size_t *b)
{
    while (*a < *b && is_space(s[*a]))
        (*a)++;
    while (*b > *a && is_space(s[*b - 1]))
        (*b)--;
}

/* One `key = value` line (text[a..b), number `line`) into *c. */
static int config_line(const char *text, size_t a, size_t b, long line, const char *path,
                       struct cli_config *c, char *err, size_t errlen)
{
    char q[JSONV_QUOTE_MAX + 4];
    const char *eq = memchr(text + a, '=', b - a);
    if (!eq)
        return errbuf_set(err, errlen, GPO_EUSAGE, "%s:%ld: expected 'key = value', got '%s'", path,
                          line, jsonv_quote(text + a, b - a, q));
    size_t ka = a, kb = (size_t)(eq - text), va = kb + 1, vb = b;
    trim(text, &ka, &kb);
    trim(text, &va, &vb);
    const struct config_key *k = NULL;
    for (size_t i = 0; i < sizeof(config_keys) / sizeof(config_keys[0]) && !k; i++)
        if (strlen(config_keys[i].key) == kb - ka &&
            memcmp(config_keys[i].key, text + ka, kb - ka) == 0)
            k = &config_keys[i];
    if (!k)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "%s:%ld: unknown key '%s' (expected server, token or token_file)", path,
                          line, jsonv_quote(text + ka, kb - ka, q));
    char **value = (char **)(void *)((char *)c + k->value);
    long *at = (long *)(void *)((char *)c + k->line);
    if (*value)
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "%s:%ld: '%s' is given twice (first on line %ld)", path, line, k->key,
                          *at);
    if (va == vb)
        return errbuf_set(err, errlen, GPO_EUSAGE, "%s:%ld: '%s' has no value", path, line, k->key);
    if (!(*value = strndup(text + va, vb - va)))
        return errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    *at = line;
    return 0;
}

int cli_config_parse(const char *text, size_t len, const char *path, struct cli_config *ret,
                     char *err, size_t errlen)
{
    struct cli_config c = {0};
    long line = 0;
    int rc = 0;
    if (!text || !ret)
        return errbuf_set(err, errlen, GPO_EINVAL, "cli_config_parse: NULL argument");
    if (memchr(text, '\0', len))
        return errbuf_set(err, errlen, GPO_EUSAGE, "%s: a NUL byte: not a text file", path);
    for (size_t at = 0; at < len && rc == 0;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t a = at, b = nl ? (size_t)(nl - text) : len;
        at = b + 1;
        line++;
        trim(text, &a, &b);
        if (a == b || text[a] == '#')
            continue;
        rc = config_line(text, a, b, line, path, &c, err, errlen);
    }
    if (rc == 0 && c.token && c.token_file)
        rc = errbuf_set(err, errlen, GPO_EUSAGE,
                        "%s:%ld: 'token' and 'token_file' (line %ld) exclude each other: keep one",
                        path, c.token_line > c.token_file_line ? c.token_line : c.token_file_line,
                        c.token_line > c.token_file_line ? c.token_file_line : c.token_line);
    if (rc) {
        cli_config_release(&c);
        return rc;
    }
    *ret = c;
    return 0;
}

void cli_config_release(struct cli_config *c)
{
    if (!c)
        return;
    free(c->server);
    free(c->token);
    free(c->token_file);
    memset(c, 0, sizeof(*c));
}

/* ---- resolving server and token ----------------------------------------- */

static const char *env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (size_t k = 0; envp && envp[k]; k++)
        if (strncmp(envp[k], name, n) == 0 && envp[k][n] == '=')
            return envp[k][n + 1] ? envp[k] + n + 1 : NULL; /* empty is unset */
    return NULL;
}

int cli_read_file(const char *path, size_t max, char **ret, size_t *ret_len, char *err,
                  size_t errlen)
{
    bool in = strcmp(path, "-") == 0;
    int fd = in ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errbuf_set(err, errlen, GPO_EIO, "%s", strerror(errno));
    char *buf = malloc(max + 1);
    size_t len = 0;
    int rc = buf ? 0 : errbuf_set(err, errlen, GPO_ENOMEM, "out of memory");
    while (rc == 0) {
        ssize_t k = read(fd, buf + len, max + 1 - len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            rc = errbuf_set(err, errlen, GPO_EIO, "%s", strerror(errno));
        else if (k == 0)
            break;
        else if ((len += (size_t)k) > max)
            rc = errbuf_set(err, errlen, GPO_EUSAGE, "larger than %zu bytes", max);
    }
    if (!in)
        close(fd);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    return 0;
}

/* A token is one word of printable ASCII (HTTP header text). */
static bool token_ok(const char *t, size_t len)
{
    if (len == 0 || len >= HTTPC_TOKEN_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (t[i] <= ' ' || t[i] > '~')
            return false;
    return true;
}

static int set_token(struct cli_conn *c, const char *t, size_t len, const char *from, char *err,
                     size_t errlen)
{
    if (!token_ok(t, len))
        return errbuf_set(err, errlen, GPO_EUSAGE,
                          "the token from %s is not a token (one word of printable ASCII, at most "
                          "%u bytes)",
                          from, HTTPC_TOKEN_MAX - 1);
    memcpy(c->token, t, len);
    c->token[len] = '\0';
    return 0;
}

static int token_from_file(struct cli_conn *c, const char *path, const char *from, char *err,
                           size_t errlen)
{
    char *text = NULL, msg[256];
    size_t len = 0;
    int rc = cli_read_file(path, TOKEN_FILE_MAX, &text, &len, msg, sizeof(msg));
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, rc, "out of memory");
    if (rc)
        return errbuf_set(err, errlen, GPO_EUSAGE, "token file '%s' (from %s): %s", path, from,
                          msg);
    size_t a = 0, b = len;
    while (a < b && (is_space(text[a]) || text[a] == '\n'))
        a++;
    while (b > a && (is_space(text[b - 1]) || text[b - 1] == '\n'))
        b--;
    char what[PATH_LEN + 64];
    snprintf(what, sizeof(what), "file '%s' (from %s)", path, from);
    rc = a == b
             ? errbuf_set(err, errlen, GPO_EUSAGE, "token file '%s' (from %s) is empty", path, from)
             : set_token(c, text + a, b - a, what, err, errlen);
    free(text);
    return rc;
}

/* The configuration file's path into buf; *ret_required when named by
 * $GPUORCH_CONFIG. False when there is none to look at. */
static bool config_path(char *const *envp, char *buf, size_t len, bool *ret_required)
{
    const char *p = env_get(envp, "GPUORCH_CONFIG"), *xdg = env_get(envp, "XDG_CONFIG_HOME");
    const char *home = env_get(envp, "HOME");
    *ret_required = p != NULL;
    int n;
    if (p)
        n = snprintf(buf, len, "%s", p);
    else if (xdg && xdg[0] == '/') /* the XDG spec: relative values are ignored */
        n = snprintf(buf, len, "%s/gpuorch/config", xdg);
    else if (home)
        n = snprintf(buf, len, "%s/.config/gpuorch/config", home);
    else
        return false;
    return n > 0 && (size_t)n < len;
}

/* Loads the configuration file into *cfg, which stays empty when there is no
 * file (and none is required); path gets the file's name either way. */
static int config_load(char *const *envp, struct cli_config *cfg, char *path, size_t pathlen,
                       char *err, size_t errlen)
{
    bool required;
    if (!config_path(envp, path, pathlen, &required))
        return 0;
    struct stat st;
    if (!required && stat(path, &st) != 0 && errno == ENOENT)
        return 0;
    char *text = NULL, msg[256];
    size_t len = 0;
    int rc = cli_read_file(path, CLI_CONFIG_MAX, &text, &len, msg, sizeof(msg));
    if (rc == GPO_ENOMEM)
        return errbuf_set(err, errlen, rc, "out of memory");
    if (rc)
        return errbuf_set(err, errlen, GPO_EUSAGE, "config file '%s'%s: %s", path,
                          required ? " (from GPUORCH_CONFIG)" : "", msg);
    rc = cli_config_parse(text, len, path, cfg, err, errlen);
    free(text);
    return rc;
}

/* A config file's token_file, relative to the file's directory; "~/" is
 * $HOME. */
static void config_relative(const char *cfg_path, const char *value, char *const *envp, char *buf,
                            size_t len)
{
    const char *home = env_get(envp, "HOME");
    const char *slash = strrchr(cfg_path, '/');
    if (value[0] == '~' && value[1] == '/' && home)
        snprintf(buf, len, "%s/%s", home, value + 2);
    else if (value[0] != '/' && slash)
        snprintf(buf, len, "%.*s/%s", (int)(slash - cfg_path), cfg_path, value);
    else /* absolute, or no directory to start from */
        snprintf(buf, len, "%s", value);
}

static int check_server(const char *url, const char *from, char *err, size_t errlen)
{
    struct httpc_urls_fault f;
    if (httpc_urls_check(url, &f) == 0)
        return 0;
    char q[JSONV_QUOTE_MAX + 4], where[PATH_LEN + 128];
    if (f.count > 1)
        snprintf(where, sizeof(where), "entry %zu of %zu, from %s", f.index, f.count, from);
    else
        snprintf(where, sizeof(where), "from %s", from);
    return errbuf_set(err, errlen, GPO_EUSAGE, "server '%s' (%s): %s",
                      jsonv_quote(f.entry, f.len, q), where, f.why);
}

/* The token, from the first place that gives one (see cli.h). */
static int resolve_token(const struct cli_common *flags, char *const *envp,
                         const struct cli_config *cfg, const char *path, struct cli_conn *c,
                         char *err, size_t errlen)
{
    const char *env_token = env_get(envp, "GPUORCH_TOKEN");
    const char *env_file = env_get(envp, "GPUORCH_TOKEN_FILE");
    char from[PATH_LEN + 32];
    if (flags->token)
        return set_token(c, flags->token, strlen(flags->token), "--token", err, errlen);
    if (flags->token_file)
        return token_from_file(c, flags->token_file, "--token-file", err, errlen);
    if (env_token)
        return set_token(c, env_token, strlen(env_token), "GPUORCH_TOKEN", err, errlen);
    if (env_file)
        return token_from_file(c, env_file, "GPUORCH_TOKEN_FILE", err, errlen);
    if (cfg->token) {
        snprintf(from, sizeof(from), "%s:%ld", path, cfg->token_line);
        return set_token(c, cfg->token, strlen(cfg->token), from, err, errlen);
    }
    if (cfg->token_file) {
        char file[PATH_LEN];
        snprintf(from, sizeof(from), "%s:%ld", path, cfg->token_file_line);
        config_relative(path, cfg->token_file, envp, file, sizeof(file));
        return token_from_file(c, file, from, err, errlen);
    }
    return errbuf_set(err, errlen, GPO_EUSAGE,
                      "no token: give --token or --token-file, set GPUORCH_TOKEN or "
                      "GPUORCH_TOKEN_FILE, or write 'token_file = PATH' in %s",
                      path[0] ? path : "~/.config/gpuorch/config");
}

int cli_conn_resolve(const struct cli_common *flags, char *const *envp, struct cli_conn *ret,
                     char *err, size_t errlen)
{
    struct cli_conn c = {0};
    struct cli_config cfg = {0};
    char path[PATH_LEN] = "", from[PATH_LEN + 32];
    int rc = 0;
    if (flags->token && flags->token_file)
        return errbuf_set(err, errlen, GPO_EUSAGE, "--token and --token-file exclude each other");
    const char *server = flags->server, *env_server = env_get(envp, "GPUORCH_SERVER");
    const char *env_token = env_get(envp, "GPUORCH_TOKEN");
    const char *env_file = env_get(envp, "GPUORCH_TOKEN_FILE");
    snprintf(from, sizeof(from), "--server");
    if (!server && env_server) {
        server = env_server;
        snprintf(from, sizeof(from), "GPUORCH_SERVER");
    }
    bool need_cfg = !server || (!flags->token && !flags->token_file && !env_token && !env_file);
    if (need_cfg && (rc = config_load(envp, &cfg, path, sizeof(path), err, errlen)))
        return rc;
    if (!server && cfg.server) {
        server = cfg.server;
        snprintf(from, sizeof(from), "%s:%ld", path, cfg.server_line);
    }
    if (!server) {
        server = CLI_DEFAULT_SERVER;
        snprintf(from, sizeof(from), "the default");
    }
    rc = check_server(server, from, err, errlen);
    if (rc == 0) {
        snprintf(c.server, sizeof(c.server), "%s", server);
        rc = resolve_token(flags, envp, &cfg, path, &c, err, errlen);
    }
    cli_config_release(&cfg);
    if (rc)
        return rc;
    *ret = c;
    return 0;
}

/* ---- the link to the server ---------------------------------------------- */

int cli_connect(struct cli *c, const char *cmd, const struct cli_common *flags)
{
    char err[CLI_ERR_MAX];
    memset(c, 0, sizeof(*c));
    c->cmd = cmd;
    int rc = cli_conn_resolve(flags, environ, &c->conn, err, sizeof(err));
    if (rc == GPO_ENOMEM)
        return cli_fail(cmd, "out of memory");
    if (rc)
        return cli_usage_error(cmd, "%s", err);
    rc = client_init(&c->client, c->conn.server, c->conn.token, err, sizeof(err));
    if (rc)
        return rc == GPO_EINVAL ? cli_usage_error(cmd, "%s", err) : cli_fail(cmd, "%s", err);
    return 0;
}

void cli_disconnect(struct cli *c)
{
    if (!c)
        return;
    client_release(&c->client);
    memset(c->conn.token, 0, sizeof(c->conn.token));
}

int cli_fail_call(const char *cmd, int rc, const char *err)
{
    return cli_fail(cmd, "%s", rc == GPO_ENOMEM ? "out of memory" : err);
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpuorch %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gpuorch %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

/* ---- output ------------------------------------------------------------- */

bool cli_print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
    if (!s)
        return false;
    fputs(s, stdout);
    fputc('\n', stdout);
    free(s);
    return true;
}

/* ---- small helpers ------------------------------------------------------ */

const char *cli_json_str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

const char *cli_size_text(int64_t mib, char *buf, size_t len)
{
    if (mib > 0 && mib % (INT64_C(1024) * 1024) == 0)
        snprintf(buf, len, "%" PRId64 "T", mib / (INT64_C(1024) * 1024));
    else if (mib > 0 && mib % 1024 == 0)
        snprintf(buf, len, "%" PRId64 "G", mib / 1024);
    else
        snprintf(buf, len, "%" PRId64 "M", mib);
    return buf;
}

int64_t cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *cli_age(const char *rfc3339, int64_t now_ms, char *buf, size_t len)
{
    int64_t at;
    if (!rfc3339 || timefmt_parse_rfc3339(rfc3339, &at) != 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    int64_t s = (now_ms - at) / 1000;
    if (s < 0)
        snprintf(buf, len, "now");
    else if (s < 60)
        snprintf(buf, len, "%" PRId64 "s ago", s);
    else if (s < 3600)
        snprintf(buf, len, "%" PRId64 "m ago", s / 60);
    else if (s < 86400)
        snprintf(buf, len, "%" PRId64 "h ago", s / 3600);
    else
        snprintf(buf, len, "%" PRId64 "d ago", s / 86400);
    return buf;
}
