// EdgeSpecSmoke.java: the Android example's Java binding and JNI bridge on a desktop JVM (the
// suite's android_jni test): plain and speculative generation give the same text, the speculative
// run in fewer forward calls; the callback stops generation; errors arrive as exceptions.
// Usage: java -Djava.library.path=DIR -cp CLASSES EdgeSpecSmoke MODEL ADAPTER
import org.edgespec.EdgeSpec;

public final class EdgeSpecSmoke {
    private static int failures = 0;

    private static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("FAIL: " + what);
            failures++;
        }
    }

    private static final class Collect extends EdgeSpec.TextCallback {
        final StringBuilder text = new StringBuilder();
        int calls = 0;
        final int stopAfter;

        Collect(int stopAfter) {
            this.stopAfter = stopAfter;
        }

        @Override
        public boolean onText(String t) {
            text.append(t);
            return ++calls < stopAfter;
        }
    }

    public static void main(String[] args) {
        try (EdgeSpec es = new EdgeSpec(args[0], args[1], 2, 256)) {
            Collect plain = new Collect(Integer.MAX_VALUE), spec = new Collect(Integer.MAX_VALUE);
            EdgeSpec.Stats ps = es.generate("In the beginning", 40, false, plain);
            EdgeSpec.Stats ss = es.generate("In the beginning", 40, true, spec);
            System.out.println("plain: " + ps.generated + " tokens, " + ps.forwardCalls + " calls: " + plain.text);
            System.out.println("speculative: " + ss.generated + " tokens, " + ss.forwardCalls + " calls");
            check(ps.generated == 40 && plain.text.length() > 0, "plain generation produced 40 tokens of text");
            check(spec.text.toString().equals(plain.text.toString()), "speculative text equals plain text");
            check(ss.forwardCalls < ps.forwardCalls, "speculation made fewer forward calls");
            Collect again = new Collect(Integer.MAX_VALUE);
            es.generate("In the beginning", 40, false, again); // after speculation: a fresh plain sequence
            check(again.text.toString().equals(plain.text.toString()), "plain after speculative repeats the text");
            Collect stop = new Collect(5);
            EdgeSpec.Stats st = es.generate("In the beginning", 40, true, stop);
            check(stop.calls == 5 && st.generated < 40, "returning false stops generation (" + stop.calls + " calls)");
        }
        try (EdgeSpec none = new EdgeSpec(args[0] + ".missing", null, 1, 0)) {
            check(false, "a missing model throws");
        } catch (IllegalStateException e) {
            check(e.getMessage().contains(".missing"), "the error names the file: " + e.getMessage());
        }
        try (EdgeSpec noAdapter = new EdgeSpec(args[0], null, 1, 64)) {
            noAdapter.generate("x", 4, true, new Collect(Integer.MAX_VALUE));
            check(false, "speculative without an adapter throws");
        } catch (IllegalStateException e) {
            check(e.getMessage().contains("adapter"), "the error says the adapter is missing: " + e.getMessage());
        }
        System.out.println(failures == 0 ? "ok" : failures + " failed");
        System.exit(failures == 0 ? 0 : 1);
    }
}
