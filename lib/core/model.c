/* model.c: es_model: maps a GGUF file, validates it as a llama model (hyperparameters from the
 * llama.* keys as llama.cpp names them, every tensor's presence, type and shape), loads the
 * tokenizer, and answers the info calls. docs/formats.md lists every key and tensor read here.
 * Deliberately not here: parsing bytes (gguf_read.c), tokenizers (tokenizer*.c), the adapter
 * (adapter.c), and any computing: backends read the weight views this file sets up.
 */
#include "model.h"

#include "adapter.h"
#include "tokenizer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Upper bounds that keep every product of hyperparameters inside int32 row counts and far below
 * anything a phone or laptop could hold. */
#define MAX_EMBD (1 << 16)
#define MAX_FF (1 << 18)
#define MAX_LAYER 1024
#define MAX_HEAD 1024
#define MAX_HEAD_DIM 1024
#define TOUCH_STRIDE 4096 /* bytes between touched weight bytes: one per page */

es_model_params es_model_default_params(void) {
    es_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

void es_model_free(es_model *m) {
    if (!m) return;
    const es_allocator *a = m->alloc;
    es__ss_adapter_free(m->ss);
    es__vocab_free(m->vocab);
    if (m->tensors)
        for (int32_t i = 0; i < m->n_tensors; i++) es__free(a, (void *)m->tensors[i].name);
    es__free(a, m->tensors);
    es__free(a, m->layers);
    es__gguf_free(m->gguf);
    if (!m->map_borrowed) es__file_map_close(&m->map);
    es__free(a, m->path);
    es__free(a, m->arch);
    es__free(a, m->name);
    es__free(a, m->tokenizer_pre);
    es_allocator copy;
    const es_allocator *ca = NULL;
    if (a) {
        copy = *a;
        ca = &copy;
    }
    es__free(ca, m);
}

const char *es_model_errmsg(const es_model *m) {
    return m ? m->err.msg : "model is NULL";
}

/* ---- hyperparameters */

typedef struct loader {
    es_model *m;
    const es__gguf *g;
    es__err *err;
    bool vocab_only;
    char arch_key[160]; /* scratch for "<arch>.<name>" */
} loader;

static const char *akey(loader *L, const char *name) {
    snprintf(L->arch_key, sizeof L->arch_key, "%s.%s", L->m->arch, name);
    return L->arch_key;
}

/* An unsigned hyperparameter in 1..max (required unless vocab-only; absent = *out untouched). */
static es_status hp_u32(loader *L, const char *name, bool required, uint32_t max, int32_t *out) {
    const char *key = akey(L, name);
    uint32_t v = 0;
    bool present = es__gguf_find(L->g, key) != NULL;
    ES_TRY(es__gguf_get_u32(L->g, key, required && !L->vocab_only, &v, L->err));
    if (!present) return ES_OK;
    const es__gguf_kv *kv = es__gguf_find(L->g, key);
    ES_RETURN_IF(v < 1 || v > max, L->err, ES_ERR_MODEL,
                 "metadata key '%s' (offset %" PRIu64 ") is %" PRIu32 ": expected 1..%" PRIu32, key, kv->offset, v, max);
    *out = (int32_t)v;
    return ES_OK;
}

/* A positive finite float hyperparameter. */
static es_status hp_f32(loader *L, const char *name, bool required, float *out) {
    const char *key = akey(L, name);
    const es__gguf_kv *kv = es__gguf_find(L->g, key);
    float v = 0;
    ES_TRY(es__gguf_get_f32(L->g, key, required && !L->vocab_only, &v, L->err));
    if (!kv) return ES_OK;
    ES_RETURN_IF(!(v > 0.0f) || !isfinite(v), L->err, ES_ERR_MODEL,
                 "metadata key '%s' (offset %" PRIu64 ") is %g: expected a positive finite number", key, kv->offset,
                 (double)v);
    *out = v;
    return ES_OK;
}

/* A finite float hyperparameter in [lo, hi] (absent = *out untouched). */
static es_status hp_f32_in(loader *L, const char *name, float lo, float hi, float *out) {
    const char *key = akey(L, name);
    const es__gguf_kv *kv = es__gguf_find(L->g, key);
    if (!kv) return ES_OK;
    float v = 0;
    ES_TRY(es__gguf_get_f32(L->g, key, true, &v, L->err));
    ES_RETURN_IF(!(v >= lo && v <= hi), L->err, ES_ERR_MODEL,
                 "metadata key '%s' (offset %" PRIu64 ") is %g: expected %g..%g", key, kv->offset, (double)v,
                 (double)lo, (double)hi);
    *out = v;
    return ES_OK;
}

/* YaRN's keys beyond the factor, with llama.cpp's defaults (ramp over the pairs that turn
 * between 32 and 1 times in the original context, fully extrapolating the fast pairs). */
static es_status read_yarn(loader *L, es__hparams *hp) {
    hp->yarn_ext_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    ES_TRY(hp_f32_in(L, "rope.scaling.yarn_ext_factor", 0.0f, 1.0f, &hp->yarn_ext_factor));
    ES_TRY(hp_f32(L, "rope.scaling.yarn_beta_fast", false, &hp->yarn_beta_fast));
    ES_TRY(hp_f32(L, "rope.scaling.yarn_beta_slow", false, &hp->yarn_beta_slow));
    /* DeepSeek's YaRN (a log multiplier: mscale / mscale_all_dim) scales the magnitude by another
     * rule; refused rather than run with the wrong one */
    float log_mul = 0.0f;
    ES_TRY(hp_f32_in(L, "rope.scaling.yarn_log_multiplier", -INFINITY, INFINITY, &log_mul));
    ES_RETURN_IF(log_mul != 0.0f, L->err, ES_ERR_UNSUPPORTED,
                 "metadata key '%s': YaRN with a log multiplier (DeepSeek's mscale) is not supported",
                 akey(L, "rope.scaling.yarn_log_multiplier"));
    return ES_OK;
}

static es_status read_rope(loader *L, es__hparams *hp) {
    hp->rope_freq_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rope_scaling = ES__ROPE_SCALING_NONE;
    hp->rope_attn_factor = 1.0f;
    hp->rope_n_ctx_orig = hp->n_ctx_train;
    ES_TRY(hp_f32(L, "rope.freq_base", false, &hp->rope_freq_base));
    /* rope.scaling.type "none" | "linear" (freq_scale = 1 / factor) | "yarn" | "longrope" (the
     * factors are phi3's rope_factors_* tensors); older files give only rope.scale_linear,
     * which means linear */
    es__str type = {"none", 4};
    ES_TRY(es__gguf_get_str(L->g, akey(L, "rope.scaling.type"), false, &type, L->err));
    float factor = 0.0f;
    if (es__str_eq(type, "linear") || es__str_eq(type, "yarn")) {
        hp->rope_scaling = es__str_eq(type, "yarn") ? ES__ROPE_SCALING_YARN : ES__ROPE_SCALING_LINEAR;
        ES_TRY(hp_f32(L, "rope.scaling.factor", !L->vocab_only, &factor));
    } else if (!es__str_eq(type, "none") && !es__str_eq(type, "longrope") && !L->vocab_only) {
        const es__gguf_kv *kv = es__gguf_find(L->g, akey(L, "rope.scaling.type"));
        return es__fail(L->err, ES_ERR_UNSUPPORTED,
                        "metadata key '%s' (offset %" PRIu64
                        "): RoPE scaling '%.*s' is not supported (none, linear, yarn, longrope)",
                        L->arch_key, kv->offset, (int)ES__MIN(type.len, 32), type.ptr);
    } else if (es__str_eq(type, "none")) {
        ES_TRY(hp_f32(L, "rope.scale_linear", false, &factor));
        if (factor > 0.0f) hp->rope_scaling = ES__ROPE_SCALING_LINEAR;
    } else if (es__str_eq(type, "longrope")) {
        hp->rope_scaling = ES__ROPE_SCALING_LONGROPE;
    }
    if (factor > 0.0f) hp->rope_freq_scale = 1.0f / factor;
    ES_TRY(hp_u32(L, "rope.scaling.original_context_length", false, INT32_MAX, &hp->rope_n_ctx_orig));
    ES_TRY(hp_f32(L, "rope.scaling.attn_factor", false, &hp->rope_attn_factor));
    if (hp->rope_scaling == ES__ROPE_SCALING_YARN) ES_TRY(read_yarn(L, hp));

    /* edgespec.rope.ordering: "norm" or "neox"; absent, the architecture's (arch.c) */
    hp->rope_type = hp->arch ? hp->arch->rope : ES_ROPE_NORM;
    es__str ord = {hp->rope_type == ES_ROPE_NEOX ? "neox" : "norm", 4};
    ES_TRY(es__gguf_get_str(L->g, "edgespec.rope.ordering", false, &ord, L->err));
    if (es__str_eq(ord, "neox")) {
        hp->rope_type = ES_ROPE_NEOX;
    } else if (!es__str_eq(ord, "norm") && !L->vocab_only) {
        const es__gguf_kv *kv = es__gguf_find(L->g, "edgespec.rope.ordering");
        return es__fail(L->err, ES_ERR_UNSUPPORTED,
                        "metadata key 'edgespec.rope.ordering' (offset %" PRIu64 ") is '%.*s': expected 'norm' or 'neox'",
                        kv->offset, (int)ES__MIN(ord.len, 32), ord.ptr);
    }
    return ES_OK;
}

/* Consistency of the hyperparameters with each other (not for vocab-only loads). */
static es_status check_hparams(loader *L, const es__hparams *hp, bool has_key_length) {
    const char *arch = L->m->arch;
    ES_RETURN_IF(hp->n_head % hp->n_head_kv != 0, L->err, ES_ERR_MODEL,
                 "%s.attention.head_count %d is not a multiple of %s.attention.head_count_kv %d", arch, hp->n_head,
                 arch, hp->n_head_kv);
    ES_RETURN_IF(!has_key_length && hp->n_embd % hp->n_head != 0, L->err, ES_ERR_MODEL,
                 "%s.embedding_length %d is not a multiple of %s.attention.head_count %d (set "
                 "%s.attention.key_length for another head size)",
                 arch, hp->n_embd, arch, hp->n_head, arch);
    ES_RETURN_IF(hp->head_dim < 1 || hp->head_dim > MAX_HEAD_DIM, L->err, ES_ERR_MODEL,
                 "head size %d outside 1..%d", hp->head_dim, MAX_HEAD_DIM);
    ES_RETURN_IF(hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0, L->err, ES_ERR_MODEL,
                 "%s.rope.dimension_count %d: expected an even number in 2..head size %d", arch, hp->n_rot,
                 hp->head_dim);
    return ES_OK;
}

/* granite's multipliers (arch.h mup_scales), each a required positive number; an attention
 * scale of 0 means llama's 1/sqrt(head_dim), as llama.cpp reads it. */
static es_status read_mup_scales(loader *L, es__hparams *hp) {
    const char *key = akey(L, "attention.scale");
    float attn = 0.0f, logit = 1.0f;
    ES_TRY(es__gguf_get_f32(L->g, key, !L->vocab_only, &attn, L->err));
    const es__gguf_kv *kv = es__gguf_find(L->g, key);
    ES_RETURN_IF(!(attn >= 0.0f) || !isfinite(attn), L->err, ES_ERR_MODEL,
                 "metadata key '%s' (offset %" PRIu64 ") is %g: expected 0 or a positive finite number", key,
                 kv ? kv->offset : 0, (double)attn);
    if (attn > 0.0f) hp->attn_scale = attn;
    ES_TRY(hp_f32(L, "embedding_scale", true, &hp->embd_scale));
    ES_TRY(hp_f32(L, "residual_scale", true, &hp->residual_scale));
    ES_TRY(hp_f32(L, "logit_scale", true, &logit));
    hp->logit_mul = 1.0f / logit;
    return ES_OK;
}

/* The values of the architecture's extra steps (arch.h), from its <arch>.* keys. */
static es_status read_arch_values(loader *L, es__hparams *hp) {
    const es__arch *a = hp->arch;
    hp->embd_scale = a && a->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->attn_scale = hp->head_dim > 0 ? 1.0f / sqrtf((float)hp->head_dim) : 1.0f;
    if (a && a->qscale_layers > 0 && hp->n_layer == a->qscale_layers && hp->n_head > 0)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    hp->residual_scale = hp->logit_mul = 1.0f;
    if (a && a->mup_scales) ES_TRY(read_mup_scales(L, hp));
    hp->attn_softcap = hp->final_softcap = 0.0f;
    if (a && a->softcap) {
        /* llama.cpp's values when a gemma2 file leaves the keys out */
        hp->attn_softcap = 50.0f;
        hp->final_softcap = 30.0f;
        ES_TRY(hp_f32(L, "attn_logit_softcapping", false, &hp->attn_softcap));
        ES_TRY(hp_f32(L, "final_logit_softcapping", false, &hp->final_softcap));
    }
    hp->n_swa = 0;
    hp->rope_freq_base_swa = 0.0f;
    if (a && a->swa_rope_base > 0.0f) { /* gemma3: llama.cpp requires the window */
        hp->rope_freq_base_swa = a->swa_rope_base;
        ES_TRY(hp_f32(L, "rope.freq_base_swa", false, &hp->rope_freq_base_swa));
        return hp_u32(L, "attention.sliding_window", true, INT32_MAX, &hp->n_swa);
    }
    /* 0 means no window: the phi3 converter writes it so for Phi-4-mini */
    const char *key = akey(L, "attention.sliding_window");
    if (es__gguf_find(L->g, key) && !L->vocab_only) {
        uint32_t v = 0;
        ES_TRY(es__gguf_get_u32(L->g, key, true, &v, L->err));
        if (v == 0) return ES_OK;
    }
    return hp_u32(L, "attention.sliding_window", false, INT32_MAX, &hp->n_swa);
}

static es_status read_hparams(loader *L) {
    es__hparams *hp = &L->m->hp;
    ES_TRY(hp_u32(L, "context_length", true, INT32_MAX, &hp->n_ctx_train));
    ES_TRY(hp_u32(L, "embedding_length", true, MAX_EMBD, &hp->n_embd));
    ES_TRY(hp_u32(L, "block_count", true, MAX_LAYER, &hp->n_layer));
    ES_TRY(hp_u32(L, "feed_forward_length", true, MAX_FF, &hp->n_ff));
    ES_TRY(hp_u32(L, "attention.head_count", true, MAX_HEAD, &hp->n_head));
    hp->n_head_kv = hp->n_head;
    ES_TRY(hp_u32(L, "attention.head_count_kv", false, MAX_HEAD, &hp->n_head_kv));
    hp->rms_eps = 1e-5f;
    ES_TRY(hp_f32(L, "attention.layer_norm_rms_epsilon", true, &hp->rms_eps));
    int32_t k_len = 0, v_len = 0;
    ES_TRY(hp_u32(L, "attention.key_length", false, MAX_HEAD_DIM, &k_len));
    ES_TRY(hp_u32(L, "attention.value_length", false, MAX_HEAD_DIM, &v_len));
    int32_t def = hp->n_head > 0 ? hp->n_embd / hp->n_head : 0;
    int32_t kd = k_len ? k_len : def, vd = v_len ? v_len : def;
    ES_RETURN_IF(kd != vd && !L->vocab_only, L->err, ES_ERR_UNSUPPORTED,
                 "%s.attention.key_length %d differs from %s.attention.value_length %d: not supported", L->m->arch, kd,
                 L->m->arch, vd);
    hp->head_dim = kd;
    hp->n_rot = hp->head_dim;
    ES_TRY(hp_u32(L, "rope.dimension_count", false, MAX_HEAD_DIM, &hp->n_rot));
    ES_TRY(read_rope(L, hp));
    ES_TRY(read_arch_values(L, hp));

    /* the vocabulary size is the tokenizer's; llama.vocab_size, when present, must agree */
    if (!L->vocab_only && es__vocab_type(L->m->vocab) == ES_TOKENIZER_NONE) {
        /* say what is missing rather than let the sizes below disagree with a count of 0 */
        const es__gguf_kv *kv = es__gguf_find(L->g, "tokenizer.ggml.model");
        es__str model = {"", 0};
        if (kv) es__gguf_get_str(L->g, "tokenizer.ggml.model", false, &model, L->err);
        if (!kv)
            return es__fail(L->err, ES_ERR_MODEL,
                            "tokenizer.ggml.model is missing: edgespec needs the model's tokenizer ('llama' or "
                            "'gpt2') to run it");
        return es__fail(L->err, ES_ERR_MODEL,
                        "tokenizer.ggml.model is '%.*s' (offset %" PRIu64 "): the model has no tokenizer, and "
                        "edgespec needs one ('llama' or 'gpt2') to run it",
                        (int)ES__MIN(model.len, 32u), model.ptr, kv->offset);
    }
    hp->n_vocab = es__vocab_n_tokens(L->m->vocab);
    int32_t vs = 0;
    ES_TRY(hp_u32(L, "vocab_size", false, INT32_MAX, &vs));
    ES_RETURN_IF(vs && vs != hp->n_vocab, L->err, ES_ERR_MODEL,
                 "%s.vocab_size %d disagrees with tokenizer.ggml.tokens, which has %d tokens", L->m->arch, vs,
                 hp->n_vocab);
    return L->vocab_only ? ES_OK : check_hparams(L, hp, k_len != 0);
}

/* ---- tensors */

typedef enum role { ROLE_NORM, ROLE_MATRIX } role;

typedef struct want {
    const char *what; /* expected shape in words, for messages */
    int64_t ne0, ne1;
} want;

static void fmt_shape(char *buf, size_t size, const int64_t *ne, int n) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < n && o < size; d++) o += (size_t)snprintf(buf + o, size - o, "%s%" PRId64, d ? ", " : "", ne[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

/* Finds name and checks its role's types and its shape; *out NULL when absent and optional. */
static es_status get_tensor(loader *L, bool *used, const char *name, role r, want w, bool required,
                            const es__tensor **out) {
    es_model *m = L->m;
    *out = NULL;
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const es__tensor *t = &m->tensors[i];
        if (strcmp(t->name, name) != 0) continue;
        es__dtype_traits tr;
        es__dtype_info(t->type, &tr);
        ES_RETURN_IF(r == ROLE_NORM && t->type != ES__DTYPE_F32, L->err, ES_ERR_UNSUPPORTED,
                     "tensor '%s' (file offset %" PRIu64 ") has type %s: norm weights and biases must be f32", name,
                     t->file_offset, tr.name);
        int64_t expect[4] = {w.ne0, w.ne1 > 0 ? w.ne1 : 1, 1, 1};
        if (memcmp(t->ne, expect, sizeof expect) != 0) {
            char got[96], exp[96];
            fmt_shape(got, sizeof got, t->ne, t->n_dims);
            fmt_shape(exp, sizeof exp, expect, w.ne1 > 0 ? 2 : 1);
            return es__fail(L->err, ES_ERR_MODEL,
                            "tensor '%s' has shape %s, expected %s (%s) from the hyperparameters", name, got, exp,
                            w.what);
        }
        used[i] = true;
        *out = t;
        return ES_OK;
    }
    ES_RETURN_IF(required, L->err, ES_ERR_MODEL, "missing tensor '%s' (%s %s)", name, r == ROLE_NORM ? "norm" : "matrix",
                 w.what);
    return ES_OK;
}

/* A view of rows [row0, row0 + rows) of fused tensor t (rows are independent in every type). */
static const es__tensor *row_view(const es__tensor *t, int64_t row0, int64_t rows, es__tensor *view) {
    const uint64_t rb = t->nbytes / (uint64_t)t->ne[1];
    *view = *t;
    view->ne[1] = rows;
    view->nbytes = rb * (uint64_t)rows;
    view->file_offset = t->file_offset + rb * (uint64_t)row0;
    view->data = t->data ? (const uint8_t *)t->data + rb * (uint64_t)row0 : NULL;
    return view;
}

/* One layer's tensors as the architecture names them (arch.h; docs/formats.md). */
static es_status bind_layer(loader *L, bool *used, int32_t il, es__layer *ly) {
    const es__hparams *hp = &L->m->hp;
    const es__arch *a = hp->arch;
    const int64_t d = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    const es__tensor *qkv = NULL, *gate_up = NULL;
    struct {
        const char *suffix;
        role r;
        want w;
        const es__tensor **slot;
        bool on;
    } spec[] = {
        {"attn_norm.weight", ROLE_NORM, {"n_embd", d, 0}, &ly->attn_norm, true},
        {"attn_q.weight", ROLE_MATRIX, {"n_embd, n_head * head_dim", d, qd}, &ly->wq, !a->fused_qkv},
        {"attn_k.weight", ROLE_MATRIX, {"n_embd, n_head_kv * head_dim", d, kvd}, &ly->wk, !a->fused_qkv},
        {"attn_v.weight", ROLE_MATRIX, {"n_embd, n_head_kv * head_dim", d, kvd}, &ly->wv, !a->fused_qkv},
        {"attn_qkv.weight", ROLE_MATRIX, {"n_embd, (n_head + 2 n_head_kv) * head_dim", d, qd + 2 * kvd}, &qkv,
         a->fused_qkv},
        {"attn_q.bias", ROLE_NORM, {"n_head * head_dim", qd, 0}, &ly->bq, a->qkv_bias},
        {"attn_k.bias", ROLE_NORM, {"n_head_kv * head_dim", kvd, 0}, &ly->bk, a->qkv_bias},
        {"attn_v.bias", ROLE_NORM, {"n_head_kv * head_dim", kvd, 0}, &ly->bv, a->qkv_bias},
        {"attn_q_norm.weight", ROLE_NORM, {"head_dim", hp->head_dim, 0}, &ly->q_norm, a->qk_norm},
        {"attn_k_norm.weight", ROLE_NORM, {"head_dim", hp->head_dim, 0}, &ly->k_norm, a->qk_norm},
        {"attn_output.weight", ROLE_MATRIX, {"n_head * head_dim, n_embd", qd, d}, &ly->wo, true},
        {"post_attention_norm.weight", ROLE_NORM, {"n_embd", d, 0}, &ly->post_attn_norm, a->post_norms},
        {"ffn_norm.weight", ROLE_NORM, {"n_embd", d, 0}, &ly->ffn_norm, true},
        {"ffn_gate.weight", ROLE_MATRIX, {"n_embd, n_ff", d, hp->n_ff}, &ly->ffn_gate, !a->fused_gate_up},
        {"ffn_up.weight", ROLE_MATRIX, {"n_embd, n_ff", d, hp->n_ff}, &ly->ffn_up, !a->fused_gate_up},
        {"ffn_up.weight", ROLE_MATRIX, {"n_embd, 2 n_ff: gate rows, then up rows", d, 2 * (int64_t)hp->n_ff}, &gate_up,
         a->fused_gate_up},
        {"ffn_down.weight", ROLE_MATRIX, {"n_ff, n_embd", hp->n_ff, d}, &ly->ffn_down, true},
        {"post_ffw_norm.weight", ROLE_NORM, {"n_embd", d, 0}, &ly->post_ffn_norm, a->post_norms},
    };
    char name[80];
    for (size_t k = 0; k < ES__ARRAY_LEN(spec); k++) {
        if (!spec[k].on) continue;
        snprintf(name, sizeof name, "blk.%d.%s", il, spec[k].suffix);
        ES_TRY(get_tensor(L, used, name, spec[k].r, spec[k].w, true, spec[k].slot));
    }
    if (qkv) {
        ly->wq = row_view(qkv, 0, qd, &ly->views[0]);
        ly->wk = row_view(qkv, qd, kvd, &ly->views[1]);
        ly->wv = row_view(qkv, qd + kvd, kvd, &ly->views[2]);
    }
    if (gate_up) {
        ly->ffn_gate = row_view(gate_up, 0, hp->n_ff, &ly->views[3]);
        ly->ffn_up = row_view(gate_up, hp->n_ff, hp->n_ff, &ly->views[4]);
    }
    return ES_OK;
}

/* Views of every tensor in the file, with NUL-terminated names. */
static es_status list_tensors(loader *L) {
    es_model *m = L->m;
    const es__gguf *g = L->g;
    ES_RETURN_IF(g->n_tensors > INT32_MAX, L->err, ES_ERR_UNSUPPORTED, "%" PRIu64 " tensors are too many",
                 g->n_tensors);
    m->tensors = es__calloc(m->alloc, (size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *m->tensors);
    ES_RETURN_IF(!m->tensors, L->err, ES_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " tensors", g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const es__gguf_tensor *gt = &g->tensors[i];
        es__tensor *t = &m->tensors[i];
        t->name = es__strndup(m->alloc, gt->name.ptr, (size_t)gt->name.len);
        ES_RETURN_IF(!t->name, L->err, ES_ERR_OUT_OF_MEMORY, "out of memory for tensor names");
        m->n_tensors = (int32_t)i + 1;
        t->type = gt->type;
        t->n_dims = (int32_t)gt->n_dims;
        memcpy(t->ne, gt->ne, sizeof t->ne);
        t->data = L->vocab_only ? NULL : gt->data;
        t->nbytes = gt->nbytes;
        t->file_offset = g->data_offset + gt->rel_offset;
    }
    return ES_OK;
}

static void count(es_model *m, const es__tensor *t) {
    m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    m->weight_bytes += t->nbytes;
}

/* A per-pair divisor tensor (n_rot / 2 f32 values, positive and finite), or NULL when absent. */
static es_status get_divisors(loader *L, bool *used, const char *name, const float **out) {
    const es__tensor *t = NULL;
    const int32_t half = L->m->hp.n_rot / 2;
    ES_TRY(get_tensor(L, used, name, ROLE_NORM, (want){"n_rot / 2", half, 0}, false, &t));
    *out = t ? t->data : NULL;
    for (int32_t i = 0; t && t->data && i < half; i++) {
        float v; /* memcpy: a file with general.alignment below 4 may leave the data unaligned */
        memcpy(&v, (const uint8_t *)t->data + 4 * (size_t)i, sizeof v);
        ES_RETURN_IF(!(v > 0.0f) || !isfinite(v), L->err, ES_ERR_MODEL,
                     "tensor '%s' (file offset %" PRIu64 ") element %d is %g: expected a positive finite divisor",
                     name, t->file_offset, i, (double)v);
    }
    return ES_OK;
}

/* RoPE's per-pair frequency divisors: llama 3.1/3.2's rope_freqs (the converter writes them for
 * rope type llama3), or phi3 LongRoPE's short and long factors, which come as a pair. */
static es_status bind_rope_divisors(loader *L, bool *used) {
    es__hparams *hp = &L->m->hp;
    ES_TRY(get_divisors(L, used, "rope_freqs.weight", &hp->rope_freqs));
    ES_TRY(get_divisors(L, used, "rope_factors_long.weight", &hp->rope_long));
    ES_TRY(get_divisors(L, used, "rope_factors_short.weight", &hp->rope_short));
    const bool has_long = es__gguf_find_tensor(L->g, "rope_factors_long.weight") != NULL,
               has_short = es__gguf_find_tensor(L->g, "rope_factors_short.weight") != NULL;
    ES_RETURN_IF(has_long != has_short, L->err, ES_ERR_MODEL,
                 "tensor '%s' without '%s': LongRoPE needs the long and the short factors",
                 has_long ? "rope_factors_long.weight" : "rope_factors_short.weight",
                 has_long ? "rope_factors_short.weight" : "rope_factors_long.weight");
    ES_RETURN_IF(hp->rope_scaling == ES__ROPE_SCALING_LONGROPE && !has_long, L->err, ES_ERR_MODEL,
                 "metadata key '%s.rope.scaling.type' is 'longrope' but the file has no rope_factors_long/short.weight",
                 L->m->arch);
    ES_RETURN_IF(has_long && es__gguf_find_tensor(L->g, "rope_freqs.weight") != NULL, L->err, ES_ERR_MODEL,
                 "tensor 'rope_freqs.weight' together with LongRoPE's 'rope_factors_long.weight': two sets of "
                 "per-pair divisors");
    return ES_OK;
}

static es_status bind_tensors(loader *L) {
    es_model *m = L->m;
    const es__hparams *hp = &m->hp;
    bool *used = es__calloc(m->alloc, (size_t)(m->n_tensors ? m->n_tensors : 1), sizeof *used);
    m->layers = es__calloc(m->alloc, (size_t)hp->n_layer, sizeof *m->layers);
    es_status s = ES_OK;
    if (!used || !m->layers) s = es__fail(L->err, ES_ERR_OUT_OF_MEMORY, "out of memory for %d layers", hp->n_layer);
    const int64_t d = hp->n_embd, nv = hp->n_vocab;
    if (s == ES_OK)
        s = get_tensor(L, used, "token_embd.weight", ROLE_MATRIX, (want){"n_embd, n_vocab", d, nv}, true, &m->tok_embd);
    if (s == ES_OK)
        s = get_tensor(L, used, "output_norm.weight", ROLE_NORM, (want){"n_embd", d, 0}, true, &m->output_norm);
    if (s == ES_OK)
        s = get_tensor(L, used, "output.weight", ROLE_MATRIX, (want){"n_embd, n_vocab", d, nv}, false, &m->output);
    if (s == ES_OK) s = bind_rope_divisors(L, used);
    for (int32_t il = 0; s == ES_OK && il < hp->n_layer; il++) s = bind_layer(L, used, il, &m->layers[il]);
    if (s == ES_OK) {
        m->tied_output = m->output == NULL;
        if (m->tied_output) m->output = m->tok_embd;
        for (int32_t i = 0; s == ES_OK && i < m->n_tensors; i++) {
            const es__tensor *t = &m->tensors[i];
            long blk = -1;
            if (used[i])
                count(m, t);
            else if (strncmp(t->name, "rope_factors", 12) == 0)
                /* per-pair factors other than LongRoPE's long and short: the angles would be wrong
                 * without them */
                s = es__fail(L->err, ES_ERR_UNSUPPORTED,
                             "tensor '%s' (file offset %" PRIu64 "): RoPE factors other than "
                             "rope_factors_long/short.weight are not supported",
                             t->name, t->file_offset);
            else if (sscanf(t->name, "blk.%ld.", &blk) == 1 && blk >= hp->n_layer)
                /* a layer the hyperparameters do not count: a block_count that lies would run a
                 * model with its top layers silently cut off */
                s = es__fail(L->err, ES_ERR_MODEL,
                             "tensor '%s' (file offset %" PRIu64 ") is for block %ld, but %s.block_count is %d",
                             t->name, t->file_offset, blk, m->arch, hp->n_layer);
            else
                es__logf(&m->log, ES_LOG_DEBUG, "model '%s': tensor '%s' is not used by the %s architecture", m->path,
                         t->name, m->arch);
        }
    }
    es__free(m->alloc, used);
    return s;
}

/* Reads one byte per page of every weight so the load, not the first forward call, pays for
 * faulting the mapping in; reports progress over the bytes. */
static es_status touch_weights(loader *L, es_progress_fn fn, void *user) {
    es_model *m = L->m;
    uint64_t total = 0, done = 0, next_report = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) total += m->tensors[i].nbytes;
    volatile uint8_t sink = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) {
        const es__tensor *t = &m->tensors[i];
        const volatile uint8_t *p = t->data;
        for (uint64_t o = 0; o < t->nbytes; o += TOUCH_STRIDE) sink ^= p[o];
        done += t->nbytes;
        if (fn && (done >= next_report || i + 1 == m->n_tensors)) {
            next_report = done + (16u << 20);
            ES_RETURN_IF(!fn(0.1f + 0.9f * (float)((double)done / (double)(total ? total : 1)), user), L->err,
                         ES_ERR_CANCELLED, "loading '%s' was cancelled by the progress callback", m->path);
        }
    }
    (void)sink;
    return ES_OK;
}

static char *dup_str(es_model *m, es__str s) {
    return es__strndup(m->alloc, s.ptr, (size_t)s.len);
}

/* mem: a borrowed file image, or NULL to map path. */
static es_status load(es_model *m, const char *path, const es__file_map *mem, const es_model_params *p) {
    es__err *err = &m->err;
    if (mem) {
        m->map = *mem;
        m->map_borrowed = true;
    } else {
        int e = es__file_map_open(path, !p->no_mmap, &m->map);
        ES_RETURN_IF(e != 0, err, ES_ERR_IO, "'%s': %s", path, es__file_strerror(e));
    }
    if (p->progress_fn)
        ES_RETURN_IF(!p->progress_fn(0.0f, p->progress_user), err, ES_ERR_CANCELLED,
                     "loading '%s' was cancelled by the progress callback", path);
    ES_TRY(es__gguf_parse(m->map.data, m->map.size, m->alloc, err, &m->gguf));
    loader L = {m, m->gguf, err, p->vocab_only, ""};
    es__str arch = {0}, name = {"", 0};
    ES_TRY(es__gguf_get_str(L.g, "general.architecture", true, &arch, err));
    ES_TRY(es__gguf_get_str(L.g, "general.name", false, &name, err));
    m->arch = dup_str(m, arch);
    m->name = dup_str(m, name);
    ES_RETURN_IF(!m->arch || !m->name, err, ES_ERR_OUT_OF_MEMORY, "out of memory");
    /* the name as C text first: "llama\0x" must not pass for (or be called) 'llama' */
    const uint64_t arch_at = es__gguf_find(L.g, "general.architecture")->offset;
    ES_RETURN_IF(strlen(m->arch) != arch.len, err, ES_ERR_FORMAT,
                 "general.architecture (offset %" PRIu64 ") has a NUL byte after '%s' (%zu of its %" PRIu64
                 " bytes): not a valid name",
                 arch_at, m->arch, strlen(m->arch), arch.len);
    ES_RETURN_IF(arch.len > 64, err, ES_ERR_FORMAT,
                 "general.architecture (offset %" PRIu64 ") is %" PRIu64 " bytes long: not a valid name", arch_at,
                 arch.len);
    m->hp.arch = es__arch_find(m->arch);
    ES_RETURN_IF(!L.vocab_only && !m->hp.arch, err, ES_ERR_UNSUPPORTED,
                 "general.architecture is '%s': edgespec runs %s models (load with vocab_only for the "
                 "tokenizer alone)",
                 m->arch, es__arch_names());
    ES_TRY(es__vocab_load(L.g, m->alloc, err, &m->vocab));
    m->tokenizer_pre = es__strndup(m->alloc, es__vocab_pre(m->vocab), strlen(es__vocab_pre(m->vocab)));
    ES_RETURN_IF(!m->tokenizer_pre, err, ES_ERR_OUT_OF_MEMORY, "out of memory");
    ES_TRY(read_hparams(&L));
    ES_TRY(list_tensors(&L));
    if (p->progress_fn)
        ES_RETURN_IF(!p->progress_fn(0.1f, p->progress_user), err, ES_ERR_CANCELLED,
                     "loading '%s' was cancelled by the progress callback", path);
    if (L.vocab_only) {
        if (p->progress_fn) p->progress_fn(1.0f, p->progress_user);
        return ES_OK;
    }
    ES_TRY(bind_tensors(&L));
    m->has_weights = true;
    ES_TRY(touch_weights(&L, p->progress_fn, p->progress_user));
    return ES_OK;
}

/* The one place the zeros of es_model_params get their meaning (NULL is all zeros). Only the log
 * level needs one: every other zero is already what the loader does by default. */
static es_model_params resolve_params(const es_model_params *params) {
    es_model_params p = params ? *params : es_model_default_params();
    p.log_level = es__log_level(p.log_level);
    return p;
}

static es_status create(const char *path, const es__file_map *mem, const es_model_params *params, es_model **out) {
    if (params) ES_TRY(ES__CHECK_RESERVED(params, "es_model_params", NULL));
    const es_model_params p = resolve_params(params);
    es_model *m = es__calloc(p.allocator, 1, sizeof *m);
    if (!m) return es__fail(NULL, ES_ERR_OUT_OF_MEMORY, "es_model_load: out of memory");
    if (p.allocator) {
        m->alloc_copy = *p.allocator;
        m->alloc = &m->alloc_copy;
    }
    m->log = (es__log){p.log_fn, p.log_user, p.log_level};
    m->path = es__strndup(m->alloc, path, strlen(path));
    es_status s = m->path ? load(m, path, mem, &p) : es__fail(&m->err, ES_ERR_OUT_OF_MEMORY, "es_model_load: out of memory");
    if (s != ES_OK) {
        char msg[ES__ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "%s", m->err.msg);
        es__logf(&m->log, ES_LOG_ERROR, "%s", msg);
        es_model_free(m);
        /* the message names the file once, whichever layer produced it */
        if (strstr(msg, path)) return es__fail(NULL, s, "%s", msg);
        return es__fail(NULL, s, "'%s': %s", path, msg);
    }
    es__logf(&m->log, ES_LOG_INFO,
             "model '%s': %s '%s', %d layers, n_embd %d, %d heads (%d kv), n_ff %d, vocab %d, %" PRIu64
             " parameters in %" PRIu64 " bytes%s",
             path, m->arch, m->name, m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv, m->hp.n_ff,
             m->hp.n_vocab, m->n_params, m->weight_bytes, m->has_weights ? "" : " (vocabulary only)");
    *out = m;
    return ES_OK;
}

es_status es_model_load(const char *path, const es_model_params *params, es_model **out) {
    if (!out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_load: out is NULL");
    *out = NULL;
    if (!path) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_load: path is NULL");
    return create(path, NULL, params, out);
}

es_status es__model_load_mem(const uint8_t *data, uint64_t size, const char *name, const es_model_params *params,
                             es_model **out) {
    if (!out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es__model_load_mem: out is NULL");
    *out = NULL;
    if (!name || (!data && size)) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es__model_load_mem: NULL argument");
    es__file_map mem = {size ? data : NULL, size, false};
    return create(name, &mem, params, out);
}

/* ---- info */

es_status es_model_get_info(const es_model *m, es_model_info *out) {
    if (!m || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_get_info: NULL argument");
    es_model_info i;
    memset(&i, 0, sizeof i);
    const es__hparams *hp = &m->hp;
    i.architecture = m->arch;
    i.name = m->name;
    i.path = m->path;
    i.gguf_version = m->gguf ? m->gguf->version : 0;
    i.n_vocab = hp->n_vocab;
    i.n_ctx_train = hp->n_ctx_train;
    i.n_embd = hp->n_embd;
    i.n_layer = hp->n_layer;
    i.n_head = hp->n_head;
    i.n_head_kv = hp->n_head_kv;
    i.n_ff = hp->n_ff;
    i.head_dim = hp->head_dim;
    i.n_rot = hp->n_rot;
    i.rope_freq_base = hp->rope_freq_base;
    i.rope_freq_scale = hp->rope_freq_scale;
    i.rms_norm_eps = hp->rms_eps;
    i.rope_type = hp->rope_type;
    i.tied_output = m->tied_output;
    i.has_weights = m->has_weights;
    i.tokenizer = m->vocab ? es__vocab_type(m->vocab) : ES_TOKENIZER_NONE;
    i.tokenizer_pre = m->tokenizer_pre ? m->tokenizer_pre : "default";
    i.bos_id = m->vocab ? es__vocab_bos(m->vocab) : -1;
    i.eos_id = m->vocab ? es__vocab_eos(m->vocab) : -1;
    i.n_params = m->n_params;
    i.weight_bytes = m->weight_bytes;
    i.n_tensors = m->n_tensors;
    i.has_ss_adapter = m->ss != NULL;
    static const char *const scalings[] = {"none", "linear", "yarn", "longrope"};
    /* the per-pair divisor tensors act whatever rope.scaling.type says (rope.c) */
    i.rope_scaling = hp->rope_long && hp->rope_short ? "longrope"
                     : hp->rope_freqs && hp->rope_scaling == ES__ROPE_SCALING_NONE ? "freqs"
                                                                                   : scalings[hp->rope_scaling];
    i.rope_n_ctx_orig = hp->rope_n_ctx_orig;
    i.rope_attn_factor = hp->rope_attn_factor > 0.0f ? hp->rope_attn_factor : 1.0f;
    *out = i;
    return ES_OK;
}

es_status es_model_tensor_info(const es_model *m, int32_t index, es_tensor_info *out) {
    if (!m || !out) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_tensor_info: NULL argument");
    if (index < 0 || index >= m->n_tensors)
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_tensor_info: index %d outside [0, %d)", index,
                        m->n_tensors);
    const es__tensor *t = &m->tensors[index];
    es__dtype_traits tr;
    es__dtype_info(t->type, &tr);
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->type = tr.name;
    out->n_dims = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->offset = t->file_offset;
    out->nbytes = t->nbytes;
    return ES_OK;
}

/* ---- metadata as text */

typedef struct textbuf {
    char *buf;
    size_t size, len; /* len may exceed size: the length needed */
} textbuf;

static void tb_put(textbuf *b, const char *s, size_t n) {
    if (b->len < b->size) {
        size_t k = ES__MIN(n, b->size - b->len);
        memcpy(b->buf + b->len, s, k);
    }
    b->len += n;
}

static void tb_printf(textbuf *b, const char *fmt, ...) ES__PRINTF(2, 3);
static void tb_printf(textbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    tb_put(b, tmp, n > 0 ? ES__MIN((size_t)n, sizeof tmp - 1) : 0);
}

static uint64_t ld_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* One value of a fixed-size type at p. */
static void put_scalar(textbuf *b, es__gguf_vtype t, const uint8_t *p) {
    switch (t) {
    case ES__GGUF_UINT8: tb_printf(b, "%u", p[0]); break;
    case ES__GGUF_INT8: tb_printf(b, "%d", (int8_t)p[0]); break;
    case ES__GGUF_UINT16: tb_printf(b, "%u", (unsigned)ld_le(p, 2)); break;
    case ES__GGUF_INT16: tb_printf(b, "%d", (int16_t)ld_le(p, 2)); break;
    case ES__GGUF_UINT32: tb_printf(b, "%" PRIu32, (uint32_t)ld_le(p, 4)); break;
    case ES__GGUF_INT32: tb_printf(b, "%" PRId32, (int32_t)ld_le(p, 4)); break;
    case ES__GGUF_UINT64: tb_printf(b, "%" PRIu64, ld_le(p, 8)); break;
    case ES__GGUF_INT64: tb_printf(b, "%" PRId64, (int64_t)ld_le(p, 8)); break;
    case ES__GGUF_BOOL: tb_printf(b, "%s", p[0] ? "true" : "false"); break;
    case ES__GGUF_FLOAT32: {
        uint32_t u = (uint32_t)ld_le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        tb_printf(b, "%.9g", (double)f);
        break;
    }
    case ES__GGUF_FLOAT64: {
        uint64_t u = ld_le(p, 8);
        double f;
        memcpy(&f, &u, 8);
        tb_printf(b, "%.17g", f);
        break;
    }
    default: break;
    }
}

static size_t vsize(es__gguf_vtype t) {
    switch (t) {
    case ES__GGUF_UINT8: case ES__GGUF_INT8: case ES__GGUF_BOOL: return 1;
    case ES__GGUF_UINT16: case ES__GGUF_INT16: return 2;
    case ES__GGUF_UINT32: case ES__GGUF_INT32: case ES__GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

es_status es_model_meta_str(const es_model *m, const char *key, char *buf, size_t buf_size) {
    if (!m || !key || (!buf && buf_size))
        return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_meta_str: NULL argument");
    const es__gguf_kv *kv = m->gguf ? es__gguf_find(m->gguf, key) : NULL;
    if (!kv) return es__fail(NULL, ES_ERR_INVALID_ARGUMENT, "es_model_meta_str: no metadata key '%s'", key);
    textbuf b = {buf, buf_size, 0};
    if (kv->type == ES__GGUF_STRING) {
        tb_put(&b, (const char *)kv->value + 8, (size_t)ld_le(kv->value, 8));
    } else if (kv->type != ES__GGUF_ARRAY) {
        put_scalar(&b, kv->type, kv->value);
    } else {
        /* arrays: "[n elements: first, second, ...]", at most 8 shown, strings quoted */
        static const char *const names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                            "bool", "string", "array", "uint64", "int64", "float64"};
        tb_printf(&b, "[%" PRIu64 " %s: ", kv->arr_n, names[kv->arr_type]);
        for (uint64_t j = 0; j < kv->arr_n && j < 8; j++) {
            if (j) tb_put(&b, ", ", 2);
            if (kv->arr_type == ES__GGUF_STRING) {
                tb_put(&b, "\"", 1);
                tb_put(&b, kv->strs[j].ptr, (size_t)ES__MIN(kv->strs[j].len, 64));
                tb_put(&b, kv->strs[j].len > 64 ? "...\"" : "\"", kv->strs[j].len > 64 ? 4 : 1);
            } else {
                put_scalar(&b, kv->arr_type, kv->value + j * vsize(kv->arr_type));
            }
        }
        tb_put(&b, kv->arr_n > 8 ? ", ...]" : "]", kv->arr_n > 8 ? 6 : 1);
    }
    if (b.len < buf_size) {
        buf[b.len] = '\0';
        return ES_OK;
    }
    if (buf_size) buf[buf_size - 1] = '\0';
    return es__fail(NULL, ES_ERR_BUFFER_TOO_SMALL, "es_model_meta_str: '%s' needs %zu bytes, the buffer has %zu", key,
                    b.len + 1, buf_size);
}
