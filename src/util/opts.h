/*
 * opts.h - one table-driven option parser for every command of the binary.
 *
 * A command describes its options as a static table of struct opts_opt (or
 * of larger structs that begin with one: `stride` is the size of an entry)
 * and reads argv with it:
 *
 *     struct args { const char *name; int64_t grace_ms; bool quiet, help; };
 *     static const struct opts_opt table[] = {
 *         {.name = "job-name", .short_name = 'J', .type = OPTS_STRING,
 *          .offset = offsetof(struct args, name)},
 *         {.name = "kill-grace", .type = OPTS_SECONDS, .min = 0, .max = 3600,
 *          .scale = 1000, .offset = offsetof(struct args, grace_ms)},
 *         {.name = "quiet", .short_name = 'q', .type = OPTS_FLAG,
 *          .offset = offsetof(struct args, quiet)},
 *         {.name = "help", .short_name = 'h', .type = OPTS_HELP,
 *          .offset = offsetof(struct args, help)},
 *     };
 *     struct opts p;
 *     opts_init(&p, argc - 1, argv + 1, OPTS_TABLE(table), 0);
 *     rc = opts_parse(&p, &args, pos, &npos, err, sizeof(err));
 *
 * Words: `--name VALUE`, `--name=VALUE`, `-J VALUE` and `-JVALUE` for an
 * option with a value (a value may begin with '-': `--time -1`); `--name`
 * and `-q` for one without; `--` ends the options (every word after it is
 * positional); `-` alone and any word not beginning with '-' are
 * positional. Short options are not grouped (`-qv` is -q with the value
 * "v", refused when -q takes none). There are no abbreviations.
 *
 * Values are converted and range-checked by the entry's type, into the
 * member at `offset` of the caller's struct; a refused value gets one line
 * that names the flag and what was expected:
 *     --pass-interval: expected whole seconds from 1 to 86400, got 'x'
 * (the value quoted as jsonv_quote does: control characters as '?', long
 * values cut). `expect` replaces the generated "whole seconds from 1 to
 * 86400" where a command says it better.
 *
 * `where` holds bits the caller gives meaning to: a walk sees only the
 * entries that share a bit with its mask (submit uses them for "command
 * line", "#SBATCH" and "#GPUORCH"); an entry with where 0, and every entry
 * under mask 0, is seen everywhere.
 *
 * Errors: 0 or a negative GPO_* code with one line in the caller's buffer:
 * GPO_ENOENT for an option the table does not have (among those the mask
 * selects), GPO_EUSAGE for a value missing, a value given to an option that
 * takes none, or a value its type refuses. Nothing here prints; argv and the
 * table are borrowed, and what is stored points into argv.
 */
#ifndef GPUORCH_UTIL_OPTS_H
#define GPUORCH_UTIL_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* What an option's value is, and the C type of its member at `offset`. */
enum opts_type {
    OPTS_FLAG,    /* no value; bool, set to true */
    OPTS_HELP,    /* no value; bool, set to true; opts_parse then converts nothing else */
    OPTS_STRING,  /* const char *, borrowed from argv (OPTS_NONEMPTY: not "") */
    OPTS_INT,     /* int64_t: a whole decimal number in min..max, stored times scale */
    OPTS_SECONDS, /* int64_t: whole seconds in min..max, stored times scale (1000: ms) */
    OPTS_SIZE,    /* int64_t: bytes in min..max: digits, and K, M, G or T (powers of 1024) */
    OPTS_DOUBLE,  /* double: a finite decimal number in dmin..dmax (OPTS_OPEN_MIN: > dmin) */
};

enum opts_flag {
    OPTS_NONEMPTY = 1 << 0, /* OPTS_STRING: the empty string is refused */
    OPTS_OPEN_MIN = 1 << 1, /* OPTS_DOUBLE: dmin itself is refused */
};

/* One option. */
struct opts_opt {
    const char *name; /* long name without "--" ("job-name"); NULL: short only */
    char short_name;  /* 'J'; 0: long only */
    enum opts_type type;
    unsigned flags;     /* enum opts_flag bits */
    unsigned where;     /* the caller's bits (see above); 0: seen under every mask */
    size_t offset;      /* the member in the caller's struct */
    int64_t min, max;   /* INT, SECONDS, SIZE: the range, before scale */
    int64_t scale;      /* INT, SECONDS: the stored value is the given one times this; 0 is 1 */
    double dmin, dmax;  /* DOUBLE: the range */
    const char *expect; /* what a good value looks like, for messages; NULL: from the type */
};

/* A table as opts_init takes it: the array, its length and its stride. */
#define OPTS_TABLE(t) (t), sizeof(t) / sizeof((t)[0]), sizeof((t)[0])

/* What was wrong with the word opts_next or opts_parse last refused, for
 * callers that word their own messages. */
enum opts_fault {
    OPTS_FAULT_NONE = 0,
    OPTS_FAULT_UNKNOWN,       /* no such option (GPO_ENOENT) */
    OPTS_FAULT_MISSING_VALUE, /* the option's value is not there (GPO_EUSAGE) */
    OPTS_FAULT_EXTRA_VALUE,   /* a value given to an option that takes none (GPO_EUSAGE) */
    OPTS_FAULT_BAD_VALUE,     /* opts_parse: a value its type refuses (GPO_EUSAGE) */
};

/* A walk over words argv[0..argc) (borrowed; pass argc - 1, argv + 1 for a
 * command's own argv). Read `i` and `word`; set the rest with opts_init. */
struct opts {
    int argc;
    char **argv;
    int i; /* the next word */
    const void *table;
    size_t n, stride;
    unsigned mask;
    bool rest;                  /* past "--": every word is positional */
    const char *word;           /* the word last read: after an error, the one at fault */
    const struct opts_opt *bad; /* opts_parse: the entry whose value was refused; NULL
                                   when the error was in the words themselves */
    enum opts_fault fault;      /* after an error: which kind */
};

void opts_init(struct opts *p, int argc, char **argv, const void *table, size_t n, size_t stride,
               unsigned mask);

enum opts_kind {
    OPTS_END = 0,  /* no words left */
    OPTS_OPTION,   /* *ret_opt and *ret_value (NULL for an option without one) */
    OPTS_ARG,      /* a positional word in *ret_value ("-" is one; so is every word after "--") */
    OPTS_DASHDASH, /* "--" itself: the words after it are argv[p->i..argc) */
};

/*
 * Reads the next word (and an option's value) of p, without converting the
 * value. Returns one of enum opts_kind with *ret_opt (the table entry) and
 * *ret_value set as it says; or GPO_ENOENT, GPO_EUSAGE with the message in
 * err ("unknown option '--jobname'", "option '--time' needs a value",
 * "option '--quiet' takes no value"). Either way p moves past the word and
 * p->word is the word read.
 */
int opts_next(struct opts *p, const struct opts_opt **ret_opt, const char **ret_value, char *err,
              size_t errlen);

/*
 * Converts `value` (borrowed; NULL for FLAG and HELP) as o's type says
 * and stores it into the member of `args` at o->offset. 0; GPO_EUSAGE with
 * "--name: expected ..., got '...'" in err, the member untouched.
 */
int opts_store(const struct opts_opt *o, const char *value, void *args, char *err, size_t errlen);

/* opts_store into `dst` itself (a member of o's type) rather than a struct. */
int opts_convert(const struct opts_opt *o, const char *value, void *dst, char *err, size_t errlen);

#define OPTS_HELP_GIVEN 1 /* opts_parse: an OPTS_HELP option was among the words */

/*
 * Reads every word of p: first all of them for their form (an unknown
 * option, a value missing or given to a flag is an error wherever it is),
 * the positional words into pos[0..*ret_npos) (pos has room for p->argc
 * words; borrowed from argv); then, unless an OPTS_HELP option was among
 * them, stores every option into `args` with opts_store, in order (the last
 * one given wins). Returns 0; OPTS_HELP_GIVEN (its member set, no value
 * converted); or the first error, with p->word the word at fault and p->bad
 * the entry whose value was refused (NULL for an error of form).
 */
int opts_parse(struct opts *p, void *args, const char **pos, size_t *ret_npos, char *err,
               size_t errlen);

/*
 * opts_parse for a command that takes no positional word (a daemon's
 * flags): the same returns, and *ret_stray the first positional word when
 * it returned 0 (NULL: none, or help given), for the caller to refuse. GPO_ENOMEM
 * when there is no room for the words (p untouched).
 */
int opts_parse_flags(struct opts *p, void *args, const char **ret_stray, char *err, size_t errlen);

/* Whether any word of argv[0..argc) spells an OPTS_HELP entry of the table
 * ("--help", "-h"), wherever it is: for commands whose help wins over every
 * other word, values and mistakes included. */
bool opts_help_asked(int argc, char **argv, const void *table, size_t n, size_t stride);

/* The option as people type it: "--name", or "-J" for a short-only one.
 * Writes into buf (len bytes) and returns it. */
const char *opts_name(const struct opts_opt *o, char *buf, size_t len);

/* The value converters, for values that come from elsewhere: 0 and *ret, or
 * GPO_EUSAGE. A whole decimal number ("-" allowed; no '+', no spaces) in
 * min..max; a size in bytes as OPTS_SIZE reads it; a finite decimal number
 * (no spaces). */
int opts_parse_int(const char *s, int64_t min, int64_t max, int64_t *ret);
int opts_parse_size(const char *s, int64_t min, int64_t max, int64_t *ret);
int opts_parse_double(const char *s, double *ret);

#endif
