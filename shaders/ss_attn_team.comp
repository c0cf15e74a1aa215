#version 450
// ss_attn_team.comp: multi-stream attention with one subgroup per (stream row, head)
// (ss_attn_body.glsl); built with subgroup arithmetic only (the host picks it only then).
#define TEAM ES_SUBGROUP
#extension GL_GOOGLE_include_directive : require
#include "ss_attn_body.glsl"
