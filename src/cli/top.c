/*
 * top.c - `gpuorch top` (top.h): its flags, the plain and JSON snapshots,
 * and the live screen on a terminal. What is shown is topview.c's.
 */
#define _GNU_SOURCE /* ppoll */
#include "cli/top.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/topview.h"
#include "client/client.h"
#include "util/fsutil.h"
#include "util/opts.h"
#include "util/monotime.h"
#include "base/banned.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define INTERVAL_DEFAULT_S 2.0
#define INTERVAL_MIN_S     0.1
#define INTERVAL_MAX_S     86400.0

/* Enter the alternate screen, hide the cursor, clear; and the way back. */
#define SCREEN_ENTER "\x1b[?1049h\x1b[?25l\x1b[2J"
#define SCREEN_LEAVE "\x1b[?25h\x1b[?1049l"

/* Set by the handlers, read by the loop: the only globals here. */
static volatile sig_atomic_t got_stop;  /* the signal that asks us to end, or 0 */
static volatile sig_atomic_t got_winch; /* the terminal's size changed */

static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};

struct top_args {
    struct cli_common co;
    const char *interval, *sort;
    bool once;
};

static const struct opts_opt opts[] = {
    {.name = "interval",
     .short_name = 'n',
     .type = OPTS_STRING,
     .offset = offsetof(struct top_args, interval)},
    {.name = "sort", .type = OPTS_STRING, .offset = offsetof(struct top_args, sort)},
    {.name = "once", .type = OPTS_FLAG, .offset = offsetof(struct top_args, once)},
    CLI_OPT_JSON(struct top_args, co),
    CLI_OPTS_COMMON(struct top_args, co),
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gpuorch top [-n|--interval SECONDS] [--sort KEY] [--once] [--json]\n"
            "\n"
            "Shows the cluster live, as nvtop does a machine: a summary (nodes up, GPUs\n"
            "used, MIG instances used where GPUs are in MIG mode, mean utilization,\n"
            "memory, power, running and pending jobs, cost per hour), each node with\n"
            "one row per GPU (a utilization bar, memory, power, temperature and the\n"
            "jobs on it), the services when there are any: NAME\n"
            "READY/DESIRED INFLIGHT RPS DECISION (the autoscaler's last reason), then the\n"
            "running jobs: JOB USER TEAM GPUS UTIL%% MEM TIME COST IDLE. It fits the\n"
            "terminal and redraws in place.\n"
            "Keys: q quits, s changes the jobs' order. When stdout is not a terminal, or\n"
            "with --once, it prints one plain snapshot and exits. A member sees their\n"
            "team's jobs; other jobs' GPUs show the job id alone. COST and the cost per\n"
            "hour are '-' when the server keeps no prices.\n"
            "\n"
            "  -n, --interval SECONDS   time between refreshes (default 2; 0.1 to 86400)\n"
            "      --sort KEY           the jobs' order: id, util, gpus, time, cost\n"
            "                           (default id; util, gpus, time and cost: highest first)\n"
            "      --once               one plain snapshot, even on a terminal\n");
    cli_help_common(out, true);
}

/* Writes all of buf to fd; false when the terminal is gone. */
static bool write_all(int fd, const char *buf, size_t len)
{
    return fsutil_write_all(fd, buf, len) == 0;
}

/* ---- the snapshot ------------------------------------------------------------ */

/* GET /v1/services's "services" into *ret (NULL when the server has no
 * such route or refuses it: top then shows no services). 0 or GPO_ENOMEM. */
static int services_fetch(struct cli *c, json_t **ret)
{
    char ignored[CLI_ERR_MAX];
    json_t *body = NULL;
    int r = client_call(&c->client, "GET", "/v1/services", NULL, &body, ignored, sizeof(ignored));
    const json_t *list = r == 0 ? json_object_get(body, "services") : NULL;
    *ret = json_is_array(list) ? json_incref((json_t *)list) : NULL;
    json_decref(body);
    return r == GPO_ENOMEM ? r : 0;
}

/* Reads a snapshot through c. 0 and *ret (release with top_snapshot_release);
 * else the client's codes with the message in err. A failed cost call (no
 * such route, not allowed) is no error: cost is NULL. */
static int snapshot_fetch(struct cli *c, struct top_snapshot *ret, char *err, size_t errlen)
{
    struct top_snapshot s = {.jobs = json_array()};
    struct client_jobs_filter live = {.states =
                                          1u << CLIENT_JOB_PENDING | 1u << CLIENT_JOB_RUNNING};
    json_t *body = NULL;
    int rc = s.jobs ? client_nodes_list(&c->client, &body, err, errlen) : GPO_ENOMEM;
    if (rc == 0) {
        s.nodes = json_incref(json_object_get(body, "nodes"));
        rc = s.nodes ? 0 : GPO_ENOMEM;
    }
    json_decref(body);
    if (rc == 0)
        rc = client_jobs_list(&c->client, &live, s.jobs, err, errlen);
    if (rc == 0) {
        /* A server without the cost routes, or a user they refuse, shows "-". */
        char ignored[CLI_ERR_MAX];
        struct client_cost_query q = {.by = CLIENT_COST_BY_TEAM};
        int r = client_cost(&c->client, &q, &s.cost, ignored, sizeof(ignored));
        rc = r == GPO_ENOMEM ? r : 0;
        if (r)
            s.cost = NULL;
    }
    if (rc == 0)
        rc = services_fetch(c, &s.services);
    if (rc) {
        if (rc == GPO_ENOMEM)
            snprintf(err, errlen, "out of memory");
        top_snapshot_release(&s);
        return rc;
    }
    s.taken_ms = cli_now_ms();
    *ret = s;
    return 0;
}

/* ---- the terminal --------------------------------------------------------- */

static void on_signal(int sig)
{
    if (sig == SIGWINCH)
        got_winch = 1;
    else
        got_stop = sig;
}

/* What the live screen changes, kept to give it back. */
struct term {
    bool keys;     /* stdin is a terminal: keys are read from it */
    bool saved_ok; /* saved holds stdin's settings */
    struct termios saved;
    sigset_t old_mask;  /* the signal mask before ours */
    sigset_t wait_mask; /* the mask while waiting: ours unblocked */
    struct sigaction old[ARRAY_LEN(caught)];
};

/* Keys one at a time without echo, the signals caught (blocked but while
 * waiting, so that none is missed between a check and the wait), the
 * alternate screen. */
static int term_enter(struct term *t)
{
    *t = (struct term){0};
    sigset_t ours;
    sigemptyset(&ours);
    for (size_t k = 0; k < ARRAY_LEN(caught); k++)
        sigaddset(&ours, caught[k]);
    sigprocmask(SIG_BLOCK, &ours, &t->old_mask);
    t->wait_mask = t->old_mask;
    for (size_t k = 0; k < ARRAY_LEN(caught); k++) {
        struct sigaction sa = {.sa_handler = on_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(caught[k], &sa, &t->old[k]);
        sigdelset(&t->wait_mask, caught[k]);
    }
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t->saved) == 0) {
        struct termios raw = t->saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        t->saved_ok = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
        t->keys = t->saved_ok;
    }
    return write_all(STDOUT_FILENO, SCREEN_ENTER, strlen(SCREEN_ENTER)) ? 0 : GPO_EIO;
}

static void term_leave(struct term *t)
{
    write_all(STDOUT_FILENO, SCREEN_LEAVE, strlen(SCREEN_LEAVE));
    if (t->saved_ok)
        tcsetattr(STDIN_FILENO, TCSANOW, &t->saved);
    for (size_t k = 0; k < ARRAY_LEN(caught); k++)
        sigaction(caught[k], &t->old[k], NULL);
    sigprocmask(SIG_SETMASK, &t->old_mask, NULL);
}

static void term_size(unsigned *ret_cols, unsigned *ret_rows)
{
    struct winsize ws;
    bool ok = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row;
    *ret_cols = ok ? ws.ws_col : 80;
    *ret_rows = ok ? ws.ws_row : 24;
}

/* The live screen's state between frames. */
struct live {
    struct cli *c;
    struct term term;
    struct top_snapshot snap;
    json_t *view;
    enum top_sort sort;
    char status[CLI_ERR_MAX + 64];
};

static int draw(struct live *L)
{
    struct top_screen scr = {.ansi = true,
                             .sort = L->sort,
                             .server = L->c->conn.server,
                             .status = L->status[0] ? L->status : NULL};
    term_size(&scr.cols, &scr.rows);
    char *text = NULL;
    size_t len = 0;
    int rc = top_render(L->view, &scr, &text, &len);
    if (rc == 0 && !write_all(STDOUT_FILENO, text, len))
        rc = GPO_EIO;
    free(text);
    return rc;
}

/* A new snapshot; a failure keeps the last one and says so on the screen. */
static int refresh(struct live *L)
{
    struct top_snapshot s;
    char err[CLI_ERR_MAX];
    int rc = snapshot_fetch(L->c, &s, err, sizeof(err));
    if (rc == GPO_ENOMEM)
        return rc;
    if (rc) {
        snprintf(L->status, sizeof(L->status), "refresh failed: %s (retrying)", err);
        return 0;
    }
    json_t *view = top_view_build(&s);
    if (!view) {
        top_snapshot_release(&s);
        return GPO_ENOMEM;
    }
    top_snapshot_release(&L->snap);
    json_decref(L->view);
    L->snap = s;
    L->view = view;
    L->status[0] = '\0';
    return 0;
}

/* Reads the keys waiting on stdin; true when one asks to quit. */
static bool keys(struct live *L, bool *ret_redraw)
{
    char buf[64];
    ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n <= 0) {
        L->term.keys = n < 0 && (errno == EINTR || errno == EAGAIN);
        return false;
    }
    for (ssize_t k = 0; k < n; k++) {
        if (buf[k] == 'q' || buf[k] == 'Q')
            return true;
        if (buf[k] == 's' || buf[k] == 'S') {
            L->sort = (enum top_sort)((L->sort + 1) % TOP_SORT_COUNT);
            *ret_redraw = true;
        }
    }
    return false;
}

/* Redraws every interval_ms until q or a signal; L->snap holds the first
 * snapshot. 0 (quit), or GPO_ENOMEM / GPO_EIO (the terminal went away). */
static int live_loop(struct live *L, int64_t interval_ms)
{
    int64_t next = monotime_ms() + interval_ms;
    bool redraw = true;
    int rc = 0;
    while (rc == 0 && !got_stop) {
        if (got_winch) {
            got_winch = 0;
            redraw = true;
        }
        if (redraw && (rc = draw(L)) != 0)
            break;
        redraw = false;
        int64_t wait = next - monotime_ms();
        if (wait <= 0) {
            rc = refresh(L);
            next = monotime_ms() + interval_ms;
            redraw = true;
            continue;
        }
        struct pollfd p = {L->term.keys ? STDIN_FILENO : -1, POLLIN, 0};
        struct timespec ts = {(time_t)(wait / 1000), (long)(wait % 1000) * 1000000L};
        int n = ppoll(&p, 1, &ts, &L->term.wait_mask);
        if (n > 0 && (p.revents & POLLIN) && keys(L, &redraw))
            break;
        if (n > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)))
            L->term.keys = false; /* no more keys: signals still end it */
    }
    return rc;
}

/* ---- the command ------------------------------------------------------------ */

static int parse_interval(const char *s, int64_t *ret_ms)
{
    double v = INTERVAL_DEFAULT_S;
    if (s && (opts_parse_double(s, &v) != 0 || v < INTERVAL_MIN_S || v > INTERVAL_MAX_S))
        return cli_usage_error("top",
                               "--interval: '%s' is not a number of seconds from 0.1 to "
                               "86400",
                               s);
    *ret_ms = (int64_t)(v * 1000.0 + 0.5); /* v is positive: no libm */
    return 0;
}

/* Parses argv into a; CLI_EXIT_USAGE, printed, on a problem. */
static int parse(int argc, char **argv, struct top_args *a, int64_t *ret_ms,
                 enum top_sort *ret_sort)
{
    const char **pos = NULL;
    size_t npos = 0;
    int rc = cli_parse_args("top", argc, argv, CLI_OPTS(opts), a, &pos, &npos);
    if (rc == 0 && !a->co.help && npos)
        rc = cli_usage_error("top", "unexpected argument '%s' (see 'gpuorch top --help')", pos[0]);
    free(pos);
    if (rc || a->co.help)
        return rc;
    if ((rc = parse_interval(a->interval, ret_ms)) != 0)
        return rc;
    *ret_sort = TOP_SORT_ID;
    if (a->sort && top_sort_parse(a->sort, ret_sort) != 0)
        return cli_usage_error("top", "--sort: '%s' is not one of id, util, gpus, time, cost",
                               a->sort);
    return 0;
}

/* One snapshot on stdout: JSON, or plain text as wide as the terminal when
 * stdout is one (else unlimited). */
static int print_once(struct live *L, bool json)
{
    struct top_screen scr = {.sort = L->sort, .server = L->c->conn.server};
    char *text = NULL;
    size_t len = 0;
    if (json)
        return cli_print_json(L->view) ? 0 : cli_fail("top", "out of memory");
    if (isatty(STDOUT_FILENO))
        term_size(&scr.cols, &scr.rows);
    scr.rows = 0; /* a snapshot scrolls like any output */
    if (top_render(L->view, &scr, &text, &len) != 0)
        return cli_fail("top", "out of memory");
    bool ok = fwrite(text, 1, len, stdout) == len && fflush(stdout) == 0;
    free(text);
    return ok ? 0 : cli_fail("top", "cannot write the snapshot: %s", strerror(errno));
}

int top_command(int argc, char **argv)
{
    struct top_args a = {0};
    int64_t interval_ms = 0;
    enum top_sort sort = TOP_SORT_ID;
    int rc = parse(argc, argv, &a, &interval_ms, &sort);
    if (rc == 0 && a.co.help)
        usage(stdout);
    if (rc || a.co.help)
        return rc;
    struct cli c;
    struct live L = {.c = &c, .sort = sort};
    char err[CLI_ERR_MAX];
    if ((rc = cli_connect(&c, "top", &a.co)) == 0 &&
        (rc = snapshot_fetch(&c, &L.snap, err, sizeof(err))) != 0)
        rc = cli_fail("top", "%s", err);
    if (rc == 0 && !(L.view = top_view_build(&L.snap)))
        rc = cli_fail("top", "out of memory");
    int sig = 0;
    if (rc == 0 && (a.co.json || a.once || !isatty(STDOUT_FILENO))) {
        rc = print_once(&L, a.co.json);
    } else if (rc == 0) {
        got_stop = got_winch = 0;
        rc = term_enter(&L.term);
        if (rc == 0)
            rc = live_loop(&L, interval_ms);
        term_leave(&L.term);
        sig = got_stop;
        if (rc)
            rc = cli_fail("top", "%s", rc == GPO_ENOMEM ? "out of memory" : "the terminal is gone");
    }
    json_decref(L.view);
    top_snapshot_release(&L.snap);
    cli_disconnect(&c);
    if (sig) {
        /* Ended by a signal: end the way it asks, now that the terminal is
         * back, so that a shell sees what ended us. */
        (void)signal(sig, SIG_DFL); /* sig is one top caught: it can be reset */
        (void)raise(sig);
    }
    return rc;
}
