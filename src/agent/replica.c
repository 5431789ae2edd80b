/*
 * replica.c - a serving replica's readiness, metric, port and environment,
 * and the table the monitor reads them from (replica.h). The prober thread
 * and its sockets are replica_probe.c's.
 */
#include "agent/replica.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/replica_int.h"
#include "util/monotime.h"
#include "base/banned.h"

/* ---- readiness ------------------------------------------------------------ */

void replica_probe_init(struct replica_probe *p, const struct proto_serve *s, int64_t launched_ms,
                        int64_t now_ms)
{
    *p = (struct replica_probe){
        .next_ms = now_ms,
        .deadline_ms = launched_ms + s->startup_timeout_s * 1000,
        .period_ms = s->probe_period_ms,
        .threshold = s->probe_failures ? s->probe_failures : 1,
    };
}

enum replica_event replica_probe_check(struct replica_probe *p, int64_t now_ms)
{
    if (p->ever_ready || p->expired || now_ms < p->deadline_ms)
        return REPLICA_SAME;
    p->expired = true;
    p->ready = false;
    return REPLICA_EXPIRED;
}

enum replica_event replica_probe_result(struct replica_probe *p, bool ok, int64_t now_ms)
{
    if (p->expired)
        return REPLICA_SAME;
    if (!p->ever_ready && now_ms >= p->deadline_ms)
        return replica_probe_check(p, now_ms);
    if (ok) {
        p->failures = 0;
        p->next_ms = now_ms + p->period_ms;
        if (p->ready)
            return REPLICA_SAME;
        p->ready = p->ever_ready = true;
        return REPLICA_READY;
    }
    if (p->failures < UINT32_MAX)
        p->failures++;
    p->next_ms = now_ms + (p->ever_ready ? p->period_ms : REPLICA_FAST_MS);
    if (!p->ready || p->failures < p->threshold)
        return REPLICA_SAME;
    p->ready = false;
    return REPLICA_UNREADY;
}

/* ---- the Prometheus text --------------------------------------------------- */

/* Past a sample's label set "{a="x",b="y\"}"}" at s[k] == '{': the index
 * after its '}', or len when it does not close. */
static size_t skip_labels(const char *s, size_t k, size_t len)
{
    bool quoted = false;
    for (k++; k < len && s[k] != '\n'; k++) {
        if (quoted && s[k] == '\\')
            k++;
        else if (s[k] == '"')
            quoted = !quoted;
        else if (!quoted && s[k] == '}')
            return k + 1;
    }
    return len;
}

/* The value of the sample line s[k, end) after its name and labels: 0 and
 * *ret, or GPO_EINVAL. */
static int sample_value(const char *s, size_t k, size_t end, double *ret)
{
    while (k < end && (s[k] == ' ' || s[k] == '\t'))
        k++;
    char num[64];
    size_t n = 0;
    while (k < end && s[k] != ' ' && s[k] != '\t' && s[k] != '\r' && n + 1 < sizeof(num))
        num[n++] = s[k++];
    num[n] = '\0';
    if (!n)
        return GPO_EINVAL;
    char *stop = NULL;
    errno = 0;
    double v = strtod(num, &stop);
    if (stop != num + n || errno == ERANGE)
        return GPO_EINVAL;
    *ret = v;
    return 0;
}

/* Whether the line s[k, end) is a sample of `name` (then labels or a blank). */
static bool starts_sample(const char *s, size_t k, size_t end, const char *name, size_t nlen)
{
    if (end - k <= nlen || memcmp(s + k, name, nlen) != 0)
        return false;
    char c = s[k + nlen];
    return c == '{' || c == ' ' || c == '\t';
}

int replica_metric_sum(const char *text, size_t len, const char *name, double *ret)
{
    size_t nlen = strlen(name);
    double sum = 0;
    bool found = false;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t k = at;
        while (k < end && (text[k] == ' ' || text[k] == '\t'))
            k++;
        if (starts_sample(text, k, end, name, nlen)) {
            k += nlen;
            if (text[k] == '{')
                k = skip_labels(text, k, end);
            double v;
            if (k < end && sample_value(text, k, end, &v) == 0) {
                sum += v;
                found = true;
            }
        }
        at = end + 1;
    }
    if (!found)
        return GPO_ENOENT;
    if (!isfinite(sum) || fabs(sum) > 9e15)
        return GPO_ERANGE;
    *ret = sum;
    return 0;
}

int replica_http_status(const char *buf, size_t len)
{
    static const char head[] = "HTTP/1.";
    size_t hl = sizeof(head) - 1;
    if (memcmp(buf, head, len < hl ? len : hl) != 0)
        return GPO_EINVAL;
    if (len < hl + 5)
        return 0;
    const char *s = buf + hl + 1; /* after the minor version */
    if (s[0] != ' ' || s[1] < '1' || s[1] > '9' || s[2] < '0' || s[2] > '9' || s[3] < '0' ||
        s[3] > '9')
        return GPO_EINVAL;
    if (len > hl + 5 && s[4] != ' ' && s[4] != '\r')
        return GPO_EINVAL;
    return (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0');
}

/* ---- launching ------------------------------------------------------------- */

int replica_port_pick(uint32_t *ret)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t salen = sizeof(sa);
    int rc = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &salen) != 0)
        rc = -errno;
    close(fd);
    if (rc)
        return rc;
    *ret = ntohs(sa.sin_port);
    return 0;
}

int replica_env(const struct proto_serve *s, uint32_t port, struct launch_strv *env)
{
    int rc = launch_strv_add(env, "PORT=%" PRIu32, port);
    rc = rc ? rc : launch_strv_add(env, "GPUORCH_SERVICE=%s", s->service);
    return rc ? rc : launch_strv_add(env, "GPUORCH_REPLICA=%" PRIu32, s->replica);
}

/* ---- the table -------------------------------------------------------------- */

static void nolog(const char *fmt, ...)
{
    (void)fmt;
}

int replica_new(const struct replica_config *cfg, struct replica **ret)
{
    struct replica *r = calloc(1, sizeof(*r));
    if (!r)
        return GPO_ENOMEM;
    r->cfg = *cfg;
    if (!r->cfg.log)
        r->cfg.log = nolog;
    r->wake_fd = -1;
    pthread_mutex_init(&r->lock, NULL);
    *ret = r;
    return 0;
}

void replica_rep_free(struct replica_rep *a)
{
    if (!a)
        return;
    replica_conn_close(&a->pc);
    replica_conn_close(&a->mc);
    free(a->service);
    free(a->probe_path);
    free(a->metric);
    free(a);
}

void replica_free(struct replica *r)
{
    if (!r)
        return;
    replica_thread_stop(r);
    for (size_t k = 0; k < r->n; k++)
        replica_rep_free(r->v[k]);
    free(r->v);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static struct replica_rep *find(struct replica *r, uint64_t job, uint32_t attempt)
{
    for (size_t k = 0; k < r->n; k++) {
        struct replica_rep *a = r->v[k];
        if (a->job == job && a->attempt == attempt && !a->gone)
            return a;
    }
    return NULL;
}

/* A new entry for the table (not in it yet), or NULL. */
static struct replica_rep *rep_new(uint64_t job, uint32_t attempt, const struct proto_serve *s,
                                   uint32_t port, int64_t launched_ms, int64_t now)
{
    struct replica_rep *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    *a = (struct replica_rep){
        .job = job,
        .attempt = attempt,
        .port = port,
        .replica = s->replica,
        .service = strdup(s->service),
        .probe_path = strdup(s->probe_path),
        .metric = s->metric ? strdup(s->metric) : NULL,
        .probe_timeout_ms = s->probe_timeout_ms,
        .startup_timeout_s = s->startup_timeout_s,
        .pc = {.fd = -1},
        .mc = {.fd = -1},
        .ep = {.port = port, .metric_milli = PROTO_NONE, .ready_ms = PROTO_NONE},
    };
    replica_probe_init(&a->probe, s, launched_ms, now);
    if (!a->service || !a->probe_path || (s->metric && !a->metric)) {
        replica_rep_free(a);
        return NULL;
    }
    return a;
}

int replica_add(struct replica *r, uint64_t job, uint32_t attempt, const struct proto_serve *s,
                uint32_t port, int64_t launched_ms)
{
    pthread_mutex_lock(&r->lock);
    int rc = find(r, job, attempt) ? GPO_EEXIST : 0;
    if (!rc && r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        // NOLINTNEXTLINE(bugprone-sizeof-expression): *v is a pointer (an array of them)
        struct replica_rep **v = realloc(r->v, cap * sizeof(*v));
        if (v) {
            r->v = v;
            r->cap = cap;
        }
        rc = v ? 0 : GPO_ENOMEM;
    }
    struct replica_rep *a = rc ? NULL : rep_new(job, attempt, s, port, launched_ms, monotime_ms());
    if (!rc && !a)
        rc = GPO_ENOMEM;
    rc = rc ? rc : replica_thread_start(r);
    if (rc)
        replica_rep_free(a);
    else
        r->v[r->n++] = a;
    pthread_mutex_unlock(&r->lock);
    if (!rc)
        replica_thread_wake(r);
    return rc;
}

void replica_remove(struct replica *r, uint64_t job, uint32_t attempt)
{
    pthread_mutex_lock(&r->lock);
    struct replica_rep *a = find(r, job, attempt);
    if (a)
        a->gone = true; /* the prober thread frees it: it may be polling its sockets */
    pthread_mutex_unlock(&r->lock);
    if (a)
        replica_thread_wake(r);
}

int replica_report(struct replica *r, uint64_t job, uint32_t attempt, int64_t now_ms,
                   struct replica_state *ret)
{
    pthread_mutex_lock(&r->lock);
    struct replica_rep *a = find(r, job, attempt);
    if (a) {
        const struct proto_endpoint *ep = &a->ep, *was = &a->sent;
        bool metric = ep->metric_milli != was->metric_milli;
        *ret = (struct replica_state){
            .ep = *ep,
            .owed = !a->sent_any || ep->ready != was->ready || ep->ready_ms != was->ready_ms ||
                    (metric && now_ms >= a->sent_ms + REPLICA_METRIC_MS) ||
                    now_ms >= a->sent_ms + REPLICA_REFRESH_MS,
            .expired = a->probe.expired,
            .startup_timeout_s = a->startup_timeout_s,
        };
        if (!ep->ready && a->probe.ever_ready)
            snprintf(ret->reason, sizeof(ret->reason),
                     "not ready: %" PRIu32 " failed probes in a row (last: %s)", a->probe.failures,
                     a->last_failure);
    }
    pthread_mutex_unlock(&r->lock);
    return a ? 0 : GPO_ENOENT;
}

void replica_sent(struct replica *r, uint64_t job, uint32_t attempt,
                  const struct proto_endpoint *ep, int64_t now_ms)
{
    pthread_mutex_lock(&r->lock);
    struct replica_rep *a = find(r, job, attempt);
    if (a) {
        a->sent = *ep;
        a->sent_any = true;
        a->sent_ms = now_ms;
    }
    pthread_mutex_unlock(&r->lock);
}
