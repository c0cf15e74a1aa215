#version 450
// ss_rope.comp: the biases (qwen2) of the stream rows' Q, K and V, then the rotary embedding of
// their Q and K heads, in place, at the position of the node they belong to (streams use their node's position, tools/train/model.py). Streams
// write no KV: nothing goes to the cache. Angles from the host's double-precision table, pairs as
// in mul_mat.comp's RoPE epilogue (ES_ROPE_NORM: (2i, 2i + 1), ES_ROPE_NEOX: (i, i + n_rot / 2)).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "ss_push.h"

layout(binding = 0, std430) buffer QKV_blk { float QKV[]; };
RO_F1(1, ROPE) // tables of [n_ctx, or 1 for the identity][n_rot / 2][2]: cos, sin (the layer's at rope_off, positions rope_stride apart); biases
#define STEPBIND 2
#include "step.glsl"
layout(push_constant) uniform PC { ES_PC_SS_ROPE(PC_U, PC_F) } pc;

uvec2 pair(uint i) {
    return pc.neox != 0u ? uvec2(i, i + pc.n_rot / 2u) : uvec2(2u * i, 2u * i + 1u);
}

void main() {
    const uint t = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    if (t >= pc.n) return;
    const uint half_rot = pc.n_rot / 2u, hd = pc.hd;
    const uint p = uint(step_pos(uint(step_at(ES_STEP_SS_NODE))));
    const uint rope = pc.rope_off + p * pc.rope_stride, base = t * pc.qkv_stride;
    if (pc.bias_off != 0u) { // qwen2's biases, before RoPE as in the forward; Q, K, V in head order
        for (uint i = lid; i < (pc.n_head + 2u * pc.n_head_kv) * hd; i += wg) QKV[base + i] += FETCH_F1(ROPE, pc.bias_off + i);
        memoryBarrierBuffer();
        barrier();
    }
    // Q heads, then K heads (which follow Q in the row)
    for (uint it = lid; it < (pc.n_head + pc.n_head_kv) * half_rot; it += wg) {
        const uint h = it / half_rot, i = it % half_rot;
        const uvec2 e = pair(i) + h * hd;
        const float c = FETCH_F1(ROPE, rope + 2u * i), s = FETCH_F1(ROPE, rope + 2u * i + 1u);
        const float x0 = QKV[base + e.x], x1 = QKV[base + e.y];
        QKV[base + e.x] = x0 * c - x1 * s;
        QKV[base + e.y] = x0 * s + x1 * c;
    }
}
