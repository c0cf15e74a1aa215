#version 450
// rmsnorm.comp: Y[t] = X[row] * (1 / sqrt(mean(X[row]^2) + eps)) * G, one workgroup per row
// (row = t, or out_rows[t] when gathering the rows that want logits). The sum of squares runs in
// a fixed order (lane-strided, then reduce.glsl), so a row's result never depends on the batch.
// Rows are padded with zeros to a multiple of 4 floats; the padding adds exact zeros.
// With add != 0, Y[t] += add times the result (gemma2's post-branch norms, lib/core/arch.h; add is
// the residual scale, 1 but for granite-like models).
// With norm2 as well, the next pre-norm follows in the same dispatch (one fewer per post-branch
// norm, lib/vulkan/forward.c): Z[t] = rmsnorm(Y[t]) * G2 of the row just updated, computed as the
// plain norm computes it (the same sum of squares, scale and products), so the two dispatches it
// replaces give the same bits. Z is bound to X's rows: each invocation reads back only the
// elements of Y it wrote, and overwrites only the elements of X it read.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "reduce.glsl"

RO_F4(0, X)
RO_F4(1, G)
#define STEPBIND 2
#include "step.glsl"
layout(binding = 3, std430) buffer Y_blk { vec4 Y[]; };
layout(binding = 4, std430) writeonly buffer Z_blk { vec4 Z[]; };
layout(push_constant) uniform PC { ES_PC_RMSNORM(PC_U, PC_F) } pc;

// 1 / rms of a row from its sum of squares: one expression for both norms.
float inv_rms(const float sum_sq) {
    return 1.0 / sqrt(sum_sq / float(pc.E) + pc.eps);
}

void main() {
    const uint t = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    const uint row = pc.gather != 0u ? uint(step_array(ES_STEP_OUT_ROWS, t)) : t;
    const uint e4 = (pc.E + 3u) / 4u, xb = row * (pc.x_stride / 4u), yb = t * (pc.x_stride / 4u);
    float s = 0.0;
    for (uint c = lid; c < e4; c += wg) {
        vec4 v = FETCH_F4(X, xb + c);
        s += dot4(v, v);
    }
    s = wg_sum(s);
    const float r = inv_rms(s);
    for (uint c = lid; c < e4; c += wg) {
        const vec4 y = FETCH_F4(X, xb + c) * r * FETCH_F4(G, pc.g_off / 4u + c);
        if (pc.add == 0.0)
            Y[yb + c] = y;
        else if (pc.add == 1.0) // a post-branch norm into the residual: the expression of before
            Y[yb + c] += y;     // the scale, so that gemma2's bits stay whatever the compiler fuses
        else
            Y[yb + c] += rounded_mul(y, pc.add); // s y rounded before the add, as the CPU's x += s y
    }
    if (pc.norm2 == 0u) return; // uniform: the whole workgroup leaves or stays
    float s2 = 0.0;
    for (uint c = lid; c < e4; c += wg) {
        vec4 v = Y[yb + c];
        s2 += dot4(v, v);
    }
    s2 = wg_sum(s2);
    const float r2 = inv_rms(s2);
    for (uint c = lid; c < e4; c += wg) Z[yb + c] = Y[yb + c] * r2 * FETCH_F4(G, pc.g2_off / 4u + c);
}
