/* test_vk_device: the Vulkan device layer: listing, selection by index, type and name with clear
 * errors for selectors that match nothing (and no environment variable consulted), the ES_VK_*
 * flags through es_vk_flags_parse and es_backend_params (names, numbers, unknown names,
 * contradictions), features forced off, device memory that cannot be had reported as ES_ERR_DEVICE_MEMORY with the sizes, the
 * pipeline interface check (SPIR-V reflection of every variant against its family, and a module
 * that disagrees), and the pipeline cache file. */
#include "backend_vk.h"
#include "oprun.h"
#include "spirv.h"
#include "vk_test.h"

#include <ctype.h>
#include <stdlib.h>

static void test_listing(void) {
    size_t n = 0;
    CHECK_OK(es_vulkan_devices(NULL, 0, &n));
    CHECKF(n >= 1, "no Vulkan devices listed (CI has lavapipe)");
    es_device_info info[8];
    CHECK_OK(es_vulkan_devices(info, 8, &n));
    int defaults = 0;
    for (size_t i = 0; i < n && i < 8; i++) {
        defaults += info[i].is_default;
        CHECK(info[i].index == (int32_t)i && info[i].name[0] && info[i].type);
    }
    CHECK(defaults == 1);
    if (n > 0) CHECK_FAILS(es_vulkan_devices(info, 0, &n), ES_ERR_BUFFER_TOO_SMALL, "room for 0");
}

static es_status make(const char *device, uint32_t flags, es_backend **out) {
    es_backend_params p = es_backend_default_params();
    p.type = ES_BACKEND_VULKAN;
    p.device = device;
    p.vk_flags = flags;
    p.log_fn = vk_test_log;
    return es_backend_create(&p, out);
}

static void test_selection(void) {
    es_device_info info[8];
    size_t n = 0;
    CHECK_OK(es_vulkan_devices(info, 8, &n));
    if (n == 0) return;
    es_backend *b = NULL;
    CHECK_OK(make("0", 0, &b));
    CHECK(b && strcmp(es_backend_name(b), info[0].name) == 0);
    es_backend_free(b);
    CHECK_OK(make(info[0].type, 0, &b)); /* by type */
    es_backend_free(b);
    char part[8];
    snprintf(part, sizeof part, "%.4s", info[0].name); /* by a name substring, any case */
    for (char *c = part; *c; c++) *c = (char)toupper((unsigned char)*c);
    CHECK_OK(make(part, 0, &b));
    es_backend_free(b);
    b = (es_backend *)1;
    CHECK_FAILS(make("17", 0, &b), ES_ERR_INVALID_ARGUMENT, "device index 17 out of range");
    CHECK(b == NULL);
    CHECK_FAILS(make("no-such-gpu", 0, &b), ES_ERR_INVALID_ARGUMENT, "no device matches 'no-such-gpu'");
    /* NULL and "" pick the listed default device; the variable the library once read is ignored */
    const char *def = NULL;
    for (size_t i = 0; i < n && i < 8; i++)
        if (info[i].is_default) def = info[i].name;
    setenv("EDGESPEC_VK_DEVICE", "no-such-gpu", 1);
    for (int empty = 0; empty < 2; empty++) {
        b = NULL;
        CHECK_OK(make(empty ? "" : NULL, 0, &b));
        CHECK(b && def && strcmp(es_backend_name(b), def) == 0);
        es_backend_free(b);
    }
    unsetenv("EDGESPEC_VK_DEVICE");
}

/* The parser's own cases (names, numbers, unknown names) are in tests/unit/test_params.c, which
 * runs in builds without Vulkan too; here its names reach the device through the params. */
static void test_flags(void) {
    es_backend *b = NULL;
    CHECK_FAILS(make(NULL, ES_VK_TEXEL_BUFFERS | ES_VK_STORAGE_BUFFERS, &b), ES_ERR_INVALID_ARGUMENT,
                "exclude each other");
    uint32_t f = 0;
    CHECK_OK(es_vk_flags_parse("fallbacks", &f));
    setenv("EDGESPEC_VK_FLAGS", "bogus", 1); /* no longer read: it neither fails nor adds flags */
    CHECK_OK(make(NULL, f, &b));
    if (b) {
        const es__vk_dev *d = &((es__vk_backend *)b->impl)->dev;
        CHECK(!d->use.subgroup && !d->use.texel && !d->use.storage8 && !d->use.storage16 && !d->use.fp16 &&
              !d->use.int_dot);
    }
    es_backend_free(b);
    es_device_info info[8];
    size_t n = 0;
    CHECK_OK(es_vulkan_devices(info, 8, &n));
    setenv("EDGESPEC_VK_FLAGS", "fallbacks", 1);
    b = NULL;
    CHECK_OK(make("0", 0, &b));
    if (b && n > 0) { /* flags 0: the device's own features, whatever the variable says */
        const es__vk_dev *d = &((es__vk_backend *)b->impl)->dev;
        CHECK(d->use.subgroup == info[0].subgroup_arith && d->use.texel == info[0].texel_buffers &&
              d->use.storage16 == info[0].storage16 && d->use.storage8 == info[0].storage8 &&
              d->use.fp16 == info[0].fp16 && d->use.int_dot == info[0].int_dot);
    }
    es_backend_free(b);
    unsetenv("EDGESPEC_VK_FLAGS");
}

static void test_memory_errors(void) {
    es_backend *b = NULL;
    CHECK_OK(make(NULL, 0, &b));
    if (!b) return;
    es__vk_dev *d = &((es__vk_backend *)b->impl)->dev;
    es__vk_buf buf;
    /* more than any heap of the device: a clear error before the driver is asked */
    uint64_t heap = 0;
    for (uint32_t i = 0; i < d->phys.mem.memoryHeapCount; i++)
        heap = ES__MAX(heap, d->phys.mem.memoryHeaps[i].size);
    CHECK_FAILS(es__vk_buf_create(d, heap + ((VkDeviceSize)1 << 20), ES__VK_MEM_DEVICE, "a test buffer", &buf),
                ES_ERR_DEVICE_MEMORY, "a test buffer needs");
    CHECK(buf.buf == VK_NULL_HANDLE && buf.mem == VK_NULL_HANDLE);
    es_backend_stats st;
    CHECK_OK(es_backend_get_stats(b, &st));
    const uint64_t before = st.device_bytes;
    CHECK_OK(es__vk_buf_create(d, 1 << 20, ES__VK_MEM_DEVICE, "a test buffer", &buf));
    CHECK_OK(es_backend_get_stats(b, &st));
    CHECK(st.device_bytes >= before + (1 << 20) && st.device_peak_bytes >= st.device_bytes);
    es__vk_buf_destroy(d, &buf);
    CHECK_OK(es_backend_get_stats(b, &st));
    CHECK(st.device_bytes == before);
    es_backend_free(b);
}

static void test_interfaces(void) {
    es_backend *b = NULL;
    CHECK_OK(make(NULL, 0, &b));
    if (!b) return;
    /* every variant's reflected interface agrees with its family's table */
    for (int i = 0; i < ES__SHADER_COUNT; i++) {
        const es__shader_info *sh = &es__shaders[i];
        const es__kernel_family *fam = es__kernel_family_find(sh->family);
        es__spirv_iface itf;
        char msg[160];
        CHECKF(fam != NULL, "shader %s: unknown family %s", sh->name, sh->family);
        CHECKF(es__spirv_reflect(sh->words, sh->size / 4, NULL, &itf, msg, sizeof msg) == 0, "%s: %s", sh->name, msg);
        if (!fam) continue;
        CHECKF(itf.push_size == fam->push_size, "%s: push constants %u bytes, host %u", sh->name, itf.push_size,
               fam->push_size);
        CHECKF(itf.spec_ids & 1u, "%s: no workgroup-size specialisation", sh->name);
        for (uint32_t k = 0; k < itf.n_bindings; k++)
            CHECKF(itf.bindings[k].binding < strlen(fam->roles), "%s: binding %u beyond the family's", sh->name,
                   itf.bindings[k].binding);
    }
    /* a module that is not SPIR-V, and a truncated one, are refused with a message */
    es__spirv_iface itf;
    char msg[160];
    const uint32_t junk[8] = {0xdeadbeef, 1, 2, 3, 4, 5, 6, 7};
    CHECK(es__spirv_reflect(junk, 8, NULL, &itf, msg, sizeof msg) != 0 && strstr(msg, "magic"));
    const es__shader_info *sh = &es__shaders[0];
    uint32_t *cut = malloc(sh->size);
    memcpy(cut, sh->words, sh->size);
    CHECK(sh->size / 4 < 0xffffu);
    cut[5] = (0xffffu << 16) | 17u; /* an instruction claiming more words than the module has */
    CHECK(es__spirv_reflect(cut, sh->size / 4, NULL, &itf, msg, sizeof msg) != 0 && strstr(msg, "past the end"));
    free(cut);
    es_backend_free(b);
}

static void test_pipeline_cache(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/vk_pipeline_cache_test.bin", getenv("ES_BUILD_ROOT") ? getenv("ES_BUILD_ROOT") : ".");
    remove(path);
    for (int round = 0; round < 2; round++) { /* written by the first backend, read by the second */
        es_backend *b = vk_backend_cached(0, path);
        if (!b) return;
        float w[64 * 32], x[32], y[64];
        for (int i = 0; i < 64 * 32; i++) w[i] = (float)(i % 7) - 3.0f;
        for (int i = 0; i < 32; i++) x[i] = 1.0f;
        CHECK_OK(es__vk_run_mul_mat(b, ES__DTYPE_F32, w, 64, 32, x, 1, 0, y, 1, NULL));
        es_backend_free(b);
        FILE *f = fopen(path, "rb");
        CHECKF(f != NULL, "pipeline cache %s was not written", path);
        if (f) fclose(f);
    }
    /* a corrupt cache file is ignored, not fed to the driver */
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("this is not a pipeline cache, but it is long enough to have a header", f);
        fclose(f);
    }
    es_backend_free(vk_backend_cached(0, path));
    remove(path);
}

int main(void) {
    test_pin_vulkan();
    test_listing();
    test_selection();
    test_flags();
    test_memory_errors();
    test_interfaces();
    test_pipeline_cache();
    VK_TEST_END();
}
