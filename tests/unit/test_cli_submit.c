/* test_cli_submit.c - `gpuorch submit` without a server: the directive block
 * of a batch script (where it ends, how its words split), every #SBATCH
 * directive read into the API's body, #GPUORCH lines, the command line's
 * flags winning over the script's, one warning per unknown or misplaced
 * directive with its line, errors that name the file and line, and what
 * runs (script, command, --wrap). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "cli/script.h"
#include "cli/submit.h"
#include "base/banned.h"

/* ---- the directive block ---- */

static void the_directive_block_ends_at_the_first_command(void **state)
{
    (void)state;
    const char *text = "#!/bin/bash\n"             /* 1 */
                       "\n"                        /* 2 */
                       "# a comment\n"             /* 3 */
                       "#SBATCH -J one\n"          /* 4 */
                       "   # indented comment\n"   /* 5 */
                       "#GPUORCH --pool main\n"    /* 6 */
                       "#SBATCHX --not-one\n"      /* 7: not a directive */
                       " #SBATCH --not-at-col-1\n" /* 8: a comment */
                       "#SBATCH\n"                 /* 9: empty */
                       "echo start\n"              /* 10: the first command */
                       "#SBATCH --time=5\n"        /* 11: too late */
                       "#GPUORCH --gpus 1\n";      /* 12: too late */
    struct script_header h;
    char err[256];
    assert_int_equal(script_header_parse(text, strlen(text), &h, err, sizeof(err)), 0);
    assert_int_equal(h.n, 3);
    assert_int_equal(h.directives[0].prefix, SCRIPT_SBATCH);
    assert_int_equal(h.directives[0].line, 4);
    assert_int_equal(h.directives[0].nwords, 2);
    assert_string_equal(h.directives[0].words[1], "one");
    assert_null(h.directives[0].words[2]);
    assert_int_equal(h.directives[1].prefix, SCRIPT_GPUORCH);
    assert_int_equal(h.directives[1].line, 6);
    assert_int_equal(h.directives[2].nwords, 0);
    assert_int_equal(h.first_command, 10);
    assert_int_equal(h.nlate, 2);
    assert_int_equal(h.late[0], 11);
    assert_int_equal(h.late[1], 12);
    script_header_release(&h);
    script_header_release(NULL);
}

static void directive_words_split_as_a_shell_splits_them(void **state)
{
    (void)state;
    const char *text = "#SBATCH --comment \"two words\" -J 'it''s' a\\ b \"q\\\"x\" # trailing\r\n";
    struct script_header h;
    char err[256];
    assert_int_equal(script_header_parse(text, strlen(text), &h, err, sizeof(err)), 0);
    assert_int_equal(h.n, 1);
    char **w = h.directives[0].words;
    assert_int_equal(h.directives[0].nwords, 6);
    assert_string_equal(w[0], "--comment");
    assert_string_equal(w[1], "two words");
    assert_string_equal(w[2], "-J");
    assert_string_equal(w[3], "its");
    assert_string_equal(w[4], "a b");
    assert_string_equal(w[5], "q\"x");
    script_header_release(&h);

    const char *open_quote = "#!/bin/sh\n#SBATCH -J 'oops\n";
    assert_int_equal(script_header_parse(open_quote, strlen(open_quote), &h, err, sizeof(err)),
                     GPO_EUSAGE);
    assert_string_equal(err, "line 2: a quote (') is not closed");
}

/* ---- plans ---- */

struct run {
    struct submit_args args;
    struct submit_plan plan;
    char err[CLI_ERR_MAX];
    int rc;
};

/* Builds a plan from argv (a NULL-terminated list after "submit") and a
 * script text, in /work/dir with the environment envp. */
static void plan(struct run *r, const char *script, char *const *envp, char **argv)
{
    char *full[64] = {"submit"};
    int argc = 1;
    for (; argv[argc - 1]; argc++)
        full[argc] = argv[argc - 1];
    memset(r, 0, sizeof(*r));
    struct submit_env env = {.cwd = "/work/dir", .envp = envp};
    r->rc = submit_args_parse(argc, full, &r->args, r->err, sizeof(r->err));
    if (r->rc == 0)
        r->rc = submit_plan_build(&r->args, script, script ? strlen(script) : 0, "job.sh", &env,
                                  &r->plan, r->err, sizeof(r->err));
}

static void run_release(struct run *r)
{
    submit_plan_release(&r->plan);
    submit_args_release(&r->args);
}

/* The body minus "script", compared with the JSON text `want`; every
 * plan has "submit_dir", the current directory, which `want` may leave out. */
static void assert_body(const struct run *r, const char *want)
{
    if (r->rc)
        fail_msg("build failed: %s", r->err);
    json_t *body = json_deep_copy(r->plan.body), *w = json_loads(want, 0, NULL);
    assert_non_null(w);
    /* A script runs once, on the first node, as sbatch runs it. */
    if (json_object_get(body, "script"))
        assert_string_equal(json_string_value(json_object_get(body, "launch")), "first_node");
    json_object_del(body, "launch");
    json_object_del(body, "script");
    assert_string_equal(json_string_value(json_object_get(body, "submit_dir")), "/work/dir");
    if (!json_object_get(w, "submit_dir"))
        json_object_del(body, "submit_dir");
    if (!json_equal(body, w)) {
        char *got = json_dumps(body, JSON_SORT_KEYS);
        fail_msg("got %s", got);
    }
    json_decref(body);
    json_decref(w);
}

static void every_sbatch_directive_sets_its_field(void **state)
{
    (void)state;
    const char *script = "#!/bin/bash\n"
                         "#SBATCH --job-name=train\n"
                         "#SBATCH -o out.txt -e /logs/err.txt\n"
                         "#SBATCH --time=1-02:00:00\n"
                         "#SBATCH --gres=gpu:H100-80GB:4\n"
                         "#SBATCH --cpus-per-task=8\n"
                         "#SBATCH --mem=64G\n"
                         "#SBATCH --array=0-9%2\n"
                         "#SBATCH --dependency=afterok:3:4,afterany:5\n"
                         "#SBATCH --partition=main\n"
                         "#SBATCH --qos=high\n"
                         "#SBATCH --account=research\n"
                         "#SBATCH --chdir=sub\n"
                         "#SBATCH --export=NONE,SEED=7\n"
                         "#SBATCH --nodes=2\n"
                         "#SBATCH --no-requeue\n"
                         "#SBATCH --comment=\"not sent\"\n"
                         "#SBATCH --parsable\n"
                         "python train.py\n";
    struct run r;
    char *argv[] = {"job.sh", NULL};
    plan(&r, script, NULL, argv);
    /* A relative -o is relative to the job's working directory, as sbatch has it. */
    /* sbatch(1): --gres and --mem are per node, --nodes exact, -c per task. */
    assert_body(&r, "{\"name\": \"train\", \"output\": \"/work/dir/sub/out.txt\","
                    " \"error\": \"/logs/err.txt\","
                    " \"time_limit_s\": 93600, \"gpu_type\": \"H100-80GB\", \"gpus_per_node\": 4,"
                    " \"cpus_per_task\": 8, \"mem_per_node_mib\": 65536, \"array\": \"0-9%2\","
                    " \"dependencies\": [{\"type\": \"afterok\", \"job\": 3},"
                    "   {\"type\": \"afterok\", \"job\": 4}, {\"type\": \"afterany\", \"job\": 5}],"
                    " \"pool\": \"main\", \"priority\": \"high\", \"team\": \"research\","
                    " \"workdir\": \"/work/dir/sub\", \"env\": {\"SEED\": \"7\"},"
                    " \"nodes\": 2, \"requeue\": false}");
    assert_true(r.plan.parsable);
    assert_int_equal(r.plan.nwarnings, 1);
    assert_string_equal(r.plan.warnings[0],
                        "job.sh:17: #SBATCH --comment changes nothing gpuorch controls (ignored)");
    assert_string_equal(json_string_value(json_object_get(r.plan.body, "script")), script);
    run_release(&r);
}

static void the_other_spellings_of_gpus_time_and_nodes(void **state)
{
    (void)state;
    static const struct {
        const char *script, *want;
    } cases[] = {
        /* "-G, --gpus=[type:]<number> Specify the total number of GPUs required for the job." */
        {"#SBATCH -G 2\n", "{\"gpus\": 2}"},
        {"#SBATCH --gpus=A100:1\n", "{\"gpus\": 1, \"gpu_type\": \"A100\"}"},
        /* "--gpus-per-node=[type:]<number> ... on each node" */
        {"#SBATCH --gpus-per-node=8\n", "{\"gpus_per_node\": 8}"},
        {"#SBATCH --gpus-per-node=h100:2\n", "{\"gpus_per_node\": 2, \"gpu_type\": \"h100\"}"},
        /* "--gres ... The specified resources will be allocated to the job on each node." */
        {"#SBATCH --gres=gpu\n", "{\"gpus_per_node\": 1}"},
        {"#SBATCH --gres=gpu:3\n", "{\"gpus_per_node\": 3}"},
        {"#SBATCH --gres=gpu:L4\n", "{\"gpus_per_node\": 1, \"gpu_type\": \"L4\"}"},
        {"#SBATCH --gres=gpu:h100:2\n", "{\"gpus_per_node\": 2, \"gpu_type\": \"h100\"}"},
        {"#SBATCH --gres=gpu:0.5\n", "{\"gpus\": 0.5}"}, /* a share of one GPU: our extension */
        /* "--gpus-per-task=[type:]<number> ... on each task" */
        {"#SBATCH --gpus-per-task=2 -n 4\n", "{\"gpus_per_task\": 2, \"ntasks\": 4}"},
        {"#SBATCH --ntasks-per-node=8 --nodes=2\n", "{\"ntasks_per_node\": 8, \"nodes\": 2}"},
        /* the last of --gpus, --gpus-per-node and --gres wins */
        {"#SBATCH --gpus=4 --gres=gpu:2\n", "{\"gpus_per_node\": 2}"},
        /* MIG: Slurm's gres type of an instance is its profile; one instance per job */
        {"#SBATCH --gres=gpu:1g.10gb:1\n", "{\"mig_profile\": \"1g.10gb\"}"},
        {"#SBATCH --gres=gpu:3g.40gb\n", "{\"mig_profile\": \"3g.40gb\"}"},
        {"#SBATCH --gpus=2g.20gb:1\n", "{\"mig_profile\": \"2g.20gb\"}"},
        {"#SBATCH --gpus-per-node=1g.20gb\n", "{\"mig_profile\": \"1g.20gb\"}"},
        {"#GPUORCH --gpus MIG-1g.10gb.me --gpu-type H100-80GB\n",
         "{\"mig_profile\": \"MIG-1g.10gb.me\", \"gpu_type\": \"H100-80GB\"}"},
        {"#SBATCH --gpus=4 --gres=gpu:1g.10gb:1\n", "{\"mig_profile\": \"1g.10gb\"}"},
        {"#SBATCH --gres=gpu:1g.10gb:1 --gpus=4\n", "{\"gpus\": 4}"},
        {"#SBATCH -t 90\n", "{\"time_limit_s\": 5400}"},
        {"#SBATCH --time=UNLIMITED\n", "{\"time_limit_s\": 0}"},
        /* "-N, --nodes=<minnodes>[-maxnodes]": exact here; a range only when its ends agree */
        {"#SBATCH -N 1\n", "{\"nodes\": 1}"},
        {"#SBATCH -N 2-2\n", "{\"nodes\": 2}"},
        /* "-c, --cpus-per-task=<ncpus>" */
        {"#SBATCH -c4 -J x --requeue\n",
         "{\"cpus_per_task\": 4, \"name\": \"x\", \"requeue\": true}"},
        /* "--mem ... per node. ... zero ... grants the job access to all of the memory on each
           node." */
        {"#SBATCH --mem=0\n", "{\"mem_whole_node\": true}"},
        {"#SBATCH --mem=4G\n", "{\"mem_per_node_mib\": 4096}"},
        {"#SBATCH --mem-per-cpu=2G\n", "{\"mem_per_cpu_mib\": 2048}"},
        {"#SBATCH --mem-per-gpu=10G\n", "{\"mem_per_gpu_mib\": 10240}"},
        {"#SBATCH --mem=0 --mem-per-cpu=1G\n", "{\"mem_per_cpu_mib\": 1024}"},
        /* "--exclusive ... can not share nodes with other running jobs" */
        {"#SBATCH --exclusive\n", "{\"exclusive\": true}"},
        /* "-C, --constraint=<list> ... AND (&) ... OR (|)" */
        {"#SBATCH -C ib&nvme\n", "{\"constraint\": \"ib&nvme\"}"},
        {"#SBATCH --constraint=a|b\n", "{\"constraint\": \"a|b\"}"},
        {"#SBATCH -p gpu\n", "{\"pool\": \"gpu\"}"},
        {"#SBATCH -D /abs\n", "{\"workdir\": \"/abs\"}"},
        {"#GPUORCH --gpus 0.25 --gpu-type T4 --model llama --project p\n",
         "{\"gpus\": 0.25, \"gpu_type\": \"T4\", \"model\": \"llama\", \"project\": \"p\"}"},
        {"#GPUORCH --gpu-mem 10G\n", "{\"gpu_mem_mib\": 10240}"},
        {"#GPUORCH --gpus 2 --gpu-mem 40G\n", "{\"gpus\": 2, \"min_gpu_mem_mib\": 40960}"},
        {"#GPUORCH --checkpointable --multi-node --max-retries 3 --priority low --team t\n",
         "{\"checkpointable\": true, \"multi_node\": true, \"max_retries\": 3,"
         " \"priority\": \"low\", \"team\": \"t\"}"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct run r;
        char *argv[] = {"job.sh", NULL};
        char want[512];
        plan(&r, cases[k].script, NULL, argv);
        /* every plan has the default workdir unless it says one */
        json_t *w = json_loads(cases[k].want, 0, NULL);
        if (!json_object_get(w, "workdir"))
            json_object_set_new(w, "workdir", json_string("/work/dir"));
        char *text = json_dumps(w, 0);
        snprintf(want, sizeof(want), "%s", text);
        free(text);
        json_decref(w);
        assert_body(&r, want);
        assert_int_equal(r.plan.nwarnings, 0);
        run_release(&r);
    }
}

/* --signal goes as written (the API reads it); --open-mode as Slurm reads
 * it, by its first letters; the submit directory is the current one
 * whatever -D says. */
static void signal_open_mode_and_submit_dir(void **state)
{
    (void)state;
    static const struct {
        const char *script, *want;
    } cases[] = {
        {"#SBATCH --signal=B:USR1@90\n", "{\"signal\": \"B:USR1@90\"}"},
        {"#SBATCH --signal USR2\n", "{\"signal\": \"USR2\"}"},
        {"#SBATCH --open-mode=append\n", "{\"open_mode\": \"append\"}"},
        {"#SBATCH --open-mode=A\n", "{\"open_mode\": \"append\"}"},
        {"#SBATCH --open-mode=trunc\n", "{\"open_mode\": \"truncate\"}"},
        {"#SBATCH -D /elsewhere\n", "{\"workdir\": \"/elsewhere\", \"submit_dir\": \"/work/dir\"}"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct run r;
        char *argv[] = {"job.sh", NULL};
        plan(&r, cases[k].script, NULL, argv);
        json_t *w = json_loads(cases[k].want, 0, NULL);
        if (!json_object_get(w, "workdir"))
            json_object_set_new(w, "workdir", json_string("/work/dir"));
        char *text = json_dumps(w, 0);
        assert_body(&r, text);
        free(text);
        json_decref(w);
        run_release(&r);
    }
    struct run r;
    char *bad[] = {"--open-mode", "overwrite", "--", "true", NULL};
    plan(&r, NULL, NULL, bad);
    assert_int_equal(r.rc, GPO_EUSAGE);
    assert_non_null(strstr(r.err, "open-mode"));
    run_release(&r);
}

static void command_line_flags_win_over_the_script(void **state)
{
    (void)state;
    const char *script = "#!/bin/sh\n"
                         "#SBATCH --job-name=from-script --time=10 --gres=gpu:2\n"
                         "#SBATCH --mem=1G --account=a\n"
                         "#GPUORCH --priority low\n"
                         "true\n";
    struct run r;
    char *argv[] = {"-J",   "from-cli", "--mem", "2G",     "--priority",
                    "high", "--gpus",   "1",     "job.sh", NULL};
    plan(&r, script, NULL, argv);
    assert_body(&r, "{\"name\": \"from-cli\", \"time_limit_s\": 600, \"gpus\": 1,"
                    " \"mem_per_node_mib\": 2048, \"team\": \"a\", \"priority\": \"high\","
                    " \"workdir\": \"/work/dir\"}");
    run_release(&r);

    /* The flags after the script's path are its own, and refused. */
    char *after[] = {"job.sh", "-J", "x", NULL};
    plan(&r, script, NULL, after);
    assert_int_equal(r.rc, GPO_EUSAGE);
    assert_non_null(strstr(r.err, "arguments after the script ('-J'...) are not supported"));
    run_release(&r);
}

/* sbatch refuses an option it does not know; so does submit, with the
 * file and line, for any directive but those that change nothing here. */
static void unknown_directives_are_errors_with_their_line(void **state)
{
    (void)state;
    static const struct {
        const char *script, *want;
    } cases[] = {
        {"#!/bin/sh\n#SBATCH -J ok\n#SBATCH --hint=nomultithread\n",
         "job.sh:3: unknown #SBATCH directive '--hint': it is not supported, and ignoring it "
         "could change what the job gets or where it runs"},
        {"#SBATCH --gpu-type H100\n",
         "job.sh:1: '--gpu-type' is a gpuorch flag, not an sbatch one: write it as "
         "'#GPUORCH --gpu-type'"},
        {"#SBATCH -w node1\n", "job.sh:1: unknown #SBATCH directive '-w'"},
        {"#GPUORCH --gres-flags=enforce\n", "job.sh:1: unknown #GPUORCH directive '--gres-flags'"},
        {"#GPUORCH --server http://x:1\n", "job.sh:1: unknown #GPUORCH directive '--server'"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct run r;
        char *argv[] = {"job.sh", NULL};
        plan(&r, cases[k].script, NULL, argv);
        if (r.rc != GPO_EUSAGE || strncmp(r.err, cases[k].want, strlen(cases[k].want)) != 0)
            fail_msg("case %zu: rc %d, '%s'", k, r.rc, r.err);
        run_release(&r);
    }
}

/* Mail, accounting, profiling, comments and sbatch's own verbosity change
 * nothing gpuorch controls: each is named in a warning, and the rest counts. */
static void directives_that_change_nothing_warn_by_name(void **state)
{
    (void)state;
    const char *script = "#!/bin/sh\n"                                        /* 1 */
                         "#SBATCH --mail-type=END --mail-user=a@b -J ok\n"    /* 2 */
                         "#SBATCH --wckey=w --profile=task --acctg-freq=30\n" /* 3 */
                         "#SBATCH -v --quiet -Q --verbose --comment x\n"      /* 4 */
                         "#GPUORCH --model m stray\n"                         /* 5 */
                         "srun hostname\n"                                    /* 6 */
                         "#SBATCH --time=5\n";                                /* 7 */
    struct run r;
    char *argv[] = {"job.sh", NULL};
    plan(&r, script, NULL, argv);
    assert_int_equal(r.rc, 0);
    static const char *const want[] = {
        "job.sh:2: #SBATCH --mail-type changes nothing gpuorch controls (ignored)",
        "job.sh:2: #SBATCH --mail-user changes nothing gpuorch controls (ignored)",
        "job.sh:3: #SBATCH --wckey changes nothing gpuorch controls (ignored)",
        "job.sh:3: #SBATCH --profile changes nothing gpuorch controls (ignored)",
        "job.sh:3: #SBATCH --acctg-freq changes nothing gpuorch controls (ignored)",
        "job.sh:4: #SBATCH -v changes nothing gpuorch controls (ignored)",
        "job.sh:4: #SBATCH --quiet changes nothing gpuorch controls (ignored)",
        "job.sh:4: #SBATCH -Q changes nothing gpuorch controls (ignored)",
        "job.sh:4: #SBATCH --verbose changes nothing gpuorch controls (ignored)",
        "job.sh:4: #SBATCH --comment changes nothing gpuorch controls (ignored)",
        "job.sh:5: #GPUORCH: unexpected word 'stray' (ignored)",
        "job.sh:7: a directive after the first command (line 6) is ignored, as sbatch does",
    };
    assert_int_equal(r.plan.nwarnings, sizeof(want) / sizeof(want[0]));
    for (size_t k = 0; k < r.plan.nwarnings; k++)
        assert_string_equal(r.plan.warnings[k], want[k]);
    assert_string_equal(json_string_value(json_object_get(r.plan.body, "name")), "ok");
    assert_string_equal(json_string_value(json_object_get(r.plan.body, "model")), "m");
    assert_null(json_object_get(r.plan.body, "comment"));
    assert_null(json_object_get(r.plan.body, "time_limit_s"));
    run_release(&r);
}

static void bad_values_are_errors_naming_the_file_line_and_flag(void **state)
{
    (void)state;
    static const struct {
        const char *script, *want;
    } cases[] = {
        {"#!/bin/sh\n#SBATCH --time=soon\n",
         "job.sh:2: #SBATCH --time: expected a time limit (MM, HH:MM:SS, D-HH, D-HH:MM:SS, 90m, "
         "UNLIMITED), got 'soon'"},
        {"#SBATCH --gres=shard:2\n", "job.sh:1: #SBATCH --gres: only GPUs (gpu:N or gpu:TYPE:N) "
                                     "are supported, got 'shard:2'"},
        {"#SBATCH --gres=gpu:2,shard:1\n", "job.sh:1: #SBATCH --gres: one resource only"},
        {"#SBATCH --gres=gpu:1g.10gb:2\n",
         "job.sh:1: #SBATCH --gres: gpu:1g.10gb:2 asks for 2 MIG instances; a job gets one (CUDA "
         "shows a process one MIG device): give gpu:1g.10gb:1, or submit an array of jobs "
         "(--array)"},
        {"#SBATCH --gpus=3g.40gb:0\n",
         "job.sh:1: #SBATCH --gpus: 3g.40gb:0 asks for 0 MIG instances; a job gets one (CUDA "
         "shows a process one MIG device): give 3g.40gb:1, or submit an array of jobs "
         "(--array)"},
        {"#SBATCH --gres=gpu:1g.10gb:x\n",
         "job.sh:1: #SBATCH --gres: expected gpu:N, gpu:TYPE:N or gpu:PROFILE:1, got "
         "'1g.10gb:x'"},
        {"#SBATCH --gpus-per-task=1g.10gb:1\n",
         "job.sh:1: #SBATCH --gpus-per-task: a MIG profile (1g.10gb) is one instance per job, "
         "not per task: give --gpus 1g.10gb"},
        {"#SBATCH --mem 4X\n", "job.sh:1: #SBATCH --mem: expected MiB, or a size such as 4G"},
        {"#SBATCH --dependency=after:3\n", "job.sh:1: #SBATCH --dependency: 'after' is not "
                                           "supported"},
        {"#SBATCH -N 0\n", "job.sh:1: #SBATCH --nodes: expected a node count"},
        {"#SBATCH -N 1-4\n", "job.sh:1: #SBATCH --nodes: a node range (1-4) is not supported: "
                             "gpuorch allocates exactly the nodes asked for; give one count "
                             "(--nodes=1)"},
        {"#SBATCH --exclusive=user\n", "job.sh:1: --exclusive: 'user' is not supported"},
        {"#SBATCH -p a,b\n", "job.sh:1: #SBATCH --partition: a list of partitions (a,b) is "
                             "not supported"},
        {"#SBATCH --mem-per-cpu=0\n", "job.sh:1: #SBATCH --mem-per-cpu: expected MiB"},
        {"#SBATCH --ntasks=0\n", "job.sh:1: #SBATCH --ntasks: expected a number of tasks"},
        {"#GPUORCH --max-retries 1000\n", "job.sh:1: #GPUORCH --max-retries: expected a number "
                                          "(0-100), got '1000'"},
        {"#SBATCH --time\n", "job.sh:1: #SBATCH option '--time' needs a value"},
        {"#SBATCH --requeue=yes\n", "job.sh:1: #SBATCH option '--requeue' takes no value"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct run r;
        char *argv[] = {"job.sh", NULL};
        plan(&r, cases[k].script, NULL, argv);
        if (r.rc != GPO_EUSAGE || strncmp(r.err, cases[k].want, strlen(cases[k].want)) != 0)
            fail_msg("case %zu: rc %d, '%s'", k, r.rc, r.err);
        run_release(&r);
    }
    struct run r;
    char *argv[] = {"--cpus", "0", "--", "true", NULL};
    plan(&r, NULL, NULL, argv);
    assert_int_equal(r.rc, GPO_EUSAGE);
    assert_string_equal(r.err, "--cpus: expected a number of CPUs (1-4096), got '0'");
    run_release(&r);
    char *unknown[] = {"--gpu", "1", "--", "true", NULL};
    plan(&r, NULL, NULL, unknown);
    assert_int_equal(r.rc, GPO_EUSAGE);
    assert_string_equal(r.err, "unknown option '--gpu'");
    run_release(&r);
    char *excl[] = {"--exclusive=mcs", "--", "true", NULL};
    plan(&r, NULL, NULL, excl);
    assert_int_equal(r.rc, GPO_EUSAGE);
    assert_non_null(strstr(r.err, "--exclusive: 'mcs' is not supported"));
    run_release(&r);
}

static void what_runs_is_a_script_a_command_or_wrap(void **state)
{
    (void)state;
    struct run r;
    char *cmd[] = {"--gpus", "1", "--", "python", "train.py", "--lr", "0.1", NULL};
    plan(&r, NULL, NULL, cmd);
    assert_body(&r, "{\"gpus\": 1, \"workdir\": \"/work/dir\","
                    " \"command\": [\"python\", \"train.py\", \"--lr\", \"0.1\"]}");
    assert_null(json_object_get(r.plan.body, "script"));
    run_release(&r);

    /* A --gpus value that is a MIG profile asks for one instance of it;
     * the command line's wins over the script's GPUs. */
    char *mig[] = {"--gpus", "1g.10gb", "--", "nvidia-smi", "-L", NULL};
    plan(&r, NULL, NULL, mig);
    assert_body(&r, "{\"mig_profile\": \"1g.10gb\", \"workdir\": \"/work/dir\","
                    " \"command\": [\"nvidia-smi\", \"-L\"]}");
    run_release(&r);
    char *mig_over[] = {"-G", "MIG 2g.20gb", "job.sh", NULL};
    plan(&r, "#!/bin/sh\n#SBATCH --gres=gpu:h100:2\n", NULL, mig_over);
    assert_body(&r, "{\"mig_profile\": \"MIG 2g.20gb\", \"gpu_type\": \"h100\","
                    " \"workdir\": \"/work/dir\"}");
    run_release(&r);

    char *wrap[] = {"--wrap", "echo hi", NULL};
    plan(&r, NULL, NULL, wrap);
    assert_int_equal(r.rc, 0);
    assert_string_equal(json_string_value(json_object_get(r.plan.body, "script")),
                        "#!/bin/sh\necho hi\n");
    run_release(&r);

    static const struct {
        char *argv[4];
        const char *script, *want;
    } bad[] = {
        {{"-J", "x", NULL}, NULL, "nothing to run"},
        {{"--", NULL}, NULL, "no command after '--'"},
        {{"--wrap", "true", "job.sh", NULL}, "true\n", "give one of"},
        {{"job.sh", NULL}, "", "job.sh is empty"},
        {{"job.sh", NULL}, "#!/bin/sh\n\xff\n", "job.sh is not UTF-8 text"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        char *argv[5] = {bad[k].argv[0], bad[k].argv[1], bad[k].argv[2], bad[k].argv[3], NULL};
        plan(&r, bad[k].script, NULL, argv);
        if (r.rc != GPO_EUSAGE || !strstr(r.err, bad[k].want))
            fail_msg("case %zu: rc %d, '%s'", k, r.rc, r.err);
        run_release(&r);
    }
}

static void the_environment_goes_only_when_exported(void **state)
{
    (void)state;
    char *envp[] = {"HOME=/home/a", "GPUORCH_TOKEN=gpo_secret", NULL};
    struct run r;
    char *none[] = {"--", "env", NULL};
    plan(&r, NULL, envp, none);
    assert_null(json_object_get(r.plan.body, "env"));
    run_release(&r);
    char *all[] = {"--export=ALL", "--", "env", NULL};
    plan(&r, NULL, envp, all);
    assert_body(&r, "{\"env\": {\"HOME\": \"/home/a\"}, \"workdir\": \"/work/dir\","
                    " \"command\": [\"env\"]}");
    run_release(&r);
    /* The last --export wins, as any flag: the command line's over the script's. */
    char *last[] = {"--export", "A=1", "job.sh", NULL};
    plan(&r, "#SBATCH --export=ALL\ntrue\n", envp, last);
    assert_body(&r, "{\"env\": {\"A\": \"1\"}, \"workdir\": \"/work/dir\"}");
    run_release(&r);
}

static void connection_flags_and_the_key_stay_out_of_the_body(void **state)
{
    (void)state;
    struct run r;
    char *argv[] = {"--server",          "http://h:1", "--token-file", "/t",   "--json",
                    "--idempotency-key", "k-1",        "--",           "true", NULL};
    plan(&r, NULL, NULL, argv);
    assert_body(&r, "{\"workdir\": \"/work/dir\", \"command\": [\"true\"]}");
    assert_string_equal(r.args.co.server, "http://h:1");
    assert_string_equal(r.args.co.token_file, "/t");
    assert_true(r.args.co.json);
    assert_string_equal(r.plan.idempotency_key, "k-1");
    run_release(&r);
    /* Not from a script: there they are unknown directives. */
    char *script_argv[] = {"job.sh", NULL};
    plan(&r, "#GPUORCH --idempotency-key k\ntrue\n", NULL, script_argv);
    assert_int_equal(r.rc, GPO_EUSAGE);
    assert_non_null(strstr(r.err, "unknown #GPUORCH directive '--idempotency-key'"));
    assert_null(r.plan.idempotency_key);
    run_release(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_directive_block_ends_at_the_first_command),
        cmocka_unit_test(directive_words_split_as_a_shell_splits_them),
        cmocka_unit_test(every_sbatch_directive_sets_its_field),
        cmocka_unit_test(the_other_spellings_of_gpus_time_and_nodes),
        cmocka_unit_test(command_line_flags_win_over_the_script),
        cmocka_unit_test(signal_open_mode_and_submit_dir),
        cmocka_unit_test(unknown_directives_are_errors_with_their_line),
        cmocka_unit_test(directives_that_change_nothing_warn_by_name),
        cmocka_unit_test(bad_values_are_errors_naming_the_file_line_and_flag),
        cmocka_unit_test(what_runs_is_a_script_a_command_or_wrap),
        cmocka_unit_test(the_environment_goes_only_when_exported),
        cmocka_unit_test(connection_flags_and_the_key_stay_out_of_the_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
