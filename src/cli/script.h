/*
 * script.h - the directive block of a batch script, as sbatch reads it.
 *
 * The block is the script's first lines up to its first command: blank
 * lines and comments ('#' after optional spaces; the "#!" line is one) go
 * on, anything else ends it. In the block, a line that begins "#SBATCH" or
 * "#GPUORCH" (at its first column, then a space or the end of the line) is
 * a directive; its words are split as a shell would (spaces separate;
 * '...' and "..." quote, with \" and \\ inside double quotes; a backslash
 * outside quotes escapes the next character; an unquoted '#' at the start
 * of a word begins a comment). Directive lines after the block are listed
 * too, since sbatch ignores them silently and users should hear about it.
 *
 * What the words mean is the caller's business (submit.h).
 *
 * Ownership: a struct script_header owns its arrays and words;
 * script_header_release frees them. Errors: 0 or GPO_EUSAGE / GPO_ENOMEM
 * (cli.h), with "line N: ..." in the caller's buffer.
 */
#ifndef GPUORCH_CLI_SCRIPT_H
#define GPUORCH_CLI_SCRIPT_H

#include <stddef.h>

#define SCRIPT_WORDS_MAX      64   /* words of one directive */
#define SCRIPT_DIRECTIVES_MAX 1000 /* directive lines in one script */

enum script_prefix {
    SCRIPT_SBATCH,
    SCRIPT_GPUORCH,
};

/* One directive line. */
struct script_directive {
    enum script_prefix prefix;
    long line;    /* from 1 */
    char **words; /* NULL-terminated; the prefix is not among them */
    size_t nwords;
};

struct script_header {
    struct script_directive *directives; /* in line order */
    size_t n;
    long *late; /* lines of directives after the first command (ignored) */
    size_t nlate;
    long first_command; /* the line that ended the block; 0: none */
};

/* The name of a prefix as written: "#SBATCH", "#GPUORCH". */
const char *script_prefix_name(enum script_prefix p);

/*
 * Reads the directive block of text[0..len) (borrowed). 0 and *ret (release
 * with script_header_release); GPO_EUSAGE for a directive with an
 * unterminated quote or more than SCRIPT_WORDS_MAX words, more than
 * SCRIPT_DIRECTIVES_MAX directives, or a NUL byte in a directive;
 * GPO_ENOMEM. On error *ret is untouched.
 */
int script_header_parse(const char *text, size_t len, struct script_header *ret, char *err,
                        size_t errlen);

/* Frees what h holds and empties it; NULL is fine. */
void script_header_release(struct script_header *h);

#endif
