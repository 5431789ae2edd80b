#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "server/srv.h"
#include "util/token.h"
#include "base/banned.h"

#define ADMIN_NAME "admin"

const struct srv_user *srv_request_user(struct http_request *req)
{
    const struct srv_user *u = http_request_app_data(req);
    return u->valid ? u : NULL;
}

bool srv_user_may(const struct srv_user *u, const char *team)
{
    return u && (u->admin || (team && u->team[0] && strcmp(u->team, team) == 0));
}

/*
 * Tokens are looked up by their SHA-256, through the store's index: only the
 * hash of a 256-bit random secret is ever compared, so the lookup's timing
 * tells nothing about a token (the hash is what token_hash_equal would
 * compare). A malformed token is refused before any lookup.
 */
bool srv_authorize(struct http_request *req, unsigned route_flags, void *ctx)
{
    struct server *s = ctx;
    const char *tok = http_request_bearer(req);
    if (!tok) {
        http_request_add_header(req, "WWW-Authenticate", "Bearer");
        http_request_error(req, 401, "unauthorized",
                           "missing bearer token (Authorization: Bearer TOKEN)");
        return false;
    }
    uint8_t hash[TOKEN_HASH_LEN];
    struct store_user row = {0};
    bool formed = token_check_format(tok) == 0 && token_hash(tok, hash) == 0;
    if (route_flags & SRV_ROUTE_AGENT) {
        /* Agent routes take the join token, and only it. */
        if (formed && token_hash_equal(hash, s->join_hash))
            return true;
        if (formed && store_user_get_by_token(s->store, hash, &row) == 0) {
            store_user_release(&row);
            http_request_error(req, 403, "forbidden", "node routes take the join token");
            return false;
        }
        http_request_add_header(req, "WWW-Authenticate", "Bearer error=\"invalid_token\"");
        http_request_error(req, 401, "unauthorized", "invalid join token");
        return false;
    }
    if (!formed || store_user_get_by_token(s->store, hash, &row) != 0) {
        http_request_add_header(req, "WWW-Authenticate", "Bearer error=\"invalid_token\"");
        http_request_error(req, 401, "unauthorized", "invalid or revoked token");
        return false;
    }
    struct srv_user *u = http_request_app_data(req);
    u->id = row.id;
    snprintf(u->name, sizeof(u->name), "%s", row.name);
    snprintf(u->team, sizeof(u->team), "%s", row.team ? row.team : "");
    snprintf(u->unix_user, sizeof(u->unix_user), "%s", row.unix_user ? row.unix_user : "");
    u->admin = row.role && strcmp(row.role, "admin") == 0;
    u->valid = true;
    store_user_release(&row);
    if ((route_flags & SRV_ROUTE_ADMIN) && !u->admin) {
        http_request_error(req, 403, "forbidden", "only admins may do this");
        return false;
    }
    return true;
}

/* DATA/join.token: read it, or create it at first start. */
static int join_token(struct server *s, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/join.token", s->cfg.data_dir);
    char tok[TOKEN_STR_LEN + 1];
    errno = 0;
    int rc = token_read_file(path, tok, sizeof(tok));
    if (rc == GPO_EIO && errno == ENOENT) {
        if ((rc = token_generate(tok, sizeof(tok))) == 0)
            rc = token_write_file(path, tok);
    }
    if (rc == 0)
        rc = token_hash(tok, s->join_hash);
    memset(tok, 0, sizeof(tok));
    if (rc) {
        snprintf(err, errlen, "%.4000s: %s%s%s", path, gpo_strerror(rc), errno ? ": " : "",
                 errno ? strerror(errno) : "");
        return -EIO;
    }
    return 0;
}

/* DATA/logs.key: 32 random bytes, made at first start (mode 0600). */
static int logs_key(struct server *s, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/logs.key", s->cfg.data_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        char tmp[4300];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        randombytes_buf(s->logs_key, sizeof(s->logs_key));
        int w = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        bool ok = w >= 0 &&
                  write(w, s->logs_key, sizeof(s->logs_key)) == (ssize_t)sizeof(s->logs_key) &&
                  fsync(w) == 0;
        if (w >= 0)
            close(w);
        if (!ok || rename(tmp, path) != 0) {
            snprintf(err, errlen, "%.4000s: %s", tmp, strerror(errno));
            return -EIO;
        }
        return 0;
    }
    ssize_t n = fd < 0 ? -1 : read(fd, s->logs_key, sizeof(s->logs_key));
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof(s->logs_key)) {
        snprintf(err, errlen, "%.4000s: %s", path,
                 n < 0 ? strerror(e) : "shorter than 32 bytes (remove it to make a new key)");
        return -EIO;
    }
    return 0;
}

void srv_node_log_token(const struct server *s, const char *name, char out[SRV_LOG_TOKEN_LEN + 1])
{
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256(mac, (const unsigned char *)name, strlen(name), s->logs_key);
    sodium_bin2hex(out, SRV_LOG_TOKEN_LEN + 1, mac, sizeof(mac));
}

int srv_auth_bootstrap(struct server *s, char *err, size_t errlen)
{
    int jrc = join_token(s, err, errlen);
    if (!jrc)
        jrc = logs_key(s, err, errlen);
    if (jrc)
        return jrc;
    int n = snprintf(s->admin_token_path, sizeof(s->admin_token_path), "%s/admin.token",
                     s->cfg.data_dir);
    if (n < 0 || (size_t)n >= sizeof(s->admin_token_path)) {
        snprintf(err, errlen, "--data: path too long");
        return -EINVAL;
    }
    struct store_user row = {0};
    int rc = store_user_get_by_name(s->store, ADMIN_NAME, &row);
    store_user_release(&row);
    if (rc == 0)
        return 0; /* not the first start */
    if (rc != GPO_ENOENT) {
        snprintf(err, errlen, "reading users: %s", gpo_strerror(rc));
        return rc;
    }
    char tok[TOKEN_STR_LEN + 1];
    uint8_t hash[TOKEN_HASH_LEN];
    if ((rc = token_generate(tok, sizeof(tok))) != 0 || (rc = token_hash(tok, hash)) != 0) {
        snprintf(err, errlen, "generating the admin token: %s", gpo_strerror(rc));
        return -EIO;
    }
    /* The file first: a token in the store that nobody can read would lock
     * the admin out; a file whose commit failed is removed. A file left by a
     * first start that crashed before its commit names no user: replace it. */
    if (remove(s->admin_token_path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "%s: %s", s->admin_token_path, strerror(errno));
        return -EIO;
    }
    errno = 0;
    if ((rc = token_write_file(s->admin_token_path, tok)) != 0) {
        snprintf(err, errlen, "%s: %s%s%s", s->admin_token_path, gpo_strerror(rc),
                 errno ? ": " : "", errno ? strerror(errno) : "");
        return -EIO;
    }
    struct store_batch *b = store_batch_new();
    int64_t now = srv_now_ms();
    char msg[256] = "";
    /* The admin's jobs run as the account that runs the controller. */
    const struct passwd *pw = getpwuid(geteuid());
    rc = b ? store_batch_user_put(b, ADMIN_NAME, pw ? pw->pw_name : NULL, NULL, "admin", now)
           : GPO_ENOMEM;
    if (!rc)
        rc = store_batch_token_put(b, ADMIN_NAME, hash, "bootstrap", now);
    if (!rc)
        rc = store_commit_wait(s->store, b, NULL, 0, msg, sizeof(msg));
    else
        store_batch_free(b);
    if (rc) {
        remove(s->admin_token_path);
        snprintf(err, errlen, "creating the admin user: %s%s%s", gpo_strerror(rc),
                 msg[0] ? ": " : "", msg);
        return rc;
    }
    return 0;
}
