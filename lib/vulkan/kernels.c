/* kernels.c: the table of kernel families (binding roles and push-constant sizes) and the static
 * checks that the push-constant structs match shaders/push.h member for member. */
#include "kernels.h"

#include <string.h>

/* Each member of a push block is one 32-bit scalar: the struct must be exactly that big, and
 * Vulkan guarantees only 128 bytes of push constants. */
#define ES__COUNT(x) +1
#define ES__CHECK_PUSH(tname, XM)                                                                  \
    _Static_assert(sizeof(tname) == 4 * (0 XM(ES__COUNT, ES__COUNT)), #tname " has padding");      \
    _Static_assert(sizeof(tname) <= 128, #tname " exceeds the guaranteed push-constant size")

ES__CHECK_PUSH(es__pc_mul_mat, ES_PC_MUL_MAT);
ES__CHECK_PUSH(es__pc_rmsnorm, ES_PC_RMSNORM);
ES__CHECK_PUSH(es__pc_get_rows, ES_PC_GET_ROWS);
ES__CHECK_PUSH(es__pc_attn, ES_PC_ATTN);
ES__CHECK_PUSH(es__pc_attn_merge, ES_PC_ATTN_MERGE);
ES__CHECK_PUSH(es__pc_attn_spec, ES_PC_ATTN_SPEC);
ES__CHECK_PUSH(es__pc_kv_move, ES_PC_KV_MOVE);
ES__CHECK_PUSH(es__pc_alspec_copy, ES_PC_ALSPEC_COPY);
ES__CHECK_PUSH(es__pc_alspec_gate, ES_PC_ALSPEC_GATE);
ES__CHECK_PUSH(es__pc_kv_shift, ES_PC_KV_SHIFT);
ES__CHECK_PUSH(es__pc_qk_norm_rope, ES_PC_QK_NORM_ROPE);
ES__CHECK_PUSH(es__pc_topk, ES_PC_TOPK);
ES__CHECK_PUSH(es__pc_softmax, ES_PC_SOFTMAX);
ES__CHECK_PUSH(es__pc_ss_rows, ES_PC_SS_ROWS);
ES__CHECK_PUSH(es__pc_ss_rope, ES_PC_SS_ROPE);
ES__CHECK_PUSH(es__pc_ss_attn, ES_PC_SS_ATTN);

static const es__kernel_family families[] = {
    {"mul_mat", "rrrwrrww", sizeof(es__pc_mul_mat)},     /* W, S (scales), X, Y, RoPE table,
                                                            step, K cache, V cache      */
    {"mul_mat_lora", "rrrwrrwwrr", sizeof(es__pc_mul_mat)}, /* the same, LoRA's R = A X, B   */
    {"mul_mat_tiled", "rrrwrrww", sizeof(es__pc_mul_mat)},   /* mul_mat in passes of a tile  */
    {"mul_mat_lora_tiled", "rrrwrrwwrr", sizeof(es__pc_mul_mat)},
    {"get_rows", "rrrw", sizeof(es__pc_get_rows)},       /* W, S, step, X                */
    {"rmsnorm", "rrrww", sizeof(es__pc_rmsnorm)},        /* X, G, step, Y, Z (X's rows)  */
    {"attn", "rrrrww", sizeof(es__pc_attn)},             /* QKV, K, V, step, out, parts  */
    {"attn_team", "rrrrww", sizeof(es__pc_attn)},        /* the same, a subgroup a split */
    {"attn_merge", "rrw", sizeof(es__pc_attn_merge)},    /* parts, step, out             */
    {"attn_spec", "rrwww", sizeof(es__pc_attn_spec)},    /* parts, step, out, spec, verdict */
    {"kv_move", "rww", sizeof(es__pc_kv_move)},          /* step, K, V                   */
    {"alspec_copy", "ww", sizeof(es__pc_alspec_copy)},   /* source, destination          */
    {"alspec_gate", "www", sizeof(es__pc_alspec_gate)},  /* verdicts, flags, link window */
    {"kv_shift", "rww", sizeof(es__pc_kv_shift)},        /* cos/sin, K, V                */
    {"qk_norm_rope", "wrrrww", sizeof(es__pc_qk_norm_rope)}, /* QKV, RoPE table and biases,
                                                            step, norm vectors, K, V     */
    {"topk", "rw", sizeof(es__pc_topk)},                 /* logits, results              */
    {"softmax", "w", sizeof(es__pc_softmax)},            /* rows                         */
    {"ss_rows", "rrrw", sizeof(es__pc_ss_rows)},         /* X, P, step, Y                */
    {"ss_rope", "wrr", sizeof(es__pc_ss_rope)},          /* QKV, rope table, step        */
    {"ss_attn", "rrrrw", sizeof(es__pc_ss_attn)},        /* QKV, K, V, step, out         */
    {"ss_attn_team", "rrrrw", sizeof(es__pc_ss_attn)},   /* the same, a subgroup a row   */
};

const es__kernel_family *es__kernel_family_find(const char *name) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i].name, name) == 0) return &families[i];
    return NULL;
}
