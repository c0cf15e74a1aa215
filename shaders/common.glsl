// common.glsl: what every kernel shares.
//  - How read-only data is fetched: through uniform texel buffers (ES_TEXEL=1, ~40x faster than
//    storage buffers on lavapipe) or storage buffers (ES_TEXEL=0, the fallback). Both read the
//    same bytes: the host binds a texel view or a buffer range of one allocation.
//  - Reductions across a team of lanes: subgroup arithmetic (ES_SUBGROUP=1, a team is a
//    subgroup) or shared memory (ES_SUBGROUP=0, a team is LANES consecutive invocations).
//  - The push-constant X-macros of push.h.
// Specialisation constant ids: 0 = local_size_x, 1 = LANES (team size when ES_SUBGROUP=0);
// kernels number theirs from 2.
// It deliberately holds no kernel logic.
#extension GL_GOOGLE_include_directive : require
#if ES_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

#include "push.h"
#define PC_U(x) uint x;
#define PC_F(x) float x;

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint LANES = 8;

#if ES_TEXEL
#define RO_F4(b, N) layout(binding = b) uniform samplerBuffer N;
#define RO_U4(b, N) layout(binding = b) uniform usamplerBuffer N;
#define RO_F1(b, N) layout(binding = b) uniform samplerBuffer N;
#define RO_I1(b, N) layout(binding = b) uniform isamplerBuffer N;
#define FETCH_F4(N, i) texelFetch(N, int(i))
#define FETCH_U4(N, i) texelFetch(N, int(i))
#define FETCH_F1(N, i) texelFetch(N, int(i)).x
#define FETCH_I1(N, i) texelFetch(N, int(i)).x
#else
#define RO_F4(b, N) layout(binding = b, std430) readonly buffer N##_blk { vec4 N[]; };
#define RO_U4(b, N) layout(binding = b, std430) readonly buffer N##_blk { uvec4 N[]; };
#define RO_F1(b, N) layout(binding = b, std430) readonly buffer N##_blk { float N[]; };
#define RO_I1(b, N) layout(binding = b, std430) readonly buffer N##_blk { int N[]; };
#define FETCH_F4(N, i) N[i]
#define FETCH_U4(N, i) N[i]
#define FETCH_F1(N, i) N[i]
#define FETCH_I1(N, i) N[i]
#endif

// Teams: the unit that shares one reduction.
#if ES_SUBGROUP
#define TEAM_SIZE gl_SubgroupSize
#define TEAM_LANE gl_SubgroupInvocationID
#define TEAM_ID gl_SubgroupID
#define N_TEAMS gl_NumSubgroups
// The online softmax partials of a subgroup's lanes (max m, sum l, weighted values acc[0..n))
// rescaled to their common max and summed by subgroup arithmetic: every lane gets the whole. A
// lane that folded no key (m = -inf) adds nothing. (attn_team.comp, ss_attn_team.comp)
#define SUBGROUP_SOFTMAX_MERGE(m, l, acc, n)                                                    \
    {                                                                                           \
        const float mt_ = subgroupMax(m), w_ = (m) == -1.0 / 0.0 ? 0.0 : exp((m) - mt_);        \
        l = subgroupAdd((l) * w_);                                                              \
        for (uint c_ = 0u; c_ < (n); c_++) acc[c_] = subgroupAdd(acc[c_] * w_);                \
        m = mt_;                                                                                \
    }
#else
#define TEAM_SIZE LANES
#define TEAM_LANE (gl_LocalInvocationID.x % LANES)
#define TEAM_ID (gl_LocalInvocationID.x / LANES)
#define N_TEAMS (gl_WorkGroupSize.x / LANES)
#endif

// a * s rounded on its own, never fused into the add that consumes it (an epilogue's x += s y rounds
// s y first, as the CPU's does, in every variant alike). A function of its own because glslang
// carries `precise` back through everything that feeds the variable within a function: declared
// in the caller, it would forbid fusing in the whole accumulation before it.
float rounded_mul(const float a, const float s) {
    precise const float v = a * s;
    return v;
}
vec4 rounded_mul(const vec4 a, const float s) {
    precise const vec4 v = a * s;
    return v;
}

// A dot product of four pairs in a fixed order, so that every kernel computing the same product
// rounds the same way whatever else it computes (batch invariance).
float dot4(vec4 a, vec4 b) {
    return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, a.x * b.x)));
}
