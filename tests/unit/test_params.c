/* test_params: the public params structs and their helpers: es_vk_flags_parse (names, numbers,
 * separators, unknown names; a build without Vulkan parses too). */
#include "edgespec.h"
#include "../test.h"

static void test_vk_flags_parse(void) {
    uint32_t f = 0;
    CHECK_OK(es_vk_flags_parse("no-subgroup, storage-buffers", &f));
    CHECK(f == (ES_VK_NO_SUBGROUP | ES_VK_STORAGE_BUFFERS));
    CHECK_OK(es_vk_flags_parse("fallbacks", &f));
    CHECK(f == ES_VK_FALLBACKS);
    CHECK_OK(es_vk_flags_parse("0x10", &f));
    CHECK(f == ES_VK_NO_INT_DOT);
    CHECK_OK(es_vk_flags_parse("no-fp16 1,,", &f));
    CHECK(f == (ES_VK_NO_FP16 | ES_VK_NO_STORAGE16));
    f = 7;
    CHECK_OK(es_vk_flags_parse(NULL, &f));
    CHECK(f == 0);
    f = 7;
    CHECK_OK(es_vk_flags_parse("", &f));
    CHECK(f == 0);
    /* an unknown name lists the known ones and leaves the output as it was */
    f = 7;
    CHECK_FAILS(es_vk_flags_parse("no-subgroup,bogus", &f), ES_ERR_INVALID_ARGUMENT, "unknown flag 'bogus'");
    CHECK(strstr(es_last_error(), "no-storage16, no-storage8, no-fp16, no-subgroup, no-int-dot, storage-buffers, "
                                  "texel-buffers, fallbacks") != NULL);
    CHECK(f == 7);
    CHECK_FAILS(es_vk_flags_parse("0x1g", &f), ES_ERR_INVALID_ARGUMENT, "unknown flag '0x1g'");
    CHECK_FAILS(es_vk_flags_parse("fallbacks", NULL), ES_ERR_INVALID_ARGUMENT, "flags is NULL");
}

int main(void) {
    test_vk_flags_parse();
    TEST_MAIN_END();
}
