#version 450
// attn_merge.comp: combines the split partials (max m_s, sum l_s, unnormalised acc_s) of each
// (head, token) that needed more than one split, in split order (flash decoding's reduction):
// out = sum_s acc_s * exp(m_s - M) / sum_s l_s * exp(m_s - M), M = max_s m_s.
// Tokens with one split were written by attn.comp directly.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

RO_F4(0, PART)
#define STEPBIND 1
#include "step.glsl"
layout(binding = 2, std430) writeonly buffer O_blk { vec4 O[]; };
layout(push_constant) uniform PC { ES_PC_ATTN_MERGE(PC_U, PC_F) } pc;

void main() {
    const uint h = gl_WorkGroupID.x, tl = gl_WorkGroupID.y, t = pc.t0 + tl, lid = gl_LocalInvocationID.x, hd4 = pc.hd / 4u;
    const uint ns = uint(step_pos(t)) / pc.split + 1u;
    if (ns == 1u) return;
    const uint pb = (tl * pc.n_head + h) * pc.max_splits * (1u + hd4);
    float M = -1.0 / 0.0;
    for (uint s = 0u; s < ns; s++) M = max(M, FETCH_F4(PART, pb + s * (1u + hd4)).x);
    float L = 0.0;
    for (uint s = 0u; s < ns; s++) {
        vec4 ml = FETCH_F4(PART, pb + s * (1u + hd4));
        L += ml.y * exp(ml.x - M);
    }
    for (uint c = lid; c < hd4; c += gl_WorkGroupSize.x) {
        vec4 a = vec4(0.0);
        for (uint s = 0u; s < ns; s++) {
            const uint b = pb + s * (1u + hd4);
            a = fma(vec4(exp(FETCH_F4(PART, b).x - M)), FETCH_F4(PART, b + 1u + c), a);
        }
        O[t * (pc.o_stride / 4u) + h * hd4 + c] = a * (1.0 / L);
    }
}
