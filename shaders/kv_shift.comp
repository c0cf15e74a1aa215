#version 450
// kv_shift.comp: a context shift's move of committed cache slots: slots n_keep + d .. n_past - 1
// go to n_keep .. n_past - d - 1 in ascending order (each invocation owns whole pairs and
// columns, so a slot is read before anything writes it), values as they are, keys turned back by
// d positions: RoPE's rotations compose, R(p - d) = R(-d) R(p), with CS holding cos and sin of
// -d theta_i per pair i (from the host, in double, as the position tables are), one row per kind
// of rotation (lib/core/rope.h), the layer's at cs_off. Pairs are (2i, 2i+1) (NORM) or
// (i, i + n_rot/2) (NEOX), the cache being in head-dimension order. One workgroup per (head, K or
// V) of one layer.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

RO_F1(0, CS)
layout(binding = 1, std430) buffer KC_blk { float KC[]; };
layout(binding = 2, std430) buffer VC_blk { float VC[]; };
layout(push_constant) uniform PC { ES_PC_KV_SHIFT(PC_U, PC_F) } pc;

void main() {
    const uint h = gl_WorkGroupID.x, which = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    const uint base = h * pc.n_ctx * pc.hd, half_rot = pc.n_rot / 2u;
    for (uint s = pc.n_keep + pc.d; s < pc.n_past; s++) {
        const uint src = base + s * pc.hd, dst = base + (s - pc.d) * pc.hd;
        if (which == 1u) {
            for (uint c = lid; c < pc.hd; c += wg) VC[dst + c] = VC[src + c];
            continue;
        }
        for (uint i = lid; i < half_rot; i += wg) {
            const uint a = pc.neox != 0u ? i : 2u * i, b = pc.neox != 0u ? i + half_rot : 2u * i + 1u;
            const float x = KC[src + a], y = KC[src + b], c = FETCH_F1(CS, pc.cs_off + 2u * i),
                        sn = FETCH_F1(CS, pc.cs_off + 2u * i + 1u);
            KC[dst + a] = x * c - y * sn;
            KC[dst + b] = x * sn + y * c;
        }
        for (uint c = pc.n_rot + lid; c < pc.hd; c += wg) KC[dst + c] = KC[src + c];
    }
}
