#version 450
// attn_spec.comp: the reducer of ALSpec's speculative flash decode (paper, Algorithm 3 and
// section 4.1), after attn.comp has written every split's partial of a decode token. One
// workgroup per token, over all its heads:
//  - the speculation: the splits of the first chunk [0, S) and of the chunks holding the last S
//    keys (lib/core/spec_attn.h; S a multiple of the split) folded on their own into SPEC;
//  - the exact output: every split folded in order into O, with attn_merge.glsl, the code the plain
//    attention's attn_merge.comp runs, so O is the plain attention's bit for bit; the speculation's
//    partials are the same partials (nothing is computed twice);
//  - the check of section 3.2 over all heads: ||SPEC - O||_2 < lambda ||O||_2, written to VERD;
//  - the gating (Algorithm 1's commit): with the gate flag set, a hit replaces O by SPEC, so the
//    layer's next ops read the speculation, decided on the device without a host round trip.
// Below 2S keys there is no speculation: O only (if attn.comp did not write it), VERD invalid.
// VERD holds two vec4 per slot (slot pc.v_slot + token): the host's (lambda, flags) in, where
// flags = 1 (gate) + 2 (force a miss), and the verdict (valid, hit, err2, norm2) out. With
// pc.spec_only (ALSpec's first part, before attn.comp has computed the middle splits) the
// speculation alone: SPEC and the verdict's valid.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

RO_F4(0, PART)
#define STEPBIND 1
#include "step.glsl"
#include "attn_merge.glsl"
layout(binding = 2, std430) writeonly buffer O_blk { vec4 O[]; };    // [n][o_stride / 4]
layout(binding = 3, std430) buffer S_blk { vec4 SPEC[]; };           // [n][o_stride / 4]
layout(binding = 4, std430) buffer V_blk { vec4 VERD[]; };           // [slots][2]: (lambda, flags), verdict
layout(push_constant) uniform PC { ES_PC_ATTN_SPEC(PC_U, PC_F) } pc;

shared vec2 red[1024];

void main() {
    const uint tl = gl_WorkGroupID.x, t = pc.t0 + tl, lid = gl_LocalInvocationID.x, hd4 = pc.hd / 4u;
    const uint wg = gl_WorkGroupSize.x, n = uint(step_pos(t)) + 1u, ns = (n - 1u) / pc.split + 1u;
    const bool valid = n >= 2u * pc.chunk;
    const uint s2 = valid ? (n - pc.chunk) / pc.chunk * pc.chunk : 0u;
    const uvec4 all = uvec4(0u, ns, ns, ns), sp = uvec4(0u, pc.chunk / pc.split, s2 / pc.split, ns);
    const vec4 vin = VERD[2u * (pc.v_slot + tl)];
    const uint flags = uint(vin.y);
    vec2 e = vec2(0.0); // this lane's share of (err2, norm2)
    if (pc.spec_only != 0u) {
        for (uint h = 0u; valid && h < pc.n_head; h++) {
            const uint pb = (tl * pc.n_head + h) * pc.max_splits * (1u + hd4), ob = t * (pc.o_stride / 4u) + h * hd4;
            const float Ms = merge_max(pb, hd4, sp), Ls = merge_sum(pb, hd4, sp, Ms);
            for (uint c = lid; c < hd4; c += wg) SPEC[ob + c] = merge_out(pb, hd4, sp, Ms, Ls, c);
        }
        if (lid == 0u) VERD[2u * (pc.v_slot + tl) + 1u] = vec4(valid ? 1.0 : 0.0, 0.0, 0.0, 0.0);
        return;
    }
    if (ns > 1u) {
        for (uint h = 0u; h < pc.n_head; h++) {
            const uint pb = (tl * pc.n_head + h) * pc.max_splits * (1u + hd4), ob = t * (pc.o_stride / 4u) + h * hd4;
            const float M = merge_max(pb, hd4, all), L = merge_sum(pb, hd4, all, M);
            float Ms = 0.0, Ls = 1.0;
            if (valid) {
                Ms = merge_max(pb, hd4, sp);
                Ls = merge_sum(pb, hd4, sp, Ms);
            }
            for (uint c = lid; c < hd4; c += wg) {
                const vec4 a = merge_out(pb, hd4, all, M, L, c);
                O[ob + c] = a;
                if (!valid) continue;
                const vec4 s = merge_out(pb, hd4, sp, Ms, Ls, c), d = s - a;
                SPEC[ob + c] = s;
                e += vec2(dot(d, d), dot(a, a));
            }
        }
    }
    // the sums over lanes in a fixed tree order (a power-of-two workgroup)
    red[lid] = e;
    barrier();
    for (uint w = wg / 2u; w > 0u; w /= 2u) {
        if (lid < w) red[lid] += red[lid + w];
        barrier();
    }
    const vec2 r = red[0];
    const bool hit = valid && r.x < vin.x * vin.x * r.y && (flags & 2u) == 0u;
    if (lid == 0u) VERD[2u * (pc.v_slot + tl) + 1u] = vec4(valid ? 1.0 : 0.0, hit ? 1.0 : 0.0, r.x, r.y);
    if (!hit || (flags & 1u) == 0u) return;
    // each lane copies back what it wrote itself: no other invocation's writes are read
    for (uint h = 0u; h < pc.n_head; h++) {
        const uint ob = t * (pc.o_stride / 4u) + h * hd4;
        for (uint c = lid; c < hd4; c += wg) O[ob + c] = SPEC[ob + c];
    }
}
