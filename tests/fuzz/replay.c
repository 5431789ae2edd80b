/* replay.c - runs a libFuzzer target over given inputs once each, without
 * libFuzzer: what `make test` does with tests/fuzz's seeds, under the test
 * build's sanitizers, so that the targets keep building and the seeds keep
 * passing. Prints TAP, one case per file; a target that aborts ends the
 * program (meson counts it as failed).
 *
 *     replay [-p BYTE] FILE...    (-p: put BYTE before each file's bytes)
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv)
{
    int first = 1, prefix = -1;
    if (argc > 2 && strcmp(argv[1], "-p") == 0) {
        prefix = atoi(argv[2]) & 0xff;
        first = 3;
    }
    printf("1..%d\n", argc - first);
    int failed = 0;
    for (int k = first; k < argc; k++) {
        size_t len = 0;
        unsigned char *data = read_file(argv[k], prefix, &len);
        if (!data) {
            printf("not ok %d - %s: cannot read it\n", k - first + 1, argv[k]);
            failed = 1;
            continue;
        }
        LLVMFuzzerTestOneInput(data, len);
        free(data);
        printf("ok %d - %s\n", k - first + 1, argv[k]);
    }
    return failed;
}
