#version 450
// qk_norm_rope.comp: attention's inputs for the architectures that normalise each Q and K head
// (qwen3, gemma3, lib/core/arch.h qk_norm), one head of one row of QKV per workgroup (x: the row,
// y: the head, Q heads then K heads; a K head's workgroup also moves the V head of its number), in the CPU's order
// (es__cpu_qkv_prepare): the Q, K, V biases when the layer has them, the RMSNorm of every Q head
// and every K head over its hd values, y = (x * (1 / sqrt(mean(x^2) + eps))) * w with one weight
// vector for all Q heads and one for all K heads, then RoPE at the row's position. A token row
// (t < ss_t0) keeps its Q in QKV and writes K and V to cache slot n_past + t, as mul_mat.comp's
// RoPE epilogue does for the other architectures; a stream row keeps Q, K and V in its row
// (streams write no KV, Speculative Streaming Eq. 2) and takes its node's position.
// Why a kernel of its own: the norm needs a head's sum of squares before any of its values can be
// rotated, which a per-pair epilogue cannot see, so for these architectures the projection stores
// plain rows in head order (no NEOX row permutation at upload, lib/vulkan/model_vk.c) and this
// dispatch follows it. A workgroup per head, not per row: on the H200 a decode step's one
// workgroup walking 24 heads in turn took about 24 us a layer, 0.77x llama's decode rate on
// Qwen3-0.6B's shape (docs/perf.md). QKV is read and written in head order; the cache is in head order too, so
// kv_shift.comp re-rotates these keys as it does every other architecture's.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "reduce.glsl"
#include "ss_push.h"

layout(binding = 0, std430) buffer QKV_blk { float QKV[]; }; // [n][qkv_stride]: Q, K, V heads
RO_F1(1, ROPE) // tables of [n_ctx, or 1 for the identity][n_rot / 2][2]: cos, sin (the layer's at rope_off, positions rope_stride apart); then the layers' biases
#define STEPBIND 2
#include "step.glsl"
RO_F4(3, G) // the model's norm vectors (vec4 texels): the layer's Q and K head weights at q_norm, k_norm
layout(binding = 4, std430) writeonly buffer KC_blk { float KC[]; }; // [n_head_kv][n_ctx][hd]
layout(binding = 5, std430) writeonly buffer VC_blk { float VC[]; };
layout(push_constant) uniform PC { ES_PC_QK_NORM_ROPE(PC_U, PC_F) } pc;

float weight(uint i) {
    return FETCH_F4(G, i / 4u)[i % 4u];
}

// The pair RoPE turns together: (2i, 2i + 1) (NORM) or (i, i + n_rot / 2) (NEOX), head order.
uvec2 pair(uint i) {
    return pc.neox != 0u ? uvec2(i, i + pc.n_rot / 2u) : uvec2(2u * i, 2u * i + 1u);
}

// A result of head h: into the cache (to_cache: a token row's K) or back into its row.
void put(bool to_cache, uint i, float v) {
    if (to_cache)
        KC[i] = v;
    else
        QKV[i] = v;
}

void main() {
    const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    if (t >= pc.n) return; // the whole workgroup: the barriers below stay uniform
    const uint hd = pc.hd, half_rot = pc.n_rot / 2u, qr = pc.n_head * hd, kr = pc.n_head_kv * hd;
    const bool stream = t >= pc.ss_t0, is_k = h >= pc.n_head;
    const uint node = !stream ? t : pc.ss_g > 0u ? (t - pc.ss_t0) / pc.ss_g : uint(step_at(ES_STEP_SS_NODE));
    const uint rope = pc.rope_off + uint(step_pos(node)) * pc.rope_stride, base = t * pc.qkv_stride;
    const uint slot = uint(step_n_past()) + t, x0 = base + h * hd, w0 = is_k ? pc.k_norm : pc.q_norm;
    const uint v0 = base + qr + kr + (h - pc.n_head) * hd; // a K head's workgroup also moves its V head
    if (pc.bias_off != 0u) { // before the norm, as the CPU adds them
        for (uint j = lid; j < hd; j += wg) QKV[x0 + j] += FETCH_F1(ROPE, pc.bias_off + h * hd + j);
        for (uint j = lid; is_k && j < hd; j += wg) QKV[v0 + j] += FETCH_F1(ROPE, pc.bias_off + qr + kr + (h - pc.n_head) * hd + j);
        memoryBarrierBuffer();
        barrier();
    }
    for (uint j = lid; is_k && !stream && j < hd; j += wg)
        VC[((h - pc.n_head) * pc.n_ctx + slot) * hd + j] = QKV[v0 + j];
    // Each value is read for the sum by one invocation and rewritten by the one that owns its
    // pair; wg_sum's barriers order the two.
    float s = 0.0;
    for (uint j = lid; j < hd; j += wg) s += QKV[x0 + j] * QKV[x0 + j];
    const float r = 1.0 / sqrt(wg_sum(s) / float(hd) + pc.eps);
    const bool to_cache = is_k && !stream;
    const uint y0 = to_cache ? ((h - pc.n_head) * pc.n_ctx + slot) * hd : x0;
    for (uint i = lid; i < half_rot; i += wg) {
        const uvec2 e = pair(i);
        const float a = QKV[x0 + e.x] * r * weight(w0 + e.x), b = QKV[x0 + e.y] * r * weight(w0 + e.y);
        const float c = FETCH_F1(ROPE, rope + 2u * i), sn = FETCH_F1(ROPE, rope + 2u * i + 1u);
        put(to_cache, y0 + e.x, a * c - b * sn);
        put(to_cache, y0 + e.y, a * sn + b * c);
    }
    for (uint j = pc.n_rot + lid; j < hd; j += wg) put(to_cache, y0 + j, QKV[x0 + j] * r * weight(w0 + j));
}
