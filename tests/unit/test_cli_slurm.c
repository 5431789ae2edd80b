/* test_cli_slurm.c - Slurm's vocabulary in the CLI (cli/slurm.h): state
 * names and codes (REQUEUED, OUT_OF_MEMORY), sacct's --format fields and
 * widths, cells cut with '+', each field's text, squeue's -o items and
 * fields, the rows of arrays (pending tasks collapsed), sacct's time forms,
 * -j selectors. Times are read in UTC (TZ set here). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "base/err.h"
#include "cli/jobs.h"
#include "cli/slurm.h"
#include "base/banned.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* 2026-12-02T12:00:00Z */
#define NOW_MS INT64_C(1796212800000)

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j)
        fail_msg("bad test JSON: %s: %s", e.text, text);
    return j;
}

static void test_states_follow_slurm_requeued_and_out_of_memory_included(void **state)
{
    (void)state;
    static const struct {
        const char *job;
        enum slurm_state want;
    } cases[] = {
        {"{\"state\": \"PENDING\", \"attempts_made\": 0}", SLURM_PENDING},
        {"{\"state\": \"PENDING\", \"attempts_made\": 2}", SLURM_REQUEUED},
        {"{\"state\": \"FAILED\", \"reason\": \"out of memory: the cgroup killed it\"}",
         SLURM_OUT_OF_MEMORY},
        {"{\"state\": \"FAILED\", \"reason\": \"exit code 1\"}", SLURM_FAILED},
        {"{\"state\": \"NODE_FAIL\"}", SLURM_NODE_FAIL},
        {"{\"state\": \"TIMEOUT\"}", SLURM_TIMEOUT},
    };
    for (size_t k = 0; k < N(cases); k++) {
        json_t *j = parse(cases[k].job);
        assert_string_equal(slurm_state_name(slurm_job_state(j)), slurm_state_name(cases[k].want));
        json_decref(j);
    }
    assert_string_equal(slurm_state_code(SLURM_OUT_OF_MEMORY), "OOM");
    assert_string_equal(slurm_state_code(SLURM_PENDING), "PD");
}

static void test_state_lists_take_names_and_codes_in_any_case(void **state)
{
    (void)state;
    unsigned bits = 0;
    char err[300];
    assert_int_equal(slurm_states_parse("pd,Running,OOM,ca", &bits, err, sizeof(err)), 0);
    assert_int_equal(bits, (1u << SLURM_PENDING) | (1u << SLURM_RUNNING) |
                               (1u << SLURM_OUT_OF_MEMORY) | (1u << SLURM_CANCELLED));
    assert_int_equal(slurm_states_parse("R,WAITING", &bits, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "'WAITING' is not a job state"));
    assert_int_equal(slurm_states_parse("R,", &bits, err, sizeof(err)), GPO_EUSAGE);
}

static void test_format_reads_names_in_any_case_with_widths(void **state)
{
    (void)state;
    struct sacct_col cols[SACCT_COLS_MAX];
    size_t n = 0;
    char err[1200];
    assert_int_equal(
        sacct_format_parse("jobid,JobName%30 state%-8,NODELIST", cols, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 4);
    assert_int_equal(cols[0].field, SACCT_JOBID);
    assert_true(cols[0].left);
    assert_int_equal(cols[0].width, 12);
    assert_int_equal(cols[1].field, SACCT_JOBNAME);
    assert_int_equal(cols[1].width, 30);
    assert_false(cols[1].left);
    assert_int_equal(cols[2].field, SACCT_STATE);
    assert_int_equal(cols[2].width, 8);
    assert_true(cols[2].left);
    assert_int_equal(cols[3].field, SACCT_NODELIST);
    assert_int_equal(sacct_format_parse(SACCT_DEFAULT_FORMAT, cols, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 7);
    assert_int_equal(cols[4].field, SACCT_ALLOCCPUS);
}

static void test_format_refuses_unknown_fields_and_bad_widths(void **state)
{
    (void)state;
    struct sacct_col cols[SACCT_COLS_MAX];
    size_t n = 99;
    char err[1200];
    assert_int_equal(sacct_format_parse("JobID,Colour", cols, &n, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "no field 'Colour' (known: JobID, JobIDRaw"));
    assert_int_equal(sacct_format_parse("JobID%", cols, &n, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "expected a width"));
    assert_int_equal(sacct_format_parse("JobID%0", cols, &n, err, sizeof(err)), GPO_EUSAGE);
    assert_int_equal(sacct_format_parse("JobID%x", cols, &n, err, sizeof(err)), GPO_EUSAGE);
    assert_int_equal(sacct_format_parse("", cols, &n, err, sizeof(err)), GPO_EUSAGE);
    assert_int_equal(n, 99);
}

static void test_cells_pad_and_cut_with_a_plus(void **state)
{
    (void)state;
    char buf[64];
    assert_string_equal(slurm_cell("abc", 6, false, buf, sizeof(buf)), "   abc");
    assert_string_equal(slurm_cell("abc", 6, true, buf, sizeof(buf)), "abc   ");
    assert_string_equal(slurm_cell("COMPLETED", 6, false, buf, sizeof(buf)), "COMPL+");
    assert_string_equal(slurm_cell("exact", 5, false, buf, sizeof(buf)), "exact");
}

static const char *ENDED =
    "{\"id\": 48, \"array_id\": 41, \"array_index\": 7, \"state\": \"FAILED\", \"user\": \"bob\","
    " \"team\": \"research\", \"reason\": \"exit code 3\", \"attempts_made\": 1,"
    " \"submitted_at\": \"2026-12-02T10:00:00Z\","
    " \"spec\": {\"name\": \"train\", \"pool\": \"main\", \"cpus\": 8, \"mem_mib\": 65536,"
    "          \"time_limit_s\": 5400, \"priority\": \"high\"},"
    " \"attempts\": [{\"attempt\": 1, \"started_at\": \"2026-12-02T10:01:00Z\","
    "   \"ended_at\": \"2026-12-02T11:02:03Z\", \"exit_code\": 3, \"signal\": null,"
    "   \"nodes\": [\"gpu02\", \"gpu01\", \"gpu03\"], \"gpus\": [\"a\", \"b\", \"c\", \"d\"]}]}";

static void test_sacct_fields_of_an_ended_array_task(void **state)
{
    (void)state;
    json_t *j = parse(ENDED);
    static const struct {
        enum sacct_field f;
        const char *want;
    } cases[] = {
        {SACCT_JOBID, "41_7"},
        {SACCT_JOBIDRAW, "48"},
        {SACCT_JOBNAME, "train"},
        {SACCT_PARTITION, "main"},
        {SACCT_ACCOUNT, "research"},
        {SACCT_USER, "bob"},
        {SACCT_STATE, "FAILED"},
        {SACCT_EXITCODE, "3:0"},
        {SACCT_ELAPSED, "01:01:03"},
        {SACCT_ELAPSEDRAW, "3663"},
        {SACCT_START, "2026-12-02T10:01:00"},
        {SACCT_END, "2026-12-02T11:02:03"},
        {SACCT_SUBMIT, "2026-12-02T10:00:00"},
        {SACCT_NNODES, "3"},
        {SACCT_NODELIST, "gpu[01-03]"},
        {SACCT_ALLOCTRES, "billing=8,cpu=8,gres/gpu=4,mem=64G,node=3"},
        {SACCT_ALLOCCPUS, "8"},
        {SACCT_REQMEM, "64G"},
        {SACCT_TIMELIMIT, "01:30:00"},
        {SACCT_QOS, "high"},
        {SACCT_REASON, "exit code 3"},
        {SACCT_ARRAYJOBID, "41"},
        {SACCT_ARRAYTASKID, "7"},
    };
    char buf[256];
    for (size_t k = 0; k < N(cases); k++) {
        sacct_field_text(cases[k].f, j, NOW_MS, buf, sizeof(buf));
        if (strcmp(buf, cases[k].want) != 0)
            fail_msg("%s: '%s', not '%s'", sacct_field_header(cases[k].f), buf, cases[k].want);
    }
    json_decref(j);
}

static void test_sacct_fields_of_a_pending_job(void **state)
{
    (void)state;
    json_t *j = parse("{\"id\": 5, \"state\": \"PENDING\", \"attempts_made\": 0, \"spec\":"
                      " {\"cpus\": 2, \"nodes\": 2, \"time_limit_s\": null}, \"attempts\": []}");
    static const struct {
        enum sacct_field f;
        const char *want;
    } cases[] = {
        {SACCT_JOBID, "5"},
        {SACCT_START, "Unknown"},
        {SACCT_END, "Unknown"},
        {SACCT_ELAPSED, "00:00:00"},
        {SACCT_NODELIST, "None assigned"},
        {SACCT_ALLOCTRES, ""},
        {SACCT_ALLOCCPUS, "0"},
        {SACCT_NCPUS, "2"},
        {SACCT_TIMELIMIT, "UNLIMITED"},
        {SACCT_EXITCODE, "0:0"},
        {SACCT_ARRAYTASKID, "N/A"},
        {SACCT_STATE, "PENDING"},
    };
    char buf[256];
    for (size_t k = 0; k < N(cases); k++) {
        sacct_field_text(cases[k].f, j, NOW_MS, buf, sizeof(buf));
        if (strcmp(buf, cases[k].want) != 0)
            fail_msg("%s: '%s', not '%s'", sacct_field_header(cases[k].f), buf, cases[k].want);
    }
    json_decref(j);
}

static void test_squeue_formats_read_widths_justification_and_literals(void **state)
{
    (void)state;
    struct squeue_item it[SQUEUE_ITEMS_MAX];
    size_t n = 0;
    char err[300];
    assert_int_equal(squeue_format_parse("%.18i %9P|%j%%", it, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 6);
    assert_int_equal(it[0].code, 'i');
    assert_true(it[0].right);
    assert_int_equal(it[0].width, 18);
    assert_int_equal(it[1].code, 0);
    assert_int_equal(it[1].len, 1);
    assert_int_equal(it[2].code, 'P');
    assert_false(it[2].right);
    assert_int_equal(it[2].width, 9);
    assert_int_equal(it[3].code, 0);
    assert_int_equal(it[4].code, 'j');
    assert_int_equal(it[4].width, 0);
    assert_int_equal(it[5].code, 0);
    assert_int_equal(it[5].len, 1);
    assert_memory_equal(it[5].text, "%", 1);
    assert_int_equal(squeue_format_parse("%i %Z", it, &n, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "'%Z' is not a field gpuorch knows"));
    assert_int_equal(squeue_format_parse("%.", it, &n, err, sizeof(err)), GPO_EUSAGE);
    assert_string_equal(squeue_field_header('R'), "NODELIST(REASON)");
    assert_null(squeue_field_header('Z'));
}

/* A queue: job 7 alone, array 41's tasks 3 (running) and 1, 2, 5, 6 and 9
 * (pending, at most 4 running), array 60's one pending task. */
static const char *QUEUE =
    "[{\"id\": 7, \"state\": \"PENDING\", \"spec\": {\"nodes\": 2, \"gpus\": 16,"
    "  \"gpus_per_node\": 8, \"gpu_type\": \"H100-80GB\"}},"
    " {\"id\": 41, \"array_id\": 41, \"array_index\": 1, \"state\": \"PENDING\","
    "  \"spec\": {\"array\": \"1-9%4\"}},"
    " {\"id\": 42, \"array_id\": 41, \"array_index\": 2, \"state\": \"PENDING\", \"spec\": {}},"
    " {\"id\": 43, \"array_id\": 41, \"array_index\": 3, \"state\": \"RUNNING\", \"spec\": {},"
    "  \"updated_at\": \"2026-12-02T11:58:55Z\","
    "  \"current_attempt\": {\"nodes\": [\"n2\", \"n1\"]}},"
    " {\"id\": 45, \"array_id\": 41, \"array_index\": 5, \"state\": \"PENDING\", \"spec\": {},"
    "  \"attempts_made\": 1, \"wait_reason\": \"priority: lower\"},"
    " {\"id\": 46, \"array_id\": 41, \"array_index\": 6, \"state\": \"PENDING\", \"spec\": {}},"
    " {\"id\": 49, \"array_id\": 41, \"array_index\": 9, \"state\": \"PENDING\", \"spec\": {}},"
    " {\"id\": 60, \"array_id\": 60, \"array_index\": 0, \"state\": \"PENDING\", \"spec\": {}}]";

static void test_an_arrays_pending_tasks_share_one_row(void **state)
{
    (void)state;
    json_t *jobs = parse(QUEUE);
    struct queue_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(slurm_queue_rows(jobs, false, &rows, &n), 0);
    static const char *const want[] = {"7", "41_[1-2,5-6,9%4]", "41_3", "60_0"};
    assert_int_equal(n, N(want));
    for (size_t k = 0; k < n; k++)
        assert_string_equal(rows[k].id, want[k]);
    assert_int_equal(json_integer_value(json_object_get(rows[1].job, "id")), 41);
    free(rows);
    assert_int_equal(slurm_queue_rows(jobs, true, &rows, &n), 0);
    static const char *const each[] = {"7", "41_1", "41_2", "41_3", "41_5", "41_6", "41_9", "60_0"};
    assert_int_equal(n, N(each));
    for (size_t k = 0; k < n; k++)
        assert_string_equal(rows[k].id, each[k]);
    free(rows);
    json_t *none = json_array();
    assert_int_equal(slurm_queue_rows(none, false, &rows, &n), 0);
    assert_int_equal(n, 0);
    free(rows);
    json_decref(none);
    json_decref(jobs);
}

static void test_squeue_fields_of_rows(void **state)
{
    (void)state;
    json_t *jobs = parse(QUEUE);
    struct queue_row *rows = NULL;
    size_t n = 0;
    assert_int_equal(slurm_queue_rows(jobs, true, &rows, &n), 0);
    char buf[256];
    const struct queue_row *running = &rows[3], *requeued = &rows[4], *plain = &rows[0];
    assert_string_equal(squeue_field_text('t', running, NOW_MS, buf, sizeof(buf)), "R");
    assert_string_equal(squeue_field_text('T', requeued, NOW_MS, buf, sizeof(buf)), "PENDING");
    assert_string_equal(squeue_field_text('t', requeued, NOW_MS, buf, sizeof(buf)), "PD");
    assert_string_equal(squeue_field_text('R', running, NOW_MS, buf, sizeof(buf)), "n[1-2]");
    assert_string_equal(squeue_field_text('D', running, NOW_MS, buf, sizeof(buf)), "2");
    assert_string_equal(squeue_field_text('M', running, NOW_MS, buf, sizeof(buf)), "1:05");
    assert_string_equal(squeue_field_text('M', plain, NOW_MS, buf, sizeof(buf)), "0:00");
    assert_string_equal(squeue_field_text('R', requeued, NOW_MS, buf, sizeof(buf)),
                        "(priority: lower)");
    assert_string_equal(squeue_field_text('R', plain, NOW_MS, buf, sizeof(buf)), "(None)");
    assert_string_equal(squeue_field_text('l', plain, NOW_MS, buf, sizeof(buf)), "UNLIMITED");
    assert_string_equal(squeue_field_text('b', plain, NOW_MS, buf, sizeof(buf)),
                        "gres/gpu:H100-80GB:8");
    assert_string_equal(squeue_field_text('D', plain, NOW_MS, buf, sizeof(buf)), "2");
    assert_string_equal(squeue_field_text('b', running, NOW_MS, buf, sizeof(buf)), "N/A");
    assert_string_equal(squeue_field_text('i', running, NOW_MS, buf, sizeof(buf)), "41_3");
    free(rows);
    json_decref(jobs);
    /* A MIG instance is Slurm's MIG gres: the profile as the type, one of it. */
    jobs = parse("[{\"id\": 8, \"state\": \"PENDING\", \"spec\": {\"gpus\": 0,"
                 " \"mig_profile\": \"3g.40gb\"}}]");
    assert_int_equal(slurm_queue_rows(jobs, true, &rows, &n), 0);
    assert_string_equal(squeue_field_text('b', &rows[0], NOW_MS, buf, sizeof(buf)),
                        "gres/gpu:3g.40gb:1");
    char gpus[64];
    assert_string_equal(
        jobs_gpus_text(json_object_get(json_array_get(jobs, 0), "spec"), gpus, sizeof(gpus)),
        "3g.40gb");
    free(rows);
    json_decref(jobs);
}

static void check_time(const char *text, const char *want)
{
    int64_t ms = 0;
    char buf[64];
    if (slurm_time_parse(text, NOW_MS, &ms) != 0)
        fail_msg("'%s' refused", text);
    slurm_time_text(ms, buf, sizeof(buf));
    if (strcmp(buf, want) != 0)
        fail_msg("'%s': %s, not %s", text, buf, want);
}

static void test_sacct_time_forms(void **state)
{
    (void)state;
    check_time("2026-11-30", "2026-11-30T00:00:00");
    check_time("2026-11-30T08:15", "2026-11-30T08:15:00");
    check_time("2026-11-30T08:15:09", "2026-11-30T08:15:09");
    check_time("2026-11-30T08:15:09Z", "2026-11-30T08:15:09");
    check_time("11/30", "2026-11-30T00:00:00");
    check_time("11/30/25", "2025-11-30T00:00:00");
    check_time("11.30.25-10:30", "2025-11-30T10:30:00");
    check_time("1130", "2026-11-30T00:00:00");
    check_time("113025-01:02:03", "2025-11-30T01:02:03");
    check_time("10:30", "2026-12-02T10:30:00");
    check_time("10:30:15", "2026-12-02T10:30:15");
    check_time("midnight", "2026-12-02T00:00:00");
    check_time("today", "2026-12-02T00:00:00");
    check_time("noon", "2026-12-02T12:00:00");
    check_time("now", "2026-12-02T12:00:00");
    check_time("now-1hours", "2026-12-02T11:00:00");
    check_time("now-90", "2026-12-02T11:58:30");
    check_time("now-2d", "2026-11-30T12:00:00");
    check_time("now+1week", "2026-12-09T12:00:00");
    static const char *const bad[] = {"",     "yesterday",  "13/01",  "25:00",  "now-1parsecs",
                                      "now-", "2026-13-01", "10:30:", "11/30x", "12345",
                                      "now*2"};
    for (size_t k = 0; k < N(bad); k++) {
        int64_t ms = 7;
        if (slurm_time_parse(bad[k], NOW_MS, &ms) != GPO_EUSAGE)
            fail_msg("'%s' accepted", bad[k]);
        assert_int_equal(ms, 7);
    }
}

static void test_ranges_and_job_selectors(void **state)
{
    (void)state;
    char buf[64];
    const int64_t v[] = {1, 2, 3, 7, 9, 10};
    assert_int_equal(slurm_ranges_text(v, N(v), buf, sizeof(buf)), 0);
    assert_string_equal(buf, "1-3,7,9-10");
    assert_int_equal(slurm_ranges_text(v, N(v), buf, 5), GPO_ENOBUFS);
    struct slurm_job_sel sel[SLURM_JOB_SELS_MAX];
    size_t n = 0;
    char err[200];
    assert_int_equal(slurm_jobs_parse("41,60_0,7", sel, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 3);
    json_t *jobs = parse(QUEUE);
    size_t hits = 0;
    for (size_t k = 0; k < json_array_size(jobs); k++)
        hits += slurm_job_selected(sel, n, json_array_get(jobs, k));
    assert_int_equal(hits, 8); /* job 7, array 41's six tasks, 60_0 */
    assert_int_equal(slurm_jobs_parse("41_3", sel, &n, err, sizeof(err)), 0);
    hits = 0;
    for (size_t k = 0; k < json_array_size(jobs); k++)
        hits += slurm_job_selected(sel, n, json_array_get(jobs, k));
    assert_int_equal(hits, 1);
    assert_true(slurm_job_selected(sel, 0, json_array_get(jobs, 0)));
    json_decref(jobs);
    static const char *const bad[] = {"x", "4_", "_4", "4,,5", "-3", "0", "4_x", "4_-1", ""};
    for (size_t k = 0; k < N(bad); k++) {
        if (slurm_jobs_parse(bad[k], sel, &n, err, sizeof(err)) != GPO_EUSAGE)
            fail_msg("'%s' accepted", bad[k]);
        assert_non_null(strstr(err, "is not a job id"));
    }
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states_follow_slurm_requeued_and_out_of_memory_included),
        cmocka_unit_test(test_state_lists_take_names_and_codes_in_any_case),
        cmocka_unit_test(test_format_reads_names_in_any_case_with_widths),
        cmocka_unit_test(test_format_refuses_unknown_fields_and_bad_widths),
        cmocka_unit_test(test_cells_pad_and_cut_with_a_plus),
        cmocka_unit_test(test_sacct_fields_of_an_ended_array_task),
        cmocka_unit_test(test_sacct_fields_of_a_pending_job),
        cmocka_unit_test(test_squeue_formats_read_widths_justification_and_literals),
        cmocka_unit_test(test_an_arrays_pending_tasks_share_one_row),
        cmocka_unit_test(test_squeue_fields_of_rows),
        cmocka_unit_test(test_sacct_time_forms),
        cmocka_unit_test(test_ranges_and_job_selectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
