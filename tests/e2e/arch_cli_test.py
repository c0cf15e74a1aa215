"""arch_cli_test.py: the CLI on GGUF files of the architectures besides llama (docs/formats.md,
"Architectures"), written by edgespec-mkmodel --arch: `edgespec info` names the architecture and
shows gemma2's window and caps; draft-model speculation (--spec draft, a drafter file of the same
family) and DSI print the plain run's text, greedy and sampled; with --vulkan, gemma2 on Vulkan
(plain and draft) prints the CPU's text.

usage: arch_cli_test.py --cli EDGESPEC --mkmodel EDGESPEC_MKMODEL --dir DIR [--vulkan]
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
    ("phi3", ["--type", "q8_0"]),
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
    ap.add_argument("--dir", required=True)
    ap.add_argument("--vulkan", action="store_true")
    a = ap.parse_args()
    for arch, extra in FAMILIES:
        target = os.path.join(a.dir, "arch-cli-%s.gguf" % arch)
        draft = os.path.join(a.dir, "arch-cli-%s-draft.gguf" % arch)
        shape = ["--n-vocab", "400", "--n-embd", "64", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "96"]
        run([a.mkmodel, "-o", target, "--quiet", "--arch", arch, "--n-layer", "3", "--seed", "5"] + shape + extra)
        run([a.mkmodel, "-o", draft, "--quiet", "--arch", arch, "--n-layer", "1", "--seed", "5"] + shape + extra)
        info = run([a.cli, "info", target]).stdout
        check("architecture   %s" % arch in info, "%s: info names the architecture" % arch)
        if arch == "gemma2":
            check("sliding_window 5" in info and "attn_softcap   2" in info and "final_softcap  3" in info,
                  "gemma2: info shows the window and the caps")
        for sampling in (["--temp", "0"], ["--temp", "0.9", "--seed", "4"]):
            base = [a.cli, "run", "-m", target, "-p", "the water of the house", "-n", "16", "--ignore-eos"]
            plain = run(base + sampling).stdout
            check(len(plain) > 0, "%s: plain run prints text" % arch)
            for spec in ("draft", "dsi"):
                got = run(base + sampling + ["--spec", spec, "-md", draft]).stdout
                check(got == plain, "%s %s --spec %s: the plain run's text" % (arch, sampling, spec))
            # Vulkan on one family, greedy (each Vulkan run pays the device's start-up;
            # tests/vulkan/test_vk_arch.c covers every architecture below the CLI)
            if a.vulkan and arch == "gemma2" and sampling[1] == "0":
                for spec in ([], ["--spec", "draft", "-md", draft]):
                    got = run(base + sampling + ["--backend", "vulkan"] + spec).stdout
                    check(got == plain, "%s vulkan %s: the CPU's plain text" % (arch, spec))
        os.remove(target)
        os.remove(draft)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
