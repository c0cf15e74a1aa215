#!/usr/bin/python3
"""noloader_test.py: libedgespec on a system without a Vulkan loader (issue 18, item 1).

The library opens the loader at run time (lib/vulkan/loader.c); nothing links libvulkan. Under an
LD_PRELOAD shim that makes every dlopen of libvulkan fail (no_vulkan_shim.c), the CPU backend
must work unchanged and asking for Vulkan must fail with a clear message, not a crash.

Usage: noloader_test.py --cli PATH --lib PATH --shim PATH --model PATH [--cpu-test PATH]
       [--fake-loader PATH] [--vulkan]
The exit status is the number of failed checks (0 = pass).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402


def shim_env(shim):
    env = dict(os.environ)
    env["LD_PRELOAD"] = os.path.abspath(shim)
    # The sanitizer build: the shim comes before the ASan runtime in the library list, which ASan
    # refuses by default; the shim only forwards dlopen, so the order is harmless.
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    return env


def run(cmd, env=None, timeout=120, host=False):
    """cmd: a built program (through the exe wrapper in a cross build), or with host a host tool."""
    p = subprocess.run(cmd if host else testlib.wrap(cmd), capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    p.stdout = p.stdout.decode("utf-8", "replace")
    p.stderr = p.stderr.decode("utf-8", "replace")
    check(p.returncode >= 0, f"no signal (got signal {-p.returncode})", p)
    return p


def needed(path):
    p = run(["readelf", "-d", path], host=True)
    check(p.returncode == 0, f"readelf -d {path}", p)
    return [ln for ln in p.stdout.splitlines() if "(NEEDED)" in ln]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cpu-test")
    ap.add_argument("--fake-loader", help="a stand-in libvulkan that lacks most entry points")
    ap.add_argument("--vulkan", action="store_true", help="the build has the Vulkan backend")
    a = ap.parse_args()
    env = shim_env(a.shim)

    for path in (a.lib, a.cli):
        deps = needed(path)
        check(deps and not any("vulkan" in d for d in deps),
              f"{os.path.basename(path)}: no NEEDED libvulkan (NEEDED: {'; '.join(deps)})")

    # edgespec devices: an answer, not a failure
    d = run([a.cli, "devices"], env=env)
    check(d.returncode == 0, "devices without a loader exits 0", d)
    # (a build without the Vulkan backend says that instead)
    why = "no Vulkan loader found" if a.vulkan else "no Vulkan backend"
    check(why in d.stdout and ("libvulkan" in d.stdout or not a.vulkan), f"devices says {why!r}", d)
    if a.vulkan:
        # the same command without the shim finds lavapipe: the shim is what took the loader away
        dv = run([a.cli, "devices"], env=testlib.vulkan_env())
        check(dv.returncode == 0 and "no Vulkan loader" not in dv.stdout and ": " in dv.stdout,
              "devices with the loader lists a device", dv)

    # a loader that lacks entry points is refused whole, naming the first missing one
    if a.vulkan and a.fake_loader:
        fake = dict(env, ES_SHIM_VULKAN=os.path.abspath(a.fake_loader))
        f = run([a.cli, "devices"], env=fake)
        check(f.returncode == 0 and "the Vulkan loader libvulkan.so.1 lacks vkAllocateCommandBuffers" in f.stdout,
              "devices with a loader lacking entry points names the first missing one", f)
        fr = run([a.cli, "run", "-m", a.model, "-p", "x", "-n", "2", "--backend", "vulkan"], env=fake)
        check(fr.returncode == 1 and "lacks vkAllocateCommandBuffers" in fr.stderr,
              "--backend vulkan with that loader fails with the same message", fr)

    # asking for Vulkan: a clear error through the library's message, status not a signal
    base = [a.cli, "run", "-m", a.model, "-p", "The quick brown fox", "-n", "16", "--ignore-eos", "--temp", "0"]
    vk = run(base + ["--backend", "vulkan"], env=env)
    check(vk.returncode == 1 and why in vk.stderr, f"--backend vulkan fails with {why!r}", vk)

    # the CPU backend: the same greedy text as with the loader present
    cpu_shim = run(base + ["--backend", "cpu"], env=env)
    cpu = run(base + ["--backend", "cpu"])
    check(cpu_shim.returncode == 0 and cpu.returncode == 0 and cpu_shim.stdout == cpu.stdout
          and len(cpu.stdout) > 0, "CPU generation without a loader: the same text", cpu_shim)

    # a representative CPU test binary (batch and thread invariance, KV compaction, error paths)
    if a.cpu_test:
        t = run([a.cpu_test], env=env, timeout=300)
        check(t.returncode == 0, f"{os.path.basename(a.cpu_test)} passes without a loader", t)
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
