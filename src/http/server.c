/*
 * server.c - the server's life: the bind address, the TLS files, the locks
 * and prebuilt answers, and new, start, stop and free. Requests, the timer
 * thread and MHD's callbacks are http.c's; how they fit MHD: internal.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "http/http.h"
#include "http/internal.h"
#include "base/banned.h"

static const char OOM_BODY[] =
    "{\"error\":{\"status\":500,\"code\":\"internal\",\"message\":\"out of memory\"}}";
static const char STOP_BODY[] =
    "{\"error\":{\"status\":503,\"code\":\"unavailable\",\"message\":\"the server is stopping\"}}";

__attribute__((format(printf, 3, 4))) static void seterr(char *err, size_t len, const char *fmt,
                                                         ...)
{
    va_list ap;
    if (!err || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static int parse_bind(struct http_server *srv, const char *addr, char *err, size_t errlen)
{
    char buf[INET6_ADDRSTRLEN + 2];
    size_t n = strlen(addr);
    struct sockaddr_in *v4 = (struct sockaddr_in *)(void *)&srv->addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)(void *)&srv->addr;
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']' && n - 2 < sizeof(buf))
        snprintf(buf, sizeof(buf), "%.*s", (int)(n - 2), addr + 1);
    else
        snprintf(buf, sizeof(buf), "%s", n < sizeof(buf) ? addr : "");
    if (addr[0] != '[' && inet_pton(AF_INET, buf, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(srv->cfg.port);
        srv->addrlen = sizeof(*v4);
        snprintf(srv->addr_text, sizeof(srv->addr_text), "%s", buf);
    } else if (inet_pton(AF_INET6, buf, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(srv->cfg.port);
        srv->addrlen = sizeof(*v6);
        snprintf(srv->addr_text, sizeof(srv->addr_text), "[%s]", buf);
    } else {
        seterr(err, errlen, "bind address '%.64s': not an IPv4 or IPv6 literal", addr);
        return GPO_EINVAL;
    }
    return 0;
}

/* Reads a whole PEM file (NUL-terminated) into *ret. */
static int read_pem(const char *what, const char *path, char **ret, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(HTTP_TLS_FILE_MAX + 1) : NULL;
    size_t n = buf ? fread(buf, 1, HTTP_TLS_FILE_MAX + 1, f) : 0;
    int rc = 0;
    if (!f)
        seterr(err, errlen, "%s %s: %s", what, path, strerror(errno)), rc = GPO_EIO;
    else if (!buf)
        seterr(err, errlen, "%s %s: out of memory", what, path), rc = GPO_ENOMEM;
    else if (ferror(f))
        seterr(err, errlen, "%s %s: read error", what, path), rc = GPO_EIO;
    else if (n > HTTP_TLS_FILE_MAX || n == 0)
        seterr(err, errlen, "%s %s: %s", what, path, n ? "over 1 MiB" : "empty"), rc = GPO_EINVAL;
    if (f)
        (void)fclose(f); /* read only: what was read is checked above */
    if (rc) {
        free(buf);
        return rc;
    }
    // cppcheck-suppress nullPointerRedundantCheck ; buf is NULL only where rc is set above
    buf[n] = '\0';
    *ret = buf;
    return 0;
}

static struct MHD_Response *static_json(const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (r &&
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json") != MHD_YES) {
        MHD_destroy_response(r);
        r = NULL;
    }
    return r;
}

void http_server_destroy(struct http_server *srv)
{
    if (srv->resp_oom)
        MHD_destroy_response(srv->resp_oom);
    if (srv->resp_stop)
        MHD_destroy_response(srv->resp_stop);
    if (srv->sync_init) {
        pthread_mutex_destroy(&srv->mu);
        pthread_cond_destroy(&srv->timer_cond);
        pthread_cond_destroy(&srv->idle_cond);
    }
    free(srv->tls_cert);
    free(srv->tls_key);
    route_table_free(srv->table);
    free(srv);
}

static int init_sync(struct http_server *srv)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return GPO_ENOMEM;
    bool ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
              pthread_mutex_init(&srv->mu, NULL) == 0;
    if (ok && pthread_cond_init(&srv->timer_cond, &ca) != 0) {
        pthread_mutex_destroy(&srv->mu);
        ok = false;
    }
    if (ok && pthread_cond_init(&srv->idle_cond, &ca) != 0) {
        pthread_cond_destroy(&srv->timer_cond);
        pthread_mutex_destroy(&srv->mu);
        ok = false;
    }
    pthread_condattr_destroy(&ca);
    srv->sync_init = ok;
    return ok ? 0 : GPO_ENOMEM;
}

int http_server_new(const struct http_config *cfg, struct http_server **ret_srv, char *err,
                    size_t errlen)
{
    struct http_server *srv;
    int rc = GPO_ENOMEM;
    seterr(err, errlen, "%s", "");
    if (!cfg || !ret_srv || (cfg->nroutes && !cfg->routes)) {
        seterr(err, errlen, "no config, or routes missing");
        return GPO_EINVAL;
    }
    if (!(srv = calloc(1, sizeof(*srv)))) {
        seterr(err, errlen, "out of memory");
        return GPO_ENOMEM;
    }
    srv->cfg = *cfg;
    srv->cfg.bind_addr = srv->cfg.tls_cert_file = srv->cfg.tls_key_file = NULL;
    srv->cfg.body_limit = cfg->body_limit ? cfg->body_limit : HTTP_DEFAULT_BODY_LIMIT;
    srv->cfg.conn_limit = cfg->conn_limit ? cfg->conn_limit : HTTP_DEFAULT_CONN_LIMIT;
    srv->cfg.conn_timeout_s =
        cfg->conn_timeout_s ? cfg->conn_timeout_s : HTTP_DEFAULT_CONN_TIMEOUT_S;
    if ((rc = init_sync(srv)) != 0)
        goto fail;
    rc = GPO_ENOMEM;
    srv->resp_oom = static_json(OOM_BODY);
    srv->resp_stop = static_json(STOP_BODY);
    if (!srv->resp_oom || !srv->resp_stop)
        goto fail;
    if ((rc = route_table_new(cfg->routes, cfg->nroutes, &srv->table, err, errlen)) != 0)
        return http_server_destroy(srv), rc;
    if ((rc = parse_bind(srv, cfg->bind_addr ? cfg->bind_addr : HTTP_DEFAULT_BIND, err, errlen)))
        return http_server_destroy(srv), rc;
    if (!cfg->tls_cert_file != !cfg->tls_key_file) {
        seterr(err, errlen, "TLS needs both a certificate and a key file");
        return http_server_destroy(srv), GPO_EINVAL;
    }
    if (cfg->tls_cert_file &&
        ((rc = read_pem("TLS certificate", cfg->tls_cert_file, &srv->tls_cert, err, errlen)) ||
         (rc = read_pem("TLS key", cfg->tls_key_file, &srv->tls_key, err, errlen))))
        return http_server_destroy(srv), rc;
    *ret_srv = srv;
    return 0;
fail:
    seterr(err, errlen, "out of memory");
    http_server_destroy(srv);
    return rc;
}

static int listen_socket(struct http_server *srv, int *ret_fd, char *err, size_t errlen)
{
    const int one = 1;
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    const char *what = "socket";
    int fd = socket(srv->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 &&
        (what = "setsockopt", setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one))) == 0 &&
        (what = "bind", bind(fd, (const struct sockaddr *)&srv->addr, srv->addrlen)) == 0 &&
        (what = "listen", listen(fd, SOMAXCONN)) == 0 &&
        (what = "getsockname", getsockname(fd, (struct sockaddr *)&bound, &blen)) == 0) {
        srv->port =
            ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)(void *)&bound)->sin_port
                                             : ((struct sockaddr_in6 *)(void *)&bound)->sin6_port);
        *ret_fd = fd;
        return 0;
    }
    seterr(err, errlen, "%s %s:%u: %s", what, srv->addr_text, (unsigned)srv->cfg.port,
           strerror(errno));
    if (fd >= 0)
        close(fd);
    return GPO_EIO;
}

static void timer_join(struct http_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->timer_quit = true;
    pthread_cond_signal(&srv->timer_cond);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->timer, NULL);
}

int http_server_start(struct http_server *srv, char *err, size_t errlen)
{
    int fd, rc;
    bool tls = srv->tls_cert != NULL;
    seterr(err, errlen, "%s", "");
    if (srv->started) {
        seterr(err, errlen, "the server was started before");
        return GPO_ESTATE;
    }
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        seterr(err, errlen, "this libmicrohttpd was built without TLS");
        return GPO_ETLS;
    }
    if ((rc = listen_socket(srv, &fd, err, errlen)) != 0)
        return rc;
    /* Plain HTTP goes through the accept gate (gate.c); TLS connections are
     * accepted by MHD itself, since ciphertext cannot be peeked at. */
    struct MHD_OptionItem opts[] = {
        {tls ? MHD_OPTION_LISTEN_SOCKET : MHD_OPTION_CONNECTION_LIMIT,
         tls ? fd : (intptr_t)srv->cfg.conn_limit, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)srv->cfg.conn_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)srv->cfg.conn_timeout_s, NULL},
        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, srv->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, srv->tls_key},
        {MHD_OPTION_END, 0, NULL},
    };
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    flags |= tls ? MHD_USE_TLS : MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    flags |= srv->addr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0;
    srv->timer_quit = false;
    if ((rc = pthread_create(&srv->timer, NULL, http_timer_main, srv)) != 0) {
        seterr(err, errlen, "timer thread: %s", strerror(rc));
        close(fd);
        return GPO_EIO;
    }
    srv->daemon =
        MHD_start_daemon(flags, 0, NULL, NULL, http_on_access, srv, MHD_OPTION_ARRAY, opts,
                         MHD_OPTION_URI_LOG_CALLBACK, http_on_uri, srv, MHD_OPTION_NOTIFY_COMPLETED,
                         http_on_completed, srv, MHD_OPTION_END);
    if (!srv->daemon) {
        /* With TLS, MHD owns fd from the call on and closed it (0.9.75 does on
         * every failure after reading its options): closing it again could hit
         * a reused number. Without, it is still ours. */
        if (!tls)
            close(fd);
        timer_join(srv);
        seterr(err, errlen, "start %s:%u: libmicrohttpd refused %s", srv->addr_text,
               (unsigned)srv->port, tls ? "the TLS certificate or key" : "to start");
        return tls ? GPO_ETLS : GPO_EIO;
    }
    if (!tls && (rc = http_gate_start(srv, fd, &srv->gate)) != 0) {
        MHD_stop_daemon(srv->daemon);
        srv->daemon = NULL;
        timer_join(srv);
        seterr(err, errlen, "start %s:%u: accept thread: %s", srv->addr_text, (unsigned)srv->port,
               gpo_strerror(rc));
        return GPO_EIO;
    }
    srv->started = true;
    return 0;
}

uint16_t http_server_port(const struct http_server *srv)
{
    return srv && srv->started ? srv->port : 0;
}

void http_server_stop(struct http_server *srv)
{
    struct http_request *list, *next;
    if (!srv)
        return;
    pthread_mutex_lock(&srv->mu);
    if (!srv->started || srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        return;
    }
    srv->stopping = srv->timer_quit = true;
    while (srv->thead)
        http_timer_disarm(srv, srv->thead);
    pthread_cond_signal(&srv->timer_cond);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(srv->timer, NULL); /* a running timeout callback finishes first */
    bool gated = srv->gate != NULL;
    http_gate_stop(srv->gate); /* no connection is handed to MHD after this */
    srv->gate = NULL;
    MHD_socket lfd = gated ? MHD_INVALID_SOCKET : MHD_quiesce_daemon(srv->daemon);
    pthread_mutex_lock(&srv->mu);
    list = srv->suspended;
    srv->suspended = NULL;
    for (struct http_request *r = list; r; r = r->next) {
        r->state = REQ_RESUMING; /* completions now only release */
        http_set_shared(r, srv->resp_stop, 503);
    }
    pthread_mutex_unlock(&srv->mu);
    for (struct http_request *r = list; r; r = next) {
        next = r->next; /* r may be gone once resumed */
        r->prev = r->next = NULL;
        MHD_resume_connection(r->conn);
    }
    int64_t deadline = http_mono_us() + (int64_t)HTTP_STOP_GRACE_MS * 1000;
    pthread_mutex_lock(&srv->mu);
    while (srv->resuming > 0 || (srv->nlive > 0 && http_mono_us() < deadline))
        http_wait_until(&srv->idle_cond, &srv->mu,
                        srv->resuming ? http_mono_us() + 100000 : deadline);
    pthread_mutex_unlock(&srv->mu);
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
}

void http_server_free(struct http_server *srv)
{
    if (!srv)
        return;
    http_server_stop(srv);
    pthread_mutex_lock(&srv->mu);
    srv->freed = true;
    bool last = srv->nreqs == 0;
    pthread_mutex_unlock(&srv->mu);
    if (last)
        http_server_destroy(srv);
}
