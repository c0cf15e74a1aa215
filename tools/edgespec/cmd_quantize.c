/* cmd_quantize.c: `edgespec quantize MODEL OUT TYPE`: a model's weight matrices rewritten in
 * another type by es_quantize() (f32/f16/bf16 input), with a progress bar and the library's
 * warnings (matrices that fall back to another type) on stderr. */
#include "cli.h"

#include <string.h>
#include <unistd.h>

static void log_cb(es_log_level level, const char *msg, void *user) {
    (void)level;
    (void)user;
    fprintf(stderr, "edgespec quantize: %s\n", msg);
}

int cli_cmd_quantize(int argc, char **argv) {
    const cli_command cmd = {"quantize", "MODEL OUT TYPE",
                             "Write MODEL (f32, f16 or bf16 weights) to OUT with every weight matrix in TYPE: q4_K, "
                             "q5_K, q6_K, q3_K, q2_K, iq4_nl, iq4_xs, q8_0, q5_1, q5_0, q4_1, q4_0, bf16, f16 or f32 "
                             "(norms stay f32), or in llama.cpp's mix q4_K_M or q5_K_M (q6_K for the output head, "
                             "and for attn_v and ffn_down in some layers).",
                             NULL, 0, 3, 3, NULL};
    const char *pos[3];
    int n_pos;
    cli_parse_result r = cli_parse(&cmd, argc - 1, argv + 1, pos, &n_pos, NULL);
    if (r != CLI_PARSE_OK) return r == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    es_quantize_params qp = es_quantize_default_params();
    qp.log_fn = log_cb;
    cli_progress prog = {"quantizing", isatty(STDERR_FILENO) != 0, -1};
    qp.progress_fn = cli_progress_cb;
    qp.progress_user = &prog;
    es_status s = es_quantize(pos[0], pos[1], pos[2], &qp);
    if (prog.tty && prog.last >= 0 && prog.last < 100) fputc('\n', stderr);
    if (s == ES_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "edgespec quantize: %s\n\n", es_last_error());
        cli_usage(stderr, &cmd);
        return CLI_EXIT_USAGE;
    }
    return s == ES_OK ? CLI_EXIT_OK : cli_fail_status("quantize", s, "cannot quantize");
}
