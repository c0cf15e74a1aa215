/* edgespec_jni.c: the JNI bridge of examples/android: the calls of org.edgespec.EdgeSpec
 * (app/src/main/java/org/edgespec/EdgeSpec.java) on top of the public C API. One handle holds a
 * model (with its Speculative Streaming adapter when given), one context on a CPU backend, and
 * the speculation object while speculative decoding is on. A handle is used from one thread at a
 * time (the Java class synchronises); errors come back as exceptions carrying es_last_error().
 * Token pieces go to Java as bytes: a piece may end inside a multi-byte character, which a Java
 * String cannot hold, so the Java side decodes the accumulated bytes. */
#include <edgespec.h>
#include <jni.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What `javac -h` would generate for org.edgespec.EdgeSpec's native methods. */
JNIEXPORT jlong JNICALL Java_org_edgespec_EdgeSpec_nativeLoad(JNIEnv *env, jclass cls, jstring model_path,
                                                              jstring adapter_path, jint n_threads, jint n_ctx);
JNIEXPORT jintArray JNICALL Java_org_edgespec_EdgeSpec_nativeGenerate(JNIEnv *env, jclass cls, jlong ptr,
                                                                      jbyteArray prompt_utf8, jint n_predict,
                                                                      jboolean speculative, jobject callback);
JNIEXPORT void JNICALL Java_org_edgespec_EdgeSpec_nativeFree(JNIEnv *env, jclass cls, jlong ptr);

typedef struct handle {
    es_model *model;
    es_backend *backend;
    es_context *ctx;
    es_spec *spec; /* while speculative decoding is in use; it drives ctx, so plain calls free it */
    bool has_adapter;
} handle;

static void throw_error(JNIEnv *env, const char *what, es_status s) {
    char msg[1024];
    const char *detail = es_last_error();
    snprintf(msg, sizeof msg, "%s: %s (%s)", what, detail && *detail ? detail : "no detail", es_status_str(s));
    jclass cls = (*env)->FindClass(env, "java/lang/IllegalStateException");
    if (cls) (*env)->ThrowNew(env, cls, msg);
}

static void free_handle(handle *h) {
    if (!h) return;
    es_spec_free(h->spec); /* before the context it drives, contexts before backend and model */
    es_context_free(h->ctx);
    es_backend_free(h->backend);
    es_model_free(h->model);
    free(h);
}

JNIEXPORT jlong JNICALL Java_org_edgespec_EdgeSpec_nativeLoad(JNIEnv *env, jclass cls, jstring model_path,
                                                              jstring adapter_path, jint n_threads, jint n_ctx) {
    (void)cls;
    handle *h = calloc(1, sizeof *h);
    if (!h) {
        throw_error(env, "out of memory", ES_ERR_OUT_OF_MEMORY);
        return 0;
    }
    const char *what = "loading the model";
    const char *path = (*env)->GetStringUTFChars(env, model_path, NULL);
    if (!path) goto fail_pending; /* OutOfMemoryError pending */
    es_status s = es_model_load(path, NULL, &h->model);
    (*env)->ReleaseStringUTFChars(env, model_path, path);
    if (s != ES_OK) goto fail;
    if (adapter_path) {
        what = "loading the adapter";
        const char *ap = (*env)->GetStringUTFChars(env, adapter_path, NULL);
        if (!ap) goto fail_pending;
        s = es_model_load_adapter(h->model, ap);
        (*env)->ReleaseStringUTFChars(env, adapter_path, ap);
        if (s != ES_OK) goto fail;
        h->has_adapter = true;
    }
    what = "creating the CPU backend";
    es_backend_params bp = es_backend_default_params();
    bp.type = ES_BACKEND_CPU;
    bp.n_threads = n_threads; /* 0 = every online core; phones often do better with the big ones only */
    if ((s = es_backend_create(&bp, &h->backend)) != ES_OK) goto fail;
    what = "creating the context";
    es_context_params cp = es_context_default_params();
    cp.n_ctx = n_ctx;
    cp.backend = h->backend;
    if ((s = es_context_create(h->model, &cp, &h->ctx)) != ES_OK) goto fail;
    return (jlong)(intptr_t)h;
fail:
    throw_error(env, what, s);
fail_pending:
    free_handle(h);
    return 0;
}

/* on_token's state: the Java callback and where to report that it threw. */
typedef struct stream {
    JNIEnv *env;
    jobject callback;
    jmethodID on_token;
} stream;

static bool on_token(int32_t token, const char *piece, size_t len, void *user) {
    stream *st = user;
    JNIEnv *env = st->env;
    jbyteArray bytes = (*env)->NewByteArray(env, (jsize)len);
    if (!bytes) return false;
    (*env)->SetByteArrayRegion(env, bytes, 0, (jsize)len, (const jbyte *)piece);
    jboolean go = (*env)->CallBooleanMethod(env, st->callback, st->on_token, (jint)token, bytes);
    (*env)->DeleteLocalRef(env, bytes);
    return !(*env)->ExceptionCheck(env) && go; /* a Java exception stops generation and propagates */
}

/* Generates up to n_predict tokens after prompt, greedy, from a fresh sequence; speculative
 * (Speculative Streaming with the adapter) emits exactly the same tokens in fewer forward calls.
 * Returns {n_generated, n_forward_calls}. */
JNIEXPORT jintArray JNICALL Java_org_edgespec_EdgeSpec_nativeGenerate(JNIEnv *env, jclass cls, jlong ptr,
                                                                      jbyteArray prompt_utf8, jint n_predict,
                                                                      jboolean speculative, jobject callback) {
    (void)cls;
    handle *h = (handle *)(intptr_t)ptr;
    if (!h || (speculative && !h->has_adapter)) {
        throw_error(env, h ? "speculative decoding needs the model's adapter (load with one)" : "a freed handle",
                    ES_ERR_INVALID_ARGUMENT);
        return NULL;
    }
    jclass cb_cls = (*env)->GetObjectClass(env, callback);
    stream st = {env, callback, (*env)->GetMethodID(env, cb_cls, "onToken", "(I[B)Z")};
    if (!st.on_token) return NULL; /* NoSuchMethodError pending */

    const jsize n_bytes = (*env)->GetArrayLength(env, prompt_utf8);
    char *text = malloc((size_t)n_bytes + 1);
    if (!text) {
        throw_error(env, "out of memory", ES_ERR_OUT_OF_MEMORY);
        return NULL;
    }
    (*env)->GetByteArrayRegion(env, prompt_utf8, 0, n_bytes, (jbyte *)text);
    size_t n_tok = 0;
    es_status s = es_tokenize(h->model, text, (size_t)n_bytes, true, false, NULL, 0, &n_tok);
    int32_t *toks = s == ES_ERR_BUFFER_TOO_SMALL || s == ES_OK ? malloc(sizeof *toks * (n_tok ? n_tok : 1)) : NULL;
    if (toks) s = es_tokenize(h->model, text, (size_t)n_bytes, true, false, toks, n_tok, &n_tok);
    free(text);
    if (!toks || s != ES_OK || n_tok == 0) {
        free(toks);
        throw_error(env, "tokenizing the prompt (empty?)", !toks ? ES_ERR_OUT_OF_MEMORY : s != ES_OK ? s : ES_ERR_INVALID_ARGUMENT);
        return NULL;
    }

    es_generate_params gp = es_generate_default_params();
    gp.n_predict = n_predict;
    gp.on_token = on_token;
    gp.user = &st;
    es_generate_stats stats = {0};
    if (speculative) {
        if (!h->spec) {
            es_spec_params sp = es_spec_default_params(); /* Speculative Streaming, greedy */
            s = es_spec_create(h->ctx, &sp, &h->spec); /* starts a new sequence */
        } else {
            s = es_spec_truncate(h->spec, 0);
        }
        if (s == ES_OK) s = es_spec_generate(h->spec, toks, n_tok, &gp, NULL, 0, &stats);
    } else {
        es_spec_free(h->spec); /* plain decoding drives the context itself */
        h->spec = NULL;
        s = es_truncate(h->ctx, 0);
        if (s == ES_OK) s = es_generate(h->ctx, toks, n_tok, &gp, NULL, 0, &stats);
    }
    free(toks);
    if ((*env)->ExceptionCheck(env)) return NULL; /* the callback threw: that exception goes up */
    if (s != ES_OK) {
        throw_error(env, speculative ? "speculative generation" : "generation", s);
        return NULL;
    }
    jintArray out = (*env)->NewIntArray(env, 2);
    if (out) {
        const jint v[2] = {stats.n_generated, stats.n_forward_calls};
        (*env)->SetIntArrayRegion(env, out, 0, 2, v);
    }
    return out;
}

JNIEXPORT void JNICALL Java_org_edgespec_EdgeSpec_nativeFree(JNIEnv *env, jclass cls, jlong ptr) {
    (void)env, (void)cls;
    free_handle((handle *)(intptr_t)ptr);
}
