/* mkmodel.h: random-weights llama GGUF models, as edgespec-mkmodel writes them; also linked by
 * tests that need model files. Internal to edgespec's tools and tests (uses the es__ GGUF writer).
 *
 * Weights are uniform with standard deviation 1/sqrt(n_in) (output projections of each block a
 * further 1/sqrt(2 n_layer), GPT-2 style), so activations stay O(1) through any depth; norms are
 * 1 +- 0.1; every tensor has its own random stream keyed by (seed, tensor index), so a model is a
 * pure function of its parameters. The tokenizer is a synthetic llama (SentencePiece) vocabulary
 * built here, or the tokenizer.ggml.* keys copied from another GGUF file. */
#ifndef ES_TOOLS_MKMODEL_H
#define ES_TOOLS_MKMODEL_H

#include "gguf.h"

typedef struct es_mk_params {
    int32_t n_vocab;     /* tokens; ignored with vocab_path (the file's count is used)        */
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;   /* 0 = n_head                                                         */
    int32_t n_ff;
    int32_t n_ctx;       /* llama.context_length                                               */
    es__dtype type;      /* embedding, projections and output head; norms are always f32       */
    bool tied;           /* no output.weight: the head shares token_embd.weight                */
    es_rope_type rope;   /* NEOX writes edgespec.rope.ordering = "neox"                        */
    float freq_base;     /* llama.rope.freq_base                                               */
    float freq_base_swa; /* <arch>.rope.freq_base_swa (gemma3's sliding layers); 0 = not written    */
    float rms_eps;       /* llama.attention.layer_norm_rms_epsilon                             */
    uint64_t seed;
    const char *vocab_path; /* NULL = synthetic vocabulary                                     */
    const char *name;       /* general.name; NULL = "edgespec-random"                          */
    bool progress;          /* a progress line on stderr                                       */
    /* the architecture (docs/formats.md, "Architectures"): NULL = "llama"; the others add their
     * tensors (qwen2's Q/K/V biases, phi3's fused attn_qkv and gate-up, gemma2's post norms) */
    const char *arch;
    int32_t sliding_window; /* <arch>.attention.sliding_window; 0 = not written                   */
    float attn_softcap;     /* gemma2: <arch>.attn_logit_softcapping; 0 = not written            */
    float final_softcap;    /* gemma2: <arch>.final_logit_softcapping; 0 = not written           */
    bool rope_freqs;        /* rope_freqs.weight: llama 3's per-pair frequency divisors, rising
                               from 1 (fastest pair) to 8 (slowest) as their rope type's do       */
    int32_t head_dim;       /* 0 = n_embd / n_head; else written as <arch>.attention.key_length and
                               value_length (Gemma 2 2B: 8 heads of 256 on n_embd 2304)          */
    /* RoPE scaling (docs/formats.md, "RoPE scaling"): rope_scaling "linear" or "yarn" writes
     * <arch>.rope.scaling.type and .factor = rope_factor (NULL: not written); rope_orig_ctx > 0
     * writes .original_context_length; longrope writes phi3 LongRoPE's rope_factors_short/long
     * .weight and the attn_factor the converter derives from context_length / rope_orig_ctx */
    const char *rope_scaling;
    float rope_factor;
    int32_t rope_orig_ctx;
    bool longrope;
} es_mk_params;

/* Defaults: a tiny model (vocab 512, n_embd 64, 2 layers, 4 heads, n_ff 128, ctx 256, f32,
 * separate output, NORM RoPE, base 10000, eps 1e-5, seed 1). */
es_mk_params es_mk_default_params(void);

/* Fills p from a named benchmark shape ("24m", "134m", "853m"); false if unknown. Only the shape
 * fields change. */
bool es_mk_preset(const char *name, es_mk_params *p);

/* Sets p's RoPE scaling from "linear,FACTOR", "yarn,FACTOR,ORIGINAL_CONTEXT" or
 * "longrope,ORIGINAL_CONTEXT" (the --rope-scaling flag); false when spec is none of them. */
bool es_mk_parse_rope_scaling(const char *spec, es_mk_params *p);

/* Adds every key and tensor of the model to w. */
es_status es_mk_build(const es_mk_params *p, es__gguf_writer *w, es__err *err);

/* Builds and writes the model to path. */
es_status es_mk_write(const es_mk_params *p, const char *path, es__err *err);

/* The largest n_vocab the synthetic vocabulary reaches (its smallest is 260: <unk>, <s>, </s>,
 * the 256 byte tokens and the word-start piece). */
int32_t es_mk_max_vocab(void);

#endif /* ES_TOOLS_MKMODEL_H */
