// weights.glsl: the device layout of weight matrices and how one unit of a row is decoded.
// A row is cut into units, the piece one lane handles per step: F32 4 elements (one texel),
// F16 and BF16 8 (one texel), Q8_0 and Q4_0 one 32-element block (two texels, one texel).
// Rows are padded with zeros to a multiple of 32 elements. Planes:
//   F32   W: RGBA32F, 4 values per texel
//   F16   W: RGBA32UI, 8 halves per texel, element 2i in the low half of word i
//   BF16  W: RGBA32UI, 8 bfloat16 per texel, packed the same way
//   Q8_0  W: RGBA32UI, the 32 int8 of a block in two texels
//   Q4_0  W: RGBA32UI, one block per texel in ggml's nibble order (byte j holds elements j and
//         j + 16)
//   Q4_K  W: as Q4_0, one 32-element sub-block per texel (repacked to Q4_0's nibble order), no offset
//   Q5_K  W: as Q5_1, the sub-block's 5-bit quants (no offset): 5 bits a weight
//   Q6_K  W: groups of four blocks in six texels: the blocks' low nibbles as Q4_0's, then their
//         top two bits, two words per block (block i's in texel 4 + i / 2, .xy or .zw; word h
//         holds element 16 h + 4 k + c at bits 8 c + 2 k), offset 32: 6 bits a weight, where a
//         byte per quant took 8 (a row's last group may be partial)
//   Q3_K  W: as Q4_0, the sub-block's 3-bit quants plus 4, offset 4 (two 16-element scales: S2)
//   Q2_K  W: as Q4_K, the sub-block's 2-bit quants in nibbles (two scales and two mins: S2-S4)
//   IQ4_NL W: as Q4_0 (the file's own nibbles), each nibble an index into the IQ4_NL grid
//   Q5_0  W: groups of four blocks in five texels: the blocks' nibbles as Q4_0's, then their four
//         32-bit qh words (bit j: element j's fifth bit), offset 16: 5 bits a weight, where the
//         file's f16 scales sit in S. A row's last group may be partial (row_texels)
//   Q5_1  W: as Q5_0, no offset (a min per block: S2)
//   Q4_1  W: as Q4_0, no offset (a min per block: S2)
//   Q8_0, Q4_0, K-quants  S: f32 block scales as RGBA32F, four per texel, lane-interleaved: the lane that
//         handles blocks l, l + T, l + 2T, l + 3T of a row (T = lanes per team) finds their four
//         scales in one texel, so scales cost one fetch per four blocks (on lavapipe a texel
//         fetch costs about as much as the arithmetic of a whole unit). Row r's scales start at
//         texel s_off + r * ceil(blocks / (4 T)) * T.
//   K-quants, Q4_1, Q5_1  S holds a second set of per-block floats after each row's scales (same
//         layout, scale_row_texels further): Q4_1 and Q5_1 the block's min m (x = d q + m, so a
//         unit adds d (q . x) + m (sum of x)), Q6_K the scale of the block's last 16 elements (the
//         first set scales its first 16); Q3_K as Q6_K. Q2_K keeps four sets: the scales of the
//         block's two halves, then their -dmin m (x = d sc q - dmin m per 16).
//   Q4_K, Q5_K  S instead: RGBA32UI, scales and mins packed (LANE_RUNS): a lane walks runs of
//         consecutive blocks instead of every T-th block: in each group of 4 T blocks lane l takes blocks
//         4 l .. 4 l + 3, in the last group, of n < 4 T blocks, c = ceil(n / T) from c l
//         (mul_mat.comp). A run of at most four lies in at most two super-blocks, so one texel
//         per lane and group holds all it needs, 44 bits per block where two f32 took 64: byte k
//         of .x and .y the 6-bit sc and m of the run's block k (bit 7 of .x: the block lies in the
//         run's second super-block), .z and .w packHalf2x16(d, -dmin) of its first and second
//         super-block. d sc and -dmin m are formed in the shader, exactly (an 11-bit f16
//         significand times 6 bits), as the CPU's f32 products. Texels lie where Q4_0's scales
//         do: one scale fetch per run of four blocks, where two f32 per block took two.
// The repacking happens once at upload (lib/vulkan/weights.c). Select the type with one of
// TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q8_0, TYPE_Q4_0, TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K, TYPE_Q2_K,
// TYPE_Q3_K, TYPE_IQ4_NL, TYPE_Q5_0, TYPE_Q5_1, TYPE_Q4_1. With ES_TEXEL=0 and ES_NATIVE=1, F16 and
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
#ifndef TYPE_Q4_K
#define TYPE_Q4_K 0
#endif
#ifndef TYPE_Q5_K
#define TYPE_Q5_K 0
#endif
#ifndef TYPE_Q6_K
#define TYPE_Q6_K 0
#endif
#ifndef TYPE_Q2_K
#define TYPE_Q2_K 0
#endif
#ifndef TYPE_Q3_K
#define TYPE_Q3_K 0
#endif
#ifndef TYPE_IQ4_NL
#define TYPE_IQ4_NL 0
#endif
#ifndef TYPE_Q5_0
#define TYPE_Q5_0 0
#endif
#ifndef TYPE_Q5_1
#define TYPE_Q5_1 0
#endif
#ifndef TYPE_Q4_1
#define TYPE_Q4_1 0
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
#define EPU 4  // elements per unit
#define TPU 1  // texels per unit
#define HAS_SCALE 0
#elif TYPE_F16 || TYPE_BF16
#define EPU 8
#define TPU 1
#define HAS_SCALE 0
#elif TYPE_Q8_0
#define EPU 32
#define TPU 2
#define HAS_SCALE 1
#elif TYPE_Q4_0
#define EPU 32
#define TPU 1
#define HAS_SCALE 1
#elif TYPE_Q4_K
#define EPU 32
#define TPU 1
#define HAS_SCALE 1
#define HAS_MIN 1
#define LANE_RUNS 1
#elif TYPE_Q5_K
#define EPU 32
#define TPU 1 // five texels per four units (row_texels)
#define HAS_SCALE 1
#define HAS_MIN 1
#define LANE_RUNS 1
#elif TYPE_Q6_K
#define EPU 32
#define TPU 1 // six texels per four units (row_texels)
#define HAS_SCALE 1
#define HAS_HALVES 1
#define LANE_RUNS 1
#elif TYPE_Q3_K
#define EPU 32
#define TPU 1
#define HAS_SCALE 1
#define HAS_HALVES 1
#elif TYPE_Q2_K
#define EPU 32
#define TPU 1
#define HAS_SCALE 1
#define HAS_HALVES 1
#define HAS_HALF_MIN 1
#elif TYPE_IQ4_NL || TYPE_Q5_0
#define EPU 32
#define TPU 1 // Q5_0: five texels per four units (row_texels)
#define HAS_SCALE 1
#elif TYPE_Q5_1 || TYPE_Q4_1
#define EPU 32
#define TPU 1 // Q5_1: five texels per four units (row_texels)
#define HAS_SCALE 1
#define HAS_MIN 1
#else
#error "weights.glsl: no TYPE_* defined"
#endif
#define UV (EPU / 4) // vec4s of activations per unit
#ifndef HAS_MIN
#define HAS_MIN 0
#endif
#ifndef HAS_HALVES
#define HAS_HALVES 0
#endif
#ifndef HAS_HALF_MIN
#define HAS_HALF_MIN 0 // a min per 16-element half too (Q2_K): S holds four sets
#endif
#ifndef LANE_RUNS
#define LANE_RUNS 0
#endif
#if (HAS_MIN || HAS_HALVES) && !LANE_RUNS
#define HAS_S2 1 // a second set of per-block floats in S
#else
#define HAS_S2 0
#endif

#if ES_NATIVE && TYPE_F16 && !ES_TEXEL
layout(binding = WBIND, std430) readonly buffer W_blk { f16vec4 W[]; };
#elif ES_NATIVE && TYPE_Q8_0 && !ES_TEXEL
layout(binding = WBIND, std430) readonly buffer W_blk { i8vec4 W[]; };
#elif TYPE_F32
RO_F4(WBIND, W)
#else
RO_U4(WBIND, W)
#endif
#if LANE_RUNS
RO_U4(SBIND, S)
#elif HAS_SCALE
RO_F4(SBIND, S)
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

void q4_texel(uvec4 u, float off, out vec4 w[UV]) {
    for (uint k = 0u; k < 4u; k++) {
        uint v = u[k];
        w[k] = vec4(v & 15u, (v >> 8) & 15u, (v >> 16) & 15u, (v >> 24) & 15u) - off;
        w[k + 4u] = vec4((v >> 4) & 15u, (v >> 12) & 15u, (v >> 20) & 15u, v >> 28) - off;
    }
}

#if TYPE_IQ4_NL
// ggml's IQ4_NL grid (lib/core/quant_iq4.c) as 16 signed bytes in four words. A constant array
// indexed by the nibble ran 6x slower than Q4_0 on lavapipe (it lowers to per-invocation memory);
// selecting the word and shifting the byte out stays in registers.
const uint IQ4NL_W0 = 0xbfad9881u, IQ4NL_W1 = 0xf6eaddcfu, IQ4NL_W2 = 0x26190d01u, IQ4NL_W3 = 0x71594535u;
vec4 iq4nl_values(uvec4 n) {
    const uvec4 hi = n >> 2u;
    const uvec4 lo = mix(uvec4(IQ4NL_W0), uvec4(IQ4NL_W1), equal(hi, uvec4(1u)));
    const uvec4 up = mix(uvec4(IQ4NL_W2), uvec4(IQ4NL_W3), equal(hi, uvec4(3u)));
    const uvec4 w = mix(lo, up, greaterThanEqual(hi, uvec4(2u)));
    return vec4(ivec4(w << (24u - 8u * (n & 3u))) >> 24);
}
void iq4nl_texel(uvec4 u, out vec4 w[UV]) {
    const uvec4 sh = uvec4(0u, 8u, 16u, 24u);
    for (uint k = 0u; k < 4u; k++) {
        const uvec4 v = uvec4(u[k]) >> sh;
        w[k] = iq4nl_values(v & 15u);
        w[k + 4u] = iq4nl_values((v >> 4u) & 15u);
    }
}
#endif

#if TYPE_Q5_0 || TYPE_Q5_1 || TYPE_Q5_K
// Q4_0's nibbles with bit j of qh as element j's fifth bit, minus off.
void q5_texel(uvec4 u, uint qh, float off, out vec4 w[UV]) {
    const uvec4 sh = uvec4(0u, 8u, 16u, 24u), bit = uvec4(0u, 1u, 2u, 3u);
    for (uint k = 0u; k < 4u; k++) {
        const uvec4 v = uvec4(u[k]) >> sh;
        const uvec4 lo = ((uvec4(qh >> (4u * k)) >> bit) & 1u) << 4u, hi = ((uvec4(qh >> (4u * k + 16u)) >> bit) & 1u) << 4u;
        w[k] = vec4((v & 15u) | lo) - off;
        w[k + 4u] = vec4(((v >> 4u) & 15u) | hi) - off;
    }
}
#endif

#if TYPE_Q6_K
// Q4_0's nibbles with two more bits each from qh (element 16 h + 4 k + c's at bits 8 c + 2 k of
// word h, so that one shift per word by sh serves every k), minus 32.
void q6_texel(uvec4 u, uvec2 qh, out vec4 w[UV]) {
    const uvec4 sh = uvec4(0u, 8u, 16u, 24u), h0 = uvec4(qh.x) >> sh, h1 = uvec4(qh.y) >> sh;
    for (uint k = 0u; k < 4u; k++) {
        const uvec4 v = uvec4(u[k]) >> sh;
        w[k] = vec4((v & 15u) | ((h0 >> (2u * k)) & 3u) << 4u) - 32.0;
        w[k + 4u] = vec4(((v >> 4u) & 15u) | ((h1 >> (2u * k)) & 3u) << 4u) - 32.0;
    }
}
#endif

// Texels of a row of upr units in W.
uint row_texels(uint upr) {
#if TYPE_Q5_0 || TYPE_Q5_1 || TYPE_Q5_K
    return (upr + 3u) / 4u * 5u;
#elif TYPE_Q6_K
    return (upr + 3u) / 4u * 6u;
#else
    return upr * TPU;
#endif
}

// Decodes unit u of the row whose first texel is `row` into w[UV].
void decode_unit(uint row, uint u, out vec4 w[UV]) {
    const uint t = row + u * TPU;
#if ES_NATIVE && TYPE_F16 && !ES_TEXEL
    w[0] = vec4(W[2u * t]);
    w[1] = vec4(W[2u * t + 1u]);
#elif ES_NATIVE && TYPE_Q8_0 && !ES_TEXEL
    for (uint k = 0u; k < 8u; k++) w[k] = vec4(W[4u * t + k]);
#elif TYPE_F32
    w[0] = FETCH_F4(W, t);
#elif TYPE_F16
    uvec4 q = FETCH_U4(W, t);
    w[0] = vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y));
    w[1] = vec4(unpackHalf2x16(q.z), unpackHalf2x16(q.w));
#elif TYPE_BF16
    uvec4 q = FETCH_U4(W, t);
    w[0] = bf16_pair2(q.x, q.y);
    w[1] = bf16_pair2(q.z, q.w);
#elif TYPE_Q8_0
    uvec4 a = FETCH_U4(W, t), b = FETCH_U4(W, t + 1u);
    w[0] = q8_word(a.x);
    w[1] = q8_word(a.y);
    w[2] = q8_word(a.z);
    w[3] = q8_word(a.w);
    w[4] = q8_word(b.x);
    w[5] = q8_word(b.y);
    w[6] = q8_word(b.z);
    w[7] = q8_word(b.w);
#elif TYPE_Q4_0
    q4_texel(FETCH_U4(W, t), 8.0, w);
#elif TYPE_Q4_K || TYPE_Q2_K || TYPE_Q4_1
    q4_texel(FETCH_U4(W, t), 0.0, w);
#elif TYPE_Q3_K
    q4_texel(FETCH_U4(W, t), 4.0, w);
#elif TYPE_IQ4_NL
    iq4nl_texel(FETCH_U4(W, t), w);
#elif TYPE_Q5_0 || TYPE_Q5_1 || TYPE_Q5_K
    const uint g = row + (u >> 2u) * 5u;
    q5_texel(FETCH_U4(W, g + (u & 3u)), FETCH_U4(W, g + 4u)[u & 3u], 16.0 * float(TYPE_Q5_0), w);
#elif TYPE_Q6_K
    const uint g = row + (u >> 2u) * 6u;
    // the nibbles' texel fetched first: after the top bits', a 4096 x 4096 call took 1.4x as
    // long on lavapipe
    const uvec4 lo = FETCH_U4(W, g + (u & 3u));
    const uvec4 h = FETCH_U4(W, g + 4u + ((u & 3u) >> 1u));
    const uvec2 qh = (u & 1u) == 0u ? h.xy : h.zw;
    q6_texel(lo, qh, w);
#endif
}

#if HAS_SCALE
// Texels of scales per row for a team of `team` lanes.
uint scale_row_texels(uint blocks, uint team) {
    return (blocks + 4u * team - 1u) / (4u * team) * team;
}
#if LANE_RUNS
#if TYPE_Q6_K
// The scales of a run's four blocks' two halves (d times the int8 scales, exact) from its texel.
void k4_scales(uvec4 t, out vec4 d, out vec4 m) {
    const uvec4 sh = uvec4(24u, 16u, 8u, 0u);
    const vec2 dd = unpackHalf2x16(t.z);
    const vec4 dv = mix(vec4(dd.x), vec4(dd.y), notEqual((uvec4(t.w) >> uvec4(0u, 1u, 2u, 3u)) & 1u, uvec4(0u)));
    d = dv * vec4(ivec4(uvec4(t.x) << sh) >> 24);
    m = dv * vec4(ivec4(uvec4(t.y) << sh) >> 24);
}
#else
// The scales d sc and mins -dmin m of a run's four blocks from its texel.
void k4_scales(uvec4 t, out vec4 d, out vec4 m) {
    const uvec4 sh = uvec4(0u, 8u, 16u, 24u), sc = uvec4(t.x) >> sh;
    const vec2 a = unpackHalf2x16(t.z), b = unpackHalf2x16(t.w);
    const bvec4 second = notEqual(sc & 128u, uvec4(0u));
    d = mix(vec4(a.x), vec4(b.x), second) * vec4(ivec4(sc & 63u));
    m = mix(vec4(a.y), vec4(b.y), second) * vec4(ivec4((uvec4(t.y) >> sh) & 63u));
}
#endif
// The scale and min of block b alone, in a row of `blocks` blocks.
vec2 scale_min_of(uint srow, uint b, uint team, uint blocks) {
    const uint g = b / (4u * team), g0 = g * 4u * team, c = (min(4u * team, blocks - g0) + team - 1u) / team;
    vec4 d, m;
    k4_scales(FETCH_U4(S, srow + g * team + (b - g0) / c), d, m);
    return vec2(d[(b - g0) % c], m[(b - g0) % c]);
}
#else
// The four scales of blocks lane + team * (4 g + 0..3) of a row whose scales start at srow.
vec4 scales4(uint srow, uint g, uint lane, uint team) {
    return FETCH_F4(S, srow + g * team + lane);
}
// The scale of block b alone.
float scale_of(uint srow, uint b, uint team) {
    const uint i = b / team;
    return FETCH_F4(S, srow + (i >> 2) * team + b % team)[i & 3u];
}
#endif
// Texels of S per row: the scales, and for the K-quants the second set (Q2_K: three more) after them.
uint scale_row_stride(uint blocks, uint team) {
#if HAS_HALF_MIN
    return scale_row_texels(blocks, team) * 4u;
#elif HAS_S2
    return scale_row_texels(blocks, team) * 2u;
#else
    return scale_row_texels(blocks, team);
#endif
}
#endif
