#version 450
// alspec_copy.comp: the copies of ALSpec's two-device token (lib/vulkan/alspec_vk.c) between a
// device's buffers and the link window: rows x n floats. A dispatch rather than vkCmdCopyBuffer
// because conditional rendering gates dispatches only: the receiver's copies of the speculation
// and the residual, and a KV slot taken from the other device, run only where a flag says so.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(binding = 0, std430) readonly buffer S_blk { float S[]; };
layout(binding = 1, std430) writeonly buffer D_blk { float D[]; };
layout(push_constant) uniform PC { ES_PC_ALSPEC_COPY(PC_U, PC_F) } pc;

void main() {
    const uint r = gl_WorkGroupID.y;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * gl_WorkGroupSize.x)
        D[pc.dst_off + r * pc.dst_stride + i] = S[pc.src_off + r * pc.src_stride + i];
}
