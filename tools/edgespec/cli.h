/* cli.h: what the edgespec subcommands share: the subcommand entry points, error reporting with
 * the library's message, model loading with a progress bar, and the backend/context options
 * every model-running subcommand accepts. The CLI uses only the public header, like an app. */
#ifndef EDGESPEC_CLI_H
#define EDGESPEC_CLI_H

#include "args.h"
#include "edgespec.h"

#include <stddef.h>

/* Exit statuses: 0 success, 1 a failure reported by the library or the system, 2 bad usage. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/* Subcommands: argv[0] is the subcommand's name. */
int cli_cmd_run(int argc, char **argv);
int cli_cmd_chat(int argc, char **argv);
int cli_cmd_info(int argc, char **argv);
int cli_cmd_tokenize(int argc, char **argv);
int cli_cmd_devices(int argc, char **argv);

/* Prints the backend's per-op profile (es_backend_profile) as a table on stderr (cmd_devices.c). */
void cli_print_profile(const char *cmd, const es_backend *backend);
int cli_cmd_bench(int argc, char **argv);

/* Prints "edgespec CMD: WHAT: <es_last_error()> (<status>)" to stderr and returns CLI_EXIT_FAIL. */
int cli_fail_status(const char *cmd, es_status s, const char *what);
/* Prints "edgespec CMD: <message>" to stderr and returns CLI_EXIT_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A progress bar on stderr (es_progress_fn; user = a cli_progress): redrawn in place when tty,
 * else a line per quarter. Start with last = -1. */
typedef struct cli_progress {
    const char *label;
    bool tty;
    int last; /* last drawn: percent (tty) or quarter (log) */
} cli_progress;
bool cli_progress_cb(float fraction, void *user);

int cli_cmd_quantize(int argc, char **argv);

/* Loads path with a progress bar on stderr for large files (see common.c); NULL after printing
 * the library's message. */
es_model *cli_load_model(const char *cmd, const char *path, bool vocab_only);

/* Tokenizes text (special tokens parsed) into a malloc'd array of *n ids; NULL after printing why. */
int32_t *cli_tokenize(const char *cmd, const es_model *m, const char *text, size_t len, bool add_special, size_t *n);

/* Reads a whole file into malloc'd memory (NUL-terminated; *len excludes the NUL). NULL after
 * printing why. */
char *cli_read_file(const char *cmd, const char *path, size_t *len);

/* The sampling options of the generating subcommands. The CLI's defaults are the usual
 * recommendations (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05): the library's zeroed
 * sampler params are greedy, while the demo samples unless --temp 0. */
es_sampler_params cli_sampling_defaults(void);
/* After parsing: --repeat-last-n 0 keeps llama.cpp's meaning, no penalty (the library's 0 is its
 * default window). */
void cli_sampling_finish(es_sampler_params *sp);

#define CLI_SAMPLING_OPTS(sp)                                                                      \
    {"--temp", NULL, CLI_FLOAT, &(sp).temperature, "T", "temperature, 0 = greedy", 0, 1e6, NULL},  \
    {"--top-k", NULL, CLI_INT, &(sp).top_k, "K", "keep the K most likely tokens, 0 = off", 0, INT32_MAX, NULL}, \
    {"--top-p", NULL, CLI_FLOAT, &(sp).top_p, "P", "nucleus mass in (0, 1], 1 = off", 0, 1, NULL}, \
    {"--min-p", NULL, CLI_FLOAT, &(sp).min_p, "P", "drop tokens below P times the best one's probability", 0, 1, NULL}, \
    {"--repeat-penalty", NULL, CLI_FLOAT, &(sp).repeat_penalty, "X", "penalty on recent tokens, 1 = off", 0, 1e6, NULL}, \
    {"--repeat-last-n", NULL, CLI_INT, &(sp).repeat_last_n, "N", "tokens the penalty looks back, -1 = all", -1, INT32_MAX, NULL}, \
    {"--seed", "-s", CLI_U64, &(sp).seed, "N", "random seed (sampling is reproducible per seed)", 0, 0, NULL}

/* Options of every subcommand that runs a model. */
typedef struct cli_backend_args {
    int backend;          /* index into cli_backend_names */
    const char *device;   /* Vulkan device: index, name substring or type; or a device list
                             (es_backends_create) for strategies that run on several */
    const char *vk_flags; /* Vulkan fallbacks to force: es_vk_flags_parse names; NULL = none */
    int32_t threads;      /* 0 = all online processors */
    int32_t ctx_size;     /* 0 = the model's, capped at 4096 */
    int32_t batch_size;   /* 0 = 512 */
    bool profile;         /* collect and print per-op times */
} cli_backend_args;

extern const char *const cli_backend_names[]; /* "cpu", "vulkan", NULL: es_backend_type order */

cli_backend_args cli_backend_defaults(void);

/* The table entries for cli_backend_args, to spread into a subcommand's option table. */
#define CLI_BACKEND_OPTS(a)                                                                        \
    {"--backend", NULL, CLI_CHOICE, &(a).backend, "NAME", "where the model runs", 0, 0, cli_backend_names},   \
    {"--device", NULL, CLI_STR, &(a).device, "DEV", "Vulkan device: index, name substring or type; several, comma-separated, for multi-device strategies (0,1: two devices; 0,0: two logical devices on device 0; 0,host: device 0 and the CPU backend)", 0, 0, NULL}, \
    {"--vk-flags", NULL, CLI_STR, &(a).vk_flags, "LIST", "Vulkan fallbacks to force, e.g. fallbacks or no-fp16,no-subgroup", 0, 0, NULL}, \
    {"--threads", "-t", CLI_INT, &(a).threads, "N", "CPU threads, 0 = all processors", 0, ES_MAX_THREADS, NULL},         \
    {"--ctx-size", "-c", CLI_INT, &(a).ctx_size, "N", "KV cache tokens, 0 = the model's (at most 4096)", 0, 1 << 24, NULL}, \
    {"--batch-size", "-b", CLI_INT, &(a).batch_size, "N", "most tokens per forward call, 0 = 512", 0, 1 << 20, NULL}, \
    {"--profile", NULL, CLI_FLAG, &(a).profile, NULL, "print per-op device times at the end", 0, 0, NULL}

/* The devices of a --device list after the first (the run's own backend): the others a
 * multi-device strategy runs on. */
typedef struct cli_devices {
    es_backend *b[ES_MAX_DEVICES];
    int32_t n;
} cli_devices;
void cli_devices_free(cli_devices *d);

/* Creates the backend and a context for model; on failure prints why, frees what it made and
 * returns CLI_EXIT_FAIL. A --device list makes one backend per entry: the context goes on the
 * first, the others into *more (more NULL: a list of several is an error, the command runs on
 * one device). */
int cli_open_context(const char *cmd, const cli_backend_args *a, const es_model *model, es_backend **backend,
                     es_context **ctx, cli_devices *more);

#endif /* EDGESPEC_CLI_H */
