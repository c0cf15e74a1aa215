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

static const es__kernel_family families[] = {
    {"mul_mat", "rrrw", sizeof(es__pc_mul_mat)}, /* W, S (scales), X, Y */
};

const es__kernel_family *es__kernel_family_find(const char *name) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i].name, name) == 0) return &families[i];
    return NULL;
}
