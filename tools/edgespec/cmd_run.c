/* cmd_run.c: `edgespec run`: generate a continuation of a prompt. Only the generated text goes
 * to stdout, streamed token by token; a stats line (prompt and decode tokens/s) ends stderr. */
#include "cli.h"
#include "spec_opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct run_args {
    const char *model;
    const char *prompt;
    const char *file;
    int32_t n_predict;
    bool ignore_eos;
    bool no_bos;
    es_sampler_params sp;
    cli_backend_args be;
    cli_spec_args spec;
    const char *stop;     /* a stop string, or NULL */
    float max_ms;         /* generation's time budget; 0 = none */
    bool shift;           /* a full context drops its older half and goes on */
    int32_t n_keep;       /* tokens a shift keeps at the start */
} run_args;

typedef struct run_sink {
    int write_errno; /* nonzero once stdout failed */
    size_t bytes;
} run_sink;

static bool on_token(int32_t token, const char *piece, size_t len, void *user) {
    (void)token;
    run_sink *o = user;
    if (len > 0 && fwrite(piece, 1, len, stdout) != len) o->write_errno = errno ? errno : EIO;
    if (!o->write_errno && fflush(stdout) != 0) o->write_errno = errno ? errno : EIO;
    o->bytes += len;
    return o->write_errno == 0; /* a closed pipe stops generation instead of raising SIGPIPE */
}

static double per_second(int32_t n, double ms) {
    return ms > 0 ? (double)n * 1e3 / ms : 0.0;
}

static void print_plain_stats(const es_generate_stats *st, const char *where) {
    fprintf(stderr,
            "edgespec run: prompt %d tokens in %.1f ms (%.1f tokens/s), decode %d tokens in %.1f ms "
            "(%.1f tokens/s), backend %s\n",
            st->n_prompt, st->prompt_ms, per_second(st->n_prompt, st->prompt_ms), st->n_generated, st->decode_ms,
            per_second(st->n_generated, st->decode_ms), where);
}

/* One output path for plain and speculative runs: the same parameters and the same on_token;
 * es_spec_generate hands out what es_generate would. */
static int generate(const run_args *a, es_backend *backend, es_context *ctx, const cli_devices *more,
                    const int32_t *prompt, size_t n_prompt) {
    /* "cpu", or "vulkan (DEVICE NAME)": which device ran belongs with its numbers */
    char where[320];
    const char *kind = cli_backend_names[a->be.backend];
    if (strcmp(es_backend_name(backend), kind) == 0)
        snprintf(where, sizeof where, "%s", kind);
    else
        snprintf(where, sizeof where, "%s (%s)", kind, es_backend_name(backend));
    if (a->spec.spec == 4) {
        const int rc = cli_alspec_run(&a->spec, &a->sp, es_context_model(ctx), ctx, more, prompt, n_prompt,
                                      a->n_predict, a->ignore_eos, where);
        if (rc == CLI_EXIT_OK && a->be.profile) cli_print_profile("run", backend);
        return rc;
    }
    cli_spec spec = {NULL, NULL, NULL, NULL, NULL};
    if (more->n > 0 && a->spec.spec != 3)
        return cli_fail("run", "--device '%s' lists %d devices; only --spec dsi (its target servers on the others) "
                        "and --spec alspec (two) run on more than one", a->be.device, (int)more->n + 1);
    if (a->spec.spec != 0 &&
        cli_spec_open(&a->spec, &a->be, backend, ctx, more, &a->sp, a->ignore_eos, &spec) != CLI_EXIT_OK)
        return CLI_EXIT_FAIL;
    run_sink sink = {0, 0};
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = a->n_predict;
    gp.ignore_eog = a->ignore_eos;
    gp.sampling = a->sp;
    gp.on_token = on_token;
    gp.user = &sink;
    gp.stop = &a->stop;
    gp.n_stop = a->stop ? 1 : 0;
    gp.max_ms = a->max_ms;
    gp.shift_context = a->shift;
    gp.n_keep = a->n_keep;
    es_generate_stats st;
    es_status s = spec.spec ? es_spec_generate(spec.spec, prompt, n_prompt, &gp, NULL, 0, &st)
                            : es_generate(ctx, prompt, n_prompt, &gp, NULL, 0, &st);
    if (isatty(STDOUT_FILENO) && sink.bytes > 0) fputc('\n', stderr); /* keep the stats off the text's line */
    int rc = CLI_EXIT_OK;
    if (s != ES_OK)
        rc = cli_fail("run", "generation failed: %s (%s)", spec.spec ? es_spec_errmsg(spec.spec) : es_context_errmsg(ctx),
                      es_status_str(s));
    else if (sink.write_errno)
        rc = cli_fail("run", "writing the output: %s", strerror(sink.write_errno));
    else if (spec.spec)
        cli_spec_report(&a->spec, &spec, where);
    else
        print_plain_stats(&st, where);
    if (rc == CLI_EXIT_OK && a->be.profile) cli_print_profile("run", backend);
    cli_spec_close(&spec);
    return rc;
}

int cli_cmd_run(int argc, char **argv) {
    run_args a = {NULL, NULL, NULL, 128, false, false, cli_sampling_defaults(), cli_backend_defaults(),
                  cli_spec_defaults("run"), NULL, 0.0f, false, 0};
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &a.model, "PATH", "GGUF model file", 0, 0, NULL},
        {"--prompt", "-p", CLI_STR, &a.prompt, "TEXT", "prompt text", 0, 0, NULL},
        {"--file", "-f", CLI_STR, &a.file, "PATH", "read the prompt from a file", 0, 0, NULL},
        {"--n-predict", "-n", CLI_INT, &a.n_predict, "N", "tokens to generate, 0 = until end of text or context", 0,
         INT32_MAX, NULL},
        CLI_SAMPLING_OPTS(a.sp),
        {"--ignore-eos", NULL, CLI_FLAG, &a.ignore_eos, NULL, "keep generating past end-of-text tokens", 0, 0, NULL},
        {"--no-bos", NULL, CLI_FLAG, &a.no_bos, NULL, "do not add the model's BOS token to the prompt", 0, 0, NULL},
        {"--stop", NULL, CLI_STR, &a.stop, "TEXT", "end generation where the output contains TEXT (not printed)", 0, 0,
         NULL},
        {"--max-time", NULL, CLI_FLOAT, &a.max_ms, "MS", "generation's time budget in milliseconds, 0 = none", 0, 1e9,
         NULL},
        {"--ctx-shift", NULL, CLI_FLAG, &a.shift, NULL, "when the context is full, drop its older half and go on", 0, 0,
         NULL},
        {"--keep", NULL, CLI_INT, &a.n_keep, "N", "tokens a context shift keeps at the start", 0, INT32_MAX, NULL},
        CLI_BACKEND_OPTS(a.be),
        CLI_SPEC_OPTS(a.spec),
    };
    const cli_command cmd = {"run", "-m MODEL (-p PROMPT | -f FILE) [options]",
                             "Generate a continuation of the prompt: text on stdout, statistics on stderr.", opts,
                             CLI_N_OPTS(opts), 0, 0, NULL};
    const char *pos[1];
    int n_pos;
    cli_parse_result r = cli_parse(&cmd, argc - 1, argv + 1, pos, &n_pos, NULL);
    if (r != CLI_PARSE_OK) return r == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    cli_sampling_finish(&a.sp);
    if (!a.model || (!a.prompt) == (!a.file)) {
        fprintf(stderr, "edgespec run: %s\n\n", !a.model ? "-m MODEL is required" : "give exactly one of -p PROMPT and -f FILE");
        cli_usage(stderr, &cmd);
        return CLI_EXIT_USAGE;
    }

    size_t text_len = 0;
    char *text_buf = NULL;
    const char *text = a.prompt;
    if (a.file) {
        text_buf = cli_read_file("run", a.file, &text_len);
        if (!text_buf) return CLI_EXIT_FAIL;
        text = text_buf;
    } else {
        text_len = strlen(a.prompt);
    }
    int rc = CLI_EXIT_FAIL;
    es_backend *backend = NULL;
    es_context *ctx = NULL;
    cli_devices more = {{NULL}, 0};
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    es_model *model = cli_load_model("run", a.model, false);
    if (model && (prompt = cli_tokenize("run", model, text, text_len, !a.no_bos, &n_prompt)) != NULL) {
        if (n_prompt == 0)
            rc = cli_fail("run", "the prompt is empty and the model adds no BOS token: nothing to continue from");
        else if (cli_spec_prepare(&a.spec, a.model, model) == CLI_EXIT_OK &&
                 cli_open_context("run", &a.be, model, &backend, &ctx, &more) == CLI_EXIT_OK)
            rc = generate(&a, backend, ctx, &more, prompt, n_prompt);
    }
    es_context_free(ctx);
    es_backend_free(backend);
    cli_devices_free(&more);
    es_model_free(model);
    free(prompt);
    free(text_buf);
    return rc;
}
