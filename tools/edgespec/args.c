/* args.c: table-driven option parsing and usage text for the edgespec subcommands. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where parse errors go: the command's stream (a test's), else stderr. */
static FILE *err_out(const cli_command *cmd) {
    return cmd->out ? cmd->out : stderr;
}

static const cli_opt *find_opt(const cli_command *cmd, const char *word, size_t len) {
    for (int i = 0; i < cmd->n_opts; i++) {
        const cli_opt *o = &cmd->opts[i];
        if (strlen(o->name) == len && strncmp(o->name, word, len) == 0) return o;
        if (o->alias && strlen(o->alias) == len && strncmp(o->alias, word, len) == 0) return o;
    }
    return NULL;
}

static bool in_range(const cli_opt *o, double v) {
    return !(o->lo < o->hi) || (v >= o->lo && v <= o->hi);
}

/* The range as the option's kind reads: integers in full (not 2.14748e+09), floats as %g; an
 * integer option without a range of its own is bounded by its type. */
static void range_error(const cli_command *cmd, const cli_opt *o, const char *value) {
    if (o->kind == CLI_FLOAT)
        fprintf(err_out(cmd), "edgespec %s: %s %s is out of range [%g, %g]\n", cmd->name, o->name, value, o->lo, o->hi);
    else if (o->kind == CLI_U64)
        fprintf(err_out(cmd), "edgespec %s: %s %s is out of range [0, %llu]\n", cmd->name, o->name, value,
                (unsigned long long)UINT64_MAX);
    else if (o->lo < o->hi)
        fprintf(err_out(cmd), "edgespec %s: %s %s is out of range [%lld, %lld]\n", cmd->name, o->name, value,
                (long long)o->lo, (long long)o->hi);
    else
        fprintf(err_out(cmd), "edgespec %s: %s %s is out of range [%d, %d]\n", cmd->name, o->name, value, INT32_MIN,
                INT32_MAX);
}

/* A whole decimal integer (sign allowed) whose value does not fit the type: a range error, not
 * a syntax error. */
static bool integer_syntax(const char *value) {
    const char *p = value;
    if (*p == '+') p++;
    if (!*p) return false;
    for (; *p; p++)
        if (*p < '0' || *p > '9') return false;
    return true;
}

/* Stores value in o->dst; prints a message and returns false when it does not parse. */
static bool set_value(const cli_command *cmd, const cli_opt *o, const char *value) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG: *(bool *)o->dst = true; return true;
    case CLI_STR: *(const char **)o->dst = value; return true;
    case CLI_INT: {
        long long v = strtoll(value, &end, 10);
        if (end == value || *end) break;
        if (errno == ERANGE || v < INT32_MIN || v > INT32_MAX || !in_range(o, (double)v)) {
            range_error(cmd, o, value);
            return false;
        }
        *(int32_t *)o->dst = (int32_t)v;
        return true;
    }
    case CLI_U64: {
        if (value[0] == '-') break; /* strtoull would wrap it */
        unsigned long long v = strtoull(value, &end, 0);
        if (end == value || *end) break;
        if (errno == ERANGE && integer_syntax(value)) {
            range_error(cmd, o, value);
            return false;
        }
        if (errno) break;
        *(uint64_t *)o->dst = (uint64_t)v;
        return true;
    }
    case CLI_FLOAT: {
        float v = strtof(value, &end);
        if (end == value || *end) break;
        if (errno == ERANGE && isinf(v)) { /* 1e39: a number, too large for a float */
            range_error(cmd, o, value);
            return false;
        }
        if (!isfinite(v)) break; /* "inf", "nan" */
        if (!in_range(o, (double)v)) {
            range_error(cmd, o, value);
            return false;
        }
        *(float *)o->dst = v;
        return true;
    }
    case CLI_CHOICE:
        for (int i = 0; o->choices[i]; i++) {
            if (strcmp(o->choices[i], value) == 0) {
                *(int *)o->dst = i;
                return true;
            }
        }
        fprintf(err_out(cmd), "edgespec %s: %s must be one of:", cmd->name, o->name);
        for (int i = 0; o->choices[i]; i++) fprintf(err_out(cmd), " %s", o->choices[i]);
        fprintf(err_out(cmd), " (got '%s')\n", value);
        return false;
    }
    fprintf(err_out(cmd), "edgespec %s: %s expects %s, got '%s'\n", cmd->name, o->name,
            o->kind == CLI_FLOAT ? "a finite number"
            : o->kind == CLI_U64 ? "a non-negative integer"
                                 : "an integer",
            value);
    return false;
}

/* The synopsis only: the full option list shows defaults, and after a partial parse the values
 * it would show are what the command line set so far, not the defaults. */
static cli_parse_result fail(const cli_command *cmd) {
    fprintf(err_out(cmd), "usage: edgespec %s %s\nRun 'edgespec %s --help' for every option and its default.\n", cmd->name,
            cmd->synopsis, cmd->name);
    return CLI_PARSE_ERROR;
}

cli_parse_result cli_parse(const cli_command *cmd, int argc, char **argv, const char **pos, int *n_pos, bool *seen) {
    *n_pos = 0;
    if (seen)
        for (int i = 0; i < cmd->n_opts; i++) seen[i] = false;
    bool options_done = false;
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        if (!options_done && (strcmp(w, "-h") == 0 || strcmp(w, "--help") == 0)) {
            cli_usage(cmd->out ? cmd->out : stdout, cmd);
            return CLI_PARSE_HELP;
        }
        if (!options_done && strcmp(w, "--") == 0) {
            options_done = true;
            continue;
        }
        if (options_done || w[0] != '-' || w[1] == '\0') {
            if (*n_pos >= cmd->max_positional) {
                fprintf(err_out(cmd), "edgespec %s: unexpected argument '%s'\n", cmd->name, w);
                return fail(cmd);
            }
            pos[(*n_pos)++] = w;
            continue;
        }
        const char *eq = w[1] == '-' ? strchr(w, '=') : NULL;
        size_t len = eq ? (size_t)(eq - w) : strlen(w);
        const cli_opt *o = find_opt(cmd, w, len);
        if (!o) {
            fprintf(err_out(cmd), "edgespec %s: unknown option '%.*s'\n", cmd->name, (int)len, w);
            return fail(cmd);
        }
        if (seen) seen[o - cmd->opts] = true;
        if (o->kind == CLI_FLAG) {
            if (eq) {
                fprintf(err_out(cmd), "edgespec %s: %s takes no value\n", cmd->name, o->name);
                return fail(cmd);
            }
            *(bool *)o->dst = true;
            continue;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(err_out(cmd), "edgespec %s: %s needs a value (%s)\n", cmd->name, o->name, o->metavar);
                return fail(cmd);
            }
            value = argv[++i];
        }
        if (!set_value(cmd, o, value)) return fail(cmd);
    }
    if (*n_pos < cmd->min_positional) {
        fprintf(err_out(cmd), "edgespec %s: missing argument\n", cmd->name);
        return fail(cmd);
    }
    return CLI_PARSE_OK;
}

static void print_default(FILE *f, const cli_opt *o) {
    switch (o->kind) {
    case CLI_FLAG: break;
    case CLI_INT: fprintf(f, " (default %d)", (int)*(const int32_t *)o->dst); break;
    case CLI_U64: fprintf(f, " (default %llu)", (unsigned long long)*(const uint64_t *)o->dst); break;
    case CLI_FLOAT: fprintf(f, " (default %g)", (double)*(const float *)o->dst); break;
    case CLI_STR:
        if (*(const char *const *)o->dst) fprintf(f, " (default %s)", *(const char *const *)o->dst);
        break;
    case CLI_CHOICE: {
        fprintf(f, " (");
        for (int i = 0; o->choices[i]; i++) fprintf(f, "%s%s", i ? "|" : "", o->choices[i]);
        fprintf(f, "; default %s)", o->choices[*(const int *)o->dst]);
        break;
    }
    }
}

void cli_usage(FILE *f, const cli_command *cmd) {
    fprintf(f, "usage: edgespec %s %s\n", cmd->name, cmd->synopsis);
    if (cmd->summary) fprintf(f, "%s\n", cmd->summary);
    if (cmd->n_opts == 0) return;
    fprintf(f, "\noptions:\n");
    for (int i = 0; i < cmd->n_opts; i++) {
        const cli_opt *o = &cmd->opts[i];
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->name,
                 o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(f, "  %-26s %s", left, o->help);
        print_default(f, o);
        fputc('\n', f);
    }
    fprintf(f, "  %-26s %s\n", "-h, --help", "show this help");
}
