"""testlib.py: what the Python tests share.

check() counts a check and reports it when it fails (with a subprocess's command, exit status and
the tails of its output when given one); finish() prints the count and returns the exit status;
ROOT and SHARED are the source tree and ../shared as meson's test environment gives them (else
found from this file); tools() puts tools/<name> folders on sys.path for the tests that import the
Python tools; vulkan_env() is the environment for running the CLI on Vulkan; wrap() prefixes a
command line that runs a built program with the cross build's exe wrapper (qemu-user for aarch64).

Python standard library only. A test imports it by path, so it runs by hand as under meson:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    import testlib  # noqa: E402
"""
import os
import shlex
import sys

ROOT = os.environ.get("ES_SOURCE_ROOT") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SHARED = os.environ.get("ES_SHARED_DIR") or os.path.join(ROOT, "..", "shared")

checks = 0
failures = 0

# In a cross build meson sets MESON_EXE_WRAPPER (the cross file's exe_wrapper, e.g. qemu-aarch64)
# for tests that take a built program as an argument; the programs they launch run through it.
EXE_WRAPPER = shlex.split(os.environ.get("MESON_EXE_WRAPPER", ""))


def wrap(cmd):
    """cmd (a built program and its arguments) as the host runs it: through the exe wrapper, if any."""
    return EXE_WRAPPER + list(cmd)


def check(cond, what, proc=None):
    """Counts a check; on failure prints what, and proc's command, status and output tails."""
    global checks, failures
    checks += 1
    if cond:
        return True
    failures += 1
    print(f"FAIL: {what}", file=sys.stderr)
    if proc is not None:
        print(f"  command: {' '.join(str(x) for x in proc.args)}\n  exit status: {proc.returncode}", file=sys.stderr)
        print(f"  stdout: {proc.stdout[-2000:]!r}\n  stderr: {proc.stderr[-2000:]!r}", file=sys.stderr)
    return False


def finish():
    """Prints the count; the exit status is the number of failures (at most 100), 1 when none ran."""
    print(f"{checks} checks, {failures} failed")
    if checks == 0:
        print("no checks ran", file=sys.stderr)
        return 1
    return min(failures, 100)


def tools(*names):
    """Makes the Python modules of tools/<name> importable."""
    for name in names:
        sys.path.insert(0, os.path.join(ROOT, "tools", name))


def vulkan_env():
    """os.environ for a run of the CLI on Vulkan. Under the sanitizer CI build the Vulkan loader
    unloads Mesa's lavapipe with the CLI's last VkInstance, leaving the driver's one-time
    allocations unreachable and unsymbolisable ("<unknown module>"), which LeakSanitizer would
    report against the CLI and no suppression can name: leak checking goes off for these runs
    only. ASan's memory checks and UBSan stay on; the C tests, which pin the driver, cover the
    library's own Vulkan leaks."""
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    return env
