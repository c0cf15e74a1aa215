// weights.glsl: the device layout of weight matrices and how one chunk of a row is decoded.
// Rows are padded to a multiple of 32 elements. Every type keeps the quantised values in one
// plane W (texels of 16 bytes) and, for the block types, the block scales as f32 in a plane S:
//   F32   W: RGBA32F, 4 values per texel                       (chunk = 4 elements)
//   F16   W: RGBA32UI, 8 halves per texel, element 2i in the low half of word i
//   BF16  W: RGBA32UI, 8 bfloat16 per texel, packed the same way
//   Q8_0  W: RGBA32UI, 16 int8 per texel (half a block);  S: one f32 per 32-element block
//   Q4_0  W: RGBA32UI, one block per texel in ggml's nibble order (byte j holds elements j and
//         j + 16);  S: one f32 per block
// The repacking happens once at upload (lib/vulkan/weights.c). Select the type with one of
// TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0. With ES_TEXEL=0 and ES_NATIVE=1, F16 and
// Q8_0 are loaded with 16-/8-bit storage types instead of being unpacked from 32-bit words.
// Decoding here is exact (integer quants and f16/bf16 widen exactly to f32); the caller scales.
#ifndef ES_NATIVE
#define ES_NATIVE 0
#endif
#ifndef TYPE_F32
#define TYPE_F32 0
#endif
#ifndef TYPE_F16
#define TYPE_F16 0
#endif
#ifndef TYPE_BF16
#define TYPE_BF16 0
#endif
#ifndef TYPE_Q8_0
#define TYPE_Q8_0 0
#endif
#ifndef TYPE_Q4_0
#define TYPE_Q4_0 0
#endif

#if ES_NATIVE && TYPE_F16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#if ES_NATIVE && TYPE_Q8_0
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#endif

#if TYPE_F32
#define EPC 4
#define HAS_SCALE 0
#elif TYPE_F16 || TYPE_BF16
#define EPC 8
#define HAS_SCALE 0
#elif TYPE_Q8_0
#define EPC 16
#define HAS_SCALE 1
#elif TYPE_Q4_0
#define EPC 32
#define HAS_SCALE 1
#else
#error "weights.glsl: no TYPE_* defined"
#endif
#define XV (EPC / 4) // vec4s of activations per chunk

#if ES_NATIVE && TYPE_F16 && !ES_TEXEL
layout(binding = WBIND, std430) readonly buffer W_blk { f16vec4 W[]; };
#elif ES_NATIVE && TYPE_Q8_0 && !ES_TEXEL
layout(binding = WBIND, std430) readonly buffer W_blk { i8vec4 W[]; };
#elif TYPE_F32
RO_F4(WBIND, W)
#else
RO_U4(WBIND, W)
#endif
#if HAS_SCALE
RO_F1(SBIND, S)
#endif

// Four signed bytes of a word, sign-extended by arithmetic shifts.
vec4 q8_word(uint u) {
    int v = int(u);
    return vec4((v << 24) >> 24, (v << 16) >> 24, (v << 8) >> 24, v >> 24);
}

vec4 bf16_pair2(uint a, uint b) {
    return vec4(uintBitsToFloat(a << 16), uintBitsToFloat(a & 0xffff0000u), uintBitsToFloat(b << 16),
                uintBitsToFloat(b & 0xffff0000u));
}

// Decodes chunk c (counted in texels) of the row starting at texel `row` into w[XV].
void decode_chunk(uint row, uint c, out vec4 w[XV]) {
#if ES_NATIVE && TYPE_F16 && !ES_TEXEL
    uint i = (row + c) * 2u;
    w[0] = vec4(W[i]);
    w[1] = vec4(W[i + 1u]);
#elif ES_NATIVE && TYPE_Q8_0 && !ES_TEXEL
    uint i = (row + c) * 4u;
    for (uint k = 0u; k < 4u; k++) w[k] = vec4(W[i + k]);
#elif TYPE_F32
    w[0] = FETCH_F4(W, row + c);
#else
    uvec4 u = FETCH_U4(W, row + c);
#if TYPE_F16
    w[0] = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
    w[1] = vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
#elif TYPE_BF16
    w[0] = bf16_pair2(u.x, u.y);
    w[1] = bf16_pair2(u.z, u.w);
#elif TYPE_Q8_0
    w[0] = q8_word(u.x);
    w[1] = q8_word(u.y);
    w[2] = q8_word(u.z);
    w[3] = q8_word(u.w);
#elif TYPE_Q4_0
    for (uint k = 0u; k < 4u; k++) {
        uint v = u[k];
        w[k] = vec4(v & 15u, (v >> 8) & 15u, (v >> 16) & 15u, (v >> 24) & 15u) - 8.0;
        w[k + 4u] = vec4((v >> 4) & 15u, (v >> 12) & 15u, (v >> 20) & 15u, v >> 28) - 8.0;
    }
#endif
#endif
}

// The scale of chunk c of a row whose first block scale is element `srow` of S.
float chunk_scale(uint srow, uint c) {
#if TYPE_Q8_0
    return FETCH_F1(S, srow + (c >> 1));
#elif TYPE_Q4_0
    return FETCH_F1(S, srow + c);
#else
    return 1.0;
#endif
}
