#!/usr/bin/python3
"""python_binding_test.py: bindings/python/edgespec.py against the built library and the C CLI.

Checks: the ctypes structs have the C sizes (tests/abi/edgespec.abi); tokenize equals `edgespec
tokenize`, detokenize gives the text back; greedy generation (returned ids, callback pieces,
streamed pieces) equals `edgespec run --temp 0` text; leaving a stream early leaves exactly the
yielded tokens in the context; a callback's exception propagates and leaves the context usable;
Speculative Streaming and draft-model decoding emit the plain tokens (greedy, and seeded sampling
for the draft model); failures raise EdgespecError with the library's status and message;
without a Vulkan loader (LD_PRELOAD shim) asking for Vulkan raises and the CPU still works.

Usage: python_binding_test.py --lib PATH --cli PATH --models DIR --abi PATH [--shim PATH]
       [--preload PATH]  (the sanitizer runtime an instrumented library needs in the interpreter)
The exit status is the number of failed checks (0 = pass).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

sys.path.insert(0, os.path.join(testlib.ROOT, "bindings", "python"))
import edgespec  # noqa: E402

PROMPT = "In the beginning"
N = 24


def cli(a, *args):
    p = subprocess.run([a.cli, *args], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    p.stdout, p.stderr = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    check(p.returncode == 0, f"edgespec {' '.join(args[:1])} runs", p)
    return p.stdout


def expect_error(fn, status, needle, what):
    try:
        fn()
    except edgespec.EdgespecError as e:
        return check(e.status == status and needle in e.message, f"{what}: status {status}, message with {needle!r} "
                     f"(got {e.status}: {e.message!r})")
    return check(False, f"{what}: raises EdgespecError")


def check_structs(abi):
    sizes = {}
    with open(abi) as f:
        for line in f:
            w = line.split()
            if len(w) == 4 and w[0] == "size":
                sizes[w[1]] = int(w[2])
    if edgespec.ctypes.sizeof(edgespec.ctypes.c_void_p) != 8:
        return
    for name, cls in edgespec.STRUCTS.items():
        check(edgespec.ctypes.sizeof(cls) == sizes.get(name),
              f"ctypes {cls.__name__} is {sizes.get(name)} bytes like {name} (got {edgespec.ctypes.sizeof(cls)})")


def check_plain(a, model):
    for text in (PROMPT, "Grüße, 世界! tabs\tand  spaces"):
        ids = model.tokenize(text)
        want = [int(x) for x in cli(a, "tokenize", "-m", model.path, "-p", text).split()]
        check(ids == want, f"tokenize({text!r}) equals edgespec tokenize ({ids} vs {want})")
        check(model.detokenize(ids) == text, f"detokenize(tokenize({text!r})) is the text")
    expect_error(lambda: model.detokenize([model.n_vocab + 5]), 1, str(model.n_vocab + 5), "an invalid token id")

    want_text = cli(a, "run", "-m", model.path, "-p", PROMPT, "-n", str(N), "--ignore-eos", "--temp", "0", "-t", "1")
    with model.context(n_ctx=256, n_threads=1) as ctx:
        pieces = []
        ids = ctx.generate(PROMPT, on_token=lambda t, p: pieces.append(p), n_predict=N, ignore_eog=True)
        text = b"".join(pieces).decode()
        check(len(ids) == N and text == want_text, f"greedy generate: the CLI's text ({text!r} vs {want_text!r})")
        check(ctx.last_stats.n_generated == N and ctx.n_past == len(model.tokenize(PROMPT)) + N,
              "stats and n_past count the prompt and the generated tokens")

        ctx.reset()
        streamed = list(ctx.stream(PROMPT, n_predict=N, ignore_eog=True))
        check([t for t, _ in streamed] == ids and "".join(p for _, p in streamed) == want_text,
              "stream(): the same tokens and text as generate()")

        ctx.reset()
        taken = []
        for t, _ in ctx.stream(PROMPT, n_predict=N, ignore_eog=True):
            taken.append(t)
            if len(taken) == 5:
                break
        check(taken == ids[:5] and ctx.n_past == len(model.tokenize(PROMPT)) + 5,
              f"leaving a stream after 5 tokens: they are the first 5 and the context holds them (n_past {ctx.n_past})")

        ctx.reset()

        def boom(token, piece):
            raise ValueError("from the callback")
        try:
            ctx.generate(PROMPT, on_token=boom, n_predict=N)
            check(False, "a callback's exception propagates")
        except ValueError as e:
            check(str(e) == "from the callback", "a callback's exception propagates")
        ctx.reset()
        check(ctx.generate(PROMPT, n_predict=N, ignore_eog=True) == ids, "the context works after it")
        ctx.reset()
        expect_error(lambda: ctx.generate(PROMPT, n_predict=-1), 1, "n_predict", "n_predict -1")
        sampled = ctx.generate(PROMPT, n_predict=N, ignore_eog=True, temperature=0.8, seed=5)
    return ids, sampled


def check_spec(a, ids, sampled):
    target = edgespec.Model(os.path.join(a.models, "default.gguf"))
    target.load_adapter(os.path.join(a.models, "default.ss.gguf"))
    with target.context(n_ctx=256, n_threads=1) as ctx, ctx.speculative("stream") as spec:
        got = spec.generate(PROMPT, n_predict=N, ignore_eog=True)
        check(got == ids, f"Speculative Streaming: the plain greedy tokens ({got} vs {ids})")
        check(spec.last_stats.n_forward_calls <= N, "Speculative Streaming: at most one target call per token")
        spec.reset()
        streamed = [t for t, _ in spec.stream(PROMPT, n_predict=N, ignore_eog=True)]
        check(streamed == ids, "Speculative Streaming streamed: the plain greedy tokens")
    draft_model = edgespec.Model(os.path.join(a.models, "draft.gguf"))
    with target.context(n_ctx=256, n_threads=1) as ctx, draft_model.context(n_ctx=256, n_threads=1) as dctx:
        with ctx.speculative("draft", draft=dctx, lookahead=3) as spec:
            got = spec.generate(PROMPT, n_predict=N, ignore_eog=True)
            check(got == ids, f"draft model: the plain greedy tokens ({got} vs {ids})")
        with ctx.speculative("draft", draft=dctx, temperature=0.8, seed=5) as spec:
            got = spec.generate(PROMPT, n_predict=N, ignore_eog=True)
            check(got == sampled, "draft model, seeded sampling: the plain sampled tokens")
    plain = edgespec.Model(os.path.join(a.models, "draft.gguf"))
    with plain.context(n_ctx=64) as ctx:
        expect_error(lambda: ctx.speculative("stream"), 1, "adapter", "Speculative Streaming without an adapter")


NO_LOADER = """
import sys
sys.path.insert(0, sys.argv[1])
import edgespec
m = edgespec.Model(sys.argv[2])
try:
    m.context(backend="vulkan")
    print("no error")
except edgespec.EdgespecError as e:
    print("error", e.status, e.message)
with m.context(n_ctx=64) as ctx:
    print("cpu", len(ctx.generate("In the beginning", n_predict=4, ignore_eog=True)))
"""


def check_no_loader(a):
    env = dict(os.environ, EDGESPEC_LIBRARY=os.path.abspath(a.lib))
    env["LD_PRELOAD"] = ":".join(x for x in (env.get("LD_PRELOAD"), os.path.abspath(a.shim)) if x)
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    p = subprocess.run([sys.executable, "-c", NO_LOADER, os.path.join(testlib.ROOT, "bindings", "python"),
                        os.path.join(a.models, "default.gguf")], capture_output=True, text=True, env=env, timeout=120)
    check(p.returncode == 0 and "error 4 vulkan: no Vulkan loader found" in p.stdout and "cpu 4" in p.stdout,
          "without a loader: Vulkan raises EdgespecError (unsupported, 'no Vulkan loader found'), the CPU generates", p)


def check_readme(a, ids):
    """README's Python example runs as written, from the source tree, on this build's library."""
    with open(os.path.join(testlib.ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    start = readme.find("```python\n", readme.find("### Python"))
    if not check(start != -1, "README has a Python example under ### Python"):
        return
    code = readme[start + len("```python\n"):readme.find("```", start + 3)]
    check(len(code.strip().splitlines()) <= 14, "the README example is about ten lines")
    env = dict(os.environ, EDGESPEC_LIBRARY=os.path.abspath(a.lib))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                       cwd=testlib.ROOT)
    model = edgespec.Model(os.path.join(a.models, "default.gguf"))
    want = model.detokenize_bytes(ids, remove_leading_space=False).decode()
    check(p.returncode == 0 and p.stdout.startswith(want) and "i/o error: " in p.stdout
          and "missing.gguf" in p.stdout, "README's Python example: the greedy text, then the error", p)


def main():
    ap = argparse.ArgumentParser()
    for name in ("--lib", "--cli", "--models", "--abi"):
        ap.add_argument(name, required=True)
    ap.add_argument("--shim")
    ap.add_argument("--preload")
    a = ap.parse_args()
    if a.preload and a.preload not in os.environ.get("LD_PRELOAD", ""):
        # an instrumented library needs its sanitizer runtime first in the interpreter; Python's
        # own allocations are not the library's leaks (the C tests check those)
        env = dict(os.environ, LD_PRELOAD=a.preload)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    edgespec.load_library(os.path.abspath(a.lib))
    v = edgespec.version().split(".")
    check(len(v) == 3 and all(x.isdigit() for x in v) and int(v[0]) == edgespec.ABI_MAJOR,
          f"es_version() {edgespec.version()!r} is {edgespec.ABI_MAJOR}.MINOR.PATCH")
    check_structs(a.abi)
    expect_error(lambda: edgespec.Model("/nonexistent/model.gguf"), 2, "/nonexistent/model.gguf", "a missing model")
    model = edgespec.Model(os.path.join(a.models, "default.gguf"))
    expect_error(lambda: model.context(backend="tpu"), 1, "tpu", "an unknown backend")
    ids, sampled = check_plain(a, model)
    check_spec(a, ids, sampled)
    check_readme(a, ids)
    if a.shim:
        check_no_loader(a)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
