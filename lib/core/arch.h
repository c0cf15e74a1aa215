/* arch.h: what sets one supported architecture apart from llama, as data the one forward pass
 * reads on every backend (docs/formats.md, "Architectures"). The table in arch.c says, per
 * general.architecture, which tensors a layer has and which steps the forward takes; the values
 * (soft-capping, the sliding window) come from the file's <arch>.* keys into es__hparams.
 * Not here: reading keys and binding tensors (model.c), computing (the backends). */
#ifndef ES_CORE_ARCH_H
#define ES_CORE_ARCH_H

#include "common.h"

typedef enum es__ffn_act {
    ES__ACT_SILU = 0, /* SwiGLU: silu(gate) * up                                   */
    ES__ACT_GELU = 1, /* GeGLU: gelu(gate) * up, gelu's tanh approximation           */
} es__ffn_act;

typedef struct es__arch {
    const char *name;       /* general.architecture                                        */
    es_rope_type rope;      /* the pairing llama.cpp uses for it (edgespec.rope.ordering overrides) */
    bool qkv_bias;          /* blk.N.attn_{q,k,v}.bias: added to the projections before RoPE */
    bool fused_qkv;         /* blk.N.attn_qkv.weight: the Q, K and V rows in one matrix      */
    bool fused_gate_up;     /* blk.N.ffn_up.weight has 2 n_ff rows, gate's then up's; no ffn_gate */
    bool post_norms;        /* blk.N.post_attention_norm / post_ffw_norm: RMSNorm of each branch
                               before its residual add                                       */
    bool embd_scale;        /* the embedding rows are multiplied by sqrt(n_embd)             */
    es__ffn_act act;
    int32_t swa_pattern;    /* with a sliding window: layer il slides iff il % swa_pattern <
                               swa_pattern - 1 (1: every layer; 2: even layers, gemma2's)      */
    bool softcap;           /* reads <arch>.attn_logit_softcapping and .final_logit_softcapping */
    int32_t qscale_layers;  /* a model of this many layers scales queries by (n_embd / n_head)^-1/2
                               instead of head_dim^-1/2 (Gemma 2 27B's query_pre_attn_scalar,
                               which no GGUF key carries; 0: none)                            */
    bool qk_norm;           /* blk.N.attn_q_norm / attn_k_norm: an RMSNorm of every Q and K head
                               (head_dim weights) after the biases, before RoPE               */
    float swa_rope_base;    /* > 0: the sliding layers rotate with a RoPE of their own, this
                               base (or <arch>.rope.freq_base_swa) and no scaling, and the
                               window is required (gemma3's local layers); 0: one RoPE      */
    int32_t nope_step;      /* > 0: layer il has no RoPE where (il + 1) % nope_step == 0
                               (smollm3: every fourth; no GGUF key says it)                  */
    bool mup_scales;        /* granite's four multipliers, from required keys: the embedding
                               (<arch>.embedding_scale), the attention scores (attention.scale),
                               each branch's output before its residual add (residual_scale),
                               and the logits (divided by logit_scale)                         */
} es__arch;

/* The description of arch (general.architecture), or NULL when edgespec does not run it. */
const es__arch *es__arch_find(const char *arch);

/* The supported names, comma separated, for messages. */
const char *es__arch_names(void);

#endif /* ES_CORE_ARCH_H */
