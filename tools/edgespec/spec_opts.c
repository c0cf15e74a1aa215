/* spec_opts.c: `edgespec run --spec stream|draft`: loads the Speculative Streaming adapter or the
 * draft model, drives an es_spec object step by step and prints exactly the text the plain run
 * prints (the same tokens, as the library guarantees, through the same piece rendering and the
 * same stopping rules), then the run's statistics on stderr: target calls, tokens per call
 * (the call-reduction ratio), acceptance per depth, mean tree size, wall time.
 * Deliberately not here: the plain run (cmd_run.c), option parsing (args.c). */
#include "spec_opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const cli_spec_names[] = {"none", "stream", "draft", NULL};

cli_spec_args cli_spec_defaults(void) {
    cli_spec_args a;
    memset(&a, 0, sizeof a);
    a.topk = 2;
    a.max_nodes = 32;
    a.lookahead = 4;
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

int cli_spec_prepare(const cli_spec_args *s, const char *model_path, es_model *model) {
    if (s->spec != 1) return CLI_EXIT_OK;
    char *path = s->ss ? NULL : default_adapter_path(model_path);
    const char *p = s->ss ? s->ss : path;
    if (!p) return cli_fail("run", "out of memory");
    es_status st = es_model_load_adapter(model, p);
    int rc = CLI_EXIT_OK;
    if (st != ES_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot attach the Speculative Streaming adapter%s", s->ss ? "" : " (give one with --ss)");
        fprintf(stderr, "edgespec run: %s: %s (%s)\n", what, es_model_errmsg(model), es_status_str(st));
        rc = CLI_EXIT_FAIL;
    }
    free(path);
    return rc;
}

typedef struct out_state {
    char *piece;
    size_t cap;
    size_t bytes;
    int write_errno;
} out_state;

/* Prints one token's text as es_generate's callback receives it. */
static int emit(out_state *o, const es_model *m, int32_t tok) {
    size_t len = 0;
    es_status s = es_token_to_piece(m, tok, false, o->piece, o->cap, &len);
    if (s == ES_ERR_BUFFER_TOO_SMALL) {
        char *grown = realloc(o->piece, len);
        if (!grown) return cli_fail("run", "out of memory for a %zu-byte piece", len);
        o->piece = grown;
        o->cap = len;
        s = es_token_to_piece(m, tok, false, o->piece, o->cap, &len);
    }
    if (s != ES_OK) return cli_fail_status("run", s, "cannot render a token");
    if (len > 0 && fwrite(o->piece, 1, len, stdout) != len) o->write_errno = errno ? errno : EIO;
    if (!o->write_errno && fflush(stdout) != 0) o->write_errno = errno ? errno : EIO;
    o->bytes += len;
    return CLI_EXIT_OK;
}

static void print_stats(const cli_spec_args *a, const cli_spec_run *r, const es_spec_stats *st, const es_spec *spec) {
    (void)spec;
    const double tps = st->decode_ms > 0 ? (double)st->n_generated * 1e3 / st->decode_ms : 0.0;
    if (a->spec == 1)
        fprintf(stderr, "edgespec run: speculative streaming, gamma %s%d, top-k %d, max nodes %d%s, prune %g%s\n",
                a->gamma ? "" : "(adapter's) ", a->gamma, a->topk, a->max_nodes, a->fixed_tree ? " (fixed)" : "",
                (double)a->prune, a->rejection && r->sp.temperature > 0 ? ", rejection sampling" : "");
    else
        fprintf(stderr, "edgespec run: draft-model speculation, draft %s, lookahead %d%s%s\n", a->draft_model,
                a->lookahead, a->fixed_tree ? " (fixed)" : "", a->rejection && r->sp.temperature > 0 ? ", rejection sampling" : "");
    fprintf(stderr,
            "edgespec run: prompt %lld tokens in %.1f ms, decode %lld tokens in %.1f ms (%.1f tokens/s), backend %s\n",
            (long long)st->n_prompt, st->prompt_ms, (long long)st->n_generated, st->decode_ms, tps, r->backend_name);
    fprintf(stderr,
            "edgespec run: target calls %lld, tokens per call %.2f (call reduction %.2fx), draft calls %lld, "
            "mean tree %.1f nodes (%lld pruned), time target %.1f ms, draft %.1f ms, other %.1f ms\n",
            (long long)st->n_target_calls, st->tokens_per_call, st->tokens_per_call, (long long)st->n_draft_calls,
            st->mean_tree_size, (long long)st->n_pruned, st->target_ms, st->draft_ms,
            st->decode_ms - st->target_ms - st->draft_ms);
    fprintf(stderr, "edgespec run: acceptance per depth:");
    for (int d = 0; d < ES_SPEC_MAX_DEPTH && st->drafted[d] > 0; d++)
        fprintf(stderr, " %d:%.2f", d + 1, (double)st->accepted[d] / (double)st->drafted[d]);
    fputc('\n', stderr);
}

/* The decode loop: steps until n_predict tokens, an end-of-generation token or a full context,
 * printing what es_generate would print. */
static int decode(const cli_spec_run *r, es_spec *spec, out_state *o) {
    const es_model *m = es_context_model(r->ctx);
    int32_t n = 0, buf[ES_SPEC_MAX_DEPTH + 1];
    for (;;) {
        size_t cap = ES_SPEC_MAX_DEPTH + 1, got = 0;
        if (r->n_predict > 0) cap = (size_t)(r->n_predict - n) < cap ? (size_t)(r->n_predict - n) : cap;
        if (cap == 0) return CLI_EXIT_OK;
        es_status s = es_spec_step(spec, buf, cap, &got);
        if (s == ES_ERR_CONTEXT_FULL) return CLI_EXIT_OK; /* es_generate stops there too */
        if (s != ES_OK) {
            fprintf(stderr, "edgespec run: speculative step failed: %s (%s)\n", es_spec_errmsg(spec), es_status_str(s));
            return CLI_EXIT_FAIL;
        }
        for (size_t i = 0; i < got; i++) {
            if (!r->ignore_eos && es_token_is_eog(m, buf[i])) return CLI_EXIT_OK;
            if (emit(o, m, buf[i]) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
            if (o->write_errno) return CLI_EXIT_OK;
            n++;
        }
    }
}

int cli_spec_generate(const cli_spec_args *a, const cli_spec_run *r) {
    es_model *dmodel = NULL;
    es_context *dctx = NULL;
    es_spec *spec = NULL;
    int rc = CLI_EXIT_FAIL;
    if (a->spec == 2) {
        if (!a->draft_model) return cli_fail("run", "--spec draft needs a draft model: -md PATH");
        dmodel = cli_load_model("run", a->draft_model, false);
        if (!dmodel) return CLI_EXIT_FAIL;
        es_context_params cp = es_context_default_params();
        cp.backend = r->backend;
        cp.n_ctx = es_context_n_ctx(r->ctx);
        es_status s = es_context_create(dmodel, &cp, &dctx);
        if (s != ES_OK) {
            cli_fail_status("run", s, "cannot create the draft model's context");
            es_model_free(dmodel);
            return CLI_EXIT_FAIL;
        }
    }
    es_spec_params p = es_spec_default_params();
    p.strategy = a->spec == 1 ? ES_SPEC_STREAM : ES_SPEC_DRAFT;
    p.sampling = r->sp;
    p.rejection_sampling = a->rejection;
    p.n_streams = a->gamma;
    p.top_k = a->topk;
    p.max_nodes = a->max_nodes;
    p.prune_threshold = a->prune;
    p.draft_ctx = dctx;
    p.lookahead = a->lookahead;
    p.ignore_eog = r->ignore_eos;
    p.fixed_tree = a->fixed_tree;
    out_state o = {malloc(256), 256, 0, 0};
    es_status s = o.piece ? es_spec_create(r->ctx, &p, &spec) : ES_ERR_OUT_OF_MEMORY;
    if (s != ES_OK) {
        cli_fail_status("run", s, "cannot set up speculative decoding");
    } else if ((s = es_spec_feed(spec, r->prompt, r->n_prompt)) != ES_OK) {
        fprintf(stderr, "edgespec run: the prompt failed: %s (%s)\n", es_spec_errmsg(spec), es_status_str(s));
    } else {
        rc = decode(r, spec, &o);
        if (isatty(STDOUT_FILENO) && o.bytes > 0) fputc('\n', stderr);
        if (rc == CLI_EXIT_OK && o.write_errno) rc = cli_fail("run", "writing the output: %s", strerror(o.write_errno));
        es_spec_stats st;
        if (rc == CLI_EXIT_OK && es_spec_get_stats(spec, &st) == ES_OK) print_stats(a, r, &st, spec);
    }
    es_spec_free(spec);
    es_context_free(dctx);
    es_model_free(dmodel);
    free(o.piece);
    return rc;
}
