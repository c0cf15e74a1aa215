#!/usr/bin/python3
"""ALSpec end to end: plain decoding, Algorithm 1 on one device and Algorithm 2 over two devices
(`edgespec run --spec alspec --device A,B`), run alternately round by round, each configuration's
decode time (the run's own stats line), process wall time and process CPU time (user + system,
less sensitive to a loaded machine than wall time) as medians, the ratio against plain
decoding on the same backend, and ALSpec's per-layer hit rates.

usage: alspec_pair_wall.py CLI MODEL PROMPT_FILE BACKEND CHUNK CTX N_PREDICT ROUNDS LAMBDA... 
BACKEND: cpu (pair host,host) or vulkan (pairs 0,0 and 0,host). The machine it runs on decides
what the numbers mean: two logical devices on one lavapipe, or two CPU backends, share the same
cores, and no speed-up is expected there."""
import re
import resource
import statistics
import subprocess
import sys
import time


def run(cmd):
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall, r1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    m = re.search(r"decode (?:\d+ tokens in )?([0-9.]+) ms", p.stderr)
    layers = re.search(r"hit rate per layer:(.*)", p.stderr)
    hits = re.search(r"layer hits (\d+) of (\d+)", p.stderr)
    return float(m.group(1)), wall, layers.group(1).strip() if layers else "", hits.groups() if hits else None, p.stdout, cpu


def main():
    cli, model, prompt, backend, chunk, ctx, n, rounds = sys.argv[1:9]
    lambdas = sys.argv[9:] or ["0"]
    base = [cli, "run", "-m", model, "-f", prompt, "-n", n, "-c", ctx, "--ignore-eos", "--temp", "0",
            "--threads", "1", "--backend", backend]
    pairs = ["host,host"] if backend == "cpu" else ["0,0", "0,host"]
    configs = [("plain", base)]
    for lam in lambdas:
        al = base + ["--spec", "alspec", "--chunk", chunk, "--lambda", lam]
        configs.append((f"alspec λ={lam}, one device", al))
        configs += [(f"alspec λ={lam}, --device {d}", al + ["--device", d]) for d in pairs]
    res = {name: [] for name, _ in configs}
    for _ in range(int(rounds)):
        for name, cmd in configs:
            res[name].append(run(cmd))
    plain_text = res["plain"][0][4]
    plain_dec = statistics.median(r[0] for r in res["plain"])
    print("| configuration | decode ms (median) | runs | × plain | process wall s | process CPU s | hits | per layer (%) | text = plain |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |")
    for name, _ in configs:
        rs = res[name]
        dec = statistics.median(r[0] for r in rs)
        wall = statistics.median(r[1] for r in rs)
        cpu = statistics.median(r[5] for r in rs)
        h = rs[0][3]
        hits = f"{h[0]} / {h[1]}" if h else ""
        print(f"| {name} | {dec:.1f} | {' / '.join(f'{r[0]:.0f}' for r in rs)} | {dec / plain_dec:.2f} | {wall:.2f} | {cpu:.2f} | "
              f"{hits} | {rs[0][2]} | {'yes' if rs[0][4] == plain_text else 'no'} |")


if __name__ == "__main__":
    main()
