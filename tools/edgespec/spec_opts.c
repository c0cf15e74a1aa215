/* spec_opts.c: `edgespec run --spec stream|draft|dsi`: attaches the Speculative Streaming adapter
 * or loads the draft model, makes the speculation object, and prints its statistics on stderr:
 * target calls, tokens per call (the call-reduction ratio), acceptance per depth, mean tree size,
 * wall time; DSI adds its servers' utilisation and the work preempted. The text goes through
 * cmd_run.c's one output path (es_spec_generate hands out what es_generate would).
 * Deliberately not here: the generation loop (the library's), option parsing (args.c). */
#include "spec_opts.h"

#include <stdlib.h>
#include <string.h>

const char *const cli_spec_names[] = {"none", "stream", "draft", "dsi", "alspec", NULL};

cli_spec_args cli_spec_defaults(const char *cmd) {
    cli_spec_args a;
    memset(&a, 0, sizeof a); /* 0: the library's default for each (es_spec_get_params says which) */
    a.cmd = cmd;
    a.prune = -1.0f; /* the library's default; 0 is the user's "off" */
    return a;
}

/* X.gguf -> X.ss.gguf (anything else: X -> X.ss.gguf), malloc'd. */
static char *default_adapter_path(const char *model_path) {
    size_t n = strlen(model_path);
    const char *ext = ".gguf";
    size_t keep = n >= 5 && strcmp(model_path + n - 5, ext) == 0 ? n - 5 : n;
    char *p = malloc(keep + 9);
    if (!p) return NULL;
    memcpy(p, model_path, keep);
    memcpy(p + keep, ".ss.gguf", 9);
    return p;
}

/* The adapter: --spec stream, and --spec dsi without a draft model (the streams draft). */
int cli_spec_prepare(const cli_spec_args *s, const char *model_path, es_model *model) {
    if (s->spec != 1 && !(s->spec == 3 && !s->draft_model)) return CLI_EXIT_OK;
    char *path = s->ss ? NULL : default_adapter_path(model_path);
    const char *p = s->ss ? s->ss : path;
    if (!p) return cli_fail(s->cmd, "out of memory");
    es_status st = es_model_load_adapter(model, p);
    int rc = CLI_EXIT_OK;
    if (st != ES_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot attach the Speculative Streaming adapter%s%s", s->ss ? "" : " (give one with --ss)",
                 s->spec == 3 ? "; --spec dsi drafts with the adapter's streams unless a draft model is given with -md" : "");
        fprintf(stderr, "edgespec %s: %s: %s (%s)\n", s->cmd, what, es_model_errmsg(model), es_status_str(st));
        rc = CLI_EXIT_FAIL;
    }
    free(path);
    return rc;
}

static double percent(double part, double whole) {
    return whole > 0 ? 100.0 * part / whole : 0.0;
}

/* DSI's workers: how busy each was while they ran, and how much of that was preempted work. */
static void print_dsi(const char *cmd, const es_dsi_stats *d) {
    if (d->target_call_ms > 0)
        fprintf(stderr, "edgespec %s: DSI measured a target call at %.3f ms, a draft call at %.3f ms\n", cmd,
                d->target_call_ms, d->draft_call_ms);
    fprintf(stderr,
            "edgespec %s: DSI jobs %lld, preempted %lld (%.0f%%), draft calls %lld, dropped %lld, drafts cut unverified "
            "%lld, workers ran %.1f ms\n",
            cmd, (long long)d->n_jobs, (long long)d->n_jobs_preempted, percent((double)d->n_jobs_preempted, (double)d->n_jobs),
            (long long)d->n_draft_calls, (long long)d->n_drafts_dropped, (long long)d->n_drafts_cut, d->active_ms);
    fprintf(stderr, "edgespec %s: DSI utilisation (busy, of which preempted): drafter %.0f%% (%.0f%%)", cmd,
            percent(d->draft_busy_ms, d->active_ms), percent(d->draft_preempted_ms, d->active_ms));
    for (int32_t i = 0; i < d->n_targets && i < ES_DSI_MAX_TARGETS; i++)
        fprintf(stderr, ", server %d %.0f%% (%.0f%%)", i, percent(d->server_busy_ms[i], d->active_ms),
                percent(d->server_preempted_ms[i], d->active_ms));
    fputc('\n', stderr);
}

/* What adaptive trees measured: the calibration in the first steps and the costs they decide from. */
static void print_costs(const char *cmd, const es_spec *spec) {
    es_spec_costs k;
    if (es_spec_get_costs(spec, &k) != ES_OK || !k.adaptive) return;
    if (k.calib_plain_ms > 0)
        fprintf(stderr,
                "edgespec %s: calibrated on decoding calls: plain call %.3f ms, 1 node %.3f ms, %d nodes %.3f ms, stream "
                "pass of %d streams %.3f ms, drafter call %.3f ms\n",
                cmd, k.calib_plain_ms, k.calib_one_ms, k.calib_n_hi, k.calib_hi_ms, k.calib_g_hi, k.calib_pass_hi_ms,
                k.calib_draft_ms);
    if (k.fitted)
        fprintf(stderr,
                "edgespec %s: costs in plain calls (%.3f ms): node %.3f, stream pass 1 / %d streams %.3f / %.3f, drafter "
                "call %.3f; explorations every %d calls\n",
                cmd, k.call_ms, k.node, k.max_streams, k.stream_pass_1, k.stream_pass_max, k.draft_call, k.explore_every);
    if (k.prune_call <= 0 && k.prune_node <= 0 && k.prune_threshold > 0)
        fprintf(stderr, "edgespec %s: pruning: last threshold %g\n", cmd, k.prune_threshold);
    else if (k.prune_call > 0 || k.prune_node > 0)
        fprintf(stderr,
                "edgespec %s: pruning: last threshold %g; in plain calls, a pruning call adds %.3f, a pruned node "
                "saves %.3f\n",
                cmd, k.prune_threshold, k.prune_call, k.prune_node);
}

static void print_stats(const cli_spec_args *a, const cli_spec *c, const char *backend_name) {
    es_spec_params p;
    es_spec_stats st;
    if (es_spec_get_params(c->spec, &p) != ES_OK || es_spec_get_stats(c->spec, &st) != ES_OK) return;
    const double tps = st.decode_ms > 0 ? (double)st.n_generated * 1e3 / st.decode_ms : 0.0;
    const bool rejection = p.rejection_sampling && p.sampling.temperature > 0;
    char prune[32] = "off";
    if (p.prune_threshold > 0.0f) snprintf(prune, sizeof prune, "%g", (double)p.prune_threshold);
    else if (p.prune_threshold == 0.0f && !p.fixed_tree) snprintf(prune, sizeof prune, "from costs");
    if (p.strategy == ES_SPEC_STREAM)
        fprintf(stderr, "edgespec %s: speculative streaming, gamma %s%d, top-k %d, max nodes %d%s, prune %s%s\n", a->cmd,
                a->gamma ? "" : "(adapter's) ", p.n_streams, p.top_k, p.max_nodes, p.fixed_tree ? " (fixed)" : "", prune,
                rejection ? ", rejection sampling" : "");
    else if (p.strategy == ES_SPEC_DSI) {
        char drafter[600];
        if (a->draft_model) snprintf(drafter, sizeof drafter, "draft %s", a->draft_model);
        else snprintf(drafter, sizeof drafter, "drafted by the target's %d streams", p.n_streams);
        fprintf(stderr, "edgespec %s: DSI, %s, lookahead %d, %d target servers%s%s\n", a->cmd, drafter, p.lookahead,
                p.dsi.n_targets, a->targets ? "" : " (from measured latencies)", rejection ? ", rejection sampling" : "");
    }
    else
        fprintf(stderr, "edgespec %s: draft-model speculation, draft %s, lookahead %d%s%s\n", a->cmd, a->draft_model,
                p.lookahead, p.fixed_tree ? " (fixed)" : "", rejection ? ", rejection sampling" : "");
    fprintf(stderr,
            "edgespec %s: prompt %lld tokens in %.1f ms, decode %lld tokens in %.1f ms (%.1f tokens/s), backend %s\n", a->cmd,
            (long long)st.n_prompt, st.prompt_ms, (long long)st.n_generated, st.decode_ms, tps, backend_name);
    /* DSI's calls overlap each other and the steps: their times are sums, with no remainder */
    char other[64] = " (concurrent)";
    if (p.strategy != ES_SPEC_DSI) snprintf(other, sizeof other, ", other %.1f ms", st.decode_ms - st.target_ms - st.draft_ms);
    fprintf(stderr,
            "edgespec %s: target calls %lld, tokens per call %.2f (call reduction %.2fx), draft calls %lld, "
            "mean tree %.1f nodes (%lld pruned), time target %.1f ms, draft %.1f ms%s\n",
            a->cmd, (long long)st.n_target_calls, st.tokens_per_call, st.tokens_per_call, (long long)st.n_draft_calls,
            st.mean_tree_size, (long long)st.n_pruned, st.target_ms, st.draft_ms, other);
    fprintf(stderr, "edgespec %s: acceptance per depth:", a->cmd);
    for (int d = 0; d < ES_SPEC_MAX_DEPTH && st.drafted[d] > 0; d++)
        fprintf(stderr, " %d:%.2f", d + 1, (double)st.accepted[d] / (double)st.drafted[d]);
    fputc('\n', stderr);
    if (p.strategy == ES_SPEC_DSI) print_dsi(a->cmd, &st.dsi);
    print_costs(a->cmd, c->spec);
}

void cli_spec_close(cli_spec *c) {
    es_spec_free(c->spec);
    es_context_free(c->dctx);
    es_model_free(c->dmodel);
    es_backend_free(c->dbackend);
    es_backend_free(c->sbackend);
    memset(c, 0, sizeof *c);
}

/* DSI runs its drafter and servers at the same time: another backend like the run's (the same
 * device and flags on Vulkan, so that every server gives the same bits), one thread on the CPU. */
static es_status another_backend(const cli_backend_args *be, es_backend **out) {
    es_backend_params bp = es_backend_default_params();
    es_status s = es_vk_flags_parse(be->vk_flags, &bp.vk_flags);
    if (s != ES_OK) return s;
    bp.type = be->backend == 1 ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    bp.n_threads = 1;
    /* a --device list: the drafter goes with the run's backend, the list's first device */
    char first[64] = "";
    if (be->device) snprintf(first, sizeof first, "%.*s", (int)strcspn(be->device, ","), be->device);
    bp.device = first;
    if (strcmp(first, "host") == 0) {
        bp.type = ES_BACKEND_CPU;
        bp.device = NULL;
    }
    return es_backend_create(&bp, out);
}

int cli_spec_open(const cli_spec_args *a, const cli_backend_args *be, es_backend *backend, es_context *ctx,
                  const cli_devices *more, const es_sampler_params *sp, bool ignore_eos, cli_spec *out) {
    memset(out, 0, sizeof *out);
    if (a->spec == 4) return cli_fail(a->cmd, "--spec alspec decodes in `edgespec run` only");
    const bool dsi = a->spec == 3;
    if (a->spec == 2 && !a->draft_model) return cli_fail(a->cmd, "--spec draft needs a draft model: -md PATH");
    es_status s = ES_OK;
    const bool listed = more && more->n > 0; /* the servers go on the other devices */
    if (dsi && a->draft_model) s = another_backend(be, &out->dbackend);
    if (s == ES_OK && dsi && be->backend == 1 && !listed) s = another_backend(be, &out->sbackend);
    if (s != ES_OK) {
        cli_spec_close(out);
        return cli_fail_status(a->cmd, s, "cannot create a backend for DSI's workers");
    }
    if ((a->spec == 2 || dsi) && a->draft_model) { /* without one, dsi drafts with the streams */
        out->dmodel = cli_load_model(a->cmd, a->draft_model, false);
        if (!out->dmodel) {
            cli_spec_close(out);
            return CLI_EXIT_FAIL;
        }
        es_context_params cp = es_context_default_params();
        cp.backend = dsi ? out->dbackend : backend;
        cp.n_ctx = es_context_n_ctx(ctx);
        s = es_context_create(out->dmodel, &cp, &out->dctx);
        if (s != ES_OK) {
            cli_spec_close(out);
            return cli_fail_status(a->cmd, s, "cannot create the draft model's context");
        }
    }
    es_spec_params p = es_spec_default_params();
    p.strategy = a->spec == 1 ? ES_SPEC_STREAM : dsi ? ES_SPEC_DSI : ES_SPEC_DRAFT;
    p.sampling = *sp;
    p.rejection_sampling = a->rejection;
    p.n_streams = a->gamma;
    p.top_k = a->topk;
    p.max_nodes = a->max_nodes;
    p.prune_threshold = a->prune < 0.0f ? 0.0f : a->prune == 0.0f ? -1.0f : a->prune;
    p.draft_ctx = out->dctx;
    p.lookahead = a->lookahead;
    p.ignore_eog = ignore_eos;
    p.fixed_tree = a->fixed_tree;
    p.dsi.n_targets = a->targets;
    if (more && more->n > 0) {
        p.dsi.backends = more->b;
        p.dsi.n_backends = more->n;
    } else if (out->sbackend) {
        p.dsi.backends = &out->sbackend;
        p.dsi.n_backends = 1;
    }
    s = es_spec_create(ctx, &p, &out->spec);
    if (s != ES_OK) {
        cli_spec_close(out);
        return cli_fail_status(a->cmd, s, "cannot set up speculative decoding");
    }
    return CLI_EXIT_OK;
}

void cli_spec_report(const cli_spec_args *a, const cli_spec *c, const char *backend_name) {
    print_stats(a, c, backend_name);
}
