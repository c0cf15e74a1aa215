/* cmd_tokenize.c: `edgespec tokenize`: the token ids of a text, space-separated on one line.
 * Loads only the vocabulary, so it works on vocabulary-only GGUF files without weights. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    bool no_bos = false, no_parse_special = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model, "PATH", "GGUF file (a vocabulary-only file is enough)", 0, 0, NULL},
        {"--prompt", "-p", CLI_STR, &text, "TEXT", "text to tokenize", 0, 0, NULL},
        {"--file", "-f", CLI_STR, &file, "PATH", "read the text from a file", 0, 0, NULL},
        {"--no-bos", NULL, CLI_FLAG, &no_bos, NULL, "do not add the model's BOS/EOS tokens", 0, 0, NULL},
        {"--no-parse-special", NULL, CLI_FLAG, &no_parse_special, NULL,
         "treat control-token text such as <s> as plain text", 0, 0, NULL},
    };
    const cli_command cmd = {"tokenize", "-m MODEL (-p TEXT | -f FILE) [--no-bos]",
                             "Print the token ids of a text, space-separated, on one line.", opts, CLI_N_OPTS(opts),
                             0, 0, NULL};
    const char *pos[1];
    int n_pos;
    cli_parse_result r = cli_parse(&cmd, argc - 1, argv + 1, pos, &n_pos, NULL);
    if (r != CLI_PARSE_OK) return r == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if (!model || (!text) == (!file)) {
        fprintf(stderr, "edgespec tokenize: %s\n\n",
                !model ? "-m MODEL is required" : "give exactly one of -p TEXT and -f FILE");
        cli_usage(stderr, &cmd);
        return CLI_EXIT_USAGE;
    }
    size_t len = 0;
    char *buf = NULL;
    if (file) {
        if (!(buf = cli_read_file("tokenize", file, &len))) return CLI_EXIT_FAIL;
        text = buf;
    } else {
        len = strlen(text);
    }
    int rc = CLI_EXIT_FAIL;
    int32_t *toks = NULL;
    es_model *m = cli_load_model("tokenize", model, true);
    if (m) {
        size_t need = 0, cap = len + 16;
        toks = malloc(sizeof *toks * cap);
        es_status s = toks ? es_tokenize(m, text, len, !no_bos, !no_parse_special, toks, cap, &need)
                           : ES_ERR_OUT_OF_MEMORY;
        if (s == ES_ERR_BUFFER_TOO_SMALL) {
            int32_t *grown = realloc(toks, sizeof *toks * need);
            s = grown ? es_tokenize(m, text, len, !no_bos, !no_parse_special, grown, need, &need)
                      : ES_ERR_OUT_OF_MEMORY;
            if (grown) toks = grown;
        }
        if (!toks) {
            rc = cli_fail("tokenize", "out of memory for %zu tokens", cap);
        } else if (s == ES_OK) {
            for (size_t i = 0; i < need; i++) printf(i ? " %d" : "%d", toks[i]);
            printf("\n");
            rc = fflush(stdout) == 0 && !ferror(stdout) ? CLI_EXIT_OK
                                                         : cli_fail("tokenize", "cannot write the output");
        } else {
            rc = cli_fail_status("tokenize", s, "cannot tokenize");
        }
    }
    free(toks);
    es_model_free(m);
    free(buf);
    return rc;
}
