// attn_merge.glsl: flash decoding's reduction of one (token, head)'s split partials, shared by
// attn_merge.comp (the plain attention) and attn_spec.comp (ALSpec's speculative flash decode),
// so that both compute the exact output with the same operations in the same order: bit for bit.
// The partials (max m_s, sum l_s, unnormalised acc_s; attn.comp) sit at PART[pb + s * (1 + hd4)].
// A range r folds the splits [r.x, r.y) and then [r.z, r.w):
//   M = max_s m_s,  L = sum_s l_s exp(m_s - M),  out_c = sum_s acc_s,c exp(m_s - M) / L.
// `precise` keeps the compiler from fusing differently in the two kernels.
// Needs RO_F4 PART declared before it is included.

float merge_max(uint pb, uint hd4, uvec4 r) {
    float M = -1.0 / 0.0;
    for (uint s = r.x; s < r.y; s++) M = max(M, FETCH_F4(PART, pb + s * (1u + hd4)).x);
    for (uint s = r.z; s < r.w; s++) M = max(M, FETCH_F4(PART, pb + s * (1u + hd4)).x);
    return M;
}

float merge_sum(uint pb, uint hd4, uvec4 r, float M) {
    precise float L = 0.0;
    for (uint s = r.x; s < r.y; s++) {
        const vec4 ml = FETCH_F4(PART, pb + s * (1u + hd4));
        L += ml.y * exp(ml.x - M);
    }
    for (uint s = r.z; s < r.w; s++) {
        const vec4 ml = FETCH_F4(PART, pb + s * (1u + hd4));
        L += ml.y * exp(ml.x - M);
    }
    return L;
}

vec4 merge_out(uint pb, uint hd4, uvec4 r, float M, float L, uint c) {
    precise vec4 a = vec4(0.0);
    for (uint s = r.x; s < r.y; s++) {
        const uint b = pb + s * (1u + hd4);
        a = fma(vec4(exp(FETCH_F4(PART, b).x - M)), FETCH_F4(PART, b + 1u + c), a);
    }
    for (uint s = r.z; s < r.w; s++) {
        const uint b = pb + s * (1u + hd4);
        a = fma(vec4(exp(FETCH_F4(PART, b).x - M)), FETCH_F4(PART, b + 1u + c), a);
    }
    precise vec4 o = a * (1.0 / L);
    return o;
}
