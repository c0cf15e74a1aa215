/* mem_models.h: the in-memory models (mem_model.h) of the tests that compare the CPU backend with
 * itself (batch against one token, a session's replay or a shifted cache against a fresh prefill,
 * speculation against plain decoding): cpu_forward, session, context_shift, spec_stream,
 * spec_edit, spec_draft. Such a test passes whatever numbers the model gives, so every model here
 * is also checked against the independent numpy reference: mem_model_logits.c writes each one as
 * a llama GGUF file with its CPU logits, and test_mem_model_reference.py compares them with
 * tools/reference/llama_ref.py. A test that wants another model of its own adds it here and to
 * mem_model_logits.c's table, not inline. Values as mem_model_cfg orders them: n_vocab, n_embd,
 * n_layer, n_head, n_head_kv, head_dim, n_ff, n_rot, rope, freq_base, freq_scale, tied, type,
 * seed. */
#ifndef ES_TEST_MEM_MODELS_H
#define ES_TEST_MEM_MODELS_H

#include "mem_model.h"

/* cpu_forward: every weight type, odd sizes, GQA and not, tied and not, NORM and NEOX, partial
 * rotation and linear RoPE scaling */
#define MEM_CFG_FORWARD_F32 {67, 40, 2, 4, 2, 10, 72, 10, ES_ROPE_NEOX, 10000.f, 1.f, false, ES__DTYPE_F32, 1}
#define MEM_CFG_FORWARD_F16 {67, 40, 2, 4, 4, 10, 72, 6, ES_ROPE_NORM, 10000.f, 0.5f, true, ES__DTYPE_F16, 2}
#define MEM_CFG_FORWARD_BF16 {50, 48, 2, 6, 3, 8, 40, 8, ES_ROPE_NORM, 500000.f, 1.f, false, ES__DTYPE_BF16, 3}
#define MEM_CFG_FORWARD_Q8_0 {67, 64, 2, 4, 1, 16, 96, 16, ES_ROPE_NEOX, 10000.f, 1.f, false, ES__DTYPE_Q8_0, 4}
#define MEM_CFG_FORWARD_Q4_0 {67, 64, 2, 2, 2, 32, 96, 24, ES_ROPE_NORM, 10000.f, 1.f, true, ES__DTYPE_Q4_0, 5}

/* session: seed 51, and 52 for "another model of the same shapes" */
#define MEM_CFG_SESSION(seed) {61, 48, 2, 4, 2, 12, 64, 12, ES_ROPE_NEOX, 10000.0f, 1.0f, false, ES__DTYPE_F32, seed}

/* context_shift: one-layer models (NORM GQA; NEOX MHA with partial rotation, scaled; NEOX MQA
 * f16), with the RoPE variants of mem_model_set_rope; a two-layer tied one for the error paths, a
 * two-layer one for es_generate's shifts */
#define MEM_CFG_SHIFT_NORM {67, 48, 1, 4, 2, 12, 64, 12, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 41}
#define MEM_CFG_SHIFT_NEOX {67, 48, 1, 4, 4, 12, 64, 8, ES_ROPE_NEOX, 10000.0f, 0.5f, true, ES__DTYPE_F32, 42}
#define MEM_CFG_SHIFT_MQA {67, 64, 1, 4, 1, 16, 64, 16, ES_ROPE_NEOX, 500000.0f, 1.0f, false, ES__DTYPE_F16, 43}
#define MEM_CFG_SHIFT_ERRORS {50, 32, 2, 2, 2, 16, 48, 16, ES_ROPE_NORM, 10000.0f, 1.0f, true, ES__DTYPE_F32, 9}
#define MEM_CFG_SHIFT_GENERATE {61, 48, 2, 4, 2, 12, 64, 12, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 44}

/* spec_stream and spec_edit: a small vocabulary, so that drafts are often accepted (3 layers, with
 * the adapter MEM_ADAPTER_STREAM); spec_edit's drafter is its first layer (n_layer 1, same seed) */
#define MEM_CFG_STREAM(n_layer) {12, 32, n_layer, 4, 2, 8, 48, 8, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, 31}
/* their adapter (tests/spec/mem_adapter.h's mem_adapter_cfg: n_streams, n_msa, prune_layer,
 * prune_rank, lora_rank, scale, seed): its streams are test_msa's, against its reference */
#define MEM_ADAPTER_STREAM {4, 2, 1, 4, 2, 0.3f, 32}

/* spec_draft: the target (3 layers, seed 11), its first layer (1, 11) and an unrelated drafter
 * (1, 99) */
#define MEM_CFG_DRAFT(n_layer, seed) {97, 64, n_layer, 4, 2, 16, 96, 16, ES_ROPE_NORM, 10000.0f, 1.0f, false, ES__DTYPE_F32, seed}

/* context_shift's RoPE variants (rope.h), set on a model after mem_model_create: plain; llama 3's
 * per-pair frequency divisors (rope_freqs.weight); YaRN; phi3's LongRoPE (long factors: contexts
 * beyond the original 16; a file's LongRoPE has no linear scale besides, so none here either);
 * gemma3's sliding layers with a RoPE of their own (no llama file says so: not in the reference
 * check). */
typedef enum { MEM_ROPE_PLAIN, MEM_ROPE_LLAMA3, MEM_ROPE_YARN, MEM_ROPE_LONGROPE, MEM_ROPE_LOCAL } mem_rope_variant;

static const float mem_rope_divisors[8] = {1.0f, 1.2f, 1.9f, 3.0f, 5.1f, 8.0f, 9.0f, 11.0f};
static const float mem_rope_short[8] = {1.0f, 1.0f, 1.1f, 1.1f, 1.2f, 1.2f, 1.3f, 1.3f};

/* The tables above hold n_rot / 2 <= 8 pairs' values. */
static inline void mem_model_set_rope(es__hparams *hp, mem_rope_variant v) {
    if (v == MEM_ROPE_LLAMA3) hp->rope_freqs = mem_rope_divisors;
    if (v == MEM_ROPE_YARN) {
        hp->rope_scaling = ES__ROPE_SCALING_YARN;
        hp->rope_freq_scale = 0.25f;
        hp->rope_n_ctx_orig = 4096;
        hp->yarn_ext_factor = 1.0f;
        hp->yarn_beta_fast = 32.0f;
        hp->yarn_beta_slow = 1.0f;
    }
    if (v == MEM_ROPE_LONGROPE) {
        hp->rope_scaling = ES__ROPE_SCALING_LONGROPE;
        hp->rope_freq_scale = 1.0f;
        hp->rope_long = mem_rope_divisors;
        hp->rope_short = mem_rope_short;
        hp->rope_n_ctx_orig = 16;
        hp->rope_attn_factor = 1.3f;
    }
    if (v == MEM_ROPE_LOCAL) { /* their own base, unscaled; a window past the context */
        hp->rope_freq_base_swa = 1000.0f;
        hp->n_swa = 1000;
    }
}

#endif /* ES_TEST_MEM_MODELS_H */
