#!/usr/bin/python3
"""select_tests.py ROOT TESTS.json PACK.txt < `meson introspect build-gpu --tests`: keeps the tests
whose name or suite mentions vulkan, longest timeout first (so that the slow ones start early),
and lists the build files their commands run."""
import json
import sys

root, out_tests, out_pack = sys.argv[1:4]
tests = [t for t in json.load(sys.stdin) if "vulkan" in t["name"] or any("vulkan" in s for s in t["suite"])]
tests.sort(key=lambda t: -(t["timeout"] or 30))
json.dump(tests, open(out_tests, "w"))
prefix = root + "/build-gpu/"
files = {c[len(root) + 1:] for t in tests for c in t["cmd"] if c.startswith(prefix) and "/../" not in c}
open(out_pack, "w").write("".join(f + "\n" for f in sorted(files)))
