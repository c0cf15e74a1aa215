#version 450
// attn_team.comp: attention with one subgroup per (token, head, split) (attn_body.glsl); built
// with subgroup arithmetic only (the host picks it only then).
#define TEAM ES_SUBGROUP
#extension GL_GOOGLE_include_directive : require
#include "attn_body.glsl"
