/* test_vk_mul_mat_batch: the small-batch matrix tiles. A call of up to 32 rows is one column of
 * workgroups that reads each weight from memory once, in passes over its rows (shaders/
 * mul_mat.comp, lib/vulkan/ops.c), so the kernel's shape changes with the batch size; what must
 * not change is any row's result. For every weight type at the batch sizes that reach each kernel
 * shape, and for f32 and Q8_0 at every n = 2..32 (fresh random weights and activations per
 * case): each row of the batch is bit-identical to the same row multiplied alone (batch
 * invariance, DESIGN.md), and the batch agrees with the CPU backend's es__cpu_matmul within the
 * f32 accumulation bound of test_vk_mul_mat (2e-6 of sum |w x|, twice that against the CPU; the
 * K-quants with a min are left to test_vk_mul_mat, whose bound knows their terms, and only
 * checked for invariance here). Rows long enough for teams and short ones walked solo; the SwiGLU
 * epilogue's row pairs too. Every feature configuration, and this device with other devices'
 * tiles, so that their shapes run here too. */
#include "backend_vk.h"
#include "cpu/opsi.h"
#include "oprun.h"
#include "vk_test.h"

#define BOUND 2e-6
#define NMAX 32

/* W (rows x k) of type times NMAX rows of x: every batch n checked against the rows alone and the CPU. */
static void check_type(es_backend *b, test_rng *r, int type, uint32_t rows, uint32_t k, uint32_t epi, bool all_n,
                       const char *cfg) {
    const bool glu = epi == ES__EPI_SWIGLU;
    const uint32_t cols = glu ? rows / 2 : rows;
    float *deq = malloc(sizeof(float) * rows * k), *x = malloc(sizeof(float) * k * NMAX);
    void *w = make_weights(r, type, rows, k, deq);
    for (size_t i = 0; i < (size_t)k * NMAX; i++) x[i] = test_rng_uniform(r);
    float *alone = malloc(sizeof(float) * cols * NMAX), *y = malloc(sizeof(float) * cols * NMAX);
    float *cpu = malloc(sizeof(float) * rows * NMAX);
    for (uint32_t t = 0; t < NMAX; t++)
        if (all_n || t < 3 || t == 4 || t == 8 || t == 16 || t == NMAX - 1) /* the rows the batches below check */
            CHECK_OK(es__vk_run_mul_mat(b, (es__dtype)type, w, rows, k, x + (size_t)t * k, 1, epi,
                                        alone + (size_t)t * cols, 1, NULL));
    CHECK_OK(es__cpu_matmul(NULL, (es__dtype)type, w, k, rows, x, NMAX, cpu, NULL));
    const bool vs_cpu = !glu && type != T_Q4_K && type != T_Q5_K;
    for (uint32_t n = 2; n <= NMAX; n++) {
        if (!all_n && n != 2 && n != 3 && n != 5 && n != 9 && n != 17 && n != NMAX) continue;
        for (size_t i = 0; i < (size_t)cols * n; i++) y[i] = NAN;
        CHECK_OK(es__vk_run_mul_mat(b, (es__dtype)type, w, rows, k, x, n, epi, y, 1, NULL));
        for (uint32_t t = 0; t < n; t++)
            if (all_n || t < 3 || t == 4 || t == 8 || t == 16 || t == NMAX - 1)
                CHECKF(memcmp(y + (size_t)t * cols, alone + (size_t)t * cols, sizeof(float) * cols) == 0,
                       "[%s] type %d rows %u k %u epi %u: row %u of a batch of %u differs from the same row alone",
                       cfg, type, rows, k, epi, t, n);
        double worst = 0;
        for (uint32_t t = 0; vs_cpu && t < n; t++)
            for (uint32_t c = 0; c < cols; c++) {
                double scale = 0;
                for (uint32_t j = 0; j < k; j++)
                    scale += fabs((double)deq[(size_t)c * k + j] * x[(size_t)t * k + j]);
                worst = fmax(worst, norm_err(y[(size_t)t * cols + c], cpu[(size_t)t * rows + c], scale));
            }
        CHECKF(worst <= 2 * BOUND, "[%s] type %d rows %u k %u n %u: normalised difference from the CPU %.3g > %.1g",
               cfg, type, rows, k, n, worst, 2 * BOUND);
    }
    free(deq), free(x), free(w), free(alone), free(y), free(cpu);
}

/* Every type with the batches that reach each kernel shape (n = 2, 3, 5, 9, 17, 32); with full,
 * f32 and Q8_0 (a pass of 8 tokens and one of 4) with every n = 2..32, and the epilogue's row
 * pairs. Each new pipeline costs lavapipe a compile, so the rest stays lean. */
static void check_backend(es_backend *b, test_rng *r, bool full, const char *cfg) {
    static const int types[] = {T_F32,  T_F16,  T_BF16, T_Q8_0,   T_Q4_0, T_Q4_K, T_Q5_K,
                                T_Q6_K, T_Q2_K, T_Q3_K, T_IQ4_NL, T_IQ4_XS, T_Q4_1, T_Q5_0, T_Q5_1};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int t = types[ti];
        const bool main_type = t == T_F32 || t == T_Q8_0;
        if (!full && !main_type) continue;
        check_type(b, r, t, 70, 1024, ES__EPI_STORE, full && main_type, cfg); /* teams of lanes per row */
        if (main_type) check_type(b, r, t, 37, t == T_Q8_0 ? 96 : 45, ES__EPI_STORE, false, cfg); /* solo rows */
    }
    if (!full) return;
    check_type(b, r, T_F32, 2 * 19, 512, ES__EPI_SWIGLU, false, cfg);
    check_type(b, r, T_Q8_0, 2 * 19, 512, ES__EPI_SWIGLU, false, cfg);
}

int main(void) {
    test_rng r = {15};
    for (int c = 0; c < VK_N_CONFIGS; c++) {
        es_backend *b = vk_backend(vk_configs[c].flags);
        if (!b) continue;
        check_backend(b, &r, c == 0, vk_configs[c].name);
        es_backend_free(b);
    }
    /* other devices' tiles (policy.h: mm_tile_tokens): a GPU's, one workgroup column for up to
     * 32 rows in passes, and tiles of 8, several columns each in passes, with the shared-memory
     * reduction (pipelines are made per shape, so setting the policy of a fresh backend is enough) */
    static const struct {
        uint32_t tile, flags;
        const char *name;
    } tiles[] = {{ES__VK_TILE_TOK, 0, "tile-32"}, {8, ES_VK_NO_SUBGROUP | ES_VK_TEXEL_BUFFERS, "tile-8-no-subgroup"}};
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        es_backend *b = vk_backend(tiles[i].flags);
        if (!b) continue;
        es__vk_dev_of(b)->policy.mm_tile_tokens = tiles[i].tile;
        check_backend(b, &r, i == 0, tiles[i].name);
        es_backend_free(b);
    }
    VK_TEST_END();
}
