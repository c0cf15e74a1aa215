/* kernels.h: the host side of every kernel family's interface: the push-constant structs (from
 * shaders/push.h, so shader and host share one definition) and the binding roles the host fills.
 * pipeline.c checks each compiled variant against this table when it creates the pipeline. */
#ifndef ES_VULKAN_KERNELS_H
#define ES_VULKAN_KERNELS_H

#include "../../shaders/push.h"
#include "../../shaders/ss_push.h"

#include <stdint.h>

#define ES__C_U(x) uint32_t x;
#define ES__C_F(x) float x;
#define ES__PUSH_STRUCT(tname, XM)                                                                 \
    typedef struct tname {                                                                         \
        XM(ES__C_U, ES__C_F)                                                                       \
    } tname

ES__PUSH_STRUCT(es__pc_mul_mat, ES_PC_MUL_MAT);
ES__PUSH_STRUCT(es__pc_rmsnorm, ES_PC_RMSNORM);
ES__PUSH_STRUCT(es__pc_get_rows, ES_PC_GET_ROWS);
ES__PUSH_STRUCT(es__pc_attn, ES_PC_ATTN);
ES__PUSH_STRUCT(es__pc_attn_merge, ES_PC_ATTN_MERGE);
ES__PUSH_STRUCT(es__pc_attn_spec, ES_PC_ATTN_SPEC);
ES__PUSH_STRUCT(es__pc_kv_move, ES_PC_KV_MOVE);
ES__PUSH_STRUCT(es__pc_alspec_copy, ES_PC_ALSPEC_COPY);
ES__PUSH_STRUCT(es__pc_alspec_gate, ES_PC_ALSPEC_GATE);
ES__PUSH_STRUCT(es__pc_kv_shift, ES_PC_KV_SHIFT);
ES__PUSH_STRUCT(es__pc_qk_norm_rope, ES_PC_QK_NORM_ROPE);
ES__PUSH_STRUCT(es__pc_topk, ES_PC_TOPK);
ES__PUSH_STRUCT(es__pc_softmax, ES_PC_SOFTMAX);
ES__PUSH_STRUCT(es__pc_ss_rows, ES_PC_SS_ROWS);
ES__PUSH_STRUCT(es__pc_ss_rope, ES_PC_SS_ROPE);
ES__PUSH_STRUCT(es__pc_ss_attn, ES_PC_SS_ATTN);

/* A kernel family: its binding roles, one letter per binding 0.. :
 *   'r' read-only data: a uniform texel buffer in texel variants, else a storage buffer
 *   'w' a storage buffer the kernel writes (or reads and writes)
 * and its push-constant block size. */
typedef struct es__kernel_family {
    const char *name;
    const char *roles;
    uint32_t push_size;
} es__kernel_family;

/* NULL for an unknown family name. */
const es__kernel_family *es__kernel_family_find(const char *name);

#endif
