/* weights.h: weight matrices on the device (weights.c): repacked into the layouts of
 * shaders/weights.glsl, placed in a few large allocations, bound in row ranges ("parts") that
 * respect maxStorageBufferRange and maxTexelBufferElements. */
#ifndef ES_VULKAN_WEIGHTS_H
#define ES_VULKAN_WEIGHTS_H

#include "model.h"
#include "vk.h"

/* A row range of a matrix, bound as one descriptor. A part's rows come from tensors of one type:
 * Q, K and V fused from tensors of different types (llama.cpp's Q4_K_M keeps attn_v in Q6_K in
 * some layers) are parts of different types, each with its own kernel. */
typedef struct es__vk_part {
    uint32_t row0, rows;
    es__dtype type;              /* the device layout's type (weights.glsl) */
    es__dtype src_type;          /* its tensors' (IQ4_XS goes up as IQ4_NL)  */
    uint32_t team;               /* lanes per row in mul_mat for this type   */
    es__vk_region w, s;          /* the value/quant plane; the scale plane (block types) */
    bool has_s;
    VkBufferView w_view, s_view; /* texel path only */
} es__vk_part;

/* A weight matrix: rows of K elements (K padded to 32), possibly several tensors fused by
 * concatenating rows (Q, K, V) or interleaving them (gate/up: row 2i gate, 2i + 1 up). */
typedef struct es__vk_mat {
    es__dtype type;              /* the device layout's type (weights.glsl) of the first tensor, except
                                    IQ4_XS, whose blocks go up as IQ4_NL's (their scales d (ls - 32));
                                    concatenated tensors may differ (the parts') */
    uint32_t rows, K, K_src;     /* K_src: the tensors' row length before padding */
    uint32_t team;               /* lanes per row in mul_mat: 1, or the device's team size;
                                    the scale plane is interleaved for it (weights.glsl); the
                                    first tensor's, as type */
    uint32_t n_parts;
    es__vk_part *parts;
    /* where the rows come from (host views into the model) */
    const es__tensor *src[3];
    uint32_t n_src;
    bool interleave;
    /* NEOX RoPE in the mul_mat epilogue wants each rotated pair in adjacent rows: the first
     * rope_rows rows (Q and K) are permuted within heads of rope_hd rows so that row 2i holds
     * dimension i and row 2i + 1 dimension i + rope_nrot / 2 (shaders/mul_mat.comp rope_dim). */
    uint32_t rope_rows, rope_hd, rope_nrot;
} es__vk_mat;

/* Bytes of one row in each plane, for teams of `team` lanes (the scale interleave). */
uint64_t es__vk_mat_row_bytes(es__dtype type, uint32_t K, uint32_t team, bool scale_plane);

/* A set of matrices uploaded together into shared allocations. */
typedef struct es__vk_wset {
    es__vk_dev *d;
    es__vk_arena arena;
    uint64_t bytes;
    VkDeviceSize staging_size; /* the upload's staging buffer: 0 for the default (32 MiB); tests
                                  make it small so that uploads refill it row by row */
} es__vk_wset;

void es__vk_wset_init(es__vk_wset *ws, es__vk_dev *d);

/* Lanes per row for rows of K elements of type on this device: short rows are walked by one
 * lane. */
uint32_t es__vk_row_team(const es__vk_dev *d, es__dtype type, uint32_t K);

/* Describes m from tensors (same row length; the same type too when interleaved) without
 * uploading. */
es_status es__vk_mat_init(es__vk_dev *d, es__vk_mat *m, const es__tensor *const *src, uint32_t n_src,
                          bool interleave);
/* Splits each matrix into parts, places the planes in new allocations of ws, uploads the
 * repacked rows through staging and creates the views. progress (may be NULL) is called with
 * the fraction done and may cancel. */
es_status es__vk_wset_upload(es__vk_wset *ws, es__vk_mat *const *mats, uint32_t n_mats,
                             bool (*progress)(float, void *), void *progress_user);
void es__vk_mat_free(es__vk_dev *d, es__vk_mat *m);
void es__vk_wset_free(es__vk_wset *ws);

/* Descriptor contents for a part's W and S planes (S falls back to W for float types). */
void es__vk_part_binds(es__vk_wset *ws, const es__vk_part *p, es__vk_bind *w, es__vk_bind *s);

#endif
