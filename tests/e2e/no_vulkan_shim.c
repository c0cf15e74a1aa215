/* no_vulkan_shim.c: an LD_PRELOAD library that makes this process a system without a Vulkan
 * loader: dlopen of any libvulkan fails as a missing file does (the dynamic linker's own
 * message, from a path that cannot exist), and every other dlopen goes through unchanged. Used by
 * noloader_test.py to run the CPU paths and the Vulkan error path with the loader unavailable. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

void *dlopen(const char *file, int mode) {
    void *(*next)(const char *, int);
    void *sym = dlsym(RTLD_NEXT, "dlopen");
    memcpy(&next, &sym, sizeof next);
    if (file && strstr(file, "libvulkan")) {
        const char *base = strrchr(file, '/');
        char missing[512];
        snprintf(missing, sizeof missing, "/nonexistent-no-vulkan-loader/%s", base ? base + 1 : file);
        return next(missing, mode);
    }
    return next(file, mode);
}
