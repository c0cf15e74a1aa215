/* vk_attn_variants.h: the attention kernels of other devices (policy.h attn_split, attn_team),
 * forced on the test device: splits of 16 keys, a subgroup per split, and both. */
#ifndef ES_TEST_VK_ATTN_VARIANTS_H
#define ES_TEST_VK_ATTN_VARIANTS_H

#include "backend_vk.h"
#include "ops.h"
#include "vk_test.h"

static const struct {
    uint32_t split;
    bool team;
    const char *name;
} VK_ATTN_VARIANTS[] = {{16, false, "split 16"}, {ES__ATTN_SPLIT, true, "team"}, {16, true, "team, split 16"}};
#define VK_N_ATTN_VARIANTS (sizeof VK_ATTN_VARIANTS / sizeof VK_ATTN_VARIANTS[0])

/* A default-configuration backend with variant v's attention, or NULL (after freeing it) when the
 * device cannot run it (a subgroup per split needs subgroup arithmetic). */
static inline es_backend *vk_backend_attn(size_t v) {
    es_backend *b = vk_backend(0);
    if (!b) return NULL;
    es__vk_dev_of(b)->policy.attn_split = VK_ATTN_VARIANTS[v].split;
    es__vk_dev_of(b)->policy.attn_team = VK_ATTN_VARIANTS[v].team;
    if (VK_ATTN_VARIANTS[v].team && !es__vk_attn_team(es__vk_dev_of(b))) {
        printf("no subgroup arithmetic: attention '%s' not run\n", VK_ATTN_VARIANTS[v].name);
        es_backend_free(b);
        return NULL;
    }
    return b;
}

#endif
