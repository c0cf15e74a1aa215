#!/usr/bin/python3
"""test_android_jni.py: examples/android's Java binding (org.edgespec.EdgeSpec) and its JNI bridge
on this machine's JVM: compiles the binding and examples/android/test/EdgeSpecSmoke.java, then runs
the smoke program (plain and speculative text identical, the callback stops generation, errors as
exceptions) against the built libedgespec_jni.
Usage: test_android_jni.py JAVAC JAVA JNI_LIBRARY SOURCE_ROOT MODEL ADAPTER"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402


def main():
    javac, java, jni_lib, root, model, adapter = sys.argv[1:7]
    src = os.path.join(root, "examples", "android")
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([javac, "-d", tmp, os.path.join(src, "app", "src", "main", "java", "org", "edgespec", "EdgeSpec.java"),
                            os.path.join(src, "test", "EdgeSpecSmoke.java")], capture_output=True, text=True, timeout=120)
        if not check(p.returncode == 0, "javac compiles the binding and the smoke program", p):
            return testlib.finish()
        p = subprocess.run([java, "-Djava.library.path=" + os.path.dirname(jni_lib), "-cp", tmp, "EdgeSpecSmoke", model,
                            adapter], capture_output=True, text=True, timeout=120)
        print(p.stdout)
        check(p.returncode == 0 and p.stdout.rstrip().endswith("ok"), "EdgeSpecSmoke passes", p)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
