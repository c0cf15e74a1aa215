/* minimal.c: embedding edgespec in an application, start to finish: load a model, create a
 * context on the CPU backend, tokenize a prompt, generate with a streaming callback, clean up.
 * Build against an installed edgespec:  cc minimal.c $(pkg-config --cflags --libs edgespec)
 * Run:  ./minimal MODEL.gguf "Once upon a time" [N_TOKENS] */
#include <edgespec.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool print_piece(int32_t token, const char *piece, size_t len, void *user) {
    (void)token;
    (void)user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return true; /* false would stop generation here */
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_TOKENS]\n", argv[0]);
        return 2;
    }
    const int n_predict = argc > 3 ? atoi(argv[3]) : 32;

    /* The model is immutable once loaded and may be shared by many contexts and threads. */
    es_model *model = NULL;
    es_status s = es_model_load(argv[1], NULL, &model);
    if (s != ES_OK) {
        fprintf(stderr, "cannot load %s: %s (%s)\n", argv[1], es_last_error(), es_status_str(s));
        return 1;
    }

    /* NULL params: a private CPU backend with default threads and the model's context size. */
    es_context *ctx = NULL;
    s = es_context_create(model, NULL, &ctx);
    if (s != ES_OK) {
        fprintf(stderr, "cannot create a context: %s\n", es_last_error());
        es_model_free(model);
        return 1;
    }

    /* Tokenize into a buffer; when it is too small the call says how many tokens are needed. */
    const char *prompt = argv[2];
    size_t cap = strlen(prompt) + 8, n_prompt = 0;
    int32_t *tokens = malloc(sizeof *tokens * cap);
    s = tokens ? es_tokenize(model, prompt, strlen(prompt), true, false, tokens, cap, &n_prompt)
               : ES_ERR_OUT_OF_MEMORY;
    if (s == ES_ERR_BUFFER_TOO_SMALL) {
        int32_t *grown = realloc(tokens, sizeof *tokens * n_prompt);
        s = grown ? es_tokenize(model, prompt, strlen(prompt), true, false, grown, n_prompt, &n_prompt)
                  : ES_ERR_OUT_OF_MEMORY;
        if (grown) tokens = grown;
    }

    if (s == ES_OK) {
        es_generate_params gp = es_generate_default_params();
        gp.n_predict = n_predict; /* gp.sampling is zeroed: greedy, the same text every run */
        gp.on_token = print_piece;
        es_generate_stats stats;
        s = es_generate(ctx, tokens, n_prompt, &gp, NULL, 0, &stats);
        if (s == ES_OK)
            fprintf(stderr, "\n%d tokens in %.1f ms\n", stats.n_generated, stats.decode_ms);
    }
    if (s != ES_OK) fprintf(stderr, "error: %s (%s)\n", es_last_error(), es_status_str(s));

    free(tokens);
    es_context_free(ctx); /* contexts before the model they use */
    es_model_free(model);
    return s == ES_OK ? 0 : 1;
}
