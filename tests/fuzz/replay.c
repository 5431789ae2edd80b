/* replay.c - runs a libFuzzer target over given inputs once each, without
 * libFuzzer: what `make test` does with tests/fuzz's seeds, under the test
 * build's sanitizers, so that the targets keep building and the seeds keep
 * passing. Prints TAP, one case per file; a target that aborts ends the
 * program (meson counts it as failed).
 *
 *     replay [-p BYTE] FILE... [-d DIR]...
 *
 * -p: put BYTE before each FILE's bytes (a seed written for people);
 * -d: every file in DIR, in name order, as it is (a corpus libFuzzer grew).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dirent.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char *read_file(const char *path, int prefix, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    if (buf && prefix >= 0)
        buf[len++] = (unsigned char)prefix;
    for (size_t n; buf && (n = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += n;
        if (len < cap)
            continue;
        unsigned char *grown = realloc(buf, cap * 2);
        if (!grown)
            free(buf);
        buf = grown;
        cap *= 2;
    }
    fclose(f);
    *ret_len = len;
    return buf;
}

/* One TAP case: 1 when the file could not be read. */
static int replay_one(int n, const char *path, int prefix)
{
    size_t len = 0;
    unsigned char *data = read_file(path, prefix, &len);
    if (!data) {
        printf("not ok %d - %s: cannot read it\n", n, path);
        return 1;
    }
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    printf("ok %d - %s\n", n, path);
    return 0;
}

static int not_hidden(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

int main(int argc, char **argv)
{
    int prefix = -1, n = 0, failed = 0;
    /* Count the cases first: TAP's plan comes before them. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            printf("1..%d\n", n);
        n = 0;
        for (int k = 1; k < argc; k++) {
            if (strcmp(argv[k], "-p") == 0 && k + 1 < argc) {
                prefix = (int)strtol(argv[++k], NULL, 10) & 0xff;
            } else if (strcmp(argv[k], "-d") == 0 && k + 1 < argc) {
                struct dirent **names = NULL;
                int m = scandir(argv[++k], &names, not_hidden, alphasort);
                for (int i = 0; i < m; i++) {
                    char path[4096];
                    snprintf(path, sizeof(path), "%s/%s", argv[k], names[i]->d_name);
                    n++;
                    if (pass == 1)
                        failed |= replay_one(n, path, -1);
                    free(names[i]);
                }
                free(names);
                if (m < 0 && ++n && pass == 1) {
                    printf("not ok %d - %s: cannot list it\n", n, argv[k]);
                    failed = 1;
                }
            } else {
                n++;
                if (pass == 1)
                    failed |= replay_one(n, argv[k], prefix);
            }
        }
    }
    return failed;
}
