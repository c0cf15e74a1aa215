/* test_chat.c: chat templates. Each family renders a system / user / assistant / user
 * conversation, with and without the assistant's opening, exactly as its published format writes
 * it (the expected strings below are written out by hand from those formats, not produced by the
 * code under test); a family without a system role folds the system message into the first user
 * turn. Detection: the shipped llama vocabulary (no template) is plain; the same file with a
 * tokenizer.chat_template of each family (short templates with each family's markers, written
 * into a copy of the file) is recognised; an unknown template is ES_ERR_UNSUPPORTED naming its
 * start; names map both ways; bad messages and small buffers fail cleanly. */
#include "model.h"

#include "../test.h"

#include <stdio.h>
#include <string.h>

static const es_chat_message conv[] = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Who?"}};

static void check_render(es_chat_template t, bool open, const char *want) {
    char buf[1024];
    size_t len = 0;
    CHECK_OK(es_chat_render(t, conv, 4, open, buf, sizeof buf, &len));
    CHECKF(len == strlen(want) && strcmp(buf, want) == 0, "%s%s:\n got  \"%s\"\n want \"%s\"",
           es_chat_template_name(t), open ? " (open)" : "", buf, want);
}

static void test_render(void) {
    check_render(ES_CHAT_PLAIN, true, "Be brief.\nHi\nHello.\nWho?\n");
    check_render(ES_CHAT_CHATML, true,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                 "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render(ES_CHAT_CHATML, false,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                 "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWho?<|im_end|>\n");
    check_render(ES_CHAT_LLAMA3, true,
                 "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nWho?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render(ES_CHAT_PHI3, true,
                 "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n"
                 "<|user|>\nWho?<|end|>\n<|assistant|>\n");
    check_render(ES_CHAT_GEMMA, true,
                 "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                 "<start_of_turn>user\nWho?<end_of_turn>\n<start_of_turn>model\n");
    check_render(ES_CHAT_LLAMA2, true,
                 "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Who? [/INST]");
    check_render(ES_CHAT_MISTRAL, true, "<s>[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Who? [/INST]");
}

static void test_names_and_errors(void) {
    for (int t = ES_CHAT_PLAIN; t <= ES_CHAT_MISTRAL; t++) {
        es_chat_template back = (es_chat_template)-1;
        CHECK_OK(es_chat_template_from_name(es_chat_template_name((es_chat_template)t), &back));
        CHECK(back == (es_chat_template)t);
    }
    es_chat_template t;
    CHECK_FAILS(es_chat_template_from_name("jinja", &t), ES_ERR_INVALID_ARGUMENT, "unknown chat template 'jinja'");
    CHECK(strcmp(es_chat_end_of_turn(ES_CHAT_CHATML), "<|im_end|>") == 0);
    CHECK(strcmp(es_chat_end_of_turn(ES_CHAT_PLAIN), "") == 0);
    char buf[16];
    size_t len = 0;
    CHECK_FAILS(es_chat_render(ES_CHAT_CHATML, conv, 4, true, buf, sizeof buf, &len), ES_ERR_BUFFER_TOO_SMALL,
                "bytes needed");
    size_t need = 0;
    CHECK_FAILS(es_chat_render(ES_CHAT_CHATML, conv, 4, true, NULL, 0, &need), ES_ERR_BUFFER_TOO_SMALL, "needed");
    CHECK(need == len && need > sizeof buf);
    const es_chat_message bad[] = {{"robot", "x"}};
    CHECK_FAILS(es_chat_render(ES_CHAT_PLAIN, bad, 1, true, buf, sizeof buf, &len), ES_ERR_INVALID_ARGUMENT,
                "role 'robot'");
    const es_chat_message none[] = {{"user", NULL}};
    CHECK_FAILS(es_chat_render(ES_CHAT_PLAIN, none, 1, true, buf, sizeof buf, &len), ES_ERR_INVALID_ARGUMENT,
                "no content");
    CHECK_FAILS(es_chat_render((es_chat_template)99, conv, 1, true, buf, sizeof buf, &len), ES_ERR_INVALID_ARGUMENT,
                "unknown template 99");
}

/* The vocabulary file with tokenizer.chat_template = tmpl, loaded vocab-only. */
static es_model *with_template(const es_model *base, const char *tmpl, const char *path) {
    es__gguf_writer *w = es__gguf_writer_create(NULL);
    for (uint64_t i = 0; i < base->gguf->n_kv; i++) CHECK_OK(es__gguf_copy_kv(w, &base->gguf->kv[i]));
    CHECK_OK(es__gguf_set_str(w, "tokenizer.chat_template", tmpl));
    es__err err;
    CHECK_OK(es__gguf_write_file(w, path, &err));
    es__gguf_writer_free(w);
    es_model_params mp = es_model_default_params();
    mp.vocab_only = true;
    es_model *m = NULL;
    CHECK_OK(es_model_load(path, &mp, &m));
    return m;
}

static void test_detect(void) {
    char path[1024], tmp[1024];
    const char *shared = getenv("ES_SHARED_DIR");
    snprintf(path, sizeof path, "%s/vocab-tests/ggml-vocab-llama-spm.gguf", shared ? shared : "../shared");
    snprintf(tmp, sizeof tmp, "%s/es_test_chat.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    es_model_params mp = es_model_default_params();
    mp.vocab_only = true;
    es_model *base = NULL;
    CHECK_OK(es_model_load(path, &mp, &base));
    if (!base) return;
    es_chat_template t = (es_chat_template)-1;
    CHECK_OK(es_chat_template_detect(base, &t));
    CHECK(t == ES_CHAT_PLAIN);
    static const struct {
        const char *tmpl;
        es_chat_template want;
    } cases[] = {
        {"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>'}}{% endfor %}",
         ES_CHAT_CHATML},
        {"{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{{ m['content'] "
         "}}<|eot_id|>{% endfor %}",
         ES_CHAT_LLAMA3},
        {"{% for m in messages %}{{'<|' + m['role'] + '|>' + '\\n' + m['content'] + '<|end|>'}}{% endfor %}"
         "{{ '<|user|>' if false }}",
         ES_CHAT_PHI3},
        {"{% for m in messages %}<start_of_turn>{{ m['role'] }}\\n{{ m['content'] }}<end_of_turn>{% endfor %}",
         ES_CHAT_GEMMA},
        {"{% if system %}<<SYS>>\\n{{ system }}\\n<</SYS>>{% endif %}[INST] {{ content }} [/INST]", ES_CHAT_LLAMA2},
        {"{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}", ES_CHAT_MISTRAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        es_model *m = with_template(base, cases[i].tmpl, tmp);
        t = (es_chat_template)-1;
        CHECK_OK(m ? es_chat_template_detect(m, &t) : ES_ERR_IO);
        CHECKF(t == cases[i].want, "template %zu: detected %s, want %s", i, es_chat_template_name(t),
               es_chat_template_name(cases[i].want));
        es_model_free(m);
    }
    es_model *m = with_template(base, "{{ messages | tojson }}", tmp);
    CHECK_FAILS(m ? es_chat_template_detect(m, &t) : ES_ERR_IO, ES_ERR_UNSUPPORTED, "starting \"{{ messages | tojson }}\"");
    es_model_free(m);
    remove(tmp);
    es_model_free(base);
}

int main(void) {
    test_render();
    test_names_and_errors();
    test_detect();
    TEST_MAIN_END();
}
