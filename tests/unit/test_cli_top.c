/* test_cli_top.c - `gpuorch top` without a server or a terminal: the view it
 * derives from canned API answers (which job holds which GPU, sums,
 * fallbacks, the services) and the screens it lays out (bars, widths,
 * cutting to a small terminal, "-" for a missing cost, the SERVICES table
 * only when there are services, plain text without escape codes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/topview.h"
#include "util/timefmt.h"
#include "base/banned.h"

#define NOW "2026-11-30T12:00:00Z"

/* Node n1: two H100s; GPU 0 shared by jobs 7 and 8, GPU 1 runs a process of
 * job 99, which the user cannot see. Node n2: down, one A100, no samples. */
static const char *const nodes_json =
    "[{\"name\": \"n1\", \"pool\": \"main\", \"state\": \"up\", \"sampled_at\": "
    "\"2026-11-30T11:59:58Z\","
    " \"gpus\": [{\"index\": 0, \"uuid\": \"GPU-a\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": "
    "81920},"
    "            {\"index\": 1, \"uuid\": \"GPU-b\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": "
    "81920}],"
    " \"gpu_samples\": ["
    "  {\"index\": 0, \"uuid\": \"GPU-a\", \"utilization_pct\": 45, \"memory_used_mib\": 10240,"
    "   \"memory_total_mib\": 81920, \"power_mw\": 300000, \"temperature_c\": 45,"
    "   \"processes\": [{\"pid\": 10, \"memory_mib\": 4096, \"job\": 7, \"attempt\": 1},"
    "                   {\"pid\": 11, \"memory_mib\": 2048, \"job\": 8, \"attempt\": 1}]},"
    "  {\"index\": 1, \"uuid\": \"GPU-b\", \"utilization_pct\": 0, \"memory_used_mib\": 512,"
    "   \"memory_total_mib\": 81920, \"power_mw\": 60000, \"temperature_c\": 30,"
    "   \"processes\": [{\"pid\": 12, \"memory_mib\": 512, \"job\": 99, \"attempt\": 2}]}]},"
    " {\"name\": \"n2\", \"pool\": \"main\", \"state\": \"down\","
    "  \"gpus\": [{\"index\": 0, \"uuid\": \"GPU-c\", \"gpu_type\": \"A100-40GB\", \"mem_mib\": "
    "40960}]}]";

static const char *const jobs_json =
    "[{\"id\": 7, \"state\": \"RUNNING\", \"user\": \"alice\", \"team\": \"research\","
    "  \"updated_at\": \"2026-11-30T11:58:30Z\", \"cost\": 1.5, \"idle\": null,"
    "  \"spec\": {\"name\": \"train\"},"
    "  \"current_attempt\": {\"attempt\": 1, \"state\": \"RUNNING\", \"nodes\": [\"n1\"],"
    "                        \"gpus\": [\"GPU-a\"]}},"
    " {\"id\": 8, \"state\": \"RUNNING\", \"user\": \"bob\", \"team\": \"vision\","
    "  \"updated_at\": \"2026-11-30T10:00:00Z\", \"cost\": 3.25,"
    "  \"gpu_utilization_pct\": 12.5, \"gpu_memory_used_mib\": 2048,"
    "  \"idle\": {\"since\": \"2026-11-30T11:50:00Z\", \"threshold_pct\": 5, \"action\": "
    "\"requeue\","
    "            \"action_at\": null},"
    "  \"current_attempt\": {\"attempt\": 1, \"state\": \"RUNNING\", \"nodes\": [\"n1\"],"
    "                        \"gpus\": [\"GPU-a\"]}},"
    " {\"id\": 9, \"state\": \"PENDING\", \"user\": \"alice\", \"team\": \"research\"}]";

/* GET /v1/services's "services", as the contract gives them: "chat" scaled
 * up in panic with a request queued, "embed" without status (a server that
 * has not reconciled it yet), "asr" in a crash loop; listed out of order. */
static const char *const services_json =
    "[{\"name\": \"embed\", \"team\": \"ml\", \"model\": \"bge\", \"min\": 1, \"max\": 2},"
    " {\"name\": \"chat\", \"team\": \"ml\", \"model\": \"llama-3-8b\", \"min\": 0, \"max\": 8,"
    "  \"status\": {\"desired\": 3, \"ready\": 2,"
    "   \"replicas\": [{\"replica\": 1, \"state\": \"ready\", \"inflight\": 2},"
    "                  {\"replica\": 2, \"state\": \"ready\", \"inflight\": 3},"
    "                  {\"replica\": 3, \"state\": \"starting\", \"inflight\": 0,"
    "                   \"reason\": \"resources: no free GPU\"}],"
    "   \"decision\": {\"at_ms\": 0, \"from\": 1, \"to\": 3, \"panic\": true,"
    "                  \"reason\": \"1 -> 3: concurrency 5.0 over target 2 for 6 s\"},"
    "   \"observed\": {\"concurrency\": 5.0, \"rps\": 12.5, \"metric\": null, \"queued\": 4},"
    "   \"backoff\": null, \"cost\": {\"gpu_hours\": 1.5, \"cost\": 3.75}}},"
    " {\"name\": \"asr\", \"team\": \"speech\", \"min\": 1, \"max\": 1,"
    "  \"status\": {\"desired\": 1, \"ready\": 0, \"replicas\": [],"
    "   \"decision\": null, \"observed\": {\"concurrency\": 0, \"rps\": 0, \"queued\": 0},"
    "   \"backoff\": {\"failures\": 3, \"until_ms\": 0, \"reason\": \"crash loop: exit 1\"}}}]";

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);
    if (!v)
        fail_msg("bad test JSON at %d: %s", e.position, e.text);
    return v;
}

/* The canned snapshot; with_cost: the server answered GET /v1/cost. */
static struct top_snapshot snapshot(bool with_cost)
{
    struct top_snapshot s = {.nodes = parse(nodes_json), .jobs = parse(jobs_json)};
    if (with_cost)
        s.cost = parse("{\"by\": \"team\", \"rows\": [], \"rate_per_hour\": 4.98}");
    assert_int_equal(timefmt_parse_rfc3339(NOW, &s.taken_ms), 0);
    return s;
}

/* The screen of the canned snapshot; caller frees. */
static char *screen(bool with_cost, const struct top_screen *scr)
{
    struct top_snapshot s = snapshot(with_cost);
    json_t *view = top_view_build(&s);
    assert_non_null(view);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(top_render(view, scr, &text, &len), 0);
    assert_int_equal(strlen(text), len);
    json_decref(view);
    top_snapshot_release(&s);
    return text;
}

/* The line of text that contains needle, as a new string; fails without. */
static char *line_with(const char *text, const char *needle)
{
    const char *at = strstr(text, needle);
    if (!at)
        fail_msg("no line holds '%s' in:\n%s", needle, text);
    const char *start = at, *end = strchr(at, '\n');
    while (start > text && start[-1] != '\n')
        start--;
    return strndup(start, end ? (size_t)(end - start) : strlen(start));
}

/* Fails unless the plain screen of view has a line with `line` that holds `needle`. */
static void assert_line_holds(const json_t *view, const char *line, const char *needle)
{
    struct top_screen scr = {0};
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(top_render(view, &scr, &text, &len), 0);
    char *l = line_with(text, line);
    if (!strstr(l, needle))
        fail_msg("'%s' not in the line '%s'", needle, l);
    free(l);
    free(text);
}

static json_t *gpu(const json_t *view, size_t k)
{
    return json_array_get(json_object_get(view, "gpus"), k);
}

static void view_puts_each_running_job_on_its_gpus_and_sums_the_cluster(void **state)
{
    (void)state;
    struct top_snapshot s = snapshot(true);
    json_t *view = top_view_build(&s);
    assert_non_null(view);
    assert_string_equal(json_string_value(json_object_get(view, "time")), NOW);
    /* A GPU with two jobs lists both, in id order, with user and team. */
    const json_t *jobs0 = json_object_get(gpu(view, 0), "jobs");
    assert_int_equal(json_array_size(jobs0), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(jobs0, 0), "id")), 7);
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs0, 1), "team")),
                        "vision");
    /* A job the user cannot list shows by its processes, without user. */
    const json_t *jobs1 = json_object_get(gpu(view, 1), "jobs");
    assert_int_equal(json_array_size(jobs1), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(jobs1, 0), "id")), 99);
    assert_true(json_is_null(json_object_get(json_array_get(jobs1, 0), "user")));
    /* The GPU of a node without samples: inventory memory, no figures. */
    assert_string_equal(json_string_value(json_object_get(gpu(view, 2), "node")), "n2");
    assert_true(json_is_null(json_object_get(gpu(view, 2), "utilization_pct")));
    assert_int_equal(json_integer_value(json_object_get(gpu(view, 2), "memory_total_mib")), 40960);
    assert_true(json_real_value(json_object_get(gpu(view, 0), "power_w")) == 300.0);

    const json_t *sum = json_object_get(view, "summary");
    assert_int_equal(json_integer_value(json_object_get(sum, "nodes")), 2);
    assert_int_equal(json_integer_value(json_object_get(sum, "nodes_up")), 1);
    assert_int_equal(json_integer_value(json_object_get(sum, "gpus")), 3);
    /* No "share_in_use" (an older controller): each GPU held counts whole. */
    assert_true(json_real_value(json_object_get(sum, "gpus_used")) == 2.0);
    assert_int_equal(json_integer_value(json_object_get(sum, "running_jobs")), 2);
    assert_int_equal(json_integer_value(json_object_get(sum, "pending_jobs")), 1);
    assert_true(json_real_value(json_object_get(sum, "utilization_pct")) == 22.5);
    assert_int_equal(json_integer_value(json_object_get(sum, "memory_used_mib")), 10752);
    assert_int_equal(json_integer_value(json_object_get(sum, "memory_total_mib")), 163840);
    assert_true(json_real_value(json_object_get(view, "cost_rate")) == 4.98);

    /* Job 7: figures from the samples; job 8: the API's own. */
    const json_t *j7 = json_array_get(json_object_get(view, "jobs"), 0);
    const json_t *j8 = json_array_get(json_object_get(view, "jobs"), 1);
    assert_int_equal(json_array_size(json_object_get(view, "jobs")), 2);
    assert_true(json_real_value(json_object_get(j7, "utilization_pct")) == 45.0);
    assert_int_equal(json_integer_value(json_object_get(j7, "memory_used_mib")), 4096);
    assert_int_equal(json_integer_value(json_object_get(j7, "running_s")), 90);
    assert_true(json_is_null(json_object_get(j7, "idle")));
    assert_true(json_real_value(json_object_get(j8, "utilization_pct")) == 12.5);
    assert_int_equal(json_integer_value(json_object_get(j8, "memory_used_mib")), 2048);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j8, "idle"), "action")),
                        "requeue");
    json_decref(view);
    top_snapshot_release(&s);
    top_snapshot_release(&s); /* released twice: zeroed the first time */
    top_snapshot_release(NULL);
}

static void mig_instances_are_counted_in_the_summary(void **state)
{
    (void)state;
    /* One H100 in MIG mode with three instances, one held; one whose MIG
     * mode is only pending (its instances, if any, do not count). */
    struct top_snapshot s = {
        .nodes = parse("[{\"name\": \"m1\", \"pool\": \"p\", \"state\": \"up\","
                       " \"gpus\": [{\"index\": 0, \"uuid\": \"GPU-m\", \"gpu_type\": "
                       "\"H100-80GB\", \"mem_mib\": 81559, \"mig_enabled\": true, \"mig\": ["
                       "{\"profile\": \"3g.40gb\", \"start\": 4, \"in_use\": true, \"job\": 5},"
                       "{\"profile\": \"1g.10gb\", \"start\": 0, \"in_use\": false},"
                       "{\"profile\": \"1g.10gb\", \"start\": 1, \"in_use\": false}]},"
                       " {\"index\": 1, \"uuid\": \"GPU-n\", \"gpu_type\": \"H100-80GB\", "
                       "\"mem_mib\": 81559, \"mig_enabled\": false, \"mig_pending\": true}]}]"),
        .jobs = parse("[]")};
    assert_int_equal(timefmt_parse_rfc3339(NOW, &s.taken_ms), 0);
    json_t *view = top_view_build(&s);
    assert_non_null(view);
    const json_t *sum = json_object_get(view, "summary");
    assert_int_equal(json_integer_value(json_object_get(sum, "mig_instances")), 3);
    assert_int_equal(json_integer_value(json_object_get(sum, "mig_instances_used")), 1);
    assert_line_holds(view, "nodes 1/1 up", "GPUs 0/2 used  MIG 1/3 used  util");
    json_decref(view);
    top_snapshot_release(&s);
}

static void gpus_used_count_gpu_shares(void **state)
{
    (void)state;
    /* As the controller counts them: GPU-q holds only job 4's 0.25 share, the
     * MIG GPU a 3g.40gb instance (its charge: half of the GPU), GPU-r none. */
    struct top_snapshot s = {
        .nodes = parse(
            "[{\"name\": \"f1\", \"pool\": \"p\", \"state\": \"up\", \"gpus_in_use\": 0.75,"
            " \"gpus\": [{\"index\": 0, \"uuid\": \"GPU-q\", \"gpu_type\": \"H100-80GB\", "
            "\"mem_mib\": 81559, \"in_use\": true, \"share_in_use\": 0.25},"
            " {\"index\": 1, \"uuid\": \"GPU-m\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81559,"
            " \"in_use\": true, \"share_in_use\": 0.5, \"mig_enabled\": true, \"mig\": ["
            "{\"profile\": \"3g.40gb\", \"start\": 4, \"in_use\": true, \"job\": 5}]},"
            " {\"index\": 2, \"uuid\": \"GPU-r\", \"gpu_type\": \"H100-80GB\", "
            "\"mem_mib\": 81559, \"in_use\": false, \"share_in_use\": 0}]}]"),
        .jobs = parse("[{\"id\": 4, \"state\": \"RUNNING\", \"user\": \"alice\", \"team\": \"ml\","
                      "  \"updated_at\": \"2026-11-30T11:58:30Z\", \"cost\": 0.5,"
                      "  \"current_attempt\": {\"attempt\": 1, \"state\": \"RUNNING\", "
                      "\"nodes\": [\"f1\"], \"gpus\": [\"GPU-q\"], \"gpu_shares\": 0.25}}]")};
    assert_int_equal(timefmt_parse_rfc3339(NOW, &s.taken_ms), 0);
    json_t *view = top_view_build(&s);
    assert_non_null(view);
    const json_t *sum = json_object_get(view, "summary");
    assert_true(json_real_value(json_object_get(sum, "gpus_used")) == 0.75);
    const json_t *j4 = json_array_get(json_object_get(view, "jobs"), 0);
    assert_true(json_real_value(json_object_get(j4, "gpus")) == 0.25);
    assert_line_holds(view, "nodes 1/1 up", "GPUs 0.75/3 used  MIG 1/1 used");
    assert_line_holds(view, "4    alice", " ml    0.25 ");
    json_decref(view);
    top_snapshot_release(&s);
}

static void plain_snapshot_draws_bars_and_holds_no_escape_bytes(void **state)
{
    (void)state;
    struct top_screen scr = {.server = "http://127.0.0.1:8080"};
    char *text = screen(true, &scr);
    for (const char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\n')
            fail_msg("byte 0x%02x at %td in a plain snapshot", (unsigned char)*p, p - text);
    assert_int_equal(text[strlen(text) - 1], '\n');
    char *l = line_with(text, "nodes 1/2 up");
    assert_string_equal(l, "nodes 1/2 up  GPUs 2/3 used  util 22%  mem 10.5G/160G  power 360W  "
                           "jobs 2 running, 1 pending  cost 4.98/h");
    free(l);
    /* 45 % of a 20-character bar is 9 bars. */
    l = line_with(text, "45%");
    assert_string_equal(l, "    0 [|||||||||           ]  45%  10G/80G         300W  45C  "
                           "7 alice/research, 8 bob/vision");
    free(l);
    l = line_with(text, "   0%");
    assert_non_null(strstr(l, "[                    ]"));
    assert_non_null(strstr(l, "  99"));
    free(l);
    l = line_with(text, "n2  main  down");
    assert_non_null(strstr(l, "1x A100-40GB"));
    assert_non_null(strstr(l, "util -"));
    free(l);
    l = line_with(text, "JOB ");
    assert_string_equal(l, "JOB  USER   TEAM      GPUS  UTIL%  MEM  TIME      COST  IDLE");
    free(l);
    l = line_with(text, "bob ");
    assert_string_equal(l,
                        "8    bob    vision    1     12%    2G   02:00:00  3.25  idle 10m requeue");
    free(l);
    free(text);
}

static void missing_cost_shows_a_dash(void **state)
{
    (void)state;
    struct top_screen scr = {0};
    char *text = screen(false, &scr);
    char *l = line_with(text, "nodes 1/2 up");
    assert_non_null(strstr(l, "cost -"));
    free(l);
    free(text);

    struct top_snapshot s = snapshot(false);
    json_object_del(json_array_get(s.jobs, 0), "cost");
    json_t *view = top_view_build(&s);
    assert_true(json_is_null(json_object_get(view, "cost_rate")));
    size_t len;
    assert_int_equal(top_render(view, &scr, &text, &len), 0);
    l = line_with(text, "alice ");
    assert_string_equal(l, "7    alice  research  1     45%    4G   00:01:30  -     -");
    free(l);
    free(text);
    json_decref(view);
    top_snapshot_release(&s);
}

/* The bar fills the room a wider terminal gives, within 10 and 40. */
static void bar_width_follows_the_terminal(void **state)
{
    (void)state;
    static const struct {
        unsigned cols;
        const char *bar;
    } cases[] = {
        {200, "[||||||||||||||||||                      ]  45%"}, /* 40 wide */
        {80, "[||||||        ]  45%"},                            /* 80 - 42 - 24 = 14 */
        {50, "[|||||     ]  45%"},                                /* at least 10 */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct top_screen scr = {.cols = cases[k].cols};
        char *text = screen(true, &scr);
        if (!strstr(text, cases[k].bar))
            fail_msg("%u columns: no '%s' in\n%s", cases[k].cols, cases[k].bar, text);
        free(text);
    }
}

static void a_small_terminal_gets_lines_cut_to_its_size(void **state)
{
    (void)state;
    struct top_screen scr = {.cols = 40, .rows = 12, .ansi = true, .server = "http://x"};
    char *text = screen(true, &scr);
    assert_memory_equal(text, "\x1b[H", 3);
    size_t len = strlen(text);
    assert_true(len > 3 && strcmp(text + len - 3, "\x1b[J") == 0);
    assert_true(text[len - 4] != '\n'); /* a newline on the last row would scroll */
    /* Take out the escape sequences, then count rows and characters. */
    char *plain = calloc(len + 1, 1);
    size_t at = 0;
    for (size_t k = 0; k < len; k++) {
        if (text[k] == '\x1b') {
            k++;
            while (k < len && !(text[k] >= '@' && text[k] <= '~' && text[k] != '['))
                k++;
            continue;
        }
        plain[at++] = text[k];
    }
    size_t rows = 1, col = 0;
    for (const char *p = plain; *p; p++) {
        if (*p == '\n') {
            rows++;
            col = 0;
        } else if (++col > 40) {
            fail_msg("a line longer than 40 characters in:\n%s", plain);
        }
    }
    assert_int_equal(rows, 12);
    /* The GPU rows are cut, not the jobs: they keep half the rows left. */
    assert_non_null(strstr(plain, "\n... 3 more lines\n"));
    assert_non_null(strstr(plain, "\nJOB  USER"));
    assert_non_null(strstr(plain, "\n7    alice"));
    assert_non_null(strstr(plain, "\n8    bob"));
    /* The title is in reverse video, cut at the width like every line. */
    assert_non_null(strstr(text, "\x1b[7mgpuorch top  http://x  2026-11-30T12:00:\x1b[0m"));
    free(plain);
    free(text);
}

static void jobs_sort_by_the_chosen_key(void **state)
{
    (void)state;
    struct top_screen scr = {.sort = TOP_SORT_ID};
    char *text = screen(true, &scr);
    assert_true(strstr(text, "\n7    alice") < strstr(text, "\n8    bob"));
    free(text);
    scr.sort = TOP_SORT_COST; /* 3.25 before 1.5 */
    text = screen(true, &scr);
    assert_non_null(strstr(text, "sorted by cost"));
    assert_true(strstr(text, "\n8    bob") < strstr(text, "\n7    alice"));
    free(text);
    enum top_sort s = TOP_SORT_ID;
    assert_int_equal(top_sort_parse("util", &s), 0);
    assert_int_equal(s, TOP_SORT_UTIL);
    assert_int_equal(top_sort_parse("memory", &s), GPO_EUSAGE);
    assert_int_equal(s, TOP_SORT_UTIL);
    assert_string_equal(top_sort_name(TOP_SORT_TIME), "time");
    assert_string_equal(top_sort_name(TOP_SORT_COUNT), "?");
}

static void names_from_the_api_cannot_reach_the_terminal_as_control_codes(void **state)
{
    (void)state;
    struct top_snapshot s = snapshot(true);
    json_object_set_new(json_array_get(s.nodes, 0), "name", json_string("evil\x1b[2J\xc2\x9b"));
    json_t *g1 = json_array_get(json_object_get(json_array_get(s.nodes, 0), "gpu_samples"), 1);
    json_object_clear(g1);
    json_object_set_new(g1, "index", json_integer(1));
    json_object_set_new(g1, "uuid", json_string("GPU-b"));
    json_object_set_new(g1, "error", json_string("GPU is lost"));
    json_t *view = top_view_build(&s);
    struct top_screen scr = {0};
    char *text = NULL;
    size_t len;
    assert_int_equal(top_render(view, &scr, &text, &len), 0);
    assert_null(strchr(text, '\x1b'));
    assert_null(strstr(text, "\xc2\x9b"));
    assert_non_null(strstr(text, "evil?[2J??  main  up"));
    /* A GPU that failed to sample says so instead of figures. */
    assert_non_null(strstr(text, "    1 error: GPU is lost\n"));
    free(text);
    json_decref(view);
    top_snapshot_release(&s);
}

static void an_empty_cluster_renders(void **state)
{
    (void)state;
    struct top_snapshot s = {.nodes = json_array(), .jobs = json_array()};
    json_t *view = top_view_build(&s);
    assert_non_null(view);
    struct top_screen scr = {.cols = 80, .rows = 24, .ansi = true};
    char *text = NULL;
    size_t len;
    assert_int_equal(top_render(view, &scr, &text, &len), 0);
    assert_non_null(strstr(text, "nodes 0/0 up  GPUs 0/0 used  util -"));
    assert_non_null(strstr(text, "jobs: 0 running"));
    free(text);
    json_decref(view);
    top_snapshot_release(&s);
}

/* The canned snapshot with the canned services. */
static json_t *services_view(void)
{
    struct top_snapshot s = snapshot(true);
    s.services = parse(services_json);
    json_t *view = top_view_build(&s);
    assert_non_null(view);
    top_snapshot_release(&s);
    return view;
}

static void view_lists_each_service_by_name_with_its_status_figures(void **state)
{
    (void)state;
    json_t *view = services_view();
    const json_t *svcs = json_object_get(view, "services");
    assert_int_equal(json_array_size(svcs), 3);
    const json_t *asr = json_array_get(svcs, 0), *chat = json_array_get(svcs, 1),
                 *embed = json_array_get(svcs, 2);
    assert_string_equal(json_string_value(json_object_get(asr, "name")), "asr");
    assert_string_equal(json_string_value(json_object_get(embed, "name")), "embed");
    assert_string_equal(json_string_value(json_object_get(chat, "model")), "llama-3-8b");
    assert_string_equal(json_string_value(json_object_get(chat, "team")), "ml");
    assert_int_equal(json_integer_value(json_object_get(chat, "ready")), 2);
    assert_int_equal(json_integer_value(json_object_get(chat, "desired")), 3);
    assert_int_equal(json_integer_value(json_object_get(chat, "min")), 0);
    assert_int_equal(json_integer_value(json_object_get(chat, "max")), 8);
    /* In flight: the replicas' sum; the queue apart. */
    assert_int_equal(json_integer_value(json_object_get(chat, "inflight")), 5);
    assert_int_equal(json_integer_value(json_object_get(chat, "queued")), 4);
    assert_true(json_real_value(json_object_get(chat, "rps")) == 12.5);
    assert_true(json_real_value(json_object_get(chat, "cost")) == 3.75);
    assert_true(json_is_true(json_object_get(chat, "panic")));
    assert_string_equal(json_string_value(json_object_get(chat, "decision")),
                        "1 -> 3: concurrency 5.0 over target 2 for 6 s");
    assert_string_equal(json_string_value(json_object_get(asr, "backoff")), "crash loop: exit 1");
    assert_true(json_is_null(json_object_get(asr, "decision")));
    /* No status yet: every figure null, the spec's own fields kept. */
    assert_true(json_is_null(json_object_get(embed, "ready")));
    assert_true(json_is_null(json_object_get(embed, "inflight")));
    assert_true(json_is_null(json_object_get(embed, "rps")));
    assert_int_equal(json_integer_value(json_object_get(embed, "max")), 2);
    json_decref(view);
}

static void services_get_a_table_between_the_gpus_and_the_jobs(void **state)
{
    (void)state;
    json_t *view = services_view();
    struct top_screen scr = {0};
    char *text = NULL;
    size_t len;
    assert_int_equal(top_render(view, &scr, &text, &len), 0);
    char *l = line_with(text, "services: ");
    assert_string_equal(l, "services: 3, replicas 2 ready of 4 desired");
    free(l);
    l = line_with(text, "NAME ");
    assert_string_equal(l, "NAME   READY/DESIRED  INFLIGHT     RPS   DECISION");
    free(l);
    l = line_with(text, "chat ");
    assert_string_equal(l, "chat   2/3            5 +4 queued  12.5  "
                           "1 -> 3: concurrency 5.0 over target 2 for 6 s (panic)");
    free(l);
    l = line_with(text, "asr ");
    assert_string_equal(l, "asr    0/1            0            0.0   backoff: crash loop: exit 1");
    free(l);
    l = line_with(text, "embed ");
    assert_string_equal(l, "embed  -/-            -            -     -");
    free(l);
    assert_true(strstr(text, "\n    1 ") < strstr(text, "\nservices: "));
    assert_true(strstr(text, "\nservices: ") < strstr(text, "\nJOB "));
    free(text);
    /* On a live frame the table's header is bold, as the jobs' is. */
    scr.ansi = true;
    assert_int_equal(top_render(view, &scr, &text, &len), 0);
    assert_non_null(strstr(text, "\x1b[1mNAME   READY/DESIRED"));
    free(text);
    json_decref(view);
}

static void no_services_no_services_block(void **state)
{
    (void)state;
    struct top_snapshot s = snapshot(true);
    s.services = json_array(); /* the server has the route, and no service */
    for (int k = 0; k < 2; k++) {
        json_t *view = top_view_build(&s);
        assert_non_null(view);
        assert_true(json_is_array(json_object_get(view, "services")));
        assert_int_equal(json_array_size(json_object_get(view, "services")), 0);
        struct top_screen scr = {0};
        char *text = NULL;
        size_t len;
        assert_int_equal(top_render(view, &scr, &text, &len), 0);
        assert_null(strstr(text, "services"));
        assert_null(strstr(text, "READY/DESIRED"));
        free(text);
        json_decref(view);
        json_decref(s.services);
        s.services = NULL; /* then a server without the route */
    }
    top_snapshot_release(&s);
}

static void service_names_cannot_reach_the_terminal_as_control_codes(void **state)
{
    (void)state;
    struct top_snapshot s = snapshot(true);
    s.services = parse(services_json);
    json_object_set_new(json_array_get(s.services, 1), "name", json_string("ch\x1b[2Jat"));
    json_t *view = top_view_build(&s);
    struct top_screen scr = {0};
    char *text = NULL;
    size_t len;
    assert_int_equal(top_render(view, &scr, &text, &len), 0);
    assert_null(strchr(text, '\x1b'));
    assert_non_null(strstr(text, "ch?[2Jat"));
    free(text);
    json_decref(view);
    top_snapshot_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(view_puts_each_running_job_on_its_gpus_and_sums_the_cluster),
        cmocka_unit_test(plain_snapshot_draws_bars_and_holds_no_escape_bytes),
        cmocka_unit_test(missing_cost_shows_a_dash),
        cmocka_unit_test(bar_width_follows_the_terminal),
        cmocka_unit_test(a_small_terminal_gets_lines_cut_to_its_size),
        cmocka_unit_test(jobs_sort_by_the_chosen_key),
        cmocka_unit_test(names_from_the_api_cannot_reach_the_terminal_as_control_codes),
        cmocka_unit_test(an_empty_cluster_renders),
        cmocka_unit_test(view_lists_each_service_by_name_with_its_status_figures),
        cmocka_unit_test(mig_instances_are_counted_in_the_summary),
        cmocka_unit_test(gpus_used_count_gpu_shares),
        cmocka_unit_test(services_get_a_table_between_the_gpus_and_the_jobs),
        cmocka_unit_test(no_services_no_services_block),
        cmocka_unit_test(service_names_cannot_reach_the_terminal_as_control_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
