/* common.c: helpers the edgespec subcommands share: error messages, model loading with a
 * progress bar, file reading, backend and context creation from the common options. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const cli_backend_names[] = {"cpu", "vulkan", NULL};

int cli_fail_status(const char *cmd, es_status s, const char *what) {
    const char *msg = es_last_error();
    fprintf(stderr, "edgespec %s: %s: %s (%s)\n", cmd, what, msg[0] ? msg : "no detail", es_status_str(s));
    return CLI_EXIT_FAIL;
}

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "edgespec %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

/* ---- progress bar */

/* A bar redrawn in place when stderr is a terminal and the file is large enough for loading to be
 * noticeable; when stderr is not a terminal (logs, tests) only very large files report, as a few
 * plain lines, so logs stay readable. */
#define CLI_PROGRESS_TTY_BYTES (16ull << 20)
#define CLI_PROGRESS_LOG_BYTES (256ull << 20)

bool cli_progress_cb(float fraction, void *user) {
    cli_progress *p = user;
    if (!(fraction >= 0.0f)) fraction = 0.0f;
    if (fraction > 1.0f) fraction = 1.0f;
    if (p->last < 0 && fraction >= 1.0f) { /* done at the first report: nothing worth a bar */
        p->last = p->tty ? 100 : 4;
        return true;
    }
    if (p->tty) {
        int pct = (int)(fraction * 100.0f);
        if (pct == p->last) return true;
        p->last = pct;
        enum { W = 40 };
        char bar[W + 1];
        int fill = pct * W / 100;
        for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '.';
        bar[W] = '\0';
        fprintf(stderr, "\r%s [%s] %3d%%%s", p->label, bar, pct, pct == 100 ? "\n" : "");
    } else {
        int quarter = (int)(fraction * 4.0f);
        if (quarter == p->last) return true;
        p->last = quarter;
        fprintf(stderr, "%s: %d%%\n", p->label, quarter * 25);
    }
    fflush(stderr);
    return true;
}

static bool progress_wanted(const char *path, cli_progress *p) {
    struct stat st;
    if (stat(path, &st) != 0) return false; /* the loader reports the problem */
    p->tty = isatty(STDERR_FILENO) != 0;
    p->last = -1;
    return (uint64_t)st.st_size >= (p->tty ? CLI_PROGRESS_TTY_BYTES : CLI_PROGRESS_LOG_BYTES);
}

es_model *cli_load_model(const char *cmd, const char *path, bool vocab_only) {
    es_model_params mp = es_model_default_params();
    mp.vocab_only = vocab_only;
    cli_progress prog = {"loading", false, -1};
    if (!vocab_only && progress_wanted(path, &prog)) {
        mp.progress_fn = cli_progress_cb;
        mp.progress_user = &prog;
    }
    es_model *m = NULL;
    es_status s = es_model_load(path, &mp, &m);
    if (prog.tty && prog.last >= 0 && prog.last < 100) fputc('\n', stderr); /* end a cut-off bar */
    if (s != ES_OK) {
        /* the library's message names the file (once) */
        cli_fail_status(cmd, s, "cannot load the model");
        return NULL;
    }
    return m;
}

char *cli_read_file(const char *cmd, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_fail(cmd, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *grown = cap < ((size_t)1 << 40) ? realloc(buf, cap * 2) : NULL;
            if (!grown) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf || err) {
        cli_fail(cmd, "cannot read '%s': %s", path, strerror(buf ? err : ENOMEM));
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

es_sampler_params cli_sampling_defaults(void) {
    const es_sampler_params sp = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                  .repeat_penalty = 1.0f, .repeat_last_n = 64};
    return sp;
}

void cli_sampling_finish(es_sampler_params *sp) {
    if (sp->repeat_last_n == 0) sp->repeat_penalty = 0.0f;
}

int32_t *cli_tokenize(const char *cmd, const es_model *m, const char *text, size_t len, bool add_special, size_t *n) {
    size_t cap = len + 16, need = 0;
    int32_t *toks = malloc(sizeof *toks * cap);
    if (!toks) {
        cli_fail(cmd, "out of memory for a %zu-byte text", len);
        return NULL;
    }
    es_status s = es_tokenize(m, text, len, add_special, true, toks, cap, &need);
    if (s == ES_ERR_BUFFER_TOO_SMALL) {
        int32_t *grown = realloc(toks, sizeof *toks * need);
        if (!grown) {
            free(toks);
            cli_fail(cmd, "out of memory for %zu tokens", need);
            return NULL;
        }
        toks = grown;
        s = es_tokenize(m, text, len, add_special, true, toks, need, &need);
    }
    if (s != ES_OK) {
        free(toks);
        cli_fail_status(cmd, s, "cannot tokenize the text");
        return NULL;
    }
    *n = need;
    return toks;
}

cli_backend_args cli_backend_defaults(void) {
    cli_backend_args a = {0, NULL, NULL, 0, 0, 0, false};
    return a;
}

void cli_devices_free(cli_devices *d) {
    for (int32_t i = 0; i < d->n; i++) es_backend_free(d->b[i]);
    memset(d, 0, sizeof *d);
}

/* The backends of a->device: one, or one per entry of a list; b[0] the run's. CPU runs keep
 * ignoring a plain --device (it names a Vulkan device); a list is read with its "host" entries. */
static int open_backends(const char *cmd, const cli_backend_args *a, es_backend_params *bp, es_backend **b,
                         size_t *n) {
    *n = 0;
    if (bp->type == ES_BACKEND_CPU && !(a->device && strchr(a->device, ','))) bp->device = NULL;
    es_status s = es_backends_create(bp, b, ES_MAX_DEVICES, n);
    if (s != ES_OK)
        return cli_fail_status(cmd, s, a->device && strchr(a->device, ',') ? "cannot create the backends of --device"
                                                                           : "cannot create the backend");
    return CLI_EXIT_OK;
}

int cli_open_context(const char *cmd, const cli_backend_args *a, const es_model *model, es_backend **backend,
                     es_context **ctx, cli_devices *more) {
    *backend = NULL;
    *ctx = NULL;
    if (more) memset(more, 0, sizeof *more);
    es_backend_params bp = es_backend_default_params();
    es_status s = es_vk_flags_parse(a->vk_flags, &bp.vk_flags);
    if (s != ES_OK) return cli_fail_status(cmd, s, "--vk-flags");
    bp.type = a->backend == 1 ? ES_BACKEND_VULKAN : ES_BACKEND_CPU;
    bp.n_threads = a->threads;
    bp.device = a->device;
    bp.profile = a->profile;
    cli_progress prog = {"uploading", isatty(STDERR_FILENO) != 0, -1};
    es_model_info info;
    if (es_model_get_info(model, &info) == ES_OK &&
        info.weight_bytes >= (prog.tty ? CLI_PROGRESS_TTY_BYTES : CLI_PROGRESS_LOG_BYTES)) {
        bp.progress_fn = cli_progress_cb;
        bp.progress_user = &prog;
    }
    es_backend *all[ES_MAX_DEVICES];
    size_t n_all = 0;
    if (open_backends(cmd, a, &bp, all, &n_all) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    if (n_all > 1 && !more) {
        for (size_t i = 0; i < n_all; i++) es_backend_free(all[i]);
        return cli_fail(cmd, "--device '%s' lists %zu devices; %s runs on one", a->device, n_all, cmd);
    }
    *backend = all[0];
    for (size_t i = 1; i < n_all; i++) more->b[more->n++] = all[i];
    es_context_params cp = es_context_default_params();
    cp.backend = *backend;
    cp.n_ctx = a->ctx_size;
    cp.n_batch = a->batch_size;
    s = es_context_create(model, &cp, ctx);
    if (prog.tty && prog.last >= 0 && prog.last < 100) fputc('\n', stderr);
    if (s != ES_OK) {
        cli_fail_status(cmd, s, "cannot create a context");
        es_backend_free(*backend);
        *backend = NULL;
        if (more) cli_devices_free(more);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}
