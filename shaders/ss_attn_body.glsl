// ss_attn_body.glsl: multi-stream attention (Speculative Streaming Eq. 2) for the stream rows of one
// tree node (the step's ES_STEP_SS_NODE) or of every node (ss_push.h): stream j of node i attends
// to the main stream's keys/values at positions 0..pos(i) (committed cache slots, then the
// provisional slots of i's ancestors and i itself, found through the DFS intervals as in
// attn.comp; in a sliding layer only positions > pos(i) - window) and to the keys/values of i's
// streams 0..j, taken from the stream rows' QKV; one online softmax over both, the scores scaled
// and soft-capped as the main stream's. Streams write no KV.
// For ss_attn.comp (TEAM 0) and ss_attn_team.comp (TEAM 1), as attn_body.glsl is for attention.
// With TEAM 0 each invocation computes one (stream row, head) on its own, keys folded in one at
// a time in position order, then the stream keys in stream order: no barrier and no reduction
// (on lavapipe either costs more than a key's arithmetic). With TEAM 1 (GPUs, the device's
// attention policy, es__vk_attn_team) a subgroup computes a (stream row, head): lane i folds the
// main stream's keys i, i + T, i + 2T, ... (T the subgroup size), the lanes' partials are
// rescaled to their common max and summed by subgroup arithmetic, and every lane then folds the
// few stream keys in stream order: one invocation walking a thousand cached keys left a GPU
// idle (a pass of 4 streams cost four one-token calls at 1,024 keys on an H100, docs/perf.md).
// Either way a row's result does not depend on which other rows run beside it, so the stream
// pass and the fused forward, which use the same kernel, agree bit for bit. Rows are ordered
// row-fastest: the streams of a node read the same K and V rows.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "ss_push.h"

RO_F4(0, QKV) // stream rows: [rows][qkv_stride / 4]: q, k, v
RO_F4(1, KC)  // [n_head_kv][n_ctx][hd]
RO_F4(2, VC)
#define STEPBIND 3
#include "step.glsl"
layout(binding = 4, std430) writeonly buffer O_blk { vec4 O[]; };
layout(push_constant) uniform PC { ES_PC_SS_ATTN(PC_U, PC_F) } pc;

layout(constant_id = 2) const uint HD4 = 16; // head dimension / 4

float capped(float s) { // gemma2's soft-capping, as attn.comp
    return pc.softcap > 0.0 ? pc.softcap * tanh(s / pc.softcap) : s;
}

void main() {
#if TEAM
    // one (stream row, head) per subgroup: every return below is uniform in the subgroup
    const uint T = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
    const uint gi = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
#else
    const uint T = 1u, lane = 0u;
    const uint gi = gl_WorkGroupID.x * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
#endif
    if (gi >= pc.n_rows * pc.n_head) return;
    const uint row = gi % pc.n_rows, h = gi / pc.n_rows;
    const uint node = pc.g > 0u ? row / pc.g : uint(step_at(ES_STEP_SS_NODE));
    const uint j = pc.g > 0u ? row % pc.g : row, base = pc.g > 0u ? pc.row0 + node * pc.g : 0u;
    const uint n_past = uint(step_n_past()), p = uint(step_pos(node));
    const bool chain = step_at(ES_STEP_CHAIN) != 0;
    const uint kvh = h / (pc.n_head / pc.n_head_kv), kvb = kvh * pc.n_ctx, qs = pc.qkv_stride / 4u;

    vec4 qv[HD4], acc[HD4];
    for (uint c = 0u; c < HD4; c++) {
        qv[c] = FETCH_F4(QKV, (base + j) * qs + h * HD4 + c);
        acc[c] = vec4(0.0);
    }
    float m = -1.0 / 0.0, l = 0.0;
    const uint q0 = pc.window > 0u && p >= pc.window ? p - pc.window + 1u : 0u; // the sliding window
    for (uint q = q0 + lane; q <= p; q += T) { // the main stream's keys the node sees
        const uint kb = (kvb + step_slot(node, q, n_past, chain)) * HD4;
        float d = dot4(qv[0], FETCH_F4(KC, kb));
        for (uint c = 1u; c < HD4; c++) d += dot4(qv[c], FETCH_F4(KC, kb + c));
        const float sc = capped(d * pc.scale), mn = max(m, sc), pe = exp(sc - mn);
        const float alpha = mn == m ? 1.0 : exp(m - mn);
        l = l * alpha + pe;
        for (uint c = 0u; c < HD4; c++) acc[c] = fma(vec4(pe), FETCH_F4(VC, kb + c), acc[c] * alpha);
        m = mn;
    }
#if TEAM
    SUBGROUP_SOFTMAX_MERGE(m, l, acc, HD4)
#endif
    for (uint s = 0u; s <= j; s++) { // the node's streams 0..j
        const uint kb = (base + s) * qs + (pc.n_head + kvh) * HD4, vb = kb + pc.n_head_kv * HD4;
        float d = dot4(qv[0], FETCH_F4(QKV, kb));
        for (uint c = 1u; c < HD4; c++) d += dot4(qv[c], FETCH_F4(QKV, kb + c));
        const float sc = capped(d * pc.scale), mn = max(m, sc), pe = exp(sc - mn);
        const float alpha = mn == m ? 1.0 : exp(m - mn);
        l = l * alpha + pe;
        for (uint c = 0u; c < HD4; c++) acc[c] = fma(vec4(pe), FETCH_F4(QKV, vb + c), acc[c] * alpha);
        m = mn;
    }
    if (lane != 0u) return;
    for (uint c = 0u; c < HD4; c++) O[(base + j) * (pc.o_stride / 4u) + h * HD4 + c] = acc[c] * (1.0 / l);
}
