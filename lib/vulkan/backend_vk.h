/* backend_vk.h: the Vulkan backend's private state behind es_backend.impl (backend_vk.c). */
#ifndef ES_VULKAN_BACKEND_VK_H
#define ES_VULKAN_BACKEND_VK_H

#include "vk.h"

typedef struct es__vk_backend {
    es__vk_dev dev;
} es__vk_backend;

/* The device behind a Vulkan backend (its es__vk_dev, for links between backends, link.c);
 * NULL for any other backend. */
static inline es__vk_dev *es__vk_dev_of(es_backend *b) {
    return b && b->type == ES_BACKEND_VULKAN && b->impl ? &((es__vk_backend *)b->impl)->dev : NULL;
}

#endif
