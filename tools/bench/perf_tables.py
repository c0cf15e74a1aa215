#!/usr/bin/env python3
"""perf_tables.py: runs edgespec-bench over a matrix of models and backends and prints the
docs/perf.md tables (markdown) from the JSON it collected.

  /usr/bin/python3 tools/bench/perf_tables.py --bench build/tools/bench/edgespec-bench \
      --out /tmp/bench --models DIR --sizes 24m,134m,853m --types q8_0,f16,f32 --backends cpu,vulkan

Models are DIR/<size>-<type>.gguf (tools/mkmodel presets). Each run's JSON is kept in
--out/<size>-<type>-<backend>.json; runs whose JSON exists are not repeated (delete to redo),
so an interrupted sweep resumes. --big SIZE,... names the sizes benchmarked with the short
settings (--big-pp, --big-tg, --big-reps) because a full pp512/tg128 sweep of them takes too long.
Only the table step (--tables-only) runs without a build."""
import argparse
import json
import os
import subprocess
import sys
import time


def run_one(a, size, wtype, backend, path):
    model = os.path.join(a.models, f"{size}-{wtype}.gguf")
    big = size in a.big.split(",")
    pp, tg, reps = (a.big_pp, a.big_tg, a.big_reps) if big else (a.pp, a.tg, a.reps)
    cmd = [a.bench, "-m", model, "-b", backend, "-t", str(a.threads), "-r", str(reps), "-p", pp, "-n",
           str(tg), "-c", "2048"]
    if a.profile:
        cmd.append("--profile")
    t0 = time.time()
    print(f"{time.strftime('%H:%M:%S')} {' '.join(cmd)}", file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"perf_tables: {size}-{wtype} on {backend} failed (exit {p.returncode}):\n{p.stderr}",
              file=sys.stderr)
        return False
    d = json.loads(p.stdout)
    d["command"] = " ".join(cmd)
    d["wall_s"] = round(time.time() - t0, 1)
    with open(path + ".tmp", "w") as f:
        json.dump(d, f, indent=1)
    os.replace(path + ".tmp", path)
    return True


def test(d, prefix):
    for t in d["tests"]:
        if t["name"].startswith(prefix):
            return t
    return None


def cell(t):
    return f"{t['tok_s_median']:.1f}" if t else "–"


def table(a, backend):
    rows = []
    for size in a.sizes.split(","):
        for wtype in a.types.split(","):
            path = os.path.join(a.out, f"{size}-{wtype}-{backend}.json")
            if not os.path.exists(path):
                continue
            d = json.load(open(path))
            pps = [t for t in d["tests"] if t["name"].startswith("pp")]
            tg = test(d, "tg")
            dec = d["decode"]
            bw = d["machine"]["read_gbs"]
            st = d.get("backend_stats", {})
            mem = st.get("device_peak_bytes") or d.get("peak_rss_bytes", 0)
            rows.append(
                f"| {size} {wtype} | {d['n_params'] / 1e6:.0f}M | {d['weight_bytes'] / 2**20:.0f} MiB | "
                + " | ".join(f"{t['name']} {cell(t)}" for t in pps)
                + f" | {tg['name'] if tg else 'tg'} {cell(tg)} | {dec['weight_gbs']:.1f} / {bw:.1f} GB/s "
                f"({100 * dec['weight_gbs'] / bw:.0f}%) | {st.get('dispatches_per_forward', 0):.0f} | "
                f"{mem / 2**20:.0f} MiB | {d['reps']} | {d['machine']['loadavg_before'][0]:.2f} |")
    if not rows:
        return ""
    head = ("| model | params | weights | prefill tokens/s | | decode tokens/s | decode weight bandwidth / "
            "machine read | dispatches per forward | peak memory | reps | load before |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    return f"**{backend}**\n\n{head}\n" + "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="build/tools/bench/edgespec-bench")
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--sizes", default="24m,134m,853m")
    ap.add_argument("--types", default="q8_0,f16,f32")
    ap.add_argument("--backends", default="cpu,vulkan")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pp", default="64,512")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--big", default="853m")
    ap.add_argument("--big-pp", default="64")
    ap.add_argument("--big-tg", type=int, default=32)
    ap.add_argument("--big-reps", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--tables-only", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ok = True
    if not a.tables_only:
        for size in a.sizes.split(","):
            for wtype in a.types.split(","):
                for backend in a.backends.split(","):
                    path = os.path.join(a.out, f"{size}-{wtype}-{backend}.json")
                    if not os.path.exists(path):
                        ok = run_one(a, size, wtype, backend, path) and ok
    for backend in a.backends.split(","):
        print(table(a, backend))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
