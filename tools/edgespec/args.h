/* args.h: the CLI's command-line parsing: each subcommand declares a table of options (name,
 * alias, kind, destination, range, help) and cli_parse fills the destinations, checks numbers
 * strictly (whole string, range) and collects positional arguments. Usage text is generated from
 * the same table, so an option added to a table is parsed and documented at once.
 * Deliberately no global state and no abbreviations of long names. */
#ifndef EDGESPEC_CLI_ARGS_H
#define EDGESPEC_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_FLAG,   /* bool *: set to true, takes no value            */
    CLI_INT,    /* int32_t *                                      */
    CLI_U64,    /* uint64_t *                                     */
    CLI_FLOAT,  /* float *                                        */
    CLI_STR,    /* const char **: points into argv                */
    CLI_CHOICE, /* int *: index into choices (NULL-terminated)    */
} cli_kind;

typedef struct cli_opt {
    const char *name;     /* "--temp"                                            */
    const char *alias;    /* "-t" or NULL                                        */
    cli_kind kind;
    void *dst;
    const char *metavar;  /* "N", "PATH"; NULL for flags                         */
    const char *help;     /* one line; the default is appended from dst's value  */
    double lo, hi;        /* inclusive range for numbers; checked when lo < hi   */
    const char *const *choices; /* CLI_CHOICE only                               */
} cli_opt;

typedef struct cli_command {
    const char *name;      /* "run"                                              */
    const char *synopsis;  /* "-m MODEL -p PROMPT [options]"                     */
    const char *summary;   /* one line for `edgespec help`                       */
    const cli_opt *opts;
    int n_opts;
    int min_positional, max_positional;
    FILE *out;             /* parse errors and --help; NULL = stderr and stdout (tests: /dev/null) */
} cli_command;

typedef enum cli_parse_result {
    CLI_PARSE_OK = 0,
    CLI_PARSE_HELP = 1,  /* -h/--help: usage went to stdout; exit 0             */
    CLI_PARSE_ERROR = 2, /* message and usage went to stderr; exit 2            */
} cli_parse_result;

/* Parses argv[0..argc) (the words after the subcommand name). Options may come in any order,
 * as "--name value", "--name=value" or "-a value"; "--" ends options. Positional arguments go to
 * pos[0..*n_pos). Unknown options, missing or malformed values, out-of-range numbers and wrong
 * positional counts are errors. seen (may be NULL) gets, per option, whether it was given. */
cli_parse_result cli_parse(const cli_command *cmd, int argc, char **argv, const char **pos, int *n_pos, bool *seen);

/* Prints "usage: edgespec NAME SYNOPSIS" and the option table with current (default) values. */
void cli_usage(FILE *f, const cli_command *cmd);

#define CLI_N_OPTS(table) ((int)(sizeof(table) / sizeof((table)[0])))

#endif /* EDGESPEC_CLI_ARGS_H */
