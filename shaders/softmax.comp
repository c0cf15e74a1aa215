#version 450
// softmax.comp: y = exp(x - max) / sum(exp(x - max)) over each row, in place, with the sum in a
// fixed order (reduce.glsl).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "reduce.glsl"

layout(binding = 0, std430) buffer X_blk { float X[]; };
layout(push_constant) uniform PC { ES_PC_SOFTMAX(PC_U, PC_F) } pc;

void main() {
    const uint row = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    const uint base = row * pc.stride;
    float m = -1.0 / 0.0;
    for (uint i = lid; i < pc.V; i += wg) m = max(m, X[base + i]);
    m = wg_max(m);
    float s = 0.0;
    for (uint i = lid; i < pc.V; i += wg) s += exp(X[base + i] - m);
    s = wg_sum(s);
    const float inv = 1.0 / s;
    for (uint i = lid; i < pc.V; i += wg) X[base + i] = exp(X[base + i] - m) * inv;
}
