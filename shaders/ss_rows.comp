#version 450
// ss_rows.comp: the row-wise steps of the Speculative Streaming stream pass (see ss_push.h):
// copying rows (the main stream's hidden states kept at the first MSA layer, the early exit's
// input), starting the streams from a token's hidden state plus the stream embeddings (Eq. 3),
// and SwiGLU over interleaved gate/up rows (when a stream-only LoRA changed gate or up).
// One workgroup per row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "ss_push.h"

RO_F4(0, X)
RO_F4(1, P)
#define STEPBIND 2
#include "step.glsl"
layout(binding = 3, std430) writeonly buffer Y_blk { vec4 Y[]; };
layout(push_constant) uniform PC { ES_PC_SS_ROWS(PC_U, PC_F) } pc;

vec2 swiglu2(vec4 gu) { // (g0, u0, g1, u1) -> (silu(g0) u0, silu(g1) u1)
    return vec2(gu.x / (1.0 + exp(-gu.x)) * gu.y, gu.z / (1.0 + exp(-gu.z)) * gu.w);
}

void main() {
    const uint r = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    if (r >= pc.n_rows) return;
    if (pc.mode == 0u) {
        for (uint c = lid; c < pc.width; c += wg) Y[r * pc.y_stride + c] = FETCH_F4(X, r * pc.x_stride + c);
    } else if (pc.mode == 1u) {
        const uint node = uint(step_at(ES_STEP_SS_NODE));
        for (uint c = lid; c < pc.width; c += wg)
            Y[r * pc.y_stride + c] = FETCH_F4(X, node * pc.x_stride + c) + FETCH_F4(P, r * pc.p_stride + c);
    } else {
        for (uint c = lid; c < pc.width; c += wg) {
            const vec4 a = FETCH_F4(X, r * pc.x_stride + 2u * c), b = FETCH_F4(X, r * pc.x_stride + 2u * c + 1u);
            Y[r * pc.y_stride + c] = vec4(swiglu2(a), swiglu2(b));
        }
    }
}
