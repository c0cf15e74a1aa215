/* arch.c: the table of supported architectures (arch.h). Each row is a fact about how the
 * architecture's GGUF files are written by llama.cpp's converter and how llama.cpp runs them:
 * gemma's RMSNorm weights are stored with the +1 of (1 + w) already added, so every
 * architecture's norm is the plain x / rms(x) * w. */
#include "arch.h"

#include <string.h>

static const es__arch archs[] = {
    /* name      rope          bias   qkv    gateup post   escale act           swa softcap qscale qknorm swa-base nope mup */
    {"llama", ES_ROPE_NORM, false, false, false, false, false, ES__ACT_SILU, 1, false, 0, false, 0.0f, 0, false},
    {"qwen2", ES_ROPE_NEOX, true, false, false, false, false, ES__ACT_SILU, 1, false, 0, false, 0.0f, 0, false},
    {"qwen3", ES_ROPE_NEOX, false, false, false, false, false, ES__ACT_SILU, 1, false, 0, true, 0.0f, 0, false},
    {"phi3", ES_ROPE_NEOX, false, true, true, false, false, ES__ACT_SILU, 1, false, 0, false, 0.0f, 0, false},
    {"gemma", ES_ROPE_NEOX, false, false, false, false, true, ES__ACT_GELU, 1, false, 0, false, 0.0f, 0, false},
    /* 46 layers: Gemma 2 27B (llama.cpp tells the sizes apart by depth: 26 2B, 42 9B, 46 27B) */
    {"gemma2", ES_ROPE_NEOX, false, false, false, true, true, ES__ACT_GELU, 2, true, 46, false, 0.0f, 0, false},
    /* SmolLM3: llama with no RoPE in every fourth layer (llama.cpp's n_no_rope_layer_step) */
    {"smollm3", ES_ROPE_NORM, false, false, false, false, false, ES__ACT_SILU, 1, false, 0, false, 0.0f, 4, false},
    /* Granite 3.x / 4.0 dense: llama with muP-style multipliers (IBM's; llama.cpp's granite) */
    {"granite", ES_ROPE_NORM, false, false, false, false, false, ES__ACT_SILU, 1, false, 0, false, 0.0f, 0, true},
    /* five sliding layers to one global; 62 layers: Gemma 3 27B's query scale, as Gemma 2's */
    {"gemma3", ES_ROPE_NEOX, false, false, false, true, true, ES__ACT_GELU, 6, false, 62, true, 10000.0f, 0, false},
};

const es__arch *es__arch_find(const char *arch) {
    for (size_t i = 0; i < ES__ARRAY_LEN(archs); i++)
        if (strcmp(archs[i].name, arch) == 0) return &archs[i];
    return NULL;
}

const char *es__arch_names(void) {
    return "llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3, smollm3, granite";
}
