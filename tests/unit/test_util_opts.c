/* test_util_opts.c - the option parser of every command: each spelling of an
 * option and its value, "--" and positional words, masks, each typed value
 * at and past its bounds, --help, and every error message word for word. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/opts.h"
#include "base/banned.h"

struct args {
    const char *name, *time, *dir;
    bool quiet, help;
    int64_t retries, grace_ms, limit, days;
    double load;
};

enum { WHERE_CLI = 1 << 0, WHERE_FILE = 1 << 1 };

static const struct opts_opt table[] = {
    {.name = "job-name",
     .short_name = 'J',
     .type = OPTS_STRING,
     .offset = offsetof(struct args, name)},
    {.name = "time", .short_name = 't', .type = OPTS_STRING, .offset = offsetof(struct args, time)},
    {.name = "quiet", .short_name = 'q', .type = OPTS_FLAG, .offset = offsetof(struct args, quiet)},
    {.name = "dir",
     .type = OPTS_STRING,
     .flags = OPTS_NONEMPTY,
     .offset = offsetof(struct args, dir)},
    {.name = "retries",
     .type = OPTS_INT,
     .min = 0,
     .max = 100,
     .offset = offsetof(struct args, retries)},
    {.name = "kill-grace",
     .type = OPTS_SECONDS,
     .min = 1,
     .max = 86400,
     .scale = 1000,
     .offset = offsetof(struct args, grace_ms)},
    {.name = "body-limit",
     .type = OPTS_SIZE,
     .min = 1024,
     .max = 64 << 20,
     .offset = offsetof(struct args, limit)},
    {.name = "retention",
     .type = OPTS_INT,
     .min = 1,
     .max = 3650,
     .expect = "whole days from 1 to 3650",
     .offset = offsetof(struct args, days)},
    {.name = "load",
     .type = OPTS_DOUBLE,
     .flags = OPTS_OPEN_MIN,
     .dmin = 0,
     .dmax = 100,
     .offset = offsetof(struct args, load)},
    {.short_name = 'x',
     .type = OPTS_FLAG,
     .where = WHERE_FILE,
     .offset = offsetof(struct args, quiet)},
    {.name = "help", .short_name = 'h', .type = OPTS_HELP, .offset = offsetof(struct args, help)},
};

/* Parses argv (argc words, no command name) into a; positional words joined
 * by '|' into pos. Returns opts_parse's code. */
static int parse(int argc, char **argv, unsigned mask, struct args *a, char *pos, size_t len,
                 char *err, size_t errlen, struct opts *ret_p)
{
    const char *words[32];
    size_t n = 0;
    struct opts p;
    opts_init(&p, argc, argv, OPTS_TABLE(table), mask);
    int rc = opts_parse(&p, a, words, &n, err, errlen);
    pos[0] = '\0';
    for (size_t k = 0; rc >= 0 && k < n; k++)
        snprintf(pos + strlen(pos), len - strlen(pos), "%s|", words[k]);
    if (ret_p)
        *ret_p = p;
    return rc;
}

static void every_spelling_of_a_value_is_read(void **state)
{
    (void)state;
    char *argv[] = {"-J", "a", "--time=5", "x", "-q", "-Jb", "--", "--time", "y", "-q"};
    struct args a = {0};
    char pos[256], err[256];
    assert_int_equal(parse(10, argv, 0, &a, pos, sizeof(pos), err, sizeof(err), NULL), 0);
    assert_string_equal(a.name, "b"); /* the last one wins */
    assert_string_equal(a.time, "5");
    assert_true(a.quiet);
    assert_string_equal(pos, "x|--time|y|-q|"); /* after "--", words are not options */

    char *argv2[] = {"--job-name", "c", "--time", "-1", "-", "--job-name="};
    struct args b = {0};
    assert_int_equal(parse(6, argv2, 0, &b, pos, sizeof(pos), err, sizeof(err), NULL), 0);
    assert_string_equal(b.name, "");   /* --name= gives the empty value */
    assert_string_equal(b.time, "-1"); /* a value may start with '-' */
    assert_string_equal(pos, "-|");    /* "-" alone is a word (stdin) */
}

static void the_walk_reports_each_word_and_where_it_stopped(void **state)
{
    (void)state;
    char *argv[] = {"w", "-q", "--", "-J"};
    struct opts p;
    const struct opts_opt *o = NULL;
    const char *v = NULL;
    opts_init(&p, 4, argv, OPTS_TABLE(table), 0);
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_ARG);
    assert_string_equal(v, "w");
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_OPTION);
    assert_ptr_equal(o, &table[2]);
    assert_null(v);
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_DASHDASH);
    assert_int_equal(p.i, 3); /* the words after it: argv[3..) */
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_ARG);
    assert_string_equal(v, "-J");
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_END);
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_END);
}

static void errors_of_form_name_the_option(void **state)
{
    (void)state;
    enum { U = OPTS_FAULT_UNKNOWN, M = OPTS_FAULT_MISSING_VALUE, E = OPTS_FAULT_EXTRA_VALUE };
    static const struct {
        int argc;
        char *argv[3];
        int rc, fault;
        const char *want, *word;
    } cases[] = {
        {1, {"--jobname"}, GPO_ENOENT, U, "unknown option '--jobname'", "--jobname"},
        {1, {"--jobname=x"}, GPO_ENOENT, U, "unknown option '--jobname'", "--jobname=x"},
        {1, {"-z"}, GPO_ENOENT, U, "unknown option '-z'", "-z"},
        {1, {"-x"}, GPO_ENOENT, U, "unknown option '-x'", "-x"}, /* not under this mask */
        {1, {"--time"}, GPO_EUSAGE, M, "option '--time' needs a value", "--time"},
        {2, {"x", "-t"}, GPO_EUSAGE, M, "option '-t' needs a value", "-t"},
        {1, {"--quiet=yes"}, GPO_EUSAGE, E, "option '--quiet' takes no value", "--quiet=yes"},
        {1, {"-qx"}, GPO_EUSAGE, E, "option '-q' takes no value (in '-qx')", "-qx"},
        {1, {"--help=me"}, GPO_EUSAGE, E, "option '--help' takes no value", "--help=me"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct args a = {0};
        struct opts p;
        char pos[64], err[256] = "";
        int rc = parse(cases[k].argc, (char **)cases[k].argv, WHERE_CLI, &a, pos, sizeof(pos), err,
                       sizeof(err), &p);
        if (rc != cases[k].rc || strcmp(err, cases[k].want) != 0 ||
            strcmp(p.word, cases[k].word) != 0 || p.bad || (int)p.fault != cases[k].fault)
            fail_msg("case %zu: rc %d, '%s', word '%s'", k, rc, err, p.word);
    }
}

static void masks_select_the_entries_a_walk_sees(void **state)
{
    (void)state;
    char *argv[] = {"-x"};
    struct args a = {0};
    char pos[64], err[256];
    assert_int_equal(parse(1, argv, WHERE_FILE, &a, pos, sizeof(pos), err, sizeof(err), NULL), 0);
    assert_true(a.quiet);
    /* Entries without bits are seen under every mask. */
    char *argv2[] = {"--retries", "3"};
    assert_int_equal(parse(2, argv2, WHERE_FILE, &a, pos, sizeof(pos), err, sizeof(err), NULL), 0);
    assert_int_equal(a.retries, 3);
}

static void typed_values_are_converted_within_their_range(void **state)
{
    (void)state;
    char *argv[] = {"--retries",   "100", "--kill-grace=30", "--body-limit", "64K",
                    "--retention", "1",   "--load",          "0.5",          "--dir",
                    "/d"};
    struct args a = {0};
    char pos[64], err[256];
    assert_int_equal(parse(11, argv, 0, &a, pos, sizeof(pos), err, sizeof(err), NULL), 0);
    assert_int_equal(a.retries, 100);
    assert_int_equal(a.grace_ms, 30000); /* scaled */
    assert_int_equal(a.limit, 65536);
    assert_int_equal(a.days, 1);
    assert_true(a.load == 0.5);
    assert_string_equal(a.dir, "/d");
    char *sizes[] = {"--body-limit", "1024", "--body-limit", "64m",
                     "--retries",    "0",    "--load",       "100"};
    assert_int_equal(parse(8, sizes, 0, &a, pos, sizeof(pos), err, sizeof(err), NULL), 0);
    assert_int_equal(a.limit, 64 << 20);
    assert_int_equal(a.retries, 0);
    assert_true(a.load == 100);
}

static void refused_values_say_what_was_expected(void **state)
{
    (void)state;
    static const struct {
        const char *flag, *value, *want;
    } cases[] = {
        {"--retries", "101", "--retries: expected a whole number from 0 to 100, got '101'"},
        {"--retries", "-1", "--retries: expected a whole number from 0 to 100, got '-1'"},
        {"--retries", "+5", "--retries: expected a whole number from 0 to 100, got '+5'"},
        {"--retries", " 5", "--retries: expected a whole number from 0 to 100, got ' 5'"},
        {"--retries", "5x", "--retries: expected a whole number from 0 to 100, got '5x'"},
        {"--retries", "", "--retries: expected a whole number from 0 to 100, got ''"},
        {"--retries", "99999999999999999999",
         "--retries: expected a whole number from 0 to 100, got '99999999999999999999'"},
        {"--kill-grace", "x", "--kill-grace: expected whole seconds from 1 to 86400, got 'x'"},
        {"--kill-grace", "0", "--kill-grace: expected whole seconds from 1 to 86400, got '0'"},
        {"--kill-grace", "1.5", "--kill-grace: expected whole seconds from 1 to 86400, got '1.5'"},
        {"--body-limit", "1023",
         "--body-limit: expected a size in bytes from 1024 to 67108864, got '1023'"},
        {"--body-limit", "65M",
         "--body-limit: expected a size in bytes from 1024 to 67108864, got '65M'"},
        {"--body-limit", "1KB",
         "--body-limit: expected a size in bytes from 1024 to 67108864, got '1KB'"},
        {"--body-limit", "-1",
         "--body-limit: expected a size in bytes from 1024 to 67108864, got '-1'"},
        {"--body-limit", "99999999999T",
         "--body-limit: expected a size in bytes from 1024 to 67108864, got '99999999999T'"},
        {"--retention", "0", "--retention: expected whole days from 1 to 3650, got '0'"},
        {"--load", "0", "--load: expected a number above 0, at most 100, got '0'"},
        {"--load", "100.5", "--load: expected a number above 0, at most 100, got '100.5'"},
        {"--load", "nan", "--load: expected a number above 0, at most 100, got 'nan'"},
        {"--load", "1e999", "--load: expected a number above 0, at most 100, got '1e999'"},
        {"--dir", "", "--dir: expected a value, got ''"},
        {"--retries", "a\nb", "--retries: expected a whole number from 0 to 100, got 'a?b'"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct args a = {.retries = 7};
        struct opts p;
        char *argv[] = {"-q", (char *)cases[k].flag, (char *)cases[k].value};
        char pos[64], err[256] = "";
        int rc = parse(3, argv, 0, &a, pos, sizeof(pos), err, sizeof(err), &p);
        if (rc != GPO_EUSAGE || strcmp(err, cases[k].want) != 0 || !p.bad ||
            strcmp(p.bad->name, cases[k].flag + 2) != 0 || p.fault != OPTS_FAULT_BAD_VALUE)
            fail_msg("case %zu: rc %d, '%s'", k, rc, err);
        assert_int_equal(a.retries, 7); /* a refused value leaves its member alone */
    }
    /* A long value is cut, as every quoted user text is. */
    char *argv[] = {"--retries", "1234567890123456789012345678901234567890123"};
    struct args a = {0};
    char pos[64], err[256];
    assert_int_equal(parse(2, argv, 0, &a, pos, sizeof(pos), err, sizeof(err), NULL), GPO_EUSAGE);
    assert_string_equal(err, "--retries: expected a whole number from 0 to 100, got "
                             "'1234567890123456789012345678901234567890...'");
}

static void help_wins_over_values_but_not_over_mistakes_of_form(void **state)
{
    (void)state;
    struct args a = {0};
    char pos[64], err[256];
    char *argv[] = {"--retries", "x", "word", "-h"};
    assert_int_equal(parse(4, argv, 0, &a, pos, sizeof(pos), err, sizeof(err), NULL),
                     OPTS_HELP_GIVEN);
    assert_true(a.help);
    assert_int_equal(a.retries, 0);    /* nothing else converted */
    assert_string_equal(pos, "word|"); /* positional words still come */
    char *bad[] = {"--help", "--bogus"};
    assert_int_equal(parse(2, bad, 0, &a, pos, sizeof(pos), err, sizeof(err), NULL), GPO_ENOENT);
    /* Help anywhere, for commands that answer it whatever else is there. */
    char *anywhere[] = {"--trace", "--help"};
    assert_true(opts_help_asked(2, anywhere, OPTS_TABLE(table)));
    char *short_h[] = {"--bogus", "-h"};
    assert_true(opts_help_asked(2, short_h, OPTS_TABLE(table)));
    char *none[] = {"--helpful", "-hx", "help"};
    assert_false(opts_help_asked(3, none, OPTS_TABLE(table)));
}

static void a_command_without_positional_words_gets_the_first_stray(void **state)
{
    (void)state;
    char err[256];
    const char *stray = (const char *)1;
    struct args a = {0};
    struct opts p;
    char *argv[] = {"-q", "one", "--retries", "3", "two"};
    opts_init(&p, 5, argv, OPTS_TABLE(table), 0);
    assert_int_equal(opts_parse_flags(&p, &a, &stray, err, sizeof(err)), 0);
    assert_string_equal(stray, "one");
    assert_int_equal(a.retries, 3); /* the options are still read */
    char *clean[] = {"--quiet"};
    opts_init(&p, 1, clean, OPTS_TABLE(table), 0);
    assert_int_equal(opts_parse_flags(&p, &a, &stray, err, sizeof(err)), 0);
    assert_null(stray);
    /* An error of form comes first, and leaves no stray. */
    char *bad[] = {"word", "--bogus"};
    opts_init(&p, 2, bad, OPTS_TABLE(table), 0);
    assert_int_equal(opts_parse_flags(&p, &a, &stray, err, sizeof(err)), GPO_ENOENT);
    assert_null(stray);
    assert_string_equal(p.word, "--bogus");
    /* Help wins over a stray word. */
    char *help[] = {"word", "-h"};
    opts_init(&p, 2, help, OPTS_TABLE(table), 0);
    assert_int_equal(opts_parse_flags(&p, &a, &stray, err, sizeof(err)), OPTS_HELP_GIVEN);
    assert_null(stray);
}

/* A table of larger entries that begin with a struct opts_opt. */
struct wide {
    struct opts_opt opt;
    const char *extra;
};

static void tables_of_larger_entries_are_walked_by_their_stride(void **state)
{
    (void)state;
    static const struct wide wide[] = {
        {{.name = "alpha", .type = OPTS_FLAG}, "first"},
        {{.name = "beta", .short_name = 'b', .type = OPTS_STRING}, "second"},
    };
    char *argv[] = {"-bvalue", "--alpha"};
    struct opts p;
    const struct opts_opt *o = NULL;
    const char *v = NULL;
    opts_init(&p, 2, argv, OPTS_TABLE(wide), 0);
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_OPTION);
    assert_string_equal(((const struct wide *)(const void *)o)->extra, "second");
    assert_string_equal(v, "value");
    assert_int_equal(opts_next(&p, &o, &v, NULL, 0), OPTS_OPTION);
    assert_string_equal(((const struct wide *)(const void *)o)->extra, "first");
}

static void converters_read_values_from_anywhere(void **state)
{
    (void)state;
    int64_t n;
    double d;
    char name[64];
    assert_int_equal(opts_parse_int("42", 1, 100, &n), 0);
    assert_int_equal(n, 42);
    assert_int_equal(opts_parse_int("-7", -10, 0, &n), 0);
    assert_int_equal(n, -7);
    assert_int_equal(opts_parse_int("+42", 1, 100, &n), GPO_EUSAGE);
    assert_int_equal(opts_parse_int("0", 1, 100, &n), GPO_EUSAGE);
    assert_int_equal(opts_parse_int("4x", 1, 100, &n), GPO_EUSAGE);
    assert_int_equal(opts_parse_int(NULL, 1, 100, &n), GPO_EUSAGE);
    assert_int_equal(opts_parse_size("2G", 0, INT64_MAX, &n), 0);
    assert_int_equal(n, INT64_C(2) << 30);
    assert_int_equal(opts_parse_size("1t", 0, INT64_MAX, &n), 0);
    assert_int_equal(n, INT64_C(1) << 40);
    assert_int_equal(opts_parse_size("8E", 0, INT64_MAX, &n), GPO_EUSAGE);
    assert_int_equal(opts_parse_double(".25", &d), 0);
    assert_true(d == 0.25);
    assert_int_equal(opts_parse_double("inf", &d), GPO_EUSAGE);
    assert_int_equal(opts_parse_double("", &d), GPO_EUSAGE);
    assert_string_equal(opts_name(&table[0], name, sizeof(name)), "--job-name");
    assert_string_equal(opts_name(&table[9], name, sizeof(name)), "-x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_spelling_of_a_value_is_read),
        cmocka_unit_test(the_walk_reports_each_word_and_where_it_stopped),
        cmocka_unit_test(errors_of_form_name_the_option),
        cmocka_unit_test(masks_select_the_entries_a_walk_sees),
        cmocka_unit_test(typed_values_are_converted_within_their_range),
        cmocka_unit_test(refused_values_say_what_was_expected),
        cmocka_unit_test(help_wins_over_values_but_not_over_mistakes_of_form),
        cmocka_unit_test(a_command_without_positional_words_gets_the_first_stray),
        cmocka_unit_test(tables_of_larger_entries_are_walked_by_their_stride),
        cmocka_unit_test(converters_read_values_from_anywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
