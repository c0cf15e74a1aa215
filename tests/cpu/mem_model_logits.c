/* mem_model_logits.c: test helper for test_mem_model_reference.py. Builds every in-memory model of
 * the tests that compare the CPU backend with itself (mem_models.h: cpu_forward, session,
 * context_shift with its RoPE variants, spec_stream, spec_edit, spec_draft), exactly as those
 * tests build it, and for each writes
 *   DIR/NAME.gguf    the model as a llama GGUF file: the same weight bytes, and every
 *                    hyperparameter a llama file states (sizes, RoPE and its scaling, epsilon);
 *                    what a loader derives (the attention, embedding, residual and logit scales,
 *                    the architecture's steps) is not written, so the reference derives it;
 *   DIR/NAME.logits  the CPU backend's logits of the in-memory model for a chain of P tokens
 *                    (every row) and then D single-token decode steps, in cpu_logits.c's format:
 *                    int32 n_rows, int32 n_vocab, int32 tokens[n_rows], float32 logits[n_rows][n_vocab];
 * and DIR/index, the names of those written, one a line; the exit status counts the others. The context holds exactly P + D tokens (LongRoPE's factors
 * depend on it: the reference takes the chain's length). A model whose hyperparameters a llama
 * file cannot state (gemma3's sliding RoPE on llama) is not in the table.
 * Deliberately not here: the comparison (the Python test, with tools/reference/llama_ref.py) and
 * the adapters' streams (test_msa's reference).
 * usage: mem_model_logits DIR */
#include "edgespec.h"
#include "mem_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P = 14, D = 4 }; /* 18 positions: past LongRoPE's original 16 */

typedef struct checked {
    const char *name; /* file name: the test, then the model */
    mem_model_cfg cfg;
    mem_rope_variant rope;
} checked;

static const checked models[] = {
    {"cpu_forward-f32", MEM_CFG_FORWARD_F32, MEM_ROPE_PLAIN},
    {"cpu_forward-f16", MEM_CFG_FORWARD_F16, MEM_ROPE_PLAIN},
    {"cpu_forward-bf16", MEM_CFG_FORWARD_BF16, MEM_ROPE_PLAIN},
    {"cpu_forward-q8_0", MEM_CFG_FORWARD_Q8_0, MEM_ROPE_PLAIN},
    {"cpu_forward-q4_0", MEM_CFG_FORWARD_Q4_0, MEM_ROPE_PLAIN},
    {"session", MEM_CFG_SESSION(51), MEM_ROPE_PLAIN},
    {"session-other", MEM_CFG_SESSION(52), MEM_ROPE_PLAIN},
    {"context_shift-norm", MEM_CFG_SHIFT_NORM, MEM_ROPE_PLAIN},
    {"context_shift-norm-llama3", MEM_CFG_SHIFT_NORM, MEM_ROPE_LLAMA3},
    {"context_shift-norm-yarn", MEM_CFG_SHIFT_NORM, MEM_ROPE_YARN},
    {"context_shift-neox", MEM_CFG_SHIFT_NEOX, MEM_ROPE_PLAIN},
    {"context_shift-neox-longrope", MEM_CFG_SHIFT_NEOX, MEM_ROPE_LONGROPE},
    {"context_shift-mqa", MEM_CFG_SHIFT_MQA, MEM_ROPE_PLAIN},
    {"context_shift-errors", MEM_CFG_SHIFT_ERRORS, MEM_ROPE_PLAIN},
    {"context_shift-generate", MEM_CFG_SHIFT_GENERATE, MEM_ROPE_PLAIN},
    {"spec_stream-spec_edit", MEM_CFG_STREAM(3), MEM_ROPE_PLAIN},
    {"spec_edit-drafter", MEM_CFG_STREAM(1), MEM_ROPE_PLAIN},
    {"spec_draft-target", MEM_CFG_DRAFT(3, 11), MEM_ROPE_PLAIN},
    {"spec_draft-near", MEM_CFG_DRAFT(1, 11), MEM_ROPE_PLAIN},
    {"spec_draft-far", MEM_CFG_DRAFT(1, 99), MEM_ROPE_PLAIN},
};

static int fail(const char *name, const char *what, const char *msg) {
    fprintf(stderr, "mem_model_logits: %s: %s: %s\n", name, what, msg);
    return 1;
}

/* n floats as a one-dimensional f32 tensor. */
static es_status add_f32(es__gguf_writer *w, const char *name, const float *v, int64_t n) {
    const int64_t ne[1] = {n};
    return es__gguf_add_tensor(w, name, ES__DTYPE_F32, 1, ne, v);
}

static es_status add_weight(es__gguf_writer *w, const char *name, const es__tensor *t) {
    return es__gguf_add_tensor(w, name, t->type, (uint32_t)t->n_dims, t->ne, t->data);
}

/* The model as a llama GGUF file (see the top of this file); false with a message on stderr
 * where the writer fails or a llama file cannot state what the model's hyperparameters say. */
static bool write_gguf(const char *name, const es_model *m, const char *path) {
    const es__hparams *hp = &m->hp;
    if (hp->arch != es__arch_find("llama")) return !fail(name, "write", "not a llama model");
    if (hp->rope_freq_base_swa > 0.0f) return !fail(name, "write", "a llama file has no sliding layers' RoPE base");
    if (hp->rope_scaling == ES__ROPE_SCALING_LONGROPE && hp->rope_freq_scale != 1.0f)
        return !fail(name, "write", "a LongRoPE file has no linear scale besides");
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    if (!w) return !fail(name, "write", "out of memory");
    es_status s = ES_OK;
#define KEY(call) \
    if (s == ES_OK) s = (call)
    KEY(es__gguf_set_str(w, "general.architecture", "llama"));
    KEY(es__gguf_set_str(w, "general.name", name));
    KEY(es__gguf_set_u32(w, "llama.vocab_size", (uint32_t)hp->n_vocab));
    KEY(es__gguf_set_u32(w, "llama.context_length", (uint32_t)hp->n_ctx_train));
    KEY(es__gguf_set_u32(w, "llama.embedding_length", (uint32_t)hp->n_embd));
    KEY(es__gguf_set_u32(w, "llama.block_count", (uint32_t)hp->n_layer));
    KEY(es__gguf_set_u32(w, "llama.feed_forward_length", (uint32_t)hp->n_ff));
    KEY(es__gguf_set_u32(w, "llama.attention.head_count", (uint32_t)hp->n_head));
    KEY(es__gguf_set_u32(w, "llama.attention.head_count_kv", (uint32_t)hp->n_head_kv));
    KEY(es__gguf_set_u32(w, "llama.attention.key_length", (uint32_t)hp->head_dim));
    KEY(es__gguf_set_u32(w, "llama.attention.value_length", (uint32_t)hp->head_dim));
    KEY(es__gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", hp->rms_eps));
    KEY(es__gguf_set_u32(w, "llama.rope.dimension_count", (uint32_t)hp->n_rot));
    KEY(es__gguf_set_f32(w, "llama.rope.freq_base", hp->rope_freq_base));
    KEY(es__gguf_set_str(w, "edgespec.rope.ordering", hp->rope_type == ES_ROPE_NEOX ? "neox" : "norm"));
    /* rope_freq_scale multiplies positions whatever the scaling type (rope.c), so a scale with
     * none is the linear scaling a file states */
    const char *scaling = hp->rope_scaling == ES__ROPE_SCALING_YARN       ? "yarn"
                          : hp->rope_scaling == ES__ROPE_SCALING_LONGROPE ? "longrope"
                          : hp->rope_freq_scale != 1.0f || hp->rope_scaling == ES__ROPE_SCALING_LINEAR ? "linear"
                                                                                                 : NULL;
    if (scaling) KEY(es__gguf_set_str(w, "llama.rope.scaling.type", scaling));
    if (scaling && strcmp(scaling, "longrope"))
        KEY(es__gguf_set_f32(w, "llama.rope.scaling.factor", 1.0f / hp->rope_freq_scale));
    if (hp->rope_scaling == ES__ROPE_SCALING_YARN || hp->rope_scaling == ES__ROPE_SCALING_LONGROPE)
        KEY(es__gguf_set_u32(w, "llama.rope.scaling.original_context_length", (uint32_t)hp->rope_n_ctx_orig));
    if (hp->rope_scaling == ES__ROPE_SCALING_YARN) {
        KEY(es__gguf_set_f32(w, "llama.rope.scaling.yarn_ext_factor", hp->yarn_ext_factor));
        KEY(es__gguf_set_f32(w, "llama.rope.scaling.yarn_beta_fast", hp->yarn_beta_fast));
        KEY(es__gguf_set_f32(w, "llama.rope.scaling.yarn_beta_slow", hp->yarn_beta_slow));
    }
    /* 0 and 1 both mean none in the library (model.h); a file's 0 would zero the rotation */
    if (hp->rope_attn_factor != 0.0f && hp->rope_attn_factor != 1.0f)
        KEY(es__gguf_set_f32(w, "llama.rope.scaling.attn_factor", hp->rope_attn_factor));
    if (hp->n_swa > 0) KEY(es__gguf_set_u32(w, "llama.attention.sliding_window", (uint32_t)hp->n_swa));

    KEY(add_weight(w, "token_embd.weight", m->tok_embd));
    if (hp->rope_freqs) KEY(add_f32(w, "rope_freqs.weight", hp->rope_freqs, hp->n_rot / 2));
    if (hp->rope_long) KEY(add_f32(w, "rope_factors_long.weight", hp->rope_long, hp->n_rot / 2));
    if (hp->rope_short) KEY(add_f32(w, "rope_factors_short.weight", hp->rope_short, hp->n_rot / 2));
    KEY(add_weight(w, "output_norm.weight", m->output_norm));
    if (!m->tied_output) KEY(add_weight(w, "output.weight", m->output));
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const es__layer *L = &m->layers[l];
        const struct {
            const char *name;
            const es__tensor *t;
        } ts[] = {{"attn_norm", L->attn_norm}, {"attn_q", L->wq},         {"attn_k", L->wk},
                  {"attn_v", L->wv},           {"attn_output", L->wo},    {"ffn_norm", L->ffn_norm},
                  {"ffn_gate", L->ffn_gate},   {"ffn_up", L->ffn_up},     {"ffn_down", L->ffn_down}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            char tn[64];
            snprintf(tn, sizeof tn, "blk.%d.%s.weight", (int)l, ts[i].name);
            KEY(add_weight(w, tn, ts[i].t));
        }
    }
#undef KEY
    es__err err = {0};
    if (s == ES_OK) s = es__gguf_write_file(w, path, &err);
    es__gguf_writer_free(w);
    if (s != ES_OK) return !fail(name, "write", err.msg[0] ? err.msg : es_status_str(s));
    return true;
}

/* The CPU backend's logits of m: P chain rows, then D decode steps; true when all came. */
static bool cpu_logits(const char *name, const es_model *m, const int32_t *tok, float *logits) {
    const int32_t V = m->hp.n_vocab;
    es_backend_params bp = es_backend_default_params();
    bp.n_threads = 2;
    es_backend *be = NULL;
    if (es_backend_create(&bp, &be) != ES_OK) return !fail(name, "es_backend_create", es_last_error());
    es_context_params cp = es_context_default_params();
    cp.n_ctx = P + D;
    cp.n_batch = P;
    cp.backend = be;
    es_context *c = NULL;
    bool ok = es_context_create(m, &cp, &c) == ES_OK;
    if (!ok) fail(name, "es_context_create", es_last_error());
    uint8_t all[P];
    memset(all, 1, sizeof all);
    const es_batch chain = {P, tok, NULL, NULL, NULL, all};
    ok = ok && es_forward(c, &chain) == ES_OK;
    for (int32_t i = 0; ok && i < P; i++) {
        const float *l = NULL;
        ok = es_logits(c, i, &l) == ES_OK;
        if (ok) memcpy(logits + (size_t)i * (size_t)V, l, sizeof(float) * (size_t)V);
    }
    ok = ok && es_commit(c, NULL, 0) == ES_OK;
    for (int32_t i = P; ok && i < P + D; i++) {
        const es_batch one = {1, &tok[i], NULL, NULL, NULL, NULL};
        const float *l = NULL;
        ok = es_forward(c, &one) == ES_OK && es_logits(c, 0, &l) == ES_OK;
        if (ok) memcpy(logits + (size_t)i * (size_t)V, l, sizeof(float) * (size_t)V);
        ok = ok && es_commit(c, NULL, 0) == ES_OK;
    }
    if (c && !ok) fail(name, "forward", es_context_errmsg(c));
    es_context_free(c);
    es_backend_free(be);
    return ok;
}

static bool write_logits(const char *name, const char *path, const int32_t *tok, const float *logits, int32_t V) {
    FILE *f = fopen(path, "wb");
    if (!f) return !fail(name, "open", path);
    const int32_t hdr[2] = {P + D, V};
    bool ok = fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, sizeof(int32_t), P + D, f) == P + D &&
              fwrite(logits, sizeof(float), (size_t)(P + D) * (size_t)V, f) == (size_t)(P + D) * (size_t)V;
    ok = fclose(f) == 0 && ok;
    if (!ok) fail(name, "write", path);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mem_model_logits DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/index", argv[1]);
    FILE *index = fopen(path, "w");
    if (!index) return fail("index", "open", path);
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        const checked *e = &models[k];
        es_model *m = mem_model_create(&e->cfg);
        mem_model_set_rope(&m->hp, e->rope);
        const int32_t V = m->hp.n_vocab;
        int32_t tok[P + D];
        test_rng rng = {e->cfg.seed * 1000003ull + k};
        for (int i = 0; i < P + D; i++) tok[i] = (int32_t)(test_rng_u64(&rng) % (unsigned long long)V);
        float *logits = malloc(sizeof(float) * (size_t)(P + D) * (size_t)V);
        snprintf(path, sizeof path, "%s/%s.gguf", argv[1], e->name);
        bool ok = logits && write_gguf(e->name, m, path) && cpu_logits(e->name, m, tok, logits);
        snprintf(path, sizeof path, "%s/%s.logits", argv[1], e->name);
        ok = ok && write_logits(e->name, path, tok, logits, V);
        if (ok) fprintf(index, "%s\n", e->name);
        CHECKF(ok, "%s: not written (above: why)", e->name);
        free(logits);
        mem_model_free(m);
    }
    CHECK(fclose(index) == 0);
    TEST_MAIN_END();
}
