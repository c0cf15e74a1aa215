/* abi_layout.c: prints what a program built against edgespec.h and linked with the shared library
 * sees of its ABI: the library's version string, the header's version macros, and the size of
 * every public struct (with where its reserved words start), for abi_test.py to compare with
 * tests/abi/edgespec.abi. Public API only. */
#include "edgespec.h"

#include <stddef.h>
#include <stdio.h>

#define GROWS(T) printf("size %s %zu %zu\n", #T, sizeof(T), offsetof(T, reserved))
#define FROZEN(T) printf("size %s %zu -\n", #T, sizeof(T))

int main(void) {
    printf("version %s\n", es_version());
    printf("header %d.%d.%d %s\n", ES_VERSION_MAJOR, ES_VERSION_MINOR, ES_VERSION_PATCH, ES_VERSION_STRING);
    printf("pointer %zu\n", sizeof(void *));
    GROWS(es_model_params);
    GROWS(es_model_info);
    GROWS(es_tensor_info);
    GROWS(es_vk_tuning);
    GROWS(es_backend_params);
    GROWS(es_backend_stats);
    GROWS(es_profile_entry);
    GROWS(es_device_info);
    GROWS(es_context_params);
    GROWS(es_sampler_params);
    GROWS(es_generate_params);
    GROWS(es_generate_stats);
    GROWS(es_dsi_params);
    GROWS(es_spec_params);
    GROWS(es_dsi_stats);
    GROWS(es_spec_stats);
    GROWS(es_spec_costs);
    GROWS(es_quantize_params);
    GROWS(es_alspec_params);
    GROWS(es_alspec_stats);
    FROZEN(es_allocator);
    FROZEN(es_chat_message);
    FROZEN(es_batch);
    return 0;
}
