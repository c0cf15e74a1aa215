#version 450
// get_rows.comp: the token embedding lookup: X[t] = dequantised row tokens[t] of the embedding
// matrix, for each token whose row lies in this part of the matrix (one dispatch per part).
// Dequantisation is exact apart from the block scale multiply, as on the CPU; scale (gemma's
// sqrt(n_embd), else 1) multiplies the row afterwards, as the CPU does.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define WBIND 0
#define SBIND 1
#include "weights.glsl"
#define STEPBIND 2
#include "step.glsl"
layout(binding = 3, std430) writeonly buffer X_blk { float X[]; };
layout(push_constant) uniform PC { ES_PC_GET_ROWS(PC_U, PC_F) } pc;

void main() {
    const uint t = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
    const uint tok = uint(step_token(t));
    if (tok < pc.row0 || tok >= pc.row0 + pc.rows) return;
    const uint r = tok - pc.row0, upr = pc.K / EPU;
#if HAS_SCALE
    const uint srow = r * scale_row_stride(pc.K / 32u, pc.team);
#endif
    for (uint u = lid; u < upr; u += gl_WorkGroupSize.x) {
        vec4 w[UV];
        decode_unit(r * row_texels(upr), u, w);
#if LANE_RUNS
        const vec2 dm = scale_min_of(srow, u, pc.team, pc.K / 32u);
        const float d = dm.x, d2 = dm.y;
#elif HAS_SCALE
        const float d = scale_of(srow, u, pc.team);
#endif
#if HAS_S2
        const float d2 = scale_of(srow + scale_row_texels(pc.K / 32u, pc.team), u, pc.team);
#endif
#if HAS_HALF_MIN
        const float m1 = scale_of(srow + 2u * scale_row_texels(pc.K / 32u, pc.team), u, pc.team);
        const float m2 = scale_of(srow + 3u * scale_row_texels(pc.K / 32u, pc.team), u, pc.team);
#endif
        for (uint i = 0u; i < UV; i++)
            for (uint k = 0u; k < 4u; k++) {
                const uint e = u * EPU + i * 4u + k;
#if HAS_HALF_MIN
                // Q2_K: one rounding of two exact products per element, as the CPU's
                if (e < pc.E) X[t * pc.x_stride + e] = (i < UV / 2u ? fma(d, w[i][k], m1) : fma(d2, w[i][k], m2)) * pc.scale;
#elif HAS_MIN
                // one rounding of two exact products, as the CPU's fused multiply-add
                if (e < pc.E) X[t * pc.x_stride + e] = fma(d, w[i][k], d2) * pc.scale;
#elif HAS_HALVES
                if (e < pc.E) X[t * pc.x_stride + e] = (i < UV / 2u ? d : d2) * w[i][k] * pc.scale;
#elif HAS_SCALE
                if (e < pc.E) X[t * pc.x_stride + e] = d * w[i][k] * pc.scale;
#else
                if (e < pc.E) X[t * pc.x_stride + e] = w[i][k] * pc.scale;
#endif
            }
    }
}
