/* ops.h: the Vulkan kernels as ops: which variant and specialisation a device gets, the push
 * constants and grid of each dispatch (ops.c).
 * forward.c records the same ops into a forward pass, so what the tests check is what runs
 * (tests/common/oprun.c runs one op on host arrays through these, outside the library). */
#ifndef ES_VULKAN_OPS_H
#define ES_VULKAN_OPS_H

#include "kernels.h"
#include "rope.h"
#include "weights.h"

/* Attention geometry. Batch invariance needs the split fixed: splits are aligned to absolute
 * positions, whatever the batch. A device's split (policy.h attn_split) divides this one. */
#define ES__ATTN_SPLIT 256u /* key positions per split, the most a device takes             */
#define ES__ATTN_CHUNK 64u  /* tokens per attention dispatch (bounds the partials buffer)  */
#define ES__ATTN_WG 64u     /* (token, head) pairs per attention workgroup                  */

/* Fills the step arrays for a batch (shaders/push.h: ES_STEP_*): n_past, tokens (may be NULL),
 * positions, DFS ends, the rows wanting logits (may be NULL), and the depth order of the tree.
 * s holds ES_STEP_HDR + ES_STEP_ARRAYS * stride ints; depth_count is scratch of n + 2 ints. */
void es__vk_step_write(int32_t *s, uint32_t stride, int32_t n_past, int32_t n, const int32_t *tokens,
                       const int32_t *pos, const int32_t *dfs_end, const int32_t *out_rows, int32_t n_out,
                       int32_t *depth_count);

/* (cos, sin) of RoPE r (rope.h) for positions [p0, p0 + np) and pairs i < n_rot / 2, the CPU
 * backend's values; a negative p0 with unit gives the rotation back by -p0 positions (a context
 * shift's, magnitude 1). */
void es__vk_rope_table(const es__rope *r, float *dst, int32_t p0, uint32_t np, bool unit);

/* mul_mat epilogues (spec constant EPI). */
enum { ES__EPI_STORE = 0, ES__EPI_ADD = 1, ES__EPI_SWIGLU = 2, ES__EPI_ROPE_KV = 3, ES__EPI_GEGLU = 4 };

/* Kernel shape for mul_mat: tokens per workgroup (the tile) for a batch of n of a matrix of
 * this type, at most ES__VK_TILE_TOK. Batch invariance does not depend on it. */
#define ES__VK_TILE_TOK 32u
uint32_t es__vk_mul_mat_tok(const es__vk_dev *d, es__dtype type, uint32_t n);
es_status es__vk_mul_mat_pipe(es__vk_dev *d, const es__vk_mat *m, uint32_t tile, uint32_t epi,
                              es__vk_pipeline **out);
/* The same plus a low-rank term, Y = W X + B R (Speculative Streaming's stream-only LoRA, R = A X
 * from a plain mul_mat before): its descriptor sets add R (f32 rows) and B's plane as bindings 8
 * and 9; pc.lora_r and pc.lora_stride give R's width and row stride. */
es_status es__vk_mul_mat_lora_pipe(es__vk_dev *d, const es__vk_mat *m, uint32_t tok, uint32_t epi,
                                   es__vk_pipeline **out);
/* Every kernel a part of m may record with epilogue epi (with the LoRA term when lora), so that
 * recording compiles nothing. */
es_status es__vk_mul_mat_warm(es__vk_dev *d, const es__vk_mat *m, uint32_t epi, bool lora);
/* Records Y (+)= W X for every part of m, each with the kernel of its type (epilogue epi, the
 * LoRA term when lora); sets[] holds one descriptor set per part (any mul_mat kernel's layout).
 * pc carries the call's fields (n, X and Y placement, the RoPE fields); the part fields (M,
 * y_off, row0, w_off, s_off) are filled here. */
es_status es__vk_rec_mul_mat(es__vk_rec *r, const char *op, const es__vk_mat *m, uint32_t epi, bool lora,
                             const VkDescriptorSet *sets, const es__pc_mul_mat *pc);

/* Pipelines of the other families, with the workgroup size for the device. */
es_status es__vk_simple_pipe(es__vk_dev *d, const char *family, bool reads, bool reduces, es__vk_pipeline **out);
/* rmsnorm: a simple kernel whose workgroup is the device's policy (policy.h norm_wg). */
es_status es__vk_rmsnorm_pipe(es__vk_dev *d, es__vk_pipeline **out);
/* Whether the device's attention gives each (token, head, split) a subgroup (attn_team.comp:
 * policy.h attn_team, with subgroup arithmetic); the device's pipeline of an attention family
 * ("attn": attn.comp or attn_team.comp; "ss_attn": ss_attn.comp or ss_attn_team.comp) and how
 * many (row, head) pairs one of its workgroups serves. */
bool es__vk_attn_team(const es__vk_dev *d);
es_status es__vk_attn_kernel(es__vk_dev *d, const char *family, uint32_t hd, es__vk_pipeline **out,
                             uint32_t *pairs_per_wg);
es_status es__vk_get_rows_pipe(es__vk_dev *d, es__dtype type, es__vk_pipeline **out);

#endif
