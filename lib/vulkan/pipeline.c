/* pipeline.c: compute pipelines from the embedded SPIR-V registry: created once per (variant,
 * specialisation) and kept for the backend's life, each checked against its family's interface
 * (binding types, push-constant size, workgroup-size specialisation) before creation; the
 * on-disk pipeline cache; descriptor sets for a pipeline's bindings.
 * It deliberately does not choose variants (forward.c and ops.c do). */
#include "kernels.h"
#include "spirv.h"
#include "vk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static VkDescriptorType role_type(char role, bool texel) {
    return role == 'r' && texel ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
}

static const char *dtype_name(VkDescriptorType t) {
    switch (t) {
    case VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER: return "uniform texel buffer";
    case VK_DESCRIPTOR_TYPE_STORAGE_TEXEL_BUFFER: return "storage texel buffer";
    case VK_DESCRIPTOR_TYPE_STORAGE_BUFFER: return "storage buffer";
    case VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER: return "uniform buffer";
    default: return "other descriptor";
    }
}

/* Compares a module's reflected interface with the family table; fails with the difference. */
static es_status check_interface(es__vk_dev *d, const es__shader_info *sh, const es__kernel_family *fam) {
    es__spirv_iface itf;
    char msg[160];
    const int r = es__spirv_reflect(sh->words, sh->size / 4, d->alloc, &itf, msg, sizeof msg);
    if (r != 0)
        return es__fail(d->err, r == -2 ? ES_ERR_OUT_OF_MEMORY : ES_ERR_BACKEND, "vulkan: shader %s: %s", sh->name, msg);
    const uint32_t n_roles = (uint32_t)strlen(fam->roles);
    for (uint32_t i = 0; i < itf.n_bindings; i++) {
        const es__spirv_binding *b = &itf.bindings[i];
        ES_RETURN_IF(b->set != 0 || b->binding >= n_roles, d->err, ES_ERR_BACKEND,
                     "vulkan: shader %s declares set %u binding %u, but family %s has bindings 0..%u of set 0 only",
                     sh->name, b->set, b->binding, fam->name, n_roles - 1);
        VkDescriptorType want = role_type(fam->roles[b->binding], sh->texel);
        ES_RETURN_IF(b->type != want, d->err, ES_ERR_BACKEND,
                     "vulkan: shader %s binding %u is a %s, but the host binds a %s (family %s role '%c')", sh->name,
                     b->binding, dtype_name(b->type), dtype_name(want), fam->name, fam->roles[b->binding]);
    }
    ES_RETURN_IF(itf.push_size != fam->push_size, d->err, ES_ERR_BACKEND,
                 "vulkan: shader %s has a %u-byte push-constant block, the host pushes %u bytes (family %s)",
                 sh->name, itf.push_size, fam->push_size, fam->name);
    ES_RETURN_IF(!(itf.spec_ids & 1u), d->err, ES_ERR_BACKEND,
                 "vulkan: shader %s does not take its workgroup size from specialisation constant 0", sh->name);
    return ES_OK;
}

static es_status pipeline_create(es__vk_dev *d, const es__shader_info *sh, es__shader_id id, const uint32_t *spec,
                                 uint32_t n_spec, es__vk_pipeline *p) {
    const es__kernel_family *fam = es__kernel_family_find(sh->family);
    ES_RETURN_IF(!fam, d->err, ES_ERR_BACKEND, "vulkan: shader %s has unknown family %s", sh->name, sh->family);
    ES_TRY(check_interface(d, sh, fam));
    memset(p, 0, sizeof *p);
    p->shader = id;
    p->name = sh->name;
    p->n_spec = n_spec;
    memcpy(p->spec, spec, n_spec * sizeof *spec);
    p->push_size = fam->push_size;
    p->n_bindings = (uint32_t)strlen(fam->roles);

    VkDescriptorSetLayoutBinding lb[ES__SHADER_MAX_BINDINGS];
    for (uint32_t i = 0; i < p->n_bindings; i++) {
        p->types[i] = role_type(fam->roles[i], sh->texel);
        lb[i] = (VkDescriptorSetLayoutBinding){i, p->types[i], 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    }
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    li.bindingCount = p->n_bindings;
    li.pBindings = lb;
    ES_VK_TRY(d, vkCreateDescriptorSetLayout(d->dev, &li, NULL, &p->set_layout));
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_size};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &p->set_layout;
    pli.pushConstantRangeCount = p->push_size ? 1 : 0;
    pli.pPushConstantRanges = &pr;
    ES_VK_TRY(d, vkCreatePipelineLayout(d->dev, &pli, NULL, &p->layout));

    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = sh->size;
    mi.pCode = sh->words;
    VkShaderModule mod;
    ES_VK_TRY(d, vkCreateShaderModule(d->dev, &mi, NULL, &mod));
    VkSpecializationMapEntry me[8];
    for (uint32_t i = 0; i < n_spec; i++) me[i] = (VkSpecializationMapEntry){i, 4 * i, 4};
    VkSpecializationInfo si = {n_spec, me, 4 * n_spec, p->spec};
    VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = mod;
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = &si;
    /* The host sizes grids assuming teams of exactly d->subgroup_size full lanes: pin the
     * subgroup size and require full subgroups where the device lets us. */
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT rss = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT};
    if (d->use.size_control && strstr(sh->name, "_sg") && n_spec > 0 && spec[0] % d->subgroup_size == 0) {
        rss.requiredSubgroupSize = d->subgroup_size;
        ci.stage.pNext = &rss;
        ci.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT;
    }
    ci.layout = p->layout;
    VkResult r = vkCreateComputePipelines(d->dev, d->pcache, 1, &ci, NULL, &p->pipeline);
    vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) {
        p->pipeline = VK_NULL_HANDLE;
        return es__fail(d->err, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? ES_ERR_DEVICE_MEMORY : ES_ERR_BACKEND,
                        "vulkan: vkCreateComputePipelines for shader %s failed: %s", sh->name, es__vk_result_str(r));
    }
    return ES_OK;
}

static void pipeline_free(es__vk_dev *d, es__vk_pipeline *p) {
    if (p->pipeline) vkDestroyPipeline(d->dev, p->pipeline, NULL);
    if (p->layout) vkDestroyPipelineLayout(d->dev, p->layout, NULL);
    if (p->set_layout) vkDestroyDescriptorSetLayout(d->dev, p->set_layout, NULL);
    memset(p, 0, sizeof *p);
}

es_status es__vk_pipeline_get(es__vk_dev *d, es__shader_id shader, const uint32_t *spec, uint32_t n_spec,
                              es__vk_pipeline **out) {
    ES_RETURN_IF((int)shader < 0 || (int)shader >= (int)ES__SHADER_COUNT || n_spec > 8, d->err, ES_ERR_BACKEND,
                 "vulkan: pipeline request for shader %d with %u constants", (int)shader, n_spec);
    for (uint32_t i = 0; i < d->n_pipelines; i++) {
        es__vk_pipeline *p = &d->pipelines[i];
        if (p->shader == shader && p->n_spec == n_spec && memcmp(p->spec, spec, n_spec * sizeof *spec) == 0) {
            *out = p;
            return ES_OK;
        }
    }
    ES_RETURN_IF(d->n_pipelines == ES__VK_MAX_PIPELINES, d->err, ES_ERR_BACKEND,
                 "vulkan: more than %d pipelines requested", ES__VK_MAX_PIPELINES);
    es__vk_pipeline *p = &d->pipelines[d->n_pipelines];
    es_status s = pipeline_create(d, &es__shaders[shader], shader, spec, n_spec, p);
    if (s != ES_OK) {
        pipeline_free(d, p);
        return s;
    }
    d->n_pipelines++;
    *out = p;
    return ES_OK;
}

es_status es__vk_pipeline_custom(es__vk_dev *d, const es__shader_info *sh, const uint32_t *spec, uint32_t n_spec,
                                 es__vk_pipeline *out) {
    ES_RETURN_IF(n_spec > 8, d->err, ES_ERR_BACKEND, "vulkan: pipeline request for shader %s with %u constants",
                 sh->name, n_spec);
    es_status s = pipeline_create(d, sh, ES__SHADER_COUNT, spec, n_spec, out);
    if (s != ES_OK) pipeline_free(d, out);
    return s;
}

void es__vk_pipeline_release(es__vk_dev *d, es__vk_pipeline *p) {
    pipeline_free(d, p);
}

es_status es__vk_shader_find(es__vk_dev *d, const char *name, es__shader_id *out) {
    for (int i = 0; i < ES__SHADER_COUNT; i++)
        if (strcmp(es__shaders[i].name, name) == 0) {
            *out = (es__shader_id)i;
            return ES_OK;
        }
    return es__fail(d->err, ES_ERR_BACKEND, "vulkan: no shader variant '%s' in this build", name);
}

void es__vk_pipelines_destroy(es__vk_dev *d) {
    for (uint32_t i = 0; i < d->n_pipelines; i++) pipeline_free(d, &d->pipelines[i]);
    d->n_pipelines = 0;
}

/* ---- pipeline cache file */
es_status es__vk_pcache_load(es__vk_dev *d, const char *path) {
    d->pcache_path = es__strndup(d->alloc, path, strlen(path));
    ES_RETURN_IF(!d->pcache_path, d->err, ES_ERR_OUT_OF_MEMORY, "vulkan: out of memory");
    void *data = NULL;
    size_t size = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        if (fseek(f, 0, SEEK_END) == 0) {
            long len = ftell(f);
            if (len > 32 && len < (1l << 30) && fseek(f, 0, SEEK_SET) == 0) {
                data = es__malloc(d->alloc, (size_t)len);
                if (data && fread(data, 1, (size_t)len, f) == (size_t)len) size = (size_t)len;
            }
        }
        fclose(f);
    }
    /* Only hand the driver a cache written for this very device and driver. */
    if (size) {
        const uint8_t *h = data;
        uint32_t hdr[4];
        memcpy(hdr, h, sizeof hdr);
        if (hdr[0] < 32 || hdr[1] != VK_PIPELINE_CACHE_HEADER_VERSION_ONE || hdr[2] != d->phys.props.vendorID ||
            hdr[3] != d->phys.props.deviceID || memcmp(h + 16, d->phys.props.pipelineCacheUUID, VK_UUID_SIZE) != 0) {
            es__logf(d->log, ES_LOG_INFO, "vulkan: pipeline cache %s is for another device or driver; ignored", path);
            size = 0;
        }
    }
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = size;
    ci.pInitialData = size ? data : NULL;
    VkResult r = vkCreatePipelineCache(d->dev, &ci, NULL, &d->pcache);
    es__free(d->alloc, data);
    if (r != VK_SUCCESS) {
        d->pcache = VK_NULL_HANDLE;
        return es__vk_fail(d, r, "vkCreatePipelineCache");
    }
    return ES_OK;
}

void es__vk_pcache_save(es__vk_dev *d) {
    if (!d->pcache || !d->pcache_path) return;
    size_t size = 0;
    if (vkGetPipelineCacheData(d->dev, d->pcache, &size, NULL) != VK_SUCCESS || size == 0) return;
    void *data = es__malloc(d->alloc, size);
    if (!data) return;
    if (vkGetPipelineCacheData(d->dev, d->pcache, &size, data) == VK_SUCCESS) {
        /* write beside, then rename: a crash never leaves a torn cache */
        size_t n = strlen(d->pcache_path) + 8;
        char *tmp = es__malloc(d->alloc, n);
        if (tmp) {
            snprintf(tmp, n, "%s.tmp", d->pcache_path);
            FILE *f = fopen(tmp, "wb");
            bool ok = f && fwrite(data, 1, size, f) == size;
            if (f) ok = fclose(f) == 0 && ok;
            if (ok && rename(tmp, d->pcache_path) == 0)
                es__logf(d->log, ES_LOG_INFO, "vulkan: wrote pipeline cache %s (%zu bytes)", d->pcache_path, size);
            else {
                remove(tmp);
                es__logf(d->log, ES_LOG_WARN, "vulkan: could not write pipeline cache %s", d->pcache_path);
            }
            es__free(d->alloc, tmp);
        }
    }
    es__free(d->alloc, data);
}

/* ---- descriptor sets */
es_status es__vk_set_create(es__vk_dev *d, VkDescriptorPool pool, const es__vk_pipeline *pipe,
                            const es__vk_bind *binds, VkDescriptorSet *out) {
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pool;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &pipe->set_layout;
    ES_VK_TRY(d, vkAllocateDescriptorSets(d->dev, &ai, out));
    VkWriteDescriptorSet wr[ES__SHADER_MAX_BINDINGS];
    VkDescriptorBufferInfo bi[ES__SHADER_MAX_BINDINGS];
    for (uint32_t i = 0; i < pipe->n_bindings; i++) {
        wr[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        wr[i].dstSet = *out;
        wr[i].dstBinding = i;
        wr[i].descriptorCount = 1;
        wr[i].descriptorType = pipe->types[i];
        if (pipe->types[i] == VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER) {
            ES_RETURN_IF(!binds[i].view, d->err, ES_ERR_BACKEND, "vulkan: binding %u of %s needs a texel view", i,
                         pipe->name);
            wr[i].pTexelBufferView = &binds[i].view;
        } else {
            ES_RETURN_IF(!binds[i].buf || binds[i].range == 0, d->err, ES_ERR_BACKEND,
                         "vulkan: binding %u of %s needs a buffer range", i, pipe->name);
            bi[i] = (VkDescriptorBufferInfo){binds[i].buf, binds[i].offset, binds[i].range};
            wr[i].pBufferInfo = &bi[i];
        }
    }
    vkUpdateDescriptorSets(d->dev, pipe->n_bindings, wr, 0, NULL);
    return ES_OK;
}
