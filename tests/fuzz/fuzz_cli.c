/* fuzz_cli.c: fuzz target for the CLI's argument parser (tools/edgespec/args.c, cli_parse) with a
 * table of every option kind: `run`'s own options, the backend options and the speculative
 * decoding options every model-running subcommand spreads into its table (cli.h, spec_opts.h).
 * The input is argv: words separated by NUL bytes. Invariants (an abort when broken): the result
 * is OK, HELP or ERROR; after OK every number is inside its option's range (integers also inside
 * their type), every float finite, every choice an index of its list, every string and
 * positional argument a word of the input, and the positional count inside the command's bounds;
 * the usage text prints. Each word also goes through es_vk_flags_parse (what --vk-flags reaches),
 * which must succeed or say ES_ERR_INVALID_ARGUMENT, and through the device-list parser (what
 * --device reaches). Messages go to /dev/null (cli_command.out).
 * Seeds: corpus/cli. Built with libFuzzer (-Dfuzzer=true) and with driver.c (suite 'fuzz'). */
#include "backend.h"
#include "cli.h"
#include "spec_opts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What --device reaches (es_backends_create's list): either one entry per comma, each non-empty,
 * trimmed, without a comma and a piece of the word ("host" or not), or a blank word's one default
 * entry; or ES_ERR_INVALID_ARGUMENT with a message. */
static void fail(const char *what, const char *opt);
static void check_device_list(const char *word) {
    es__device_sel sel[ES_MAX_DEVICES];
    size_t n = 99;
    const es_status s = es__device_list_parse(word, ES_BACKEND_VULKAN, sel, ES_MAX_DEVICES, &n);
    if (s != ES_OK) {
        if (s != ES_ERR_INVALID_ARGUMENT || !es_last_error()[0]) fail("device list: a failure without a message", word);
        return;
    }
    size_t commas = 0;
    for (const char *c = word; *c; c++) commas += *c == ',';
    bool blank = true;
    for (const char *c = word; *c; c++) blank = blank && (*c == ' ' || (*c >= '\t' && *c <= '\r'));
    if (blank ? n != 1 || sel[0].sel[0] || sel[0].host : n != commas + 1 || n > ES_MAX_DEVICES)
        fail("device list: entries do not match the commas", word);
    for (size_t k = 0; !blank && k < n; k++) {
        const char *e = sel[k].sel;
        const size_t len = strlen(e);
        if (!len || strchr(e, ',') || e[0] == ' ' || e[len - 1] == ' ' || !strstr(word, e) ||
            sel[k].host != (strcmp(e, "host") == 0))
            fail("device list: an entry that is not a trimmed piece of the word", word);
    }
}

#define MAX_WORDS 64

static void fail(const char *what, const char *opt) {
    fprintf(stderr, "fuzz_cli: %s (%s)\n", what, opt ? opt : "");
    abort();
}

static FILE *devnull(void) {
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    if (!f) fail("cannot open /dev/null", NULL);
    return f;
}

static bool in_input(const char *s, const char *buf, size_t size) {
    return s >= buf && s <= buf + size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_WORDS];
    int argc = 0;
    for (char *w = buf; argc < MAX_WORDS && w <= buf + size; w += strlen(w) + 1) argv[argc++] = w;
    if (size == 0) argc = 0;

    const char *model = NULL, *prompt = NULL;
    int32_t n_predict = 128, top_k = 40, last_n = 64;
    float temp = 0.8f, top_p = 0.95f;
    uint64_t seed = 0;
    bool ignore_eos = false;
    cli_backend_args be = cli_backend_defaults();
    cli_spec_args spec = cli_spec_defaults("run");
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model, "PATH", "model", 0, 0, NULL},
        {"--prompt", "-p", CLI_STR, &prompt, "TEXT", "prompt", 0, 0, NULL},
        {"--n-predict", "-n", CLI_INT, &n_predict, "N", "tokens", 0, INT32_MAX, NULL},
        {"--temp", NULL, CLI_FLOAT, &temp, "T", "temperature", 0, 1e6, NULL},
        {"--top-k", NULL, CLI_INT, &top_k, "K", "top-k", 0, INT32_MAX, NULL},
        {"--top-p", NULL, CLI_FLOAT, &top_p, "P", "top-p", 0, 1, NULL},
        {"--repeat-last-n", NULL, CLI_INT, &last_n, "N", "history", -1, INT32_MAX, NULL},
        {"--seed", "-s", CLI_U64, &seed, "N", "seed", 0, 0, NULL},
        {"--ignore-eos", NULL, CLI_FLAG, &ignore_eos, NULL, "flag", 0, 0, NULL},
        CLI_BACKEND_OPTS(be),
        CLI_SPEC_OPTS(spec),
    };
    enum { N_OPTS = CLI_N_OPTS(opts) };
    const cli_command cmd = {"run", "-m MODEL [options] [A [B]]", "fuzz", opts, N_OPTS, 0, 2, devnull()};
    const char *pos[2] = {NULL, NULL};
    int n_pos = -1;
    bool seen[N_OPTS];
    const cli_parse_result r = cli_parse(&cmd, argc, argv, pos, &n_pos, seen);
    if (r != CLI_PARSE_OK && r != CLI_PARSE_HELP && r != CLI_PARSE_ERROR) fail("unknown result", NULL);
    if (r == CLI_PARSE_OK) {
        if (n_pos < 0 || n_pos > 2) fail("positional count outside the command's bounds", NULL);
        for (int i = 0; i < n_pos; i++)
            if (!pos[i] || !in_input(pos[i], buf, size)) fail("a positional argument not from the input", NULL);
        for (int i = 0; i < N_OPTS; i++) {
            const cli_opt *o = &opts[i];
            switch (o->kind) {
            case CLI_INT: {
                const double v = (double)*(const int32_t *)o->dst;
                if (o->lo < o->hi && (v < o->lo || v > o->hi)) fail("an integer outside its range", o->name);
                break;
            }
            case CLI_FLOAT: {
                const float v = *(const float *)o->dst;
                if (!isfinite(v) || (o->lo < o->hi && ((double)v < o->lo || (double)v > o->hi)))
                    fail("a float outside its range", o->name);
                break;
            }
            case CLI_CHOICE: {
                const int v = *(const int *)o->dst;
                int n = 0;
                while (o->choices[n]) n++;
                if (v < 0 || v >= n) fail("a choice outside its list", o->name);
                break;
            }
            case CLI_STR: {
                const char *v = *(const char *const *)o->dst;
                if (seen[i] && (!v || !in_input(v, buf, size))) fail("a string not from the input", o->name);
                break;
            }
            default: break;
            }
        }
    }
    for (int i = 0; i < argc; i++) check_device_list(argv[i]);
    for (int i = 0; i < argc; i++) {
        uint32_t flags = 0xdeadbeef;
        const es_status s = es_vk_flags_parse(argv[i], &flags);
        if (s != ES_OK && (s != ES_ERR_INVALID_ARGUMENT || flags != 0xdeadbeef || !es_last_error()[0]))
            fail("es_vk_flags_parse failed without leaving flags alone and saying why", argv[i]);
    }
    if (size && data[0] == 'u') cli_usage(devnull(), &cmd);
    free(buf);
    return 0;
}
