/* ops.h: the Vulkan kernels as ops: which variant and specialisation a device gets, the push
 * constants and grid of each dispatch (ops.c), and host-array entry points that run one op on
 * fresh buffers, for the op tests and micro-benchmarks (oprun.c).
 * forward.c records the same ops into a forward pass, so what the tests check is what runs. */
#ifndef ES_VULKAN_OPS_H
#define ES_VULKAN_OPS_H

#include "kernels.h"
#include "weights.h"

/* mul_mat epilogues (spec constant EPI). */
enum { ES__EPI_STORE = 0, ES__EPI_ADD = 1, ES__EPI_SWIGLU = 2 };

/* Kernel shape for mul_mat: tokens per workgroup. Batch invariance does not depend on it. */
uint32_t es__vk_mul_mat_tok(uint32_t n);
es_status es__vk_mul_mat_pipe(es__vk_dev *d, es__dtype type, uint32_t tok, uint32_t epi, es__vk_pipeline **out);
/* Records Y (+)= W X for every part of m; sets[] holds one descriptor set per part. */
void es__vk_rec_mul_mat(es__vk_rec *r, const char *op, const es__vk_pipeline *p, const es__vk_mat *m,
                        const VkDescriptorSet *sets, uint32_t n, uint32_t x_off, uint32_t x_stride, uint32_t y_off,
                        uint32_t y_stride);

/* Pipelines of the other families: workgroup size for the device, or the attention tile. */
es_status es__vk_simple_pipe(es__vk_dev *d, const char *family, bool reads, bool reduces, es__vk_pipeline **out);
es_status es__vk_attn_pipe(es__vk_dev *d, uint32_t tile, es__vk_pipeline **out);
es_status es__vk_get_rows_pipe(es__vk_dev *d, es__dtype type, es__vk_pipeline **out);

/* ---- oprun.c: one op on host arrays (tests, micro-benchmarks). All run on backend b, which
 * must be a Vulkan backend. reps > 1 repeats the dispatch inside one submission (for timing);
 * *ms (may be NULL) gets the wall time of the submission divided by reps. */

/* y[n][rows] (=, +=) W x[n][K], W in GGUF layout (rows of K elements of type). For
 * ES__EPI_SWIGLU W holds 2 * n_ff interleaved rows and y gets [n][rows / 2]. */
es_status es__vk_run_mul_mat(es_backend *b, es__dtype type, const void *w, uint32_t rows, uint32_t K,
                             const float *x, uint32_t n, uint32_t epi, float *y, uint32_t reps, double *ms);

#endif
