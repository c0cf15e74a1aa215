/* qk_ref.h: the CPU's side of the Q/K head-norm kernel's op tests (test_vk_ops.c, test_vk_ss_ops.c):
 * one row made ready for attention by the CPU backend's own es__cpu_qkv_prepare. */
#ifndef ES_TEST_QK_REF_H
#define ES_TEST_QK_REF_H

#include "cpu/kern.h"
#include "cpu/opsi.h"
#include "oprun.h"

#include <string.h>

/* The CPU's attention inputs of one row (es__cpu_qkv_prepare: biases, head norms, RoPE) at pos,
 * in place. */
static inline void cpu_qk_prepare(const es__vk_op_rope *g, const es__cpu_layer *L, float eps, int32_t pos, float *row) {
    es__hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_head = (int32_t)g->n_head;
    hp.n_head_kv = (int32_t)g->n_head_kv;
    hp.head_dim = (int32_t)g->hd;
    hp.n_rot = (int32_t)g->n_rot;
    hp.rope_type = g->type;
    hp.rms_eps = eps;
    float cs[512];
    const es__rope rope = es__rope_plain((int32_t)g->n_rot, g->freq_base, g->freq_scale);
    es__cpu_rope_table(&rope, &pos, 1, false, cs);
    const uint32_t qd = g->n_head * g->hd, kvd = g->n_head_kv * g->hd;
    es__cpu_qkv_prepare(es__kern_best(), &hp, L, row, row + qd, row + qd + kvd, cs);
}

#endif /* ES_TEST_QK_REF_H */
