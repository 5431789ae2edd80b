/*
 * token.c - bearer tokens with libsodium: randombytes_buf for the bits,
 * sodium_bin2base64 for the text, crypto_hash_sha256 for what is stored,
 * sodium_memcmp for the comparison. Local copies of a token are wiped with
 * sodium_memzero before returning, so that a core dump holds fewer of them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "util/errbuf.h"
#include "util/fsutil.h"
#include "util/token.h"
#include "base/banned.h"

#define B64_LEN (TOKEN_STR_LEN - TOKEN_PREFIX_LEN) /* 43 */

int token_lib_init(void)
{
    /* 0: initialised now, 1: already was, -1: failed. */
    return sodium_init() < 0 ? GPO_ECRYPTO : 0;
}

int token_generate(char *buf, size_t len)
{
    if (!buf)
        return GPO_EINVAL;
    if (len < TOKEN_STR_LEN + 1)
        return GPO_ENOBUFS;
    if (sodium_init() < 0)
        return GPO_ECRYPTO;
    unsigned char bits[TOKEN_RANDOM_LEN];
    char b64[sodium_base64_ENCODED_LEN(TOKEN_RANDOM_LEN, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
    _Static_assert(sizeof(b64) == B64_LEN + 1, "43 base64 characters and a NUL");
    randombytes_buf(bits, sizeof(bits));
    sodium_bin2base64(b64, sizeof(b64), bits, sizeof(bits),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    // NOLINTNEXTLINE(bugprone-not-null-terminated-result): the next copy brings b64's NUL
    memcpy(buf, TOKEN_PREFIX, TOKEN_PREFIX_LEN);
    memcpy(buf + TOKEN_PREFIX_LEN, b64, sizeof(b64));
    sodium_memzero(bits, sizeof(bits));
    sodium_memzero(b64, sizeof(b64));
    return 0;
}

/* The 6-bit value of a base64url character, or -1. */
static int b64url_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

int token_check_format(const char *token)
{
    if (!token)
        return GPO_EINVAL;
    if (strncmp(token, TOKEN_PREFIX, TOKEN_PREFIX_LEN) != 0)
        return GPO_ESYNTAX;
    const char *b = token + TOKEN_PREFIX_LEN;
    int v = 0;
    for (size_t i = 0; i < B64_LEN; i++)
        if ((v = b64url_value(b[i])) < 0)
            return GPO_ESYNTAX; /* also a NUL: the token is too short */
    /* 43 characters carry 258 bits: the last one's low 2 bits are padding. */
    if (b[B64_LEN] != '\0' || (v & 3) != 0)
        return GPO_ESYNTAX;
    return 0;
}

int token_hash(const char *token, uint8_t out[TOKEN_HASH_LEN])
{
    if (!token || !out)
        return GPO_EINVAL;
    crypto_hash_sha256(out, (const unsigned char *)token, strlen(token));
    return 0;
}

int token_hash_hex(const uint8_t hash[TOKEN_HASH_LEN], char *buf, size_t len)
{
    if (!hash || !buf)
        return GPO_EINVAL;
    if (len < TOKEN_HASH_HEX_LEN + 1)
        return GPO_ENOBUFS;
    sodium_bin2hex(buf, len, hash, TOKEN_HASH_LEN);
    return 0;
}

bool token_hash_equal(const uint8_t *a, const uint8_t *b)
{
    return sodium_memcmp(a, b, TOKEN_HASH_LEN) == 0;
}

int token_write_file(const char *path, const char *token)
{
    if (!path || !token)
        return GPO_EINVAL;
    if (token_check_format(token) < 0)
        return GPO_ESYNTAX;
    if (strlen(path) + sizeof(".tmp.XXXXXX") > PATH_MAX)
        return GPO_EINVAL;
    char line[TOKEN_STR_LEN + 1];
    memcpy(line, token, TOKEN_STR_LEN);
    line[TOKEN_STR_LEN] = '\n';
    /* link, not rename: an existing token file is never replaced. */
    int rc = fsutil_write_atomic(path, line, sizeof(line), S_IRUSR | S_IWUSR, FSUTIL_EXCL, NULL, 0);
    sodium_memzero(line, sizeof(line));
    if (rc == 0 || rc == GPO_EINVAL)
        return rc;
    errno = rc == GPO_ENOMEM ? ENOMEM : -rc; /* why, for the caller's message */
    return rc == GPO_EEXIST ? rc : GPO_EIO;
}

/* Up to `cap` bytes of fd into p; the count, or -1 with errno. */
static ssize_t read_some(int fd, char *p, size_t cap)
{
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, p + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    return (ssize_t)n;
}

int token_read_file(const char *path, char *buf, size_t len)
{
    if (!path || !buf)
        return GPO_EINVAL;
    if (len < TOKEN_STR_LEN + 1)
        return GPO_ENOBUFS;
    /* O_NONBLOCK: a FIFO planted at the path must not hang the open. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return GPO_EIO;
    struct stat st;
    int rc = 0;
    char data[TOKEN_STR_LEN + 2]; /* one byte more than a valid file has */
    ssize_t n = -1;
    // NOLINTNEXTLINE(bugprone-branch-clone): three failures of one code, tested in this order
    if (fstat(fd, &st) < 0) {
        rc = GPO_EIO;
    } else if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        rc = GPO_EIO;
    } else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        rc = GPO_EMODE;
    } else if ((n = read_some(fd, data, sizeof(data))) < 0) {
        rc = GPO_EIO;
    }
    int saved = errno;
    close(fd);
    if (rc == 0) {
        if (n == TOKEN_STR_LEN + 1 && data[TOKEN_STR_LEN] == '\n')
            n--;
        if (n != TOKEN_STR_LEN)
            rc = GPO_ESYNTAX;
    }
    if (rc == 0) {
        data[TOKEN_STR_LEN] = '\0';
        rc = token_check_format(data);
    }
    if (rc == 0)
        memcpy(buf, data, TOKEN_STR_LEN + 1);
    sodium_memzero(data, sizeof(data));
    errno = saved;
    return rc;
}

int token_read_join(const char *path, char *buf, size_t len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return errbuf_set(err, errlen, -errno, "--join-token %s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, len - 1, f);
    bool failed = ferror(f);
    (void)fclose(f); /* read only: the read itself is checked here */
    if (failed)
        return errbuf_set(err, errlen, GPO_EIO, "--join-token %s: read failed", path);
    buf[n] = '\0';
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    if (!n || strpbrk(buf, " \t\r\n"))
        return errbuf_set(err, errlen, GPO_ESYNTAX,
                          "--join-token %s: expected one token on one line", path);
    return 0;
}
