/* main.c: edgespec-mkmodel, the command line around mkmodel.c: writes a random-weights llama GGUF
 * for tests, demos and benchmarks. Run with --help for the flags. */
#include "arch.h"
#include "mkmodel.h"

#include "platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: edgespec-mkmodel -o OUT.gguf [options]\n"
            "Writes a llama GGUF model with random weights (uniform, std 1/sqrt(n_in)).\n"
            "  --preset NAME      benchmark shape: 24m, 134m or 853m (vocab 32000, ctx 2048, separate output)\n"
            "  --n-vocab N        vocabulary size (default 512; synthetic vocabulary: 260..%d)\n"
            "  --n-embd N         embedding width (default 64)\n"
            "  --n-layer N        blocks (default 2)\n"
            "  --n-head N         attention heads (default 4)\n"
            "  --n-head-kv N      key/value heads (default = n-head)\n"
            "  --n-ff N           feed-forward width (default 128)\n"
            "  --n-ctx N          llama.context_length (default 256)\n"
            "  --type T           f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_K ... q6_K for every\n"
            "                     matrix (norms stay f32; the K-quants need n-embd and n-ff multiples of 256;\n"
            "                     default f32)\n"
            "  --tied             no output.weight: the output head shares token_embd.weight\n"
            "  --arch A           general.architecture: llama (default), qwen2, qwen3, phi3, gemma, gemma2,\n"
            "                     gemma3, smollm3 or granite, with its tensors and keys (docs/formats.md,\n"
            "                     \"Architectures\"; granite: Granite 3's multipliers)\n"
            "  --sliding-window N <arch>.attention.sliding_window (default: not written)\n"
            "  --softcap A,F      gemma2's attention and final logit soft-capping (default: not written)\n"
            "  --head-dim N       head size when not n-embd / n-head (written as attention.key_length)\n"
            "  --rope-freqs       llama 3's rope_freqs.weight (per-pair frequency divisors, 1 to 8)\n"
            "  --rope-scaling S   linear,FACTOR or yarn,FACTOR,ORIG (<arch>.rope.scaling.* keys; ORIG the original\n"
            "                     context), or longrope,ORIG: phi3 LongRoPE's rope_factors_short/long.weight\n"
            "                     and the attention factor the converter derives from --n-ctx / ORIG\n"
            "  --rope R           norm or neox (default: the architecture's; written as edgespec.rope.ordering\n"
            "                     when it differs)\n"
            "  --freq-base F      llama.rope.freq_base (default 10000)\n"
            "  --freq-base-swa F  <arch>.rope.freq_base_swa, gemma3's sliding layers' base (default: not written)\n"
            "  --seed N           random seed (default 1); a model is a pure function of its flags\n"
            "  --vocab FILE       copy every tokenizer.ggml.* key from another GGUF (sets n-vocab)\n"
            "  --name NAME        general.name (default edgespec-random)\n"
            "  --quiet            no progress line\n",
            es_mk_max_vocab());
}

static bool parse_type(const char *s, es__dtype *t) {
    static const struct {
        const char *name;
        es__dtype t;
    } types[] = {{"f32", ES__DTYPE_F32}, {"f16", ES__DTYPE_F16}, {"bf16", ES__DTYPE_BF16},
                 {"q8_0", ES__DTYPE_Q8_0}, {"q4_0", ES__DTYPE_Q4_0}, {"q4_K", ES__DTYPE_Q4_K},
                 {"q5_K", ES__DTYPE_Q5_K}, {"q6_K", ES__DTYPE_Q6_K},
                 {"q2_K", ES__DTYPE_Q2_K}, {"q3_K", ES__DTYPE_Q3_K}, {"iq4_nl", ES__DTYPE_IQ4_NL},
                 {"iq4_xs", ES__DTYPE_IQ4_XS},
                 {"q4_1", ES__DTYPE_Q4_1}, {"q5_0", ES__DTYPE_Q5_0}, {"q5_1", ES__DTYPE_Q5_1}};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(s, types[i].name)) {
            *t = types[i].t;
            return true;
        }
    return false;
}

static bool parse_int(const char *s, int32_t *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1 << 30) return false;
    *out = (int32_t)v;
    return true;
}

int main(int argc, char **argv) {
    es_mk_params p = es_mk_default_params();
    const char *out = NULL;
    bool quiet = false, rope_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tied")) {
            p.tied = true;
            takes = false;
        } else if (!strcmp(a, "--rope-freqs")) {
            p.rope_freqs = true;
            takes = false;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
            takes = false;
        } else if (!v) {
            ok = false;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v;
        } else if (!strcmp(a, "--preset")) {
            ok = es_mk_preset(v, &p);
        } else if (!strcmp(a, "--n-vocab")) {
            ok = parse_int(v, &p.n_vocab);
        } else if (!strcmp(a, "--n-embd")) {
            ok = parse_int(v, &p.n_embd);
        } else if (!strcmp(a, "--n-layer")) {
            ok = parse_int(v, &p.n_layer);
        } else if (!strcmp(a, "--n-head")) {
            ok = parse_int(v, &p.n_head);
        } else if (!strcmp(a, "--n-head-kv")) {
            ok = parse_int(v, &p.n_head_kv);
        } else if (!strcmp(a, "--n-ff")) {
            ok = parse_int(v, &p.n_ff);
        } else if (!strcmp(a, "--n-ctx")) {
            ok = parse_int(v, &p.n_ctx);
        } else if (!strcmp(a, "--type")) {
            ok = parse_type(v, &p.type);
        } else if (!strcmp(a, "--arch")) {
            ok = es__arch_find(v) != NULL;
            p.arch = v;
        } else if (!strcmp(a, "--head-dim")) {
            ok = parse_int(v, &p.head_dim);
        } else if (!strcmp(a, "--sliding-window")) {
            ok = parse_int(v, &p.sliding_window);
        } else if (!strcmp(a, "--softcap")) {
            char *end = NULL;
            p.attn_softcap = strtof(v, &end);
            ok = *end == ',' && p.attn_softcap > 0;
            if (ok) p.final_softcap = strtof(end + 1, &end);
            ok = ok && *end == '\0' && p.final_softcap > 0;
        } else if (!strcmp(a, "--rope-scaling")) {
            ok = es_mk_parse_rope_scaling(v, &p);
        } else if (!strcmp(a, "--rope")) {
            rope_set = true;
            ok = !strcmp(v, "norm") || !strcmp(v, "neox");
            p.rope = !strcmp(v, "neox") ? ES_ROPE_NEOX : ES_ROPE_NORM;
        } else if (!strcmp(a, "--freq-base") || !strcmp(a, "--freq-base-swa")) {
            char *end;
            float *f = !strcmp(a, "--freq-base") ? &p.freq_base : &p.freq_base_swa;
            *f = strtof(v, &end);
            ok = *end == '\0' && *f > 0;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            p.seed = strtoull(v, &end, 10);
            ok = *end == '\0';
        } else if (!strcmp(a, "--vocab")) {
            p.vocab_path = v;
        } else if (!strcmp(a, "--name")) {
            p.name = v;
        } else {
            fprintf(stderr, "edgespec-mkmodel: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "edgespec-mkmodel: bad or missing value for %s%s%s\n", a, v ? ": " : "", v ? v : "");
            return 2;
        }
        if (takes) i++;
    }
    if (!out) {
        usage(stderr);
        return 2;
    }
    if (!rope_set && p.arch) p.rope = es__arch_find(p.arch)->rope;
    /* a progress line for models that take more than a moment */
    uint64_t approx = (uint64_t)p.n_embd * (uint64_t)p.n_embd * 12u * (uint64_t)p.n_layer +
                      2u * (uint64_t)p.n_embd * (uint64_t)p.n_vocab;
    p.progress = !quiet && approx > 20000000u;
    es__err err = {ES_OK, ""};
    double t0 = es__time_now();
    es_status s = es_mk_write(&p, out, &err);
    if (s != ES_OK) {
        const char *msg = err.msg[0] ? err.msg : es_last_error();
        if (!strncmp(msg, "mkmodel: ", 9)) msg += 9;
        fprintf(stderr, "edgespec-mkmodel: %s\n", msg);
        return 1;
    }
    if (!quiet) fprintf(stderr, "edgespec-mkmodel: wrote %s in %.1f s\n", out, es__time_now() - t0);
    return 0;
}
