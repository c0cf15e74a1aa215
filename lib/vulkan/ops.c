/* ops.c: each kernel as an op: the variant a device gets (read path, reduction, native 8/16-bit
 * loads), its specialisation (workgroup size, team size, rows and tokens per team), and the grid
 * and push constants of its dispatches.
 * It deliberately allocates nothing: callers own buffers and descriptor sets. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *type_tag(es__dtype t) {
    switch (t) {
    case ES__DTYPE_F32: return "f32";
    case ES__DTYPE_F16: return "f16";
    case ES__DTYPE_BF16: return "bf16";
    case ES__DTYPE_Q8_0: return "q8_0";
    case ES__DTYPE_Q4_0: return "q4_0";
    case ES__DTYPE_Q4_K: return "q4_K";
    case ES__DTYPE_Q5_K: return "q5_K";
    case ES__DTYPE_Q6_K: return "q6_K";
    case ES__DTYPE_Q2_K: return "q2_K";
    case ES__DTYPE_Q3_K: return "q3_K";
    case ES__DTYPE_IQ4_NL: return "iq4_nl";
    case ES__DTYPE_IQ4_XS: break; /* uploaded as IQ4_NL (weights.h) */
    case ES__DTYPE_Q5_0: return "q5_0";
    case ES__DTYPE_Q5_1: return "q5_1";
    case ES__DTYPE_Q4_1: return "q4_1";
    }
    return "?";
}

/* Workgroup size: 64 invocations, or one subgroup where subgroups are wider. */
static uint32_t wg_size(const es__vk_dev *d) {
    uint32_t w = 64;
    uint32_t sg = d->subgroup_size;
    return sg > w ? sg : w;
}

/* Looks up "<family>[_<tag>][_<tx|ss>][_<sg|sh>][_nat]" and its pipeline: the read-path part
 * for families that read through it, the reduction part for families that reduce. */
static es_status pipe_for(es__vk_dev *d, const char *family, const char *tag, bool reads, bool reduces, bool native,
                          const uint32_t *spec, uint32_t n_spec, es__vk_pipeline **out) {
    char name[96];
    snprintf(name, sizeof name, "%s%s%s%s%s%s", family, tag ? "_" : "", tag ? tag : "",
             reads ? (d->use.texel ? "_tx" : "_ss") : "", reduces ? (d->use.subgroup ? "_sg" : "_sh") : "",
             native ? "_nat" : "");
    es__shader_id id;
    ES_TRY(es__vk_shader_find(d, name, &id));
    return es__vk_pipeline_get(d, id, spec, n_spec, out);
}

static bool is_block(es__dtype type) {
    return type == ES__DTYPE_Q8_0 || type == ES__DTYPE_Q4_0 || type == ES__DTYPE_IQ4_NL || es__is_k_quant(type);
}

/* Tile shapes, measured on lavapipe (tools/vkbench mul_mat, docs/perf.md): eight rows per team
 * amortise each activation fetch best for matrix-vector; for matrix-matrix the block types
 * prefer more rows, the float types more tokens (their units hold fewer elements, so more tokens
 * fit in registers). A device's policy may set matrix-vector's (mv_rows: a GPU wants more teams,
 * not fewer fetches). ROWS stays even for the SwiGLU pairs. */
static uint32_t mm_rows(const es__vk_dev *d, es__dtype type, uint32_t tok) {
    if (tok == 1 && d->policy.mv_rows) return d->policy.mv_rows;
    return tok == 1 || is_block(type) ? 8 : 4;
}

/* Tokens per pass of a workgroup over its rows: the tile shapes above. A pass computes all its
 * tokens (the missing ones clamped to the last), so small batches get small passes: on lavapipe
 * a 2-token call with 8-token passes costs twice a 2-token pass. */
static uint32_t mm_pass(es__dtype type, uint32_t n) {
    if (n <= 2) return n == 0 ? 1 : n; /* n = 0: an empty grid, recorded all the same */
    return n <= 4 ? 4u : is_block(type) ? 4u : 8u;
}

/* Tokens per workgroup (the tile), in passes of mm_pass: a call of n <= the device's tile
 * (policy.h) is one column of workgroups, so it reads each weight from memory once; a power of
 * two, so a device compiles six shapes, not 32. A device without one gets one pass per
 * workgroup (its tiles are its passes). */
uint32_t es__vk_mul_mat_tok(const es__vk_dev *d, es__dtype type, uint32_t n) {
    const uint32_t pass = mm_pass(type, n), cap = d->policy.mm_tile_tokens;
    uint32_t tile = pass;
    while (tile < n && tile < cap) tile *= 2;
    return ES__MIN(tile, ES__MAX(cap, pass));
}

static es_status mul_mat_pipe(es__vk_dev *d, es__dtype type, uint32_t team, uint32_t tile, uint32_t epi,
                              const char *family, es__vk_pipeline **out) {
    const uint32_t tok = ES__MIN(mm_pass(type, tile), tile);
    const bool native = !d->use.texel && d->use.subgroup &&
                        ((type == ES__DTYPE_F16 && d->use.storage16) || (type == ES__DTYPE_Q8_0 && d->use.storage8));
    const uint32_t spec[7] = {wg_size(d), d->subgroup_size, mm_rows(d, type, tok), tok, epi, team, tile};
    char tiled[32];
    snprintf(tiled, sizeof tiled, "%s_tiled", family);
    return pipe_for(d, tile > tok ? tiled : family, type_tag(type), true, true, native, spec, 7, out);
}

es_status es__vk_mul_mat_pipe(es__vk_dev *d, const es__vk_mat *m, uint32_t tok, uint32_t epi,
                              es__vk_pipeline **out) {
    return mul_mat_pipe(d, m->type, m->team, tok, epi, "mul_mat", out);
}

es_status es__vk_mul_mat_lora_pipe(es__vk_dev *d, const es__vk_mat *m, uint32_t tok, uint32_t epi,
                                   es__vk_pipeline **out) {
    return mul_mat_pipe(d, m->type, m->team, tok, epi, "mul_mat_lora", out);
}

/* The kernel of part pt for a call of n tokens. */
static es_status part_pipe(es__vk_dev *d, const es__vk_part *pt, uint32_t n, uint32_t epi, bool lora,
                           es__vk_pipeline **out) {
    const char *family = lora ? "mul_mat_lora" : "mul_mat";
    return mul_mat_pipe(d, pt->type, pt->team, es__vk_mul_mat_tok(d, pt->type, n), epi, family, out);
}

es_status es__vk_mul_mat_warm(es__vk_dev *d, const es__vk_mat *m, uint32_t epi, bool lora) {
    for (uint32_t i = 0; i < m->n_parts; i++)
        for (uint32_t n = 1; n <= ES__VK_TILE_TOK; n *= 2) { /* matrix-vector and each tile shape */
            es__vk_pipeline *p;
            ES_TRY(part_pipe(d, &m->parts[i], n, epi, lora, &p));
        }
    return ES_OK;
}

es_status es__vk_simple_pipe(es__vk_dev *d, const char *family, bool reads, bool reduces, es__vk_pipeline **out) {
    const uint32_t spec[2] = {wg_size(d), d->subgroup_size};
    return pipe_for(d, family, NULL, reads, reduces, false, spec, 2, out);
}

es_status es__vk_rmsnorm_pipe(es__vk_dev *d, es__vk_pipeline **out) {
    uint32_t wg = wg_size(d);
    if (d->policy.norm_wg) { /* the device's choice, within what it allows */
        const VkPhysicalDeviceLimits *lim = &d->phys.props.limits;
        wg = ES__MAX(wg, ES__MIN(d->policy.norm_wg, ES__MIN(lim->maxComputeWorkGroupInvocations, lim->maxComputeWorkGroupSize[0])));
    }
    const uint32_t spec[2] = {wg, d->subgroup_size};
    return pipe_for(d, "rmsnorm", NULL, true, true, false, spec, 2, out);
}

/* The grid assumes the reported subgroup size: a device whose compute subgroups come out smaller
 * (Intel's varying sizes) runs more teams per workgroup than the grid counts, and the extra ones
 * find no (token, head) and return; none reports a default smaller than what compute gets. */
bool es__vk_attn_team(const es__vk_dev *d) {
    return d->policy.attn_team && d->use.subgroup && d->subgroup_size <= ES__ATTN_WG;
}

es_status es__vk_attn_kernel(es__vk_dev *d, const char *family, uint32_t hd, es__vk_pipeline **out,
                             uint32_t *pairs_per_wg) {
    const uint32_t spec[3] = {ES__ATTN_WG, d->subgroup_size, hd / 4};
    const bool team = es__vk_attn_team(d);
    *pairs_per_wg = team ? ES__ATTN_WG / d->subgroup_size : ES__ATTN_WG;
    if (!team) return pipe_for(d, family, NULL, true, false, false, spec, 3, out);
    char name[32];
    snprintf(name, sizeof name, "%s_team", family);
    return pipe_for(d, name, NULL, true, true, false, spec, 3, out);
}

es_status es__vk_get_rows_pipe(es__vk_dev *d, es__dtype type, es__vk_pipeline **out) {
    const uint32_t spec[2] = {wg_size(d), d->subgroup_size};
    return pipe_for(d, "get_rows", type_tag(type), true, false, false, spec, 2, out);
}

es_status es__vk_rec_mul_mat(es__vk_rec *r, const char *op, const es__vk_mat *m, uint32_t epi, bool lora,
                             const VkDescriptorSet *sets, const es__pc_mul_mat *call) {
    for (uint32_t i = 0; i < m->n_parts; i++) {
        const es__vk_part *pt = &m->parts[i];
        es__vk_pipeline *p;
        ES_TRY(part_pipe(r->d, pt, call->n, epi, lora, &p));
        const uint32_t wg = p->spec[0], rows = p->spec[2], tile = p->spec[6], team = p->spec[5];
        const uint32_t rows_per_wg = wg / team * rows;
        es__pc_mul_mat pc = *call;
        pc.M = pt->rows;
        pc.K = m->K;
        pc.y_off = call->y_off + (epi == ES__EPI_SWIGLU || epi == ES__EPI_GEGLU ? pt->row0 / 2 : epi == ES__EPI_ROPE_KV ? 0 : pt->row0);
        pc.row0 = pt->row0;
        pc.w_off = 0;
        pc.s_off = 0;
        /* rows permuted for NEOX RoPE: the epilogues need the permutation */
        pc.perm_rows = m->rope_rows;
        pc.neox = m->rope_rows > 0 ? 1u : 0u;
        if (m->rope_rows) {
            pc.hd = m->rope_hd;
            pc.n_rot = m->rope_nrot;
        }
        es__vk_rec_dispatch(r, op, p, sets[i], &pc, (pt->rows + rows_per_wg - 1) / rows_per_wg,
                            (call->n + tile - 1) / tile, 1);
    }
    return ES_OK;
}

void es__vk_step_write(int32_t *s, uint32_t stride, int32_t n_past, int32_t n, const int32_t *tokens,
                       const int32_t *pos, const int32_t *dfs_end, const int32_t *out_rows, int32_t n_out,
                       int32_t *cnt) {
    s[ES_STEP_N_PAST] = n_past;
    s[ES_STEP_NB] = (int32_t)stride;
    int32_t *a = s + ES_STEP_HDR;
    if (tokens) memcpy(a + ES_STEP_TOKENS * stride, tokens, sizeof *tokens * (size_t)n);
    memcpy(a + ES_STEP_POS * stride, pos, sizeof *pos * (size_t)n);
    memcpy(a + ES_STEP_DFS_END * stride, dfs_end, sizeof *dfs_end * (size_t)n);
    if (out_rows) memcpy(a + ES_STEP_OUT_ROWS * stride, out_rows, sizeof *out_rows * (size_t)n_out);
    /* counting sort by depth (stable): level[d] = first index in order of depth d */
    int32_t *order = a + ES_STEP_ORDER * stride, *level = a + ES_STEP_LEVEL * stride;
    memset(cnt, 0, sizeof *cnt * (size_t)(n + 2));
    int32_t max_depth = 0;
    for (int32_t j = 0; j < n; j++) {
        const int32_t dj = pos[j] - n_past;
        cnt[dj + 1]++;
        max_depth = ES__MAX(max_depth, dj);
    }
    for (int32_t dd = 0; dd <= max_depth + 1; dd++) {
        level[dd] = dd == 0 ? 0 : level[dd - 1] + cnt[dd];
        cnt[dd] = level[dd];
    }
    for (int32_t j = 0; j < n; j++) order[cnt[pos[j] - n_past]++] = j;
    bool chain = true;
    for (int32_t j = 0; j < n && chain; j++) chain = pos[j] == n_past + j;
    s[ES_STEP_CHAIN] = chain ? 1 : 0;
}

void es__vk_rope_table(const es__rope *r, float *dst, int32_t p0, uint32_t np, bool unit) {
    const uint32_t half = (uint32_t)r->n_rot / 2;
    for (uint32_t p = 0; p < np; p++) es__rope_cs(r, (int64_t)p0 + p, 0, half, unit, dst + (size_t)p * half * 2);
}
