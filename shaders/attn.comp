#version 450
// attn.comp: attention with one invocation per (token, head, split) (attn_body.glsl).
#define TEAM 0
#extension GL_GOOGLE_include_directive : require
#include "attn_body.glsl"
