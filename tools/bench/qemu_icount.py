#!/usr/bin/python3
"""qemu_icount.py: guest instructions per kernel call of tests/bench/bench_cpu_kern under
qemu-user, per instruction-set level and weight type: the emulator's timings follow how it
translates each instruction (floating-point conversions and fused multiply-adds go through slow
helpers), so an instruction count says more about a real core than qemu's time does, and neither
is a device timing.

qemu-user-static cannot load TCG plugins, so the count comes from its logs: `-d in_asm` gives each
translated block's instructions, `-d exec,nochain` every block executed. Two runs differ only in
bench_cpu_kern's repetitions (1 and 3, four calls each): their difference is eight calls.
Usage: qemu_icount.py BENCH_CPU_KERN [--levels generic,neon] [--types f32,f16,q8_0,q4_0]
       [--n-in 512] [--n-out 64] [--batch 6]   (JSON lines on stdout)"""
import argparse
import json
import os
import re
import subprocess
import tempfile

TRACE = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
INSN = re.compile(r"^0x([0-9a-f]+):\s")


def count(cmd, log):
    """Guest instructions executed by cmd, per-block sizes from its in_asm log."""
    subprocess.run(["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", "-d", "in_asm,exec,nochain", "-D", log]
                   + cmd, check=True, stdout=subprocess.DEVNULL)
    size, total, start, n = {}, 0, None, 0
    with open(log, errors="replace") as f:
        for line in f:
            m = INSN.match(line)
            if m:
                if start is None:
                    start = int(m.group(1), 16)
                n += 1
                continue
            if start is not None:  # a block's listing ended
                size[start] = n
                start, n = None, 0
            t = TRACE.match(line)
            if t:
                total += size.get(int(t.group(1), 16), 0)
    os.unlink(log)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--levels", default="generic,neon")
    ap.add_argument("--types", default="f32,f16,bf16,q8_0,q4_0")
    ap.add_argument("--n-in", default="512")
    ap.add_argument("--n-out", default="64")
    ap.add_argument("--batch", default="6")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "qemu.log")
        for typ in a.types.split(","):
            for n_tok in ("1", a.batch):
                per = {}
                for level in a.levels.split(","):
                    c = [count([a.bench, str(r), a.n_in, a.n_out, a.batch, level, typ, n_tok], log) for r in (1, 3)]
                    per[level] = (c[1] - c[0]) / 8
                    print(json.dumps({"bench": "qemu_icount", "level": level, "type": typ, "n_in": int(a.n_in),
                                      "n_out": int(a.n_out), "n_tok": int(n_tok), "insns_per_call": per[level]}),
                          flush=True)
                levels = a.levels.split(",")
                for level in levels[1:]:
                    print(json.dumps({"bench": "qemu_icount_ratio", "type": typ, "n_tok": int(n_tok), "level": level,
                                      "insns_portable_over_level": round(per[levels[0]] / per[level], 2)}),
                          flush=True)


if __name__ == "__main__":
    main()
