// attn_body.glsl: attention of a batch of tokens over the KV cache, tree-aware and split over
// the key positions (flash decoding), for attn.comp (TEAM 0) and attn_team.comp (TEAM 1). With
// TEAM 0 each invocation computes one (token t, head h) for one split s on its own: online
// softmax over the keys at positions [s * split, (s + 1) * split) that t sees. Token t at
// position pos[t] = n_past + depth(t) sees every position 0..pos[t] exactly once: committed
// slots [0, n_past) hold positions 0..n_past-1, and position n_past + d is the provisional slot
// of t's ancestor at depth d, found through the DFS intervals (FlashSpecInfer: i is visible to t
// iff start[i] <= start[t] && end[t] <= end[i]); no mask is stored anywhere. With TEAM 0 no
// invocation talks to another: on lavapipe a subgroup reduction or a barrier per key costs
// more than the key's arithmetic. Invocations are ordered token-fastest, so in prefill the lanes
// of a SIMD group read the same K and V rows (one fetch for all), and in decoding the heads of a
// group of query heads do (grouped-query attention).
// Batch invariance (DESIGN.md): a (token, head) folds its keys in one at a time in absolute-
// position order, splits are aligned to multiples of `split`, and which tokens share the batch
// changes nothing in its arithmetic. A token needing one split writes its output directly;
// otherwise it writes (max, sum, acc) partials that attn_merge.comp combines in split order.
// TEAM 1 (GPUs, policy.h attn_team: a split walked by one invocation leaves a GPU idle, 32
// invocations for a decode token of 32 heads) gives each (token, head, split) a subgroup whose
// lane j folds the split's keys j, j + T, j + 2T, ... (T the subgroup size); the lanes' partials
// are then rescaled to their common max and summed by subgroup arithmetic. Which lane folds a key
// depends on its position only, so batch invariance holds on each device; the rounding differs
// from TEAM 0's, so a device uses one or the other.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

RO_F4(0, QKV)
RO_F4(1, KC) // [n_head_kv][n_ctx][hd]
RO_F4(2, VC)
#define STEPBIND 3
#include "step.glsl"
layout(binding = 4, std430) writeonly buffer O_blk { vec4 O[]; };    // [n][o_stride / 4]
layout(binding = 5, std430) writeonly buffer P_blk { vec4 PART[]; }; // [tokens][n_head][max_splits][1 + hd / 4]
layout(push_constant) uniform PC { ES_PC_ATTN(PC_U, PC_F) } pc;

layout(constant_id = 2) const uint HD4 = 16; // head dimension / 4

void main() {
#if TEAM
    // one (token, head, split) per subgroup: every return below is uniform in the subgroup
    const uint T = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
    const uint g = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID, s = gl_WorkGroupID.y;
#else
    const uint T = 1u, lane = 0u;
    const uint g = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x, s = gl_WorkGroupID.y;
#endif
    if (g >= pc.n_tok * pc.n_head) return;
    const uint tl = g % pc.n_tok, h = g / pc.n_tok, t = pc.t0 + tl;
    const uint p = uint(step_pos(t)), n_past = uint(step_n_past());
    const bool chain = step_at(ES_STEP_CHAIN) != 0;
    if (s > p / pc.split) return; // this token needs fewer splits
    if (pc.part_mode != 0u && ((s >= pc.mid_lo && s < pc.mid_hi) == (pc.part_mode == 1u))) return;
    const uint kvb = (h / (pc.n_head / pc.n_head_kv)) * pc.n_ctx;

    vec4 qv[HD4], acc[HD4];
    for (uint c = 0u; c < HD4; c++) {
        qv[c] = FETCH_F4(QKV, t * (pc.qkv_stride / 4u) + h * HD4 + c);
        acc[c] = vec4(0.0);
    }
    float m = -1.0 / 0.0, l = 0.0;
    // a sliding window (lib/core/arch.h) starts the keys at p + 1 - window: the splits before
    // it stay empty (m = -inf, l = 0), which attn_merge.comp weighs as exactly nothing
    const uint lo = pc.window > 0u && p + 1u > pc.window ? p + 1u - pc.window : 0u;
    const uint p0 = s * pc.split, p1 = min(p0 + pc.split, p + 1u);
    for (uint q = max(p0, lo) + lane; q < p1; q += T) {
        const uint kb = (kvb + step_slot(t, q, n_past, chain)) * HD4;
        float d = dot4(qv[0], FETCH_F4(KC, kb));
        for (uint c = 1u; c < HD4; c++) d += dot4(qv[c], FETCH_F4(KC, kb + c));
        float sc = d * pc.scale;
        if (pc.softcap > 0.0) sc = pc.softcap * tanh(sc / pc.softcap); // gemma2's soft-capping
        const float mn = max(m, sc), pe = exp(sc - mn);
        const float alpha = mn == m ? 1.0 : exp(m - mn); // exp(0) = 1 exactly: same result
        l = l * alpha + pe;
        for (uint c = 0u; c < HD4; c++) acc[c] = fma(vec4(pe), FETCH_F4(VC, kb + c), acc[c] * alpha);
        m = mn;
    }
#if TEAM
    SUBGROUP_SOFTMAX_MERGE(m, l, acc, HD4)
    if (lane != 0u) return;
#endif

    if (p / pc.split == 0u) { // one split: the output itself
        for (uint c = 0u; c < HD4; c++) O[t * (pc.o_stride / 4u) + h * HD4 + c] = acc[c] * (1.0 / l);
    } else {
        const uint pb = ((tl * pc.n_head + h) * pc.max_splits + s) * (1u + HD4);
        PART[pb] = vec4(m, l, 0.0, 0.0);
        for (uint c = 0u; c < HD4; c++) PART[pb + 1u + c] = acc[c];
    }
}
