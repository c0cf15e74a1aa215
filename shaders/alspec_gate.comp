#version 450
// alspec_gate.comp: the flags that gate ALSpec's two-device token (Algorithm 2 with priority
// gating; lib/vulkan/alspec_vk.c), one invocation. G on each device: [0, n_layer] SND, this
// device is the sender of layer l (SND[n_layer]: it holds the logits); [n_layer + 1, 2 n_layer]
// MISS, it was layer l's sender and the check missed. A word in each side's records of the link
// window carries the sender's verdict to the other device:
//  - CHECK, after layer l's reducer: where this device sent, MISS[l] from its verdict and the hit
//    published in its side's flag; elsewhere MISS[l] = 0;
//  - ADVANCE, once the flags were exchanged: SND[l + 1] = the receiver on a hit, else the sender.
// Dispatches gated on these words read them through conditional rendering.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(binding = 0, std430) readonly buffer V_blk { vec4 VERD[]; }; // attn_spec.comp's, [n_layer][2]
layout(binding = 1, std430) buffer G_blk { uint G[]; };
layout(binding = 2, std430) buffer W_blk { uint WIN[]; };
layout(push_constant) uniform PC { ES_PC_ALSPEC_GATE(PC_U, PC_F) } pc;

uint flag(uint side, uint l) {
    return (side * (pc.n_layer + 1u) + l + 1u) * pc.rec_stride + pc.flag_off;
}

void main() {
    if (gl_GlobalInvocationID.x != 0u) return;
    const uint l = pc.layer, L = pc.n_layer;
    const bool sent = G[l] != 0u;
    if (pc.mode == ES_ALSPEC_GATE_CHECK) {
        const bool hit = sent && VERD[2u * l + 1u].y != 0.0;
        G[L + 1u + l] = sent && !hit ? 1u : 0u;
        if (sent) WIN[flag(pc.side, l)] = hit ? 1u : 0u;
        return;
    }
    const uint sender = sent ? pc.side : 1u - pc.side;
    const bool hit = WIN[flag(sender, l)] != 0u;
    G[l + 1u] = (hit ? !sent : sent) ? 1u : 0u;
}
