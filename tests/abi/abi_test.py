#!/usr/bin/python3
"""abi_test.py: the shared library's ABI against tests/abi/edgespec.abi (edgespec.h, "Versions and
the ABI").

Checks: libedgespec.so exports exactly the listed symbols, all es_* (a listed one that disappeared
is an ABI break; a new one must be listed); every ES_API function of edgespec.h is exported; the
soname is libedgespec.so.MAJOR; es_version() of the library, the header's ES_VERSION_* and the
meson project version agree; on LP64 targets every public struct keeps its listed size and
reserved offset. The comparison is first run on a doctored symbol list to show it can fail.

Usage: abi_test.py --lib PATH --layout PATH --abi PATH --header PATH --version X.Y.Z
The exit status is the number of failed checks (0 = pass).
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402


def read_abi(path):
    symbols, sizes = set(), {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0] == "symbol" and len(words) == 2:
                symbols.add(words[1])
            elif words[0] == "size" and len(words) == 4:
                sizes[words[1]] = (words[2], words[3])
            else:
                raise SystemExit(f"{path}: cannot read line {line!r}")
    return symbols, sizes


def exported(lib):
    p = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    check(p.returncode == 0, f"nm -D --defined-only {lib}", p)
    return {w[2] for w in (ln.split() for ln in p.stdout.splitlines()) if len(w) == 3}


def compare(listed, found):
    """What is wrong with the exports found against the listed ones, as messages."""
    errs = [f"exported symbol disappeared: {s} (an ABI break: restore it, or bump ES_VERSION_MAJOR and the soname)"
            for s in sorted(listed - found)]
    errs += [f"exported but not listed in edgespec.abi: {s} (add it: a minor version)" for s in sorted(found - listed)]
    errs += [f"exported symbol without the es_ prefix: {s} (build with -fvisibility=hidden, ES_API on public "
             "functions only)" for s in sorted(found) if not s.startswith("es_")]
    return errs


def main():
    ap = argparse.ArgumentParser()
    for name in ("--lib", "--layout", "--abi", "--header", "--version"):
        ap.add_argument(name, required=True)
    a = ap.parse_args()
    listed, sizes = read_abi(a.abi)
    found = exported(a.lib)

    # the comparison can fail: a symbol taken away, one added, one without the prefix
    some = sorted(listed)[0]
    check(len(compare(listed, found - {some})) >= 1 and "disappeared: " + some in compare(listed, found - {some})[0],
          "a removed export is reported")
    check(any("not listed" in e for e in compare(listed, found | {"es_new_call"})), "a new export is reported")
    check(any("without the es_ prefix" in e for e in compare(listed | {"helper"}, found | {"helper"})),
          "a non-es_ export is reported")

    errs = compare(listed, found)
    for e in errs:
        print(e, file=sys.stderr)
    check(not errs, f"{os.path.basename(a.lib)} exports exactly the {len(listed)} listed es_* symbols")

    with open(a.header) as f:
        declared = set(re.findall(r"^ES_API\b[^(;]*?\b(es_\w+)\s*\(", f.read(), re.M))
    check(declared and declared <= found, f"every ES_API function of edgespec.h is exported "
          f"(missing: {sorted(declared - found)})")
    check(found <= declared, f"every export is declared in edgespec.h (undeclared: {sorted(found - declared)})")

    major = a.version.split(".")[0]
    p = subprocess.run(["readelf", "-d", a.lib], capture_output=True, text=True)
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", p.stdout)
    check(m is not None and m.group(1) == f"libedgespec.so.{major}",
          f"soname libedgespec.so.{major} (got {m.group(1) if m else None})", p)

    p = subprocess.run(testlib.wrap([a.layout]), capture_output=True, text=True)
    check(p.returncode == 0, "abi_layout runs", p)
    lines = p.stdout.splitlines()
    info = {ln.split()[0]: ln.split()[1:] for ln in lines if not ln.startswith("size ")}
    check(info.get("version") == [a.version], f"es_version() is the project version {a.version} "
          f"(got {info.get('version')})")
    check(info.get("header") == [a.version, a.version], f"ES_VERSION_* and ES_VERSION_STRING are {a.version} "
          f"(got {info.get('header')})")
    if info.get("pointer") == ["8"]:
        got = {w[1]: (w[2], w[3]) for w in (ln.split() for ln in lines if ln.startswith("size "))}
        check(set(got) == set(sizes), f"the same structs are listed and measured ({sorted(set(got) ^ set(sizes))})")
        for name in sorted(set(got) & set(sizes)):
            check(got[name] == sizes[name], f"{name}: size and reserved offset {sizes[name]} (got {got[name]}): "
                  "a new field takes reserved words, never adds bytes")
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
