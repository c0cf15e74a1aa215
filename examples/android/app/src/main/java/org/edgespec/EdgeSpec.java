// EdgeSpec.java: the Java side of jni/edgespec_jni.c, plain Java (no Android classes), so the same
// class runs on a desktop JVM. One instance: a model (and its Speculative Streaming adapter), one
// CPU context. Calls are synchronized: the native context is used by one thread at a time.
package org.edgespec;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

public final class EdgeSpec implements AutoCloseable {
    static {
        System.loadLibrary("edgespec_jni"); // libedgespec_jni.so, which needs libedgespec.so
    }

    /** Receives each generated token's bytes; return false to stop generation. */
    public interface TokenCallback {
        boolean onToken(int token, byte[] piece);
    }

    /** A callback that decodes pieces as UTF-8 once their characters are complete. */
    public abstract static class TextCallback implements TokenCallback {
        private final ByteArrayOutputStream pending = new ByteArrayOutputStream();

        /** text: the newly completed characters (may be empty). */
        public abstract boolean onText(String text);

        @Override
        public final boolean onToken(int token, byte[] piece) {
            pending.write(piece, 0, piece.length);
            byte[] b = pending.toByteArray();
            int end = completeUtf8Prefix(b);
            pending.reset();
            pending.write(b, end, b.length - end);
            return onText(new String(b, 0, end, StandardCharsets.UTF_8));
        }

        // The longest prefix that does not end inside a multi-byte character.
        private static int completeUtf8Prefix(byte[] b) {
            int i = b.length;
            int back = 0;
            while (i > 0 && back < 3 && (b[i - 1] & 0xC0) == 0x80) {
                i--;
                back++;
            }
            if (i == 0) return b.length;
            int lead = b[i - 1] & 0xFF;
            int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            return back + 1 >= need ? b.length : i - 1;
        }
    }

    /** What one generation did. */
    public static final class Stats {
        public final int generated;
        public final int forwardCalls;

        Stats(int generated, int forwardCalls) {
            this.generated = generated;
            this.forwardCalls = forwardCalls;
        }
    }

    private long handle;

    /**
     * Loads modelPath (GGUF) and, when adapterPath is not null, its Speculative Streaming adapter.
     * nThreads 0 = every online core; nCtx 0 = the model's context size (at most 4096).
     */
    public EdgeSpec(String modelPath, String adapterPath, int nThreads, int nCtx) {
        handle = nativeLoad(modelPath, adapterPath, nThreads, nCtx);
    }

    /**
     * Greedy generation of up to nPredict tokens after prompt, from a fresh sequence. speculative:
     * Speculative Streaming (needs the adapter): the same tokens in fewer forward calls.
     */
    public synchronized Stats generate(String prompt, int nPredict, boolean speculative, TokenCallback cb) {
        if (handle == 0) throw new IllegalStateException("EdgeSpec used after close()");
        int[] r = nativeGenerate(handle, prompt.getBytes(StandardCharsets.UTF_8), nPredict, speculative, cb);
        return new Stats(r[0], r[1]);
    }

    @Override
    public synchronized void close() {
        nativeFree(handle);
        handle = 0;
    }

    private static native long nativeLoad(String modelPath, String adapterPath, int nThreads, int nCtx);

    private static native int[] nativeGenerate(long handle, byte[] promptUtf8, int nPredict, boolean speculative,
                                               TokenCallback cb);

    private static native void nativeFree(long handle);
}
