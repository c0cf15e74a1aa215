/* vkbench.h: options shared by the modes of edgespec-vkbench. */
#ifndef ES_VKBENCH_H
#define ES_VKBENCH_H

#include "edgespec.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct vkbench_opts {
    const char *model, *device, *flags, *type;
    bool vulkan, profile;
    uint32_t vk_flags;
    int32_t threads, reps, runs;
    int32_t pp[8];
    int n_pp;
    int32_t tg, tree;
    uint32_t rows, cols, n;
    int32_t tile; /* mul_mat: the device policy's matrix tile (policy.h), -1 = the profile's */
} vkbench_opts;

int vkbench_model(const vkbench_opts *o);

#endif
