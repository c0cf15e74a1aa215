/* weights.c: uploading weight matrices: repacking GGUF rows into the device layouts of
 * shaders/weights.glsl (values plane + f32 block scales, rows padded to 32 elements, fused
 * Q/K/V and interleaved gate/up), splitting rows into parts that fit the device's binding
 * limits, placing the planes in a few large allocations, and copying them through staging.
 * It deliberately does not read model hyperparameters (model_vk.c decides what to fuse). */
#include "weights.h"
#include "gguf.h"

#include <string.h>

#define ES__STAGING_SIZE ((VkDeviceSize)32 << 20)

/* The device layout a tensor type goes up in (weights.glsl). */
static es__dtype layout_of(es__dtype t) {
    return t == ES__DTYPE_IQ4_XS ? ES__DTYPE_IQ4_NL : t;
}

static bool is_block_type(es__dtype t) {
    return t == ES__DTYPE_Q8_0 || t == ES__DTYPE_Q4_0 || t == ES__DTYPE_IQ4_NL || t == ES__DTYPE_IQ4_XS ||
           es__is_k_quant(t) || es__is_q5_family(t);
}

/* Sets of per-block floats in the scale plane (weights.glsl): the scales; the K-quants' second
 * set (the second 16 elements' scales); Q2_K's mins of both halves as sets three and four; Q4_1's
 * and Q5_1's mins. Q4_K, Q5_K and Q6_K pack their scales (and mins) into one texel per lane and
 * four blocks (lane_run_scales). */
static uint64_t scale_sets(es__dtype t) {
    const bool min = t == ES__DTYPE_Q4_1 || t == ES__DTYPE_Q5_1;
    const bool runs = t == ES__DTYPE_Q4_K || t == ES__DTYPE_Q5_K || t == ES__DTYPE_Q6_K;
    return t == ES__DTYPE_Q2_K ? 4 : (es__is_k_quant(t) && !runs) || min ? 2 : 1;
}

uint64_t es__vk_mat_row_bytes(es__dtype type, uint32_t K, uint32_t team, bool scale_plane) {
    if (scale_plane) {
        if (!is_block_type(type)) return 0;
        const uint64_t blocks = K / 32, group = 4ull * team; /* weights.glsl: 4 scales per texel per lane */
        return (blocks + group - 1) / group * group * 4 * scale_sets(type);
    }
    switch (type) {
    case ES__DTYPE_F32: return (uint64_t)K * 4;
    case ES__DTYPE_F16:
    case ES__DTYPE_BF16: return (uint64_t)K * 2;
    case ES__DTYPE_Q8_0: return K;
    case ES__DTYPE_Q4_0:
    case ES__DTYPE_Q4_K:
    case ES__DTYPE_Q2_K:
    case ES__DTYPE_Q3_K:
    case ES__DTYPE_IQ4_NL:
    case ES__DTYPE_Q4_1: return K / 2; /* a nibble per quant (weights.glsl) */
    case ES__DTYPE_Q5_0:
    case ES__DTYPE_Q5_1:
    case ES__DTYPE_Q5_K: return ((uint64_t)K / 32 + 3) / 4 * 80; /* five texels per four blocks */
    case ES__DTYPE_Q6_K: return ((uint64_t)K / 32 + 3) / 4 * 96; /* six texels per four blocks */
    default: break;
    }
    return 0;
}

uint32_t es__vk_row_team(const es__vk_dev *d, es__dtype type, uint32_t K) {
    /* A team leaves lanes idle when a row has few units (weights.glsl): below the device's units
     * per lane one invocation walks the whole row instead (policy.h; lavapipe: two). Short rows go
     * solo too, below the device's policy: there the team's reduction of ROWS x TOK sums can cost
     * as much as the row's arithmetic. */
    const uint32_t epu = type == ES__DTYPE_F32 ? 4 : type == ES__DTYPE_F16 || type == ES__DTYPE_BF16 ? 8 : 32;
    const bool few_units = K / epu < d->policy.team_lane_units * d->subgroup_size;
    return few_units || K < d->policy.solo_row_elements ? 1 : d->subgroup_size;
}

es_status es__vk_mat_init(es__vk_dev *d, es__vk_mat *m, const es__tensor *const *src, uint32_t n_src,
                          bool interleave) {
    memset(m, 0, sizeof *m);
    ES_RETURN_IF(n_src < 1 || n_src > 3, d->err, ES_ERR_BACKEND, "vulkan: fusing %u tensors", n_src);
    const es__tensor *t0 = src[0];
    uint64_t rows = 0;
    for (uint32_t i = 0; i < n_src; i++) {
        const es__tensor *t = src[i];
        ES_RETURN_IF(!t->data, d->err, ES_ERR_MODEL, "vulkan: tensor '%s' has no data", t->name);
        ES_RETURN_IF(t->ne[0] != t0->ne[0] || (interleave && t->type != t0->type), d->err, ES_ERR_UNSUPPORTED,
                     "vulkan: tensors '%s' and '%s' are fused on the device and must share %s", t0->name, t->name,
                     interleave ? "type and row length" : "row length");
        ES_RETURN_IF(t->type != ES__DTYPE_F32 && t->type != ES__DTYPE_F16 && t->type != ES__DTYPE_BF16 &&
                         !is_block_type(t->type),
                     d->err, ES_ERR_UNSUPPORTED, "vulkan: tensor '%s' has type %d, which the Vulkan kernels do not read",
                     t->name, (int)t->type);
        ES_RETURN_IF(t->ne[2] != 1 || t->ne[3] != 1, d->err, ES_ERR_MODEL, "vulkan: tensor '%s' is not a matrix", t->name);
        rows += (uint64_t)t->ne[1];
    }
    ES_RETURN_IF(interleave && (n_src != 2 || src[0]->ne[1] != src[1]->ne[1]), d->err, ES_ERR_MODEL,
                 "vulkan: interleaving '%s' needs two tensors with equal rows", t0->name);
    ES_RETURN_IF(rows > (1u << 30) || t0->ne[0] <= 0 || t0->ne[0] > (1 << 24), d->err, ES_ERR_MODEL,
                 "vulkan: tensor '%s' shape %lld x %llu is out of range for the kernels", t0->name,
                 (long long)t0->ne[0], (unsigned long long)rows);
    for (uint32_t i = 0; i < n_src; i++)
        ES_RETURN_IF(is_block_type(src[i]->type) && t0->ne[0] % 32 != 0, d->err, ES_ERR_MODEL,
                     "vulkan: tensor '%s' row length %lld is not a multiple of the 32-element block", src[i]->name,
                     (long long)t0->ne[0]);
    m->type = layout_of(t0->type);
    m->rows = (uint32_t)rows;
    m->K_src = (uint32_t)t0->ne[0];
    m->K = (m->K_src + 31u) & ~31u;
    m->team = es__vk_row_team(d, m->type, m->K);
    m->n_src = n_src;
    m->interleave = interleave;
    for (uint32_t i = 0; i < n_src; i++) m->src[i] = src[i];
    return ES_OK;
}

/* The tensor fused row r (before the NEOX permutation, which stays within a head and so within
 * a tensor) comes from, and the row there. */
static const es__tensor *src_of(const es__vk_mat *m, uint32_t r, uint32_t *row) {
    if (m->interleave) {
        *row = r >> 1;
        return m->src[r & 1u];
    }
    uint32_t i = 0;
    while (r >= (uint32_t)m->src[i]->ne[1]) r -= (uint32_t)m->src[i++]->ne[1];
    *row = r;
    return m->src[i];
}

/* Source row of fused row r. */
static const uint8_t *src_row(const es__vk_mat *m, uint32_t r) {
    if (r < m->rope_rows) {
        const uint32_t h = r / m->rope_hd, j = r % m->rope_hd;
        const uint32_t dim = j >= m->rope_nrot ? j : (j & 1u) == 0 ? j >> 1 : (j >> 1) + m->rope_nrot / 2;
        r = h * m->rope_hd + dim;
    }
    uint32_t rr;
    const es__tensor *t = src_of(m, r, &rr);
    const uint64_t row_bytes = t->nbytes / (uint64_t)t->ne[1];
    return (const uint8_t *)t->data + row_bytes * rr;
}

/* Where block b's scale goes in a row's scale plane: the lane handling b (b % team) finds the
 * scales of its blocks i, i+1, i+2, i+3 (i = b / team, in steps of four) in one texel. */
static size_t scale_slot(uint32_t b, uint32_t team) {
    const uint32_t i = b / team, l = b % team;
    return ((size_t)(i / 4) * team + l) * 4 + i % 4;
}

/* The quants of a row of Q5_K/Q6_K super-blocks (nb 32-element blocks) in weights.glsl's
 * layouts: per group of four blocks their low nibbles in four texels as Q4_0's, then the bits
 * above them (Q5_K: one qh word per block, as Q5_1; Q6_K: two words per block, two bits per
 * element); their scales: lane_run_scales. Held a byte per quant with two f32 per block, they
 * took 10 bits a weight; now Q5_K 6 and Q6_K 7. */
static void repack_k(es__dtype type, const uint8_t *src, uint32_t nb, uint64_t wrb, uint8_t *dw) {
    const bool q6 = type == ES__DTYPE_Q6_K;
    const size_t bb = q6 ? 210 : 176, group = q6 ? 96 : 80;
    memset(dw, 0, (size_t)wrb); /* a partial last group */
    for (uint32_t sb = 0; sb < nb / 8; sb++) {
        int8_t q[256];
        float a[8], b[8];
        es__k_unpack(type, src + bb * sb, q, a, b);
        for (uint32_t j = 0; j < 8; j++) {
            const uint32_t blk = sb * 8 + j;
            uint8_t v[32]; /* Q5_K 0..31, Q6_K 0..63 */
            for (int l = 0; l < 32; l++) v[l] = (uint8_t)(q[32 * j + l] + (q6 ? 32 : 0));
            uint8_t *grp = dw + group * (blk / 4);
            for (int l = 0; l < 16; l++)
                grp[16 * (blk % 4) + l] = (uint8_t)((v[l] & 15) | (v[l + 16] & 15) << 4);
            uint32_t hi[2] = {0, 0};
            for (int l = 0; l < 32; l++) /* Q6_K: element 16 h + 4 k + c at bits 8 c + 2 k of word h */
                if (q6) hi[l / 16] |= (uint32_t)(v[l] >> 4) << (8 * (l % 4) + 2 * (l % 16 / 4));
                else hi[0] |= (uint32_t)(v[l] >> 4) << l;
            memcpy(grp + 64 + (q6 ? 8 : 4) * (blk % 4), hi, q6 ? 8 : 4);
        }
    }
}

/* A Q4_K super-block's f16 d and -dmin as one word (low half d). */
static uint32_t q4k_dm(const uint8_t *blk) {
    uint16_t d, dmin;
    memcpy(&d, blk, 2);
    memcpy(&dmin, blk + 2, 2);
    return d | (uint32_t)(dmin ^ 0x8000u) << 16;
}

/* A Q6_K run's texel words for its block k (blk): the int8 scales of the block's two halves as
 * bytes k of words 0 and 1, bit k of word 3 where it lies in the run's second super-block. */
static void q6k_run_block(const uint8_t *src, uint32_t blk, uint32_t k, uint32_t sb0, uint32_t *t) {
    const uint8_t *sc = src + 210 * (blk / 8) + 192 + 2 * (blk % 8);
    t[0] |= (uint32_t)sc[0] << 8 * k;
    t[1] |= (uint32_t)sc[1] << 8 * k;
    t[3] |= (blk / 8 != sb0 ? 1u : 0u) << k;
}

/* The scale plane of a row of Q4_K, Q5_K or Q6_K super-blocks: for group g of 4
 * team blocks and lane l one texel (four words) describing the lane's run of consecutive blocks
 * (weights.glsl, LANE_RUNS), which lies in at most two super-blocks. Q4_K and Q5_K (both start
 * with f16 d, f16 dmin and 12 bytes of 6-bit scales and mins): word 0 byte k the 6-bit scale of
 * its block k, bit 7 set where that block lies in the run's second super-block; word 1 byte k the
 * block's 6-bit min; words 2 and 3 the f16 d and -dmin of the first and the second super-block.
 * Q6_K: words 0 and 1 the halves' int8 scales, word 2 the two super-blocks' f16 d, word 3 the
 * second-super-block bits (q6k_run_block). */
static void lane_run_scales(es__dtype type, const uint8_t *src, uint32_t nb, uint32_t team, uint32_t *ds) {
    const bool q6 = type == ES__DTYPE_Q6_K;
    es__dtype_traits tr;
    es__dtype_info(type, &tr);
    const size_t bb = tr.block_bytes;
    for (uint32_t g = 0, g0 = 0; g0 < nb; g++, g0 += 4 * team) {
        const uint32_t n = ES__MIN(4 * team, nb - g0), c = (n + team - 1) / team; /* blocks, run length */
        for (uint32_t l = 0; l < team && c * l < n; l++) {
            uint32_t *t = ds + 4 * ((size_t)g * team + l);
            const uint32_t b0 = g0 + c * l, len = ES__MIN(c, n - c * l);
            const uint32_t sb0 = b0 / 8, sb1 = (b0 + len - 1) / 8; /* a run of at most 4 spans two */
            for (uint32_t k = 0; k < len; k++) {
                const uint32_t blk = b0 + k;
                if (q6) {
                    q6k_run_block(src, blk, k, sb0, t);
                    continue;
                }
                int sc, m;
                es__k_scale_min(src + bb * (blk / 8), (int)(blk % 8), &sc, &m);
                t[0] |= ((uint32_t)sc | (blk / 8 != sb0 ? 128u : 0u)) << 8 * k;
                t[1] |= (uint32_t)m << 8 * k;
            }
            if (q6) {
                uint16_t d0, d1;
                memcpy(&d0, src + 210 * sb0 + 208, 2);
                memcpy(&d1, src + 210 * sb1 + 208, 2);
                t[2] = d0 | (uint32_t)d1 << 16;
                continue;
            }
            t[2] = q4k_dm(src + bb * sb0);
            t[3] = q4k_dm(src + bb * sb1);
        }
    }
}

/* The quants of a row of Q4_K super-blocks in weights.glsl's layout: each 32-element block's
 * nibbles in Q4_0's order (their scales: lane_run_scales). */
static void repack_q4k(const uint8_t *src, uint32_t nb, uint8_t *dw) {
    for (uint32_t sb = 0; sb < nb / 8; sb++) {
        int8_t q[256];
        float a[8], b[8];
        es__k_unpack(ES__DTYPE_Q4_K, src + 144 * sb, q, a, b);
        for (uint32_t blk = sb * 8; blk < sb * 8 + 8; blk++) {
            const int8_t *qj = q + 32 * (blk - sb * 8);
            for (int l = 0; l < 16; l++) dw[(size_t)16 * blk + l] = (uint8_t)(qj[l] | (qj[l + 16] << 4));
        }
    }
}

/* One row of Q2_K/Q3_K super-blocks into weights.glsl's layout: each 32-element block's quants
 * as nibbles in Q4_0's order (Q3_K's plus 4), the scales of its two 16-element halves as the
 * first and second set, and Q2_K's -dmin m of each half as the third and fourth. */
static void repack_lq(es__dtype type, const uint8_t *src, uint32_t nb, uint32_t team, uint64_t srb, uint8_t *dw,
                      float *ds) {
    const size_t set = (size_t)(srb / 4 / scale_sets(type)); /* floats per set */
    const size_t bb = type == ES__DTYPE_Q2_K ? 84 : 110;
    const int off = type == ES__DTYPE_Q3_K ? 4 : 0;
    for (uint32_t sb = 0; sb < nb / 8; sb++) {
        int8_t q[256];
        float a[16], b[16];
        es__k_unpack16(type, src + bb * sb, q, a, b);
        for (uint32_t j = 0; j < 8; j++) {
            const uint32_t blk = sb * 8 + j;
            const int8_t *qj = q + 32 * j;
            const size_t slot = scale_slot(blk, team);
            ds[slot] = a[2 * j];
            ds[set + slot] = a[2 * j + 1];
            if (type == ES__DTYPE_Q2_K) {
                ds[2 * set + slot] = b[2 * j];
                ds[3 * set + slot] = b[2 * j + 1];
            }
            for (int l = 0; l < 16; l++) dw[(size_t)16 * blk + l] = (uint8_t)((qj[l] + off) | (qj[l + 16] + off) << 4);
        }
    }
}

/* One row of Q4_1, Q5_0 or Q5_1 blocks (f16 d, [f16 m], [qh[4]], qs[16]) into weights.glsl's
 * layouts: Q4_1's nibbles a texel per block; Q5_0's and Q5_1's per group of four blocks, their
 * nibbles in four texels, then their qh words in a fifth. The scales, and the mins srb / 8 floats
 * further. */
static void repack_q5(es__dtype type, const uint8_t *src, uint32_t nb, uint32_t team, uint64_t wrb, uint64_t srb,
                      uint8_t *dw, float *ds) {
    const bool has_min = type != ES__DTYPE_Q5_0, five = type != ES__DTYPE_Q4_1;
    const size_t bb = es__q5_block_bytes(type), qs = 2 + 2 * has_min + 4 * five;
    memset(dw, 0, (size_t)wrb); /* a partial last group */
    for (uint32_t b = 0; b < nb; b++) {
        const uint8_t *blk = src + bb * b;
        const size_t slot = scale_slot(b, team);
        uint16_t h[2];
        memcpy(h, blk, 4);
        ds[slot] = es__f16_to_f32(h[0]);
        if (has_min) ds[(size_t)(srb / 8) + slot] = es__f16_to_f32(h[1]);
        if (!five) {
            memcpy(dw + (size_t)16 * b, blk + qs, 16);
            continue;
        }
        uint8_t *grp = dw + (size_t)80 * (b / 4);
        memcpy(grp + 16 * (b % 4), blk + qs, 16);
        memcpy(grp + 64 + 4 * (b % 4), blk + qs - 4, 4);
    }
}

/* Repacks rows [r0, r0 + n) of m, all of part pt's type, into the W plane at w and the S plane at
 * s. */
static void repack(const es__vk_mat *m, const es__vk_part *pt, uint32_t r0, uint32_t n, uint8_t *w, uint8_t *s) {
    const uint32_t team = pt->team;
    const uint64_t wrb = es__vk_mat_row_bytes(pt->type, m->K, team, false);
    const uint64_t srb = es__vk_mat_row_bytes(pt->type, m->K, team, true);
    const uint32_t nb = m->K / 32;
    if (srb) memset(s, 0, (size_t)(srb * n));
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *src = src_row(m, r0 + i);
        uint8_t *dw = w + wrb * i;
        float *ds = srb ? (float *)(s + srb * i) : NULL;
        switch (pt->src_type) {
        case ES__DTYPE_F32:
        case ES__DTYPE_F16:
        case ES__DTYPE_BF16: {
            const size_t have = (size_t)m->K_src * (pt->type == ES__DTYPE_F32 ? 4 : 2);
            memcpy(dw, src, have);
            memset(dw + have, 0, (size_t)wrb - have);
            break;
        }
        case ES__DTYPE_Q8_0: /* ggml block: f16 d, int8 qs[32] */
        case ES__DTYPE_Q4_0: /* ggml block: f16 d, uint8 qs[16] */
        case ES__DTYPE_IQ4_NL: /* as Q4_0, the nibbles grid indices */ {
            const uint32_t bs = pt->type == ES__DTYPE_Q8_0 ? 34 : 18, qb = bs - 2; /* Q4_0, IQ4_NL: 18 */
            for (uint32_t b = 0; b < nb; b++) {
                const uint8_t *blk = src + (size_t)bs * b;
                uint16_t dh;
                memcpy(&dh, blk, 2);
                ds[scale_slot(b, team)] = es__f16_to_f32(dh);
                memcpy(dw + (size_t)qb * b, blk + 2, qb);
            }
            break;
        }
        case ES__DTYPE_IQ4_XS: /* IQ4_NL's layout: a sub-block's nibbles, its scale d (ls - 32) */
            for (uint32_t b = 0; b < nb; b++) {
                const uint8_t *sb = src + (size_t)ES__IQ4XS_BYTES * (b / 8);
                ds[scale_slot(b, team)] = es__iq4_xs_scale(sb, (int)(b % 8));
                memcpy(dw + (size_t)16 * b, sb + 8 + 16 * (b % 8), 16);
            }
            break;

        case ES__DTYPE_Q4_1:
        case ES__DTYPE_Q5_0:
        case ES__DTYPE_Q5_1: repack_q5(pt->type, src, nb, team, wrb, srb, dw, ds); break;
        case ES__DTYPE_Q4_K:
        case ES__DTYPE_Q5_K:
        case ES__DTYPE_Q6_K:
            if (pt->type == ES__DTYPE_Q4_K) repack_q4k(src, nb, dw);
            else repack_k(pt->type, src, nb, wrb, dw);
            lane_run_scales(pt->type, src, nb, team, (uint32_t *)ds);
            break;
        case ES__DTYPE_Q2_K:
        case ES__DTYPE_Q3_K: repack_lq(pt->type, src, nb, team, srb, dw, ds); break;
        default: break;
        }
    }
}

/* The most rows one part of type (and team) may hold on this device. */
static es_status rows_per_part(es__vk_dev *d, const es__vk_mat *m, es__dtype type, uint32_t team, uint32_t *out) {
    const VkPhysicalDeviceLimits *lim = &d->phys.props.limits;
    const uint64_t wrb = es__vk_mat_row_bytes(type, m->K, team, false);
    const uint64_t srb = es__vk_mat_row_bytes(type, m->K, team, true);
    uint64_t wmax, smax;
    if (d->use.texel) {
        wmax = (uint64_t)lim->maxTexelBufferElements * 16;
        smax = (uint64_t)lim->maxTexelBufferElements * 16;
    } else {
        wmax = smax = lim->maxStorageBufferRange;
    }
    wmax = ES__MIN(wmax, ES__VK_CHUNK_MAX);
    smax = ES__MIN(smax, ES__VK_CHUNK_MAX);
    uint64_t r = wmax / wrb;
    if (srb) r = ES__MIN(r, smax / srb);
    r &= ~(uint64_t)1; /* gate/up pairs never straddle parts */
    ES_RETURN_IF(r == 0, d->err, ES_ERR_UNSUPPORTED,
                 "vulkan: a row of '%s' (%llu bytes) does not fit one binding on this device", m->src[0]->name,
                 (unsigned long long)wrb);
    *out = (uint32_t)ES__MIN(r, (uint64_t)m->rows);
    return ES_OK;
}

/* The end of the run of rows from row0 whose tensors share row0's type (the whole matrix when
 * its tensors are interleaved, which share one type). */
static uint32_t run_end(const es__vk_mat *m, uint32_t row0) {
    if (m->interleave) return m->rows;
    uint32_t rr;
    const es__dtype t = src_of(m, row0, &rr)->type;
    uint32_t end = 0, i = 0;
    for (; i < m->n_src && end <= row0; i++) end += (uint32_t)m->src[i]->ne[1];
    for (; i < m->n_src && m->src[i]->type == t; i++) end += (uint32_t)m->src[i]->ne[1];
    return end;
}

/* m's parts: runs of rows of one type, each cut into the ranges one binding holds (count only
 * when m->parts is NULL). */
static es_status cut_parts(es__vk_dev *d, es__vk_mat *m, uint32_t *n_parts) {
    uint32_t n = 0;
    for (uint32_t row0 = 0; row0 < m->rows;) {
        const uint32_t end = run_end(m, row0);
        uint32_t rr;
        const es__dtype src = src_of(m, row0, &rr)->type, type = layout_of(src);
        const uint32_t team = es__vk_row_team(d, type, m->K);
        uint32_t per = 0;
        ES_TRY(rows_per_part(d, m, type, team, &per));
        for (; row0 < end; row0 += ES__MIN(per, end - row0), n++)
            if (m->parts) {
                es__vk_part *pt = &m->parts[n];
                pt->row0 = row0;
                pt->rows = ES__MIN(per, end - row0);
                pt->type = type;
                pt->src_type = src;
                pt->team = team;
            }
    }
    *n_parts = n;
    return ES_OK;
}

static es_status plan(es__vk_wset *ws, es__vk_mat *const *mats, uint32_t n_mats) {
    es__vk_dev *d = ws->d;
    for (uint32_t i = 0; i < n_mats; i++) {
        es__vk_mat *m = mats[i];
        ES_TRY(cut_parts(d, m, &m->n_parts));
        m->parts = es__calloc(d->alloc, m->n_parts, sizeof *m->parts);
        ES_RETURN_IF(!m->parts, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
        ES_TRY(cut_parts(d, m, &m->n_parts));
        for (uint32_t p = 0; p < m->n_parts; p++) {
            es__vk_part *pt = &m->parts[p];
            const uint64_t wrb = es__vk_mat_row_bytes(pt->type, m->K, pt->team, false);
            const uint64_t srb = es__vk_mat_row_bytes(pt->type, m->K, pt->team, true);
            ES_TRY(es__vk_arena_reserve(d, &ws->arena, wrb * pt->rows, &pt->w));
            pt->has_s = srb > 0;
            if (pt->has_s) ES_TRY(es__vk_arena_reserve(d, &ws->arena, srb * pt->rows, &pt->s));
        }
    }
    return ES_OK;
}

static VkDeviceSize staging_size(const es__vk_wset *ws) {
    return ws->staging_size ? ws->staging_size : ES__STAGING_SIZE;
}

static es_status fill(es__vk_wset *ws, es__vk_mat *const *mats, uint32_t n_mats, es__vk_stager *st,
                      bool (*progress)(float, void *), void *user) {
    es__vk_dev *d = ws->d;
    uint64_t total = 0, done = 0;
    for (uint32_t i = 0; i < n_mats; i++) total += (uint64_t)mats[i]->rows;
    for (uint32_t i = 0; i < n_mats; i++) {
        es__vk_mat *m = mats[i];
        for (uint32_t p = 0; p < m->n_parts; p++) {
            const es__vk_part *pt = &m->parts[p];
            const uint64_t wrb = es__vk_mat_row_bytes(pt->type, m->K, pt->team, false);
            const uint64_t srb = es__vk_mat_row_bytes(pt->type, m->K, pt->team, true);
            const uint32_t step = (uint32_t)ES__MAX(1, (staging_size(ws) / 4) / (wrb + srb));
            for (uint32_t r = 0; r < pt->rows; r += step) {
                const uint32_t n = ES__MIN(step, pt->rows - r);
                void *wp = NULL, *sp = NULL;
                /* both planes' copies in one staging fill: a flush between the two requests
                 * would submit the value plane's copy before repack writes it (large quantised
                 * models lost row ranges on Vulkan that way) */
                ES_TRY(es__vk_stager_room(d, st, (wrb + srb) * n + 32, 2));
                ES_TRY(es__vk_stage_ptr(d, st, es__vk_region_buf(&ws->arena, &pt->w), pt->w.off + wrb * r, wrb * n, &wp));
                if (pt->has_s)
                    ES_TRY(es__vk_stage_ptr(d, st, es__vk_region_buf(&ws->arena, &pt->s), pt->s.off + srb * r, srb * n, &sp));
                repack(m, pt, pt->row0 + r, n, wp, sp);
                done += n;
                if (progress && !progress((float)((double)done / (double)total), user))
                    return es__fail(d->err, ES_ERR_CANCELLED, "vulkan: weight upload cancelled by the progress callback");
            }
        }
    }
    return es__vk_stager_flush(d, st);
}

static es_status make_views(es__vk_wset *ws, es__vk_mat *const *mats, uint32_t n_mats) {
    es__vk_dev *d = ws->d;
    if (!d->use.texel) return ES_OK;
    for (uint32_t i = 0; i < n_mats; i++) {
        es__vk_mat *m = mats[i];
        for (uint32_t p = 0; p < m->n_parts; p++) {
            es__vk_part *pt = &m->parts[p];
            const VkFormat wf = pt->type == ES__DTYPE_F32 ? VK_FORMAT_R32G32B32A32_SFLOAT : VK_FORMAT_R32G32B32A32_UINT;
            /* the K-quants' lane-run scale texels are packed integers (a float view may flush or
             * quieten them) */
            const bool packed = pt->type == ES__DTYPE_Q4_K || pt->type == ES__DTYPE_Q5_K || pt->type == ES__DTYPE_Q6_K;
            const VkFormat sf = packed ? VK_FORMAT_R32G32B32A32_UINT : VK_FORMAT_R32G32B32A32_SFLOAT;
            ES_TRY(es__vk_view_create(d, es__vk_region_buf(&ws->arena, &pt->w), wf, pt->w.off, pt->w.size, &pt->w_view));
            if (pt->has_s)
                ES_TRY(es__vk_view_create(d, es__vk_region_buf(&ws->arena, &pt->s), sf, pt->s.off, pt->s.size, &pt->s_view));
        }
    }
    return ES_OK;
}

es_status es__vk_wset_upload(es__vk_wset *ws, es__vk_mat *const *mats, uint32_t n_mats,
                             bool (*progress)(float, void *), void *progress_user) {
    es__vk_dev *d = ws->d;
    const uint32_t first = ws->arena.n;
    ES_TRY(plan(ws, mats, n_mats));
    ES_TRY(es__vk_arena_alloc(d, &ws->arena, ES__VK_MEM_DEVICE, "model weights"));
    for (uint32_t c = first; c < ws->arena.n; c++) {
        ws->bytes += ws->arena.chunks[c].alloc_size;
        if (d->stats) d->stats->weight_bytes += ws->arena.chunks[c].alloc_size;
    }
    es__vk_stager st;
    ES_TRY(es__vk_stager_init(d, &st, staging_size(ws)));
    es_status s = fill(ws, mats, n_mats, &st, progress, progress_user);
    es__vk_stager_free(d, &st);
    ES_TRY(s);
    return make_views(ws, mats, n_mats);
}

void es__vk_wset_init(es__vk_wset *ws, es__vk_dev *d) {
    memset(ws, 0, sizeof *ws);
    ws->d = d;
    es__vk_arena_init(d, &ws->arena);
}

void es__vk_mat_free(es__vk_dev *d, es__vk_mat *m) {
    for (uint32_t p = 0; m->parts && p < m->n_parts; p++) {
        if (m->parts[p].w_view) vkDestroyBufferView(d->dev, m->parts[p].w_view, NULL);
        if (m->parts[p].s_view) vkDestroyBufferView(d->dev, m->parts[p].s_view, NULL);
    }
    es__free(d->alloc, m->parts);
    memset(m, 0, sizeof *m);
}

void es__vk_wset_free(es__vk_wset *ws) {
    es__vk_dev *d = ws->d;
    if (!d) return;
    if (d->stats) d->stats->weight_bytes -= ws->bytes;
    es__vk_arena_free(d, &ws->arena);
    ws->bytes = 0;
}

void es__vk_part_binds(es__vk_wset *ws, const es__vk_part *p, es__vk_bind *w, es__vk_bind *s) {
    *w = (es__vk_bind){es__vk_region_buf(&ws->arena, &p->w)->buf, p->w.off, p->w.size, p->w_view};
    if (p->has_s)
        *s = (es__vk_bind){es__vk_region_buf(&ws->arena, &p->s)->buf, p->s.off, p->s.size, p->s_view};
    else
        *s = *w; /* float types read no scales; any valid descriptor of the right kind will do */
}
