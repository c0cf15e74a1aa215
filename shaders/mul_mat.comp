#version 450
// mul_mat.comp: Y = W X for a weight matrix W (M rows of K elements, any weight type) and a tile
// of TOK activation rows X, with an epilogue: store (the logits: times the model's multiplier,
// then soft-capped), add into Y (the residual, the branch times the model's residual scale),
// SwiGLU of interleaved gate/up row pairs, or RoPE of the Q and K rows with the write of K and V
// into the cache (attention's input projection).
// One source serves matrix-vector (decode, TOK = 1) and tiled matrix-matrix (prefill, tree
// verification, TOK > 1). A team of lanes (a subgroup, or LANES invocations) owns ROWS rows;
// lane l accumulates units l, l + lanes, l + 2 lanes, ... of each row (weights.glsl; Q4_K's lanes
// walk runs of four consecutive units instead, LANE_RUNS), for each token separately, and the
// team reduces its lanes in one fixed way. So a token's output is
// bit-identical whatever TOK, ROWS or the batch (batch invariance, DESIGN.md). Rows with few
// units are walked by one invocation each (LK = 1), with no reduction at all.
// With TILED=1 a workgroup serves a tile of up to 32 tokens (TILE, es__vk_mul_mat_tok) in passes
// of TOK, so a call of n <= 32 rows is one column of workgroups: its weights come from memory
// once, and the passes after the first find the workgroup's rows in the cache (a team's ROWS rows
// of K elements: 8 x 4096 Q8_0 is 32 KiB). Each pass holds TOK tokens' activations and sums in
// registers as the plain variant does; passes beyond n are skipped. The plain variant (one pass
// per workgroup) stays for devices whose policy says so: on llvmpipe the pass wrapper alone made
// a 2-token call 35% slower (docs/perf.md).
// Lanes of a team read consecutive texels: on lavapipe scattered texel fetches (one row per
// lane) are several times slower, and a fetch costs about as much as decoding a unit, so each
// activation fetch is reused for ROWS rows and each scale fetch for four blocks.
// With LORA=1 (Speculative Streaming's stream rows, lib/vulkan/msa_vk.c) the product gets a
// low-rank term, Y = W X + B R with R = A X computed by the dispatch before: the epilogue adds
// row r's B coefficients times R before the store, residual add or SwiGLU, which saves the
// dispatch that would add B R on its own (and, for gate/up, the SwiGLU dispatch after it).
// Fusing RoPE and the KV write here saves a dispatch per layer, which on lavapipe costs more
// than the arithmetic it would do. RMSNorm stays a kernel of its own (rmsnorm.comp): folding it
// in here rounds differently from the CPU backend's (x * scale) * w, and closer numerics between
// the backends are worth a dispatch.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define WBIND 0
#define SBIND 1
#include "weights.glsl"

layout(constant_id = 2) const uint ROWS = 4; // rows per team
layout(constant_id = 3) const uint TOK = 1;  // tokens per pass
layout(constant_id = 4) const uint EPI = 0;  // 0: Y = WX; 1: Y += WX; 2: Y[r/2] = silu(g) * u; 3: RoPE + KV;
                                             // 4: Y[r/2] = gelu(g) * u
layout(constant_id = 5) const uint LK = 8;   // lanes per row: 1, or the team size
#ifndef TILED
#define TILED 0
#endif
#if TILED
layout(constant_id = 6) const uint TILE = 1; // tokens per workgroup, in passes of TOK
#endif

RO_F4(2, X)
layout(binding = 3, std430) buffer Y_blk { float Y[]; };
RO_F1(4, ROPE) // tables of [n_ctx, or 1 for the identity][n_rot / 2][2]: cos, sin (the layer's at rope_off, positions rope_stride apart); biases
#define STEPBIND 5
#include "step.glsl"
layout(binding = 6, std430) writeonly buffer KC_blk { float KC[]; }; // [n_head_kv][n_ctx][hd]
layout(binding = 7, std430) writeonly buffer VC_blk { float VC[]; };
layout(push_constant) uniform PC { ES_PC_MUL_MAT(PC_U, PC_F) } pc;
#ifndef LORA
#define LORA 0
#endif
#if LORA
RO_F4(8, LR) // R = A X: a row of lora_r values per token, lora_stride texels apart
RO_F4(9, LB) // B: a row per fused row of W, lora_r coefficients padded to 32 (8 texels per 32)
#endif

#if !ES_SUBGROUP
shared float red[gl_WorkGroupSize.x * ROWS * TOK];
#endif

// The head dimension a RoPE row holds: with NEOX the host permuted each head's rows so that
// pairs (i, i + n_rot/2) are adjacent: row 2i is dimension i, row 2i + 1 is i + n_rot/2.
uint rope_dim(uint j) {
    if (pc.neox == 0u || j >= pc.n_rot) return j;
    return (j & 1u) == 0u ? j >> 1 : (j >> 1) + pc.n_rot / 2u;
}

#if LORA
// B's row of fused row g: rows permuted for NEOX RoPE find theirs in head order.
uint lora_row(uint g) {
    return g < pc.perm_rows ? g - g % pc.hd + rope_dim(g % pc.hd) : g;
}
#endif

// RoPE epilogue for the pair of fused rows (row, row + 1) of token t. A stream row (ss_g > 0,
// t >= ss_t0) takes its node's position and keeps its K and V in its own row of Y: streams
// write no KV (Speculative Streaming Eq. 2), ss_attn.comp reads them from there.
void rope_pair(uint row, uint t, float a, float b) {
    const uint hd = pc.hd, qr = pc.n_head * hd, kr = pc.n_head_kv * hd;
    if (pc.bias_off != 0u) { // qwen2's Q/K/V biases, stored in head order, before RoPE
        const uint j = row % hd, head = row < qr + kr ? row - j : row;
        a += FETCH_F1(ROPE, pc.bias_off + (row < qr + kr ? head + rope_dim(j) : row));
        b += FETCH_F1(ROPE, pc.bias_off + (row < qr + kr ? head + rope_dim(j + 1u) : row + 1u));
    }
    const bool stream = pc.ss_g > 0u && t >= pc.ss_t0;
    const uint node = stream ? (t - pc.ss_t0) / pc.ss_g : t;
    const uint p = uint(step_pos(node)), slot = uint(step_n_past()) + t;
    if (row >= qr + kr) { // V: copied to the cache
        const uint h = (row - qr - kr) / hd, j = (row - qr - kr) % hd, base = (h * pc.n_ctx + slot) * hd;
        if (stream) {
            Y[t * pc.y_stride + row] = a;
            Y[t * pc.y_stride + row + 1u] = b;
            return;
        }
        VC[base + j] = a;
        VC[base + j + 1u] = b;
        return;
    }
    const bool is_q = row < qr;
    const uint rr = is_q ? row : row - qr, h = rr / hd, j = rr % hd;
    float o0 = a, o1 = b;
    if (j < pc.n_rot) {
        const uint i = j >> 1, tab = pc.rope_off + p * pc.rope_stride + 2u * i;
        const float c = FETCH_F1(ROPE, tab), s = FETCH_F1(ROPE, tab + 1u);
        o0 = a * c - b * s;
        o1 = a * s + b * c;
    }
    const uint d0 = rope_dim(j), d1 = rope_dim(j + 1u);
    if (is_q || stream) {
        const uint base = t * pc.y_stride + (is_q ? 0u : qr) + h * hd;
        Y[base + d0] = o0;
        Y[base + d1] = o1;
    } else {
        const uint base = (h * pc.n_ctx + slot) * hd;
        KC[base + d0] = o0;
        KC[base + d1] = o1;
    }
}

#if TILED
// One pass: the team's ROWS rows for the TOK tokens from t0.
void tile_pass(const uint t0) {
#else
void main() {
    const uint t0 = gl_WorkGroupID.y * TOK;
#endif
    const uint upr = pc.K / EPU; // units per row
    const bool solo = LK == 1u;
    const uint team = solo ? 1u : TEAM_SIZE, lane = solo ? 0u : TEAM_LANE;
    const uint row0 = (gl_WorkGroupID.x * (solo ? gl_WorkGroupSize.x : N_TEAMS) +
                       (solo ? gl_LocalInvocationID.x : TEAM_ID)) * ROWS;

    float acc[ROWS * TOK];
    uint wrow[ROWS], xrow[TOK];
#if HAS_SCALE
    uint srow[ROWS];
    vec4 sv[ROWS];
    const uint srt = scale_row_stride(pc.K / 32u, team);
#endif
#if HAS_S2 || LANE_RUNS
    vec4 sv2[ROWS];
#endif
#if HAS_S2
    const uint s2 = scale_row_texels(pc.K / 32u, team); // the second set, after a row's scales
#endif
#if HAS_HALF_MIN
    vec4 sv3[ROWS], sv4[ROWS]; // Q2_K: the halves' mins, sets three and four
#endif
    for (uint r = 0u; r < ROWS; r++) {
        const uint row = min(row0 + r, pc.M - 1u); // clamped rows compute, but never store
        wrow[r] = pc.w_off + row * row_texels(upr);
#if HAS_SCALE
        srow[r] = pc.s_off + row * srt;
#endif
    }
    for (uint t = 0u; t < TOK; t++) xrow[t] = pc.x_off + min(t0 + t, pc.n - 1u) * pc.x_stride;
    for (uint i = 0u; i < ROWS * TOK; i++) acc[i] = 0.0;

#if LANE_RUNS
    // Runs of four units per group of 4 team units, the last group's of tail_c (weights.glsl).
    // The group loop and the run's loop count the same for every lane, and the run's scale
    // texel is fetched unconditionally before it: fetched under a per-lane condition, as the
    // other types' are, it ran as slowly as the two fetches this layout saves (docs/perf.md).
    // Unrolling the run's loop (constant component indices) was faster still on full groups
    // but ran a masked fourth unit on runs of three (K = 768).
    const uint tail0 = upr / (4u * team) * (4u * team), tail_c = (upr - tail0 + team - 1u) / team;
    for (uint g0 = 0u; g0 < upr; g0 += 4u * team) {
        const uint c = g0 < tail0 ? 4u : tail_c, first = g0 + c * lane;
        for (uint r = 0u; r < ROWS; r++) k4_scales(FETCH_U4(S, srow[r] + g0 / 4u + lane), sv[r], sv2[r]);
        for (uint k = 0u; k < c; k++) {
        const uint u = first + k;
        if (u >= upr) continue;
#else
    uint it = 0u;
    for (uint u = lane; u < upr; u += team, it++) {
#endif
        vec4 x[TOK][UV];
        for (uint t = 0u; t < TOK; t++)
            for (uint i = 0u; i < UV; i++) x[t][i] = FETCH_F4(X, xrow[t] + u * UV + i);
#if HAS_HALF_MIN
        float xs[TOK], xsh[TOK]; // the sums of the unit's two halves of activations, for their mins
        for (uint t = 0u; t < TOK; t++) {
            xs[t] = dot4(x[t][0], vec4(1.0));
            xsh[t] = dot4(x[t][UV / 2u], vec4(1.0));
            for (uint i = 1u; i < UV / 2u; i++) {
                xs[t] += dot4(x[t][i], vec4(1.0));
                xsh[t] += dot4(x[t][UV / 2u + i], vec4(1.0));
            }
        }
#endif
#if HAS_MIN
        float xs[TOK]; // the unit's sum of activations, for the block's min term
        for (uint t = 0u; t < TOK; t++) {
            xs[t] = dot4(x[t][0], vec4(1.0));
            for (uint i = 1u; i < UV; i++) xs[t] += dot4(x[t][i], vec4(1.0));
        }
#endif
        for (uint r = 0u; r < ROWS; r++) {
            vec4 w[UV];
            decode_unit(wrow[r], u, w);
#if LANE_RUNS
            const float d = sv[r][k], d2 = sv2[r][k];
#elif HAS_SCALE
            if ((it & 3u) == 0u) sv[r] = scales4(srow[r], it >> 2, lane, team);
            const float d = sv[r][it & 3u];
#endif
#if HAS_S2
            if ((it & 3u) == 0u) sv2[r] = scales4(srow[r] + s2, it >> 2, lane, team);
            const float d2 = sv2[r][it & 3u];
#endif
#if HAS_HALF_MIN
            if ((it & 3u) == 0u) {
                sv3[r] = scales4(srow[r] + 2u * s2, it >> 2, lane, team);
                sv4[r] = scales4(srow[r] + 3u * s2, it >> 2, lane, team);
            }
            const float m1 = sv3[r][it & 3u], m2 = sv4[r][it & 3u];
#endif
            for (uint t = 0u; t < TOK; t++) {
#if HAS_HALVES
                // Q6_K: each half of the block has its own scale
                float s = dot4(w[0], x[t][0]), sh = dot4(w[UV / 2u], x[t][UV / 2u]);
                for (uint i = 1u; i < UV / 2u; i++) {
                    s += dot4(w[i], x[t][i]);
                    sh += dot4(w[UV / 2u + i], x[t][UV / 2u + i]);
                }
#if HAS_HALF_MIN
                acc[r * TOK + t] = fma(m2, xsh[t], fma(m1, xs[t], fma(d2, sh, fma(d, s, acc[r * TOK + t]))));
#else
                acc[r * TOK + t] = fma(d2, sh, fma(d, s, acc[r * TOK + t]));
#endif
#else
                float s = dot4(w[0], x[t][0]);
                for (uint i = 1u; i < UV; i++) s += dot4(w[i], x[t][i]);
#if HAS_MIN
                acc[r * TOK + t] = fma(d2, xs[t], fma(d, s, acc[r * TOK + t]));
#elif HAS_SCALE
                acc[r * TOK + t] = fma(d, s, acc[r * TOK + t]);
#else
                acc[r * TOK + t] += s;
#endif
#endif
            }
        }
    }
#if LANE_RUNS
    }
#endif

    if (!solo) {
#if ES_SUBGROUP
        for (uint i = 0u; i < ROWS * TOK; i++) acc[i] = subgroupAdd(acc[i]);
#else
        // Each lane publishes its partial sums; every lane of the team adds them in lane order.
        const uint nv = ROWS * TOK;
        for (uint i = 0u; i < nv; i++) red[gl_LocalInvocationID.x * nv + i] = acc[i];
        barrier();
        const uint lead = TEAM_ID * LANES * nv;
        for (uint i = 0u; i < nv; i++) {
            float s = red[lead + i];
            for (uint l = 1u; l < LANES; l++) s += red[lead + l * nv + i];
            acc[i] = s;
        }
#if TILED
        barrier(); // the next pass writes red again
#endif
#endif
    }

    if (lane != 0u) return;
#if LORA
    {
        // acc += B R: R's and B's texels each fetched once per lane, as the main loop fetches X
        // and W. The padding beyond lora_r is zero in both.
        const uint bq = ((pc.lora_r + 31u) & ~31u) / 4u;
        // tokens before ss_t0 (the main stream's, when stream rows ride in the forward) get
        // nothing: their results stay bit-identical to the plain kernel's
        for (uint j = 0u; j < (pc.lora_r + 3u) / 4u; j++) {
            vec4 rv[TOK];
            for (uint t = 0u; t < TOK; t++) {
                const uint tt = min(t0 + t, pc.n - 1u);
                rv[t] = tt >= pc.ss_t0 ? FETCH_F4(LR, (tt - pc.ss_t0) * pc.lora_stride + j) : vec4(0.0);
            }
            for (uint r = 0u; r < ROWS; r++) {
                const vec4 b = FETCH_F4(LB, lora_row(pc.row0 + min(row0 + r, pc.M - 1u)) * bq + j);
                for (uint t = 0u; t < TOK; t++)
                    if (t0 + t >= pc.ss_t0) acc[r * TOK + t] += dot4(b, rv[t]);
            }
        }
    }
#endif
    for (uint t = 0u; t < TOK; t++) {
        if (t0 + t >= pc.n) break;
        const uint base = (t0 + t) * pc.y_stride + pc.y_off;
        if (EPI >= 2u) { // row pairs: SwiGLU, RoPE, GeGLU
            for (uint r = 0u; r + 1u < ROWS; r += 2u) {
                if (row0 + r + 1u >= pc.M) break;
                const float a = acc[r * TOK + t], b = acc[(r + 1u) * TOK + t];
                if (EPI == 2u)
                    Y[base + (row0 + r) / 2u] = a / (1.0 + exp(-a)) * b;
                else if (EPI == 4u) // GeGLU, gelu's tanh form (gemma)
                    Y[base + (row0 + r) / 2u] = 0.5 * a * (1.0 + tanh(0.7978845608 * (a + 0.044715 * a * a * a))) * b;
                else
                    rope_pair(pc.row0 + row0 + r, t0 + t, a, b);
            }
        } else {
            const float s = pc.scale != 0.0 ? pc.scale : 1.0;
            for (uint r = 0u; r < ROWS; r++) {
                if (row0 + r >= pc.M) break;
                uint y = base + row0 + r;
                const uint g = pc.row0 + row0 + r; // fused row
                if (g < pc.perm_rows) y = y - g + (g / pc.hd) * pc.hd + rope_dim(g % pc.hd);
                // granite's residual scale or logit multiplier (times 1 is exact: the other
                // architectures keep their bits), rounded before the add (common.glsl): the fused
                // stream rows and the stream pass, which may run different variants, agree
                const float v = rounded_mul(acc[r * TOK + t], s);
                if (EPI == 1u)
                    Y[y] += v;
                else if (pc.softcap > 0.0) // gemma2's final logit soft-capping
                    Y[y] = pc.softcap * tanh(v / pc.softcap);
                else
                    Y[y] = v;
            }
        }
    }
}

#if TILED
void main() {
    const uint tile0 = gl_WorkGroupID.y * TILE;
    tile_pass(tile0);
    for (uint c = TOK; c < TILE; c += TOK)
        if (tile0 + c < pc.n) tile_pass(tile0 + c); // uniform
}
#endif
