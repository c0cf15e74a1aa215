/* test_spec_arch.c: speculative decoding is lossless on the architectures besides llama
 * (lib/core/arch.h). Random-weight GGUF files of one family, as mkmodel writes them: a target,
 * and as drafters (Leviathan et al.) the target itself, a file with the same weights and a window
 * of 2 (it agrees with the target often, not always) and a smaller file (one narrower layer, the
 * same vocabulary); then Speculative Streaming with a random adapter on the target (LoRA, with and
 * without pruning). gemma2 (post norms, soft-capping, its alternating sliding window, short enough
 * that drafts and verification trees cross it), qwen2 (biases) with a mistral-style window on every
 * layer, qwen3 (per-head Q and K norms, heads wider than n_embd / n_head), gemma3 (its sliding
 * layers' own RoPE, head norms, post norms, a global layer after five sliding ones), smollm3 (a
 * fourth layer without RoPE), granite (its four multipliers), phi3 (fused tensors) and gemma (GeGLU, embedding scale); greedy and seeded sampling; the
 * emitted tokens equal es_generate's token for token, and a drafter that is the target has every
 * draft accepted. argv[1]: "cpu" (default) or "vulkan" (on lavapipe, the smaller drafter and the
 * streams greedy only). */
#include "arch.h"
#include "mem_adapter.h"
#include "mkmodel.h"
#include "spec_run.h"

#include <string.h>
#include <unistd.h>

#define N_GEN 24

typedef struct family {
    const char *arch;
    int32_t window;
    float attn_cap, final_cap;
    bool tied; /* a tied head on a std-1 embedding makes a tiny model repeat its input */
    int32_t head_dim; /* the target's, when not n_embd / n_head (0)                       */
    int32_t n_layer;  /* the target's, when not 3 (0): past a pattern's period            */
} family;

/* small: the drafter of another size (one layer of half the width, another seed). */
static es_model *load(const family *f, int32_t window, bool small, const char *path) {
    es_mk_params p = es_mk_default_params();
    p.arch = f->arch;
    p.n_vocab = 280;
    p.n_embd = small ? 32 : 64;
    p.n_layer = small ? 1 : f->n_layer ? f->n_layer : 3;
    p.n_head = small ? 2 : 4;
    p.n_head_kv = small ? 1 : 2;
    p.n_ff = small ? 48 : 96;
    p.head_dim = small ? 0 : f->head_dim;
    p.rope = es__arch_find(f->arch)->rope;
    p.tied = f->tied;
    p.sliding_window = window;
    p.attn_softcap = f->attn_cap;
    p.final_softcap = f->final_cap;
    p.seed = small ? 22 : 21;
    es__err err = {0};
    CHECKF(es_mk_write(&p, path, &err) == ES_OK, "mkmodel %s: %s", f->arch, err.msg);
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, NULL, &m));
    remove(path);
    return m;
}

/* Speculative Streaming with the adapter attached to target: two settings (the second prunes),
 * each mode, against plain decoding. */
static void streams(es_model *target, const char *arch, bool vulkan, const int32_t *prompt,
                    const es_sampler_params *const *modes) {
    static const struct {
        int32_t gamma, k, max_nodes;
        float prune;
    } cfgs[] = {{3, 8, 40, 0.0f}, {2, 3, 21, 0.004f}};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++)
        for (int mi = 0; mi < (vulkan ? 1 : 2); mi++) { /* Vulkan on lavapipe: greedy only */
            const int32_t np = 7 + 5 * mi;
            int32_t want[N_GEN], got[N_GEN];
            const int32_t n_want = plain(target, prompt, np, modes[mi], N_GEN, 128, 32, want);
            es_context *c = new_ctx(target, 128, 32);
            es_spec_params p = es_spec_default_params();
            p.strategy = ES_SPEC_STREAM;
            p.n_streams = cfgs[ci].gamma;
            p.top_k = cfgs[ci].k;
            p.max_nodes = cfgs[ci].max_nodes;
            p.prune_threshold = cfgs[ci].prune;
            p.sampling = *modes[mi];
            p.ignore_eog = true;
            p.fixed_tree = true; /* full trees every step: random streams are seldom right */
            es_spec_stats st;
            const int32_t n_got = run_spec(c, &p, prompt, np, N_GEN, got, &st);
            int32_t diff = -1;
            for (int32_t i = 0; i < n_want && diff < 0; i++)
                if (i >= n_got || got[i] != want[i]) diff = i;
            CHECKF(n_got == n_want && diff < 0, "%s %s: streams, setting %d, mode %d: token %d differs from plain decoding",
                   vulkan ? "vulkan" : "cpu", arch, (int)ci, mi, diff);
            printf("%s streams setting %d mode %d: %.2f tokens per target call, %.1f nodes per tree, %lld pruned\n", arch,
                   (int)ci, mi, st.tokens_per_call, st.mean_tree_size, (long long)st.n_pruned);
            es_context_free(c);
        }
}

int main(int argc, char **argv) {
    (void)mem_model_create; /* spec_run.h's in-memory models: this test reads files */
    (void)mem_model_free;
    bool vulkan = false;
    backend = test_backend_from_args(argc, argv, 1, &vulkan);
    if (!backend) TEST_MAIN_END();
    static const family fams[] = {{"gemma2", 6, 2.0f, 3.0f, false, 0, 0},
                                  {"qwen2", 5, 0, 0, false, 0, 0},
                                  {"qwen3", 0, 0, 0, false, 32, 0},
                                  {"gemma3", 4, 0, 0, false, 0, 7},
                                  {"smollm3", 0, 0, 0, false, 0, 4},
                                  {"granite", 0, 0, 0, false, 0, 0},
                                  {"phi3", 0, 0, 0, false, 0, 0},
                                  {"gemma", 0, 0, 0, false, 0, 0}};
    es_sampler_params greedy = es_sampler_default_params(), sampled = es_sampler_default_params();
    greedy.temperature = 0.0f;
    sampled.temperature = 0.9f;
    sampled.top_k = 20;
    sampled.seed = 3;
    const es_sampler_params *modes[2] = {&greedy, &sampled};
    test_rng rng = {9};
    int32_t prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = (int32_t)(test_rng_u64(&rng) % 280);
    char path[3][96];
    for (size_t fi = 0; fi < sizeof fams / sizeof fams[0]; fi++) {
        for (int k = 0; k < 3; k++) snprintf(path[k], sizeof path[k], "/tmp/es-spec-arch-%d-%d.gguf", (int)getpid(), k);
        es_model *target = load(&fams[fi], fams[fi].window, false, path[0]), *near = load(&fams[fi], 2, false, path[1]);
        es_model *small = load(&fams[fi], fams[fi].window, true, path[2]);
        const es_model *drafters[3] = {target, near, small};
        for (int di = 0; target && near && small && di < 3; di++)
            for (int mi = 0; mi < (vulkan && di == 2 ? 1 : 2); mi++) {
                const int32_t la = 3 + di % 2, np = 7 + 5 * mi;
                int32_t want[N_GEN], got[N_GEN];
                const int32_t n_want = plain(target, prompt, np, modes[mi], N_GEN, 128, 16, want);
                int distinct = 0; /* a model that repeats one token would make the check weak */
                for (int i = 0; i < n_want; i++) {
                    int j = 0;
                    while (j < i && want[j] != want[i]) j++;
                    distinct += j == i;
                }
                CHECKF(distinct >= 4, "%s mode %d: plain decoding has only %d distinct tokens", fams[fi].arch, mi,
                       distinct);
                es_context *c = new_ctx(target, 128, 16), *d = new_ctx(drafters[di], 128, 16);
                es_spec_params p = es_spec_default_params();
                p.strategy = ES_SPEC_DRAFT;
                p.draft_ctx = d;
                p.lookahead = la;
                p.sampling = *modes[mi];
                p.ignore_eog = true;
                p.fixed_tree = true;
                es_spec_stats st;
                const int32_t n_got = run_spec(c, &p, prompt, np, N_GEN, got, &st);
                int32_t diff = -1;
                for (int32_t i = 0; i < n_want && diff < 0; i++)
                    if (i >= n_got || got[i] != want[i]) diff = i;
                CHECKF(n_got == n_want && diff < 0, "%s %s: drafter %d, mode %d: token %d differs from plain decoding",
                       vulkan ? "vulkan" : "cpu", fams[fi].arch, di, mi, diff);
                if (di == 0)
                    for (int k = 0; k < la; k++) CHECK(st.accepted[k] == st.drafted[k]);
                CHECK(st.n_draft_calls > 0);
                printf("%s drafter %d mode %d: %.2f tokens per target call\n", fams[fi].arch, di, mi,
                       st.tokens_per_call);
                es_context_free(c);
                es_context_free(d);
            }
        if (target && near && small) {
            mem_adapter_cfg ac = {3, 2, 1, 4, 2, 0.3f, 5 + fi};
            mem_adapter_attach(target, &ac);
            streams(target, fams[fi].arch, vulkan, prompt, modes);
        }
        es_model_free(target);
        es_model_free(near);
        es_model_free(small);
    }
    test_backend_end(backend);
    TEST_MAIN_END();
}
