/* test_agent_logsrv.c - the agent's log server over loopback: a state
 * directory under mkdtemp with attempts written by hand (attempt.json and log
 * files), reads with offsets from the start and from the end, stderr, HEAD
 * and X-Log-Size, the token (missing, wrong, replaced), bad queries naming
 * their parameter, an unknown attempt, files not owned by the attempt's uid
 * (403; the chown case as root only), a forged attempt.json, and follow mode:
 * bytes appended by another thread arrive as they are written and the stream
 * ends with all of them once the status file appears, also for a log file
 * created after the request; a log whose open blocks holds up only its own
 * follower (the opener is the config's, here one the test holds shut).
 * Clients: a raw socket (status and headers) and libcurl through
 * util/httpc.h (streams). */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/logsrv.h"
#include "agent/logsrv_files.h"
#include "util/httpc.h"
#include "tmptree.h"
#include "base/banned.h"

#define TOKEN        "good-token-0123456789"
#define WAIT_LIMIT_S 10 /* a generous deadline for events, never a timing assertion */
#define OUT_TEXT     "line one\nline two\nline three\n" /* 29 bytes */
#define ERR_TEXT     "warning: something\n"

struct env {
    char dir[64]; /* the state directory */
    struct logsrv *l;
    uint16_t port;
};

/* ---- files ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void append_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0640);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

__attribute__((format(printf, 3, 4))) static void path_of(char *buf, const struct env *e,
                                                          const char *fmt, ...)
{
    char rel[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof(rel), fmt, ap);
    va_end(ap);
    snprintf(buf, 512, "%s/%s", e->dir, rel);
}

/* attempts/JOB.ATT with attempt.json (extra: more members, or "") */
static void make_attempt(const struct env *e, const char *id, unsigned uid, const char *extra)
{
    char p[512], json[1024];
    path_of(p, e, "attempts/%s", id);
    assert_int_equal(mkdir(p, 0750), 0);
    path_of(p, e, "attempts/%s/attempt.json", id);
    snprintf(json, sizeof(json), "{\"uid\": %u, \"gid\": %u, \"cgroup\": \"\"%s}\n", uid,
             (unsigned)getegid(), extra);
    write_file(p, json);
}

/* The status file, as the shim writes it: a temp file renamed into place. */
static void finish_attempt(const struct env *e, const char *id)
{
    char tmp[512], p[512];
    path_of(tmp, e, "attempts/%s/status.tmp", id);
    path_of(p, e, "attempts/%s/status", id);
    write_file(tmp, "{\"exit_code\": 0}\n");
    assert_int_equal(rename(tmp, p), 0);
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_logsrv.XXXXXX");
    assert_non_null(mkdtemp(e->dir));
    char p[512], err[256];
    path_of(p, e, "attempts");
    assert_int_equal(mkdir(p, 0750), 0);
    make_attempt(e, "7.1", (unsigned)geteuid(), "");
    path_of(p, e, "attempts/7.1/stdout");
    write_file(p, OUT_TEXT);
    path_of(p, e, "attempts/7.1/stderr");
    write_file(p, ERR_TEXT);
    struct logsrv_config cfg = {.bind_addr = "127.0.0.1", .state_dir = e->dir, .token = TOKEN};
    assert_int_equal(logsrv_new(&cfg, &e->l, err, sizeof(err)), 0);
    e->port = logsrv_port(e->l);
    assert_true(e->port > 0);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    logsrv_free(e->l);
    tmptree_remove(e->dir);
    free(e);
    return 0;
}

/* ---- a raw client: one request, Connection: close, the answer de-chunked ---- */

struct answer {
    int status;
    char head[4096]; /* lower-cased */
    char body[8192];
    size_t len;
};

static void recv_all(int fd, char *buf, size_t cap, size_t *ret_len)
{
    size_t len = 0;
    ssize_t n;
    while (len < cap && (n = recv(fd, buf + len, cap - len, 0)) > 0)
        len += (size_t)n;
    *ret_len = len;
}

static void dechunk(struct answer *a, const char *raw, size_t len)
{
    const char *p = raw, *end = raw + len;
    while (p < end) {
        char *next;
        long n = strtol(p, &next, 16);
        const char *data = memmem(next, (size_t)(end - next), "\r\n", 2);
        assert_non_null(data);
        data += 2;
        if (n == 0)
            return;
        assert_true(data + n <= end && a->len + (size_t)n < sizeof(a->body));
        memcpy(a->body + a->len, data, (size_t)n);
        a->len += (size_t)n;
        p = data + n + 2;
    }
    fail_msg("the chunked body did not end");
}

static void ask(const struct env *e, const char *method, const char *path, const char *token,
                struct answer *a)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(e->port)};
    struct timeval tv = {.tv_sec = WAIT_LIMIT_S};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    char req[1024], auth[256] = "";
    if (token)
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s\r\n",
                     method, path, auth);
    assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    static char raw[1 << 16];
    size_t len;
    recv_all(fd, raw, sizeof(raw), &len);
    close(fd);
    memset(a, 0, sizeof(*a));
    const char *blank = memmem(raw, len, "\r\n\r\n", 4);
    assert_non_null(blank);
    size_t hlen = (size_t)(blank - raw) + 2;
    assert_true(hlen < sizeof(a->head));
    for (size_t i = 0; i < hlen; i++)
        a->head[i] = (char)(raw[i] >= 'A' && raw[i] <= 'Z' ? raw[i] + 32 : raw[i]);
    a->status = (int)strtol(a->head + 9, NULL, 10);
    const char *body = blank + 4;
    size_t blen = len - (size_t)(body - raw);
    if (strstr(a->head, "transfer-encoding: chunked")) {
        dechunk(a, body, blen);
    } else {
        assert_true(blen < sizeof(a->body));
        memcpy(a->body, body, blen);
        a->len = blen;
    }
}

static const char *header(const struct answer *a, const char *name, char *buf, size_t len)
{
    char key[128];
    snprintf(key, sizeof(key), "\r\n%s:", name);
    const char *p = strstr(a->head, key);
    buf[0] = '\0';
    if (p) {
        p += strlen(key);
        p += strspn(p, " ");
        snprintf(buf, len, "%.*s", (int)strcspn(p, "\r"), p);
    }
    return buf;
}

static void expect_body(const struct answer *a, const char *text)
{
    assert_int_equal(a->status, 200);
    assert_int_equal(a->len, strlen(text));
    assert_memory_equal(a->body, text, a->len);
}

/* ---- reads without follow ---- */

static void reads_the_whole_log_with_its_size(void **state)
{
    struct env *e = *state;
    struct answer a;
    char v[64];
    ask(e, "GET", "/v1/attempts/7/1/logs", TOKEN, &a);
    expect_body(&a, OUT_TEXT);
    assert_string_equal(header(&a, "x-log-size", v, sizeof(v)), "29");
    assert_string_equal(header(&a, "content-type", v, sizeof(v)), "text/plain");
    ask(e, "GET", "/v1/attempts/7/1/logs?stream=stderr", TOKEN, &a);
    expect_body(&a, ERR_TEXT);
    ask(e, "HEAD", "/v1/attempts/7/1/logs", TOKEN, &a);
    assert_int_equal(a.status, 200);
    assert_int_equal(a.len, 0);
    assert_string_equal(header(&a, "x-log-size", v, sizeof(v)), "29");
}

static void offsets_count_from_the_start_or_from_the_end(void **state)
{
    struct env *e = *state;
    struct answer a;
    char v[64];
    ask(e, "GET", "/v1/attempts/7/1/logs?offset=9", TOKEN, &a);
    expect_body(&a, "line two\nline three\n");
    ask(e, "GET", "/v1/attempts/7/1/logs?offset=-11", TOKEN, &a);
    expect_body(&a, "line three\n");
    assert_string_equal(header(&a, "x-log-size", v, sizeof(v)), "29");
    ask(e, "GET", "/v1/attempts/7/1/logs?offset=-1000", TOKEN, &a); /* more than there is */
    expect_body(&a, OUT_TEXT);
    ask(e, "GET", "/v1/attempts/7/1/logs?offset=29", TOKEN, &a); /* at the end */
    expect_body(&a, "");
    ask(e, "GET", "/v1/attempts/7/1/logs?offset=5000", TOKEN, &a); /* past it */
    expect_body(&a, "");
    ask(e, "GET", "/v1/attempts/7/1/logs?stream=stderr&offset=-3&follow=0", TOKEN, &a);
    expect_body(&a, "ng\n");
}

static void a_log_not_written_yet_reads_as_empty(void **state)
{
    struct env *e = *state;
    struct answer a;
    char v[64];
    make_attempt(e, "8.2", (unsigned)geteuid(), "");
    ask(e, "GET", "/v1/attempts/8/2/logs", TOKEN, &a);
    expect_body(&a, "");
    assert_string_equal(header(&a, "x-log-size", v, sizeof(v)), "0");
}

/* ---- refusals ---- */

static void a_missing_or_wrong_token_is_401_and_a_new_token_replaces_the_old(void **state)
{
    struct env *e = *state;
    struct answer a;
    const char *path = "/v1/attempts/7/1/logs";
    ask(e, "GET", path, NULL, &a);
    assert_int_equal(a.status, 401);
    assert_non_null(strstr(a.body, "\"unauthorized\""));
    ask(e, "GET", path, "good-token-0123456780", &a); /* same length, one byte off */
    assert_int_equal(a.status, 401);
    ask(e, "GET", path, "good-token", &a); /* a prefix */
    assert_int_equal(a.status, 401);
    ask(e, "GET", path, TOKEN "0", &a); /* longer */
    assert_int_equal(a.status, 401);
    assert_int_equal(logsrv_set_token(e->l, "second-token"), 0);
    ask(e, "GET", path, TOKEN, &a);
    assert_int_equal(a.status, 401);
    ask(e, "GET", path, "second-token", &a);
    expect_body(&a, OUT_TEXT);
    assert_int_equal(logsrv_set_token(e->l, NULL), 0); /* none: everything refused */
    ask(e, "GET", path, "second-token", &a);
    assert_int_equal(a.status, 401);
    assert_int_equal(logsrv_set_token(e->l, "bad token"), GPO_EINVAL);
}

static void bad_queries_are_400_naming_the_parameter(void **state)
{
    struct env *e = *state;
    static const struct {
        const char *query, *word;
    } cases[] = {
        {"stream=stdin", "stream"},      {"offset=abc", "offset"}, {"offset=+5", "offset"},
        {"offset=", "offset"},           {"follow=yes", "follow"}, {"tail=5", "'tail'"},
        {"offset=1&stream=x", "stream"},
    };
    struct answer a;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[256];
        snprintf(path, sizeof(path), "/v1/attempts/7/1/logs?%s", cases[i].query);
        ask(e, "GET", path, TOKEN, &a);
        assert_int_equal(a.status, 400);
        assert_non_null(strstr(a.body, "\"invalid_query\""));
        assert_non_null(strstr(a.body, cases[i].word));
    }
    ask(e, "GET", "/v1/attempts/x7/1/logs", TOKEN, &a);
    assert_int_equal(a.status, 400);
    assert_non_null(strstr(a.body, "job"));
    ask(e, "GET", "/v1/attempts/7/0/logs", TOKEN, &a);
    assert_int_equal(a.status, 400);
    assert_non_null(strstr(a.body, "attempt"));
}

static void an_unknown_attempt_is_404_naming_it(void **state)
{
    struct env *e = *state;
    struct answer a;
    ask(e, "GET", "/v1/attempts/7/2/logs", TOKEN, &a);
    assert_int_equal(a.status, 404);
    assert_non_null(strstr(a.body, "\"not_found\""));
    assert_non_null(strstr(a.body, "7.2"));
    ask(e, "GET", "/v1/attempts/123/1/logs?follow=1", TOKEN, &a);
    assert_int_equal(a.status, 404);
    assert_non_null(strstr(a.body, "123.1"));
}

static void a_log_owned_by_another_uid_is_403(void **state)
{
    struct env *e = *state;
    struct answer a;
    char p[512];
    /* the attempt runs as another uid; its "log" is ours (a root file, when
     * the tests run as root): the job must not read it through the agent */
    unsigned other = (unsigned)geteuid() + 4242;
    path_of(p, e, "attempts/7.1/stdout");
    char extra[600];
    snprintf(extra, sizeof(extra), ", \"stdout\": \"%s\"", p);
    make_attempt(e, "9.1", other, extra);
    ask(e, "GET", "/v1/attempts/9/1/logs", TOKEN, &a);
    assert_int_equal(a.status, 403);
    assert_non_null(strstr(a.body, "\"forbidden\""));
    ask(e, "GET", "/v1/attempts/9/1/logs?follow=1", TOKEN, &a);
    assert_int_equal(a.status, 403);
    /* through a symbolic link in the attempt's directory: the same */
    char link[512];
    make_attempt(e, "9.2", other, "");
    path_of(link, e, "attempts/9.2/stdout");
    assert_int_equal(symlink(p, link), 0);
    ask(e, "GET", "/v1/attempts/9/2/logs", TOKEN, &a);
    assert_int_equal(a.status, 403);
    /* not a regular file */
    make_attempt(e, "9.3", (unsigned)geteuid(), "");
    char fifo[512];
    path_of(fifo, e, "attempts/9.3/stdout");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    ask(e, "GET", "/v1/attempts/9/3/logs", TOKEN, &a); /* and the open did not block */
    assert_int_equal(a.status, 403);
}

static void a_log_chowned_to_another_uid_is_403_as_root(void **state)
{
    struct env *e = *state;
    if (geteuid() != 0)
        skip();
    struct answer a;
    char p[512];
    make_attempt(e, "10.1", 1000, "");
    path_of(p, e, "attempts/10.1/stdout");
    write_file(p, "theirs\n");
    assert_int_equal(chown(p, 1000, 1000), 0);
    ask(e, "GET", "/v1/attempts/10/1/logs", TOKEN, &a);
    expect_body(&a, "theirs\n");
    assert_int_equal(chown(p, 1001, 1000), 0); /* now another user's */
    ask(e, "GET", "/v1/attempts/10/1/logs", TOKEN, &a);
    assert_int_equal(a.status, 403);
    assert_non_null(strstr(a.body, "uid 1000"));
}

static void an_attempt_json_the_launcher_did_not_write_is_refused(void **state)
{
    struct env *e = *state;
    if (geteuid() != 0)
        skip(); /* only root can give a file away */
    struct answer a;
    char p[512];
    make_attempt(e, "11.1", 0, "");
    path_of(p, e, "attempts/11.1/attempt.json");
    assert_int_equal(chown(p, 1000, 1000), 0); /* a job rewrote it, claiming uid 0 */
    ask(e, "GET", "/v1/attempts/11/1/logs", TOKEN, &a);
    assert_int_equal(a.status, 500);
    assert_non_null(strstr(a.body, "owned by uid 1000"));
}

/* ---- follow ---- */

struct follower {
    const struct env *e;
    const char *path;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    char data[8192];
    size_t len;
    bool done;
    int rc;
    long status;
};

static int follower_data(const void *data, size_t len, void *ctx)
{
    struct follower *f = ctx;
    if (len == 0) /* httpc's once-a-second call */
        return 0;
    pthread_mutex_lock(&f->mu);
    if (len > sizeof(f->data) - f->len)
        len = sizeof(f->data) - f->len; /* more than written: the length check fails */
    memcpy(f->data + f->len, data, len);
    f->len += len;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static void *follower_main(void *arg)
{
    struct follower *f = arg;
    char url[64], err[256];
    struct httpc *c = NULL;
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", (unsigned)f->e->port);
    int rc = httpc_new(url, TOKEN, &c, err, sizeof(err));
    long status = 0;
    if (rc == 0)
        rc = httpc_stream(c, f->path, 0, follower_data, f, &status, err, sizeof(err));
    httpc_free(c);
    pthread_mutex_lock(&f->mu);
    f->rc = rc;
    f->status = status;
    f->done = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static struct follower *follow_start(const struct env *e, const char *path, pthread_t *t)
{
    struct follower *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->e = e;
    f->path = path;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    assert_int_equal(pthread_create(t, NULL, follower_main, f), 0);
    return f;
}

/* Waits until the follower holds `want` bytes (or ended, with done). */
static void follow_wait(struct follower *f, size_t want, bool done)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += WAIT_LIMIT_S;
    pthread_mutex_lock(&f->mu);
    while (done ? !f->done : f->len < want && !f->done)
        assert_int_not_equal(pthread_cond_timedwait(&f->cond, &f->mu, &dl), ETIMEDOUT);
    pthread_mutex_unlock(&f->mu);
}

static void follow_end(struct follower *f, pthread_t t)
{
    pthread_join(t, NULL);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cond);
    free(f);
}

static void follow_streams_appended_bytes_and_ends_after_the_status_file(void **state)
{
    struct env *e = *state;
    char p[512], expect[1024];
    pthread_t t;
    struct follower *f = follow_start(e, "/v1/attempts/7/1/logs?follow=1&offset=-11", &t);
    snprintf(expect, sizeof(expect), "line three\n");
    follow_wait(f, strlen(expect), false);
    path_of(p, e, "attempts/7.1/stdout");
    for (int k = 0; k < 10; k++) {
        char line[64];
        snprintf(line, sizeof(line), "appended %d\n", k);
        append_file(p, line);
        snprintf(expect + strlen(expect), sizeof(expect) - strlen(expect), "%s", line);
        follow_wait(f, strlen(expect), false); /* it arrives before the next is written */
    }
    append_file(p, "the last words\n"); /* written just before the end */
    snprintf(expect + strlen(expect), sizeof(expect) - strlen(expect), "the last words\n");
    finish_attempt(e, "7.1");
    follow_wait(f, 0, true);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->status, 200);
    assert_int_equal(f->len, strlen(expect));
    assert_memory_equal(f->data, expect, f->len);
    follow_end(f, t);
}

static void follow_of_an_ended_attempt_sends_the_file_and_ends(void **state)
{
    struct env *e = *state;
    pthread_t t;
    finish_attempt(e, "7.1");
    struct follower *f = follow_start(e, "/v1/attempts/7/1/logs?follow=1&stream=stderr", &t);
    follow_wait(f, 0, true);
    assert_int_equal(f->rc, 0);
    assert_int_equal(f->len, strlen(ERR_TEXT));
    assert_memory_equal(f->data, ERR_TEXT, f->len);
    follow_end(f, t);
}

/* A follow read by hand, to know when the server has answered: the socket,
 * and bytes read but not consumed. */
struct rawf {
    int fd;
    char buf[4096];
    size_t len;
};

static bool rawf_fill(struct rawf *c)
{
    assert_true(c->len < sizeof(c->buf));
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
    if (n > 0)
        c->len += (size_t)n;
    return n > 0;
}

/* The next line without its CRLF into out. */
static void rawf_line(struct rawf *c, char *out, size_t outlen)
{
    char *crlf;
    while (!(crlf = memmem(c->buf, c->len, "\r\n", 2)))
        assert_true(rawf_fill(c));
    size_t n = (size_t)(crlf - c->buf);
    snprintf(out, outlen, "%.*s", (int)n, c->buf);
    memmove(c->buf, crlf + 2, c->len - n - 2);
    c->len -= n + 2;
}

/* The next chunk's data into out (NUL-terminated); its size, 0 at the end. */
static size_t rawf_chunk(struct rawf *c, char *out, size_t outlen)
{
    char line[64];
    rawf_line(c, line, sizeof(line));
    size_t n = (size_t)strtoul(line, NULL, 16);
    assert_true(n < outlen);
    while (c->len < n + 2)
        assert_true(rawf_fill(c));
    memcpy(out, c->buf, n);
    out[n] = '\0';
    memmove(c->buf, c->buf + n + 2, c->len - n - 2);
    c->len -= n + 2;
    return n;
}

static void follow_waits_for_a_log_file_created_after_the_request(void **state)
{
    struct env *e = *state;
    char p[512], line[512], got[64] = "", chunk[64];
    make_attempt(e, "12.1", (unsigned)geteuid(), "");
    struct rawf c = {.len = 0};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(e->port)};
    struct timeval tv = {.tv_sec = WAIT_LIMIT_S};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c.fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c.fd >= 0);
    assert_int_equal(setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(c.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *req = "GET /v1/attempts/12/1/logs?follow=true HTTP/1.1\r\nHost: t\r\n"
                      "Authorization: Bearer " TOKEN "\r\n\r\n";
    assert_int_equal(send(c.fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    rawf_line(&c, line, sizeof(line));
    assert_non_null(strstr(line, " 200 "));
    do /* the head: the server has answered, and no stdout exists yet */
        rawf_line(&c, line, sizeof(line));
    while (line[0]);
    path_of(p, e, "attempts/12.1/stdout");
    append_file(p, "hello\n");
    while (strlen(got) < 6 && rawf_chunk(&c, chunk, sizeof(chunk)) > 0)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s", chunk);
    append_file(p, "world\n");
    while (strlen(got) < 12 && rawf_chunk(&c, chunk, sizeof(chunk)) > 0)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s", chunk);
    assert_string_equal(got, "hello\nworld\n");
    finish_attempt(e, "12.1");
    assert_int_equal(rawf_chunk(&c, chunk, sizeof(chunk)), 0); /* the end */
    close(c.fd);
}

/* The shim creates a log file as root and then gives it to the job's user: a
 * follow that finds it in between waits instead of failing. */
static void follow_waits_while_a_new_log_file_is_still_roots(void **state)
{
    struct env *e = *state;
    if (geteuid() != 0)
        skip();
    char p[512], line[512], got[64] = "", chunk[64];
    make_attempt(e, "14.1", 1000, "");
    path_of(p, e, "attempts/14.1/stdout");
    write_file(p, ""); /* root's for now */
    struct answer a;
    ask(e, "HEAD", "/v1/attempts/14/1/logs?follow=1", TOKEN, &a); /* the controller's first ask */
    assert_int_equal(a.status, 200);
    ask(e, "HEAD", "/v1/attempts/14/1/logs", TOKEN, &a); /* a plain read: not the user's yet */
    assert_int_equal(a.status, 403);
    struct rawf c = {.len = 0};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(e->port)};
    struct timeval tv = {.tv_sec = WAIT_LIMIT_S};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c.fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c.fd >= 0);
    assert_int_equal(setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(c.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    const char *req = "GET /v1/attempts/14/1/logs?follow=1 HTTP/1.1\r\nHost: t\r\n"
                      "Authorization: Bearer " TOKEN "\r\n\r\n";
    assert_int_equal(send(c.fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    rawf_line(&c, line, sizeof(line));
    assert_non_null(strstr(line, " 200 "));
    do
        rawf_line(&c, line, sizeof(line));
    while (line[0]);
    /* A file created in the attempt's directory wakes the stream while the
     * log is still root's: it must wait, not fail. */
    char other[512];
    path_of(other, e, "attempts/14.1/pid");
    write_file(other, "1\n");
    assert_int_equal(chown(p, 1000, 1000), 0);
    append_file(p, "late\n");
    while (strlen(got) < 5 && rawf_chunk(&c, chunk, sizeof(chunk)) > 0)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s", chunk);
    assert_string_equal(got, "late\n");
    finish_attempt(e, "14.1");
    assert_int_equal(rawf_chunk(&c, chunk, sizeof(chunk)), 0);
    close(c.fd);
}

/* Opens a follow request by hand and reads its status line and head. */
/* Sends a follow request on a new connection, reading nothing. */
static void rawf_send(const struct env *e, struct rawf *c, const char *path)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(e->port)};
    struct timeval tv = {.tv_sec = WAIT_LIMIT_S};
    char req[512];
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " TOKEN "\r\n\r\n", path);
    assert_int_equal(send(c->fd, req, (size_t)n, MSG_NOSIGNAL), n);
}

/* The answer's status, its head read (the body left). */
static int rawf_status(struct rawf *c)
{
    char line[512];
    rawf_line(c, line, sizeof(line));
    int status = (int)strtol(line + 9, NULL, 10);
    do
        rawf_line(c, line, sizeof(line));
    while (line[0]);
    return status;
}

static int rawf_open(const struct env *e, struct rawf *c, const char *path)
{
    rawf_send(e, c, path);
    return rawf_status(c);
}

static void follow_streams_are_capped_and_one_that_leaves_frees_its_slot(void **state)
{
    struct env *e = *state;
    const char *path = "/v1/attempts/7/1/logs?follow=1&offset=-1";
    struct rawf *c = calloc(LOGSRV_MAX_FOLLOW + 1, sizeof(*c));
    assert_non_null(c);
    for (unsigned i = 0; i < LOGSRV_MAX_FOLLOW; i++)
        assert_int_equal(rawf_open(e, &c[i], path), 200);
    struct answer a;
    char v[64];
    ask(e, "GET", path, TOKEN, &a);
    assert_int_equal(a.status, 503);
    assert_non_null(strstr(a.body, "\"too_many_streams\""));
    assert_string_equal(header(&a, "retry-after", v, sizeof(v)), "1");
    ask(e, "GET", "/v1/attempts/7/1/logs", TOKEN, &a); /* reads without follow still work */
    expect_body(&a, OUT_TEXT);
    close(c[0].fd); /* noticed at the watcher's next tick */
    struct timespec dl, now;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += WAIT_LIMIT_S;
    int status;
    while ((status = rawf_open(e, &c[LOGSRV_MAX_FOLLOW], path)) == 503) {
        close(c[LOGSRV_MAX_FOLLOW].fd);
        struct timespec pause = {.tv_nsec = 50 * 1000 * 1000};
        nanosleep(&pause, NULL); /* a retry's pace, not a timing assertion */
        clock_gettime(CLOCK_MONOTONIC, &now);
        assert_true(now.tv_sec < dl.tv_sec);
    }
    assert_int_equal(status, 200);
    for (unsigned i = 1; i <= LOGSRV_MAX_FOLLOW; i++)
        close(c[i].fd);
    free(c);
}

/* Follows asked at once, with FREE slots left: the cap is checked and the
 * slot taken together, so that exactly FREE of them stream and the others
 * get 503, however their opens interleave (the slot was once taken only
 * after the 200 was on its way, and a burst of follows went past the cap). */
#define AT_ONCE 40u
#define FREE    8u
static void follow_opens_at_once_never_pass_the_cap(void **state)
{
    struct env *e = *state;
    const char *path = "/v1/attempts/7/1/logs?follow=1&offset=-1";
    struct rawf *c = calloc(LOGSRV_MAX_FOLLOW - FREE + AT_ONCE, sizeof(*c));
    assert_non_null(c);
    unsigned held = LOGSRV_MAX_FOLLOW - FREE, ok = 0, full = 0;
    for (unsigned i = 0; i < held; i++)
        assert_int_equal(rawf_open(e, &c[i], path), 200);
    for (unsigned i = held; i < held + AT_ONCE; i++)
        rawf_send(e, &c[i], path);
    for (unsigned i = held; i < held + AT_ONCE; i++) {
        int status = rawf_status(&c[i]);
        ok += status == 200;
        if (status != 503)
            continue;
        while (!memmem(c[i].buf, c[i].len, "too_many_streams", 16) && rawf_fill(&c[i]))
            ; /* the body, up to the server's close */
        full += memmem(c[i].buf, c[i].len, "too_many_streams", 16) != NULL;
    }
    assert_int_equal(ok, FREE);
    assert_int_equal(full, AT_ONCE - FREE);
    for (unsigned i = 0; i < held + AT_ONCE; i++)
        close(c[i].fd);
    free(c);
}
#undef AT_ONCE
#undef FREE

static void freeing_the_server_cuts_open_follow_streams(void **state)
{
    struct env *e = *state;
    pthread_t t;
    struct follower *f = follow_start(e, "/v1/attempts/7/1/logs?follow=1", &t);
    follow_wait(f, strlen(OUT_TEXT), false);
    logsrv_free(e->l);
    e->l = NULL;
    follow_wait(f, 0, true);
    assert_int_not_equal(f->rc, 0); /* cut: the chunked body never ended */
    assert_int_equal(f->len, strlen(OUT_TEXT));
    follow_end(f, t);
}

static void config_errors_are_named(void **state)
{
    (void)state;
    struct logsrv *l = NULL;
    char err[256];
    struct logsrv_config none = {.bind_addr = "127.0.0.1"};
    assert_int_equal(logsrv_new(&none, &l, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "state directory"));
    struct logsrv_config bad = {.bind_addr = "not-an-address", .state_dir = "/tmp"};
    assert_int_equal(logsrv_new(&bad, &l, err, sizeof(err)), GPO_EINVAL);
    assert_non_null(strstr(err, "not-an-address"));
    struct logsrv_config tok = {.state_dir = "/tmp", .token = "a\r\nb"};
    assert_int_equal(logsrv_new(&tok, &l, err, sizeof(err)), GPO_EINVAL);
    assert_null(l);
    logsrv_free(NULL);
}

/* ---- opens that block ---- */

/* An opener that, for job 20, waits until the test opens the gate. */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool entered, open;
};

static int gated_open(void *ctx, int64_t job, int64_t attempt, const char *stream, const char *path,
                      uid_t uid, int *ret_fd, int64_t *ret_size)
{
    struct gate *g = ctx;
    (void)attempt;
    (void)stream;
    if (job == 20) {
        /* The deadline only keeps a failed test from hanging in its teardown. */
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 3 * WAIT_LIMIT_S;
        pthread_mutex_lock(&g->mu);
        g->entered = true;
        pthread_cond_broadcast(&g->cv);
        while (!g->open && pthread_cond_timedwait(&g->cv, &g->mu, &dl) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&g->mu);
    }
    return logsrv_file_open(path, uid, ret_fd, ret_size);
}

static void a_follower_whose_open_blocks_delays_no_other_follower(void **state)
{
    struct env *e = *state;
    struct gate g = {.entered = false, .open = false};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    /* This test's server: the same state, the gated opener. */
    logsrv_free(e->l);
    char err[256], p[512];
    struct logsrv_config cfg = {.bind_addr = "127.0.0.1",
                                .state_dir = e->dir,
                                .token = TOKEN,
                                .open = gated_open,
                                .open_ctx = &g};
    assert_int_equal(logsrv_new(&cfg, &e->l, err, sizeof(err)), 0);
    e->port = logsrv_port(e->l);
    make_attempt(e, "20.1", (unsigned)geteuid(), "");
    path_of(p, e, "attempts/20.1/stdout");
    write_file(p, "blocked one\n");
    pthread_t tb, tf;
    struct follower *blocked = follow_start(e, "/v1/attempts/20/1/logs?follow=1", &tb);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += WAIT_LIMIT_S;
    pthread_mutex_lock(&g.mu);
    while (!g.entered)
        assert_int_not_equal(pthread_cond_timedwait(&g.cv, &g.mu, &dl), ETIMEDOUT);
    pthread_mutex_unlock(&g.mu);
    /* Its open is stuck in the opener: another follower streams and ends,
     * and a plain read answers, all while the gate stays shut. */
    struct follower *free_one = follow_start(e, "/v1/attempts/7/1/logs?follow=1", &tf);
    follow_wait(free_one, strlen(OUT_TEXT), false);
    path_of(p, e, "attempts/7.1/stdout");
    append_file(p, "more\n");
    follow_wait(free_one, strlen(OUT_TEXT) + 5, false);
    finish_attempt(e, "7.1");
    follow_wait(free_one, 0, true);
    assert_int_equal(free_one->rc, 0);
    assert_int_equal(free_one->len, strlen(OUT_TEXT) + 5);
    struct answer a;
    ask(e, "GET", "/v1/attempts/7/1/logs?stream=stderr", TOKEN, &a);
    expect_body(&a, ERR_TEXT);
    pthread_mutex_lock(&g.mu);
    bool still_shut = !g.open;
    pthread_mutex_lock(&blocked->mu);
    size_t got = blocked->len;
    bool ended = blocked->done;
    pthread_mutex_unlock(&blocked->mu);
    g.open = true; /* now the stuck one goes on */
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    assert_true(still_shut);
    assert_int_equal(got, 0);
    assert_false(ended);
    follow_wait(blocked, strlen("blocked one\n"), false);
    finish_attempt(e, "20.1");
    follow_wait(blocked, 0, true);
    assert_int_equal(blocked->rc, 0);
    assert_int_equal(blocked->len, strlen("blocked one\n"));
    assert_memory_equal(blocked->data, "blocked one\n", blocked->len);
    follow_end(free_one, tf);
    follow_end(blocked, tb);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
}

int main(void)
{
#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        TEST(reads_the_whole_log_with_its_size),
        TEST(offsets_count_from_the_start_or_from_the_end),
        TEST(a_log_not_written_yet_reads_as_empty),
        TEST(a_missing_or_wrong_token_is_401_and_a_new_token_replaces_the_old),
        TEST(bad_queries_are_400_naming_the_parameter),
        TEST(an_unknown_attempt_is_404_naming_it),
        TEST(a_log_owned_by_another_uid_is_403),
        TEST(a_log_chowned_to_another_uid_is_403_as_root),
        TEST(an_attempt_json_the_launcher_did_not_write_is_refused),
        TEST(follow_streams_appended_bytes_and_ends_after_the_status_file),
        TEST(follow_of_an_ended_attempt_sends_the_file_and_ends),
        TEST(follow_waits_for_a_log_file_created_after_the_request),
        TEST(follow_waits_while_a_new_log_file_is_still_roots),
        TEST(follow_streams_are_capped_and_one_that_leaves_frees_its_slot),
        TEST(follow_opens_at_once_never_pass_the_cap),
        TEST(freeing_the_server_cuts_open_follow_streams),
        TEST(a_follower_whose_open_blocks_delays_no_other_follower),
        cmocka_unit_test(config_errors_are_named),
    };
#undef TEST
    return cmocka_run_group_tests(tests, NULL, NULL);
}
