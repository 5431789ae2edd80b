/* test_util_token.c - bearer tokens: generated tokens are well formed and
 * distinct, malformed ones are refused by shape alone, SHA-256 matches the
 * FIPS 180-2 vectors, comparison, and the token file: mode 0600 whatever the
 * umask, never overwritten, nothing left behind on failure, refused when
 * group or others can read it. Files live in a mkdtemp directory removed at
 * the end. */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "util/token.h"
#include "base/banned.h"

struct env {
    char dir[64];
};

static int group_setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    if (!e || token_lib_init() != 0)
        return -1;
    snprintf(e->dir, sizeof(e->dir), "/tmp/test_util_token.XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    *state = e;
    return 0;
}

static void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 && unlink(path) < 0)
            rmdir(path);
    }
    if (d)
        closedir(d);
}

static int group_teardown(void **state)
{
    struct env *e = *state;
    empty_dir(e->dir);
    rmdir(e->dir);
    free(e);
    return 0;
}

/* Each file test starts from an empty directory. */
static int clean(void **state)
{
    struct env *e = *state;
    empty_dir(e->dir);
    return 0;
}

static size_t count_entries(const char *dir)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));)
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void write_raw(const char *path, const char *data, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(data, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_generated_tokens_are_well_formed_and_distinct(void **state)
{
    (void)state;
    enum { N = 1000 };
    static char tokens[N][TOKEN_STR_LEN + 1];
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(token_generate(tokens[i], sizeof(tokens[i])), 0);
        assert_int_equal(strlen(tokens[i]), TOKEN_STR_LEN);
        assert_memory_equal(tokens[i], "gpo_", 4);
        assert_int_equal(token_check_format(tokens[i]), 0);
        /* libsodium decodes it back to 32 bytes (strictly: no stray bits). */
        unsigned char bin[64];
        size_t binlen = 0;
        assert_int_equal(sodium_base642bin(bin, sizeof(bin), tokens[i] + 4, TOKEN_STR_LEN - 4, NULL,
                                           &binlen, NULL, sodium_base64_VARIANT_URLSAFE_NO_PADDING),
                         0);
        assert_int_equal(binlen, TOKEN_RANDOM_LEN);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(tokens[i], tokens[j]);
    }
}

static void test_generate_refuses_a_small_buffer(void **state)
{
    (void)state;
    char buf[TOKEN_STR_LEN + 1];
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(token_generate(buf, TOKEN_STR_LEN), GPO_ENOBUFS);
    assert_int_equal(buf[0], 'x');
    assert_int_equal(token_generate(NULL, 100), GPO_EINVAL);
    assert_int_equal(token_lib_init(), 0); /* again: harmless */
}

static void test_check_format_refuses_malformed_tokens(void **state)
{
    (void)state;
    char good[TOKEN_STR_LEN + 1];
    assert_int_equal(token_generate(good, sizeof(good)), 0);
    char t[TOKEN_STR_LEN + 8];

    /* The canonical encoding of 32 zero bytes, and of 32 0xff bytes. */
    assert_int_equal(token_check_format("gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), 0);
    assert_int_equal(token_check_format("gpo___________________________________________8"), 0);

    static const char *const bad[] = {
        "",
        "gpo",
        "gpo_",
        "Bearer gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "GPO_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  /* prefix is case-sensitive */
        "gpx_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  /* wrong prefix */
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",   /* 42 characters */
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", /* 44 characters */
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",  /* padding */
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA+A",  /* standard base64, not url */
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/A",
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA A", /* space */
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB", /* stray low bits: not canonical */
        "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\xc3\xa9",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (token_check_format(bad[i]) != GPO_ESYNTAX)
            fail_msg("accepted '%s'", bad[i]);
    /* A good token with a newline or anything else after it. */
    snprintf(t, sizeof(t), "%s\n", good);
    assert_int_equal(token_check_format(t), GPO_ESYNTAX);
    snprintf(t, sizeof(t), "%sA", good);
    assert_int_equal(token_check_format(t), GPO_ESYNTAX);
    assert_int_equal(token_check_format(NULL), GPO_EINVAL);
}

static void test_hash_matches_sha256_test_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *in, *hex;
    } v[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t h[TOKEN_HASH_LEN];
        char hex[TOKEN_HASH_HEX_LEN + 1];
        assert_int_equal(token_hash(v[i].in, h), 0);
        assert_int_equal(token_hash_hex(h, hex, sizeof(hex)), 0);
        assert_string_equal(hex, v[i].hex);
    }
    uint8_t h[TOKEN_HASH_LEN];
    char hex[TOKEN_HASH_HEX_LEN + 1] = "x";
    assert_int_equal(token_hash_hex(h, hex, TOKEN_HASH_HEX_LEN), GPO_ENOBUFS);
    assert_int_equal(hex[0], 'x');
    assert_int_equal(token_hash(NULL, h), GPO_EINVAL);
    assert_int_equal(token_hash("abc", NULL), GPO_EINVAL);
}

static void test_hash_equal_compares_whole_hashes(void **state)
{
    (void)state;
    char a[TOKEN_STR_LEN + 1], b[TOKEN_STR_LEN + 1];
    assert_int_equal(token_generate(a, sizeof(a)), 0);
    assert_int_equal(token_generate(b, sizeof(b)), 0);
    uint8_t ha[TOKEN_HASH_LEN], ha2[TOKEN_HASH_LEN], hb[TOKEN_HASH_LEN];
    assert_int_equal(token_hash(a, ha), 0);
    assert_int_equal(token_hash(a, ha2), 0);
    assert_int_equal(token_hash(b, hb), 0);
    assert_true(token_hash_equal(ha, ha2));
    assert_false(token_hash_equal(ha, hb));
    /* A difference in the first byte or the last one is seen alike. */
    ha2[0] ^= 1;
    assert_false(token_hash_equal(ha, ha2));
    ha2[0] ^= 1;
    ha2[TOKEN_HASH_LEN - 1] ^= 0x80;
    assert_false(token_hash_equal(ha, ha2));
}

static void test_write_file_creates_mode_0600_even_with_umask_0(void **state)
{
    struct env *e = *state;
    char path[128], tok[TOKEN_STR_LEN + 1], back[TOKEN_STR_LEN + 1];
    snprintf(path, sizeof(path), "%s/admin.token", e->dir);
    assert_int_equal(token_generate(tok, sizeof(tok)), 0);
    mode_t old = umask(0);
    int rc = token_write_file(path, tok);
    umask(old);
    assert_int_equal(rc, 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_size, TOKEN_STR_LEN + 1);
    /* The content is the token and a newline; no temporary file is left. */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[128] = "";
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    char want[TOKEN_STR_LEN + 2];
    snprintf(want, sizeof(want), "%s\n", tok);
    assert_string_equal(line, want);
    assert_int_equal(count_entries(e->dir), 1);
    assert_int_equal(token_read_file(path, back, sizeof(back)), 0);
    assert_string_equal(back, tok);
}

static void test_write_file_refuses_to_overwrite(void **state)
{
    struct env *e = *state;
    char path[128], first[TOKEN_STR_LEN + 1], second[TOKEN_STR_LEN + 1];
    char back[TOKEN_STR_LEN + 1];
    snprintf(path, sizeof(path), "%s/admin.token", e->dir);
    assert_int_equal(token_generate(first, sizeof(first)), 0);
    assert_int_equal(token_generate(second, sizeof(second)), 0);
    assert_int_equal(token_write_file(path, first), 0);
    errno = 0;
    assert_int_equal(token_write_file(path, second), GPO_EEXIST);
    assert_int_equal(errno, EEXIST);
    assert_int_equal(token_read_file(path, back, sizeof(back)), 0);
    assert_string_equal(back, first);
    assert_int_equal(count_entries(e->dir), 1);
    /* Any existing name counts, an empty file or someone else's. */
    char other[128];
    snprintf(other, sizeof(other), "%s/notes.txt", e->dir);
    write_raw(other, "", 0644);
    assert_int_equal(token_write_file(other, first), GPO_EEXIST);
    struct stat st;
    assert_int_equal(stat(other, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(count_entries(e->dir), 2);
}

static void test_write_file_failures_leave_nothing_behind(void **state)
{
    struct env *e = *state;
    char path[128], tok[TOKEN_STR_LEN + 1];
    assert_int_equal(token_generate(tok, sizeof(tok)), 0);
    snprintf(path, sizeof(path), "%s/admin.token", e->dir);
    assert_int_equal(token_write_file(path, "gpo_short"), GPO_ESYNTAX);
    assert_int_equal(count_entries(e->dir), 0);
    snprintf(path, sizeof(path), "%s/no/such/dir/admin.token", e->dir);
    errno = 0;
    assert_int_equal(token_write_file(path, tok), GPO_EIO);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(token_write_file(NULL, tok), GPO_EINVAL);
    assert_int_equal(token_write_file(path, NULL), GPO_EINVAL);
    char longpath[5000];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    assert_int_equal(token_write_file(longpath, tok), GPO_EINVAL);
    assert_int_equal(count_entries(e->dir), 0);
}

static void test_read_file_refuses_group_or_other_access(void **state)
{
    struct env *e = *state;
    char path[128], tok[TOKEN_STR_LEN + 1], back[TOKEN_STR_LEN + 1];
    snprintf(path, sizeof(path), "%s/admin.token", e->dir);
    assert_int_equal(token_generate(tok, sizeof(tok)), 0);
    assert_int_equal(token_write_file(path, tok), 0);
    static const mode_t modes[] = {0640, 0604, 0620, 0602, 0610, 0601, 0644};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        assert_int_equal(chmod(path, modes[i]), 0);
        memset(back, 'x', sizeof(back));
        assert_int_equal(token_read_file(path, back, sizeof(back)), GPO_EMODE);
        assert_int_equal(back[0], 'x');
    }
    assert_int_equal(chmod(path, 0400), 0);
    assert_int_equal(token_read_file(path, back, sizeof(back)), 0);
    assert_string_equal(back, tok);
}

static void test_read_file_refuses_anything_but_one_token(void **state)
{
    struct env *e = *state;
    char path[128], tok[TOKEN_STR_LEN + 1], back[TOKEN_STR_LEN + 1], data[128];
    snprintf(path, sizeof(path), "%s/t", e->dir);
    assert_int_equal(token_generate(tok, sizeof(tok)), 0);

    write_raw(path, tok, 0600); /* no final newline: fine */
    assert_int_equal(token_read_file(path, back, sizeof(back)), 0);
    assert_string_equal(back, tok);

    /* What goes before and after the token. */
    static const char *const around[][2] = {
        {"", "\n\n"}, {"", "\r\n"}, {" ", "\n"}, {"", " x\n"}, {"\n", ""},
    };
    for (size_t i = 0; i < sizeof(around) / sizeof(around[0]); i++) {
        snprintf(data, sizeof(data), "%s%s%s", around[i][0], tok, around[i][1]);
        write_raw(path, data, 0600);
        assert_int_equal(token_read_file(path, back, sizeof(back)), GPO_ESYNTAX);
    }
    write_raw(path, "", 0600);
    assert_int_equal(token_read_file(path, back, sizeof(back)), GPO_ESYNTAX);
    write_raw(path, "gpo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB\n", 0600);
    assert_int_equal(token_read_file(path, back, sizeof(back)), GPO_ESYNTAX);

    assert_int_equal(token_read_file(e->dir, back, sizeof(back)), GPO_EIO); /* a directory */
    snprintf(path, sizeof(path), "%s/missing", e->dir);
    errno = 0;
    assert_int_equal(token_read_file(path, back, sizeof(back)), GPO_EIO);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(token_read_file(path, back, TOKEN_STR_LEN), GPO_ENOBUFS);
    assert_int_equal(token_read_file(NULL, back, sizeof(back)), GPO_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated_tokens_are_well_formed_and_distinct),
        cmocka_unit_test(test_generate_refuses_a_small_buffer),
        cmocka_unit_test(test_check_format_refuses_malformed_tokens),
        cmocka_unit_test(test_hash_matches_sha256_test_vectors),
        cmocka_unit_test(test_hash_equal_compares_whole_hashes),
        cmocka_unit_test_setup(test_write_file_creates_mode_0600_even_with_umask_0, clean),
        cmocka_unit_test_setup(test_write_file_refuses_to_overwrite, clean),
        cmocka_unit_test_setup(test_write_file_failures_leave_nothing_behind, clean),
        cmocka_unit_test_setup(test_read_file_refuses_group_or_other_access, clean),
        cmocka_unit_test_setup(test_read_file_refuses_anything_but_one_token, clean),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
