#version 450
// rope_kv.comp: rotary position embedding of each token's Q and K heads (in place in QKV), and
// the write of K and V into the cache slot n_past + t (provisional until a commit). Angles come
// from a table the host computes in double precision: (cos, sin) of pos * freq_scale *
// base^(-2i / n_rot) for every position and pair i.
// Pairs: ES_ROPE_NORM rotates (2i, 2i + 1), ES_ROPE_NEOX rotates (i, i + n_rot / 2).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(binding = 0, std430) buffer QKV_blk { float QKV[]; };
RO_F1(1, ROPE) // [n_ctx][n_rot / 2][2]: cos, sin
#define STEPBIND 2
#include "step.glsl"
layout(binding = 3, std430) writeonly buffer KC_blk { float KC[]; }; // [n_head_kv][n_ctx][hd]
layout(binding = 4, std430) writeonly buffer VC_blk { float VC[]; };
layout(push_constant) uniform PC { ES_PC_ROPE_KV(PC_U, PC_F) } pc;

// Indices of pair i of a head.
uvec2 pair(uint i) {
    const uint half_rot = pc.n_rot / 2u;
    return pc.neox != 0u ? uvec2(i, i + half_rot) : uvec2(2u * i, 2u * i + 1u);
}

void main() {
    const uint t = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    const uint half_rot = pc.n_rot / 2u, hd = pc.hd;
    const uint p = uint(step_pos(t)), slot = uint(step_n_past()) + t;
    const uint base = t * pc.qkv_stride, kbase = base + pc.n_head * hd, vbase = kbase + pc.n_head_kv * hd;
    const uint rope = p * half_rot * 2u;
    // Q pairs, rotated in place.
    for (uint it = lid; it < pc.n_head * half_rot; it += wg) {
        const uint h = it / half_rot, i = it % half_rot;
        const uvec2 e = pair(i) + h * hd;
        const float c = FETCH_F1(ROPE, rope + 2u * i), s = FETCH_F1(ROPE, rope + 2u * i + 1u);
        const float x0 = QKV[base + e.x], x1 = QKV[base + e.y];
        QKV[base + e.x] = x0 * c - x1 * s;
        QKV[base + e.y] = x0 * s + x1 * c;
    }
    // K: rotated pairs and unrotated tail dims, into the cache.
    for (uint it = lid; it < pc.n_head_kv * hd; it += wg) {
        const uint h = it / hd, d = it % hd, cache = (h * pc.n_ctx + slot) * hd;
        if (d < pc.n_rot) {
            // each pair is handled by the invocation owning its first element
            const uint i = pc.neox != 0u ? d : d / 2u;
            if (pc.neox != 0u ? d >= half_rot : (d & 1u) != 0u) continue;
            const uvec2 e = pair(i);
            const float c = FETCH_F1(ROPE, rope + 2u * i), s = FETCH_F1(ROPE, rope + 2u * i + 1u);
            const float x0 = QKV[kbase + h * hd + e.x], x1 = QKV[kbase + h * hd + e.y];
            KC[cache + e.x] = x0 * c - x1 * s;
            KC[cache + e.y] = x0 * s + x1 * c;
        } else {
            KC[cache + d] = QKV[kbase + h * hd + d];
        }
    }
    for (uint it = lid; it < pc.n_head_kv * hd; it += wg) {
        const uint h = it / hd, d = it % hd;
        VC[(h * pc.n_ctx + slot) * hd + d] = QKV[vbase + h * hd + d];
    }
}
