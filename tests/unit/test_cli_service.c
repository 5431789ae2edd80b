/* test_cli_service.c - `gpuorch service`: apply files (one service, a list,
 * a `services` list, JSON; the shapes refused, with the line), the list's
 * table and show's text from canned answers of GET /v1/services*, which
 * replica's log `logs` reads, and bad flags or arguments exiting 2 before
 * any call. No server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/cli.h"
#include "cli/service.h"
#include "base/banned.h"

static int parse(const char *text, json_t **list, json_t **lines, char *err, size_t errlen)
{
    return service_file_parse(text, strlen(text), "chat.yaml", list, lines, err, errlen);
}

static void one_yaml_service_is_a_list_of_one(void **state)
{
    (void)state;
    json_t *list = NULL, *lines = NULL;
    char err[256];
    assert_int_equal(parse("name: chat\nteam: ml\ncommand: [python3, server.py]\nmax: 4\n"
                           "autoscaling:\n  target: 2\n",
                           &list, &lines, err, sizeof(err)),
                     0);
    assert_int_equal(json_array_size(list), 1);
    json_t *s = json_array_get(list, 0);
    assert_string_equal(json_string_value(json_object_get(s, "name")), "chat");
    assert_int_equal(json_integer_value(json_object_get(s, "max")), 4);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(s, "autoscaling"), "target")), 2);
    json_decref(list);
    json_decref(lines);
}

static void lists_and_services_lists_keep_lines(void **state)
{
    (void)state;
    json_t *list = NULL, *lines = NULL;
    char err[256];
    assert_int_equal(parse("services:\n  - name: a\n    max: 1\n  - name: b\n    max: 2\n", &list,
                           &lines, err, sizeof(err)),
                     0);
    assert_int_equal(json_array_size(list), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 1), "name")), "b");
    assert_int_equal(json_integer_value(json_array_get(lines, 0)), 2);
    assert_int_equal(json_integer_value(json_array_get(lines, 1)), 4);
    json_decref(list);
    json_decref(lines);
    assert_int_equal(parse("- name: a\n- name: b\n", &list, &lines, err, sizeof(err)), 0);
    assert_int_equal(json_array_size(list), 2);
    json_decref(list);
    json_decref(lines);
}

static void json_with_tabs_and_show_output_apply(void **state)
{
    (void)state;
    json_t *list = NULL, *lines = NULL;
    char err[256];
    assert_int_equal(
        parse("{\t\"name\": \"chat\", \"max\": 2, \"generation\": 3, \"user\": \"ann\","
              " \"status\": {\"desired\": 1}}",
              &list, &lines, err, sizeof(err)),
        0);
    json_t *s = json_array_get(list, 0);
    assert_non_null(json_object_get(s, "max"));
    assert_null(json_object_get(s, "generation"));
    assert_null(json_object_get(s, "user"));
    assert_null(json_object_get(s, "status"));
    json_decref(list);
    json_decref(lines);
}

static void bad_shapes_are_refused_with_the_line(void **state)
{
    (void)state;
    json_t *list = NULL, *lines = NULL;
    char err[256];
    assert_int_equal(parse("- name: a\n- team: ml\n", &list, &lines, err, sizeof(err)), GPO_EUSAGE);
    assert_string_equal(err, "chat.yaml:2: [1]: expected a service: an object with a 'name'");
    assert_int_equal(
        parse("services:\n  - name: a\n  - name: a\n", &list, &lines, err, sizeof(err)),
        GPO_EUSAGE);
    assert_string_equal(err, "chat.yaml:3: services[1]: service 'a' is given twice");
    assert_int_equal(parse("services: []\n", &list, &lines, err, sizeof(err)), GPO_EUSAGE);
    assert_string_equal(err, "chat.yaml: no service in it");
    assert_int_equal(parse("team: ml\n", &list, &lines, err, sizeof(err)), GPO_EUSAGE);
    assert_string_equal(err, "chat.yaml:1: expected a service: an object with a 'name'");
    assert_int_equal(parse("name: [a\n", &list, &lines, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "chat.yaml:"));
    assert_int_equal(parse("name: a\nname: b\n", &list, &lines, err, sizeof(err)), GPO_EUSAGE);
    assert_non_null(strstr(err, "duplicate key"));
    assert_int_equal(parse("\"just text\"\n", &list, &lines, err, sizeof(err)), GPO_EUSAGE);
}

static const char chat_text[] =
    "{\"name\": \"chat\", \"team\": \"ml\", \"project\": \"assistant\", \"model\": \"llama-3-8b\","
    " \"user\": \"ann\", \"generation\": 3,"
    " \"command\": [\"python3\", \"server.py\"],"
    " \"resources\": {\"gpus\": 1, \"gpu_type\": \"H100-80GB\", \"cpus\": 4, \"mem_mib\": 16384,"
    "   \"pool\": \"default\"},"
    " \"priority\": \"serving\", \"min\": 0, \"max\": 8, \"concurrency_limit\": 4,"
    " \"hosts\": [\"chat.example.com\"],"
    " \"autoscaling\": {\"metric\": \"concurrency\", \"target\": 2},"
    " \"status\": {\"desired\": 2, \"ready\": 1,"
    "   \"replicas\": ["
    "     {\"replica\": 1, \"job\": 41, \"attempt\": 1, \"state\": \"ready\", \"node\": \"n1\","
    "      \"gpus\": [\"GPU-1a2b3c4d-0000-0000-0000-000000000000\"], \"inflight\": 2,"
    "      \"reason\": null},"
    "     {\"replica\": 2, \"job\": 42, \"attempt\": 0, \"state\": \"starting\", \"node\": null,"
    "      \"gpus\": [], \"inflight\": 0, \"reason\": \"team 'ml' at its quota\"}],"
    "   \"decision\": {\"at_ms\": 1000000, \"from\": 1, \"to\": 2, \"panic\": false,"
    "     \"reason\": \"1 -> 2: concurrency 3.8 over target 2 for 60 s\"},"
    "   \"observed\": {\"concurrency\": 3.8, \"rps\": 5.1, \"metric\": null, \"queued\": 0,"
    "     \"latency\": {\"window_s\": 60, \"requests\": 301, \"p50_s\": 0.0431667,"
    "       \"p99_s\": 0.145}},"
    "   \"backoff\": null, \"cost\": {\"gpu_hours\": 1.5, \"cost\": 3.0}}}";

static char *show(const char *text, int64_t now_ms)
{
    json_t *svc = json_loads(text, 0, NULL);
    assert_non_null(svc);
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_int_equal(service_show_render(out, svc, now_ms), 0);
    fclose(out);
    json_decref(svc);
    return buf;
}

static void show_gives_spec_replicas_decision_and_cost(void **state)
{
    (void)state;
    char *text = show(chat_text, 1012000);
    assert_string_equal(text,
                        "Service:      chat (generation 3)\n"
                        "Team:         ml, project assistant, user ann\n"
                        "Model:        llama-3-8b\n"
                        "Command:      python3 server.py\n"
                        "Resources:    GPUs H100-80GB:1, CPUs 4, memory 16G, pool default, "
                        "priority serving\n"
                        "Replicas:     1 ready, 2 desired (min 0, max 8)\n"
                        "Autoscaling:  concurrency, target 2 per replica, at most 4 in flight per "
                        "replica\n"
                        "Observed:     concurrency 3.8, 5.1 requests/s, 0 queued\n"
                        "Latency:      p50 0.0432 s, p99 0.145 s (301 answers in the last 60 s)\n"
                        "Hosts:        chat.example.com\n"
                        "\n"
                        "REPLICA  JOB  NODE  GPUS          STATE     INFLIGHT  REASON\n"
                        "1        41   n1    GPU-1a2b3c4d  ready     2         -\n"
                        "2        42   -     -             starting  0         team 'ml' at its "
                        "quota\n"
                        "\n"
                        "Last decision: 1 -> 2: concurrency 3.8 over target 2 for 60 s (12 s ago)\n"
                        "Cost:          1.50 GPU-hours, 3.00\n");
    free(text);
}

static void show_adds_counts_panic_and_backoff(void **state)
{
    (void)state;
    char *text = show("{\"name\": \"x\", \"max\": 5, \"status\": {\"replicas\": [],"
                      " \"decision\": {\"at_ms\": 0, \"from\": 3, \"to\": 5, \"panic\": true,"
                      "  \"reason\": \"concurrency 9.6 over target 2 for 6 s\"},"
                      " \"backoff\": {\"failures\": 3, \"until_ms\": 620000,"
                      "  \"reason\": \"crash loop: exit 1\"}}}",
                      600000);
    assert_non_null(strstr(text, "\nNo replicas.\n"));
    assert_non_null(strstr(text, "Last decision: 3 -> 5: concurrency 9.6 over target 2 for 6 s "
                                 "(panic) (10 min ago)\n"));
    assert_non_null(strstr(text, "Back-off:      3 failures, next try in 20 s: crash loop: "
                                 "exit 1\n"));
    free(text);
}

static void list_has_one_row_per_service(void **state)
{
    (void)state;
    char *list_text = NULL;
    json_t *chat = json_loads(chat_text, 0, NULL);
    json_t *answer =
        json_pack("{s:[o, {s:s, s:s, s:i, s:i, s:{s:s, s:s, s:f}}]}", "services", chat, "name",
                  "rag", "team", "search", "min", 1, "max", 3, "autoscaling", "metric", "replica",
                  "replica_metric", "vllm:num_requests_waiting", "target", 0.8);
    assert_non_null(answer);
    size_t len = 0;
    FILE *out = open_memstream(&list_text, &len);
    assert_int_equal(service_list_render(out, answer), 0);
    fclose(out);
    assert_string_equal(
        list_text, "NAME  TEAM    MODEL       READY/DESIRED  MIN-MAX  METRIC"
                   "                     TARGET\n"
                   "chat  ml      llama-3-8b  1/2            0-8      concurrency"
                   "                2\n"
                   "rag   search  -           -/-            1-3      vllm:num_requests_waiting"
                   "  0.8\n");
    free(list_text);
    json_decref(answer);
}

static void logs_picks_the_asked_or_first_ready_replica(void **state)
{
    (void)state;
    json_t *svc = json_loads(chat_text, 0, NULL);
    int64_t job = 0;
    char err[256];
    assert_int_equal(service_replica_job(svc, 0, &job, err, sizeof(err)), 0);
    assert_int_equal(job, 41);
    assert_int_equal(service_replica_job(svc, 2, &job, err, sizeof(err)), 0);
    assert_int_equal(job, 42);
    assert_int_equal(service_replica_job(svc, 7, &job, err, sizeof(err)), GPO_ENOENT);
    assert_string_equal(err, "service 'chat' has no replica 7");
    json_decref(svc);
    /* None ready: the lowest-numbered one; one without a job yet is named. */
    svc = json_loads("{\"name\": \"c\", \"status\": {\"replicas\": ["
                     "{\"replica\": 4, \"job\": 9, \"state\": \"starting\"},"
                     "{\"replica\": 3, \"job\": 8, \"state\": \"draining\"},"
                     "{\"replica\": 5, \"job\": 0, \"state\": \"starting\"}]}}",
                     0, NULL);
    assert_int_equal(service_replica_job(svc, 0, &job, err, sizeof(err)), 0);
    assert_int_equal(job, 8);
    assert_int_equal(service_replica_job(svc, 5, &job, err, sizeof(err)), GPO_ENOENT);
    assert_string_equal(err, "replica 5 of service 'c' has no job yet");
    json_decref(svc);
    svc = json_loads("{\"name\": \"c\", \"status\": {\"replicas\": []}}", 0, NULL);
    assert_int_equal(service_replica_job(svc, 0, &job, err, sizeof(err)), GPO_ENOENT);
    assert_string_equal(err, "service 'c' has no replicas");
    json_decref(svc);
}

static int run(int n, ...)
{
    char *argv[16] = {"service"};
    va_list ap;
    va_start(ap, n);
    for (int k = 0; k < n; k++)
        argv[k + 1] = va_arg(ap, char *);
    va_end(ap);
    /* --help writes to stdout, which carries the TAP: away with it here. */
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(saved >= 0 && null >= 0);
    dup2(null, STDOUT_FILENO);
    close(null);
    int rc = service_command(n + 1, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    return rc;
}

static void bad_flags_and_words_exit_2_before_any_call(void **state)
{
    (void)state;
    assert_int_equal(run(0), CLI_EXIT_USAGE);
    assert_int_equal(run(1, "scale"), CLI_EXIT_USAGE);
    assert_int_equal(run(2, "list", "--colour"), CLI_EXIT_USAGE);
    assert_int_equal(run(2, "list", "extra"), CLI_EXIT_USAGE);
    assert_int_equal(run(1, "show"), CLI_EXIT_USAGE);
    assert_int_equal(run(3, "show", "a", "b"), CLI_EXIT_USAGE);
    assert_int_equal(run(2, "delete", "--replica=1"), CLI_EXIT_USAGE);
    assert_int_equal(run(1, "apply"), CLI_EXIT_USAGE);
    assert_int_equal(run(2, "apply", "-f"), CLI_EXIT_USAGE);
    assert_int_equal(run(3, "logs", "chat", "--replica=0"), CLI_EXIT_USAGE);
    assert_int_equal(run(3, "logs", "chat", "--replica=x"), CLI_EXIT_USAGE);
    assert_int_equal(run(3, "logs", "chat", "--json"), CLI_EXIT_USAGE);
    assert_int_equal(run(1, "--help"), 0);
    assert_int_equal(run(2, "show", "--help"), 0);
    assert_int_equal(run(2, "logs", "-h"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_yaml_service_is_a_list_of_one),
        cmocka_unit_test(lists_and_services_lists_keep_lines),
        cmocka_unit_test(json_with_tabs_and_show_output_apply),
        cmocka_unit_test(bad_shapes_are_refused_with_the_line),
        cmocka_unit_test(show_gives_spec_replicas_decision_and_cost),
        cmocka_unit_test(show_adds_counts_panic_and_backoff),
        cmocka_unit_test(list_has_one_row_per_service),
        cmocka_unit_test(logs_picks_the_asked_or_first_ready_replica),
        cmocka_unit_test(bad_flags_and_words_exit_2_before_any_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
