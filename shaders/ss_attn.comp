#version 450
// ss_attn.comp: multi-stream attention with one invocation per (stream row, head) (ss_attn_body.glsl).
#define TEAM 0
#extension GL_GOOGLE_include_directive : require
#include "ss_attn_body.glsl"
