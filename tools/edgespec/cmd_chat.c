/* cmd_chat.c: `edgespec chat`: an interactive, multi-turn conversation on stdin and stdout, with
 * or without speculation. The KV cache stays between turns (chat_conv.c reads only what is new);
 * Ctrl-C stops the answer being written, not the program; /reset, /save FILE, /load FILE. */
#include "chat_conv.h"
#include "spec_opts.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct chat_args {
    const char *model;
    const char *system;
    const char *template_name;
    int32_t n_predict;
    es_sampler_params sp;
    cli_backend_args be;
    cli_spec_args spec;
} chat_args;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* SIGINT sets a flag instead of ending the program. At the prompt it is caught without
 * SA_RESTART, so the read returns and Ctrl-C gives the prompt back; during an answer with it, so
 * that a write blocked on a terminal slow to read goes on instead of failing with EINTR, which
 * reported the stopped answer as a write error and dropped it from the conversation. The flag
 * stops the answer either way. */
static void catch_sigint(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* The answer as it streams: to stdout, and kept as the assistant's message. */
typedef struct answer {
    char *text;
    size_t len, cap;
    int write_errno;
} answer;

static bool on_token(int32_t token, const char *piece, size_t len, void *user) {
    (void)token;
    answer *a = user;
    if (a->len + len + 1 > a->cap) {
        size_t cap = 2 * (a->len + len + 1);
        char *grown = realloc(a->text, cap);
        if (!grown) return false;
        a->text = grown;
        a->cap = cap;
    }
    memcpy(a->text + a->len, piece, len);
    a->len += len;
    a->text[a->len] = '\0';
    if ((len > 0 && fwrite(piece, 1, len, stdout) != len) || fflush(stdout) != 0) a->write_errno = errno ? errno : EIO;
    return !interrupted && a->write_errno == 0;
}

/* Answers the conversation's last (user) message. */
static int answer_turn(const chat_args *a, chat_conv *c) {
    const int32_t *feed;
    size_t n_feed;
    if (chat_conv_begin_turn(c, a->n_predict, &feed, &n_feed) != CLI_EXIT_OK) return CLI_EXIT_FAIL;
    /* a plain template's messages end with a newline: that is where its answer ends */
    const char *stop = c->tmpl == ES_CHAT_PLAIN ? "\n" : es_chat_end_of_turn(c->tmpl);
    answer ans = {NULL, 0, 0, 0};
    int32_t *out = malloc(sizeof *out * (size_t)a->n_predict);
    if (!out) return cli_fail("chat", "out of memory");
    es_generate_params gp = es_generate_default_params();
    gp.n_predict = a->n_predict;
    gp.sampling = a->sp;
    gp.on_token = on_token;
    gp.user = &ans;
    gp.stop = &stop;
    gp.n_stop = stop[0] ? 1 : 0;
    es_generate_stats st;
    interrupted = 0;
    catch_sigint(true);
    es_status s = c->spec ? es_spec_generate(c->spec, feed, n_feed, &gp, out, (size_t)a->n_predict, &st)
                          : es_generate(c->ctx, feed, n_feed, &gp, out, (size_t)a->n_predict, &st);
    fputc('\n', stdout);
    fflush(stdout);
    catch_sigint(false);
    if (interrupted) fprintf(stderr, "(stopped)\n");
    int rc;
    if (s != ES_OK) {
        rc = cli_fail("chat", "generation failed: %s (%s)", c->spec ? es_spec_errmsg(c->spec) : es_context_errmsg(c->ctx),
                      es_status_str(s));
        chat_conv_pop(c);
        chat_conv_forget_cache(c);
    } else if (ans.write_errno) {
        rc = cli_fail("chat", "writing the answer: %s", strerror(ans.write_errno));
    } else {
        rc = chat_conv_end_turn(c, ans.text ? ans.text : "", out, (size_t)st.n_generated);
    }
    free(out);
    free(ans.text);
    return rc;
}

static void print_help(void) {
    printf("commands: /reset (forget the conversation), /save FILE, /load FILE, /quit (or Ctrl-D); "
           "Ctrl-C stops an answer\n");
}

/* One line of input: a command or a user message. Returns CLI_EXIT_OK to go on, CLI_EXIT_USAGE
 * to leave; failures are reported and the chat goes on. */
static int handle_line(const chat_args *a, chat_conv *c, char *line) {
    if (strcmp(line, "/quit") == 0 || strcmp(line, "/exit") == 0) return CLI_EXIT_USAGE;
    if (strcmp(line, "/help") == 0) {
        print_help();
    } else if (strcmp(line, "/reset") == 0) {
        if (chat_conv_reset(c) == CLI_EXIT_OK) printf("(the conversation starts again)\n");
    } else if (strncmp(line, "/save ", 6) == 0 || strncmp(line, "/load ", 6) == 0) {
        const char *path = line + 6;
        const bool save = line[1] == 's';
        if ((save ? chat_conv_save(c, path) : chat_conv_load(c, path)) == CLI_EXIT_OK)
            printf("(%s %s: %zu messages)\n", save ? "saved to" : "loaded", path, c->n_msgs);
    } else if (line[0] == '/') {
        printf("unknown command %s\n", line);
        print_help();
    } else if (chat_conv_add(c, "user", line) == CLI_EXIT_OK) {
        answer_turn(a, c);
    }
    fflush(stdout);
    return CLI_EXIT_OK;
}

/* Reads lines until /quit or the end of input; Ctrl-C at the prompt asks again. */
static int converse(const chat_args *a, chat_conv *c) {
    const bool tty = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) fputs("> ", stdout), fflush(stdout);
        interrupted = 0;
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0 && errno == EINTR) {
            clearerr(stdin);
            fputs("\n(Ctrl-C stops an answer; /quit or Ctrl-D leaves)\n", stdout);
            continue;
        }
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0) continue;
        if (handle_line(a, c, line) != CLI_EXIT_OK) break;
    }
    free(line);
    if (tty) fputc('\n', stdout);
    return CLI_EXIT_OK;
}

static int pick_template(const chat_args *a, const es_model *m, es_chat_template *t) {
    es_status s = a->template_name ? es_chat_template_from_name(a->template_name, t) : es_chat_template_detect(m, t);
    if (s != ES_OK) return cli_fail_status("chat", s, a->template_name ? "--template" : "the model's chat template (name one with --template)");
    return CLI_EXIT_OK;
}

static int run_chat(chat_args *a, es_model *model) {
    es_chat_template t;
    es_backend *backend = NULL;
    es_context *ctx = NULL;
    cli_spec spec = {0};
    int rc = pick_template(a, model, &t);
    if (rc == CLI_EXIT_OK) rc = cli_spec_prepare(&a->spec, a->model, model);
    if (rc == CLI_EXIT_OK) rc = cli_open_context("chat", &a->be, model, &backend, &ctx, NULL);
    if (rc == CLI_EXIT_OK && a->n_predict > es_context_n_ctx(ctx) / 2) {
        a->n_predict = es_context_n_ctx(ctx) / 2; /* an answer must leave room for the conversation */
        fprintf(stderr, "edgespec chat: answers of at most %d tokens in a %d-token context\n", a->n_predict,
                es_context_n_ctx(ctx));
    }
    if (rc == CLI_EXIT_OK && a->spec.spec != 0) rc = cli_spec_open(&a->spec, &a->be, backend, ctx, NULL, &a->sp, false, &spec);
    chat_conv c;
    chat_conv_init(&c, model, ctx, spec.spec, t);
    if (rc == CLI_EXIT_OK && a->system) rc = chat_conv_add(&c, "system", a->system);
    if (rc == CLI_EXIT_OK) {
        fprintf(stderr, "edgespec chat: template %s, context %d tokens, %s; /help for commands\n",
                es_chat_template_name(t), es_context_n_ctx(ctx), spec.spec ? cli_spec_names[a->spec.spec] : "no speculation");
        catch_sigint(false);
        rc = converse(a, &c);
    }
    if (rc == CLI_EXIT_OK)
        fprintf(stderr, "edgespec chat: %zu context shifts dropped %zu tokens of older turns\n", c.n_shifts,
                c.n_shifted);
    if (rc == CLI_EXIT_OK && spec.spec) cli_spec_report(&a->spec, &spec, es_backend_name(backend));
    chat_conv_free(&c);
    cli_spec_close(&spec);
    es_context_free(ctx);
    es_backend_free(backend);
    return rc;
}

int cli_cmd_chat(int argc, char **argv) {
    chat_args a = {NULL, NULL, NULL, 256, cli_sampling_defaults(), cli_backend_defaults(), cli_spec_defaults("chat")};
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &a.model, "PATH", "GGUF model file", 0, 0, NULL},
        {"--system", NULL, CLI_STR, &a.system, "TEXT", "a system message that opens the conversation", 0, 0, NULL},
        {"--template", NULL, CLI_STR, &a.template_name, "NAME",
         "chat template: plain, llama2, llama3, chatml, phi3, gemma or mistral (default: the model's)", 0, 0, NULL},
        {"--n-predict", "-n", CLI_INT, &a.n_predict, "N", "most tokens per answer", 1, INT32_MAX, NULL},
        CLI_SAMPLING_OPTS(a.sp),
        CLI_BACKEND_OPTS(a.be),
        CLI_SPEC_OPTS(a.spec),
    };
    const cli_command cmd = {"chat", "-m MODEL [options]",
                             "Chat with the model: type a message, read the answer; /help lists the commands.", opts,
                             CLI_N_OPTS(opts), 0, 0, NULL};
    const char *pos[1];
    int n_pos;
    cli_parse_result r = cli_parse(&cmd, argc - 1, argv + 1, pos, &n_pos, NULL);
    if (r != CLI_PARSE_OK) return r == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    cli_sampling_finish(&a.sp);
    if (!a.model) {
        fprintf(stderr, "edgespec chat: -m MODEL is required\n\n");
        cli_usage(stderr, &cmd);
        return CLI_EXIT_USAGE;
    }
    es_model *model = cli_load_model("chat", a.model, false);
    int rc = model ? run_chat(&a, model) : CLI_EXIT_FAIL;
    es_model_free(model);
    return rc;
}
