#version 450
// attn_merge.comp: combines the split partials (max m_s, sum l_s, unnormalised acc_s) of each
// (head, token) that needed more than one split, in split order (flash decoding's reduction,
// attn_merge.glsl): out = sum_s acc_s * exp(m_s - M) / sum_s l_s * exp(m_s - M), M = max_s m_s.
// Tokens with one split were written by attn.comp directly.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

RO_F4(0, PART)
#define STEPBIND 1
#include "step.glsl"
#include "attn_merge.glsl"
layout(binding = 2, std430) writeonly buffer O_blk { vec4 O[]; };
layout(push_constant) uniform PC { ES_PC_ATTN_MERGE(PC_U, PC_F) } pc;

void main() {
    const uint h = gl_WorkGroupID.x, tl = gl_WorkGroupID.y, t = pc.t0 + tl, lid = gl_LocalInvocationID.x, hd4 = pc.hd / 4u;
    const uint ns = uint(step_pos(t)) / pc.split + 1u;
    if (ns == 1u) return;
    const uint pb = (tl * pc.n_head + h) * pc.max_splits * (1u + hd4);
    const uvec4 all = uvec4(0u, ns, ns, ns);
    const float M = merge_max(pb, hd4, all), L = merge_sum(pb, hd4, all, M);
    for (uint c = lid; c < hd4; c += gl_WorkGroupSize.x) O[t * (pc.o_stride / 4u) + h * hd4 + c] = merge_out(pb, hd4, all, M, L, c);
}
