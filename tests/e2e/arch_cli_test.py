"""arch_cli_test.py: the CLI on GGUF files of the architectures besides llama (docs/formats.md,
"Architectures"), written by edgespec-mkmodel --arch: `edgespec info` names the architecture and
shows gemma2's window and caps; draft-model speculation (--spec draft, a smaller drafter file of
the same family: fewer and narrower layers, the same vocabulary), DSI and Speculative Streaming
(--spec stream, a random adapter from edgespec-mkadapter, with and without pruning) print the plain
run's text, greedy and sampled; with --vulkan, gemma2 and qwen2 on Vulkan (plain, draft and
stream) print the CPU's text.

usage: arch_cli_test.py --cli EDGESPEC --mkmodel EDGESPEC_MKMODEL --mkadapter EDGESPEC_MKADAPTER --dir DIR
                        [--vulkan]
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

FAMILIES = [
    ("gemma2", ["--sliding-window", "5", "--softcap", "2,3"]),
    ("qwen2", ["--sliding-window", "4"]),
    ("qwen3", ["--head-dim", "32"]),
    ("gemma3", ["--sliding-window", "4", "--freq-base", "1000000"]),
    ("smollm3", ["--n-layer", "4"]),
    ("granite", []),
    ("phi3", ["--type", "q8_0"]),
    ("gemma", []),
]


def run(cmd):
    env = testlib.vulkan_env() if "vulkan" in cmd else None
    p = subprocess.run(testlib.wrap(cmd), capture_output=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    p.stdout = p.stdout.decode("utf-8", "replace")
    p.stderr = p.stderr.decode("utf-8", "replace")
    check(p.returncode == 0, "exit status 0", p)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--mkmodel", required=True)
    ap.add_argument("--mkadapter", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--vulkan", action="store_true")
    a = ap.parse_args()
    for arch, extra in FAMILIES:
        target = os.path.join(a.dir, "arch-cli-%s.gguf" % arch)
        draft = os.path.join(a.dir, "arch-cli-%s-draft.gguf" % arch)
        adapter = os.path.join(a.dir, "arch-cli-%s.ss.gguf" % arch)
        shape = ["--n-vocab", "400", "--n-embd", "64", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "96"]
        small = ["--n-vocab", "400", "--n-embd", "32", "--n-head", "2", "--n-head-kv", "1", "--n-ff", "64"]
        run([a.mkmodel, "-o", target, "--quiet", "--arch", arch, "--n-layer", "3", "--seed", "5"] + shape + extra)
        run([a.mkmodel, "-o", draft, "--quiet", "--arch", arch, "--n-layer", "1", "--seed", "6"] + small + extra)
        run([a.mkadapter, "-m", target, "-o", adapter, "--gamma", "3", "--n-msa", "2", "--prune-rank", "4",
             "--lora-rank", "2", "--std", "0.2", "--seed", "3"])
        streams = [["--spec", "stream", "--ss", adapter], ["--spec", "stream", "--ss", adapter, "--prune", "0.05"]]
        info = run([a.cli, "info", target]).stdout
        check("architecture   %s" % arch in info, "%s: info names the architecture" % arch)
        if arch == "gemma2":
            check("sliding_window 5" in info and "attn_softcap   2" in info and "final_softcap  3" in info,
                  "gemma2: info shows the window and the caps")
        for sampling in (["--temp", "0"], ["--temp", "0.9", "--seed", "4"]):
            base = [a.cli, "run", "-m", target, "-p", "the water of the house", "-n", "16", "--ignore-eos"]
            plain = run(base + sampling).stdout
            check(len(plain) > 0, "%s: plain run prints text" % arch)
            for spec in [["--spec", "draft", "-md", draft], ["--spec", "dsi", "-md", draft]] + streams:
                got = run(base + sampling + spec).stdout
                check(got == plain, "%s %s %s: the plain run's text" % (arch, sampling, " ".join(spec)))
            # Vulkan on two families, greedy (each Vulkan run pays the device's start-up;
            # tests/vulkan/test_vk_arch.c and tests/spec/test_spec_arch.c cover every architecture
            # below the CLI)
            if a.vulkan and arch in ("gemma2", "qwen2") and sampling[1] == "0":
                for spec in [[], ["--spec", "draft", "-md", draft]] + streams[:1]:
                    got = run(base + sampling + ["--backend", "vulkan"] + spec).stdout
                    check(got == plain, "%s vulkan %s: the CPU's plain text" % (arch, " ".join(spec)))
        for f in (target, draft, adapter):
            os.remove(f)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
