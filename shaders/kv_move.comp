#version 450
// kv_move.comp: KV-cache compaction after verification (and of the survivors' rows and KV when
// pruning removes tree tokens mid-forward): slot n_past + keep[r] moves to n_past + r for
// r < n_keep, in ascending r. keep ascends and keep[r] >= r, so a slot is always
// read (as a source) before a later r overwrites it; each invocation owns whole columns, so the
// order holds without barriers. One workgroup per (head, K or V) of one layer.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#define STEPBIND 0
#include "step.glsl"
layout(binding = 1, std430) buffer KC_blk { float KC[]; };
layout(binding = 2, std430) buffer VC_blk { float VC[]; };
layout(push_constant) uniform PC { ES_PC_KV_MOVE(PC_U, PC_F) } pc;

void main() {
    const uint h = gl_WorkGroupID.x, which = gl_WorkGroupID.y, lid = gl_LocalInvocationID.x;
    const uint base = h * pc.n_ctx * pc.row;
    const uint n_past = pc.step_n_past != 0u ? uint(step_n_past()) : pc.n_past;
    for (uint r = 0u; r < pc.n_keep; r++) {
        const uint src = n_past + uint(step_array(ES_STEP_KEEP, r)), dst = n_past + r;
        if (src == dst) continue;
        for (uint c = lid; c < pc.row; c += gl_WorkGroupSize.x) {
            if (which == 0u)
                KC[base + dst * pc.row + c] = KC[base + src * pc.row + c];
            else
                VC[base + dst * pc.row + c] = VC[base + src * pc.row + c];
        }
    }
}
