/* cpu_logits.c: test helper for test_cpu_reference.py. Writes a random llama GGUF (tools/mkmodel,
 * plus key overrides mkmodel has no flag for: partial rotation, linear RoPE scaling), loads it with
 * es_model_load, and runs it on the CPU backend: a prefill chain of P tokens (every row's logits),
 * then D single-token decode steps. Writes the tokens and all P + D logits rows to a file:
 *   int32 n_rows, int32 n_vocab, int32 tokens[n_rows], float32 logits[n_rows][n_vocab].
 * usage: cpu_logits MODEL_OUT LOGITS_OUT P D THREADS TYPE N_VOCAB N_EMBD N_LAYER N_HEAD N_HEAD_KV N_FF
 *                   TIED ROPE N_ROT ROPE_SCALE SEED FREQ_BASE EPS [ARCH SLIDING_WINDOW ATTN_CAP FINAL_CAP
 *                   [HEAD_DIM [ROPE_FREQS [ROPE_SCALING]]]]
 *   (ROPE: norm|neox; N_ROT 0 = head_dim; ARCH as general.architecture, default llama; 0 = key not
 *   written for the next three; HEAD_DIM 0 = n_embd / n_head; ROPE_FREQS 1 = llama 3's
 *   rope_freqs.weight; ROPE_SCALING: "-" none, else edgespec-mkmodel's --rope-scaling: "yarn,FACTOR,ORIG"
 *   or "longrope,ORIG", phi3 LongRoPE's factor tensors and attention factor) */
#include "edgespec.h"
#include "mkmodel.h"

#include "../common/test_dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what, const char *msg) {
    fprintf(stderr, "cpu_logits: %s: %s\n", what, msg);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 20 && (argc < 24 || argc > 27)) return die("usage", "see the comment at the top of cpu_logits.c");
    const char *model_path = argv[1], *out_path = argv[2];
    const int P = atoi(argv[3]), D = atoi(argv[4]), threads = atoi(argv[5]);
    es_mk_params mp = es_mk_default_params();
    mp.type = test_dtype_parse(argv[6]);
    mp.n_vocab = atoi(argv[7]);
    mp.n_embd = atoi(argv[8]);
    mp.n_layer = atoi(argv[9]);
    mp.n_head = atoi(argv[10]);
    mp.n_head_kv = atoi(argv[11]);
    mp.n_ff = atoi(argv[12]);
    mp.tied = atoi(argv[13]) != 0;
    mp.rope = strcmp(argv[14], "neox") ? ES_ROPE_NORM : ES_ROPE_NEOX;
    const int n_rot = atoi(argv[15]);
    const float rope_scale = (float)atof(argv[16]);
    mp.seed = (uint64_t)atoll(argv[17]);
    mp.freq_base = (float)atof(argv[18]);
    mp.rms_eps = (float)atof(argv[19]);
    mp.progress = false;
    if (argc >= 24) {
        mp.arch = argv[20];
        mp.sliding_window = atoi(argv[21]);
        mp.attn_softcap = (float)atof(argv[22]);
        mp.final_softcap = (float)atof(argv[23]);
        if (argc >= 25) mp.head_dim = atoi(argv[24]);
        if (argc >= 26) mp.rope_freqs = atoi(argv[25]) != 0;
        if (argc == 27 && strcmp(argv[26], "-") && !es_mk_parse_rope_scaling(argv[26], &mp))
            return die("usage", "ROPE_SCALING: -, linear,F, yarn,F,ORIG or longrope,ORIG");
    }
    char key[96];
    const char *arch = mp.arch ? mp.arch : "llama";

    es__err err = {0};
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    if (!w) return die("writer", "out of memory");
    if (es_mk_build(&mp, w, &err) != ES_OK) return die("es_mk_build", err.msg);
    snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
    if (n_rot > 0 && es__gguf_set_u32(w, key, (uint32_t)n_rot) != ES_OK) return die("override", key);
    char key2[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    snprintf(key2, sizeof key2, "%s.rope.scaling.factor", arch);
    if (rope_scale != 1.0f && (es__gguf_set_str(w, key, "linear") != ES_OK || es__gguf_set_f32(w, key2, rope_scale) != ES_OK))
        return die("override", "rope scaling");
    if (es__gguf_write_file(w, model_path, &err) != ES_OK) return die("write", err.msg);
    es__gguf_writer_free(w);

    es_model *m = NULL;
    if (es_model_load(model_path, NULL, &m) != ES_OK) return die("es_model_load", es_last_error());
    es_model_info mi;
    es_model_get_info(m, &mi);
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = threads;
    es_backend *be = NULL;
    if (es_backend_create(&bp, &be) != ES_OK) return die("es_backend_create", es_last_error());
    es_context_params cp = es_context_default_params();
    cp.n_ctx = P + D;
    cp.n_batch = P;
    cp.backend = be;
    es_context *ctx = NULL;
    if (es_context_create(m, &cp, &ctx) != ES_OK) return die("es_context_create", es_last_error());

    const int n = P + D, V = mi.n_vocab;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n);
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
    uint8_t *all = malloc((size_t)P);
    unsigned long long s = mp.seed * 2654435761ull + 12345;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((s >> 33) % (unsigned long long)V);
    }
    memset(all, 1, (size_t)P);
    es_batch b = {P, tok, NULL, NULL, NULL, all};
    if (es_forward(ctx, &b) != ES_OK) return die("prefill", es_context_errmsg(ctx));
    for (int i = 0; i < P; i++) {
        const float *l;
        if (es_logits(ctx, i, &l) != ES_OK) return die("logits", es_context_errmsg(ctx));
        memcpy(logits + (size_t)i * (size_t)V, l, sizeof(float) * (size_t)V);
    }
    if (es_commit(ctx, NULL, 0) != ES_OK) return die("commit", es_context_errmsg(ctx));
    for (int i = P; i < n; i++) {
        es_batch one = {1, &tok[i], NULL, NULL, NULL, NULL};
        const float *l;
        if (es_forward(ctx, &one) != ES_OK || es_logits(ctx, 0, &l) != ES_OK)
            return die("decode", es_context_errmsg(ctx));
        memcpy(logits + (size_t)i * (size_t)V, l, sizeof(float) * (size_t)V);
        if (es_commit(ctx, NULL, 0) != ES_OK) return die("commit", es_context_errmsg(ctx));
    }
    FILE *f = fopen(out_path, "wb");
    if (!f) return die("open", out_path);
    int32_t hdr[2] = {n, V};
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(tok, sizeof(int32_t), (size_t)n, f);
    fwrite(logits, sizeof(float), (size_t)n * (size_t)V, f);
    if (fclose(f) != 0) return die("write", out_path);
    es_context_free(ctx);
    es_backend_free(be);
    es_model_free(m);
    free(tok), free(logits), free(all);
    return 0;
}
