#!/usr/bin/python3
"""run_tests.py TESTS.json JOBS BUDGET_S: runs the selected meson tests on the device machine from
the carried binaries, JOBS at a time, each under its own timeout and all under one budget; one
line per test, the output of those that did not pass, and a summary. Tests that meson would run
with /usr/bin/python3 run with this interpreter (the device's python3 has numpy and torch)."""
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

tests = json.load(open(sys.argv[1]))
jobs, budget = int(sys.argv[2]), float(sys.argv[3])
t_end = time.time() + budget


def run(t):
    cmd = [sys.executable if c == "/usr/bin/python3" else c for c in t["cmd"]]
    env = dict(os.environ)
    env.update(t["env"])
    env["PYTHON"] = sys.executable
    left = t_end - time.time()
    if left < 5:
        return t["name"], "NOT RUN", 0.0, ""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=t["workdir"] or env["ES_BUILD_ROOT"], env=env, capture_output=True, text=True,
                           timeout=min(t["timeout"] or 300, left))
        status = "OK" if p.returncode == 0 else "SKIP" if p.returncode == 77 else "FAIL rc=%d" % p.returncode
        out = p.stdout[-3000:] + p.stderr[-3000:]
    except subprocess.TimeoutExpired as e:
        status, out = "CUT OFF", str(e.stdout or "")[-2000:] + str(e.stderr or "")[-2000:]
    return t["name"], status, time.time() - t0, out


with ThreadPoolExecutor(jobs) as ex:
    results = list(ex.map(run, tests))
for name, status, dt, _ in results:
    print("%-10s %7.1fs %s" % (status, dt, name))
bad = [r for r in results if r[1] != "OK"]
for name, status, _, out in bad:
    print("\n===== %s: %s\n%s" % (name, status, out))
print("\nsummary: %d ok, %d not ok of %d" % (len(results) - len(bad), len(bad), len(results)))
