/* cmd_info.c: `edgespec info MODEL`: hyperparameters, tokenizer, tensors and their types.
 * A vocabulary-only file (tokenizer metadata, no tensors) is described too. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void print_size(const char *label, uint64_t bytes) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    printf("%s%.*f %s", label, u ? 2 : 0, v, unit[u]);
}

static void print_token(const es_model *m, const char *label, int32_t id) {
    printf("  %-14s ", label);
    if (id < 0) {
        printf("none\n");
        return;
    }
    char piece[128];
    size_t len = 0;
    if (es_token_to_piece(m, id, true, piece, sizeof piece, &len) != ES_OK) len = 0;
    printf("%d '%.*s'\n", id, (int)len, piece);
}

/* The architecture's extra keys (docs/formats.md, "Architectures"), when the file has them. */
static void print_arch_keys(const es_model *m, const es_model_info *in) {
    static const struct {
        const char *label, *key;
    } keys[] = {{"sliding_window", "attention.sliding_window"},
                {"attn_softcap", "attn_logit_softcapping"},
                {"final_softcap", "final_logit_softcapping"},
                {"swa_rope_base", "rope.freq_base_swa"}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char key[128], val[64];
        snprintf(key, sizeof key, "%s.%s", in->architecture, keys[i].key);
        if (es_model_meta_str(m, key, val, sizeof val) == ES_OK) printf("  %-14s %s\n", keys[i].label, val);
    }
}

static void print_hparams(const es_model_info *in) {
    printf("hyperparameters\n");
    printf("  %-14s %d\n", "n_vocab", in->n_vocab);
    printf("  %-14s %d\n", "n_ctx_train", in->n_ctx_train);
    printf("  %-14s %d\n", "n_embd", in->n_embd);
    printf("  %-14s %d\n", "n_layer", in->n_layer);
    printf("  %-14s %d\n", "n_head", in->n_head);
    printf("  %-14s %d\n", "n_head_kv", in->n_head_kv);
    printf("  %-14s %d\n", "n_ff", in->n_ff);
    printf("  %-14s %d\n", "head_dim", in->head_dim);
    printf("  %-14s %d\n", "n_rot", in->n_rot);
    printf("  %-14s %s, freq_base %g, freq_scale %g\n", "rope", in->rope_type == ES_ROPE_NEOX ? "neox" : "norm",
           (double)in->rope_freq_base, (double)in->rope_freq_scale);
    if (strcmp(in->rope_scaling, "none") != 0)
        printf("  %-14s %s from a context of %d\n", "rope scaling", in->rope_scaling, in->rope_n_ctx_orig);
    if (in->rope_attn_factor != 1.0f) printf("  %-14s %g\n", "rope attn fact", (double)in->rope_attn_factor);
    printf("  %-14s %g\n", "rms_norm_eps", (double)in->rms_norm_eps);
    printf("  %-14s %s\n", "output", in->tied_output ? "tied to token_embd" : "separate");
}

static void print_tensors(const es_model *m, const es_model_info *in) {
    /* per-type totals first: what a reader usually wants to know */
    const char *types[16];
    int64_t counts[16] = {0};
    uint64_t bytes[16] = {0};
    int n_types = 0;
    for (int32_t i = 0; i < in->n_tensors; i++) {
        es_tensor_info t;
        if (es_model_tensor_info(m, i, &t) != ES_OK) continue;
        int k = 0;
        while (k < n_types && strcmp(types[k], t.type) != 0) k++;
        if (k == n_types && n_types < 16) types[n_types++] = t.type;
        if (k < n_types) {
            counts[k]++;
            bytes[k] += t.nbytes;
        }
    }
    printf("tensors        %d", in->n_tensors);
    for (int k = 0; k < n_types; k++) {
        printf("%s%s %lld (", k ? ", " : ": ", types[k], (long long)counts[k]);
        print_size("", bytes[k]);
        printf(")");
    }
    printf("\n");
    for (int32_t i = 0; i < in->n_tensors; i++) {
        es_tensor_info t;
        es_status s = es_model_tensor_info(m, i, &t);
        if (s != ES_OK) {
            printf("  [%d] %s\n", i, es_last_error());
            continue;
        }
        char shape[96];
        int off = 0;
        for (int d = 0; d < t.n_dims && off < (int)sizeof shape; d++)
            off += snprintf(shape + off, sizeof shape - (size_t)off, "%s%lld", d ? " x " : "", (long long)t.ne[d]);
        printf("  %-32s %-6s %-22s %12llu bytes at %llu\n", t.name, t.type, shape, (unsigned long long)t.nbytes,
               (unsigned long long)t.offset);
    }
}

static void describe(const char *path, const es_model *m, const es_model_info *in) {
    printf("file           %s\n", path);
    printf("architecture   %s\n", in->architecture);
    printf("name           %s\n", in->name[0] ? in->name : "(none)");
    printf("gguf version   %u\n", in->gguf_version);
    if (in->has_weights) {
        printf("parameters     %.2f M, ", (double)in->n_params / 1e6);
        print_size("", in->weight_bytes);
        printf(" of weights\n");
    } else {
        printf("parameters     none (vocabulary-only file)\n");
    }
    if (in->has_weights || in->n_layer > 0) {
        print_hparams(in);
        print_arch_keys(m, in);
    }
    printf("tokenizer\n");
    printf("  %-14s %s\n", "model",
           in->tokenizer == ES_TOKENIZER_LLAMA  ? "llama (SentencePiece BPE)"
           : in->tokenizer == ES_TOKENIZER_GPT2 ? "gpt2 (byte-level BPE)"
                                                : "none");
    printf("  %-14s %s\n", "pre", in->tokenizer_pre);
    printf("  %-14s %d\n", "tokens", in->n_vocab);
    print_token(m, "bos", in->bos_id);
    print_token(m, "eos", in->eos_id);
    if (in->has_ss_adapter) printf("adapter        speculative streaming\n");
    print_tensors(m, in);
}

int cli_cmd_info(int argc, char **argv) {
    const char *model = NULL;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &model, "PATH", "GGUF file (or give it as the argument)", 0, 0, NULL},
    };
    const cli_command cmd = {"info", "MODEL", "Print a GGUF model's hyperparameters, tokenizer, tensors and types.",
                             opts, CLI_N_OPTS(opts), 0, 1, NULL};
    const char *pos[1];
    int n_pos;
    cli_parse_result r = cli_parse(&cmd, argc - 1, argv + 1, pos, &n_pos, NULL);
    if (r != CLI_PARSE_OK) return r == CLI_PARSE_HELP ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if ((n_pos == 1) == (model != NULL)) {
        fprintf(stderr, "edgespec info: give the model file once, as MODEL or -m MODEL\n\n");
        cli_usage(stderr, &cmd);
        return CLI_EXIT_USAGE;
    }
    const char *path = model ? model : pos[0];

    /* A complete model is validated in full. A file that fails only because it has no tensors at
     * all is a vocabulary-only file: describe what it has. Any other failure is the answer. */
    es_model_params mp = es_model_default_params();
    es_model *m = NULL;
    es_status s = es_model_load(path, &mp, &m);
    if (s != ES_OK) {
        char full_error[1024];
        snprintf(full_error, sizeof full_error, "%s", es_last_error());
        mp.vocab_only = true;
        es_model_info vi;
        if (es_model_load(path, &mp, &m) == ES_OK && es_model_get_info(m, &vi) == ES_OK && vi.n_tensors == 0) {
            s = ES_OK;
        } else {
            es_model_free(m);
            m = NULL;
            fprintf(stderr, "edgespec info: cannot load the model: %s (%s)\n", full_error, es_status_str(s));
            return CLI_EXIT_FAIL;
        }
    }
    es_model_info in;
    s = es_model_get_info(m, &in);
    if (s == ES_OK) describe(path, m, &in);
    else cli_fail_status("info", s, "cannot describe the model");
    es_model_free(m);
    return s == ES_OK ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
