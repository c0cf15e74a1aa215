#!/bin/sh
# prepare.sh: everything the GPU checklist run (run.sh) needs, made on this machine, since the
# device machine has no package registry and no compiler for our shaders. Run from the repository
# root; it writes only ignored paths (build-gpu/, gpu/, .gl/; add /gpu/ and /.gl/ to
# .git/info/exclude once). Then call the device tool with
#   command: bash tools/device/run.sh     carry: [".gl", "gpu"]     timeout_s: 560
# The working tree travels too (about 48 MB with models/), so gpu/ must stay under ~14 MB.
set -e
[ -d build-gpu ] || meson setup build-gpu --buildtype=release
ninja -C build-gpu
mkdir -p gpu .gl
# the meson tests that touch Vulkan, and the files they and the benchmarks run
meson introspect build-gpu --tests | /usr/bin/python3 tools/device/select_tests.py "$PWD" gpu/tests.json gpu/pack.txt
{ ls -d build-gpu/lib/libedgespec.so*; ls build-gpu/tests/spec/spec-tiny*.gguf
  printf '%s\n' build-gpu/tools/edgespec/edgespec build-gpu/tools/bench/edgespec-bench \
    build-gpu/tools/mkmodel/edgespec-mkmodel build-gpu/tests/bench/bench_spec_call build-gpu/tests/bench/bench_alspec_pair \
    build-gpu/tests/train/train_c
} | grep -v '\.p$' >> gpu/pack.txt
sort -u -o gpu/pack.txt gpu/pack.txt
# the test binaries link the library statically: one large dictionary shares its shaders
tar cf - -T gpu/pack.txt | xz -T2 -6 --lzma2=dict=192MiB > gpu/build.tar.xz
# ../shared does not travel: the vocabularies the tests read
rm -rf gpu/shared && mkdir -p gpu/shared && cp -r ../shared/vocab-tests gpu/shared/
# the Vulkan loader, libglvnd (the NVIDIA ICD lives in libGLX_nvidia and needs it), and the KJV
# that long_context_test.py takes its prompts from
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
if ! ls .gl/bible-kjv-text_*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/amd64/partial && apt-get $o update >/dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 bible-kjv bible-kjv-text)
fi
du -sh gpu .gl
