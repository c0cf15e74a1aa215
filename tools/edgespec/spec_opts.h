/* spec_opts.h: the speculative-decoding options of `edgespec run` and `edgespec chat` (--spec
 * stream|draft|dsi and their parameters), the speculation object they make, and its statistics
 * on stderr. */
#ifndef EDGESPEC_CLI_SPEC_OPTS_H
#define EDGESPEC_CLI_SPEC_OPTS_H

#include "cli.h"

typedef struct cli_spec_args {
    const char *cmd;         /* the subcommand, for messages                        */
    int spec;                /* index into cli_spec_names: 0 none, 1 stream, 2 draft, 3 dsi, 4 alspec */
    int32_t gamma;           /* streams that draft; 0 = the adapter's              */
    int32_t topk;            /* tokens drafted per stream; 0 = the library's        */
    int32_t max_nodes;       /* tree nodes per target call; 0 = the library's       */
    float prune;             /* tree-pruning threshold, 0 = off, -1 = from costs    */
    const char *ss;          /* adapter path; NULL = X.ss.gguf beside X.gguf        */
    const char *draft_model; /* -md                                                */
    int32_t lookahead;       /* 0 = the library's                                  */
    bool rejection;
    bool fixed_tree;
    int32_t targets;         /* dsi: target servers; 0 = the library's (measured)   */
    float lambda;            /* alspec: the check's threshold; 0 = exact            */
    int32_t chunk;           /* alspec: KV positions per chunk; 0 = the library's    */
} cli_spec_args;

extern const char *const cli_spec_names[];

cli_spec_args cli_spec_defaults(const char *cmd);

#define CLI_SPEC_OPTS(a)                                                                                           \
    {"--spec", NULL, CLI_CHOICE, &(a).spec, "KIND", "speculative decoding: none, stream (Speculative Streaming), draft (draft model), dsi (distributed speculative inference: a draft model, or without -md the adapter's streams, drafts while target servers verify on threads) or alspec (attention-level speculation, run only; approximate when --lambda > 0)", 0, 0, cli_spec_names}, \
    {"--gamma", NULL, CLI_INT, &(a).gamma, "G", "stream, dsi without -md: speculative streams that draft, 0 = the adapter's", 0, ES_SPEC_MAX_DEPTH, NULL}, \
    {"--topk", NULL, CLI_INT, &(a).topk, "K", "stream: tokens drafted per stream, 0 = the library's default", 0, 64, NULL}, \
    {"--max-nodes", NULL, CLI_INT, &(a).max_nodes, "N", "most draft-tree nodes per target call, 0 = the library's default", 0, 4096, NULL}, \
    {"--prune", NULL, CLI_FLOAT, &(a).prune, "T", "stream: tree-pruning threshold, 0 = off, -1 = chosen from the costs measured while decoding (adaptive trees; off with --fixed-tree)", -1, 1, NULL},            \
    {"--ss", NULL, CLI_STR, &(a).ss, "PATH", "stream, dsi without -md: adapter GGUF (default: MODEL's X.gguf -> X.ss.gguf)", 0, 0, NULL}, \
    {"--draft-model", "-md", CLI_STR, &(a).draft_model, "PATH", "draft, dsi: the draft model (same vocabulary)", 0, 0, NULL}, \
    {"--lookahead", NULL, CLI_INT, &(a).lookahead, "K", "draft: tokens drafted per step; dsi: drafts per verification block; 0 = the library's default", 0, ES_SPEC_MAX_DEPTH, NULL}, \
    {"--targets", NULL, CLI_INT, &(a).targets, "N", "dsi: target servers verifying at once, 0 = from measured latencies", 0, ES_DSI_MAX_TARGETS, NULL}, \
    {"--rejection", NULL, CLI_FLAG, &(a).rejection, NULL, "sampling: rejection sampling (same distribution, other tokens) instead of the seeded exact mode", 0, 0, NULL}, \
    {"--lambda", NULL, CLI_FLOAT, &(a).lambda, "L", "alspec: a layer goes on with its speculation when ||spec - A|| < L ||A||; 0 = exact", 0, 1e6, NULL}, \
    {"--chunk", NULL, CLI_INT, &(a).chunk, "S", "alspec: KV positions per chunk (a multiple of 64 on the CPU, 256 on Vulkan), 0 = 256", 0, 1 << 20, NULL}, \
    {"--fixed-tree", NULL, CLI_FLAG, &(a).fixed_tree, NULL, "draft up to the limits every step instead of sizing drafts to measured costs and acceptance", 0, 0, NULL}

/* Attaches what --spec needs to the model before any context exists (the stream adapter).
 * Returns CLI_EXIT_OK or a failure already reported. */
int cli_spec_prepare(const cli_spec_args *s, const char *model_path, es_model *model);

/* What a speculative run holds: the draft model and its context (--spec draft, dsi), the
 * backends DSI's drafter and servers run on, the object. */
typedef struct cli_spec {
    es_model *dmodel;
    es_context *dctx;
    es_backend *dbackend;  /* dsi: the drafter's own backend                                   */
    es_backend *sbackend;  /* dsi on Vulkan: the servers' beyond the first (CPU: the library's) */
    es_spec *spec;
} cli_spec;

/* Makes the speculation object on ctx (on backend, made from be) with the run's sampling; more
 * (may be NULL) holds the other devices of a --device list, where DSI's servers then run.
 * CLI_EXIT_OK or a failure already reported (out then holds nothing). */
int cli_spec_open(const cli_spec_args *a, const cli_backend_args *be, es_backend *backend, es_context *ctx,
                  const cli_devices *more, const es_sampler_params *sp, bool ignore_eos, cli_spec *out);
/* The run's statistics on stderr. */
void cli_spec_report(const cli_spec_args *a, const cli_spec *c, const char *backend_name);
void cli_spec_close(cli_spec *c);

/* --spec alspec (alspec_run.c): decodes up to n_predict tokens (0 = until the context is full)
 * after the prompt with es_alspec, text on stdout, hit rates on stderr. A --device list of two
 * (more holds the second) runs Algorithm 2 over both (es_alspec_create_pair). */
int cli_alspec_run(const cli_spec_args *a, const es_sampler_params *sp, const es_model *model, es_context *ctx,
                   const cli_devices *more, const int32_t *prompt, size_t n_prompt, int32_t n_predict, bool ignore_eos,
                   const char *where);

#endif /* EDGESPEC_CLI_SPEC_OPTS_H */
