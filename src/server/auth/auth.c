/*
 * auth.c - tokens, the join token, the logs key, the first admin, and who
 * may see which team (auth.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "base/err.h"
#include "server/auth/auth.h"
#include "util/errbuf.h"
#include "util/fsutil.h"
#include "util/token.h"
#include "base/banned.h"

#define ADMIN_NAME "admin"

bool auth_user_may(const struct auth_user *u, const char *team)
{
    return u && (u->admin || (team && u->team[0] && strcmp(u->team, team) == 0));
}

const char *auth_visible_team(const struct auth_user *u, bool kept_private)
{
    return u->admin || !kept_private ? NULL : u->team;
}

bool auth_user_sees(const struct auth_user *u, bool kept_private, const char *team)
{
    const char *only = auth_visible_team(u, kept_private);
    return !only || (team && only[0] && strcmp(only, team) == 0);
}

enum auth_result auth_check(const struct auth *a, const char *bearer, enum auth_need need,
                            struct auth_user *ret_user)
{
    if (!bearer)
        return AUTH_NO_TOKEN;
    uint8_t hash[TOKEN_HASH_LEN];
    struct store_user row = {0};
    bool formed = token_check_format(bearer) == 0 && token_hash(bearer, hash) == 0;
    if (need == AUTH_NEED_AGENT) {
        if (formed && token_hash_equal(hash, a->join_hash))
            return AUTH_OK;
        bool user = formed && store_user_get_by_token(a->store, hash, &row) == 0;
        store_user_release(&row);
        return user ? AUTH_NOT_AGENT : AUTH_BAD_TOKEN;
    }
    if (!formed || store_user_get_by_token(a->store, hash, &row) != 0)
        return AUTH_BAD_TOKEN;
    struct auth_user u = {.id = row.id,
                          .admin = row.role && strcmp(row.role, "admin") == 0,
                          .metrics = row.role && strcmp(row.role, "metrics") == 0};
    snprintf(u.name, sizeof(u.name), "%s", row.name);
    snprintf(u.team, sizeof(u.team), "%s", row.team ? row.team : "");
    snprintf(u.unix_user, sizeof(u.unix_user), "%s", row.unix_user ? row.unix_user : "");
    store_user_release(&row);
    if (need == AUTH_NEED_METRICS && !u.admin && !u.metrics)
        return AUTH_NOT_METRICS;
    if (need != AUTH_NEED_METRICS && u.metrics)
        return AUTH_ONLY_METRICS;
    if (need == AUTH_NEED_ADMIN && !u.admin)
        return AUTH_NOT_ADMIN;
    *ret_user = u;
    return AUTH_OK;
}

/* DATA/join.token: read it, or create it at first start. */
static int join_token(struct auth *a, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/join.token", a->data_dir);
    char tok[TOKEN_STR_LEN + 1];
    errno = 0;
    int rc = token_read_file(path, tok, sizeof(tok));
    if (rc == GPO_EIO && errno == ENOENT) {
        if ((rc = token_generate(tok, sizeof(tok))) == 0)
            rc = token_write_file(path, tok);
    }
    if (rc == 0)
        rc = token_hash(tok, a->join_hash);
    memset(tok, 0, sizeof(tok));
    if (rc) {
        snprintf(err, errlen, "%.4000s: %s%s%s", path, gpo_strerror(rc), errno ? ": " : "",
                 errno ? strerror(errno) : "");
        return GPO_EIO;
    }
    return 0;
}

/* DATA/NAME: 32 random bytes into key, made at first start (mode 0600). */
static int key_file(struct auth *a, const char *name, uint8_t key[32], char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", a->data_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        randombytes_buf(key, 32);
        int rc = fsutil_write_atomic(path, key, 32, 0600, 0, err, errlen);
        return rc ? GPO_EIO : 0;
    }
    ssize_t n = fd < 0 ? -1 : read(fd, key, 32);
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (n != 32) {
        snprintf(err, errlen, "%.4000s: %s", path,
                 n < 0 ? strerror(e) : "shorter than 32 bytes (remove it to make a new key)");
        return GPO_EIO;
    }
    return 0;
}

/*
 * On a shared store every controller must hold the same secrets, or agents
 * and log tokens fail at the first change of leader. The first controller
 * to lead puts its join token and keys into the store's meta ("secrets");
 * every later one takes the store's and writes them into its own DATA (a
 * file that differs is replaced, and said so), so that an operator copies
 * nothing between controllers. The store holds nothing more than a reader
 * of it could already use: every token's hash and every job.
 */
#define SECRETS_META "secrets"

static void hex32(const uint8_t key[32], char out[65])
{
    sodium_bin2hex(out, 65, key, 32);
}

static int secrets_put(struct auth *a, const char *tok, char *err, size_t errlen)
{
    char logs[65], steps[65], value[256], msg[256] = "";
    hex32(a->logs_key, logs);
    hex32(a->steps_key, steps);
    snprintf(value, sizeof(value), "1 %s %s %s", tok, logs, steps);
    struct store_batch *b = store_batch_new();
    int rc = b ? store_batch_meta_put(b, SECRETS_META, value) : GPO_ENOMEM;
    rc = rc ? (store_batch_free(b), rc) : store_commit_wait(a->store, b, NULL, 0, msg, sizeof(msg));
    sodium_memzero(value, sizeof(value));
    return rc ? errbuf_set(err, errlen, rc, "storing the shared secrets: %s",
                           msg[0] ? msg : gpo_strerror(rc))
              : 0;
}

/* Writes data to DATA/name unless it holds that already; says so when it
 * replaced another. */
static int secret_file(struct auth *a, const char *name, const void *data, size_t len, char *err,
                       size_t errlen)
{
    char path[4200], old[128];
    snprintf(path, sizeof(path), "%s/%s", a->data_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, old, sizeof(old));
    if (fd >= 0)
        close(fd);
    if (n == (ssize_t)len && memcmp(old, data, len) == 0)
        return 0;
    if (fd >= 0)
        fprintf(stderr,
                "gpuorch server: %s differs from the one the other controllers of this store "
                "use: replaced with theirs\n",
                path);
    return fsutil_write_atomic(path, data, len, 0600, 0, err, errlen) ? GPO_EIO : 0;
}

static int secrets_take(struct auth *a, const char *value, char *err, size_t errlen)
{
    char tok[TOKEN_STR_LEN + 2], logs[65], steps[65];
    size_t bin = 0;
    if (sscanf(value, "1 %47s %64s %64s", tok, logs, steps) != 3 ||
        sodium_hex2bin(a->logs_key, 32, logs, 64, NULL, &bin, NULL) != 0 || bin != 32 ||
        sodium_hex2bin(a->steps_key, 32, steps, 64, NULL, &bin, NULL) != 0 || bin != 32 ||
        token_hash(tok, a->join_hash) != 0)
        return errbuf_set(err, errlen, GPO_ECORRUPT,
                          "the store's shared secrets (meta \"%s\") are malformed", SECRETS_META);
    size_t tlen = strlen(tok);
    tok[tlen] = '\n';
    int rc = secret_file(a, "join.token", tok, tlen + 1, err, errlen);
    rc = rc ? rc : secret_file(a, "logs.key", a->logs_key, 32, err, errlen);
    rc = rc ? rc : secret_file(a, "steps.key", a->steps_key, 32, err, errlen);
    sodium_memzero(tok, sizeof(tok));
    return rc;
}

static int local_secrets(struct auth *a, char *err, size_t errlen);

/* A shared store's secrets: the store's, or this controller's (read or
 * made, as on SQLite) put there. */
static int shared_secrets(struct auth *a, char *err, size_t errlen)
{
    char *value = NULL;
    int rc = store_meta_get(a->store, SECRETS_META, &value);
    if (rc == 0) {
        rc = secrets_take(a, value, err, errlen);
        sodium_memzero(value, strlen(value));
        free(value);
        return rc;
    }
    if (rc != GPO_ENOENT)
        return errbuf_set(err, errlen, rc, "reading the shared secrets: %s", gpo_strerror(rc));
    if ((rc = local_secrets(a, err, errlen)) != 0)
        return rc;
    char path[4200], tok[TOKEN_STR_LEN + 1];
    snprintf(path, sizeof(path), "%s/join.token", a->data_dir);
    if ((rc = token_read_file(path, tok, sizeof(tok))) != 0)
        return errbuf_set(err, errlen, GPO_EIO, "%.4000s: %s", path, gpo_strerror(rc));
    rc = secrets_put(a, tok, err, errlen);
    sodium_memzero(tok, sizeof(tok));
    return rc;
}

/* DATA's join token and keys, made at first start. */
static int local_secrets(struct auth *a, char *err, size_t errlen)
{
    int rc = join_token(a, err, errlen);
    if (!rc)
        rc = key_file(a, "logs.key", a->logs_key, err, errlen);
    if (!rc)
        rc = key_file(a, "steps.key", a->steps_key, err, errlen);
    return rc;
}

void auth_node_log_token(const struct auth *a, const char *name, char out[AUTH_LOG_TOKEN_LEN + 1])
{
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256(mac, (const unsigned char *)name, strlen(name), a->logs_key);
    sodium_bin2hex(out, AUTH_LOG_TOKEN_LEN + 1, mac, sizeof(mac));
}

int auth_start(struct auth *a, struct store *store, const char *data_dir, int64_t now_ms, char *err,
               size_t errlen)
{
    a->store = store;
    int n = snprintf(a->data_dir, sizeof(a->data_dir), "%s", data_dir);
    int m = snprintf(a->admin_token_path, sizeof(a->admin_token_path), "%s/admin.token", data_dir);
    if (n < 0 || (size_t)n >= sizeof(a->data_dir) || m < 0 ||
        (size_t)m >= sizeof(a->admin_token_path))
        return errbuf_set(err, errlen, GPO_ENAMETOOLONG, "--data: path too long");
    int jrc = store_shared(store) ? shared_secrets(a, err, errlen) : local_secrets(a, err, errlen);
    if (jrc)
        return jrc;
    struct store_user row = {0};
    int rc = store_user_get_by_name(a->store, ADMIN_NAME, &row);
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
        return GPO_EIO;
    }
    /* The file first: a token in the store that nobody can read would lock
     * the admin out; a file whose commit failed is removed. A file left by a
     * first start that crashed before its commit names no user: replace it. */
    if (remove(a->admin_token_path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "%s: %s", a->admin_token_path, strerror(errno));
        return GPO_EIO;
    }
    errno = 0;
    if ((rc = token_write_file(a->admin_token_path, tok)) != 0) {
        snprintf(err, errlen, "%s: %s%s%s", a->admin_token_path, gpo_strerror(rc),
                 errno ? ": " : "", errno ? strerror(errno) : "");
        return GPO_EIO;
    }
    struct store_batch *b = store_batch_new();
    int64_t now = now_ms;
    char msg[256] = "";
    /* The admin's jobs run as the account that runs the controller. */
    char pwbuf[16384];
    struct passwd pwd, *pw = NULL;
    if (getpwuid_r(geteuid(), &pwd, pwbuf, sizeof(pwbuf), &pw) != 0)
        pw = NULL; /* no account name: the admin's jobs name none */
    rc = b ? store_batch_user_put(b, ADMIN_NAME, pw ? pw->pw_name : NULL, NULL, "admin", now)
           : GPO_ENOMEM;
    if (!rc)
        rc = store_batch_token_put(b, ADMIN_NAME, hash, "bootstrap", now);
    if (!rc)
        rc = store_commit_wait(a->store, b, NULL, 0, msg, sizeof(msg));
    else
        store_batch_free(b);
    if (rc) {
        /* The next start makes a new file; say so when this one stays. */
        bool kept = remove(a->admin_token_path) != 0 && errno != ENOENT;
        snprintf(err, errlen, "creating the admin user: %s%s%s%s%s", gpo_strerror(rc),
                 msg[0] ? ": " : "", msg, kept ? "; and could not remove " : "",
                 kept ? a->admin_token_path : "");
        return rc;
    }
    return 0;
}
