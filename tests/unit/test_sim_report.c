/* test_sim_report.c - the HTML report: one self-contained page with uPlot and
 * its license inlined, nothing loaded from elsewhere, both policies' names
 * and data (read back as JSON), names escaped for HTML and for the script
 * element, long series thinned, the same bytes for the same input, and a
 * path that cannot be written failing with a message that names it.
 * Results and summaries are built by hand; pages go to a directory under /tmp. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
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
#include <jansson.h>

#include "base/err.h"
#include "sim/assets.h"
#include "sim/report.h"
#include "base/banned.h"

#define EVIL_TEAM "</script><b>x&y"

/* Two replays of one small trace: three jobs of two teams, a few samples. */
struct fixture {
    char dir[64];
    char *team_names[2];
    struct sim_job_result jobs[2][3];
    struct sim_sample samples[2][4];
    struct sim_result results[2];
    double shares[2][2];
    struct sim_summary summaries[2];
    struct sim_report_run runs[2];
};

static void fixture_build(struct fixture *fx)
{
    static const char *const policies[2] = {"fifo", "fairshare"};
    fx->team_names[0] = "alpha";
    fx->team_names[1] = EVIL_TEAM;
    for (int p = 0; p < 2; p++) {
        /* job 0: alpha, waits 10 s (20 s under fairshare); job 1: the other
         * team, no wait; job 2: alpha, unschedulable */
        fx->jobs[p][0] = (struct sim_job_result){.team = 0,
                                                 .submit_s = 100,
                                                 .duration_s = 50,
                                                 .gpu_milli = 1000,
                                                 .first_start_s = 110 + 10 * p,
                                                 .end_s = 160 + 10 * p,
                                                 .running_s = 50};
        fx->jobs[p][1] = (struct sim_job_result){.team = 1,
                                                 .submit_s = 105,
                                                 .duration_s = 3600,
                                                 .gpu_milli = 2000,
                                                 .first_start_s = 105,
                                                 .end_s = 3705,
                                                 .running_s = 3600};
        fx->jobs[p][2] = (struct sim_job_result){.team = 0,
                                                 .submit_s = 106,
                                                 .gpu_milli = 64000,
                                                 .first_start_s = -1,
                                                 .end_s = -1,
                                                 .unschedulable = true};
        fx->samples[p][0] = (struct sim_sample){100, 0, 1, 0};
        fx->samples[p][1] = (struct sim_sample){105, 2000, 1, 1};
        fx->samples[p][2] = (struct sim_sample){110 + 10 * p, 3000, 0, 2};
        fx->samples[p][3] = (struct sim_sample){3705, 0, 0, 0};
        fx->results[p] = (struct sim_result){.jobs = fx->jobs[p],
                                             .njobs = 3,
                                             .samples = fx->samples[p],
                                             .nsamples = 4,
                                             .total_gpus_milli = 4000,
                                             .first_submit_s = 100,
                                             .last_submit_s = 106,
                                             .last_end_s = 3705,
                                             .nteams = 2,
                                             .team_names = fx->team_names};
        fx->shares[p][0] = 0.25 + 0.25 * p;
        fx->shares[p][1] = 0.75 - 0.25 * p;
        fx->summaries[p] = (struct sim_summary){.policy = policies[p],
                                                .jobs = 3,
                                                .ended = 2,
                                                .unschedulable = 1,
                                                .makespan_s = 3605,
                                                .jct_avg_s = 1830,
                                                .jct_p50_s = 60,
                                                .jct_p95_s = 3600,
                                                .jct_p99_s = 3600,
                                                .wait_avg_s = 5,
                                                .wait_p99_s = 10,
                                                .gpu_utilization = 0.5,
                                                .jain_fairness = 0.9,
                                                .preemptions = 7,
                                                .total_gpus = 4,
                                                .nteams = 2,
                                                .team_names = fx->team_names,
                                                .team_share = fx->shares[p]};
        fx->runs[p] = (struct sim_report_run){&fx->summaries[p], &fx->results[p]};
    }
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_sim_report.XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    fixture_build(fx);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", fx->dir, de->d_name);
        if (de->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(fx->dir);
    free(fx);
    return 0;
}

/* Reads a whole file, NUL-terminated; *len gets its size. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

/* Writes the fixture's report to DIR/name and reads it back. */
static char *write_and_read(struct fixture *fx, const char *name, size_t *len)
{
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/%s", fx->dir, name);
    int rc = sim_report_write(path, "trace <small>.csv", fx->runs, 2, err, sizeof(err));
    if (rc)
        print_error("sim_report_write: %d %s\n", rc, err);
    assert_int_equal(rc, 0);
    return slurp(path, len);
}

/* Where needle first occurs in hay[0, hlen) (bytes, NULs included); NULL: nowhere. */
static const void *find(const void *hay, size_t hlen, const void *needle, size_t nlen)
{
    const char *h = hay;
    for (size_t i = 0; nlen && i + nlen <= hlen; i++)
        if (h[i] == *(const char *)needle && memcmp(h + i, needle, nlen) == 0)
            return h + i;
    return NULL;
}

static size_t count(const char *hay, size_t hlen, const char *needle, size_t nlen)
{
    size_t n = 0;
    for (const char *p = hay; (p = find(p, hlen - (size_t)(p - hay), needle, nlen)); p += nlen)
        n++;
    return n;
}

static size_t count_str(const char *hay, size_t hlen, const char *needle)
{
    return count(hay, hlen, needle, strlen(needle));
}

/* The JSON data block of a page, parsed. */
static json_t *page_data(const char *page)
{
    const char *open = "<script id=\"gpo-data\" type=\"application/json\">";
    const char *start = strstr(page, open);
    assert_non_null(start);
    start += strlen(open);
    const char *end = strstr(start, "</script>");
    assert_non_null(end);
    json_error_t jerr;
    json_t *data = json_loadb(start, (size_t)(end - start), 0, &jerr);
    if (!data)
        print_error("page data: %s at %d:%d\n", jerr.text, jerr.line, jerr.column);
    assert_non_null(data);
    return data;
}

static void report_inlines_uplot_and_its_license(void **state)
{
    size_t len;
    char *page = write_and_read(*state, "r.html", &len);
    assert_non_null(find(page, len, sim_asset_uplot_js, sim_asset_uplot_js_len));
    assert_non_null(find(page, len, sim_asset_uplot_css, sim_asset_uplot_css_len));
    assert_non_null(strstr(page, "var uPlot=")); /* the library's global, from its source */
    assert_non_null(strstr(page, "uPlot.paths.bars"));
    assert_non_null(strstr(page, "The MIT License"));
    assert_non_null(strstr(page, "Copyright (c) 2022 Leon Sorokin"));
    assert_non_null(strstr(page, "Permission is hereby granted, free of charge"));
    assert_non_null(strstr(page, "Charts: uPlot "));
    assert_non_null(strstr(page, sim_asset_uplot_version));
    free(page);
}

static void report_loads_nothing_from_elsewhere(void **state)
{
    size_t len;
    char *page = write_and_read(*state, "r.html", &len);
    const char *refs[] = {"http://", "https://"};
    /* URLs appear only inside uPlot's own text (its banner comment) */
    for (size_t i = 0; i < 2; i++) {
        size_t inlined = count((const char *)sim_asset_uplot_js, sim_asset_uplot_js_len, refs[i],
                               strlen(refs[i])) +
                         count((const char *)sim_asset_uplot_css, sim_asset_uplot_css_len, refs[i],
                               strlen(refs[i])) +
                         count((const char *)sim_asset_uplot_license, sim_asset_uplot_license_len,
                               refs[i], strlen(refs[i]));
        assert_int_equal(count_str(page, len, refs[i]), inlined);
    }
    const char *loaders[] = {"<script src", "<link", "@import", "<iframe",
                             "<img",        "url(",  "src=",    "href="};
    for (size_t i = 0; i < sizeof(loaders) / sizeof(*loaders); i++)
        assert_int_equal(count_str(page, len, loaders[i]), 0);
    assert_int_equal(count_str(page, len, "<script"), 3);
    assert_int_equal(count_str(page, len, "</script"), 3);
    free(page);
}

static void report_names_both_policies_and_escapes_names(void **state)
{
    size_t len;
    char *page = write_and_read(*state, "r.html", &len);
    assert_non_null(strstr(page, "<td class=\"name\">fifo</td>"));
    assert_non_null(strstr(page, "<td class=\"name\">fairshare</td>"));
    assert_non_null(strstr(page, "<th>fifo</th><th>fairshare</th>"));
    assert_non_null(strstr(page, "<title>gpuorch sim: trace &lt;small&gt;.csv</title>"));
    /* in HTML, entities; in the JSON, "</" is "<\/" */
    assert_non_null(strstr(page, "<td class=\"name\">&lt;/script&gt;&lt;b&gt;x&amp;y</td>"));
    assert_non_null(strstr(page, "\"<\\/script><b>x&y\""));
    /* the summary rows: counts, durations, utilization, fairness, preemptions */
    assert_non_null(
        strstr(page, "<td>3</td><td>2</td><td>1</td><td title=\"3605 s\">60.1 min</td>"));
    assert_non_null(strstr(page, "<td>50.0%</td><td>0.900</td><td>7</td></tr>"));
    /* the shares, teams down and policies across */
    assert_non_null(strstr(page, "<td class=\"name\">alpha</td><td>25.0%</td><td>50.0%</td>"));
    free(page);
}

static void report_embeds_each_policys_data(void **state)
{
    char *page = write_and_read(*state, "r.html", NULL);
    json_t *data = page_data(page);
    assert_string_equal(json_string_value(json_object_get(data, "title")), "trace <small>.csv");
    json_t *teams = json_object_get(data, "teams");
    assert_int_equal(json_array_size(teams), 2);
    assert_string_equal(json_string_value(json_array_get(teams, 0)), "alpha");
    assert_string_equal(json_string_value(json_array_get(teams, 1)), EVIL_TEAM);
    json_t *runs = json_object_get(data, "runs");
    assert_int_equal(json_array_size(runs), 2);
    const char *names[] = {"fifo", "fairshare"};
    for (size_t p = 0; p < 2; p++) {
        json_t *r = json_array_get(runs, p);
        assert_string_equal(json_string_value(json_object_get(r, "policy")), names[p]);
        /* times from the first submit; utilization busy/total; the queue */
        json_t *t = json_object_get(r, "t"), *util = json_object_get(r, "util");
        json_t *pending = json_object_get(r, "pending");
        assert_int_equal(json_array_size(t), 4);
        assert_int_equal(json_integer_value(json_array_get(t, 0)), 0);
        assert_int_equal(json_integer_value(json_array_get(t, 2)), 10 + 10 * (int)p);
        assert_int_equal(json_integer_value(json_array_get(t, 3)), 3605);
        assert_true(json_number_value(json_array_get(util, 2)) == 0.75);
        assert_int_equal(json_integer_value(json_array_get(pending, 1)), 1);
        /* CDF of the two ended jobs: 60 or 70 s, then 3600 s */
        json_t *jct = json_object_get(r, "jct"), *cdf = json_object_get(r, "cdf");
        assert_int_equal(json_array_size(jct), 2);
        assert_int_equal(json_integer_value(json_array_get(jct, 0)), 60 + 10 * (int)p);
        assert_int_equal(json_integer_value(json_array_get(jct, 1)), 3600);
        assert_true(json_number_value(json_array_get(cdf, 0)) == 0.5);
        assert_true(json_number_value(json_array_get(cdf, 1)) == 1.0);
        /* average waits per team: alpha's one ended job, the other team's */
        json_t *wait = json_object_get(r, "wait");
        assert_int_equal(json_array_size(wait), 2);
        assert_true(json_number_value(json_array_get(wait, 0)) == 10.0 + 10.0 * (double)p);
        assert_true(json_number_value(json_array_get(wait, 1)) == 0.0);
    }
    json_decref(data);
    free(page);
}

static void report_thins_long_series_keeping_peaks(void **state)
{
    struct fixture *fx = *state;
    enum { NSAMPLES = 50000, NJOBS = 5000 };
    struct sim_sample *samples = calloc(NSAMPLES, sizeof(*samples));
    struct sim_job_result *jobs = calloc(NJOBS, sizeof(*jobs));
    assert_non_null(samples);
    assert_non_null(jobs);
    for (int i = 0; i < NSAMPLES; i++)
        samples[i] = (struct sim_sample){100 + i, 1000 * (i % 4), (uint32_t)(i % 7), 1};
    samples[31337].pending = 999; /* a one-sample spike */
    for (int i = 0; i < NJOBS; i++)
        jobs[i] = (struct sim_job_result){.team = (uint32_t)(i % 2),
                                          .submit_s = 100,
                                          .first_start_s = 100,
                                          .end_s = 101 + i,
                                          .running_s = 1 + i};
    fx->results[0].samples = samples;
    fx->results[0].nsamples = NSAMPLES;
    fx->results[0].jobs = jobs;
    fx->results[0].njobs = NJOBS;

    size_t len;
    char *page = write_and_read(fx, "long.html", &len);
    json_t *data = page_data(page);
    json_t *r = json_array_get(json_object_get(data, "runs"), 0);
    size_t n = json_array_size(json_object_get(r, "t"));
    assert_true(n > 1000 && n <= 2000);
    assert_int_equal(json_array_size(json_object_get(r, "util")), n);
    json_t *pending = json_object_get(r, "pending");
    assert_int_equal(json_array_size(pending), n);
    json_int_t peak = 0;
    for (size_t i = 0; i < n; i++) {
        json_int_t v = json_integer_value(json_array_get(pending, i));
        peak = v > peak ? v : peak;
    }
    assert_int_equal(peak, 999);
    json_t *jct = json_object_get(r, "jct"), *cdf = json_object_get(r, "cdf");
    assert_int_equal(json_array_size(jct), 1000);
    assert_int_equal(json_array_size(cdf), 1000);
    assert_int_equal(json_integer_value(json_array_get(jct, 0)), 1);
    assert_int_equal(json_integer_value(json_array_get(jct, 999)), NJOBS);
    assert_true(json_number_value(json_array_get(cdf, 999)) == 1.0);
    assert_true(len < 400000); /* uPlot is ~53 kB; the data stays small */
    json_decref(data);
    free(page);
    free(samples);
    free(jobs);
}

static void report_is_deterministic_and_replaced_whole(void **state)
{
    struct fixture *fx = *state;
    size_t len1, len2;
    char *a = write_and_read(fx, "same.html", &len1);
    char *b = write_and_read(fx, "same.html", &len2);
    assert_int_equal(len1, len2);
    assert_memory_equal(a, b, len1);
    free(a);
    free(b);
    /* no temporary file is left next to it */
    DIR *d = opendir(fx->dir);
    assert_non_null(d);
    for (struct dirent *de; (de = readdir(d));)
        assert_null(strstr(de->d_name, ".tmp"));
    closedir(d);
    struct stat st;
    char path[128];
    snprintf(path, sizeof(path), "%s/same.html", fx->dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
}

static void report_to_a_missing_directory_fails_naming_it(void **state)
{
    struct fixture *fx = *state;
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/no-such-dir/r.html", fx->dir);
    int rc = sim_report_write(path, "t", fx->runs, 2, err, sizeof(err));
    assert_int_equal(rc, GPO_EINVAL);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, strerror(ENOENT)));
    assert_null(strchr(err, '\n'));
    assert_int_equal(access(path, F_OK), -1);
}

static void report_of_no_replay_is_a_page_without_charts(void **state)
{
    struct fixture *fx = *state;
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/empty.html", fx->dir);
    assert_int_equal(sim_report_write(path, "t", NULL, 0, err, sizeof(err)), 0);
    char *page = slurp(path, NULL);
    assert_non_null(strstr(page, "No policy was replayed."));
    json_t *data = page_data(page);
    assert_int_equal(json_array_size(json_object_get(data, "runs")), 0);
    json_decref(data);
    free(page);
    assert_int_equal(sim_report_write(NULL, "t", NULL, 0, err, sizeof(err)), GPO_EINVAL);
}

/* The parameters head the page, then one conclusion per comparison; each
 * duration column is in one unit (JCT avg: 1830 and 3660 s, in minutes, so
 * 1830 s is 30.5 min; JCT p50: 60 s in both, in seconds). */
static void report_states_parameters_and_concludes(void **state)
{
    struct fixture *fx = *state;
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/p.html", fx->dir);
    fx->summaries[1].jct_avg_s = 3660; /* fairshare twice fifo's 1830 */
    struct sim_report_params pa = {
        .cluster = "c<1>.yaml", .load = 0.9, .from_s = 10, .until_s = 99, .restart_penalty_s = 30};
    assert_int_equal(sim_report_write_params(path, "t", &pa, fx->runs, 2, err, sizeof(err)), 0);
    char *page = slurp(path, NULL);
    assert_non_null(strstr(page, "<td class=\"name\">4 GPUs, from c&lt;1&gt;.yaml</td>"));
    assert_non_null(strstr(page, "<td class=\"name\">0.9 (the cluster scaled"));
    assert_non_null(strstr(page, "jobs submitted from 10 s until 99 s"));
    assert_non_null(strstr(page, "restart penalty</td><td class=\"name\">30 s</td>"));
    assert_non_null(strstr(page, "policies</td><td class=\"name\">fifo, fairshare</td>"));
    assert_non_null(strstr(page, "<li>fifo cut average JCT 2.00x against fairshare at equal "
                                 "utilization (50.0% and 50.0%)</li>"));
    assert_non_null(strstr(page, "<th>JCT avg (min)</th><th>JCT p50 (s)</th>"));
    assert_non_null(
        strstr(page, "<td title=\"1830 s\">30.5 min</td><td title=\"60 s\">60.0 s</td>"));
    assert_non_null(strstr(page, "<th>wait avg (s)</th>"));
    free(page);
    /* without parameters: the cluster's size, "derived", the whole trace */
    assert_int_equal(sim_report_write(path, "t", fx->runs, 2, err, sizeof(err)), 0);
    page = slurp(path, NULL);
    assert_non_null(strstr(page, "4 GPUs, derived from the trace"));
    assert_non_null(strstr(page, "the whole trace"));
    free(page);
}

/* The conclusion line, worked by hand: 1020 / 100 = 10.2; 45.1 % and 45.3 %
 * are within one point; 50 / 80 is 1.6 the other way. */
static void conclusion_says_how_much_and_at_what_utilization(void **state)
{
    (void)state;
    char line[256];
    struct sim_summary a = {
        .policy = "default", .ended = 5, .jct_avg_s = 100, .gpu_utilization = 0.451};
    struct sim_summary b = {
        .policy = "fifo", .ended = 5, .jct_avg_s = 1020, .gpu_utilization = 0.453};
    sim_report_conclusion(line, sizeof(line), &a, &b);
    assert_string_equal(line, "default cut average JCT 10.2x against fifo at equal utilization "
                              "(45.1% and 45.3%)");
    a.jct_avg_s = 80;
    b.jct_avg_s = 50;
    b.gpu_utilization = 0.40;
    sim_report_conclusion(line, sizeof(line), &a, &b);
    assert_string_equal(line, "default raised average JCT 1.60x against fifo at utilization "
                              "45.1% against 40.0%");
    b.jct_avg_s = 80.2;
    sim_report_conclusion(line, sizeof(line), &a, &b);
    assert_non_null(strstr(line, "default and fifo gave the same average JCT (within 0.5%)"));
    b.ended = 0;
    sim_report_conclusion(line, sizeof(line), &a, &b);
    assert_string_equal(line, "default against fifo: no average JCT to compare (5 and 0 jobs "
                              "ended)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(report_inlines_uplot_and_its_license, setup, teardown),
        cmocka_unit_test_setup_teardown(report_loads_nothing_from_elsewhere, setup, teardown),
        cmocka_unit_test_setup_teardown(report_names_both_policies_and_escapes_names, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(report_embeds_each_policys_data, setup, teardown),
        cmocka_unit_test_setup_teardown(report_thins_long_series_keeping_peaks, setup, teardown),
        cmocka_unit_test_setup_teardown(report_is_deterministic_and_replaced_whole, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(report_to_a_missing_directory_fails_naming_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(report_states_parameters_and_concludes, setup, teardown),
        cmocka_unit_test(conclusion_says_how_much_and_at_what_utilization),
        cmocka_unit_test_setup_teardown(report_of_no_replay_is_a_page_without_charts, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
