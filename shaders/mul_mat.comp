#version 450
// mul_mat.comp: Y = W X for a weight matrix W (M rows of K elements, any weight type) and a tile
// of TOK activation rows X, with an epilogue: store, add into Y (the residual), or SwiGLU of
// interleaved gate/up row pairs.
// One source serves matrix-vector (decode, TOK = 1) and tiled matrix-matrix (prefill, tree
// verification, TOK > 1). Batch invariance: lane l of a team accumulates chunks l, l + lanes,
// l + 2 lanes, ... of a row in that order for each token separately, and the team reduces the
// lanes in one fixed way, so a token's output is bit-identical whatever TOK, ROWS or the batch.
// It deliberately does not normalise its input (rmsnorm.comp does).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define WBIND 0
#define SBIND 1
#include "weights.glsl"

layout(constant_id = 2) const uint ROWS = 4; // rows per team
layout(constant_id = 3) const uint TOK = 1;  // tokens per workgroup
layout(constant_id = 4) const uint EPI = 0;  // 0: Y = WX; 1: Y += WX; 2: Y[r/2] = silu(g) * u

RO_F4(2, X)
layout(binding = 3, std430) buffer Y_blk { float Y[]; };
layout(push_constant) uniform PC { ES_PC_MUL_MAT(PC_U, PC_F) } pc;

#if !ES_SUBGROUP
shared float red[gl_WorkGroupSize.x * 8u]; // ROWS * TOK <= 8 partial sums per invocation
#endif

void emit(uint row, uint t, float v) {
    uint base = t * pc.y_stride + pc.y_off;
    if (EPI == 0u) {
        Y[base + row] = v;
    } else if (EPI == 1u) {
        Y[base + row] += v;
    }
}

void main() {
    const uint cpr = pc.K / EPC; // chunks (texels) per row
    const uint row0 = (gl_WorkGroupID.x * N_TEAMS + TEAM_ID) * ROWS;
    const uint t0 = gl_WorkGroupID.y * TOK;

    float acc[ROWS * TOK];
    uint wrow[ROWS], srow[ROWS], xrow[TOK];
    for (uint r = 0u; r < ROWS; r++) {
        uint row = min(row0 + r, pc.M - 1u); // clamped rows compute, but never store
        wrow[r] = pc.w_off + row * cpr;
        srow[r] = pc.s_off + row * (pc.K / 32u);
    }
    for (uint t = 0u; t < TOK; t++) xrow[t] = pc.x_off + min(t0 + t, pc.n - 1u) * pc.x_stride;
    for (uint i = 0u; i < ROWS * TOK; i++) acc[i] = 0.0;

    for (uint c = TEAM_LANE; c < cpr; c += TEAM_SIZE) {
        vec4 x[TOK][XV];
        for (uint t = 0u; t < TOK; t++)
            for (uint i = 0u; i < XV; i++) x[t][i] = FETCH_F4(X, xrow[t] + c * XV + i);
        for (uint r = 0u; r < ROWS; r++) {
            vec4 w[XV];
            decode_chunk(wrow[r], c, w);
            float d = chunk_scale(srow[r], c);
            for (uint t = 0u; t < TOK; t++) {
                float s = dot4(w[0], x[t][0]);
                for (uint i = 1u; i < XV; i++) s += dot4(w[i], x[t][i]);
#if HAS_SCALE
                acc[r * TOK + t] = fma(d, s, acc[r * TOK + t]);
#else
                acc[r * TOK + t] += s;
#endif
            }
        }
    }

#if ES_SUBGROUP
    for (uint i = 0u; i < ROWS * TOK; i++) acc[i] = subgroupAdd(acc[i]);
#else
    // Each lane publishes its partial sums; lane 0 of the team adds them in lane order.
    const uint base = gl_LocalInvocationID.x * 8u;
    for (uint i = 0u; i < ROWS * TOK; i++) red[base + i] = acc[i];
    barrier();
    const uint lead = TEAM_ID * LANES * 8u;
    for (uint i = 0u; i < ROWS * TOK; i++) {
        float s = red[lead + i];
        for (uint l = 1u; l < LANES; l++) s += red[lead + l * 8u + i];
        acc[i] = s;
    }
#endif

    if (TEAM_LANE != 0u) return;
    for (uint t = 0u; t < TOK; t++) {
        if (t0 + t >= pc.n) break;
        if (EPI == 2u) {
            for (uint r = 0u; r + 1u < ROWS; r += 2u) {
                if (row0 + r + 1u >= pc.M) break;
                float g = acc[r * TOK + t], u = acc[(r + 1u) * TOK + t];
                Y[(t0 + t) * pc.y_stride + pc.y_off + (row0 + r) / 2u] = g / (1.0 + exp(-g)) * u;
            }
        } else {
            for (uint r = 0u; r < ROWS; r++)
                if (row0 + r < pc.M) emit(row0 + r, t0 + t, acc[r * TOK + t]);
        }
    }
}
