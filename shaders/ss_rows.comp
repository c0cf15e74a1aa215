#version 450
// ss_rows.comp: the row-wise steps of the Speculative Streaming stream pass (see ss_push.h):
// copying rows (the main stream's hidden states kept at the first MSA layer, the early exit's
// input gathered from the rows of the tokens with children) and starting the streams from a token's hidden state plus the stream embeddings (Eq. 3),
// for one node (the stream pass) or for every node (streams riding in the forward, where X and Y
// are the same rows buffer: nodes' rows are read, rows after them written). One workgroup per row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "ss_push.h"

RO_F4(0, X)
RO_F4(1, P)
#define STEPBIND 2
#include "step.glsl"
layout(binding = 3, std430) writeonly buffer Y_blk { vec4 Y[]; };
layout(push_constant) uniform PC { ES_PC_SS_ROWS(PC_U, PC_F) } pc;

void main() {
    const uint r = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    if (r >= pc.n_rows) return;
    if (pc.mode == 0u) {
        for (uint c = lid; c < pc.width; c += wg) Y[r * pc.y_stride + c] = FETCH_F4(X, r * pc.x_stride + c);
    } else if (pc.mode == 3u) {
        const uint x = uint(step_array(ES_STEP_EXIT_ROWS, r));
        for (uint c = lid; c < pc.width; c += wg) Y[r * pc.y_stride + c] = FETCH_F4(X, x * pc.x_stride + c);
    } else if (pc.mode == 2u) {
        const uint node = r / pc.g, j = r % pc.g, y = pc.y_row0 + r;
        for (uint c = lid; c < pc.width; c += wg)
            Y[y * pc.y_stride + c] = FETCH_F4(X, node * pc.x_stride + c) + FETCH_F4(P, j * pc.p_stride + c);
    } else {
        const uint node = uint(step_at(ES_STEP_SS_NODE));
        for (uint c = lid; c < pc.width; c += wg)
            Y[r * pc.y_stride + c] = FETCH_F4(X, node * pc.x_stride + c) + FETCH_F4(P, r * pc.p_stride + c);
    }
}
