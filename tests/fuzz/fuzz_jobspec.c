/* fuzz_jobspec.c - libFuzzer target: any bytes as the body of POST /v1/jobs,
 * the controller's most exposed input (any member may send one). A body
 * that is JSON must be refused with one non-empty line, or decode; what
 * the API then shows (jobspec_to_json) must decode again to the same spec,
 * and a copy must show the same. Bytes after a leading '#' go to Slurm's
 * array syntax instead. tests/fuzz/run.sh builds and runs it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster/jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one_line(const char *err)
{
    if (!err[0] || strchr(err, '\n'))
        abort(); /* every refusal says why, on one line */
}

static void array_text(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    struct jobspec_array a;
    char err[512] = "";
    if (jobspec_array_parse(text, &a, err, sizeof(err)) == 0) {
        for (size_t k = 1; k < a.n; k++) {
            if (a.index[k] <= a.index[k - 1])
                abort(); /* sorted and distinct */
        }
        free(a.index);
    } else {
        one_line(err);
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size && data[0] == '#') {
        array_text(data + 1, size - 1);
        return 0;
    }
    json_t *body = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!body)
        return 0;
    struct jobspec spec, again, copy;
    char err[512] = "";
    int rc = jobspec_decode(body, &spec, err, sizeof(err));
    json_decref(body);
    if (rc) {
        one_line(err);
        return 0;
    }
    json_t *shown = jobspec_to_json(&spec);
    if (!shown)
        abort();
    if (jobspec_decode(shown, &again, err, sizeof(err)))
        abort(); /* what the API shows is a valid submission */
    json_t *shown2 = jobspec_to_json(&again);
    if (!shown2 || !json_equal(shown, shown2))
        abort(); /* of the same job */
    if (jobspec_copy(&again, &copy) == 0) {
        json_t *shown3 = jobspec_to_json(&copy);
        if (!shown3 || !json_equal(shown, shown3))
            abort();
        json_decref(shown3);
        jobspec_release(&copy);
    }
    json_decref(shown);
    json_decref(shown2);
    jobspec_release(&again);
    jobspec_release(&spec);
    return 0;
}
