#version 450
// attn.comp: attention of a batch of tokens over the KV cache, tree-aware and split over the
// key positions (flash decoding). One workgroup computes one (head h, split s, token t):
// online softmax over the keys at positions [s * split, (s + 1) * split) that token t sees.
// Token t at position pos[t] = n_past + depth(t) sees every position 0..pos[t] exactly once:
// committed slots [0, n_past) hold positions 0..n_past-1, and position n_past + d is the
// provisional slot of t's ancestor at depth d, found through the DFS intervals (FlashSpecInfer:
// i attends-to test start[i] <= start[t] && end[t] <= end[i]); no mask is stored anywhere.
// Batch invariance (DESIGN.md): keys are reduced in absolute-position order, in tiles of
// gl_WorkGroupSize.x positions aligned to multiples of that size, and splits aligned to
// multiples of `split`; which tokens share the batch changes nothing in a token's arithmetic.
// A token needing one split writes its output directly; otherwise it writes (max, sum, acc)
// partials that attn_merge.comp combines in split order.
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

#define MAX_HD4 64 // head dimension up to 256
shared vec4 q4[MAX_HD4];
shared float sh_p[gl_WorkGroupSize.x];
shared uint sh_slot[gl_WorkGroupSize.x];
shared float sh_s[gl_WorkGroupSize.x];

void main() {
    const uint h = gl_WorkGroupID.x, s = gl_WorkGroupID.y, t = pc.t0 + gl_WorkGroupID.z, tl = gl_WorkGroupID.z;
    const uint lid = gl_LocalInvocationID.x, B = gl_WorkGroupSize.x, hd4 = pc.hd / 4u;
    const uint p = uint(step_pos(t)), n_past = uint(step_n_past());
    const uint ns = p / pc.split + 1u;
    if (s >= ns) return;
    const uint kvh = h / (pc.n_head / pc.n_head_kv);
    const uint kvb = kvh * pc.n_ctx;
    for (uint c = lid; c < hd4; c += B) q4[c] = FETCH_F4(QKV, t * (pc.qkv_stride / 4u) + h * hd4 + c);
    barrier();

    float m = -1.0 / 0.0, l = 0.0;
    vec4 acc[2] = vec4[2](vec4(0.0), vec4(0.0)); // columns lid and lid + B of the head
    const uint p0 = s * pc.split, p1 = min(p0 + pc.split, p + 1u);
    for (uint tile = p0; tile < p1; tile += B) {
        const uint q = tile + lid;
        const bool valid = q < p1;
        float sc = -1.0 / 0.0;
        uint slot = 0u;
        if (valid) {
            slot = q < n_past ? q : n_past + uint(step_ancestor(t, q - n_past));
            const uint kb = (kvb + slot) * hd4;
            float d = 0.0;
            for (uint c = 0u; c < hd4; c++) d += dot4(q4[c], FETCH_F4(KC, kb + c));
            sc = d * pc.scale;
        }
        sh_s[lid] = sc;
        sh_slot[lid] = slot;
        barrier();
        float mt = sh_s[0];
        for (uint i = 1u; i < B; i++) mt = max(mt, sh_s[i]);
        const float mn = max(m, mt), alpha = exp(m - mn);
        sh_p[lid] = valid ? exp(sc - mn) : 0.0;
        barrier();
        const uint nv = min(B, p1 - tile);
        float ls = 0.0;
        for (uint i = 0u; i < nv; i++) ls += sh_p[i];
        l = l * alpha + ls;
        for (uint k = 0u; k < 2u; k++) {
            const uint c = lid + k * B;
            if (c >= hd4) break;
            vec4 a = acc[k] * alpha;
            for (uint i = 0u; i < nv; i++) a = fma(vec4(sh_p[i]), FETCH_F4(VC, (kvb + sh_slot[i]) * hd4 + c), a);
            acc[k] = a;
        }
        m = mn;
        barrier();
    }

    if (ns == 1u) {
        for (uint k = 0u; k < 2u; k++) {
            const uint c = lid + k * B;
            if (c < hd4) O[t * (pc.o_stride / 4u) + h * hd4 + c] = acc[k] * (1.0 / l);
        }
    } else {
        const uint pb = ((tl * pc.n_head + h) * pc.max_splits + s) * (1u + hd4);
        if (lid == 0u) PART[pb] = vec4(m, l, 0.0, 0.0);
        for (uint k = 0u; k < 2u; k++) {
            const uint c = lid + k * B;
            if (c < hd4) PART[pb + 1u + c] = acc[k];
        }
    }
}
