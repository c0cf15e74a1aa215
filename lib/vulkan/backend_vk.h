/* backend_vk.h: the Vulkan backend's private state behind es_backend.impl (backend_vk.c). */
#ifndef ES_VULKAN_BACKEND_VK_H
#define ES_VULKAN_BACKEND_VK_H

#include "vk.h"

typedef struct es__vk_backend {
    es__vk_dev dev;
} es__vk_backend;

#endif
