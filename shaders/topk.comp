#version 450
// topk.comp: the k largest entries of each row of logits (argmax for k = 1), in descending
// order with ties broken to the lower id (DESIGN.md), NaN never chosen. k rounds of a workgroup
// arg-max over the entries ranked after the previous round's pick; exact, order-independent.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

RO_F4(0, L) // logits rows, stride floats apart (stride a multiple of 4)
layout(binding = 1, std430) writeonly buffer R_blk { uvec2 R[]; }; // [n][k]: (id, value bits)
layout(push_constant) uniform PC { ES_PC_TOPK(PC_U, PC_F) } pc;

shared float sv[gl_WorkGroupSize.x];
shared uint si[gl_WorkGroupSize.x];

// true when (v, i) ranks before (bv, bi)
bool better(float v, uint i, float bv, uint bi) {
    return v > bv || (v == bv && i < bi);
}

void main() {
    const uint row = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    const uint base = row * (pc.stride / 4u);
    float pv = 1.0 / 0.0; // previous pick: everything ranks after (+inf, -1)
    uint pi = 0xffffffffu;
    bool first = true;
    for (uint r = 0u; r < pc.k; r++) {
        float bv = -1.0 / 0.0;
        uint bi = 0xffffffffu;
        for (uint c = lid; c < (pc.V + 3u) / 4u; c += wg) {
            vec4 v4 = FETCH_F4(L, base + c);
            for (uint j = 0u; j < 4u; j++) {
                const uint i = 4u * c + j;
                const float v = v4[j];
                if (i >= pc.V || isnan(v)) continue;
                if (!first && !better(pv, pi, v, i)) continue; // not ranked after the previous pick
                if (bi == 0xffffffffu || better(v, i, bv, bi)) {
                    bv = v;
                    bi = i;
                }
            }
        }
        sv[lid] = bv;
        si[lid] = bi;
        barrier();
        for (uint i = 0u; i < wg; i++)
            if (si[i] != 0xffffffffu && (bi == 0xffffffffu || better(sv[i], si[i], bv, bi))) {
                bv = sv[i];
                bi = si[i];
            }
        barrier();
        // fewer than k entries that are not NaN: the rest are id 0xffffffff (-1), value -inf
        if (lid == 0u) R[row * pc.k + r] = uvec2(bi, floatBitsToUint(bi == 0xffffffffu ? -1.0 / 0.0 : bv));
        pv = bv;
        pi = bi;
        first = false;
    }
}
