/* edgespec-mkadapter: writes a Speculative Streaming adapter GGUF (docs/formats.md) with random
 * values for a base model, for tests and benchmarks that need an adapter whose drafts are noise:
 * speculation must stay lossless with it, and its acceptance shows what untrained streams give.
 * Values are uniform with the given standard deviation; a file is a pure function of its flags
 * and the base model's shapes. Trained adapters come from tools/train. */
#include "adapter.h"
#include "edgespec.h"
#include "gguf.h"
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform on [-sqrt(3) std, sqrt(3) std): standard deviation std. */
static es_status add_tensor(es__gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, float std, uint64_t *rng) {
    float *v = malloc(sizeof(float) * (size_t)(ne0 * ne1));
    if (!v) return ES_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < ne0 * ne1; i++)
        v[i] = std * sqrtf(3.0f) * (float)((double)(rng_next(rng) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    int64_t ne[2] = {ne0, ne1};
    es_status s = es__gguf_add_tensor(w, name, ES__DTYPE_F32, 2, ne, v);
    free(v);
    return s;
}

static void usage(FILE *f) {
    fprintf(f, "usage: edgespec-mkadapter -m BASE.gguf -o OUT.ss.gguf [options]\n"
               "Writes a Speculative Streaming adapter with random values for BASE.\n"
               "  --gamma G          speculative streams (default 3)\n"
               "  --n-msa N          multi-stream-attention layers at the top (default 1)\n"
               "  --prune-rank R     rank of the tree-pruning early exit, 0 = none (default 8)\n"
               "  --prune-layer L    block whose input the early exit reads (default n_layer - n_msa)\n"
               "  --lora-rank R      stream-only LoRA on every projection of the MSA blocks, 0 = none (default 0)\n"
               "  --std X            standard deviation of the values (default 0.02)\n"
               "  --seed N           random seed (default 1)\n");
}

int main(int argc, char **argv) {
    const char *base = NULL, *out = NULL;
    long gamma = 3, n_msa = 1, prune_rank = 8, prune_layer = -1, lora_rank = 0;
    double std = 0.02;
    unsigned long long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "edgespec-mkadapter: %s needs a value\n", a);
            return 2;
        }
        i++;
        errno = 0;
        if (strcmp(a, "-m") == 0) base = v;
        else if (strcmp(a, "-o") == 0) out = v;
        else if (strcmp(a, "--gamma") == 0) gamma = strtol(v, &end, 10);
        else if (strcmp(a, "--n-msa") == 0) n_msa = strtol(v, &end, 10);
        else if (strcmp(a, "--prune-rank") == 0) prune_rank = strtol(v, &end, 10);
        else if (strcmp(a, "--prune-layer") == 0) prune_layer = strtol(v, &end, 10);
        else if (strcmp(a, "--lora-rank") == 0) lora_rank = strtol(v, &end, 10);
        else if (strcmp(a, "--std") == 0) std = strtod(v, &end);
        else if (strcmp(a, "--seed") == 0) seed = strtoull(v, &end, 10);
        else {
            fprintf(stderr, "edgespec-mkadapter: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (end && (*end || end == v)) {
            fprintf(stderr, "edgespec-mkadapter: %s: '%s' is not a number\n", a, v);
            return 2;
        }
    }
    if (!base || !out) {
        usage(stderr);
        return 2;
    }
    es_model_params mp = es_model_default_params();
    mp.vocab_only = true;
    es_model *m = NULL;
    es_status s = es_model_load(base, &mp, &m);
    if (s != ES_OK) {
        fprintf(stderr, "edgespec-mkadapter: %s\n", es_last_error());
        return 1;
    }
    const es__hparams hp = m->hp;
    es_model_free(m);
    if (gamma < 1 || gamma > ES_SPEC_MAX_DEPTH || n_msa < 1 || n_msa > hp.n_layer || prune_rank < 0 ||
        prune_rank > hp.n_embd || lora_rank < 0 || lora_rank > hp.n_embd || prune_layer > hp.n_layer || !(std >= 0)) {
        fprintf(stderr, "edgespec-mkadapter: a value is out of range for this model (n_layer %d, n_embd %d)\n",
                hp.n_layer, hp.n_embd);
        return 2;
    }
    if (prune_layer < 0) prune_layer = hp.n_layer - n_msa;
    uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 7;
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    s = w ? ES_OK : ES_ERR_OUT_OF_MEMORY;
    if (s == ES_OK) s = es__gguf_set_str(w, "general.type", "adapter");
    if (s == ES_OK) s = es__gguf_set_str(w, "general.name", "edgespec-random-ss-adapter");
    if (s == ES_OK) s = es__gguf_set_str(w, "edgespec.adapter.type", "speculative_streaming");
    if (s == ES_OK) s = es__gguf_set_u32(w, "edgespec.ss.n_streams", (uint32_t)gamma);
    if (s == ES_OK) s = es__gguf_set_u32(w, "edgespec.ss.n_msa_layers", (uint32_t)n_msa);
    if (s == ES_OK && prune_rank > 0) s = es__gguf_set_u32(w, "edgespec.ss.prune_rank", (uint32_t)prune_rank);
    if (s == ES_OK && prune_rank > 0) s = es__gguf_set_u32(w, "edgespec.ss.prune_layer", (uint32_t)prune_layer);
    if (s == ES_OK && lora_rank > 0) s = es__gguf_set_u32(w, "edgespec.ss.lora_rank", (uint32_t)lora_rank);
    if (s == ES_OK) s = add_tensor(w, "ss.stream_embd.weight", hp.n_embd, gamma, (float)std, &rng);
    if (s == ES_OK && prune_rank > 0) s = add_tensor(w, "ss.prune_down.weight", hp.n_embd, prune_rank, (float)std, &rng);
    if (s == ES_OK && prune_rank > 0) s = add_tensor(w, "ss.prune_up.weight", prune_rank, hp.n_embd, (float)std, &rng);
    const int32_t q = hp.n_head * hp.head_dim, kv = hp.n_head_kv * hp.head_dim;
    const int32_t dims[ES__SS_LORA_COUNT][2] = {{hp.n_embd, q},  {hp.n_embd, kv},      {hp.n_embd, kv},
                                               {q, hp.n_embd},  {hp.n_embd, hp.n_ff}, {hp.n_embd, hp.n_ff},
                                               {hp.n_ff, hp.n_embd}};
    for (int32_t il = hp.n_layer - (int32_t)n_msa; il < hp.n_layer && lora_rank > 0 && s == ES_OK; il++) {
        for (int t = 0; t < ES__SS_LORA_COUNT && s == ES_OK; t++) {
            char name[96];
            es__ss_lora_name(name, sizeof name, il, (es__ss_lora_target)t, 'a');
            s = add_tensor(w, name, dims[t][0], lora_rank, (float)std, &rng);
            es__ss_lora_name(name, sizeof name, il, (es__ss_lora_target)t, 'b');
            if (s == ES_OK) s = add_tensor(w, name, lora_rank, dims[t][1], (float)std, &rng);
        }
    }
    es__err err = {ES_OK, ""};
    if (s == ES_OK) s = es__gguf_write_file(w, out, &err);
    es__gguf_writer_free(w);
    if (s != ES_OK) {
        fprintf(stderr, "edgespec-mkadapter: cannot write '%s': %s (%s)\n", out, err.msg[0] ? err.msg : es_last_error(),
                es_status_str(s));
        return 1;
    }
    return 0;
}
