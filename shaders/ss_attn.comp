#version 450
// ss_attn.comp: multi-stream attention (Speculative Streaming Eq. 2) for the stream rows of one
// tree node (the step's ES_STEP_SS_NODE): stream j attends to the main stream's keys/values at
// positions 0..pos(node) (committed cache slots, then the provisional slots of the node's
// ancestors and itself, found through the DFS intervals as in attn.comp) and to the keys/values
// of streams 0..j of the same node, taken from the stream rows' QKV; one softmax over both, online,
// in tiles of the workgroup size. Streams write no KV. One workgroup per (head, stream).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "ss_push.h"

RO_F4(0, QKV) // stream rows: [n][qkv_stride / 4]: q, k, v
RO_F4(1, KC)  // [n_head_kv][n_ctx][hd]
RO_F4(2, VC)
#define STEPBIND 3
#include "step.glsl"
layout(binding = 4, std430) writeonly buffer O_blk { vec4 O[]; };
layout(push_constant) uniform PC { ES_PC_SS_ATTN(PC_U, PC_F) } pc;

#define MAX_HD4 64
shared vec4 q4[MAX_HD4];
shared float sh_p[gl_WorkGroupSize.x];
shared uint sh_src[gl_WorkGroupSize.x]; // cache slot, or 0x80000000 | stream row
shared float sh_s[gl_WorkGroupSize.x];

vec4 key4(uint src, uint kvh, uint c) {
    const uint hd4 = pc.hd / 4u;
    if ((src & 0x80000000u) != 0u)
        return FETCH_F4(QKV, (src & 0x7fffffffu) * (pc.qkv_stride / 4u) + (pc.n_head + kvh) * hd4 + c);
    return FETCH_F4(KC, (kvh * pc.n_ctx + src) * hd4 + c);
}

vec4 val4(uint src, uint kvh, uint c) {
    const uint hd4 = pc.hd / 4u;
    if ((src & 0x80000000u) != 0u)
        return FETCH_F4(QKV, (src & 0x7fffffffu) * (pc.qkv_stride / 4u) + (pc.n_head + pc.n_head_kv + kvh) * hd4 + c);
    return FETCH_F4(VC, (kvh * pc.n_ctx + src) * hd4 + c);
}

void main() {
    const uint h = gl_WorkGroupID.x, j = gl_WorkGroupID.y;
    const uint lid = gl_LocalInvocationID.x, B = gl_WorkGroupSize.x, hd4 = pc.hd / 4u;
    const uint node = uint(step_at(ES_STEP_SS_NODE)), n_past = uint(step_n_past());
    const uint p = uint(step_pos(node)), kvh = h / (pc.n_head / pc.n_head_kv);
    for (uint c = lid; c < hd4; c += B) q4[c] = FETCH_F4(QKV, j * (pc.qkv_stride / 4u) + h * hd4 + c);
    barrier();
    // keys: positions 0..p, then stream rows 0..j
    const uint n_keys = p + 1u + j + 1u;
    float m = -1.0 / 0.0, l = 0.0;
    vec4 acc[2] = vec4[2](vec4(0.0), vec4(0.0));
    for (uint tile = 0u; tile < n_keys; tile += B) {
        const uint q = tile + lid;
        const bool valid = q < n_keys;
        float sc = -1.0 / 0.0;
        uint src = 0u;
        if (valid) {
            if (q <= p) src = q < n_past ? q : n_past + uint(step_ancestor(node, q - n_past));
            else src = 0x80000000u | (q - p - 1u);
            float d = 0.0;
            for (uint c = 0u; c < hd4; c++) d += dot4(q4[c], key4(src, kvh, c));
            sc = d * pc.scale;
        }
        sh_s[lid] = sc;
        sh_src[lid] = src;
        barrier();
        float mt = sh_s[0];
        for (uint i = 1u; i < B; i++) mt = max(mt, sh_s[i]);
        const float mn = max(m, mt), alpha = exp(m - mn);
        sh_p[lid] = valid ? exp(sc - mn) : 0.0;
        barrier();
        const uint nv = min(B, n_keys - tile);
        float ls = 0.0;
        for (uint i = 0u; i < nv; i++) ls += sh_p[i];
        l = l * alpha + ls;
        for (uint k = 0u; k < 2u; k++) {
            const uint c = lid + k * B;
            if (c >= hd4) break;
            vec4 a = acc[k] * alpha;
            for (uint i = 0u; i < nv; i++) a = fma(vec4(sh_p[i]), val4(sh_src[i], kvh, c), a);
            acc[k] = a;
        }
        m = mn;
        barrier();
    }
    for (uint k = 0u; k < 2u; k++) {
        const uint c = lid + k * B;
        if (c < hd4) O[j * (pc.o_stride / 4u) + h * hd4 + c] = acc[k] * (1.0 / l);
    }
}
