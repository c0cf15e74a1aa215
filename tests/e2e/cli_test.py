#!/usr/bin/python3
"""cli_test.py: end-to-end tests of the built `edgespec` binary (Python standard library only).

Usage: cli_test.py CASE --cli PATH [--model PATH] [--example PATH] [--vocab-dir DIR]
Cases: run, info, tokenize, errors. Each check prints what it ran when it fails; the exit
status is the number of failed checks (0 = pass). A process ended by a signal always fails.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402


def run(cmd, timeout=120, stdin=None):
    env = testlib.vulkan_env() if "vulkan" in cmd else None  # leak checking stays on for every CPU run
    p = subprocess.run(testlib.wrap(cmd), capture_output=True, timeout=timeout, env=env,
                       stdin=stdin if stdin is not None else subprocess.DEVNULL)
    p.stdout = p.stdout.decode("utf-8", "replace")
    p.stderr = p.stderr.decode("utf-8", "replace")
    # Python reports death by signal as a negative status; it is never acceptable.
    check(p.returncode >= 0, f"no signal (got signal {-p.returncode})", p)
    return p


STATS = re.compile(r"^edgespec run: prompt (\d+) tokens in [0-9.]+ ms \([0-9.]+ tokens/s\), "
                   r"decode (\d+) tokens in [0-9.]+ ms \([0-9.]+ tokens/s\), backend (cpu|vulkan \(.+\))$")


def case_run(a):
    cli, m = a.cli, a.model
    base = [cli, "run", "-m", m, "-p", "The quick brown fox", "-n", "24", "--ignore-eos"]
    g1 = run(base + ["--temp", "0"])
    if not check(g1.returncode == 0, "greedy run succeeds", g1):
        return
    lines = g1.stderr.splitlines()
    check(len(lines) == 1 and STATS.match(lines[0]) is not None,
          "stderr is exactly one stats line", g1)
    mt = STATS.match(lines[-1]) if lines else None
    check(mt is not None and int(mt.group(2)) == 24, "24 tokens generated with --ignore-eos", g1)
    check(len(g1.stdout) > 0, "some text on stdout", g1)
    check("tokens/s" not in g1.stdout and "edgespec" not in g1.stdout, "no statistics or logs on stdout", g1)
    check(not g1.stdout.startswith("The quick brown fox"), "the prompt is not echoed", g1)

    # greedy decoding is deterministic, and independent of threads and prompt batching
    for extra in ([], ["--threads", "1"], ["--batch-size", "1"], ["--threads", "2", "--batch-size", "3"]):
        g2 = run(base + ["--temp", "0"] + extra)
        check(g2.returncode == 0 and g2.stdout == g1.stdout, f"greedy output repeats with {extra}", g2)

    # --stop: the text up to the first occurrence of a piece from its middle, never the piece
    text = g1.stdout
    if check(len(text) > 12, "enough text for a stop string", g1):
        stop = text[len(text) // 2:len(text) // 2 + 4]
        want = text[:text.index(stop)]
        sr = run(base + ["--temp", "0", "--stop", stop])
        check(sr.returncode == 0 and sr.stdout == want, f"--stop {stop!r}: the text before it", sr)
    tm = run(base + ["--temp", "0", "--max-time", "0.000001"])
    mm = STATS.match(tm.stderr.splitlines()[-1]) if tm.returncode == 0 and tm.stderr else None
    check(mm is not None and int(mm.group(2)) == 1, "--max-time spent at once: one token", tm)

    # the Vulkan backend (lavapipe in CI) through the CLI: the same greedy text
    if a.vulkan:
        vk = run(base + ["--temp", "0", "--backend", "vulkan"], timeout=300)
        vl = vk.stderr.splitlines()
        check(vk.returncode == 0 and vk.stdout == g1.stdout, "--backend vulkan: the CPU backend's greedy text", vk)
        check(len(vl) == 1 and STATS.match(vl[0]) is not None and "backend vulkan (" in vl[0],
              "--backend vulkan: one stats line naming the device", vk)
        # DSI's target servers on the other devices of a --device list: two logical devices on one
        dl = run(base + ["--temp", "0", "--backend", "vulkan", "--device", "0,0", "--spec", "dsi", "-md", m,
                         "--targets", "2"], timeout=300)
        check(dl.returncode == 0 and dl.stdout == g1.stdout, "--device 0,0 --spec dsi: the greedy text", dl)

    # the CLI's text is exactly what an embedding application gets from es_generate
    if a.example:
        ex = run([a.example, m, "The quick brown fox", "24"])
        check(ex.returncode == 0, "examples/minimal runs", ex)
        # minimal.c stops at end-of-generation; compare the common prefix length it produced
        check(g1.stdout.startswith(ex.stdout) and len(ex.stdout) > 0,
              "CLI greedy text equals the embedding example's", ex)

    # sampling: reproducible per seed, different across seeds
    samp = base + ["--temp", "1.0", "--top-k", "0", "--top-p", "1", "--min-p", "0"]
    s1 = run(samp + ["--seed", "7"])
    s2 = run(samp + ["--seed", "7"])
    check(s1.returncode == 0 and s1.stdout == s2.stdout, "same seed, same text", s2)
    # top-p 0 is off, as 1 is (the library's zero)
    s3 = run(base + ["--temp", "1.0", "--top-k", "0", "--top-p", "0", "--min-p", "0", "--seed", "7"])
    check(s3.returncode == 0 and s3.stdout == s1.stdout, "--top-p 0 samples as --top-p 1", s3)
    # the CLI's sampling defaults are its own (the library's zeroed sampler params are greedy)
    d1 = run(base + ["--seed", "3"])
    d2 = run(base + ["--seed", "3", "--temp", "0.8", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05"])
    check(d1.returncode == 0 and d1.stdout == d2.stdout and d1.stdout != g1.stdout,
          "without options the CLI samples with T 0.8, top-k 40, top-p 0.95, min-p 0.05", d1)
    # random tied-embedding models are very peaked: a hotter run over a few seeds must differ
    hot = base + ["--temp", "3.0", "--top-k", "0", "--top-p", "1", "--min-p", "0"]
    texts = {run(hot + ["--seed", str(seed)]).stdout for seed in (7, 8, 9, 10)}
    check(len(texts) > 1, f"other seeds, other text ({len(texts)} distinct of 4)")

    # prompt from a file gives the same result as -p
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("The quick brown fox")
    try:
        fr = run([cli, "run", "-m", m, "-f", f.name, "-n", "24", "--ignore-eos", "--temp", "0"])
        check(fr.returncode == 0 and fr.stdout == g1.stdout, "-f FILE equals -p TEXT", fr)
    finally:
        os.unlink(f.name)

    # a small context stops generation without an error
    small = run([cli, "run", "-m", m, "-p", "a b", "-n", "100", "--ignore-eos", "--temp", "0", "-c", "16"])
    ms = STATS.match(small.stderr.splitlines()[-1]) if small.stderr else None
    check(small.returncode == 0 and ms is not None and int(ms.group(1)) + int(ms.group(2)) <= 17,
          "generation stops at the context size", small)


def read_vocab_cases(path):
    with open(path + ".inp", encoding="utf-8") as f:
        inp = f.read()
    sep = "\n__ggml_vocab_test__\n"
    texts = inp.split(sep)
    if texts and texts[-1] == "":
        texts.pop()
    with open(path + ".out", encoding="utf-8") as f:
        outs = [line.split() for line in f.read().split("\n")]
    return list(zip(texts, outs[: len(texts)]))


def case_tokenize(a):
    cli = a.cli
    for name in ("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"):
        vocab = os.path.join(a.vocab_dir, name)
        cases = read_vocab_cases(vocab)
        check(len(cases) >= 10, f"{name}: test strings found")
        with tempfile.TemporaryDirectory() as tmp:
            for i, (text, want) in enumerate(cases):
                path = os.path.join(tmp, f"{i}.txt")
                with open(path, "w", encoding="utf-8", newline="") as f:
                    f.write(text)
                p = run([cli, "tokenize", "-m", vocab, "-f", path, "--no-bos", "--no-parse-special"])
                got = p.stdout.rstrip("\n").split()
                check(p.returncode == 0 and got == want and p.stdout.count("\n") == 1,
                      f"{name} string {i} {text[:40]!r}: ids {want}", p)
    # with the BOS token (llama vocabularies add it by default) and from -p
    vocab = os.path.join(a.vocab_dir, "ggml-vocab-llama-spm.gguf")
    p = run([cli, "tokenize", "-m", vocab, "-p", "Hello world"])
    q = run([cli, "tokenize", "-m", vocab, "-p", "Hello world", "--no-bos"])
    check(p.returncode == 0 and q.returncode == 0 and p.stdout.split() == ["1"] + q.stdout.split(),
          "BOS (id 1) added unless --no-bos", p)
    e = run([cli, "tokenize", "-m", vocab, "-p", "", "--no-bos"])
    check(e.returncode == 0 and e.stdout == "\n", "empty text: an empty line", e)


def case_info(a):
    p = run([a.cli, "info", a.model])
    if not check(p.returncode == 0, "info succeeds", p):
        return
    for needle in ("architecture   llama", "token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight",
                   "n_layer", "n_head_kv", "tokenizer", "tensors"):
        check(needle in p.stdout, f"info lists {needle!r}", p)
    m = re.search(r"^tensors\s+(\d+)", p.stdout, re.M)
    listed = len(re.findall(r"^  \S+\.weight\s", p.stdout, re.M))
    check(m is not None and int(m.group(1)) == listed and listed > 0, "every tensor listed once", p)
    q = run([a.cli, "info", "-m", a.model])
    check(q.returncode == 0 and q.stdout == p.stdout, "info -m MODEL equals info MODEL", q)
    v = run([a.cli, "info", os.path.join(a.vocab_dir, "ggml-vocab-gpt-2.gguf")])
    check(v.returncode == 0 and "vocabulary-only" in v.stdout and "gpt2" in v.stdout,
          "info describes a vocabulary-only file", v)


def expect_fail(cmd, status, needles, what, timeout=120):
    p = run(cmd, timeout=timeout)
    ok = p.returncode == status and all(n in p.stderr for n in needles) and p.stdout == ""
    check(ok, f"{what}: exit {status}, stderr mentions {needles}, nothing on stdout", p)


def case_errors(a):
    cli, m = a.cli, a.model
    with tempfile.TemporaryDirectory() as tmp:
        missing = os.path.join(tmp, "missing.gguf")
        expect_fail([cli, "run", "-m", missing, "-p", "x"], 1, ["cannot load", missing], "missing model file")
        expect_fail([cli, "info", missing], 1, ["cannot load", missing], "info on a missing file")
        expect_fail([cli, "tokenize", "-m", missing, "-p", "x"], 1, ["cannot load"], "tokenize on a missing file")
        junk = os.path.join(tmp, "junk.gguf")
        with open(junk, "wb") as f:
            f.write(b"this is not a gguf file at all, just some text" * 10)
        expect_fail([cli, "run", "-m", junk, "-p", "x"], 1, ["cannot load", "magic"], "not a GGUF file")
        expect_fail([cli, "info", junk], 1, ["magic"], "info on a non-GGUF file")
        with open(m, "rb") as f:
            head = f.read()
        trunc = os.path.join(tmp, "truncated.gguf")
        with open(trunc, "wb") as f:
            f.write(head[: len(head) // 2])
        expect_fail([cli, "run", "-m", trunc, "-p", "x"], 1, ["cannot load"], "truncated model")
        expect_fail([cli, "info", trunc], 1, ["cannot load"], "info on a truncated model")
        empty = os.path.join(tmp, "empty.gguf")
        open(empty, "wb").close()
        expect_fail([cli, "run", "-m", empty, "-p", "x"], 1, ["cannot load"], "empty file")
        expect_fail([cli, "run", "-m", tmp, "-p", "x"], 1, ["cannot load", "is a directory"], "a directory")
        # not regular files: refused by type, at once (a FIFO without a writer used to block open)
        fifo = os.path.join(tmp, "model.fifo")
        os.mkfifo(fifo)
        for cmd in ([cli, "run", "-m", fifo, "-p", "x"], [cli, "info", fifo], [cli, "tokenize", "-m", fifo, "-p", "x"]):
            try:
                expect_fail(cmd, 1, ["cannot load", fifo, "is a FIFO, not a regular file"], f"a FIFO: {cmd[1]}",
                            timeout=20)
            except subprocess.TimeoutExpired:
                check(False, f"a FIFO as the model ({cmd[1]}): the CLI hung")
        expect_fail([cli, "run", "-m", "/dev/null", "-p", "x"], 1, ["is a character device, not a regular file"],
                    "/dev/null as the model")
        p = run([cli, "run", "-m", "/dev/null", "-p", "x"])
        check("Is a directory" not in p.stderr, "/dev/null is not called a directory", p)
        # the path once in a load failure's message
        for bad in (missing, junk, empty):
            p = run([cli, "run", "-m", bad, "-p", "x"])
            check(p.stderr.count(bad) == 1, f"the path once in the message for {os.path.basename(bad)}", p)
        expect_fail([cli, "run", "-m", m, "-f", missing], 1, ["cannot open", missing], "missing prompt file")
    # usage errors: status 2 and the usage text
    expect_fail([cli], 2, ["usage:"], "no command")
    expect_fail([cli, "frobnicate"], 2, ["unknown command", "usage:"], "unknown command")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--bogus"], 2, ["unknown option '--bogus'", "usage:"], "bad flag")
    expect_fail([cli, "run", "-p", "x"], 2, ["-m MODEL is required", "usage:"], "no model")
    expect_fail([cli, "run", "-m", m], 2, ["-p PROMPT", "usage:"], "no prompt")
    expect_fail([cli, "run", "-m", m, "-p", "x", "-n"], 2, ["needs a value"], "missing value")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--temp", "warm"], 2, ["--temp expects"], "non-numeric value")
    expect_fail([cli, "run", "-m", m, "-p", "x", "-n", "12abc"], 2, ["--n-predict expects"], "trailing junk")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--temp", "-1"], 2, ["out of range"], "negative temperature")
    # numbers that do not fit are out of range (not "expects an integer"), ranges in full
    expect_fail([cli, "run", "-m", m, "-p", "x", "-n", "2147483648"], 2,
                ["--n-predict 2147483648 is out of range [0, 2147483647]"], "-n past int32")
    expect_fail([cli, "run", "-m", m, "-p", "x", "-n", "99999999999999999999"], 2, ["out of range"], "-n past int64")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--top-k", "-1"], 2, ["[0, 2147483647]"], "integer ranges in full")
    p = run([cli, "run", "-m", m, "-p", "x", "--top-k", "-1"])
    check("e+" not in p.stderr, "no %g in an integer range", p)
    expect_fail([cli, "run", "-m", m, "-p", "x", "--seed", "99999999999999999999999"], 2, ["--seed", "out of range"],
                "--seed past uint64")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--temp", "1e39"], 2, ["--temp 1e39 is out of range"], "--temp past float")
    # the CLI's thread limit is the library's (ES_MAX_THREADS)
    expect_fail([cli, "run", "-m", m, "-p", "x", "--threads", "1025"], 2, ["--threads 1025 is out of range [0, 1024]"],
                "--threads past the library's limit")
    h = run([cli, "run", "--threads", "1024", "--help"])
    check(h.returncode == 0, "--threads 1024 parses", h)
    expect_fail([cli, "run", "-m", m, "-p", "x", "--seed", "-3"], 2, ["--seed expects"], "negative seed")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--backend", "tpu"], 2, ["cpu", "vulkan"], "unknown backend")
    expect_fail([cli, "run", "-m", m, "-p", "x", "extra"], 2, ["unexpected argument"], "stray argument")
    expect_fail([cli, "info"], 2, ["usage:"], "info without a file")
    expect_fail([cli, "tokenize", "-m", m, "-p", "x", "-f", "y"], 2, ["exactly one"], "both -p and -f")
    # errors the library reports: status 1 and its message
    expect_fail([cli, "run", "-m", m, "-p", "x", "--vk-flags", "bogus"], 1, ["unknown flag 'bogus'"],
                "unknown Vulkan flag (parsed in any build)")
    if a.vulkan:
        expect_fail([cli, "run", "-m", m, "-p", "x", "--backend", "vulkan", "--vk-flags", "texel-buffers,storage-buffers"],
                    1, ["exclude each other"], "--vk-flags reach the backend")
    # device lists (es_backends_create): the entry at fault named; several devices only where used
    expect_fail([cli, "run", "-m", m, "-p", "x", "--device", "host,,host"], 1,
                ["device list 'host,,host': entry 2 (at offset 5) is empty"], "--device with an empty entry")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--device", "host,host"], 1,
                ["lists 2 devices; only --spec dsi", "--spec alspec (two) run on more than one"], "--device list without a multi-device strategy")
    expect_fail([cli, "chat", "-m", m, "--device", "host,host"], 1, ["lists 2 devices; chat runs on one"],
                "chat with a --device list")
    expect_fail([cli, "run", "-m", m, "-p", "x", "--device", "host,0"], 1, ["entry 2 '0' names a Vulkan device"],
                "--device list with a Vulkan entry on the CPU backend")
    if a.vulkan:
        expect_fail([cli, "run", "-m", m, "-p", "x", "--backend", "vulkan", "--device", "0,99"], 1,
                    ["entry 2 '99'", "device index 99 out of range", "'0,0'"], "--device list naming a missing device")
    # a context larger than the machine's memory fails at creation, at once, and says what fits
    # (the shipped model's KV cache is 9 KiB a token: --ctx-size 16777216 needs 144 GiB)
    default = os.path.join(os.environ.get("ES_SOURCE_ROOT", "."), "models", "default.gguf")
    t0 = time.monotonic()
    expect_fail([cli, "run", "-m", default, "-p", "x", "--ctx-size", "16777216"], 1,
                ["cannot create a context", "GiB", "tokens fit"], "--ctx-size beyond the machine's memory")
    dt = time.monotonic() - t0
    check(dt < 1.0, f"--ctx-size beyond the machine's memory fails in under a second (took {dt:.2f} s)")
    long_prompt = " ".join(["word"] * 64)
    expect_fail([cli, "run", "-m", m, "-p", long_prompt, "-c", "8"], 1, ["n_ctx"], "prompt longer than the context")
    # help goes to stdout with status 0
    h = run([cli, "run", "--help"])
    check(h.returncode == 0 and "--temp" in h.stdout and "--backend" in h.stdout and h.stderr == "", "run --help", h)
    h = run([cli, "help", "tokenize"])
    check(h.returncode == 0 and "--no-bos" in h.stdout, "help tokenize", h)
    v = run([cli, "--version"])
    check(v.returncode == 0 and v.stdout.startswith("edgespec "), "--version", v)
    # a closed stdout ends generation with a status, not SIGPIPE
    with subprocess.Popen(testlib.wrap([cli, "run", "-m", m, "-p", "x", "-n", "400", "--ignore-eos", "-c", "512"]),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        p.stdout.close()
        _, err = p.communicate(timeout=120)
        check(p.returncode in (0, 1), f"closed stdout: exit {p.returncode} (not a signal); stderr {err[-300:]!r}")


def sh_blocks(text):
    """The ```sh blocks of a markdown text, in order, with the line each starts on."""
    blocks, cur, start = [], None, 0
    for n, line in enumerate(text.split("\n")):
        if cur is None and line.startswith("```sh"):
            cur, start = [], n
        elif cur is not None and line.startswith("```"):
            blocks.append((start, "\n".join(cur)))
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def case_readme(a):
    """README opens with exactly the two commands (demo; tests), .ci/run reads the second, and the
    demo's CLI invocation works on what this build made (build/ mapped to this build directory)."""
    with open(os.path.join(a.source_root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    first_section = readme.find("\n## ")
    blocks = [b for b in sh_blocks(readme) if readme.count("\n", 0, first_section) > b[0]]
    check(len(blocks) == 2, f"README's opening has exactly two sh commands (found {len(blocks)})")
    if len(blocks) != 2:
        return
    demo, tests = blocks[0][1], blocks[1][1]
    for name, cmd in (("demo", demo), ("tests", tests)):
        check("\n" not in cmd and cmd.startswith("apt-get update && apt-get install -y "),
              f"{name} command: one line that starts by installing the dependencies")
    check(" && meson setup build && ninja -C build && " in demo, "demo command builds in build/")
    check(tests.endswith(" && meson setup build && ninja -C build && meson test -C build --print-errorlogs"),
          "test command runs the whole suite in build/")
    marker = readme.find("<!-- ci: test command -->")
    check(marker != -1 and readme.find("```sh", marker) == readme.find(tests) - len("```sh\n"),
          "the CI marker sits right before the test command")
    with open(os.path.join(a.source_root, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    check("<!-- ci: test command -->" in ci, ".ci/run extracts the README's test command")
    # every package the demo installs is installed by the test command too
    pk = lambda c: set(c.split(" && ")[1].split()[3:])
    check(pk(demo) <= pk(tests), f"test command installs the demo's packages (missing {pk(demo) - pk(tests)})")
    run_cmd = demo.split(" && ")[-1]
    check(run_cmd.startswith("build/tools/edgespec/edgespec run "), "demo ends by running the CLI", None)
    argv = shlex.split(run_cmd)
    argv = [os.path.join(a.build_root, x[len("build/"):]) if x.startswith("build/") else x for x in argv]
    # paths into the source tree (models/default.gguf) are relative to the checkout, where README runs
    argv = [os.path.join(a.source_root, x) if os.path.exists(os.path.join(a.source_root, x)) else x for x in argv]
    p = run(argv, timeout=300)
    lines = p.stderr.splitlines()
    check(p.returncode == 0 and len(p.stdout) > 0 and len(lines) >= 1 and STATS.match(lines[-1]) is not None,
          "the demo's CLI command generates text and a stats line", p)


def case_bench(a):
    """`edgespec bench` runs tools/bench's benchmark: JSON on stdout, the CLI's exit statuses."""
    import json
    p = run([a.cli, "bench", "-m", a.model, "-r", "2", "-p", "8,16", "-n", "4", "-c", "64", "--no-membw"])
    if not check(p.returncode == 0, "bench succeeds", p):
        return
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        check(False, f"bench prints one JSON object ({e})", p)
        return
    names = [t.get("name") for t in doc.get("tests", [])]
    check(names == ["pp8", "pp16", "tg4"], f"bench ran pp8, pp16, tg4 (got {names})", p)
    check(all(t.get("tok_s_median", 0) > 0 and len(t.get("tok_s", [])) == 2 for t in doc.get("tests", [])),
          "every test has 2 repetitions and a positive median", p)
    check(doc.get("backend") == "cpu" and doc.get("n_vocab", 0) > 0, "bench reports the backend and the model", p)
    expect_fail([a.cli, "bench", "-m", a.model, "--bogus"], 2, ["--bogus"], "bench with a bad option")
    expect_fail([a.cli, "bench", "-m", a.model, "--vk-flags", "bogus"], 2, ["unknown flag 'bogus'"],
                "bench with an unknown Vulkan flag")
    expect_fail([a.cli, "bench", "-m", a.model + ".missing"], 1, ["No such file"], "bench on a missing model")
    h = run([a.cli, "help"])
    check(h.returncode == 0 and "bench" in h.stdout, "help lists bench", h)


def case_progress(a):
    """A model of 16 MiB or more shows a load progress bar when stderr is a terminal; not when it
    is a pipe (the other tests' stderr), where only models of 256 MiB or more report."""
    import pty
    size = os.path.getsize(a.model)
    check(16 << 20 <= size < 256 << 20, f"the model is between 16 and 256 MiB ({size} bytes)")
    master, slave = pty.openpty()
    try:
        p = subprocess.run(testlib.wrap([a.cli, "run", "-m", a.model, "-p", "x", "-n", "2", "--temp", "0"]),
                           stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, timeout=300)
        os.close(slave)
        slave = -1
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    err = out.decode("utf-8", "replace")
    check(p.returncode == 0, f"run on a terminal succeeds (exit {p.returncode}; stderr {err[-400:]!r})")
    check("loading [" in err and "100%" in err and "\r" in err,
          f"a progress bar redrawn in place up to 100% (stderr {err[-400:]!r})")
    check(STATS.match(err.replace("\r\n", "\n").splitlines()[-1]) is not None, "then the stats line")
    piped = run([a.cli, "run", "-m", a.model, "-p", "x", "-n", "2", "--temp", "0"], timeout=300)
    check(piped.returncode == 0 and "loading" not in piped.stderr and len(piped.stderr.splitlines()) == 1,
          "no progress output when stderr is a pipe", piped)


def case_alspec(a):
    """`--spec alspec`: with --lambda 0 the text of a plain run (ALSpec's exact path is the plain
    attention bit for bit), every layer check counted and none taken; a huge lambda takes them
    all; a chunk that is not whole tiles fails with a message naming it."""
    cli, m = a.cli, a.model
    prompt = "The quick brown fox jumps over the lazy dog. " * 8
    base = [cli, "run", "-m", m, "-p", prompt, "-n", "24", "--ignore-eos", "--temp", "0"]
    plain = run(base)
    exact = run(base + ["--spec", "alspec", "--lambda", "0", "--chunk", "64"])
    check(plain.returncode == 0 and exact.returncode == 0 and plain.stdout == exact.stdout and plain.stdout,
          "alspec with lambda 0 prints the plain run's text", exact)
    hits = re.search(r"(\d+) with a speculation .*layer hits (\d+) of (\d+)", exact.stderr)
    check(hits is not None and int(hits.group(1)) > 0 and int(hits.group(2)) == 0 and int(hits.group(3)) > 0,
          "lambda 0: speculations checked, none taken", exact)
    loose = run(base + ["--spec", "alspec", "--lambda", "1e6", "--chunk", "64"])
    check(loose.returncode == 0 and "(100.0%)" in loose.stderr, "a huge lambda takes every speculation", loose)
    bad = run(base + ["--spec", "alspec", "--chunk", "100"])
    check(bad.returncode != 0 and "chunk 100" in bad.stderr, "a chunk of 100 fails naming it", bad)
    # Algorithm 2 over two devices: two CPU backends; with Vulkan two logical devices ("0,0")
    pair = run(base + ["--spec", "alspec", "--lambda", "0", "--chunk", "64", "--device", "host,host"])
    check(pair.returncode == 0 and pair.stdout == plain.stdout and "Algorithm 2 with the second device" in pair.stderr
          and "layer hits 0 of" in pair.stderr, "alspec on host,host with lambda 0 prints the plain run's text", pair)
    pair = run(base + ["--spec", "alspec", "--lambda", "1e6", "--chunk", "64", "--device", "host,host"])
    check(pair.returncode == 0 and "(100.0%)" in pair.stderr, "host,host: a huge lambda takes every speculation", pair)
    three = run(base + ["--spec", "alspec", "--device", "host,host,host"])
    check(three.returncode != 0 and "one or two devices" in three.stderr, "three devices fail naming the limit", three)
    if a.vulkan:
        # Vulkan chunks are 256 keys: a prompt past 512 tokens speculates
        vk = [cli, "run", "-m", m, "-p", prompt * 4, "-n", "8", "-c", "1024", "--ignore-eos", "--temp", "0",
              "--backend", "vulkan"]
        ref = run(vk)
        pair = run(vk + ["--spec", "alspec", "--lambda", "0", "--chunk", "256", "--device", "0,0"])
        check(ref.returncode == 0 and pair.returncode == 0 and pair.stdout == ref.stdout and ref.stdout
              and re.search(r"layer hits 0 of [1-9]", pair.stderr) is not None,
              "alspec on Vulkan 0,0 with lambda 0 prints the plain Vulkan run's text", pair)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["run", "info", "tokenize", "errors", "readme", "bench", "progress", "alspec"])
    ap.add_argument("--vulkan", action="store_true", help="the build has the Vulkan backend")
    ap.add_argument("--source-root")
    ap.add_argument("--build-root")
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model")
    ap.add_argument("--example")
    ap.add_argument("--vocab-dir")
    a = ap.parse_args()
    globals()["case_" + a.case](a)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
