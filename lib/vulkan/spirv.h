/* spirv.h: interface reflection of SPIR-V compute modules (spirv.c). */
#ifndef ES_VULKAN_SPIRV_H
#define ES_VULKAN_SPIRV_H

#include "common.h"

#include "loader.h"

#define ES__SPIRV_MAX_BINDINGS 16

typedef struct es__spirv_binding {
    uint32_t set, binding;
    VkDescriptorType type;
} es__spirv_binding;

typedef struct es__spirv_iface {
    es__spirv_binding bindings[ES__SPIRV_MAX_BINDINGS];
    uint32_t n_bindings;
    uint32_t push_size; /* bytes of the push-constant block; 0 = none */
    uint32_t spec_ids;  /* bit i set: the module has specialisation constant id i (i < 32) */
} es__spirv_iface;

/* Reads words[n_words]. Returns 0, or -1 (a malformed module) or -2 (out of memory) with a
 * message in msg[cap]. */
int es__spirv_reflect(const uint32_t *words, size_t n_words, const es_allocator *alloc, es__spirv_iface *out,
                      char *msg, size_t cap);

#endif
